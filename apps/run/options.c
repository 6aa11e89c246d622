/* dcp-vk-run option parsing, --help, and validation of the parallel configuration. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/run.h"

/* Where option and configuration messages go: stderr, or nowhere on the processes of an MPI launch
 * other than process 0 (every process finds the same fault; one says it). */
static FILE *diag_stream;

static FILE *diag(void) { return diag_stream ? diag_stream : stderr; }

void run_quiet(int quiet)
{
    if (quiet && !diag_stream) diag_stream = fopen("/dev/null", "w");
    if (!quiet && diag_stream) {
        fclose(diag_stream);
        diag_stream = NULL;
    }
}

static int parse_u64(const char *prog, const char *name, const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!*v || *end || errno || v[0] == '-' || x < min || x > max) {
        fprintf(diag(), "%s: option %s: '%s' is not an integer in [%llu, %llu]\n", prog, name, v,
                (unsigned long long)min, (unsigned long long)max);
        return DCP_EXIT_USAGE;
    }
    *out = x;
    return DCP_EXIT_OK;
}

static int parse_u32(const char *prog, const char *name, const char *v, uint32_t min, uint32_t max, uint32_t *out)
{
    uint64_t x;
    int r = parse_u64(prog, name, v, min, max, &x);
    if (!r) *out = (uint32_t)x;
    return r;
}

static int parse_f32(const char *prog, const char *name, const char *v, float min, float max, float *out)
{
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (!*v || *end || errno || !(x >= min && x <= max)) {
        fprintf(diag(), "%s: option %s: '%s' is not a number in [%g, %g]\n", prog, name, v, min, max);
        return DCP_EXIT_USAGE;
    }
    *out = x;
    return DCP_EXIT_OK;
}

void run_print_help(const char *prog)
{
    printf("usage: %s [-m MODEL.gguf] [-p PROMPT] [-n N] [options]\n"
           "\n"
           "Generates text from a GGUF llama-family model with dcp-vk (Vulkan). The text streams to\n"
           "stdout; diagnostics and the summary go to stderr. Exit codes: 0 ok, 1 runtime failure\n"
           "(device, unreadable model), 2 usage or configuration error.\n"
           "\n"
           "  -m, --model FILE                     GGUF model (default: none, a small llama model the\n"
           "                                       project generates deterministically is used)\n"
           "  -p, --prompt TEXT                    prompt (default \"Once upon a time\"; BOS is added\n"
           "                                       when the vocabulary asks for it)\n"
           "  -n, --n-predict N                    tokens to generate (default 64); stops at EOS\n"
           "      --temp T                         sampling temperature, 0 = greedy (default 0.8)\n"
           "      --top-k K                        keep the K most likely tokens, 0 = all (default 40)\n"
           "      --top-p P                        nucleus sampling mass in (0, 1] (default 0.95)\n"
           "      --seed S                         sampler seed (default 0)\n"
           "  -c, --ctx-size N                     context tokens, 0 = the model's, at most 4096\n"
           "                                       (default 0)\n"
           "      --tensor-parallel-size T         TP ranks (default 1)\n"
           "      --decode-context-parallel-size D DCP ranks per group, divides T (default 1)\n"
           "      --dcp-comm-backend a2a|ag_rs     DCP exchange pattern (default a2a)\n"
           "      --cp-kv-cache-interleave-size I  tokens per rank in turn, divides the block size\n"
           "                                       (default 1)\n"
           "      --dcp-q-replicate                each rank computes its group's queries itself\n"
           "                                       instead of gathering them (default off)\n"
           "      --block-size B                   tokens per KV page (default 16)\n"
           "      --kv-dtype f16|f32               KV cache element type (default f16)\n"
           "      --prefill-chunk N                prompt tokens per prefill step (default 128)\n"
           "      --devices LIST                   Vulkan devices, e.g. 0,0,0,0 (default\n"
           "                                       $DCP_VK_DEVICES, else every device once)\n"
           "      --json                           print the summary as one JSON object on stdout\n"
           "                                       (the text is then not streamed; it is in \"text\")\n"
           "  -h, --help                           this help\n"
           "\n"
           "TP and DCP run in one process: rank r on the r-th device of --devices (without a list,\n"
           "on logical devices of device 0). Prompt chunks merge the DCP partial states with an\n"
           "all-gather whatever the backend; decode steps use the chosen backend.\n"
           "\n"
           "Under `mpiexec -n P` the TP ranks spread over the processes, T / P each (e.g. -n T: one\n"
           "each); process k holds ranks [k T/P, (k+1) T/P) on entries [k T/P, (k+1) T/P) of the\n"
           "device list, or all on its one entry. The TP all-reduces run over MPI_COMM_WORLD and a\n"
           "DCP group spread over processes over an MPI sub-communicator. Process 0 prints the text\n"
           "and the summary; every process checks the configuration and exits with the same code.\n",
           prog);
}

int run_parse(int argc, char **argv, run_options *o)
{
    const char *prog = argv[0];
    *o = (run_options){.model = NULL, .prompt = "Once upon a time", .n_predict = 64, .temp = 0.8f, .top_k = 40,
                       .top_p = 0.95f, .seed = 0, .ctx = 0, .tp = 1, .dcp = 1, .backend = "a2a", .interleave = 1,
                       .q_replicate = false, .block_size = 16, .kv_dtype = "f16", .prefill_chunk = 128,
                       .devices = NULL, .json = false, .help = false};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define IS(s) (strcmp(a, s) == 0)
#define VALUE()                                                                                    \
    (i + 1 < argc ? argv[++i]                                                                      \
                  : (fprintf(diag(), "%s: option %s needs a value (see --help)\n", prog, a), (char *)NULL))
        const char *v;
        int r = 0;
        if (IS("-h") || IS("--help")) {
            o->help = true;
        } else if (IS("--json")) {
            o->json = true;
        } else if (IS("--dcp-q-replicate")) {
            o->q_replicate = true;
        } else {
            static const char *const with_value[] = {
                "-m", "--model", "-p", "--prompt", "-n", "--n-predict", "--temp", "--top-k", "--top-p", "--seed",
                "-c", "--ctx-size", "--tensor-parallel-size", "-tp", "--decode-context-parallel-size", "-dcp",
                "--dcp-comm-backend", "--cp-kv-cache-interleave-size", "--block-size", "--kv-dtype",
                "--prefill-chunk", "--devices", NULL};
            int known = 0;
            for (int k = 0; with_value[k]; k++) known |= IS(with_value[k]);
            if (!known) {
                fprintf(diag(), "%s: unknown option '%s' (see --help)\n", prog, a);
                return DCP_EXIT_USAGE;
            }
            if (!(v = VALUE())) return DCP_EXIT_USAGE;
            if (IS("-m") || IS("--model")) o->model = v;
            else if (IS("-p") || IS("--prompt")) o->prompt = v;
            else if (IS("-n") || IS("--n-predict")) r = parse_u32(prog, a, v, 0, 1u << 24, &o->n_predict);
            else if (IS("--temp")) r = parse_f32(prog, a, v, 0.0f, 100.0f, &o->temp);
            else if (IS("--top-k")) r = parse_u32(prog, a, v, 0, UINT32_MAX, &o->top_k);
            else if (IS("--top-p")) {
                r = parse_f32(prog, a, v, 0.0f, 1.0f, &o->top_p);
                if (!r && o->top_p <= 0.0f) {
                    fprintf(diag(), "%s: option --top-p: %s must be in (0, 1]\n", prog, v);
                    r = DCP_EXIT_USAGE;
                }
            } else if (IS("--seed")) r = parse_u64(prog, a, v, 0, UINT64_MAX, &o->seed);
            else if (IS("-c") || IS("--ctx-size")) r = parse_u32(prog, a, v, 0, 1u << 24, &o->ctx);
            else if (IS("--tensor-parallel-size") || IS("-tp")) r = parse_u32(prog, a, v, 1, 1024, &o->tp);
            else if (IS("--decode-context-parallel-size") || IS("-dcp")) r = parse_u32(prog, a, v, 1, 1024, &o->dcp);
            else if (IS("--dcp-comm-backend")) {
                o->backend = v;
                if (strcmp(v, "a2a") && strcmp(v, "ag_rs")) {
                    fprintf(diag(), "%s: option --dcp-comm-backend: '%s' is not one of a2a, ag_rs\n", prog, v);
                    r = DCP_EXIT_USAGE;
                }
            } else if (IS("--cp-kv-cache-interleave-size")) r = parse_u32(prog, a, v, 1, 1u << 20, &o->interleave);
            else if (IS("--block-size")) r = parse_u32(prog, a, v, 1, 1u << 16, &o->block_size);
            else if (IS("--kv-dtype")) {
                o->kv_dtype = v;
                if (strcmp(v, "f16") && strcmp(v, "f32")) {
                    fprintf(diag(), "%s: option --kv-dtype: '%s' is not one of f16, f32\n", prog, v);
                    r = DCP_EXIT_USAGE;
                }
            } else if (IS("--prefill-chunk")) r = parse_u32(prog, a, v, 1, 4096, &o->prefill_chunk);
            else if (IS("--devices")) o->devices = v;
            else {
                fprintf(diag(), "%s: unknown option '%s' (see --help)\n", prog, a);
                return DCP_EXIT_USAGE;
            }
        }
        if (r) return r;
#undef IS
#undef VALUE
    }
    return DCP_EXIT_OK;
}

/* vLLM's rules for TP alone: the query heads split evenly, the KV heads split or replicate. */
static int tp_ok(uint32_t t, uint32_t hq, uint32_t hkv) { return hq % t == 0 && (hkv % t == 0 || t % hkv == 0); }

/* docs/design.md section 7: T % N == 0 and, for N > 1, N <= T / Hkv (so T > Hkv) and (Hq / Hkv) % N == 0. */
static int dcp_ok(uint32_t t, uint32_t n, uint32_t hq, uint32_t hkv)
{
    if (t % n) return 0;
    if (n == 1) return 1;
    return t / hkv >= n && (hq / hkv) % n == 0;
}

static void print_allowed(uint32_t hq, uint32_t hkv)
{
    fprintf(diag(), "  this model (%u query heads, %u KV heads) allows:", hq, hkv);
    for (uint32_t t = 1; t <= hq; t++) {
        if (!tp_ok(t, hq, hkv)) continue;
        fprintf(diag(), " TP %u (DCP", t);
        for (uint32_t n = 1; n <= t; n++)
            if (dcp_ok(t, n, hq, hkv)) fprintf(diag(), " %u", n);
        fprintf(diag(), ");");
    }
    fprintf(diag(), "\n");
}

int run_validate(const run_options *o, uint32_t hq, uint32_t hkv, const char *prog)
{
    const uint32_t t = o->tp, n = o->dcp;
    if (o->interleave > o->block_size || o->block_size % o->interleave) {
        fprintf(diag(),
                "%s: --cp-kv-cache-interleave-size %u must divide --block-size %u (and be at most it)\n",
                prog, o->interleave, o->block_size);
        return DCP_EXIT_USAGE;
    }
    if (!tp_ok(t, hq, hkv)) {
        fprintf(diag(), "%s: --tensor-parallel-size %u: the %u query heads must divide by it and the %u KV "
                        "heads must divide by it or divide it\n", prog, t, hq, hkv);
        print_allowed(hq, hkv);
        return DCP_EXIT_USAGE;
    }
    if (t % n) {
        fprintf(diag(), "%s: --decode-context-parallel-size %u must divide --tensor-parallel-size %u "
                        "(DCP groups are runs of TP ranks)\n", prog, n, t);
        print_allowed(hq, hkv);
        return DCP_EXIT_USAGE;
    }
    if (n > 1 && t / hkv < n) {
        fprintf(diag(), "%s: --decode-context-parallel-size %u exceeds TP / KV heads = %u / %u = %u: the ranks "
                        "of a DCP group must hold the same KV heads\n", prog, n, t, hkv, t / hkv);
        print_allowed(hq, hkv);
        return DCP_EXIT_USAGE;
    }
    if (n > 1 && (hq / hkv) % n) {
        fprintf(diag(), "%s: --decode-context-parallel-size %u must divide the %u query heads per KV head\n", prog,
                n, hq / hkv);
        print_allowed(hq, hkv);
        return DCP_EXIT_USAGE;
    }
    return DCP_EXIT_OK;
}
