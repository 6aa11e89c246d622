/* dcp-vk-bench spec: tokens/s of one greedy request with and without speculative decoding, on the
 * engine (include/dcpvk/engine.h), at the TP / DCP sizes given:
 *   (a) n-gram drafts on a prompt whose continuation repeats it: the model's own greedy text from
 *       BOS (--quote tokens), then BOS and its first 4 tokens again, so that prompt lookup finds the
 *       continuation in the prompt (as when code is edited in place or a document quoted);
 *   (b) a draft model (--draft FILE, or the target cut to its first --draft-layers layers) on the
 *       same prompt and on BOS alone; the n-gram drafts on BOS alone too (the model's own
 *       repetitions only).
 * Each line: decode tokens per wall second and per CPU second of the process (steadier on a
 * shared machine) without and with speculation, runs alternating in one process, the best of
 * --reps each (from the first generated token to the last, so the prompt's prefill is not
 * counted), the speedups, the
 * drafts, draft tokens, accepted tokens, acceptance rate and mean accepted length (vLLM's
 * spec_decode counters). The tokens with speculation must equal those without (greedy is exact):
 * a difference is an error (exit 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "common/error.h"
#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/tokenizer.h"
#include "testmodel/testmodel.h"

typedef struct spec_opts {
    const char *model, *draft, *devices;
    uint32_t tp, dcp, k, n, quote, draft_layers, reps;
    bool json;
} spec_opts;

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    dcp_cli_print_text(f, "usage: dcp-vk-bench spec -m MODEL.gguf [options]\n"
               "  -m FILE            target model (GGUF, required)\n"
               "  --draft FILE       draft model of the same vocabulary (default: the target cut to\n"
               "                     its first --draft-layers layers)\n"
               "  --draft-layers N   layers of the cut draft (default 1)\n"
               "  --tp T, --dcp D    TP ranks and DCP group size (default 1, 1)\n"
               "  -k K               num_speculative_tokens (default 4)\n"
               "  -n N               tokens generated per request (default 128)\n"
               "  --quote N          tokens of the self-quoting prompt's text (default 160)\n"
               "  --reps R           runs of each request without and with, alternately, the best\n"
               "                     of each taken (default 3)\n"
               "  --devices LIST     devices (default $DCP_VK_DEVICES, else all)\n"
               "  --json             one JSON object per line\n");
}

static int parse(int argc, char **argv, spec_opts *o)
{
    const char *p = "dcp-vk-bench spec";
    *o = (spec_opts){.tp = 1, .dcp = 1, .k = 4, .n = 128, .quote = 160, .reps = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        bool ok;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--json")) ok = o->json = true;
        else if (!strcmp(a, "-m")) ok = (o->model = dcp_cli_value(p, argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--draft")) ok = (o->draft = dcp_cli_value(p, argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--devices")) ok = (o->devices = dcp_cli_value(p, argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--draft-layers")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, 1024, &o->draft_layers);
        else if (!strcmp(a, "--tp")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, 64, &o->tp);
        else if (!strcmp(a, "--dcp")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, 64, &o->dcp);
        else if (!strcmp(a, "-k")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, DCP_SPEC_MAX_TOKENS, &o->k);
        else if (!strcmp(a, "-n")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 2, 4096, &o->n);
        else if (!strcmp(a, "--quote")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 8, 4096, &o->quote);
        else if (!strcmp(a, "--reps")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, 100, &o->reps);
        else {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", p, a);
            return -1;
        }
        if (!ok) return -1;
    }
    if (!o->model) {
        fprintf(stderr, "%s: -m MODEL.gguf is required (see --help)\n", p);
        return -1;
    }
    return 0;
}

typedef struct bench_run {
    int32_t *toks;
    uint32_t n;
    double tps;                  /* tokens per wall second */
    double tps_cpu;              /* tokens per CPU second of this process (all its threads: lavapipe's
                                  * too), steadier than wall time on a shared machine */
    dcp_engine_stats st;
} bench_run;

/* One greedy request of n tokens (EOS ignored) on a new engine over s with speculation sp. */
static dcp_status run_one(dcp_model_state *s, const dcp_tokenizer *tok, const dcp_spec_config *sp,
                          const int32_t *prompt, uint32_t np, uint32_t n, bench_run *out)
{
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    if (sp) ec.spec = *sp;
    dcp_engine *e;
    dcp_status st = dcp_engine_create(s, tok, &ec, &e);
    if (st != DCP_OK) return st;
    dcp_engine_request r = DCP_ENGINE_REQUEST_DEFAULT;
    r.prompt = prompt;
    r.n_prompt = np;
    r.max_tokens = n;
    r.ignore_eos = true;
    uint64_t id;
    out->n = 0;
    double t_first = 0.0, t_last = 0.0, c_first = 0.0, c_last = 0.0;
    if ((st = dcp_engine_submit(e, &r, &id)) != DCP_OK) goto done;
    while (dcp_engine_busy(e)) {
        if ((st = dcp_engine_step(e)) != DCP_OK) goto done;
        const double t = clock_s(CLOCK_MONOTONIC), cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        dcp_engine_event ev;
        while (dcp_engine_poll(e, &ev)) {
            if (ev.kind == DCP_ENGINE_EVENT_FINISHED && ev.finish == DCP_ENGINE_FINISH_ERROR) {
                st = dcp_fail(DCP_ERR_INTERNAL, "the request failed: %s", ev.message);
                goto done;
            }
            if (ev.token < 0) continue;
            if (out->n == 0) {
                t_first = t;
                c_first = cpu;
            }
            t_last = t;
            c_last = cpu;
            if (out->n < n) out->toks[out->n++] = ev.token;
        }
    }
    out->tps = out->n > 1 && t_last > t_first ? (out->n - 1) / (t_last - t_first) : 0.0;
    out->tps_cpu = out->n > 1 && c_last > c_first ? (out->n - 1) / (c_last - c_first) : 0.0;
    dcp_engine_get_stats(e, &out->st);
done:
    dcp_engine_destroy(e);
    return st;
}

static int report(const spec_opts *o, const char *what, const bench_run *base, const bench_run *spec)
{
    const char *p = "dcp-vk-bench spec";
    if (base->n != spec->n || memcmp(base->toks, spec->toks, base->n * sizeof *base->toks)) {
        uint32_t at = 0;
        while (at < base->n && at < spec->n && base->toks[at] == spec->toks[at]) at++;
        fprintf(stderr, "%s: %s: the tokens with speculation differ from those without at token %u\n", p, what, at);
        return DCP_EXIT_RUNTIME;
    }
    const dcp_engine_stats *s = &spec->st;
    const double acc = s->spec_draft_tokens ? (double)s->spec_accepted_tokens / (double)s->spec_draft_tokens : 0.0;
    const double mean = s->spec_drafts ? 1.0 + (double)s->spec_accepted_tokens / (double)s->spec_drafts : 0.0;
    const double speedup = base->tps > 0.0 ? spec->tps / base->tps : 0.0;
    const double speedup_cpu = base->tps_cpu > 0.0 ? spec->tps_cpu / base->tps_cpu : 0.0;
    if (o->json)
        printf("{\"case\": \"%s\", \"tp\": %u, \"dcp\": %u, \"k\": %u, \"tokens\": %u, \"tokens_per_s\": %.3f, "
               "\"spec_tokens_per_s\": %.3f, \"speedup\": %.3f, \"tokens_per_cpu_s\": %.3f, "
               "\"spec_tokens_per_cpu_s\": %.3f, \"speedup_cpu\": %.3f, \"num_drafts\": %llu, \"num_draft_tokens\": %llu, "
               "\"num_accepted_tokens\": %llu, \"acceptance_rate\": %.4f, \"mean_accepted_length\": %.3f, "
               "\"steps\": %llu, \"spec_steps\": %llu, \"draft_steps\": %llu, \"draft_seconds\": %.3f}\n",
               what, o->tp, o->dcp, o->k, base->n, base->tps, spec->tps, speedup, base->tps_cpu, spec->tps_cpu,
               speedup_cpu, (unsigned long long)s->spec_drafts,
               (unsigned long long)s->spec_draft_tokens, (unsigned long long)s->spec_accepted_tokens, acc, mean,
               (unsigned long long)base->st.steps, (unsigned long long)s->steps, (unsigned long long)s->spec_draft_steps,
               s->spec_draft_seconds);
    else
        printf("%-28s %9.2f %9.2f %6.2fx %9.2f %9.2f %6.2fx %6llu %7llu %8llu %6.1f%% %5.2f\n", what, base->tps,
               spec->tps, speedup, base->tps_cpu, spec->tps_cpu, speedup_cpu,
               (unsigned long long)s->spec_drafts, (unsigned long long)s->spec_draft_tokens,
               (unsigned long long)s->spec_accepted_tokens, 100.0 * acc, mean);
    return DCP_EXIT_OK;
}

int dcp_bench_spec(int argc, char **argv)
{
    const char *p = "dcp-vk-bench spec";
    spec_opts o;
    int r = parse(argc, argv, &o);
    if (r) return r > 0 ? DCP_EXIT_OK : DCP_EXIT_USAGE;
    int rc = DCP_EXIT_RUNTIME;
    dcp_status st;
    dcp_gguf *g = NULL, *dg = NULL;
    dcp_tokenizer *tok = NULL, *dtok = NULL;
    dcp_context *ctx = NULL;
    dcp_model *m = NULL, *dm = NULL;
    dcp_model_state *s = NULL, *ds = NULL;
    void *dbytes = NULL;
    dcp_model_config cfg, dcfg;
    const char *what = "reading the model";
    int32_t *quote = NULL, *prompt = NULL, *bos = NULL;
    bench_run base = {0}, spec = {0};
    if ((st = dcp_gguf_open(o.model, &g)) || (st = dcp_model_config_read(g, &cfg)) || (st = dcp_tokenizer_create(g, &tok)))
        goto fail;
    what = "the draft model";
    if (o.draft) {
        if ((st = dcp_gguf_open(o.draft, &dg))) goto fail;
    } else {
        const uint32_t layers = o.draft_layers ? o.draft_layers : 1;
        dcp_gguf_writer *w;
        size_t size;
        if ((st = dcp_test_model_cut_layers(g, layers, -1, &w))) goto fail;
        st = dcp_gguf_writer_write_memory(w, &dbytes, &size);
        dcp_gguf_writer_destroy(w);
        if (st || (st = dcp_gguf_open_memory(dbytes, size, "<draft: the target cut>", &dg))) goto fail;
    }
    if ((st = dcp_model_config_read(dg, &dcfg)) || (st = dcp_tokenizer_create(dg, &dtok))) goto fail;
    what = "opening devices";
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = o.devices;
    if ((st = dcp_context_create(&cc, &ctx))) goto fail;
    if ((uint32_t)dcp_context_device_count(ctx) < o.tp) {
        fprintf(stderr, "%s: --tp %u needs %u devices; %d are open (--devices, DCP_VK_DEVICES)\n", p, o.tp, o.tp,
                dcp_context_device_count(ctx));
        rc = DCP_EXIT_USAGE;
        goto out;
    }
    dcp_device *devs[64];
    for (uint32_t i = 0; i < o.tp && i < 64; i++) devs[i] = dcp_context_device(ctx, (int)i);
    dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    lc.devices = devs;
    lc.count = o.tp;
    lc.tp = o.tp;
    lc.dcp = o.dcp;
    what = "loading the models";
    if ((st = dcp_model_load(&lc, g, &cfg, &m)) || (st = dcp_model_load(&lc, dg, &dcfg, &dm))) goto fail;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 2 * o.quote + o.n + 16;
    sc.max_seqs = 1;
    sc.max_rows = o.k + 1 > 32 ? o.k + 1 : 32;
    sc.max_logits = sc.max_rows;
    what = "creating the run states";
    if ((st = dcp_model_state_create(m, &sc, &s))) goto fail;
    sc.max_logits = 0;
    if ((st = dcp_model_state_create(dm, &sc, &ds))) goto fail;
    quote = malloc((o.quote + o.n) * sizeof *quote);
    prompt = malloc((2 * o.quote + 8) * sizeof *prompt);
    base.toks = malloc(o.n * sizeof *base.toks);
    spec.toks = malloc(o.n * sizeof *spec.toks);
    bos = malloc(sizeof *bos);
    if (!quote || !prompt || !base.toks || !spec.toks || !bos) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    /* The self-quoting prompt: BOS, the model's greedy text from BOS, BOS and its first 4 tokens. */
    what = "the prompt's greedy text";
    bos[0] = dcp_tokenizer_bos(tok) >= 0 ? dcp_tokenizer_bos(tok) : 1;
    {
        bench_run q = {.toks = quote};
        if ((st = run_one(s, tok, NULL, bos, 1, o.quote, &q))) goto fail;
    }
    uint32_t np = 0;
    prompt[np++] = bos[0];
    memcpy(prompt + np, quote, o.quote * sizeof *prompt);
    np += o.quote;
    prompt[np++] = bos[0];
    memcpy(prompt + np, quote, 4 * sizeof *prompt);
    np += 4;
    if (!o.json)
        printf("dcp-vk-bench spec: %s (%u layers) at TP %u, DCP %u on %s; draft %s (%u layers); k %u, %u tokens per "
               "request, decode tokens per wall second and per CPU second (best of %u each)\n"
               "%-28s %9s %9s %7s %9s %9s %7s %6s %7s %8s %7s %5s\n",
               o.model, cfg.n_layer, o.tp, o.dcp, dcp_device_get_info(devs[0])->name,
               o.draft ? o.draft : "the target cut", dcfg.n_layer, o.k, o.n, o.reps, "case", "tok/s", "spec", "speedup",
               "tok/cpu-s", "spec", "speedup", "drafts", "drafted", "accepted", "rate", "mean");
    dcp_spec_config ng = DCP_SPEC_CONFIG_DEFAULT, dr = DCP_SPEC_CONFIG_DEFAULT;
    ng.method = DCP_SPEC_NGRAM;
    ng.num_speculative_tokens = o.k;
    ng.prompt_lookup_max = 4;
    ng.prompt_lookup_min = 2;
    dr.method = DCP_SPEC_DRAFT;
    dr.num_speculative_tokens = o.k;
    dr.draft = ds;
    dr.draft_tokenizer = dtok;
    what = "running the requests";
    rc = DCP_EXIT_OK;
    const struct {
        const char *name;
        const dcp_spec_config *sp;
        const int32_t *prompt;
        uint32_t np;
    } cases[] = {
        {"ngram, self-quoting prompt", &ng, prompt, np},
        {"draft, self-quoting prompt", &dr, prompt, np},
        {"ngram, BOS alone", &ng, bos, 1},
        {"draft, BOS alone", &dr, bos, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0] && rc == DCP_EXIT_OK; c++) {
        /* Without and with, alternately, the best of each (a shared machine slows both alike). */
        double best_base = 0.0, best_spec = 0.0, cpu_base = 0.0, cpu_spec = 0.0;
        for (uint32_t rep = 0; rep < o.reps; rep++) {
            if ((st = run_one(s, tok, NULL, cases[c].prompt, cases[c].np, o.n, &base))) goto fail;
            if ((st = run_one(s, tok, cases[c].sp, cases[c].prompt, cases[c].np, o.n, &spec))) goto fail;
            if (base.tps > best_base) best_base = base.tps;
            if (spec.tps > best_spec) best_spec = spec.tps;
            if (base.tps_cpu > cpu_base) cpu_base = base.tps_cpu;
            if (spec.tps_cpu > cpu_spec) cpu_spec = spec.tps_cpu;
        }
        base.tps = best_base;
        spec.tps = best_spec;
        base.tps_cpu = cpu_base;
        spec.tps_cpu = cpu_spec;
        rc = report(&o, cases[c].name, &base, &spec);
    }
    goto out;
fail:
    dcp_cli_report(p, what, st);
    rc = st == DCP_ERR_INVALID_ARGUMENT || st == DCP_ERR_CONFIG ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
out:
    free(quote);
    free(prompt);
    free(bos);
    free(base.toks);
    free(spec.toks);
    dcp_model_state_destroy(ds);
    dcp_model_state_destroy(s);
    dcp_model_destroy(dm);
    dcp_model_destroy(m);
    dcp_context_destroy(ctx);
    dcp_tokenizer_destroy(dtok);
    dcp_tokenizer_destroy(tok);
    dcp_gguf_close(dg);
    dcp_gguf_close(g);
    free(dbytes);
    return rc;
}
