/* Transports and step synchronisation (issue 12):
 *   - the transports' table (where the memory lives, who copies) and what may be forced;
 *   - the per-pair choice (src/comm/select.h) on facts this machine cannot produce (device groups of
 *     several GPUs, different GPUs with dma-buf accepted, refused or slower than host memory, nodes)
 *     and the dma-buf probe's verdict;
 *   - the dma-buf negotiation on this machine's devices: lavapipe imports dma-bufs but cannot export
 *     one, so the negotiation ends in the fallback with that reason;
 *   - the step's synchronisation decision (host waits or GPU waits) on capabilities this machine
 *     cannot show (opaque-fd semaphores), and the timeline-semaphore path that it can (one VkDevice);
 *   - stories260K at TP 8 / DCP 2 (eight logical devices, or --mpi: processes x $DCP_VK_DEVICES),
 *     both DCP backends, over every transport: the same greedy ids as the reference and bitwise the
 *     same logits whichever transport carries the exchanges; rounds and host waits per decode step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/put.h"
#include "comm/select.h"
#include "dcpvk/comm.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/model_config.h"
#include "ref_model.h"
#include "step/step.h"
#include "stories_ref.h"
#include "testmodel/testmodel.h"
#include "vk/external.h"
#include "vkutil.h"

static int use_mpi, proc, nproc = 1;

static dcp_comm_pair_facts facts(int same_node, int same_proc, int same_physical)
{
    dcp_comm_pair_facts f;
    memset(&f, 0, sizeof f);
    f.same_node = same_node;
    f.same_proc = same_proc;
    f.multi_proc = !same_proc;
    f.same_physical = same_physical;
    f.opaque_ok = same_physical;
    f.host_ok = 1;
    snprintf(f.devgroup_why, sizeof f.devgroup_why, "not one device-group VkDevice");
    return f;
}

static dcp_transport choose(const dcp_comm_pair_facts *f, dcp_transport forced, char *why)
{
    dcp_transport t = DCP_TRANSPORT_AUTO;
    DCP_ASSERT_OK(dcp_comm_choose_pair(f, forced, &t, why, 512));
    return t;
}

static void test_choose_pair(void **state)
{
    (void)state;
    char why[512];
    /* Best first: devgroup, peer, dmabuf, hostmem, then the host path. */
    dcp_comm_pair_facts f = facts(1, 1, 1);
    f.devgroup_ok = 1;
    assert_int_equal(choose(&f, DCP_TRANSPORT_AUTO, why), DCP_TRANSPORT_DEVGROUP);
    f.devgroup_ok = 0;
    assert_int_equal(choose(&f, DCP_TRANSPORT_AUTO, why), DCP_TRANSPORT_PEER);
    assert_non_null(strstr(why, "opaque fd"));
    f.same_proc = 0;
    assert_int_equal(choose(&f, DCP_TRANSPORT_AUTO, why), DCP_TRANSPORT_PEER);
    assert_non_null(strstr(why, "Unix socket"));
    /* Different GPUs: dma-buf when accepted and faster, else host memory saying why not. */
    f = facts(1, 1, 0);
    f.dmabuf = DCP_DMABUF_OK;
    snprintf(f.dmabuf_why, sizeof f.dmabuf_why, "probe: faster");
    assert_int_equal(choose(&f, DCP_TRANSPORT_AUTO, why), DCP_TRANSPORT_DMABUF);
    f.dmabuf = DCP_DMABUF_REFUSED;
    snprintf(f.dmabuf_why, sizeof f.dmabuf_why, "dma-buf refused: device 1 cannot import it");
    assert_int_equal(choose(&f, DCP_TRANSPORT_AUTO, why), DCP_TRANSPORT_HOSTMEM);
    assert_non_null(strstr(why, "dma-buf not used: dma-buf refused: device 1 cannot import it"));
    f.dmabuf = dcp_comm_dmabuf_probe_verdict(3e6, 1e6, 4u << 20, f.dmabuf_why, sizeof f.dmabuf_why);
    assert_int_equal(f.dmabuf, DCP_DMABUF_SLOWER);
    assert_int_equal(choose(&f, DCP_TRANSPORT_AUTO, why), DCP_TRANSPORT_HOSTMEM);
    assert_non_null(strstr(why, "falling back"));
    printf("fallback: %s\n", why);
    /* Forcing dmabuf where the probe found it slower uses it anyway? No: refused, saying why. */
    assert_int_equal(dcp_comm_choose_pair(&f, DCP_TRANSPORT_DMABUF, &(dcp_transport){0}, why, sizeof why),
                     DCP_ERR_UNSUPPORTED);
    assert_non_null(strstr(dcp_last_error(), "slower than host memory"));
    /* No host-memory import: the host path (staging in a process, mpi between processes). */
    f.host_ok = 0;
    assert_int_equal(choose(&f, DCP_TRANSPORT_AUTO, why), DCP_TRANSPORT_STAGING);
    f.same_proc = 0;
    assert_int_equal(choose(&f, DCP_TRANSPORT_AUTO, why), DCP_TRANSPORT_MPI);
    /* Across nodes: mpi whatever is forced. */
    f = facts(0, 0, 1);
    assert_int_equal(choose(&f, DCP_TRANSPORT_PEER, why), DCP_TRANSPORT_MPI);
    assert_non_null(strstr(why, "different nodes"));
    /* Forced: where impossible, an error naming the transport and why; staging between processes is mpi. */
    f = facts(1, 1, 0);
    assert_int_equal(dcp_comm_choose_pair(&f, DCP_TRANSPORT_PEER, &(dcp_transport){0}, why, sizeof why),
                     DCP_ERR_UNSUPPORTED);
    assert_non_null(strstr(dcp_last_error(), "transport peer was forced"));
    assert_non_null(strstr(dcp_last_error(), "different physical devices"));
    assert_int_equal(dcp_comm_choose_pair(&f, DCP_TRANSPORT_DEVGROUP, &(dcp_transport){0}, why, sizeof why),
                     DCP_ERR_UNSUPPORTED);
    f.same_proc = 0;
    assert_int_equal(choose(&f, DCP_TRANSPORT_STAGING, why), DCP_TRANSPORT_MPI);
    f.host_ok = 0;
    assert_int_equal(dcp_comm_choose_pair(&f, DCP_TRANSPORT_HOSTMEM, &(dcp_transport){0}, why, sizeof why),
                     DCP_ERR_UNSUPPORTED);
    assert_non_null(strstr(dcp_last_error(), "VK_EXT_external_memory_host"));
    /* A rank's own block. */
    f = facts(1, 1, 1);
    f.self = 1;
    assert_int_equal(choose(&f, DCP_TRANSPORT_AUTO, why), DCP_TRANSPORT_SELF);
    assert_int_equal(choose(&f, DCP_TRANSPORT_HOSTMEM, why), DCP_TRANSPORT_HOSTMEM);
    /* The probe's verdict. */
    assert_int_equal(dcp_comm_dmabuf_probe_verdict(1e6, 3e6, 4u << 20, why, sizeof why), DCP_DMABUF_OK);
    assert_non_null(strstr(why, "dma-buf is faster"));
}

/* The transports' table (src/comm/select.c): the rows are what the communicator lays memory out
 * and copies by, so each must be one the code can carry out. */
static void test_transport_table(void **state)
{
    (void)state;
    for (int k = DCP_TRANSPORT_AUTO; k <= DCP_TRANSPORT_SELF; k++) {
        const dcp_transport t = (dcp_transport)k;
        const dcp_transport_info *x = dcp_transport_info_of(t);
        dcp_transport back = DCP_TRANSPORT_MIXED;
        assert_string_equal(x->name, dcp_transport_name(t));
        assert_int_equal(dcp_transport_parse(x->name, &back), x->forcible ? DCP_OK : DCP_ERR_INVALID_ARGUMENT);
        if (x->forcible) assert_int_equal(back, t);
        /* A sending GPU needs a way into the inbox; only fds carry a handle. */
        if (x->copier == DCP_COPIER_SENDER_GPU) assert_int_not_equal(x->reach, DCP_REACH_NONE);
        else assert_int_equal(x->reach, DCP_REACH_NONE);
        assert_true((x->reach == DCP_REACH_FD) == (x->handle != 0));
        /* Read in place only where the put area may be in the segment; the receiver's GPU copies
         * only out of the segment; the host copies only out of a host-visible put area. */
        if (x->in_place) assert_true(x->put == DCP_PUT_SEGMENT || x->put == DCP_PUT_ANYWHERE);
        if (x->copier == DCP_COPIER_RECEIVER_GPU) assert_int_equal(x->put, DCP_PUT_SEGMENT);
        if (dcp_transport_host_copies(x)) assert_int_equal(x->put, DCP_PUT_HOST);
        /* Every transport a pair can get copies somehow (auto and mixed are not a pair's). */
        if (t != DCP_TRANSPORT_AUTO && t != DCP_TRANSPORT_MIXED) assert_int_not_equal(x->copier, DCP_COPIER_NONE);
    }
    assert_string_equal(dcp_transport_name((dcp_transport)99), "unknown");
    assert_false(dcp_transport_info_of((dcp_transport)-1)->forcible);
    /* What can be forced: the config, else $DCP_VK_TRANSPORT under auto; never mixed or self. */
    dcp_transport t = DCP_TRANSPORT_AUTO;
    DCP_ASSERT_OK(dcp_comm_forced_transport(DCP_TRANSPORT_PEER, &t));
    assert_int_equal(t, DCP_TRANSPORT_PEER);
    assert_int_equal(dcp_comm_forced_transport(DCP_TRANSPORT_MIXED, &t), DCP_ERR_INVALID_ARGUMENT);
    assert_int_equal(dcp_comm_forced_transport(DCP_TRANSPORT_SELF, &t), DCP_ERR_INVALID_ARGUMENT);
    const char *old = getenv("DCP_VK_TRANSPORT");
    char *saved = old ? strdup(old) : NULL;
    setenv("DCP_VK_TRANSPORT", "hostmem", 1);
    DCP_ASSERT_OK(dcp_comm_forced_transport(DCP_TRANSPORT_AUTO, &t));
    assert_int_equal(t, DCP_TRANSPORT_HOSTMEM);
    DCP_ASSERT_OK(dcp_comm_forced_transport(DCP_TRANSPORT_STAGING, &t));
    assert_int_equal(t, DCP_TRANSPORT_STAGING);
    setenv("DCP_VK_TRANSPORT", "nvlink", 1);
    assert_int_equal(dcp_comm_forced_transport(DCP_TRANSPORT_AUTO, &t), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "$DCP_VK_TRANSPORT"));
    assert_non_null(strstr(dcp_last_error(), "\"nvlink\" is not one of"));
    if (saved) setenv("DCP_VK_TRANSPORT", saved, 1);
    else unsetenv("DCP_VK_TRANSPORT");
    free(saved);
    /* dma-buf is negotiated inside a node between different devices under auto, or when forced. */
    dcp_comm_pair_facts f = facts(1, 1, 0);
    assert_true(dcp_comm_dmabuf_wanted(&f, DCP_TRANSPORT_AUTO));
    assert_false(dcp_comm_dmabuf_wanted(&f, DCP_TRANSPORT_HOSTMEM));
    f = facts(1, 1, 1);
    assert_false(dcp_comm_dmabuf_wanted(&f, DCP_TRANSPORT_AUTO));
    assert_true(dcp_comm_dmabuf_wanted(&f, DCP_TRANSPORT_DMABUF));
    f.self = 1;
    assert_true(dcp_comm_dmabuf_wanted(&f, DCP_TRANSPORT_DMABUF));
    f = facts(0, 0, 0);
    assert_false(dcp_comm_dmabuf_wanted(&f, DCP_TRANSPORT_DMABUF));
}

/* The negotiation on this machine: two logical devices of physical device 0. */
static void test_dmabuf_negotiation(void **state)
{
    (void)state;
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = "0,0";
    cc.validation = 1;
    dcp_context *ctx;
    DCP_ASSERT_OK(dcp_context_create(&cc, &ctx));
    dcp_device *a = dcp_context_device(ctx, 0), *b = dcp_context_device(ctx, 1);
    dcp_dmabuf_verdict v = DCP_DMABUF_UNTRIED;
    char why[512] = "";
    DCP_ASSERT_OK(dcp_comm_dmabuf_negotiate(a, b, &v, why, sizeof why));
    printf("dma-buf between devices 0 and 1: %s\n", why);
    if (!(dcp_device_get_info(a)->mem_export & DCP_HANDLE_DMA_BUF)) {
        /* lavapipe: dma-buf import only. */
        assert_int_equal(v, DCP_DMABUF_REFUSED);
        assert_non_null(strstr(why, "cannot export dma-buf"));
    } else {
        assert_true(v == DCP_DMABUF_OK || v == DCP_DMABUF_SLOWER || v == DCP_DMABUF_REFUSED);
    }
    dcp_test_context_done(ctx);
}

static void test_step_sync_choose(void **state)
{
    (void)state;
    char why[512];
    dcp_step_sync m;
    dcp_comm_sync_caps caps[2] = {{0, DCP_SEM_SHARE_OPAQUE_FD, "opaque"}, {0, DCP_SEM_SHARE_NATIVE, "native"}};
    DCP_ASSERT_OK(dcp_step_sync_choose(-1, caps, 2, true, &m, why, sizeof why));
    assert_int_equal(m, DCP_STEP_SYNC_GPU);
    assert_non_null(strstr(why, "opaque fds"));
    DCP_ASSERT_OK(dcp_step_sync_choose(0, caps, 2, true, &m, why, sizeof why));
    assert_int_equal(m, DCP_STEP_SYNC_HOST);
    DCP_ASSERT_OK(dcp_step_sync_choose(-1, caps, 2, false, &m, why, sizeof why));
    assert_int_equal(m, DCP_STEP_SYNC_HOST);
    assert_non_null(strstr(why, "timeline"));
    /* An exchange through the host, or a pair without shared semaphores: host waits; gpu forced: refused. */
    caps[1] = (dcp_comm_sync_caps){1, DCP_SEM_SHARE_NATIVE, "ranks 0 -> 1 exchange through the host (mpi)"};
    DCP_ASSERT_OK(dcp_step_sync_choose(-1, caps, 2, true, &m, why, sizeof why));
    assert_int_equal(m, DCP_STEP_SYNC_HOST);
    assert_non_null(strstr(why, "(mpi)"));
    caps[1] = (dcp_comm_sync_caps){0, DCP_SEM_SHARE_NONE, "ranks 0 and 1 cannot share a semaphore"};
    assert_int_equal(dcp_step_sync_choose(1, caps, 2, true, &m, why, sizeof why), DCP_ERR_UNSUPPORTED);
    assert_non_null(strstr(dcp_last_error(), "cannot share a semaphore"));
    DCP_ASSERT_OK(dcp_step_sync_choose(-1, caps, 0, true, &m, why, sizeof why));
    assert_int_equal(m, DCP_STEP_SYNC_GPU);
    assert_non_null(strstr(why, "no exchanges"));
}

/* Timeline semaphores on one device: a chain of submissions each waiting on the previous one's
 * signal, the host waiting once; exporting one is refused where the driver cannot (lavapipe). What a
 * comm of this machine's logical devices reports for sharing them. */
static void test_semaphores(void **state)
{
    (void)state;
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = "0,0";
    cc.validation = 1;
    dcp_context *ctx;
    DCP_ASSERT_OK(dcp_context_create(&cc, &ctx));
    dcp_device *dev = dcp_context_device(ctx, 0);
    const dcp_device_info *inf = dcp_device_get_info(dev);
    assert_true(inf->timeline_semaphore);
    dcp_sem *sem;
    DCP_ASSERT_OK(dcp_sem_create(dev, 0, &sem));
    dcp_buffer *buf;
    DCP_ASSERT_OK(dcp_buffer_create(dev, 64, DCP_MEMORY_HOST, &buf));
    dcp_cmd *cmd[4];
    for (uint32_t k = 0; k < 4; k++) {
        DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd[k]));
        DCP_ASSERT_OK(dcp_cmd_fill(cmd[k], buf, 4 * k, 4, 100 + k));
        dcp_cmd_barrier_host(cmd[k]);
        uint64_t v = k;
        DCP_ASSERT_OK(dcp_cmd_submit_timeline(cmd[k], 1, &sem, &v, sem, k + 1));
    }
    DCP_ASSERT_OK(dcp_sem_wait(sem, 4));
    uint64_t v = 0;
    DCP_ASSERT_OK(dcp_sem_value(sem, &v));
    assert_int_equal(v, 4);
    for (uint32_t k = 0; k < 4; k++) {
        DCP_ASSERT_OK(dcp_cmd_wait(cmd[k]));
        assert_int_equal(((uint32_t *)dcp_buffer_map(buf))[k], 100 + k);
        dcp_cmd_destroy(cmd[k]);
    }
    dcp_buffer_destroy(buf);
    dcp_sem_destroy(sem);
    dcp_sem *ex = NULL;
    if (!(inf->sem_export & DCP_HANDLE_OPAQUE_FD)) {
        assert_int_equal(dcp_sem_create(dev, DCP_HANDLE_OPAQUE_FD, &ex), DCP_ERR_UNSUPPORTED);
        assert_null(ex);
    }
    /* Two VkDevices of one physical device: they share a semaphore only as an opaque fd. */
    dcp_device *two[2] = {dev, dcp_context_device(ctx, 1)};
    dcp_comm *comm;
    dcp_comm_config ccfg = DCP_COMM_CONFIG_DEFAULT;
    ccfg.transport = DCP_TRANSPORT_PEER;
    DCP_ASSERT_OK(dcp_comm_init_local(two, 2, &ccfg, &comm));
    dcp_comm_sync_caps caps;
    dcp_comm_sync_caps_get(comm, &caps);
    printf("two logical devices: host work %d, semaphores %d: %s\n", caps.host_work, (int)caps.share, caps.why);
    assert_int_equal(caps.host_work, 0);
    if (!(inf->sem_export & DCP_HANDLE_OPAQUE_FD)) assert_int_equal(caps.share, DCP_SEM_SHARE_NONE);
    dcp_comm_destroy(comm);
    dcp_test_context_done(ctx);
}

/* ---- the model over every transport -------------------------------------------------------- */

typedef struct model_run {
    float *logits;       /* [steps][V] of process 0 */
    uint32_t rounds, host_waits;
    char exchange[8192];
} model_run;

static void run_model(dcp_context *ctx, const dcp_gguf *g, const dcp_model_config *cfg, uint32_t tp, uint32_t dcp,
                      dcp_cp_backend backend, uint32_t prefill, uint32_t steps, model_run *out)
{
    const uint32_t nl = (uint32_t)dcp_context_device_count(ctx), V = cfg->n_vocab;
    dcp_device *devs[16];
    for (uint32_t i = 0; i < nl; i++) devs[i] = dcp_context_device(ctx, (int)i);
    dcp_model *w;
    DCP_ASSERT_OK(dcp_test_model_load(devs, (uint32_t)proc * nl, nl, tp, dcp, false, g, cfg, &w));
    dcp_model_state_config lc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    lc.kv_dtype = DCP_DTYPE_F32;
    lc.n_ctx = 64;
    lc.max_rows = 8;
    lc.block_size = 16;
    lc.interleave = 1;
    lc.backend = backend;
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(w, &lc, &s));
    dcp_model_state_describe_exchange(s, out->exchange, sizeof out->exchange);
    DCP_ASSERT_OK(dcp_model_state_forward(s, stories_ref, prefill - 1, NULL, NULL));
    int32_t tok = stories_ref[prefill - 1], next = -1;
    for (uint32_t k = 0; k < steps; k++) {
        DCP_ASSERT_OK(dcp_model_state_forward(s, &tok, 1, out->logits + (uint64_t)k * V, &next));
        if (next != stories_ref[prefill + k])
            fail_msg("process %d: TP %u DCP %u %s, step %u: generated id %d, reference %d (exchanges: %s)", proc, tp, dcp,
                     dcp_cp_backend_name(backend), prefill - 1 + k, next, stories_ref[prefill + k], out->exchange);
        tok = next;
    }
    out->rounds = dcp_model_state_last_rounds(s);
    out->host_waits = dcp_model_state_last_host_waits(s);
    dcp_model_state_destroy(s);
    dcp_model_destroy(w);
}

static void test_model_transports(void **state)
{
    dcp_context *ctx = *state;
    const uint32_t nl = (uint32_t)dcp_context_device_count(ctx), tp = nl * (uint32_t)nproc, dcp = 2;
    if (tp != 8) fail_msg("TP 8 needs 8 ranks: got %d processes x %u devices", nproc, nl);
    dcp_gguf *g;
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &g));
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    const uint32_t prefill = 5, steps = 4, V = cfg.n_vocab;
    static const char *const ts[4] = {"staging", "hostmem", "peer", "auto"};
    model_run run[4];
    for (int be = 0; be < 2; be++) {
        dcp_cp_backend backend = be ? DCP_CP_AG_RS : DCP_CP_A2A;
        for (int t = 0; t < 4; t++) {
            run[t].logits = malloc((uint64_t)steps * V * sizeof(float));
            setenv("DCP_VK_TRANSPORT", ts[t], 1);
            run_model(ctx, g, &cfg, tp, dcp, backend, prefill, steps, &run[t]);
            unsetenv("DCP_VK_TRANSPORT");
            if (t > 0 && memcmp(run[t].logits, run[0].logits, (uint64_t)steps * V * sizeof(float)))
                fail_msg("process %d: %s: logits over transport %s differ from staging's bits", proc,
                         dcp_cp_backend_name(backend), ts[t]);
            /* Host-synchronised rounds here (lavapipe: no external semaphores): one wait per round. */
            assert_int_equal(run[t].host_waits, run[t].rounds);
            if (proc == 0)
                printf("TP %u DCP %u %s, DCP_VK_TRANSPORT=%s: %u greedy ids match, logits bitwise equal to staging's; "
                       "decode step: %u rounds, %u host waits\n%s\n",
                       tp, dcp, dcp_cp_backend_name(backend), ts[t], steps, run[t].rounds, run[t].host_waits,
                       run[t].exchange);
        }
        for (int t = 0; t < 4; t++) free(run[t].logits);
    }
    dcp_gguf_close(g);
}

static int setup(void **state)
{
    *state = dcp_test_context();
    return 0;
}

static int teardown(void **state)
{
    dcp_test_context_done(*state);
    return 0;
}

int main(int argc, char **argv)
{
    use_mpi = argc > 1 && strcmp(argv[1], "--mpi") == 0;
    if (use_mpi && dcp_mpi_init(&argc, &argv, &proc, &nproc) != DCP_OK) {
        fprintf(stderr, "dcp_mpi_init: %s\n", dcp_last_error());
        return 1;
    }
    const struct CMUnitTest unit[] = {
        cmocka_unit_test(test_choose_pair),
        cmocka_unit_test(test_transport_table),
        cmocka_unit_test(test_step_sync_choose),
        cmocka_unit_test(test_dmabuf_negotiation),
        cmocka_unit_test(test_semaphores),
    };
    const struct CMUnitTest model[] = {
        cmocka_unit_test(test_model_transports),
    };
    int rc = 0;
    const int model_only = use_mpi || (argc > 1 && strcmp(argv[1], "model") == 0);
    if (!model_only) rc |= cmocka_run_group_tests_name("units", unit, NULL, NULL);
    if (model_only)
        rc |= cmocka_run_group_tests_name("model", model, setup, teardown);
    if (use_mpi) dcp_mpi_finalize();
    return rc;
}
