/* dcp-vk-run: text generation from a GGUF llama-family model. Parses and validates the options,
 * loads the model onto Vulkan devices (in one process, or spread over the processes of
 * `mpiexec -n P`), prefills the prompt in batches, streams the generated text, and prints the speed
 * summary (human or JSON). See --help. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "dcpvk/comm.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/model_config.h"
#include "dcpvk/tokenizer.h"
#include "dcpvk/vk.h"
#include "run/run.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct load_progress {
    double start;
    int shown;
} load_progress;

/* Shows loading progress on stderr once loading has taken more than half a second. */
static void on_progress(void *user, uint64_t done, uint64_t total)
{
    load_progress *p = user;
    if (now_s() - p->start < 0.5 && !p->shown) return;
    p->shown = 1;
    fprintf(stderr, "\rloading model: %3.0f%% (%llu / %llu MiB)", total ? 100.0 * done / total : 100.0,
            (unsigned long long)(done >> 20), (unsigned long long)(total >> 20));
    if (done >= total) fprintf(stderr, "\n");
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

/* Opens the model (or generates the test model into gen_path), reads its hyperparameters and
 * tokenizer, and validates the options against them. Returns 0, RUN_EXIT_USAGE or RUN_EXIT_RUNTIME. */
static int open_model(const char *prog, const run_options *o, const char **model, char *gen_path, size_t cap,
                      int verbose, dcp_gguf **g, dcp_model_config *mc, dcp_tokenizer **tok)
{
    dcp_status st;
    *model = o->model;
    if (!*model) {
        const char *tmp = getenv("TMPDIR");
        snprintf(gen_path, cap, "%s/dcp-vk-test-model-%ld.gguf", tmp && *tmp ? tmp : "/tmp", (long)getpid());
        dcp_test_model_config tc = DCP_TEST_MODEL_CONFIG_DEFAULT;
        if ((st = dcp_gguf_make_test_model(gen_path, &tc))) {
            fail(prog, "generating the test model", st);
            return RUN_EXIT_RUNTIME;
        }
        if (verbose)
            fprintf(stderr, "%s: no -m given: using the project's generated test model (llama, %u layers, "
                            "embedding %u, %u heads, %u KV heads, seeded random weights: the text is noise), "
                            "written to %s\n", prog, tc.n_layer, tc.n_embd, tc.n_head, tc.n_head_kv, gen_path);
        *model = gen_path;
    }
    if ((st = dcp_gguf_open(*model, g))) {
        fail(prog, "reading the model", st);
        return RUN_EXIT_RUNTIME;
    }
    if (gen_path[0]) remove(gen_path); /* mapped: the file may go */
    if ((st = dcp_model_config_read(*g, mc))) {
        fail(prog, "reading the model's hyperparameters", st);
        return RUN_EXIT_RUNTIME;
    }
    if (run_validate(o, mc->n_head, mc->n_head_kv, prog)) return RUN_EXIT_USAGE;
    if ((st = dcp_tokenizer_create(*g, tok))) {
        fail(prog, "reading the tokenizer", st);
        return RUN_EXIT_RUNTIME;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *prog = argv[0];
    /* Under an MPI launcher every process runs all of this; they agree on the exit code at each
     * phase (run_world_agree) and process 0 prints the text and the summary. */
    run_world world;
    int rc = run_world_init(&argc, &argv, &world, prog);
    if (rc) return rc;
    const int mpi = world.nproc > 1, lead = world.proc == 0;
    if (mpi) msg_proc = world.proc;
    run_quiet(!lead);
    int lost = 0; /* a failure the other processes may not see (they wait in a collective) */
    run_options o;
    rc = run_world_agree(&world, run_parse(argc, argv, &o));
    if (rc) goto finish;
    if (o.help) {
        if (lead) run_print_help(prog);
        goto finish;
    }
    dcp_status st;
    dcp_gguf *g = NULL;
    dcp_tokenizer *tok = NULL;
    dcp_context *ctx = NULL;
    dcp_model *w = NULL;
    dcp_model_state *s = NULL;
    dcp_sampler *smp = NULL;
    dcp_detokenizer *detok = NULL;
    int32_t *prompt = NULL, *gen = NULL;
    float *logits = NULL;
    char *text = NULL;
    size_t text_len = 0, n_prompt = 0;
    char gen_path[512] = "";
    const char *model = NULL;
    dcp_model_config mc;
    rc = run_world_agree(&world, open_model(prog, &o, &model, gen_path, sizeof gen_path, lead, &g, &mc, &tok));
    if (rc) goto done;
    /* This process's TP ranks [first, first + nl): all of them in one process. */
    uint32_t first = 0, nl = o.tp;
    rc = run_world_agree(&world, run_world_split(&world, o.tp, o.dcp, &first, &nl, prog));
    if (rc) goto done;
    rc = RUN_EXIT_RUNTIME;
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = o.devices;
    char same_dev[4096], own_dev[4096];
    const char *env_devices = getenv("DCP_VK_DEVICES");
    if (mpi && (o.devices || (env_devices && *env_devices))) {
        int drc = run_world_devices(&world, o.devices ? o.devices : env_devices, first, nl, o.tp, own_dev,
                                    sizeof own_dev, prog);
        if ((rc = run_world_agree(&world, drc))) goto done;
        rc = RUN_EXIT_RUNTIME;
        cc.devices = own_dev;
    } else if (!o.devices && !(env_devices && *env_devices) && o.tp > 1) {
        /* No device list: TP ranks on logical devices of physical device 0 unless there are enough
         * physical devices (then one each). */
        dcp_context *probe = NULL;
        int phys = 0;
        if (dcp_context_create(&cc, &probe) == DCP_OK) phys = dcp_context_physical_device_count(probe);
        dcp_context_destroy(probe);
        size_t n = 0;
        for (uint32_t r = 0; r < nl; r++)
            n += (size_t)snprintf(same_dev + n, sizeof same_dev - n, r ? ",%u" : "%u",
                                  phys >= (int)o.tp ? first + r : 0u);
        cc.devices = same_dev;
        if (phys < (int)o.tp && lead)
            fprintf(stderr, "%s: %d physical device(s) for %u TP ranks: running the ranks on %u logical devices "
                            "of physical device 0 (--devices or DCP_VK_DEVICES choose others)\n",
                    prog, phys, o.tp, o.tp);
    }
    int crc = 0;
    if ((st = dcp_context_create(&cc, &ctx))) {
        fail(prog, "creating the Vulkan devices", st);
        crc = st == DCP_ERR_INVALID_ARGUMENT ? RUN_EXIT_USAGE : RUN_EXIT_RUNTIME;
    } else if (dcp_context_device_count(ctx) < (int)nl) {
        fprintf(stderr, "%s: --tensor-parallel-size %u needs %u devices; the device list gives %d (--devices or "
                        "DCP_VK_DEVICES, e.g. 0,0,0,0 for four logical devices on device 0)\n",
                prog, o.tp, nl, dcp_context_device_count(ctx));
        crc = RUN_EXIT_USAGE;
    }
    if ((rc = run_world_agree(&world, crc))) goto done;
    rc = RUN_EXIT_RUNTIME;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_device *devs[1024];
    for (uint32_t r = 0; r < nl; r++) devs[r] = dcp_context_device(ctx, (int)r);
    load_progress lp = {now_s(), 0};
    double t_load = now_s();
    int wrc = 0;
    dcp_model_load_config wc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    wc.devices = devs;
    wc.count = nl;
    wc.first_rank = first;
    wc.tp = o.tp;
    wc.dcp = o.dcp;
    wc.q_replicate = o.q_replicate;
    wc.progress = lead ? on_progress : NULL;
    wc.progress_user = &lp;
    if ((st = dcp_model_load(&wc, g, &mc, &w))) {
        fail(prog, "loading the weights", st);
        wrc = RUN_EXIT_RUNTIME;
    }
    if ((rc = run_world_agree(&world, wrc))) goto done;
    rc = RUN_EXIT_RUNTIME;
    t_load = dcp_mpi_max(now_s() - t_load);
    dcp_model_state_config lc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    lc.n_ctx = o.ctx;
    lc.block_size = o.block_size;
    lc.kv_dtype = strcmp(o.kv_dtype, "f32") == 0 ? DCP_DTYPE_F32 : DCP_DTYPE_F16;
    lc.max_rows = o.prefill_chunk;
    lc.interleave = o.interleave;
    lc.backend = strcmp(o.backend, "ag_rs") == 0 ? DCP_CP_AG_RS : DCP_CP_A2A;
    if ((st = dcp_model_state_create(w, &lc, &s))) {
        fail(prog, "creating the run state", st);
        goto done;
    }
    dcp_sampler_config sc = {o.temp, o.top_k, o.top_p, o.seed};
    if ((st = dcp_sampler_create(&sc, mc.n_vocab, &smp))) {
        fail(prog, "sampler", st);
        rc = RUN_EXIT_USAGE;
        goto done;
    }
    unsigned flags = dcp_tokenizer_wants_bos(tok) ? DCP_TOKENIZE_ADD_BOS : 0;
    if ((st = dcp_tokenizer_encode(tok, o.prompt, strlen(o.prompt), flags, &prompt, &n_prompt))) {
        fail(prog, "tokenizing the prompt", st);
        goto done;
    }
    if (n_prompt == 0) {
        int32_t bos = dcp_tokenizer_bos(tok);
        free(prompt);
        prompt = malloc(sizeof *prompt);
        if (!prompt) goto done;
        prompt[0] = bos >= 0 ? bos : 0;
        n_prompt = 1;
    }
    uint32_t n_ctx = dcp_model_state_n_ctx(s);
    if (n_prompt + (size_t)o.n_predict > n_ctx) {
        fprintf(stderr, "%s: %zu prompt tokens + %u to generate exceed the context of %u tokens (-c)\n", prog,
                n_prompt, o.n_predict, n_ctx);
        rc = RUN_EXIT_USAGE;
        goto done;
    }
    /* The generated text continues the prompt: keep the leading space of its first piece unless the
     * prompt is only BOS. */
    int32_t bos_id = dcp_tokenizer_bos(tok);
    unsigned dflags = (n_prompt > 1 || prompt[0] != bos_id) ? DCP_DECODE_KEEP_LEADING_SPACE : 0;
    if ((st = dcp_detokenizer_create(tok, dflags, &detok))) {
        fail(prog, "detokenizer", st);
        goto done;
    }
    gen = malloc((o.n_predict + 1) * sizeof *gen);
    logits = malloc((size_t)mc.n_vocab * sizeof *logits);
    if (!gen || !logits) goto done;
    int greedy = dcp_sampler_is_greedy(smp);
    const dcp_device_info *info = dcp_device_get_info(dev);
    if (!o.json && lead) {
        fprintf(stderr, "%s: %s on %s (%s): %u layers, %u heads / %u KV heads, vocab %u; %zu prompt tokens; "
                        "TP %u, DCP %u; KV %s, block %u\n", prog, model, info->name, info->driver_name, mc.n_layer,
                mc.n_head, mc.n_head_kv, mc.n_vocab, n_prompt, o.tp, o.dcp, o.kv_dtype, o.block_size);
        if (mpi)
            fprintf(stderr, "%s: %d MPI processes, %u TP ranks each; process 0 prints\n", prog, world.nproc, nl);
    }

    if (!o.json && lead) {
        fputs(o.prompt, stdout); /* the prompt, then the continuation as it is generated */
        fflush(stdout);
    }
    /* Prompt: one batched prefill; the first generated token comes from its last logits. */
    double t0 = now_s();
    int32_t next = -1;
    uint32_t n_gen = 0;
    double t_prompt = 0, t_gen = 0;
    if (o.n_predict > 0) {
        if ((st = dcp_model_state_forward(s, prompt, (uint32_t)n_prompt, greedy ? NULL : logits, &next))) {
            fail(prog, "prefill", st);
            lost = 1;
            goto done;
        }
    } else if ((st = dcp_model_state_forward(s, prompt, (uint32_t)n_prompt, NULL, NULL))) {
        fail(prog, "prefill", st);
        lost = 1;
        goto done;
    }
    t_prompt = now_s() - t0;
    double t1 = now_s();
    int32_t eos = dcp_tokenizer_eos(tok);
    while (n_gen < o.n_predict) {
        if (!greedy) next = dcp_sampler_sample(smp, logits);
        /* Every process computed the same logits; process 0's choice is the one all feed on. */
        if (mpi && (st = dcp_mpi_bcast(&next, sizeof next, 0))) {
            fail(prog, "sharing the next token", st);
            lost = 1;
            goto done;
        }
        gen[n_gen++] = next;
        if (next == eos) break;
        const char *piece;
        size_t len;
        if ((st = dcp_detokenizer_push(detok, next, &piece, &len))) {
            fail(prog, "detokenizing", st);
            goto done;
        }
        if (len) {
            if (o.json) {
                char *t = realloc(text, text_len + len + 1);
                if (!t) {
                    lost = 1;
                    goto done;
                }
                text = t;
                memcpy(text + text_len, piece, len);
                text_len += len;
            } else if (lead) {
                fwrite(piece, 1, len, stdout);
                fflush(stdout);
            }
        }
        if (n_gen == o.n_predict) break;
        if ((st = dcp_model_state_forward(s, &next, 1, greedy ? NULL : logits, &next))) {
            fail(prog, "decode step", st);
            lost = 1;
            goto done;
        }
    }
    t_gen = now_s() - t1;
    {
        const char *piece;
        size_t len;
        if (dcp_detokenizer_flush(detok, &piece, &len) == DCP_OK && len) {
            if (o.json) {
                char *t = realloc(text, text_len + len + 1);
                if (!t) goto done;
                text = t;
                memcpy(text + text_len, piece, len);
                text_len += len;
            } else if (lead) {
                fwrite(piece, 1, len, stdout);
            }
        }
    }
    /* Decode steps: every generated token but the first (which the prefill produced) ran one. */
    uint32_t steps = n_gen > 0 ? n_gen - 1 : 0;
    /* How the exchanges moved, and the last decode step's rounds and host waits. */
    char xdesc[8192];
    dcp_model_state_describe_exchange(s, xdesc, sizeof xdesc);
    uint32_t x_rounds = steps ? dcp_model_state_last_rounds(s) : 0, x_waits = steps ? dcp_model_state_last_host_waits(s) : 0;
    double prompt_tps = t_prompt > 0 ? n_prompt / t_prompt : 0;
    double gen_tps = t_gen > 0 && steps ? steps / t_gen : 0;
    uint64_t kv_bytes = dcp_model_state_kv_bytes(s);
    uint64_t run_tokens = dcp_model_state_tokens_run(s);
    double xbytes = run_tokens ? (double)dcp_model_state_exchange_bytes(s) / run_tokens : 0.0;
    if (lead && o.json) { /* under MPI process 0 reports */
        printf("{\"model\": ");
        dcp_cli_json_string(stdout, model, strlen(model));
        printf(", \"device\": ");
        dcp_cli_json_string(stdout, info->name, strlen(info->name));
        printf(", \"tensor_parallel_size\": %u, \"decode_context_parallel_size\": %u, \"dcp_comm_backend\": \"%s\", "
               "\"interleave\": %u, \"block_size\": %u, \"kv_dtype\": \"%s\", \"prompt_tokens\": %zu, "
               "\"generated_tokens\": %u, \"decode_steps\": %u, \"prompt_seconds\": %.6f, \"generate_seconds\": %.6f, "
               "\"prompt_tokens_per_s\": %.3f, \"generated_tokens_per_s\": %.3f, \"load_seconds\": %.3f, "
               "\"kv_bytes_per_rank\": %llu, \"exchange_bytes_per_token\": %.1f, \"processes\": %d, "
               "\"decode_step_rounds\": %u, \"decode_step_host_waits\": %u, \"exchange\": ",
               o.tp, o.dcp, o.backend, o.interleave, o.block_size, o.kv_dtype, n_prompt, n_gen, steps, t_prompt,
               t_gen, prompt_tps, gen_tps, t_load, (unsigned long long)kv_bytes, xbytes, world.nproc, x_rounds, x_waits);
        dcp_cli_json_string(stdout, xdesc, strlen(xdesc));
        printf(", \"text\": ");
        dcp_cli_json_string(stdout, text ? text : "", text_len);
        printf(", \"tokens\": [");
        for (uint32_t i = 0; i < n_gen; i++) printf(i ? ", %d" : "%d", gen[i]);
        printf("]}\n");
    } else if (lead) {
        printf("\n");
        fflush(stdout);
        fprintf(stderr,
                "%s: prompt: %zu tokens in %.3f s = %.1f tokens/s; generation: %u tokens, %u decode steps in "
                "%.3f s = %.1f tokens/s\n"
                "%s: KV cache %.2f MiB per rank (%u ranks); exchange %.0f bytes per token sent by rank 0; "
                "weights %.2f MiB (%s) loaded in %.2f s\n",
                prog, n_prompt, t_prompt, prompt_tps, n_gen, steps, t_gen, gen_tps, prog, kv_bytes / 1048576.0, o.tp,
                xbytes, dcp_model_bytes(w) / 1048576.0, mpi ? "process 0's ranks" : "all ranks",
                t_load);
        fprintf(stderr, "%s: decode step: %u rounds, %u host waits; exchange:\n%s\n", prog, x_rounds, x_waits, xdesc);
    }
    rc = RUN_EXIT_OK;
done:
    free(text);
    free(gen);
    free(logits);
    free(prompt);
    dcp_detokenizer_destroy(detok);
    dcp_sampler_destroy(smp);
    dcp_model_state_destroy(s);
    dcp_model_destroy(w);
    dcp_context_destroy(ctx);
    dcp_tokenizer_destroy(tok);
    dcp_gguf_close(g);
    if (gen_path[0]) remove(gen_path);
finish:
    run_quiet(0);
    /* After a failure the others may not have seen, leave without MPI_Finalize: the launcher then
     * ends the whole job instead of leaving the others waiting. */
    if (!(lost && mpi)) run_world_finalize(&world);
    return rc;
}
