/* Vulkan loader, the volk way: find vkGetInstanceProcAddr in the system loader (or take it from a
 * system volk), then load instance functions per instance and device functions per device into
 * tables owned by those objects. No global device-level function pointers. */
#include <dlfcn.h>
#include <stddef.h>

#include "vk/internal.h"

#if defined(DCP_HAVE_VOLK)
#include <volk.h>
#endif

dcp_status dcp_vk_loader_open(dcp_vk_instance_table *t, void **lib_handle)
{
    *lib_handle = NULL;
#if defined(DCP_HAVE_VOLK)
    if (volkInitialize() != VK_SUCCESS)
        return dcp_fail(DCP_ERR_NO_DEVICE, "volkInitialize: no Vulkan loader found");
    t->vkGetInstanceProcAddr = vkGetInstanceProcAddr;
#else
    static const char *const names[] = {"libvulkan.so.1", "libvulkan.so"};
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return dcp_fail(DCP_ERR_NO_DEVICE,
                        "cannot load the Vulkan loader (libvulkan.so.1): %s; install libvulkan1 "
                        "and a driver (e.g. mesa-vulkan-drivers)",
                        dlerror());
    union {
        void *obj;
        PFN_vkGetInstanceProcAddr fn;
    } sym;
    sym.obj = dlsym(lib, "vkGetInstanceProcAddr");
    if (!sym.obj) {
        dlclose(lib);
        return dcp_fail(DCP_ERR_NO_DEVICE, "libvulkan.so.1 has no vkGetInstanceProcAddr");
    }
    t->vkGetInstanceProcAddr = sym.fn;
    *lib_handle = lib;
#endif
#define DCP_VK_GLOBAL(name) t->name = (PFN_##name)t->vkGetInstanceProcAddr(NULL, #name);
#include "vk/functions.def"
    if (!t->vkCreateInstance)
        return dcp_fail(DCP_ERR_NO_DEVICE, "Vulkan loader lacks vkCreateInstance");
    return DCP_OK;
}

void dcp_vk_loader_close(void *lib_handle)
{
    if (lib_handle) dlclose(lib_handle);
}

void dcp_vk_load_instance(dcp_vk_instance_table *t, VkInstance instance)
{
#define DCP_VK_INSTANCE(name) t->name = (PFN_##name)t->vkGetInstanceProcAddr(instance, #name);
#include "vk/functions.def"
}

void dcp_vk_load_device(const dcp_vk_instance_table *it, VkDevice device, dcp_vk_device_table *dt)
{
#define DCP_VK_DEVICE(name) dt->name = (PFN_##name)it->vkGetDeviceProcAddr(device, #name);
#include "vk/functions.def"
}

const char *dcp_vk_result_string(VkResult r)
{
    switch (r) {
#define C(x) case x: return #x;
        C(VK_SUCCESS) C(VK_NOT_READY) C(VK_TIMEOUT) C(VK_INCOMPLETE)
        C(VK_ERROR_OUT_OF_HOST_MEMORY) C(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        C(VK_ERROR_INITIALIZATION_FAILED) C(VK_ERROR_DEVICE_LOST) C(VK_ERROR_MEMORY_MAP_FAILED)
        C(VK_ERROR_LAYER_NOT_PRESENT) C(VK_ERROR_EXTENSION_NOT_PRESENT)
        C(VK_ERROR_FEATURE_NOT_PRESENT) C(VK_ERROR_INCOMPATIBLE_DRIVER) C(VK_ERROR_TOO_MANY_OBJECTS)
        C(VK_ERROR_FORMAT_NOT_SUPPORTED) C(VK_ERROR_FRAGMENTED_POOL) C(VK_ERROR_OUT_OF_POOL_MEMORY)
        C(VK_ERROR_INVALID_EXTERNAL_HANDLE) C(VK_ERROR_UNKNOWN)
#undef C
    default: return "VkResult(other)";
    }
}

dcp_status dcp_vk_check(VkResult r, const dcp_device *dev, const char *call)
{
    dcp_status st = DCP_ERR_VULKAN;
    if (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY)
        st = DCP_ERR_OUT_OF_MEMORY;
    if (dev)
        return dcp_fail(st, "device %d (%s): %s failed: %s", dev->info.logical_index,
                        dev->info.name, call, dcp_vk_result_string(r));
    return dcp_fail(st, "%s failed: %s", call, dcp_vk_result_string(r));
}
