/* dcp-vk-bench comm: latency and bandwidth of the exchanges, as the engine's steps record them
 * (src/comm/put.h on the step layer: the sender's put, the transport's pushes, the host part, the
 * receiver's pulls and reads), for every collective and every transport, in one process (the devices
 * of DCP_VK_DEVICES / --devices) or under mpiexec (processes x devices); then a decode step of a
 * generated model over the same ranks, split into compute (device timestamps) and exchange.
 *
 * Collectives, `size` bytes per block (f32):
 *   all_gather      each rank's block to every rank, read by copies into [N][size];
 *   reduce_scatter  block d of each rank to rank d, summed on the receiver (part_sum);
 *   all_to_all      block d of each rank to rank d, read by copies;
 *   all_reduce      the engine's all-reduce: every rank's block gathered, summed on every receiver;
 *   dcp_a2a         the DCP a2a exchange: one (O, LSE) message of `size` bytes per destination;
 *   dcp_ag_rs       the DCP ag_rs exchanges: the LSEs gathered (size / (D + 1) bytes, D = 128), then
 *                   the scaled O reduce-scattered (the rest), two exchanges.
 * Latency: the median wall-clock time of the step (max over processes); bandwidth: bytes each rank
 * sends to the others per second. Each (collective, size) is recorded once and replayed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attn/cp_internal.h"
#include "bench/bench.h"
#include "comm/put.h"
#include "cli/cli.h"
#include "common/error.h"
#include "dcpvk/comm.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/model_config.h"
#include "step/step.h"
#include "testmodel/testmodel.h"

enum { NCOLL = 6, MAXT = 8 };
static const char *const coll_names[NCOLL + 1] = {"all_gather", "reduce_scatter", "all_to_all",
                                                  "all_reduce", "dcp_a2a",        "dcp_ag_rs", NULL};
static const char *const transport_names[] = {"auto", "devgroup", "hostmem", "staging", "mpi", "peer", "dmabuf", NULL};

typedef struct comm_opts {
    uint32_t min_bytes, max_bytes, iters, model_layers, model_steps;
    int json, model;
    const char *devices;
    int transports[MAXT], ntransports;
    int colls[NCOLL], ncolls;
} comm_opts;

static void usage(FILE *f)
{
    dcp_cli_print_text(f, "usage: dcp-vk-bench comm [options]   (in one process, or under mpiexec -n P)\n"
               "  --min-bytes N      smallest block (default 1024)\n"
               "  --max-bytes N      largest block; sizes grow by 4x (default 16777216)\n"
               "  --iters N          timed replays per size; the median is reported (default 20)\n"
               "  --transports LIST  comma-separated from auto, devgroup, peer, dmabuf, hostmem, staging, mpi\n"
               "                     (default auto,peer,hostmem,staging,devgroup,dmabuf; those a pair cannot use\n"
               "                     are skipped with the reason)\n"
               "  --collectives LIST comma-separated from all_gather, reduce_scatter, all_to_all, all_reduce,\n"
               "                     dcp_a2a, dcp_ag_rs (default all)\n"
               "  --no-model         skip the decode step of a generated model (split into compute and exchange)\n"
               "  --model-layers N   layers of that model (default 4); --model-steps N decode steps (default 8)\n"
               "  --json             JSON lines instead of a table\n"
               "  --devices LIST     this process's devices (default $DCP_VK_DEVICES, else all)\n");
}

/* Parses a comma-separated list of names against choices into idx (at most max); -1 on error. */
static int parse_list(const char *p, const char *opt, const char *v, const char *const *choices, int *idx, int max)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = dcp_cli_choice(p, opt, t, choices);
        if (k < 0 || n >= max) return -1;
        idx[n++] = k;
    }
    return n;
}

static int parse(int argc, char **argv, comm_opts *o)
{
    const char *p = "dcp-vk-bench comm";
    *o = (comm_opts){1024, 16u << 20, 20, 4, 8, 0, 1, NULL, {0}, 0, {0}, 0};
    static const int def_t[6] = {0, 5, 2, 3, 1, 6};
    memcpy(o->transports, def_t, sizeof def_t);
    o->ntransports = 6;
    for (int k = 0; k < NCOLL; k++) o->colls[k] = k;
    o->ncolls = NCOLL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int ok = 1;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--min-bytes")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 4, 1u << 30, &o->min_bytes);
        else if (!strcmp(a, "--max-bytes")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 4, 1u << 30, &o->max_bytes);
        else if (!strcmp(a, "--iters")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, 100000, &o->iters);
        else if (!strcmp(a, "--model-layers")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, 256, &o->model_layers);
        else if (!strcmp(a, "--model-steps")) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, 10000, &o->model_steps);
        else if (!strcmp(a, "--no-model")) o->model = 0;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--devices")) ok = (o->devices = dcp_cli_value(p, argc, argv, &i)) != NULL;
        else if (!strcmp(a, "--transports")) {
            ok = (v = dcp_cli_value(p, argc, argv, &i)) != NULL;
            if (ok) ok = (o->ntransports = parse_list(p, a, v, transport_names, o->transports, MAXT)) > 0;
        } else if (!strcmp(a, "--collectives")) {
            ok = (v = dcp_cli_value(p, argc, argv, &i)) != NULL;
            if (ok) ok = (o->ncolls = parse_list(p, a, v, coll_names, o->colls, NCOLL)) > 0;
        } else {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", p, a);
            ok = 0;
        }
        if (!ok) return -1;
    }
    if (o->min_bytes % 4 || o->max_bytes % 4 || o->min_bytes > o->max_bytes) {
        fprintf(stderr, "%s: --min-bytes %u and --max-bytes %u must be multiples of 4, min <= max\n", p, o->min_bytes,
                o->max_bytes);
        return -1;
    }
    return 0;
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* Buffers of one local rank. */
typedef struct rank_bufs {
    dcp_buffer *src, *dst; /* [N][max] f32 */
} rank_bufs;

/* Records the receiver's side of an exchange of `kind` (copies, or part_sum for the summing ones). */
static dcp_status consume(dcp_comm *c, int i, dcp_cmd *cmd, dcp_coll kind, uint64_t slot, int sum, dcp_buffer *dst)
{
    const int N = dcp_comm_size(c);
    dcp_comm_buf in;
    uint64_t stride;
    dcp_comm_put_view(c, i, kind, slot, &in, &stride);
    dcp_status st = DCP_OK;
    if (sum) {
        uint64_t base = in.offset / 256 * 256;
        dcp_part_sum_params ps = {(uint32_t)(slot / 4), (uint32_t)N, (uint32_t)(stride / 4),
                                  (uint32_t)((in.offset - base) / 4), 0, 0};
        st = dcp_part_sum_record(cmd, &ps, in.buffer, base, dst, 0);
    } else {
        for (int s = 0; s < N && st == DCP_OK; s++)
            st = dcp_cmd_copy(cmd, in.buffer, in.offset + (uint64_t)s * stride, dst, (uint64_t)s * slot, slot);
    }
    dcp_cmd_barrier(cmd); /* received data -> the next round's writes */
    return st;
}

/* Records the put of kind / slot from src into local rank i's put area. */
static dcp_status put(dcp_comm *c, int i, dcp_cmd *cmd, dcp_coll kind, uint64_t slot, dcp_buffer *src)
{
    const int N = dcp_comm_size(c);
    dcp_comm_buf area = dcp_comm_put_area(c, i);
    uint64_t n = kind == DCP_COLL_ALL_GATHER || kind == DCP_COLL_ALL_REDUCE ? slot : slot * (uint64_t)N;
    dcp_status st = dcp_cmd_copy(cmd, src, 0, area.buffer, area.offset, n);
    dcp_comm_record_put(cmd);
    return st;
}

/* One collective as a step: the puts, its exchange(s), the receivers' reads. */
static dcp_status record_coll(dcp_step *step, dcp_comm *c, rank_bufs *rb, int coll, uint64_t size)
{
    dcp_status st = DCP_OK;
    const int L = dcp_comm_local_count(c);
    static const dcp_coll kinds[4] = {DCP_COLL_ALL_GATHER, DCP_COLL_REDUCE_SCATTER, DCP_COLL_ALL_TO_ALL,
                                      DCP_COLL_ALL_REDUCE};
    dcp_coll k1, k2 = DCP_COLL_REDUCE_SCATTER;
    uint64_t s1 = size, s2 = 0;
    int sum1, two = coll == 5;
    if (coll < 4) {
        k1 = kinds[coll];
        sum1 = coll == 1 || coll == 3;
    } else if (coll == 4) {
        k1 = DCP_COLL_ALL_TO_ALL;
        sum1 = 0;
    } else {
        k1 = DCP_COLL_ALL_GATHER; /* the LSEs, then the scaled O */
        s1 = (size / 129 + 3) / 4 * 4;
        if (s1 < 4) s1 = 4;
        s2 = size > s1 ? (size - s1 + 3) / 4 * 4 : 4;
        sum1 = 0;
    }
    for (int i = 0; i < L; i++) DCP_TRY(put(c, i, dcp_step_cmd(step, (uint32_t)i), k1, s1, rb[i].src));
    dcp_comm_xchg x = {c, k1, s1, s1};
    DCP_TRY(dcp_step_round(step, 1, &x));
    for (int i = 0; i < L; i++) {
        dcp_cmd *cmd = dcp_step_cmd(step, (uint32_t)i);
        DCP_TRY(consume(c, i, cmd, k1, s1, sum1, rb[i].dst));
        if (two) DCP_TRY(put(c, i, cmd, k2, s2, rb[i].src));
    }
    if (two) {
        x = (dcp_comm_xchg){c, k2, s2, s2};
        DCP_TRY(dcp_step_round(step, 1, &x));
        for (int i = 0; i < L; i++) DCP_TRY(consume(c, i, dcp_step_cmd(step, (uint32_t)i), k2, s2, 1, rb[i].dst));
    }
fail:
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Every collective and size over one transport. Returns 0, or -1 after printing why. */
static int bench_transport(const comm_opts *o, dcp_device **devs, int L, int t, int mpi, int lead)
{
    const char *p = "dcp-vk-bench comm";
    dcp_comm_config cc = DCP_COMM_CONFIG_DEFAULT;
    cc.transport = (dcp_transport)t;
    dcp_comm *c = NULL;
    dcp_status st = mpi ? dcp_comm_init_mpi(devs, L, &cc, &c) : dcp_comm_init_local(devs, L, &cc, &c);
    if (st == DCP_ERR_UNSUPPORTED) {
        if (lead) {
            if (o->json) {
                printf("{\"transport\": \"%s\", \"skipped\": ", transport_names[t]);
                dcp_cli_json_string(stdout, dcp_last_error(), strlen(dcp_last_error()));
                printf("}\n");
            } else {
                printf("transport %s: skipped: %s\n", transport_names[t], dcp_last_error());
            }
        }
        return 0;
    }
    if (st != DCP_OK) {
        dcp_cli_report(p, "creating the communicator", st);
        return -1;
    }
    const int N = dcp_comm_size(c);
    const dcp_device_info *inf = dcp_device_get_info(devs[0]);
    /* Blocks of [2][N][cap] must fit one buffer. */
    uint64_t max = o->max_bytes, fit = inf->max_storage_buffer_range / (2ull * N) / 256 * 256;
    if (max > fit) max = fit;
    char desc[4096];
    dcp_comm_describe(c, desc, sizeof desc);
    dcp_step *step = NULL;
    rank_bufs rb[64];
    memset(rb, 0, sizeof rb);
    int rc = -1;
    if (L > 64) goto done;
    st = dcp_comm_reserve(c, max);
    if (st == DCP_OK) st = dcp_step_create(devs, (uint32_t)L, &step);
    if (st == DCP_OK) st = dcp_step_add_comm(step, c);
    for (int i = 0; i < L && st == DCP_OK; i++) {
        st = dcp_buffer_create(devs[i], max * N, DCP_MEMORY_DEVICE, &rb[i].src);
        if (st == DCP_OK) st = dcp_buffer_create(devs[i], max * N, DCP_MEMORY_DEVICE, &rb[i].dst);
        if (st == DCP_OK) st = dcp_buffer_fill(rb[i].src, 0, max * N, 0x3f800000u);
    }
    if (st != DCP_OK) {
        dcp_cli_report(p, "preparing the benchmark", st);
        goto done;
    }
    const char *sync_why;
    bool replayed;
    st = dcp_step_begin(step, 0, &replayed); /* decides the synchronisation */
    if (st == DCP_OK) st = dcp_step_end(step);
    dcp_step_sync sync = dcp_step_sync_mode(step, &sync_why);
    if (lead && !o->json) {
        printf("\ntransport %s, %d ranks (%d process%s): %s\nrounds: %s (%s)\n", transport_names[t], N, N / L,
               N / L == 1 ? "" : "es", desc, sync == DCP_STEP_SYNC_GPU ? "gpu" : "host", sync_why);
        if (max < o->max_bytes)
            printf("(blocks capped at %llu bytes: [2][%d][block] mailboxes within maxStorageBufferRange %llu)\n",
                   (unsigned long long)max, N, (unsigned long long)inf->max_storage_buffer_range);
        printf("%-15s %10s %12s %12s %10s\n", "collective", "bytes", "latency_us", "GB/s_sent", "host_waits");
    }
    double *samples = malloc(sizeof *samples * o->iters);
    for (int ci = 0; ci < o->ncolls && st == DCP_OK && samples; ci++) {
        int coll = o->colls[ci];
        for (uint64_t size = o->min_bytes; size <= max && st == DCP_OK; size *= 4) {
            uint64_t key = dcp_step_key_mix(dcp_step_key_mix(DCP_STEP_KEY_SEED, (uint64_t)coll + 1), size);
            for (uint32_t it = 0; it <= o->iters && st == DCP_OK; it++) { /* iteration 0 records */
                if (mpi) dcp_mpi_barrier();
                double t0 = now_ns();
                st = dcp_step_begin(step, key, &replayed);
                if (st == DCP_OK && !replayed) {
                    st = record_coll(step, c, rb, coll, size);
                    if (st == DCP_OK) st = dcp_step_end(step);
                    else dcp_step_abort(step);
                }
                double ns = dcp_mpi_max(now_ns() - t0);
                if (it > 0) samples[it - 1] = ns;
            }
            if (st != DCP_OK) break;
            qsort(samples, o->iters, sizeof *samples, cmp_double);
            double med = samples[o->iters / 2];
            double sent = (double)size * (N - 1); /* each rank's blocks to the others */
            double gbs = sent / med;
            if (lead) {
                if (o->json)
                    printf("{\"transport\": \"%s\", \"ranks\": %d, \"processes\": %d, \"collective\": \"%s\", "
                           "\"bytes\": %llu, \"latency_us\": %.3f, \"sent_GBps\": %.4f, \"rounds\": %u, "
                           "\"host_waits\": %u, \"sync\": \"%s\", \"device\": \"%s\"}\n",
                           transport_names[t], N, N / L, coll_names[coll], (unsigned long long)size, med * 1e-3, gbs,
                           dcp_step_last_rounds(step), dcp_step_last_host_waits(step),
                           sync == DCP_STEP_SYNC_GPU ? "gpu" : "host", inf->name);
                else
                    printf("%-15s %10llu %12.1f %12.3f %10u\n", coll_names[coll], (unsigned long long)size, med * 1e-3,
                           gbs, dcp_step_last_host_waits(step));
            }
            if (size > max / 4) break;
        }
    }
    free(samples);
    if (st != DCP_OK) dcp_cli_report(p, "running the collectives", st);
    else rc = 0;
done:
    dcp_step_destroy(step);
    for (int i = 0; i < L && i < 64; i++) {
        dcp_buffer_destroy(rb[i].src);
        dcp_buffer_destroy(rb[i].dst);
    }
    dcp_comm_destroy(c);
    return rc;
}

/* A decode step of a generated model over every rank, per transport: compute and exchange. */
static int bench_model(const comm_opts *o, dcp_device **devs, int L, int proc, int nproc, int lead)
{
    const char *p = "dcp-vk-bench comm";
    const uint32_t tp = (uint32_t)(L * nproc), dcp = tp >= 4 && tp % 2 == 0 ? 2 : 1;
    char path[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/dcp-vk-bench-comm-%ld.gguf", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.n_embd = 512;
    mc.n_head = 8;
    mc.n_head_kv = 2;
    mc.head_dim = 64;
    mc.n_ff = 1536;
    mc.n_layer = o->model_layers;
    dcp_status st = dcp_gguf_make_test_model(path, &mc);
    dcp_gguf *g = NULL;
    dcp_model_config cfg;
    if (st == DCP_OK) st = dcp_gguf_open(path, &g);
    remove(path);
    if (st == DCP_OK) st = dcp_model_config_read(g, &cfg);
    if (st != DCP_OK) {
        dcp_cli_report(p, "generating the model", st);
        dcp_gguf_close(g);
        return -1;
    }
    if (lead && !o->json)
        printf("\ndecode step of a generated llama (%u layers, embedding %u, %u heads / %u KV heads) at TP %u, DCP %u:\n"
               "%-10s %8s %12s %12s %12s %8s %10s\n",
               cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_head_kv, tp, dcp, "transport", "backend", "step_us",
               "compute_us", "exchange_us", "rounds", "host_waits");
    int rc = 0;
    for (int ti = 0; ti < o->ntransports && rc == 0; ti++) {
        int t = o->transports[ti];
        for (int be = 0; be < (dcp > 1 ? 2 : 1) && rc == 0; be++) {
            setenv("DCP_VK_TRANSPORT", transport_names[t], 1);
            dcp_model *w = NULL;
            dcp_model_state *s = NULL;
            dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
            lc.devices = devs;
            lc.count = (uint32_t)L;
            lc.first_rank = (uint32_t)(proc * L);
            lc.tp = tp;
            lc.dcp = dcp;
            st = dcp_model_load(&lc, g, &cfg, &w);
            dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
            sc.n_ctx = 256;
            sc.max_rows = 16;
            sc.backend = be ? DCP_CP_AG_RS : DCP_CP_A2A;
            if (st == DCP_OK) st = dcp_model_state_create(w, &sc, &s);
            unsetenv("DCP_VK_TRANSPORT");
            if (st == DCP_ERR_UNSUPPORTED) { /* the transport cannot serve these ranks */
                dcp_clear_error();
                dcp_model_state_destroy(s);
                dcp_model_destroy(w);
                break;
            }
            double *cmp = malloc(sizeof(double) * 2 * o->model_steps), *ex = cmp ? cmp + o->model_steps : NULL;
            int32_t toks[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, next = 0;
            if (st == DCP_OK && !cmp) st = DCP_ERR_OUT_OF_MEMORY;
            if (st == DCP_OK) st = dcp_model_state_forward(s, toks, 16, NULL, &next);
            if (st == DCP_OK) dcp_model_state_set_timing(s, true);
            for (uint32_t k = 0; k <= o->model_steps && st == DCP_OK; k++) { /* step 0 records */
                st = dcp_model_state_forward(s, &next, 1, NULL, &next);
                if (nproc > 1 && st == DCP_OK) st = dcp_mpi_bcast(&next, sizeof next, 0);
                if (k > 0) dcp_model_state_last_timing(s, &cmp[k - 1], &ex[k - 1]);
            }
            if (st == DCP_OK) {
                for (uint32_t k = 0; k < o->model_steps; k++) {
                    cmp[k] = dcp_mpi_max(cmp[k]);
                    ex[k] = dcp_mpi_max(ex[k]);
                }
                qsort(cmp, o->model_steps, sizeof *cmp, cmp_double);
                qsort(ex, o->model_steps, sizeof *ex, cmp_double);
                double mc_ = cmp[o->model_steps / 2], me = ex[o->model_steps / 2];
                if (lead) {
                    if (o->json)
                        printf("{\"model_step\": true, \"transport\": \"%s\", \"backend\": \"%s\", \"tp\": %u, \"dcp\": %u, "
                               "\"layers\": %u, \"step_us\": %.2f, \"compute_us\": %.2f, \"exchange_us\": %.2f, "
                               "\"rounds\": %u, \"host_waits\": %u}\n",
                               transport_names[t], be ? "ag_rs" : "a2a", tp, dcp, cfg.n_layer, (mc_ + me) * 1e-3,
                               mc_ * 1e-3, me * 1e-3, dcp_model_state_last_rounds(s), dcp_model_state_last_host_waits(s));
                    else
                        printf("%-10s %8s %12.1f %12.1f %12.1f %8u %10u\n", transport_names[t], be ? "ag_rs" : "a2a",
                               (mc_ + me) * 1e-3, mc_ * 1e-3, me * 1e-3, dcp_model_state_last_rounds(s),
                               dcp_model_state_last_host_waits(s));
                }
            } else {
                dcp_cli_report(p, "the model step", st);
                rc = -1;
            }
            free(cmp);
            dcp_model_state_destroy(s);
            dcp_model_destroy(w);
        }
    }
    dcp_gguf_close(g);
    return rc;
}

static int st_ok_or_report(dcp_status st, const char *p)
{
    if (st != DCP_OK) dcp_cli_report(p, "starting MPI", st);
    return st != DCP_OK;
}

int dcp_bench_comm(int argc, char **argv)
{
    const char *p = "dcp-vk-bench comm";
    comm_opts o;
    int r = parse(argc, argv, &o);
    if (r) return r > 0 ? DCP_EXIT_OK : DCP_EXIT_USAGE;
    int proc = 0, nproc = 1;
    const char *ps = getenv("PMI_SIZE");
    if (!ps) ps = getenv("OMPI_COMM_WORLD_SIZE");
    int mpi = ps && atoi(ps) > 1; /* under mpiexec -n P > 1 */
    if (mpi && (st_ok_or_report(dcp_mpi_init(NULL, NULL, &proc, &nproc), p))) return DCP_EXIT_RUNTIME;
    const int lead = proc == 0;
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = o.devices;
    dcp_context *ctx = NULL;
    int rc = DCP_EXIT_OK;
    dcp_status st = dcp_context_create(&cc, &ctx);
    if (st != DCP_OK) {
        dcp_cli_report(p, "opening devices", st);
        rc = st == DCP_ERR_INVALID_ARGUMENT ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
        goto out;
    }
    int L = dcp_context_device_count(ctx);
    dcp_device *devs[64];
    if (L > 64) L = 64;
    for (int i = 0; i < L; i++) devs[i] = dcp_context_device(ctx, i);
    if (lead && !o.json)
        printf("dcp-vk-bench comm: %d process%s x %d device%s (%s); latency = median step time over %u replays\n", nproc,
               nproc == 1 ? "" : "es", L, L == 1 ? "" : "s", dcp_device_get_info(devs[0])->name, o.iters);
    for (int k = 0; k < o.ntransports && rc == DCP_EXIT_OK; k++)
        if (bench_transport(&o, devs, L, o.transports[k], nproc > 1, lead)) rc = DCP_EXIT_RUNTIME;
    if (rc == DCP_EXIT_OK && o.model && bench_model(&o, devs, L, proc, nproc, lead)) rc = DCP_EXIT_RUNTIME;
out:
    dcp_context_destroy(ctx);
    if (mpi) dcp_mpi_finalize();
    return rc;
}
