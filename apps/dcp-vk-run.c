/* dcp-vk-run: text generation from a GGUF llama-family model. Parses and validates the options,
 * loads the model onto Vulkan devices (in one process, or spread over the processes of
 * `mpiexec -n P`), runs the prompt as one request of the engine (include/dcpvk/engine.h: prefill in
 * steps of --prefill-chunk tokens, sampling, stop at EOS, streaming text), prints the text as it
 * comes and the speed summary (human or JSON). See --help. main runs the phases in order: parse
 * (cli/options.c), read_prompt, open_model (read and validate), open_devices (cli/devices.c),
 * check_memory, load_weights, build, then generate and report on process 0 while the others follow
 * its steps (cli/follow.c, as dcp-vk-serve's do), run_free. Under MPI the processes first compare
 * what they were given (options, model, prompt tokens; cli/world.c), stop together at step
 * boundaries (signals, a failed write), and a failure during the steps on any process ends every
 * process (run_world_abort). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "cli/run.h"
#include "dcpvk/comm.h"
#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/model_config.h"
#include "dcpvk/tokenizer.h"
#include "dcpvk/vk.h"
#include "testmodel/testmodel.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}


/* MPI process index for messages (-1: one process). */
static int msg_proc = -1;

static void fail(const char *prog, const char *what, dcp_status st)
{
    if (msg_proc >= 0)
        fprintf(stderr, "%s: process %d: %s: %s: %s\n", prog, msg_proc, what, dcp_status_string(st),
                dcp_last_error());
    else
        fprintf(stderr, "%s: %s: %s: %s\n", prog, what, dcp_status_string(st), dcp_last_error());
}

/* Everything one run holds, phase by phase; zero-initialised, so that run_free may follow any
 * phase. Under MPI every process has its own. */
typedef struct run_app {
    const char *prog;
    run_world world;
    bool mpi, lead;          /* several processes; this process runs the engine and prints (process 0) */
    run_options o;
    char *prompt_buf;        /* the prompt of -f (owned), or NULL */
    /* open_model */
    const char *model;       /* the model's path, or "<generated test model>" without -m */
    dcp_gguf *g;
    dcp_model_config mc;
    dcp_tokenizer *tok;
    /* open_devices, load_weights */
    uint32_t first, nl;      /* this process's TP ranks [first, first + nl) */
    dcp_context *ctx;
    const dcp_device_info *info; /* of the first device */
    dcp_model *w;
    double t_load;           /* seconds, the slowest process's */
    /* build */
    dcp_model_state *s;
    int32_t *prompt;         /* [n_prompt] token ids */
    size_t n_prompt;
    unsigned decode_flags;   /* DCP_DECODE_* of the generated text */
    run_spec spec;           /* --speculative-config (cli/spec.c) */
    /* generate (process 0) */
    dcp_engine *eng;
    run_lead followers;      /* what the other processes report with each step (MPI) */
    int32_t *gen;            /* [n_predict + 1] generated ids */
    uint32_t n_gen;
    char *text;              /* --json: the generated text [text_len] bytes */
    size_t text_len;
    double t_prompt, t_gen;  /* seconds */
    uint64_t steps_first;    /* the engine's steps when the first token came (the prefill's) */
    int stopped;             /* why generation stopped early: a signal number, STOP_OUTPUT, or 0 */
    bool out_failed;         /* a write to stdout failed (process 0) */
    char procs[4096];        /* under MPI, on process 0: which process runs where (pids, hosts) */
} run_app;

/* generate's stop codes besides signal numbers: a failed write of the output on process 0. */
enum { STOP_OUTPUT = 1000 };

/* The prompt: -p, or -f FILE read by every process, or -f - (standard input, which an MPI launcher
 * gives process 0 only) read by process 0 and sent to the others. Returns a dcp_exit_code; under
 * MPI the processes agree on it. */
static int read_prompt(run_app *a)
{
    run_options *o = &a->o;
    const bool from_stdin = o->prompt_file && strcmp(o->prompt_file, "-") == 0;
    int rc = DCP_EXIT_OK;
    if (!(a->mpi && from_stdin && !a->lead)) rc = run_read_prompt(o, &a->prompt_buf, a->prog);
    if ((rc = run_world_agree(&a->world, rc))) return rc;
    if (a->mpi && from_stdin) {
        size_t len = o->prompt_len;
        if ((rc = run_world_agree(&a->world, run_world_bcast_bytes(&a->world, &a->prompt_buf, &len, a->prog))))
            return rc;
        o->prompt = a->prompt_buf;
        o->prompt_len = len;
    }
    return DCP_EXIT_OK;
}

/* What every process must have alike of the model: its shape and tensor directory (not its path:
 * nodes may keep it in different places). */
static uint32_t model_fields(const run_app *a, run_field *f)
{
    const dcp_model_config *mc = &a->mc;
    uint64_t h[16] = {mc->arch, mc->n_layer, mc->n_embd, mc->n_head, mc->n_head_kv, mc->head_dim, mc->n_ff,
                      mc->n_vocab, mc->n_ctx_train, dcp_gguf_tensor_count(a->g), dcp_gguf_data_offset(a->g)};
    uint64_t dir = 0xcbf29ce484222325ull; /* FNV-1a over names, types, shapes and offsets */
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(a->g); i++) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(a->g, i);
        for (const char *c = t->name; *c; c++) dir = (dir ^ (unsigned char)*c) * 0x100000001b3ull;
        uint64_t v[6] = {t->type, t->ne[0], t->ne[1], t->ne[2], t->ne[3], t->offset};
        for (int k = 0; k < 6; k++) dir = (dir ^ v[k]) * 0x100000001b3ull;
    }
    h[11] = dir;
    run_field_set(&f[0], "the model (-m)", h, sizeof h, "%s, %u layers, embedding %u, %u heads / %u KV heads, vocab %u, "
                  "%llu tensors (directory %016llx)", mc->arch_name, mc->n_layer, mc->n_embd, mc->n_head, mc->n_head_kv,
                  mc->n_vocab, (unsigned long long)dcp_gguf_tensor_count(a->g), (unsigned long long)dir);
    return 1;
}

/* Opens the model (or generates the test model in memory), reads its hyperparameters and
 * tokenizer, and validates the options against them. Returns a dcp_exit_code. */
static int open_model(run_app *a)
{
    const char *prog = a->prog;
    const run_options *o = &a->o;
    dcp_status st;
    a->model = o->model;
    if (!a->model) {
        /* Generated in memory and read from there: no file in a shared temporary folder. */
        dcp_test_model_config tc = DCP_TEST_MODEL_CONFIG_DEFAULT;
        if ((st = dcp_gguf_open_test_model(&tc, &a->g))) {
            fail(prog, "generating the test model", st);
            return DCP_EXIT_RUNTIME;
        }
        if (a->lead)
            fprintf(stderr, "%s: no -m given: using the project's generated test model (llama, %u layers, "
                            "embedding %u, %u heads, %u KV heads, seeded random weights: the text is noise), "
                            "made in memory\n", prog, tc.n_layer, tc.n_embd, tc.n_head, tc.n_head_kv);
        a->model = dcp_gguf_name(a->g);
    } else if ((st = dcp_gguf_open(a->model, &a->g))) {
        fail(prog, "reading the model", st);
        return DCP_EXIT_RUNTIME;
    }
    if ((st = dcp_model_config_read(a->g, &a->mc))) {
        fail(prog, "reading the model's hyperparameters", st);
        return DCP_EXIT_RUNTIME;
    }
    /* MLA caches one latent "head" per token: vLLM's rules with one KV head (dcp <= tp). */
    const uint32_t kv_heads = a->mc.arch == DCP_ARCH_DEEPSEEK2 ? 1 : a->mc.n_head_kv;
    if (run_validate(o, a->mc.n_head, kv_heads, prog)) return DCP_EXIT_USAGE;
    if ((st = dcp_tokenizer_create(a->g, &a->tok))) {
        fail(prog, "reading the tokenizer", st);
        return DCP_EXIT_RUNTIME;
    }
    return DCP_EXIT_OK;
}

/* This process's TP ranks and their devices (cli/devices.c, as dcp-vk-serve's): creates the
 * Vulkan context. Every process calls it; they agree on the result. Returns a dcp_exit_code. */
static int open_devices(run_app *a)
{
    int rc = run_open_devices(&a->world, &a->o, a->prog, a->lead, &a->first, &a->nl, &a->ctx);
    if (rc == DCP_EXIT_OK) a->info = dcp_device_get_info(dcp_context_device(a->ctx, 0));
    return rc;
}

/* The weights' load configuration for this process's ranks (count_only: count, upload nothing). */
static dcp_model_load_config load_config(run_app *a, dcp_device **devs, bool count_only)
{
    dcp_model_load_config lc = run_load_config(&a->o, a->ctx, a->first, a->nl, devs);
    lc.count_only = count_only;
    return lc;
}

/* Counts what the weights and the run state need on every device before anything is allocated,
 * and refuses a configuration that does not fit with what it needs, what is available and the
 * longest context that fits. Every process calls it; they agree on the result. Returns a
 * dcp_exit_code (2 when it does not fit). */
static int check_memory(run_app *a)
{
    dcp_device *devs[1024];
    dcp_model_load_config lc = load_config(a, devs, true);
    dcp_model *counted = NULL;
    int rc = DCP_EXIT_OK;
    if (a->o.speculative_config && (rc = run_spec_parse(a->o.speculative_config, &a->spec, a->prog)))
        return run_world_agree(&a->world, rc);
    dcp_status st = dcp_model_load(&lc, a->g, &a->mc, &counted);
    dcp_model_state_config sc = run_state_config(&a->o);
    if (a->spec.method != DCP_SPEC_NONE) sc.max_logits = sc.max_rows; /* k + 1 scored rows */
    if (st != DCP_OK) {
        fail(a->prog, "the model on these devices", st);
        rc = st == DCP_ERR_INVALID_ARGUMENT || st == DCP_ERR_CONFIG ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
    } else if (!(rc = run_spec_count(&a->spec, &lc, a->prog))) {
        sc.draft = a->spec.counted; /* the draft model's weights and state beside this one (--speculative-config) */
        uint32_t fits = 0;
        if ((st = dcp_model_state_check(counted, &sc, &fits)) != DCP_OK) {
            fail(a->prog, "memory", st);
            if (fits > 0)
                fprintf(stderr, "%s: run with -c %u or less, or spread the model over more devices "
                                "(--tensor-parallel-size, --decode-context-parallel-size)\n", a->prog, fits);
            rc = st == DCP_ERR_OUT_OF_MEMORY || st == DCP_ERR_CONFIG ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
        }
    }
    dcp_model_destroy(counted);
    return run_world_agree(&a->world, rc);
}

/* Uploads this process's TP ranks of the weights, with a progress line on process 0. Every process
 * calls it; they agree on the result. Returns a dcp_exit_code. */
static int load_weights(run_app *a)
{
    dcp_device *devs[1024];
    dcp_cli_progress lp;
    dcp_cli_progress_init(&lp, "loading model"); /* a bar when stderr is a terminal */
    double t0 = now_s();
    int wrc = DCP_EXIT_OK;
    dcp_status st;
    dcp_model_load_config lc = load_config(a, devs, false);
    lc.progress = a->lead ? dcp_cli_progress_fn : NULL;
    lc.progress_user = &lp;
    if ((st = dcp_model_load(&lc, a->g, &a->mc, &a->w))) {
        fail(a->prog, "loading the weights", st);
        wrc = DCP_EXIT_RUNTIME;
    }
    int rc = run_world_agree(&a->world, wrc);
    if (rc) return rc;
    a->t_load = dcp_mpi_max(now_s() - t0);
    const dcp_model_fallback *fb = dcp_model_fallbacks(a->w);
    if (fb->count && a->lead)
        fprintf(stderr,
                "%s: %u quantized matrices are held as F32 on this process's ranks: exact, %.2f MiB "
                "instead of %.2f MiB; first: %s\n", a->prog, fb->count, fb->f32_bytes / 1048576.0,
                fb->native_bytes / 1048576.0, fb->first);
    return DCP_EXIT_OK;
}

/* The run state (KV cache, plans, communicators), the prompt's tokens and how its continuation is
 * detokenized. Returns a dcp_exit_code. */
static int build(run_app *a)
{
    const char *prog = a->prog;
    const run_options *o = &a->o;
    dcp_status st;
    dcp_model_state_config lc = run_state_config(o);
    int rc;
    if (a->spec.method != DCP_SPEC_NONE) lc.max_logits = lc.max_rows; /* k + 1 scored rows */
    lc.draft = a->spec.counted; /* the draft model to come (check_memory counted it) */
    if ((st = dcp_model_state_create(a->w, &lc, &a->s))) {
        fail(prog, "creating the run state", st);
        return st == DCP_ERR_OUT_OF_MEMORY || st == DCP_ERR_CONFIG ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
    }
    dcp_device *devs[1024];
    dcp_model_load_config dl = load_config(a, devs, false); /* the draft: the target's devices and layout */
    if ((rc = run_spec_load(&a->spec, &dl, a->s, a->tok, prog))) return rc;
    unsigned flags = dcp_tokenizer_wants_bos(a->tok) ? DCP_TOKENIZE_ADD_BOS : 0;
    if ((st = dcp_tokenizer_encode(a->tok, o->prompt, o->prompt_len, flags, &a->prompt, &a->n_prompt))) {
        fail(prog, "tokenizing the prompt", st);
        return DCP_EXIT_RUNTIME;
    }
    if (a->n_prompt == 0) {
        int32_t bos = dcp_tokenizer_bos(a->tok);
        free(a->prompt);
        a->prompt = malloc(sizeof *a->prompt);
        if (!a->prompt) return DCP_EXIT_RUNTIME;
        a->prompt[0] = bos >= 0 ? bos : 0;
        a->n_prompt = 1;
    }
    uint32_t n_ctx = dcp_model_state_n_ctx(a->s);
    if (a->n_prompt + (size_t)o->n_predict > n_ctx) {
        fprintf(stderr, "%s: %zu prompt tokens + %u to generate exceed the context of %u tokens (-c)\n", prog,
                a->n_prompt, o->n_predict, n_ctx);
        return DCP_EXIT_USAGE;
    }
    /* The generated text continues the prompt: keep the leading space of its first piece unless the
     * prompt is only BOS. */
    int32_t bos_id = dcp_tokenizer_bos(a->tok);
    a->decode_flags = (a->n_prompt > 1 || a->prompt[0] != bos_id) ? DCP_DECODE_KEEP_LEADING_SPACE : 0;
    return DCP_EXIT_OK;
}

/* After a write to stdout: notes a failure (full disk, closed pipe, /dev/full), which stops the
 * generation at the next step. */
static void check_output(run_app *a)
{
    if (!dcp_cli_stdout_ok()) a->out_failed = true;
}

/* What runs where (stderr), then the prompt (stdout), before the generation; process 0. With
 * --json only the processes (under MPI: which pid is which process, as a launcher that reports a
 * dead process names its pid). */
static void print_header(run_app *a)
{
    const run_options *o = &a->o;
    if (!a->lead) return;
    if (!o->json)
        fprintf(stderr, "%s: %s on %s (%s): %u layers, %u heads / %u KV heads, vocab %u; %zu prompt tokens; "
                        "TP %u, DCP %u; KV %s, block %u\n", a->prog, a->model, a->info->name, a->info->driver_name,
                a->mc.n_layer, a->mc.n_head, a->mc.n_head_kv, a->mc.n_vocab, a->n_prompt, o->tp, o->dcp, o->kv_dtype,
                o->block_size);
    if (a->mpi)
        fprintf(stderr, "%s: %d MPI processes, %u TP ranks each; process 0 prints; %s\n", a->prog, a->world.nproc,
                a->nl, a->procs);
    fflush(stderr);
    if (o->json) return;
    dcp_cli_put_text(stdout, o->prompt, o->prompt_len); /* the prompt, then the continuation */
    check_output(a);
}

/* Writes a piece of generated text to stdout as it comes (process 0, text output). */
static void print_piece(run_app *a, const char *piece, size_t len)
{
    if (a->out_failed) return;
    dcp_cli_put_text(stdout, piece, len);
    check_output(a);
}

/* A piece of generated text: kept for the JSON summary with --json, else printed by process 0.
 * False when out of host memory. */
static bool emit_piece(run_app *a, const char *piece, size_t len)
{
    if (!len) return true;
    if (a->o.json) {
        char *t = realloc(a->text, a->text_len + len + 1);
        if (!t) return false;
        a->text = t;
        memcpy(a->text + a->text_len, piece, len);
        a->text_len += len;
    } else if (a->lead) {
        print_piece(a, piece, len);
    }
    return true;
}

/* Whether to stop generating, at a step boundary: a signal (SIGINT, SIGTERM) on this process or
 * on another (it comes with the last step's plan), or a failed write of the output. Process 0.
 * Returns the signal number, STOP_OUTPUT, or 0. */
static int stop_code(const run_app *a)
{
    if (a->out_failed) return STOP_OUTPUT;
    int sig = dcp_cli_stop_signal();
    return sig ? sig : a->followers.stop;
}

/* One event of the request: its token (TOKEN, and FINISHED after a token) and its text. Returns a
 * dcp_exit_code. */
static int take_event(run_app *a, const dcp_engine_event *ev)
{
    if (ev->token >= 0 && a->n_gen <= a->o.n_predict) a->gen[a->n_gen++] = ev->token;
    if (!emit_piece(a, ev->text, ev->len)) {
        fprintf(stderr, "%s: out of host memory for the generated text\n", a->prog);
        return DCP_EXIT_RUNTIME;
    }
    if (ev->kind == DCP_ENGINE_EVENT_FINISHED && ev->finish == DCP_ENGINE_FINISH_ERROR) {
        fprintf(stderr, "%s: %sgeneration: %s: %s\n", a->prog, a->mpi ? "process 0: " : "",
                dcp_status_string(ev->status), ev->message);
        return DCP_EXIT_RUNTIME;
    }
    return DCP_EXIT_OK;
}

/* Process 0: the prompt as one request of the engine, stepped until it finishes (n_predict tokens
 * or EOS) or stop_code asks to stop (a->stopped; the request is then cancelled at that step
 * boundary), the text emitted as the events bring it. The first token comes with the prompt's
 * last step: t_prompt runs until it, t_gen from it to the end. Under MPI the engine sends every
 * step's plan to the followers first. Returns a dcp_exit_code; a failed step under MPI ends every
 * process (the followers may be inside it). */
static int generate(run_app *a)
{
    const run_options *o = &a->o;
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    if (a->mpi) {
        ec.on_plan = run_plan_broadcast;
        ec.plan_user = &a->followers;
    }
    run_spec_config(&a->spec, &ec.spec);
    dcp_status st = dcp_engine_create(a->s, a->tok, &ec, &a->eng);
    a->gen = malloc((o->n_predict + 1) * sizeof *a->gen);
    if (st != DCP_OK || !a->gen) {
        fail(a->prog, "creating the engine", st != DCP_OK ? st : DCP_ERR_OUT_OF_MEMORY);
        /* a configuration the engine refuses (speculation's sizes, a draft model under MPI) */
        return st == DCP_ERR_CONFIG || st == DCP_ERR_UNSUPPORTED ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
    }
    dcp_engine_request rq = DCP_ENGINE_REQUEST_DEFAULT;
    rq.prompt = a->prompt;
    rq.n_prompt = (uint32_t)a->n_prompt;
    rq.max_tokens = o->n_predict;
    rq.sampling = (dcp_sampler_config){.temperature = o->temp, .top_k = o->top_k, .top_p = o->top_p, .seed = o->seed,
                                        .repetition_penalty = 1.0f};
    rq.decode_flags = a->decode_flags;
    uint64_t id;
    if ((st = dcp_engine_submit(a->eng, &rq, &id))) {
        fail(a->prog, "the request", st);
        return st == DCP_ERR_INVALID_ARGUMENT || st == DCP_ERR_OUT_OF_PAGES ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
    }
    const double t0 = now_s();
    double t1 = t0;
    bool first = true;
    int rc = DCP_EXIT_OK;
    dcp_engine_event ev;
    while (rc == DCP_EXIT_OK && dcp_engine_busy(a->eng)) {
        if ((a->stopped = stop_code(a))) {
            (void)dcp_engine_cancel(a->eng, id);
            break;
        }
        if ((st = dcp_engine_step(a->eng)) && a->mpi) {
            fail(a->prog, "generation", st);
            return run_world_abort(&a->world, DCP_EXIT_RUNTIME);
        }
        while (dcp_engine_poll(a->eng, &ev) && rc == DCP_EXIT_OK) {
            if (first && ev.token >= 0) {
                t1 = now_s();
                a->t_prompt = t1 - t0;
                dcp_engine_stats fs;
                dcp_engine_get_stats(a->eng, &fs);
                a->steps_first = fs.steps;
                first = false;
            }
            rc = take_event(a, &ev);
        }
    }
    while (dcp_engine_poll(a->eng, &ev)) {} /* a cancelled request's FINISHED event */
    if (!first) a->t_gen = now_s() - t1;
    return rc;
}

/* The speed summary: one JSON object on stdout with --json, else a newline after the text and two
 * lines on stderr (and one saying why generation stopped early, if it did). Process 0 only. */
static void report(run_app *a)
{
    const char *prog = a->prog;
    const run_options *o = &a->o;
    if (!a->lead) return;
    dcp_engine_stats es;
    dcp_engine_get_stats(a->eng, &es);
    /* Decode steps: the engine's steps after the one that produced the first token (the prefill's
     * last); one per token without speculation, fewer with it. Tokens/s counts the tokens after
     * the first. */
    uint32_t steps = a->n_gen > 0 ? (uint32_t)(es.steps - a->steps_first) : 0;
    uint32_t gen_after_first = a->n_gen > 0 ? a->n_gen - 1 : 0;
    /* How the exchanges moved, and the last decode step's rounds and host waits. */
    char xdesc[8192];
    dcp_model_state_describe_exchange(a->s, xdesc, sizeof xdesc);
    uint32_t x_rounds = steps ? dcp_model_state_last_rounds(a->s) : 0;
    uint32_t x_waits = steps ? dcp_model_state_last_host_waits(a->s) : 0;
    uint32_t x_disp = steps ? dcp_model_state_last_dispatches(a->s) : 0;
    uint32_t x_rank_disp = steps ? dcp_model_state_last_rank_dispatches(a->s) : 0;
    double prompt_tps = a->t_prompt > 0 ? a->n_prompt / a->t_prompt : 0;
    double gen_tps = a->t_gen > 0 && gen_after_first ? gen_after_first / a->t_gen : 0;
    uint64_t kv_bytes = dcp_model_state_kv_bytes(a->s);
    uint64_t run_tokens = dcp_model_state_tokens_run(a->s);
    double xbytes = run_tokens ? (double)dcp_model_state_exchange_bytes(a->s) / run_tokens : 0.0;
    const double mean_len = es.spec_drafts ? 1.0 + (double)es.spec_accepted_tokens / (double)es.spec_drafts : 0.0;
    if (o->json) {
        printf("{\"model\": ");
        dcp_cli_json_string(stdout, a->model, strlen(a->model));
        printf(", \"device\": ");
        dcp_cli_json_string(stdout, a->info->name, strlen(a->info->name));
        printf(", \"tensor_parallel_size\": %u, \"decode_context_parallel_size\": %u, \"dcp_comm_backend\": \"%s\", "
               "\"interleave\": %u, \"block_size\": %u, \"kv_dtype\": \"%s\", \"prompt_tokens\": %zu, "
               "\"generated_tokens\": %u, \"decode_steps\": %u, \"prompt_seconds\": %.6f, \"generate_seconds\": %.6f, "
               "\"prompt_tokens_per_s\": %.3f, \"generated_tokens_per_s\": %.3f, \"load_seconds\": %.3f, "
               "\"kv_bytes_per_rank\": %llu, \"exchange_bytes_per_token\": %.1f, \"processes\": %d, "
               "\"decode_step_rounds\": %u, \"decode_step_host_waits\": %u, \"decode_step_dispatches\": %u, "
               "\"decode_step_rank_dispatches\": %u, \"exchange\": ",
               o->tp, o->dcp, o->backend, o->interleave, o->block_size, o->kv_dtype, a->n_prompt, a->n_gen, steps,
               a->t_prompt, a->t_gen, prompt_tps, gen_tps, a->t_load, (unsigned long long)kv_bytes, xbytes,
               a->world.nproc, x_rounds, x_waits, x_disp, x_rank_disp);
        dcp_cli_json_string(stdout, xdesc, strlen(xdesc));
        printf(", \"text\": ");
        dcp_cli_json_string(stdout, a->text ? a->text : "", a->text_len);
        printf(", \"tokens\": [");
        for (uint32_t i = 0; i < a->n_gen; i++) printf(i ? ", %d" : "%d", a->gen[i]);
        printf("], \"interrupted\": %s", a->stopped > 0 && a->stopped < STOP_OUTPUT ? "true" : "false");
        if (a->spec.method != DCP_SPEC_NONE) { /* vLLM's spec_decode counters */
            printf(", \"spec_decode\": {\"method\": \"%s\", \"num_speculative_tokens\": %u, \"num_drafts\": %llu, "
                   "\"num_draft_tokens\": %llu, \"num_accepted_tokens\": %llu, \"num_emitted_tokens\": %llu, "
                   "\"mean_accepted_length\": %.4f, \"num_accepted_tokens_per_pos\": [",
                   dcp_spec_method_name(a->spec.method), a->spec.k, (unsigned long long)es.spec_drafts,
                   (unsigned long long)es.spec_draft_tokens, (unsigned long long)es.spec_accepted_tokens,
                   (unsigned long long)(es.spec_accepted_tokens + es.spec_drafts), mean_len);
            for (uint32_t j = 0; j < a->spec.k; j++)
                printf(j ? ", %llu" : "%llu", (unsigned long long)es.spec_accepted_per_pos[j]);
            printf("], \"model_steps\": %llu}", (unsigned long long)es.steps);
        }
        printf("}\n");
        check_output(a);
    } else {
        if (!a->out_failed) {
            printf("\n");
            check_output(a);
        }
        if (a->stopped > 0 && a->stopped < STOP_OUTPUT)
            fprintf(stderr, "%s: interrupted by %s after %u generated tokens: stopped at a step boundary\n", prog,
                    a->stopped == SIGINT ? "SIGINT" : a->stopped == SIGTERM ? "SIGTERM" : "a signal", a->n_gen);
        fprintf(stderr,
                "%s: prompt: %zu tokens in %.3f s = %.1f tokens/s; generation: %u tokens, %u decode steps in "
                "%.3f s = %.1f tokens/s\n"
                "%s: KV cache %.2f MiB per rank (%u ranks); exchange %.0f bytes per token sent by rank 0; "
                "weights %.2f MiB (%s) loaded in %.2f s\n",
                prog, a->n_prompt, a->t_prompt, prompt_tps, a->n_gen, steps, a->t_gen, gen_tps, prog,
                kv_bytes / 1048576.0, o->tp, xbytes, dcp_model_bytes(a->w) / 1048576.0,
                a->mpi ? "process 0's ranks" : "all ranks", a->t_load);
        fprintf(stderr,
                "%s: decode step: %u rounds, %u host waits, %u compute dispatches (%u on the busiest rank); "
                "exchange:\n%s\n",
                prog, x_rounds, x_waits, x_disp, x_rank_disp, xdesc);
        if (a->spec.method != DCP_SPEC_NONE)
            fprintf(stderr, "%s: speculative decoding (%s, k %u): %llu drafts, %llu draft tokens, %llu accepted, %llu "
                    "emitted, mean accepted length %.2f, %llu model steps\n", prog,
                    dcp_spec_method_name(a->spec.method), a->spec.k, (unsigned long long)es.spec_drafts,
                    (unsigned long long)es.spec_draft_tokens, (unsigned long long)es.spec_accepted_tokens,
                    (unsigned long long)(es.spec_accepted_tokens + es.spec_drafts), mean_len,
                    (unsigned long long)es.steps);
    }
}

/* Frees whatever the phases made (any of it may be missing). */
static void run_free(run_app *a)
{
    dcp_engine_destroy(a->eng);
    free(a->text);
    free(a->gen);
    free(a->prompt);
    dcp_model_state_destroy(a->s);
    run_spec_free(&a->spec);
    dcp_model_destroy(a->w);
    dcp_context_destroy(a->ctx);
    dcp_tokenizer_destroy(a->tok);
    dcp_gguf_close(a->g);
    free(a->prompt_buf);
}

/* Process 0 after the build: the header, the generation, the summary. Returns a dcp_exit_code. */
static int lead(run_app *a)
{
    print_header(a);
    int rc = generate(a);
    if (rc) return rc;
    report(a);
    /* A failed write: main's dcp_cli_finish_stdout says so. */
    if (a->out_failed || a->stopped == STOP_OUTPUT || !dcp_cli_stdout_ok()) return DCP_EXIT_RUNTIME;
    if (a->stopped > 0) return DCP_EXIT_SIGNAL + a->stopped;
    return DCP_EXIT_OK;
}

/* The phases after the options: model, devices, weights, run state, then the generation on
 * process 0 while the others follow its steps. Returns a dcp_exit_code; under MPI the processes
 * agree on it wherever a phase may fail on some only, and every process ends with process 0's. */
static int run_phases(run_app *a)
{
    int rc;
    run_field f[RUN_MAX_FIELDS];
    if ((rc = read_prompt(a))) return rc;
    /* Before any exchange whose size depends on them: the same options, model and prompt tokens on
     * every process (different -n would leave some waiting; different prompts mix). */
    if ((rc = run_world_same(&a->world, f, run_option_fields(&a->o, f), "options", a->prog))) return rc;
    if ((rc = run_world_agree(&a->world, open_model(a)))) return rc;
    if ((rc = run_world_same(&a->world, f, model_fields(a, f), "models", a->prog))) return rc;
    if ((rc = open_devices(a))) return rc;
    if ((rc = check_memory(a))) return rc;
    if ((rc = load_weights(a))) return rc;
    if ((rc = run_world_agree(&a->world, build(a)))) return rc;
    run_field_set(&f[0], "the prompt's tokens", a->prompt, a->n_prompt * sizeof *a->prompt, "%zu tokens, first %d",
                  a->n_prompt, a->prompt[0]);
    if ((rc = run_world_same(&a->world, f, 1, "prompts", a->prog))) return rc;
    if ((rc = run_world_agree(&a->world, run_world_describe(&a->world, a->procs, sizeof a->procs)))) return rc;
    if ((rc = run_world_agree(&a->world, run_world_watch(&a->world, a->prog)))) {
        run_world_unwatch();
        return rc;
    }
    if (!a->mpi) return lead(a);
    /* From here on process 0 runs the engine and the others follow its steps until it says stop
     * (with its exit code), or a failure on any process ends them all. */
    if (!a->lead) return run_follow(&a->world, a->s, a->spec.s, a->prog, true);
    rc = lead(a);
    dcp_status st = run_plan_quit(rc);
    if (st != DCP_OK) {
        fail(a->prog, "stopping the other processes", st);
        return run_world_abort(&a->world, DCP_EXIT_RUNTIME);
    }
    return rc;
}

int main(int argc, char **argv)
{
    dcp_set_log_callback(dcp_cli_log_stderr, NULL);
    /* Under an MPI launcher every process runs all of this; they agree on the exit code at each
     * phase (run_world_agree) and process 0 prints the text and the summary. */
    run_app app = {.prog = argv[0]};
    run_app *a = &app;
    int rc = run_world_init(&argc, &argv, &a->world, a->prog);
    if (rc) return rc;
    a->mpi = a->world.nproc > 1;
    a->lead = a->world.proc == 0;
    if (a->mpi) msg_proc = a->world.proc;
    dcp_cli_catch_signals();
    run_quiet(!a->lead);
    rc = run_world_agree(&a->world, run_parse(argc, argv, &a->o));
    if (rc == DCP_EXIT_OK && a->o.help) {
        if (a->lead) run_print_help(a->prog);
    } else if (rc == DCP_EXIT_OK && a->o.version) {
        if (a->lead) dcp_cli_print_version("dcp-vk-run");
    } else if (rc == DCP_EXIT_OK) {
        rc = run_phases(a);
        run_free(a);
    }
    run_quiet(0);
    if (a->lead) rc = dcp_cli_finish_stdout(a->prog, rc);
    run_world_finalize(&a->world);
    return rc;
}
