/* What a device may still allocate (dcp_device_memory_budget): the heap, the driver's budget
 * (VK_EXT_memory_budget), and for CPU devices, whose device memory is the process's own memory,
 * the limits the operating system puts on the process (address space, cgroup, free memory). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "vk/internal.h"

/* The driver's own working memory on a CPU device (compiled shaders, threads, command buffers):
 * kept out of what dcp-vk may allocate. */
#define CPU_DRIVER_RESERVE (128ull << 20)

static void lower(dcp_memory_budget *b, uint64_t v, const char *source)
{
    if (v < b->available) {
        b->available = v;
        snprintf(b->source, sizeof b->source, "%s", source);
    }
}

static uint64_t minus_reserve(uint64_t v) { return v > CPU_DRIVER_RESERVE ? v - CPU_DRIVER_RESERVE : 0; }

/* Reads the first unsigned number of a file, or returns false ("max" in cgroup files too). */
static bool read_u64(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f) return false;
    unsigned long long v;
    bool ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (ok) *out = v;
    return ok;
}

/* Bytes of address space the process maps now (/proc/self/statm, first field in pages). */
static bool vm_size(uint64_t *out)
{
    uint64_t pages;
    if (!read_u64("/proc/self/statm", &pages)) return false;
    *out = pages * (uint64_t)sysconf(_SC_PAGESIZE);
    return true;
}

static bool mem_available(uint64_t *out)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return false;
    char line[256];
    bool ok = false;
    while (!ok && fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            *out = kb * 1024;
            ok = true;
        }
    }
    fclose(f);
    return ok;
}

/* The cgroup memory limit less usage: v2 (memory.max, memory.current of the "0::" line of
 * /proc/self/cgroup) or v1 (the memory controller's limit_in_bytes, usage_in_bytes). */
static bool cgroup_free(uint64_t *out)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return false;
    char line[1024], v2[1024] = "", v1[1024] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, "0::", 3) == 0) snprintf(v2, sizeof v2, "%s", line + 3);
        const char *m = strstr(line, ":memory:");
        if (m) snprintf(v1, sizeof v1, "%s", m + 8);
    }
    fclose(f);
    char path[1200];
    uint64_t limit, usage;
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", v2);
    if (v2[0] && read_u64(path, &limit)) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", v2);
        if (read_u64(path, &usage)) {
            *out = limit > usage ? limit - usage : 0;
            return true;
        }
    }
    snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", v1);
    if (v1[0] && read_u64(path, &limit) && limit < (1ull << 60)) {
        snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", v1);
        if (read_u64(path, &usage)) {
            *out = limit > usage ? limit - usage : 0;
            return true;
        }
    }
    return false;
}

void dcp_device_memory_budget(const dcp_device *dev, dcp_memory_budget *b)
{
    memset(b, 0, sizeof *b);
    /* The heap of the memory type dcp_buffer_create uses for device-local buffers. */
    uint32_t heap = 0;
    for (uint32_t i = 0; i < dev->mem_props.memoryTypeCount; i++)
        if (dev->mem_props.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) {
            heap = dev->mem_props.memoryTypes[i].heapIndex;
            break;
        }
    b->heap_size = dev->mem_props.memoryHeaps[heap].size;
    /* The heap less what this context's devices on the same physical device hold. */
    uint64_t held = 0;
    const dcp_context *ctx = dev->ctx;
    for (int i = 0; ctx && i < ctx->device_count; i++)
        if (ctx->devices[i] && ctx->devices[i]->info.physical_index == dev->info.physical_index)
            held += ctx->devices[i]->allocated;
    b->available = b->heap_size > held ? b->heap_size - held : 0;
    snprintf(b->source, sizeof b->source, "the device's memory heap");
    if (dev->info.has_memory_budget && ctx->vk.vkGetPhysicalDeviceMemoryProperties2) {
        VkPhysicalDeviceMemoryBudgetPropertiesEXT mb = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
        VkPhysicalDeviceMemoryProperties2 mp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2,
                                                .pNext = &mb};
        ctx->vk.vkGetPhysicalDeviceMemoryProperties2(dev->phys, &mp);
        if (mb.heapBudget[heap])
            lower(b, mb.heapBudget[heap] > mb.heapUsage[heap] ? mb.heapBudget[heap] - mb.heapUsage[heap] : 0,
                  "the driver's memory budget (VK_EXT_memory_budget)");
    }
    if (strcmp(dev->info.type, "cpu") != 0) return;
    /* A CPU device allocates the process's own memory. */
    struct rlimit rl;
    uint64_t used, v;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && vm_size(&used))
        lower(b, minus_reserve(rl.rlim_cur > used ? rl.rlim_cur - used : 0), "the address-space limit (ulimit -v)");
    if (cgroup_free(&v)) lower(b, minus_reserve(v), "the cgroup's memory limit (memory.max)");
    if (mem_available(&v)) lower(b, minus_reserve(v), "the memory the system has available (MemAvailable)");
}
