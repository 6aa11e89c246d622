/* The Mesa runtime race behind dcp-vk's exit-time segfaults, on the bare Vulkan API (no dcp-vk
 * code): a timeline semaphore signalled by one submission and waited on by the next is destroyed
 * as soon as the second submission's fence has been waited. That is valid usage (every batch that
 * refers to the semaphore has completed), yet on lavapipe (Mesa 22.3 and 25.0) the queue's submit
 * thread installs the signalled time point and releases the waited one *after* the driver signalled
 * the fence, so it locks a mutex inside the freed semaphore: a segfault in pthread_mutex_lock on
 * that thread in most runs of a few thousand iterations, and under valgrind "Invalid read/write ...
 * inside a block free'd by vkDestroySemaphore". Right after the fence, vkGetSemaphoreCounterValue
 * may still report the old value for the same reason.
 *   repro_timeline_destroy [iterations] [drain]
 * drain = 1: vkQueueWaitIdle before each destroy (what dcp_sem_destroy does), which retires every
 * earlier batch on the submit thread first: no crash. CTest runs that form (test_timeline_drain);
 * drain = 0 (the default) is the reproduction. With DCP_VK_VALIDATION set (not 0) the Khronos
 * validation layer runs and any message fails the run. docs/design.md, "Teardown and lifetimes". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

static unsigned messages;

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT types,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data, void *user)
{
    (void)types;
    (void)user;
    messages++;
    fprintf(stderr, "validation %s: %s\n", severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning",
            data && data->pMessage ? data->pMessage : "");
    return VK_FALSE;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        VkResult r_ = (call);                                                                      \
        if (r_ != VK_SUCCESS) {                                                                    \
            fprintf(stderr, "repro_timeline_destroy: %s failed: %d\n", #call, (int)r_);            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    const int iters = argc > 1 ? atoi(argv[1]) : 2000;
    const int drain = argc > 2 ? atoi(argv[2]) : 0;
    const char *v = getenv("DCP_VK_VALIDATION");
    const int validate = v && *v && strcmp(v, "0") != 0;
    const char *layer = "VK_LAYER_KHRONOS_validation", *ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkDebugUtilsMessengerCreateInfoEXT dmi = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
        .pfnUserCallback = on_message};
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pNext = validate ? &dmi : NULL,
                                .pApplicationInfo = &app, .enabledLayerCount = validate ? 1 : 0,
                                .ppEnabledLayerNames = &layer, .enabledExtensionCount = validate ? 1 : 0,
                                .ppEnabledExtensionNames = &ext};
    VkInstance inst;
    CHECK(vkCreateInstance(&ici, NULL, &inst));
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    PFN_vkCreateDebugUtilsMessengerEXT create_messenger =
        (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(inst, "vkCreateDebugUtilsMessengerEXT");
    PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger =
        (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(inst, "vkDestroyDebugUtilsMessengerEXT");
    if (validate) {
        if (!create_messenger || !destroy_messenger) {
            fprintf(stderr, "repro_timeline_destroy: the validation layer's messenger is missing\n");
            return 1;
        }
        CHECK(create_messenger(inst, &dmi, NULL, &messenger));
    }
    uint32_t n = 1;
    VkPhysicalDevice phys;
    VkResult er = vkEnumeratePhysicalDevices(inst, &n, &phys);
    if ((er != VK_SUCCESS && er != VK_INCOMPLETE) || n == 0) {
        fprintf(stderr, "repro_timeline_destroy: no Vulkan device\n");
        return 1;
    }
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = 0,
                                   .queueCount = 1, .pQueuePriorities = &prio};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .timelineSemaphore = VK_TRUE};
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f12,
                              .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci};
    VkDevice dev;
    CHECK(vkCreateDevice(phys, &dci, NULL, &dev));
    VkQueue queue;
    vkGetDeviceQueue(dev, 0, 0, &queue);
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = 0};
    VkCommandPool pool;
    CHECK(vkCreateCommandPool(dev, &cpi, NULL, &pool));
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    VkCommandBuffer cb;
    CHECK(vkAllocateCommandBuffers(dev, &ai, &cb));
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    CHECK(vkBeginCommandBuffer(cb, &bi));
    CHECK(vkEndCommandBuffer(cb));
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence;
    CHECK(vkCreateFence(dev, &fi, NULL, &fence));
    for (int it = 0; it < iters; it++) {
        VkSemaphoreTypeCreateInfo ti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                        .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE};
        VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &ti};
        VkSemaphore sem;
        CHECK(vkCreateSemaphore(dev, &sci, NULL, &sem));
        const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
        for (uint64_t k = 0; k < 2; k++) { /* the first signals 1; the second waits for 1, signals 2 */
            const uint64_t wait = k, signal = k + 1;
            VkTimelineSemaphoreSubmitInfo tsi = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                                 .waitSemaphoreValueCount = k ? 1 : 0, .pWaitSemaphoreValues = &wait,
                                                 .signalSemaphoreValueCount = 1, .pSignalSemaphoreValues = &signal};
            VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = &tsi,
                               .waitSemaphoreCount = k ? 1 : 0, .pWaitSemaphores = &sem, .pWaitDstStageMask = &stage,
                               .commandBufferCount = 1, .pCommandBuffers = &cb, .signalSemaphoreCount = 1,
                               .pSignalSemaphores = &sem};
            CHECK(vkResetFences(dev, 1, &fence));
            CHECK(vkQueueSubmit(queue, 1, &si, fence));
            CHECK(vkWaitForFences(dev, 1, &fence, VK_TRUE, UINT64_MAX));
        }
        if (drain) CHECK(vkQueueWaitIdle(queue));
        vkDestroySemaphore(dev, sem, NULL); /* both batches have completed: valid usage */
    }
    CHECK(vkDeviceWaitIdle(dev));
    vkDestroyFence(dev, fence, NULL);
    vkDestroyCommandPool(dev, pool, NULL);
    vkDestroyDevice(dev, NULL);
    if (messenger) destroy_messenger(inst, messenger, NULL);
    vkDestroyInstance(inst, NULL);
    printf("repro_timeline_destroy: %d iterations%s, %u validation messages\n", iters,
           drain ? " (queue drained before each destroy)" : "", messages);
    return messages ? 1 : 0;
}
