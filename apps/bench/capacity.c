/* dcp-vk-bench capacity: the longest context that fits in a KV budget per device, with the KV
 * duplicated as under plain tensor parallelism and with DCP, counted with the placement rule
 * (dcp_kv_max_length: pages per rank, interleaved shards), so that any accepted input is answered
 * at once; tests/test_capacity.c checks the count against the KV cache's own page allocator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "dcpvk/cp.h"
#include "dcpvk/kv.h"

typedef struct cap_opts {
    uint32_t budget_mib, layers, kv_heads, head_dim, tp, dcp, page_size, interleave;
    dcp_dtype dtype;
    int json;
    /* MLA: one latent "head" of kv_lora + rope values per token and layer, no V. */
    int mla;
    uint32_t kv_lora, rope;
    /* The budget as a device's memory less its share of the weights (0: --kv-budget-mib). */
    uint32_t device_gib, weights_gib;
} cap_opts;

/* The counts for one KV dtype. */
typedef struct cap_count {
    uint32_t heads;                 /* KV heads per device */
    uint64_t page_all;              /* bytes of one page id over all layers */
    uint64_t pages;                 /* pages per device in the budget */
    uint64_t per_token;             /* KV bytes per token per device (plain TP) */
    uint64_t tp_ctx, dcp_ctx;       /* longest context, plain TP and DCP */
} cap_count;

/* Counts for dtype; false when the budget holds no page or more than the page ids allow. */
static int cap_counts(const cap_opts *o, dcp_dtype dtype, cap_count *c)
{
    memset(c, 0, sizeof *c);
    c->heads = o->kv_heads > o->tp ? o->kv_heads / o->tp : 1;
    /* One page id serves every layer (shared block tables): a page costs layers x page bytes. */
    const uint64_t row = dcp_kv_row_bytes(dtype, o->head_dim);
    const uint64_t kv_parts = o->mla ? 1 : 2; /* K and V, or the latent entry alone */
    c->page_all = kv_parts * c->heads * o->page_size * row * o->layers;
    c->pages = ((uint64_t)o->budget_mib << 20) / c->page_all;
    if (c->pages == 0 || c->pages > 0xfffffffull / o->page_size) return 0;
    c->tp_ctx = dcp_kv_max_length(c->pages, o->page_size, 1, 1);
    c->dcp_ctx = dcp_kv_max_length(c->pages, o->page_size, o->dcp, o->interleave);
    c->per_token = (uint64_t)o->layers * kv_parts * c->heads * row;
    return 1;
}

static void usage(FILE *f)
{
    dcp_cli_print_text(f,
            "usage: dcp-vk-bench capacity [options]\n"
            "  --kv-budget-mib M  KV memory per device, MiB (default 1024)\n"
            "  --layers L         attention layers (default 32)\n"
            "  --kv-heads H       KV heads of the model (default 2)\n"
            "  --head-dim D       head dim (default 128)\n"
            "  --tp T             tensor-parallel size (default 8)\n"
            "  --dcp N            DCP size, divides T, at most T / H (default 4)\n"
            "  --page-size P      tokens per KV page (default 16)\n"
            "  --interleave I     DCP interleave size, divides P (default 1)\n"
            "  --kv-dtype T       f16, f32 or q8_0 (default f16)\n"
            "  --device-gib G     instead of --kv-budget-mib: G GiB per device less the weights' share\n"
            "  --weights-gib W    with --device-gib: the model's weights, GiB in all (each device holds W / T)\n"
            "  --json             one JSON object instead of text\n"
            "MLA (DeepSeek's latent cache: one head, K only, kv_lora + rope values per token and layer):\n"
            "  --mla              count the latent cache; --kv-heads and --head-dim do not apply\n"
            "  --kv-lora N        latent width (default 512)\n"
            "  --rope N           rope part (default 64): 576 values per entry for DeepSeek-V2/V3\n"
            "Each device holds max(1, H / T) KV heads per layer (duplicated when T > H; MLA's one latent\n"
            "head T times). Under plain TP every device holds the whole sequence; with DCP N the sequence\n"
            "is sharded over N devices. A table then compares f16 and q8_0 KV (blocks of 32 values with\n"
            "an f16 scale: 34 bytes per 32 values), each with plain TP and with DCP.\n"
            "Example, DeepSeek-V3 (61 layers) at TP 8 on 80 GiB devices with FP8 weights (625 GiB):\n"
            "  dcp-vk-bench capacity --mla --layers 61 --tp 8 --dcp 8 --device-gib 80 --weights-gib 625\n");
}

int dcp_bench_capacity(int argc, char **argv)
{
    static const char *const dtypes[] = {"f32", "f16", "q8_0", NULL};
    const char *p = "dcp-vk-bench capacity";
    cap_opts o = {.budget_mib = 1024, .layers = 32, .kv_heads = 2, .head_dim = 128, .tp = 8, .dcp = 4, .page_size = 16,
                  .interleave = 1, .dtype = DCP_DTYPE_F16, .kv_lora = 512, .rope = 64};
    int budget_given = 0, kv_shape_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int ok = 1;
#define U32(name, field, lo, hi)                                                                   \
    else if (strcmp(a, name) == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, name, v, lo, hi, &o.field)
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return DCP_EXIT_OK;
        }
        U32("--kv-budget-mib", budget_mib, 1, 1u << 24), budget_given = 1;
        U32("--layers", layers, 1, 4096);
        U32("--kv-heads", kv_heads, 1, 1024), kv_shape_given = 1;
        U32("--head-dim", head_dim, 4, 1024), kv_shape_given = 1;
        U32("--kv-lora", kv_lora, 4, 4096);
        U32("--rope", rope, 0, 1024);
        U32("--device-gib", device_gib, 1, 1u << 16);
        U32("--weights-gib", weights_gib, 0, 1u << 24);
        U32("--tp", tp, 1, 1024);
        U32("--dcp", dcp, 1, 1024);
        U32("--page-size", page_size, 1, 4096);
        U32("--interleave", interleave, 1, 4096);
        else if (strcmp(a, "--kv-dtype") == 0) {
            int k = (v = dcp_cli_value(p, argc, argv, &i)) ? dcp_cli_choice(p, a, v, dtypes) : -1;
            ok = k >= 0;
            if (ok) o.dtype = (dcp_dtype)k;
        } else if (strcmp(a, "--json") == 0) o.json = 1;
        else if (strcmp(a, "--mla") == 0) o.mla = 1;
        else {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", p, a);
            ok = 0;
        }
#undef U32
        if (!ok) return DCP_EXIT_USAGE;
    }
    if (o.mla && kv_shape_given) {
        fprintf(stderr, "%s: --kv-heads and --head-dim do not apply with --mla (one latent head of --kv-lora + "
                        "--rope values)\n", p);
        return DCP_EXIT_USAGE;
    }
    if (o.device_gib && budget_given) {
        fprintf(stderr, "%s: --device-gib and --kv-budget-mib exclude each other\n", p);
        return DCP_EXIT_USAGE;
    }
    if (o.weights_gib && !o.device_gib) {
        fprintf(stderr, "%s: --weights-gib needs --device-gib\n", p);
        return DCP_EXIT_USAGE;
    }
    if (o.device_gib) {
        /* MiB per device: the device less its 1/T of the weights. */
        const uint64_t dev = (uint64_t)o.device_gib << 10, share = ((uint64_t)o.weights_gib << 10) / o.tp;
        if (share >= dev) {
            fprintf(stderr, "%s: the weights' share per device (%llu MiB of %u GiB / TP %u) leaves nothing of the "
                            "device's %u GiB for the KV cache\n", p, (unsigned long long)share, o.weights_gib, o.tp,
                    o.device_gib);
            return DCP_EXIT_USAGE;
        }
        o.budget_mib = (uint32_t)(dev - share);
    }
    if (o.mla) {
        o.kv_heads = 1;
        o.head_dim = o.kv_lora + o.rope;
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
    if (o.dtype == DCP_DTYPE_Q8_0 && o.head_dim % 32) {
        fprintf(stderr, "%s: --kv-dtype q8_0 quantizes blocks of 32 along the head dim; --head-dim %u is not a "
                        "multiple of 32\n", p, o.head_dim);
        return DCP_EXIT_USAGE;
    }
    if (o.kv_heads > o.tp && o.kv_heads % o.tp) {
        fprintf(stderr, "%s: --kv-heads %u is not a multiple of --tp %u\n", p, o.kv_heads, o.tp);
        return DCP_EXIT_USAGE;
    }
    cap_count c;
    if (!cap_counts(&o, o.dtype, &c)) {
        fprintf(stderr, "%s: the budget holds %llu pages of %llu bytes (need 1 .. %u)\n", p,
                (unsigned long long)c.pages, (unsigned long long)c.page_all, 0xfffffffu / o.page_size);
        return DCP_EXIT_USAGE;
    }
    /* The comparison of KV dtypes: f16 and q8_0 (q8_0 only for head dims of whole blocks of 32). */
    static const dcp_dtype cmp_types[2] = {DCP_DTYPE_F16, DCP_DTYPE_Q8_0};
    cap_count cmp[2];
    int cmp_ok[2];
    for (int k = 0; k < 2; k++)
        cmp_ok[k] = (cmp_types[k] != DCP_DTYPE_Q8_0 || o.head_dim % 32 == 0) && cap_counts(&o, cmp_types[k], &cmp[k]);
    if (o.json) {
        printf("{\"bench\": \"capacity\", \"mla\": %s, \"kv_budget_mib\": %u, \"layers\": %u, \"kv_heads\": %u, \"head_dim\": %u, "
               "\"tp\": %u, \"dcp\": %u, \"page_size\": %u, \"interleave\": %u, \"kv_dtype\": \"%s\", "
               "\"kv_heads_per_device\": %u, \"pages_per_device\": %llu, \"kv_bytes_per_token_per_device\": %llu, "
               "\"max_ctx_tp\": %llu, \"max_ctx_dcp\": %llu, \"gain\": %.4f, \"by_kv_dtype\": [",
               o.mla ? "true" : "false", o.budget_mib, o.layers, o.kv_heads, o.head_dim, o.tp, o.dcp, o.page_size,
               o.interleave, dcp_dtype_name(o.dtype), c.heads, (unsigned long long)c.pages,
               (unsigned long long)c.per_token, (unsigned long long)c.tp_ctx, (unsigned long long)c.dcp_ctx,
               c.tp_ctx ? (double)c.dcp_ctx / (double)c.tp_ctx : 0.0);
        const char *sep = "";
        for (int k = 0; k < 2; k++) {
            if (!cmp_ok[k]) continue;
            printf("%s{\"kv_dtype\": \"%s\", \"kv_bytes_per_token_per_device\": %llu, \"max_ctx_tp\": %llu, "
                   "\"max_ctx_dcp\": %llu}",
                   sep, dcp_dtype_name(cmp_types[k]), (unsigned long long)cmp[k].per_token,
                   (unsigned long long)cmp[k].tp_ctx, (unsigned long long)cmp[k].dcp_ctx);
            sep = ", ";
        }
        printf("]}\n");
    } else {
        if (o.device_gib)
            printf("capacity: %u GiB per device less %u GiB of weights / TP %u = %u MiB of KV per device\n",
                   o.device_gib, o.weights_gib, o.tp, o.budget_mib);
        if (o.mla)
            printf("capacity: %u MiB of KV per device, %u layers, MLA latent cache of %u + %u = %u values per entry "
                   "(K only), %s, page %u\n", o.budget_mib, o.layers, o.kv_lora, o.rope, o.head_dim,
                   dcp_dtype_name(o.dtype), o.page_size);
        else
            printf("capacity: %u MiB of KV per device, %u layers, %u KV heads (%u per device) x %u dims, %s, page %u\n",
                   o.budget_mib, o.layers, o.kv_heads, c.heads, o.head_dim, dcp_dtype_name(o.dtype), o.page_size);
        printf("  pages per device: %llu (%llu bytes each over all layers; %llu KV bytes per token per device)\n",
               (unsigned long long)c.pages, (unsigned long long)c.page_all, (unsigned long long)c.per_token);
        printf("  plain TP %u (KV duplicated %ux): longest context %llu tokens\n", o.tp,
               o.tp > o.kv_heads ? o.tp / o.kv_heads : 1, (unsigned long long)c.tp_ctx);
        printf("  TP %u with DCP %u (interleave %u): longest context %llu tokens (%.2fx)\n", o.tp, o.dcp, o.interleave,
               (unsigned long long)c.dcp_ctx, c.tp_ctx ? (double)c.dcp_ctx / (double)c.tp_ctx : 0.0);
        printf("  KV dtype   bytes/token/device   plain TP %-10u   TP %u + DCP %u\n", o.tp, o.tp, o.dcp);
        for (int k = 0; k < 2; k++) {
            if (!cmp_ok[k]) {
                if (o.head_dim % 32 && cmp_types[k] == DCP_DTYPE_Q8_0)
                    printf("  %-8s   (head dim %u is not a multiple of 32)\n", dcp_dtype_name(cmp_types[k]), o.head_dim);
                else
                    printf("  %-8s   (the budget's pages are outside 1 .. %u)\n", dcp_dtype_name(cmp_types[k]),
                           0xfffffffu / o.page_size);
                continue;
            }
            printf("  %-8s   %18llu   %10llu tokens   %10llu tokens (%.2fx f16 plain TP)\n", dcp_dtype_name(cmp_types[k]),
                   (unsigned long long)cmp[k].per_token, (unsigned long long)cmp[k].tp_ctx,
                   (unsigned long long)cmp[k].dcp_ctx,
                   cmp_ok[0] && cmp[0].tp_ctx ? (double)cmp[k].dcp_ctx / (double)cmp[0].tp_ctx : 0.0);
        }
    }
    return DCP_EXIT_OK;
}
