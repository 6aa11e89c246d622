/* dcp-vk-serve: an OpenAI-compatible HTTP server (completions, chat completions, streaming, models,
 * health, metrics) over the continuous-batching engine. Parses the options (dcp-vk-run's model,
 * TP/DCP and device options plus its own), loads the model onto the devices (in one process, or
 * spread over the processes of `mpiexec -n P`), then process 0 serves HTTP and runs the engine
 * while the others follow its steps. SIGTERM (or Ctrl-C) stops it cleanly with exit code 0. See
 * --help and apps/serve/serve.h. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/chat.h"
#include "dcpvk/comm.h"
#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/tokenizer.h"
#include "cli/cli.h"
#include "dcpvk/vk.h"
#include "serve/serve.h"

static volatile int stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void quiesce(void *user) { serve_http_quiesce(user); }

/* Everything one server process holds; zero-initialised so that app_free may follow any phase. */
typedef struct serve_app {
    const char *prog;
    run_world world;
    int lead, mpi;
    serve_options o;
    dcp_gguf *g;
    dcp_model_config mc;
    dcp_tokenizer *tok;
    dcp_context *ctx;
    uint32_t first, nl;
    dcp_model *m;
    dcp_model_state *s;
    dcp_model_load_config wc;     /* the target's load (the draft model's too) */
    dcp_device *devs[1024];
    run_spec spec;              /* --speculative-config (cli/spec.c) */
    char name[256];
} serve_app;

static int fail(const serve_app *a, const char *what, dcp_status st)
{
    if (a->mpi)
        fprintf(stderr, "%s: process %d: %s: %s: %s\n", a->prog, a->world.proc, what, dcp_status_string(st),
                dcp_last_error());
    else
        fprintf(stderr, "%s: %s: %s: %s\n", a->prog, what, dcp_status_string(st), dcp_last_error());
    return DCP_EXIT_RUNTIME;
}

/* Reads the model file, its hyperparameters (checked against the TP/DCP options) and tokenizer. */
static int open_model(serve_app *a)
{
    dcp_status st;
    if ((st = dcp_gguf_open(a->o.run.model, &a->g))) return fail(a, "reading the model", st);
    if ((st = dcp_model_config_read(a->g, &a->mc))) return fail(a, "reading the model's hyperparameters", st);
    if (run_validate(&a->o.run, a->mc.n_head, a->mc.n_head_kv, a->prog)) return DCP_EXIT_USAGE;
    if ((st = dcp_tokenizer_create(a->g, &a->tok))) return fail(a, "reading the tokenizer", st);
    const char *base = strrchr(a->o.run.model, '/');
    base = base ? base + 1 : a->o.run.model;
    snprintf(a->name, sizeof a->name, "%s", a->o.served_name ? a->o.served_name : base);
    size_t n = strlen(a->name);
    if (!a->o.served_name && n > 5 && strcmp(a->name + n - 5, ".gguf") == 0) a->name[n - 5] = 0;
    return 0;
}

static int load(serve_app *a)
{
    if (a->nl > 1024) return fail(a, "loading the weights", DCP_ERR_INVALID_ARGUMENT);
    dcp_model_load_config wc = run_load_config(&a->o.run, a->ctx, a->first, a->nl, a->devs);
    a->wc = wc;
    dcp_status st = dcp_model_load(&wc, a->g, &a->mc, &a->m);
    return st ? fail(a, "loading the weights", st) : 0;
}

/* The run state (collective over MPI: it fails on every process or none). */
static int build_state(serve_app *a)
{
    dcp_model_state_config sc = run_state_config(&a->o.run);
    sc.max_seqs = a->o.max_seqs;
    sc.kv_pages = a->o.kv_pages;
    sc.kv_offload_bytes = a->o.kv_offload_bytes; /* the whole TP group's: each process allocates its ranks' part */
    if (a->spec.method != DCP_SPEC_NONE) sc.max_logits = sc.max_rows; /* k + 1 scored rows per request */
    /* The draft model to come (--speculative-config): counted beside the state before anything of
     * either is allocated. */
    int rc = run_spec_count(&a->spec, &a->wc, a->prog);
    if (rc) return rc;
    sc.draft = a->spec.counted;
    dcp_status st = dcp_model_state_create(a->m, &sc, &a->s);
    return st ? fail(a, "creating the run state", st) : 0;
}

/* Prefix caching on (with KV offload's host pool when --kv-offloading-size is given). */
static int caching_on(serve_app *a)
{
    const dcp_status st = dcp_model_state_set_prefix_caching(a->s, true);
    return st ? fail(a, "turning prefix caching on", st) : 0;
}

/* The chat family: --chat-template, else recognised from the model. */
static void chat_setup(serve_app *a, serve_hub *h)
{
    const char *tmpl = NULL;
    size_t len;
    if (a->o.chat_template) {
        h->chat = dcp_chat_template_from_name(a->o.chat_template);
    } else if (dcp_gguf_get_string(a->g, "tokenizer.chat_template", &tmpl, &len) == DCP_OK) {
        h->chat = dcp_chat_template_detect(tmpl);
        h->chat_why = "its tokenizer.chat_template is not one of the known families";
    } else {
        h->chat = DCP_CHAT_UNKNOWN;
        h->chat_why = "the model file has no tokenizer.chat_template";
    }
    const char *eot = dcp_chat_template_end_of_turn(h->chat);
    int32_t *ids = NULL;
    size_t n = 0;
    if (eot && dcp_tokenizer_encode(a->tok, eot, strlen(eot), DCP_TOKENIZE_PARSE_SPECIAL, &ids, &n) == DCP_OK &&
        n == 1)
        h->chat_eot = ids[0];
    free(ids);
}

/* Process 0 under MPI, once, at the end: the followers stop and end with rc. A failure to tell them
 * ends every process. Returns rc. */
static int quit(serve_app *a, int rc)
{
    if (!a->mpi) return rc;
    dcp_status st = run_plan_quit(rc);
    if (st == DCP_OK) return rc;
    fail(a, "stopping the other processes", st);
    return run_world_abort(&a->world, DCP_EXIT_RUNTIME);
}

/* Process 0: the engine, the hub and HTTP until SIGTERM. */
static int serve(serve_app *a)
{
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    if (a->mpi) ec.on_plan = run_plan_broadcast;
    run_spec_config(&a->spec, &ec.spec);
    /* Prefix caching: on by default; under MPI every process turned it on already (main: the host
     * pool of KV offload too, the same blocks on each) and the followers apply the attaches and
     * commits the plans carry. */
    ec.enable_prefix_caching = a->o.prefix_caching;
    dcp_engine *e = NULL;
    dcp_status st = dcp_engine_create(a->s, a->tok, &ec, &e);
    if (st) {
        fail(a, "creating the engine", st);
        return quit(a, DCP_EXIT_RUNTIME);
    }
    serve_hub h;
    const dcp_model_state_config *sc = dcp_model_state_get_config(a->s);
    if (serve_hub_init(&h, &a->o, a->tok, dcp_model_state_n_ctx(a->s), a->o.run.tp, a->o.run.dcp, sc->kv_pages,
                       sc->max_seqs)) {
        dcp_engine_destroy(e);
        return quit(a, DCP_EXIT_RUNTIME);
    }
    h.model_name = a->name;
    h.lockstep = a->mpi;
    chat_setup(a, &h);
    /* SIGTERM and SIGINT reach this thread only (the server's threads start with them blocked). */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    uint32_t port = 0;
    serve_http *http = serve_http_start(&h, a->prog, &port);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    /* No listening socket (the address is in use, not this machine's, or not allowed): the
     * --host / --port options, as serve_http_start said. */
    int rc = DCP_EXIT_USAGE;
    bool step_failed = false; /* under MPI: the processes are out of step */
    if (http) {
        fprintf(stderr,
                "%s: listening on http://%s:%u (model '%s', TP %u, DCP %u, context %u, %u sequences, %u KV pages "
                "of %u tokens per rank, chat template %s)\n",
                a->prog, a->o.host, port, a->name, a->o.run.tp, a->o.run.dcp, h.n_ctx, sc->max_seqs, sc->kv_pages,
                sc->block_size, dcp_chat_template_name(h.chat));
        if (a->spec.method != DCP_SPEC_NONE)
            fprintf(stderr, "%s: speculative decoding: %s, %u tokens per step%s%s\n", a->prog,
                    dcp_spec_method_name(a->spec.method), a->spec.k, a->spec.model ? ", draft " : "",
                    a->spec.model ? a->spec.model : "");
        fprintf(stderr, "%s: prefix caching: %s\n", a->prog,
                ec.enable_prefix_caching ? "on (blocks of block-size x DCP tokens)"
                : "off (--no-enable-prefix-caching)");
        if (ec.enable_prefix_caching && sc->kv_offload_bytes) {
            dcp_prefix_cache_stats ps;
            dcp_model_state_prefix_stats(a->s, &ps);
            fprintf(stderr, "%s: KV offload: %.3f GiB of host memory, %u blocks of %u tokens\n", a->prog,
                    (double)sc->kv_offload_bytes / (double)(1ull << 30), ps.host_capacity, ps.block_tokens);
        }
        fflush(stderr);
        step_failed = serve_hub_run(&h, e, &stop_flag, quiesce, http) != 0;
        rc = step_failed ? DCP_EXIT_RUNTIME : DCP_EXIT_OK;
        serve_http_stop(http);
        dcp_engine_stats es;
        dcp_engine_get_stats(e, &es);
        fprintf(stderr, "%s: stopped: %llu requests finished, %llu tokens generated, %llu preemptions\n", a->prog,
                (unsigned long long)(es.finished[1] + es.finished[2] + es.finished[3] + es.finished[4]),
                (unsigned long long)es.generated_tokens, (unsigned long long)es.preemptions);
        if (a->spec.method != DCP_SPEC_NONE)
            fprintf(stderr, "%s: speculative decoding: %llu drafts, %llu draft tokens, %llu accepted (mean accepted "
                    "length %.2f)\n", a->prog, (unsigned long long)es.spec_drafts,
                    (unsigned long long)es.spec_draft_tokens, (unsigned long long)es.spec_accepted_tokens,
                    es.spec_drafts ? 1.0 + (double)es.spec_accepted_tokens / (double)es.spec_drafts : 0.0);
    }
    if (step_failed && a->mpi) {
        /* A step failed: the followers may be inside it, so they cannot be told to stop. */
        fprintf(stderr, "%s: process 0: a step failed with the other processes in it: ending every process\n",
                a->prog);
        return run_world_abort(&a->world, rc);
    }
    dcp_engine_destroy(e);
    serve_hub_free(&h);
    return quit(a, rc);
}

/* One process only: a SIGTERM or SIGINT before serving ends the start-up between its phases. */
static bool stopped_early(const serve_app *a)
{
    if (a->mpi || !stop_flag) return false;
    fprintf(stderr, "%s: stopped by a signal before serving\n", a->prog);
    return true;
}

static void app_free(serve_app *a)
{
    run_spec_free(&a->spec);
    dcp_model_state_destroy(a->s);
    dcp_model_destroy(a->m);
    dcp_context_destroy(a->ctx);
    dcp_tokenizer_destroy(a->tok);
    dcp_gguf_close(a->g);
}

int main(int argc, char **argv)
{
    dcp_set_log_callback(dcp_cli_log_stderr, NULL);
    serve_app a;
    memset(&a, 0, sizeof a);
    a.prog = argv[0];
    signal(SIGPIPE, SIG_IGN);
    int rc = run_world_init(&argc, &argv, &a.world, a.prog);
    if (rc) return rc;
    a.mpi = a.world.nproc > 1;
    a.lead = a.world.proc == 0;
    if (!a.mpi) { /* SIGTERM from the start stops it with 0 (under MPI: once serving, see serve()) */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
    }
    run_quiet(!a.lead);
    serve_quiet(!a.lead);
    /* Every process runs each phase and they agree on its result, so that none waits alone. */
    rc = run_world_agree(&a.world, serve_parse(argc, argv, &a.o));
    if (rc || a.o.help || a.o.version) {
        if (!rc && a.lead) {
            if (a.o.help) serve_print_help(a.prog);
            else dcp_cli_print_version("dcp-vk-serve");
            rc = dcp_cli_finish_stdout(a.prog, rc); /* a failed write (a full disk, /dev/full) exits 1 */
        }
        goto finish;
    }
    if ((rc = run_world_agree(&a.world, open_model(&a))) || stopped_early(&a)) goto done;
    if ((rc = run_open_devices(&a.world, &a.o.run, a.prog, a.lead, &a.first, &a.nl, &a.ctx)) || stopped_early(&a))
        goto done;
    if ((rc = run_world_agree(&a.world, load(&a))) || stopped_early(&a)) goto done;
    if (a.o.run.speculative_config && (rc = run_spec_parse(a.o.run.speculative_config, &a.spec, a.prog))) goto done;
    if ((rc = build_state(&a)) || stopped_early(&a)) goto done;
    if ((rc = run_world_agree(&a.world, run_spec_load(&a.spec, &a.wc, a.s, a.tok, a.prog))) || stopped_early(&a))
        goto done;
    if (!a.lead) { /* a launcher may pass SIGTERM to every process: the followers end when process 0 says */
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
    }
    /* Which pid is which process (a launcher that reports a dead process names its pid). */
    char procs[4096];
    if ((rc = run_world_agree(&a.world, run_world_describe(&a.world, procs, sizeof procs)))) goto done;
    if ((rc = run_world_agree(&a.world, run_world_watch(&a.world, a.prog)))) {
        run_world_unwatch();
        goto done;
    }
    if (a.mpi && a.lead)
        fprintf(stderr, "%s: %d MPI processes: %s; process 0 serves, the others follow its steps\n", a.prog,
                a.world.nproc, procs);
    /* Under MPI every process turns caching on here, as the leader's engine would (and KV offload's
     * host pool with it): a process that cannot allocate its part fails them all before serving. */
    if (a.mpi && a.o.prefix_caching && (rc = run_world_agree(&a.world, caching_on(&a)))) goto done;
    rc = a.lead ? serve(&a) : run_follow(&a.world, a.s, a.spec.s, a.prog, false);
done:
    app_free(&a);
finish:
    run_quiet(0);
    serve_quiet(0);
    run_world_finalize(&a.world);
    return rc;
}
