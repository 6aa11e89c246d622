/* dcp-vk-bench: memory counted before allocating (attn, attn --dcp): what a configuration needs on
 * each device against what the device may still allocate, and the longest --ctx that fits. */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"

static const char *human(char *buf, size_t cap, uint64_t v)
{
    if (v >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", v / 1073741824.0);
    else if (v >= (1ull << 20)) snprintf(buf, cap, "%.1f MiB", v / 1048576.0);
    else snprintf(buf, cap, "%.1f KiB", v / 1024.0);
    return buf;
}

/* Whether need fits: every buffer within its device's range, every physical device's ranks (all
 * CPU devices, and the host copies, together: host memory) within its budget. why: the first
 * failure, or "". */
static bool fits(const dcp_bench_need *need, int n, char *why, size_t cap)
{
    why[0] = 0;
    if (need->status != DCP_OK) {
        snprintf(why, cap, "%s", need->error);
        return false;
    }
    char a[32], b[32], c[32];
    for (int i = 0; i < n; i++) {
        const dcp_device_info *info = dcp_device_get_info(need->devs[i]);
        if (need->largest[i] > info->max_storage_buffer_range) {
            snprintf(why, cap, "on device %d (%s) %s would be %s, more than its largest storage buffer "
                               "(maxStorageBufferRange) of %s", i, info->name, need->largest_what,
                     human(a, sizeof a, need->largest[i]), human(b, sizeof b, info->max_storage_buffer_range));
            return false;
        }
    }
    for (int i = 0; i < n; i++) {
        const dcp_device_info *x = dcp_device_get_info(need->devs[i]);
        const bool cpu = strcmp(x->type, "cpu") == 0;
        bool first = true;
        for (int j = 0; j < i && first; j++) {
            const dcp_device_info *y = dcp_device_get_info(need->devs[j]);
            if (y->physical_index == x->physical_index || (cpu && !strcmp(y->type, "cpu"))) first = false;
        }
        if (!first) continue;
        uint64_t sum = cpu ? need->host : 0;
        for (int j = i; j < n; j++) {
            const dcp_device_info *y = dcp_device_get_info(need->devs[j]);
            if (y->physical_index == x->physical_index || (cpu && !strcmp(y->type, "cpu"))) sum += need->device[j];
        }
        dcp_memory_budget bud;
        dcp_device_memory_budget(need->devs[i], &bud);
        if (sum > bud.available) {
            snprintf(why, cap, "it needs %s on %s device %d (%s)%s (KV pools, attention plans and buffers%s); %s %s "
                               "available (%s)", human(a, sizeof a, sum), cpu ? "CPU (host memory)" : "physical",
                     x->physical_index, x->name, cpu && need->host ? ", host copies included" : "",
                     need->host ? ", plus the host copies that fill them" : "", human(c, sizeof c, bud.available),
                     bud.available == 1 ? "is" : "are", bud.source);
            (void)b;
            return false;
        }
    }
    return true;
}

int dcp_bench_check_memory(const char *prog, uint32_t ctx, dcp_bench_need_fn fn, void *user, int quiet)
{
    dcp_bench_need need;
    char why[1024];
    fn(user, ctx, &need);
    if (fits(&need, need.count, why, sizeof why)) return DCP_EXIT_OK;
    /* The longest context that fits (the needs grow with --ctx). */
    uint32_t lo = 0, hi = ctx;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        dcp_bench_need t;
        char w[1024];
        fn(user, mid, &t);
        if (fits(&t, t.count, w, sizeof w)) lo = mid;
        else hi = mid;
    }
    if (!quiet)
        fprintf(stderr, "%s: --ctx %u: %s. The longest --ctx that fits is %u tokens\n", prog, ctx, why, lo);
    return DCP_EXIT_USAGE;
}
