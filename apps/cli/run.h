/* What the apps that run a model (dcp-vk-run, dcp-vk-serve) share: dcp-vk-run's options, their
 * defaults and their validation (vLLM's TP/DCP rules; serve parses them too), the processes of an
 * MPI launch (cli/world.c), the devices of this process's TP ranks (cli/devices.c) and the step
 * follower of the processes other than 0 (cli/follow.c). */
#ifndef DCP_APPS_RUN_H
#define DCP_APPS_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/cli.h"
#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/tokenizer.h"
#include "dcpvk/vk.h"

/* Exit codes: dcp_exit_code of cli/cli.h. */

typedef struct run_options {
    const char *model;        /* -m: GGUF path; NULL: the project's generated test model */
    const char *prompt;       /* -p: prompt text (default "Once upon a time"); after run_read_prompt
                               * the text of -f FILE */
    size_t prompt_len;        /* bytes of prompt (set by run_read_prompt) */
    const char *prompt_file;  /* -f: prompt file, "-" for standard input (default NULL: -p) */
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
    bool q_replicate;         /* --dcp-q-replicate (default off) */
    uint32_t block_size;      /* --block-size (default 16) */
    const char *kv_dtype;     /* --kv-dtype f16|f32|q8_0 (default f16) */
    uint32_t prefill_chunk;   /* --prefill-chunk (default 128) */
    const char *devices;      /* --devices (default $DCP_VK_DEVICES, else every device) */
    const char *speculative_config; /* --speculative-config JSON (default NULL: none; cli/spec.c) */
    bool json;                /* --json */
    bool help;                /* --help */
    bool version;             /* --version */
} run_options;

/* Fills defaults, parses argv. Returns 0, or DCP_EXIT_USAGE after printing why to stderr. */
int run_parse(int argc, char **argv, run_options *o);
/* The prompt of -f (a file, or standard input for "-"): read into *buf (malloc'd, NUL-terminated;
 * the caller frees it), o->prompt and o->prompt_len set to it; without -f, o->prompt_len =
 * strlen(o->prompt). Returns 0; DCP_EXIT_RUNTIME when the file cannot be read; DCP_EXIT_USAGE for a
 * prompt holding a NUL byte (named with its offset). Prints why. */
int run_read_prompt(run_options *o, char **buf, const char *prog);
void run_print_help(const char *prog);

/* Checks the TP / DCP / KV options against the model (vLLM's rules, docs/design.md section 7). Returns
 * 0, or DCP_EXIT_USAGE after printing which rule failed and which sizes this model allows. */
int run_validate(const run_options *o, uint32_t q_heads, uint32_t kv_heads, const char *prog);
/* quiet 1: run_parse and run_validate print nothing (MPI processes other than 0); 0: to stderr. */
void run_quiet(int quiet);

/* ---- speculative decoding (cli/spec.c) ------------------------------------------------------ */

typedef struct run_spec {
    dcp_spec_method method;      /* DCP_SPEC_NONE without the option */
    uint32_t k, lookup_max, lookup_min; /* num_speculative_tokens, prompt_lookup_max/min (0: unset) */
    char *model;                 /* draft model path (method draft_model) */
    dcp_gguf *g;                 /* the draft once loaded */
    dcp_model_config mc;
    dcp_tokenizer *tok;
    dcp_model *m;
    dcp_model_state *s;
    dcp_model *counted;          /* the draft counted, not loaded (run_spec_count) */
    uint32_t dcp;                /* the draft's DCP size: the target's, or 1 where its heads do not
                                  * allow that (its KV cache replicated over each DCP group) */
} run_spec;

/* Parses --speculative-config's JSON (vLLM's fields: method "ngram" or "draft_model", model,
 * num_speculative_tokens, prompt_lookup_max, prompt_lookup_min; a model without a method is a draft
 * model). Returns 0, or DCP_EXIT_USAGE after printing which field is wrong and what is allowed. */
int run_spec_parse(const char *json, run_spec *sp, const char *prog);
/* Method draft_model: opens the draft, checks its vocabulary against the target's, loads it with
 * the target's load configuration (devices, TP, DCP; DCP 1 where its heads do not allow the
 * target's, run_spec_count) and creates its run state (the target's slots,
 * context, block size, KV type, interleave and backend; every slot at full context). Returns 0 or
 * DCP_EXIT_RUNTIME after printing why. Collective over MPI like the target's load. */
int run_spec_load(run_spec *sp, const dcp_model_load_config *target_load, const dcp_model_state *target,
                    const dcp_tokenizer *target_tok, const char *prog);
/* Method draft_model: counts the draft (a count_only load with load's devices and layout, or with
 * DCP 1 where the draft's heads do not allow load's DCP size: said on the diagnostic stream) into
 * sp->counted, for dcp_model_state_config.draft: the target's memory check then counts the draft's
 * weights and run state too. Opens the draft's file (kept for run_spec_load). Nothing for other
 * methods, or when counted already. Returns 0 or an exit code after printing why. */
int run_spec_count(run_spec *sp, const dcp_model_load_config *load, const char *prog);
/* The engine's speculation configuration (the draft's state and tokenizer borrowed from sp). */
void run_spec_config(const run_spec *sp, dcp_spec_config *out);
void run_spec_free(run_spec *sp);

/* ---- processes of an MPI launch (cli/world.c) ---------------------------------------------- */

typedef struct run_world {
    int nproc, proc; /* MPI world size and this process's rank (1, 0 without a launcher) */
    bool mpi;        /* MPI was started here (finalise at the end) */
} run_world;

/* Starts MPI (dcp_mpi_init) when an MPI launcher started this process (dcp_cli_mpi_launched);
 * else one process. Returns 0 or DCP_EXIT_RUNTIME after printing why. */
int run_world_init(int *argc, char ***argv, run_world *w, const char *prog);
void run_world_finalize(const run_world *w);
/* After a failure on this process that the others cannot see (they may be waiting for it in a
 * collective, or about to): ends every process of the launch with exit status rc (MPI_Abort; the
 * launcher reports it). Say why first, naming the process. With one process it returns rc. */
int run_world_abort(const run_world *w, int rc);
/* Collective: which process runs where, for messages (a launcher that reports a dead process names
 * its pid): "process 0 pid 1234 on node1, process 1 pid 1235 on node1" into out on process 0
 * (empty on the others). Also notes the other processes of this node for run_world_watch.
 * Returns 0 or DCP_EXIT_RUNTIME. */
int run_world_describe(const run_world *w, char *out, size_t cap);
/* After run_world_describe: a thread that checks every 200 ms that the other processes of this
 * node still run. When one has ended (killed, crashed, or gone without telling the others) while
 * this one goes on, the others may wait for it in a collective forever (a launcher that does not
 * end the job when one process dies: mpiexec -disable-auto-cleanup, a rank wrapped in a script):
 * the watch says which process ended and ends this one (exit DCP_EXIT_RUNTIME). Processes on other
 * nodes are left to the launcher and to MPI's errors. Returns 0 or DCP_EXIT_RUNTIME. */
int run_world_watch(const run_world *w, const char *prog);
/* Stops the watch: this process and the others are ending together (run_plan_quit and run_follow
 * call it between their last two exchanges, so that no process ends while another still watches). */
void run_world_unwatch(void);
/* The largest rc over the processes (usage 2 beats runtime 1 beats ok 0): every process calls it at
 * the same points, so that all stop together. rc itself with one process. */
int run_world_agree(const run_world *w, int rc);
/* This process's TP ranks [*first, *first + *count) of tp: all with one process, else tp / nproc
 * each (tp must divide by nproc; with dcp > 1 a process holds whole DCP groups or an equal part of
 * one). Returns 0 or DCP_EXIT_USAGE (process 0 prints why). */
int run_world_split(const run_world *w, uint32_t tp, uint32_t dcp, uint32_t *first, uint32_t *count,
                    const char *prog);
/* The device list (e.g. "0,0") of this process's count ranks from a user list: one entry: every rank
 * on it; at least tp entries: entries [first, first + count). Returns 0 or DCP_EXIT_USAGE. */
int run_world_devices(const run_world *w, const char *list, uint32_t first, uint32_t count, uint32_t tp,
                      char *out, size_t cap, const char *prog);

/* ---- devices of this process's TP ranks (cli/devices.c) ------------------------------------- */

struct dcp_context;
/* This process's TP ranks [*first, *first + *count) (run_world_split) and the Vulkan context that
 * holds their devices: the --devices list or $DCP_VK_DEVICES (under MPI, this process's entries),
 * else one device per rank when there are enough physical devices, else logical devices of device
 * 0 (said on stderr when lead). Every process calls it; they agree on the result. Returns 0 or an
 * exit code after printing why (DCP_EXIT_USAGE for a bad device list). Shared by the apps that
 * load a model (dcp-vk-run, dcp-vk-serve). */
int run_open_devices(const run_world *w, const run_options *o, const char *prog, int lead, uint32_t *first,
                     uint32_t *count, struct dcp_context **ctx);
/* ---- the library's configurations from the options (cli/configs.c) -------------------------- */

/* The run state's: -c, --block-size, --kv-dtype, --prefill-chunk (rows per step),
 * --cp-kv-cache-interleave-size, --dcp-comm-backend; one sequence slot (serve sets its own). */
dcp_model_state_config run_state_config(const run_options *o);
/* The weights' load onto this process's TP ranks [first, first + count) of ctx's devices; devs
 * [count] receives the devices (the config points to it, so it must outlive the load). */
dcp_model_load_config run_load_config(const run_options *o, struct dcp_context *ctx, uint32_t first, uint32_t count,
                                      dcp_device **devs);

/* Values every process of one run must have alike (options, the model's shape, the prompt's
 * tokens): a name for messages, a hash of the value's bytes, and the value as shown. */
typedef struct run_field {
    const char *name;  /* e.g. "-n (--n-predict)" */
    uint64_t hash;     /* FNV-1a of the value's bytes */
    char shown[64];    /* the value as printed (sanitized, truncated) */
} run_field;

/* Sets f: name, the hash of bytes [n], and shown (printf format). */
void run_field_set(run_field *f, const char *name, const void *bytes, size_t n, const char *shown, ...)
    __attribute__((format(printf, 5, 6)));
/* The fields of the options that must match over the processes (all but --devices): at most
 * RUN_MAX_FIELDS. Returns the count. */
enum { RUN_MAX_FIELDS = 32 };
uint32_t run_option_fields(const run_options *o, run_field *fields);
/* Collective: every process compares its fields [n] (the same names and count everywhere) with
 * process 0's. Returns 0 when all match; else the lowest process that differs prints which value
 * differs (its own and process 0's), naming `what`, and every process returns DCP_EXIT_USAGE.
 * With one process: 0. */
int run_world_same(const run_world *w, const run_field *fields, uint32_t n, const char *what, const char *prog);
/* Collective: process 0's bytes *buf [*len] to every process (the others' *buf is replaced by a
 * malloc'd copy, NUL-terminated, which they free). Returns 0 or DCP_EXIT_RUNTIME. */
int run_world_bcast_bytes(const run_world *w, char **buf, size_t *len, const char *prog);

/* ---- the step follower under MPI (cli/follow.c) --------------------------------------------- */

/* What process 0's engine learns from the followers with each plan. */
typedef struct run_lead {
    int stop; /* the largest stop signal (SIGINT, SIGTERM) a follower reported; 0: none */
} run_lead;

/* dcp_engine_config.on_plan of process 0 under MPI: sends the plan to the followers; user is a
 * run_lead (their reports are noted there) or NULL. */
dcp_status run_plan_broadcast(void *user, const dcp_engine_plan *plan);
/* Process 0, once, at the end: tells the followers to stop; they return code (so that every
 * process ends with the same exit code). The watch (run_world_watch) ends here, between the stop
 * and one last exchange, on every process. */
dcp_status run_plan_quit(int code);
/* The processes other than 0: apply every plan of process 0 to s (a draft model's plans to draft,
 * this process's part of the draft model's state, NULL without one) until it says stop; returns the
 * exit code it gave. With report_signals, a stop signal this process caught (dcp_cli_catch_signals)
 * goes back to process 0 with the next plan. A failure here (a plan that does not run, an MPI
 * error) is said, naming this process and the cause, and ends every process (run_world_abort):
 * process 0 may be waiting for this one inside a step. */
int run_follow(const run_world *w, dcp_model_state *s, dcp_model_state *draft, const char *prog, bool report_signals);

#endif
