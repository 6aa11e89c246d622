/* dcp-vk-run: options, their defaults and their validation (vLLM's TP/DCP rules). */
#ifndef DCP_APPS_RUN_H
#define DCP_APPS_RUN_H

#include <stdint.h>

/* Exit codes: 0 ok, 1 runtime failure (device, model file, generation), 2 usage or configuration. */
enum { RUN_EXIT_OK = 0, RUN_EXIT_RUNTIME = 1, RUN_EXIT_USAGE = 2 };

typedef struct run_options {
    const char *model;        /* -m: GGUF path; NULL: the project's generated test model */
    const char *prompt;       /* -p: prompt text (default "Once upon a time") */
    uint32_t n_predict;       /* -n: tokens to generate (default 64) */
    float temp;               /* --temp (default 0.8; 0 = greedy) */
    uint32_t top_k;           /* --top-k (default 40; 0 = off) */
    float top_p;              /* --top-p (default 0.95; 1 = off) */
    uint64_t seed;            /* --seed (default 0) */
    uint32_t ctx;             /* -c: context tokens (default 0: the model's, at most 4096) */
    uint32_t tp;              /* --tensor-parallel-size (default 1) */
    uint32_t dcp;             /* --decode-context-parallel-size (default 1) */
    const char *backend;      /* --dcp-comm-backend a2a|ag_rs (default a2a) */
    uint32_t interleave;      /* --cp-kv-cache-interleave-size (default 1) */
    int q_replicate;          /* --dcp-q-replicate (default off) */
    uint32_t block_size;      /* --block-size (default 16) */
    const char *kv_dtype;     /* --kv-dtype f16|f32 (default f16) */
    uint32_t prefill_chunk;   /* --prefill-chunk (default 128) */
    const char *devices;      /* --devices (default $DCP_VK_DEVICES, else every device) */
    int json;                 /* --json */
    int help;                 /* --help */
} run_options;

/* Fills defaults, parses argv. Returns 0, or RUN_EXIT_USAGE after printing why to stderr. */
int run_parse(int argc, char **argv, run_options *o);
void run_print_help(const char *prog);

/* Checks the TP / DCP / KV options against the model (vLLM's rules, DESIGN.md section 5). Returns
 * 0, or RUN_EXIT_USAGE after printing which rule failed and which sizes this model allows. */
int run_validate(const run_options *o, uint32_t q_heads, uint32_t kv_heads, const char *prog);

#endif
