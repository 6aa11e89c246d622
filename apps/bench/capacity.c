/* dcp-vk-bench capacity: the longest context that fits in a KV budget per device, with the KV
 * duplicated as under plain tensor parallelism and with DCP, counted with the placement rule
 * (dcp_kv_max_length: pages per rank, interleaved shards), so that any accepted input is answered
 * at once; tests/test_capacity.c checks the count against the KV cache's own page allocator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "common/cli.h"
#include "dcpvk/cp.h"
#include "dcpvk/kv.h"

typedef struct cap_opts {
    uint32_t budget_mib, layers, kv_heads, head_dim, tp, dcp, page_size, interleave;
    dcp_dtype dtype;
    int json;
} cap_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dcp-vk-bench capacity [options]\n"
            "  --kv-budget-mib M  KV memory per device, MiB (default 1024)\n"
            "  --layers L         attention layers (default 32)\n"
            "  --kv-heads H       KV heads of the model (default 2)\n"
            "  --head-dim D       head dim (default 128)\n"
            "  --tp T             tensor-parallel size (default 8)\n"
            "  --dcp N            DCP size, divides T, at most T / H (default 4)\n"
            "  --page-size P      tokens per KV page (default 16)\n"
            "  --interleave I     DCP interleave size, divides P (default 1)\n"
            "  --kv-dtype T       f16 or f32 (default f16)\n"
            "  --json             one JSON object instead of text\n"
            "Each device holds max(1, H / T) KV heads per layer (duplicated when T > H). Under plain TP\n"
            "every device holds the whole sequence; with DCP N the sequence is sharded over N devices.\n");
}

int dcp_bench_capacity(int argc, char **argv)
{
    static const char *const dtypes[] = {"f32", "f16", NULL};
    const char *p = "dcp-vk-bench capacity";
    cap_opts o = {1024, 32, 2, 128, 8, 4, 16, 1, DCP_DTYPE_F16, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int ok = 1;
#define U32(name, field, lo, hi)                                                                   \
    else if (strcmp(a, name) == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, name, v, lo, hi, &o.field)
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return DCP_EXIT_OK;
        }
        U32("--kv-budget-mib", budget_mib, 1, 1u << 24);
        U32("--layers", layers, 1, 4096);
        U32("--kv-heads", kv_heads, 1, 1024);
        U32("--head-dim", head_dim, 4, 1024);
        U32("--tp", tp, 1, 1024);
        U32("--dcp", dcp, 1, 1024);
        U32("--page-size", page_size, 1, 4096);
        U32("--interleave", interleave, 1, 4096);
        else if (strcmp(a, "--kv-dtype") == 0) {
            int k = (v = dcp_cli_value(p, argc, argv, &i)) ? dcp_cli_choice(p, a, v, dtypes) : -1;
            ok = k >= 0;
            if (ok) o.dtype = (dcp_dtype)k;
        } else if (strcmp(a, "--json") == 0) o.json = 1;
        else {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", p, a);
            ok = 0;
        }
#undef U32
        if (!ok) return DCP_EXIT_USAGE;
    }
    if (o.tp % o.dcp) {
        fprintf(stderr, "%s: --tp %u is not a multiple of --dcp %u\n", p, o.tp, o.dcp);
        return DCP_EXIT_USAGE;
    }
    if (o.dcp > 1 && o.dcp > (o.tp >= o.kv_heads ? o.tp / o.kv_heads : 0)) {
        fprintf(stderr, "%s: --dcp %u exceeds --tp / --kv-heads = %u / %u (a DCP group must hold the same KV "
                        "heads)\n", p, o.dcp, o.tp, o.kv_heads);
        return DCP_EXIT_USAGE;
    }
    dcp_status st = dcp_kv_placement_check(o.dcp, o.interleave, o.page_size);
    if (st != DCP_OK) {
        dcp_cli_report(p, "placement", st);
        return DCP_EXIT_USAGE;
    }
    uint32_t heads = o.kv_heads > o.tp ? o.kv_heads / o.tp : 1;
    if (o.kv_heads > o.tp && o.kv_heads % o.tp) {
        fprintf(stderr, "%s: --kv-heads %u is not a multiple of --tp %u\n", p, o.kv_heads, o.tp);
        return DCP_EXIT_USAGE;
    }
    /* One page id serves every layer (shared block tables): a page costs layers x page bytes. */
    uint64_t layer_page = 2ull * heads * o.page_size * o.head_dim * dcp_dtype_size(o.dtype);
    uint64_t page_all = layer_page * o.layers;
    uint64_t pages64 = ((uint64_t)o.budget_mib << 20) / page_all;
    if (pages64 == 0 || pages64 > 0xfffffffull / o.page_size) {
        fprintf(stderr, "%s: the budget holds %llu pages of %llu bytes (need 1 .. %u)\n", p,
                (unsigned long long)pages64, (unsigned long long)page_all, 0xfffffffu / o.page_size);
        return DCP_EXIT_USAGE;
    }
    uint32_t pages = (uint32_t)pages64;
    uint64_t tp_ctx = dcp_kv_max_length(pages, o.page_size, 1, 1);
    uint64_t dcp_ctx = dcp_kv_max_length(pages, o.page_size, o.dcp, o.interleave);
    uint64_t per_token = (uint64_t)o.layers * 2 * heads * o.head_dim * dcp_dtype_size(o.dtype);
    if (o.json) {
        printf("{\"bench\": \"capacity\", \"kv_budget_mib\": %u, \"layers\": %u, \"kv_heads\": %u, \"head_dim\": %u, "
               "\"tp\": %u, \"dcp\": %u, \"page_size\": %u, \"interleave\": %u, \"kv_dtype\": \"%s\", "
               "\"kv_heads_per_device\": %u, \"pages_per_device\": %u, \"kv_bytes_per_token_per_device\": %llu, "
               "\"max_ctx_tp\": %llu, \"max_ctx_dcp\": %llu, \"gain\": %.4f}\n",
               o.budget_mib, o.layers, o.kv_heads, o.head_dim, o.tp, o.dcp, o.page_size, o.interleave,
               dcp_dtype_name(o.dtype), heads, pages, (unsigned long long)per_token, (unsigned long long)tp_ctx,
               (unsigned long long)dcp_ctx, tp_ctx ? (double)dcp_ctx / (double)tp_ctx : 0.0);
    } else {
        printf("capacity: %u MiB of KV per device, %u layers, %u KV heads (%u per device) x %u dims, %s, page %u\n",
               o.budget_mib, o.layers, o.kv_heads, heads, o.head_dim, dcp_dtype_name(o.dtype), o.page_size);
        printf("  pages per device: %u (%llu bytes each over all layers; %llu KV bytes per token per device)\n", pages,
               (unsigned long long)page_all, (unsigned long long)per_token);
        printf("  plain TP %u (KV duplicated %ux): longest context %llu tokens\n", o.tp,
               o.tp > o.kv_heads ? o.tp / o.kv_heads : 1, (unsigned long long)tp_ctx);
        printf("  TP %u with DCP %u (interleave %u): longest context %llu tokens (%.2fx)\n", o.tp, o.dcp, o.interleave,
               (unsigned long long)dcp_ctx, tp_ctx ? (double)dcp_ctx / (double)tp_ctx : 0.0);
    }
    return DCP_EXIT_OK;
}
