/* dcp-vk-run option parsing, --help, and validation of the parallel configuration. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/dtype.h"
#include "cli/run.h"

static FILE *diag(void) { return dcp_cli_diag(); }

void run_quiet(int quiet) { dcp_cli_quiet(quiet != 0); }

/* Option values through the strict parsers of cli/cli.c: 0 or DCP_EXIT_USAGE. */
static int parse_u32(const char *prog, const char *name, const char *v, uint32_t min, uint32_t max, uint32_t *out)
{
    return dcp_cli_u32(prog, name, v, min, max, out) ? DCP_EXIT_OK : DCP_EXIT_USAGE;
}

static int parse_u64(const char *prog, const char *name, const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
    return dcp_cli_u64(prog, name, v, min, max, out) ? DCP_EXIT_OK : DCP_EXIT_USAGE;
}

static int parse_f32(const char *prog, const char *name, const char *v, float min, float max, float *out)
{
    return dcp_cli_f32(prog, name, v, min, max, out) ? DCP_EXIT_OK : DCP_EXIT_USAGE;
}

void run_print_help(const char *prog)
{
    dcp_cli_print_text(stdout, "usage: %s [-m MODEL.gguf] [-p PROMPT] [-n N] [options]\n"
           "\n"
           "Generates text from a GGUF llama-family model with dcp-vk (Vulkan). The text streams to\n"
           "stdout; diagnostics and the summary go to stderr. Exit codes: 0 ok, 1 runtime failure\n"
           "(device, unreadable model or prompt file, a failed write of the output), 2 usage or\n"
           "configuration error (also: more memory than the devices have, MPI processes given\n"
           "different options), 130 / 143 stopped by SIGINT / SIGTERM. The first SIGINT or SIGTERM\n"
           "stops at the next step and prints what was generated and the summary (JSON:\n"
           "\"interrupted\": true); a second one ends the process at once.\n"
           "\n"
           "  -m, --model FILE                     GGUF model (default: none, a small llama model the\n"
           "                                       project generates deterministically is used)\n"
           "  -p, --prompt TEXT                    prompt (default \"Once upon a time\"; BOS is added\n"
           "                                       when the vocabulary asks for it)\n"
           "  -f, --file FILE                      read the prompt from FILE (- : standard input; under\n"
           "                                       mpiexec process 0 reads it and sends it to the\n"
           "                                       others); a prompt with NUL bytes is refused\n"
           "  -n, --n-predict N                    tokens to generate (default 64); stops at EOS; 0:\n"
           "                                       none (the prompt is not run)\n"
           "      --temp T                         sampling temperature, 0 = greedy (default 0.8)\n"
           "      --top-k K                        keep the K most likely tokens, 0 = all (default 40)\n"
           "      --top-p P                        nucleus sampling mass in (0, 1] (default 0.95)\n"
           "      --seed S                         sampler seed (default 0)\n"
           "  -c, --ctx-size N                     context tokens, 1 .. 16777216; 0 = the model's\n"
           "                                       training context, capped at 4096 (default 0).\n"
           "                                       The memory a context needs is counted before\n"
           "                                       anything is allocated: too much is refused with\n"
           "                                       the longest context that fits the devices\n"
           "      --tensor-parallel-size T         TP ranks (default 1)\n"
           "      --decode-context-parallel-size D DCP ranks per group, divides T (default 1)\n"
           "      --dcp-comm-backend a2a|ag_rs     DCP exchange pattern (default a2a)\n"
           "      --cp-kv-cache-interleave-size I  tokens per rank in turn, divides the block size\n"
           "                                       (default 1)\n"
           "      --dcp-q-replicate                each rank computes its group's queries itself\n"
           "                                       instead of gathering them (default off)\n"
           "      --block-size B                   tokens per KV page (default 16)\n"
           "      --kv-dtype f16|f32|q8_0          KV cache element type (default f16)\n"
           "      --prefill-chunk N                prompt tokens per prefill step (default 128)\n"
           "      --devices LIST                   Vulkan devices, e.g. 0,0,0,0 (default\n"
           "                                       $DCP_VK_DEVICES, else every device once)\n"
           "      --json                           print the summary as one JSON object on stdout\n"
           "                                       (the text is then not streamed; it is in \"text\")\n"
           "      --version                        print the library version\n"
           "  -h, --help                           this help\n"
           "\n"
           "TP and DCP run in one process: rank r on the r-th device of --devices (without a list,\n"
           "on logical devices of device 0). Prompt chunks merge the DCP partial states with an\n"
           "all-gather whatever the backend; decode steps use the chosen backend.\n"
           "\n"
           "Under `mpiexec -n P` the TP ranks spread over the processes, T / P each (e.g. -n T: one\n"
           "each); process k holds ranks [k T/P, (k+1) T/P) on entries [k T/P, (k+1) T/P) of the\n"
           "device list, or all on its one entry. The TP all-reduces run over MPI_COMM_WORLD and a\n"
           "DCP group spread over processes over an MPI sub-communicator. Process 0 runs the engine,\n"
           "sends each step to the others and prints the text and the summary; every process checks\n"
           "the configuration and exits with the same code. A process that fails or dies during the\n"
           "generation ends every process (exit non-zero), naming it and the cause.\n"
           "Before any exchange the processes compare their options (all but --devices), the\n"
           "model's shape and the prompt's tokens with process 0's: a difference is named with the\n"
           "processes that differ, exit 2.\n",
           prog);
}

int run_parse(int argc, char **argv, run_options *o)
{
    const char *prog = argv[0];
    *o = (run_options){.model = NULL, .prompt = "Once upon a time", .n_predict = 64, .temp = 0.8f, .top_k = 40,
                       .top_p = 0.95f, .seed = 0, .ctx = 0, .tp = 1, .dcp = 1, .backend = "a2a", .interleave = 1,
                       .q_replicate = false, .block_size = 16, .kv_dtype = "f16", .prefill_chunk = 128,
                       .devices = NULL, .json = false, .help = false, .prompt_file = NULL};
    bool prompt_given = false;
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
        } else if (IS("--version")) {
            o->version = true;
        } else if (IS("--json")) {
            o->json = true;
        } else if (IS("--dcp-q-replicate")) {
            o->q_replicate = true;
        } else {
            static const char *const with_value[] = {
                "-m", "--model", "-p", "--prompt", "-f", "--file", "-n", "--n-predict", "--temp", "--top-k", "--top-p", "--seed",
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
            else if (IS("-p") || IS("--prompt")) {
                o->prompt = v;
                prompt_given = true;
            } else if (IS("-f") || IS("--file")) o->prompt_file = v;
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
                dcp_dtype kt;
                if (!dcp_dtype_parse(v, &kt)) {
                    fprintf(diag(), "%s: option --kv-dtype: '%s' is not one of f16, f32, q8_0\n", prog, v);
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
    if (prompt_given && o->prompt_file) {
        fprintf(diag(), "%s: -p and -f both give the prompt: use one of them\n", prog);
        return DCP_EXIT_USAGE;
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

int run_read_prompt(run_options *o, char **buf, const char *prog)
{
    *buf = NULL;
    if (!o->prompt_file) {
        o->prompt_len = strlen(o->prompt);
        return DCP_EXIT_OK;
    }
    enum { MAX_PROMPT = 64 << 20 }; /* bytes: far more than any context holds in tokens */
    const bool std_in = strcmp(o->prompt_file, "-") == 0;
    const char *name = std_in ? "standard input" : o->prompt_file;
    FILE *f = std_in ? stdin : fopen(o->prompt_file, "rb");
    if (!f) {
        fprintf(diag(), "%s: -f %s: cannot open the prompt file: %s\n", prog, o->prompt_file, strerror(errno));
        return DCP_EXIT_RUNTIME;
    }
    size_t n = 0, cap = 4096;
    char *p = malloc(cap);
    int rc = DCP_EXIT_OK;
    while (p) {
        if (n + 1 == cap) {
            char *q = cap > MAX_PROMPT ? NULL : realloc(p, cap * 2);
            if (!q) {
                fprintf(diag(), "%s: -f: %s holds more than %d MiB of prompt\n", prog, name, MAX_PROMPT >> 20);
                rc = DCP_EXIT_USAGE;
                break;
            }
            p = q;
            cap *= 2;
        }
        size_t k = fread(p + n, 1, cap - 1 - n, f);
        n += k;
        if (k == 0) {
            if (ferror(f)) {
                fprintf(diag(), "%s: -f: cannot read %s: %s\n", prog, name, strerror(errno));
                rc = DCP_EXIT_RUNTIME;
            }
            break;
        }
    }
    if (!std_in) fclose(f);
    if (!p) {
        fprintf(diag(), "%s: -f: out of host memory reading %s\n", prog, name);
        return DCP_EXIT_RUNTIME;
    }
    const char *nul = rc == DCP_EXIT_OK ? memchr(p, 0, n) : NULL;
    if (nul) {
        fprintf(diag(), "%s: -f: %s holds a NUL byte at offset %zu: a prompt is text, without NUL bytes\n", prog, name,
                (size_t)(nul - p));
        rc = DCP_EXIT_USAGE;
    }
    if (rc != DCP_EXIT_OK) {
        free(p);
        return rc;
    }
    p[n] = 0;
    *buf = p;
    o->prompt = p;
    o->prompt_len = n;
    return DCP_EXIT_OK;
}

uint32_t run_option_fields(const run_options *o, run_field *f)
{
    uint32_t n = 0;
#define U(name, v) run_field_set(&f[n++], name, &(uint64_t){(v)}, sizeof(uint64_t), "%llu", (unsigned long long)(v))
#define F(name, v) run_field_set(&f[n++], name, &(float){(v)}, sizeof(float), "%.9g", (double)(v))
#define S(name, v) run_field_set(&f[n++], name, (v), strlen(v), "%s", (v))
    run_field_set(&f[n++], "the prompt (-p or -f)", o->prompt, o->prompt_len, "\"%.*s\" (%zu bytes)",
                  (int)(o->prompt_len < 40 ? o->prompt_len : 40), o->prompt, o->prompt_len);
    U("-n (--n-predict)", o->n_predict);
    F("--temp", o->temp);
    U("--top-k", o->top_k);
    F("--top-p", o->top_p);
    U("--seed", o->seed);
    U("-c (--ctx-size)", o->ctx);
    U("--tensor-parallel-size", o->tp);
    U("--decode-context-parallel-size", o->dcp);
    S("--dcp-comm-backend", o->backend);
    U("--cp-kv-cache-interleave-size", o->interleave);
    U("--dcp-q-replicate", o->q_replicate);
    U("--block-size", o->block_size);
    S("--kv-dtype", o->kv_dtype);
    U("--prefill-chunk", o->prefill_chunk);
    U("--json", o->json);
    S("-m (--model)", o->model ? "given" : "not given (the generated test model)");
#undef U
#undef F
#undef S
    return n;
}
