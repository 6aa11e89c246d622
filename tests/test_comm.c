/* Communicator: all_gather, reduce_scatter, all_to_all, all_reduce in f32 and f16 against host
 * results (so every transport gives the same bits), on every transport this machine offers, forced
 * for every pair: peer (opaque fds; across processes passed over a Unix socket), hostmem (one
 * allocation; across processes a POSIX shared-memory segment), staging / mpi (the host path), auto,
 * and devgroup when the devices run on a device-group VkDevice (DCP_VK_DEVICE_GROUPS=1 with one
 * device: a group of one); each pair's transport checked. In place, byte counters, selection
 * errors (a forced transport a pair cannot use, dma-buf refused on lavapipe). With --mpi the same
 * run over MPI (ranks = processes x $DCP_VK_DEVICES; $DCP_VK_NODE_PROCS makes nodes of that many
 * processes, so that pairs across "nodes" use mpi), and sub-communicators from
 * dcp_comm_init_mpi_split (contiguous and strided groups, singletons, processes left out). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/comm.h"
#include "vkutil.h"

static int use_mpi;
static int world_rank, world_size;

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

/* Value i of global rank g's send buffer for test `salt` (f16-exact, so f16 sums are comparable). */
static float val(uint32_t salt, int g, uint64_t i)
{
    dcp_test_rng r = {((uint64_t)salt << 40) ^ ((uint64_t)g << 20) ^ i};
    return dcp_f16_to_f32(dcp_f32_to_f16(dcp_test_rng_uniform(&r, -4.0f, 4.0f)));
}

static void put(void *p, dcp_dtype dt, uint64_t i, float x)
{
    if (dt == DCP_DTYPE_F32) ((float *)p)[i] = x;
    else ((uint16_t *)p)[i] = dcp_f32_to_f16(x);
}

static float get(const void *p, dcp_dtype dt, uint64_t i)
{
    return dt == DCP_DTYPE_F32 ? ((const float *)p)[i] : dcp_f16_to_f32(((const uint16_t *)p)[i]);
}

enum { AG, RS, A2A, AR };
static const char *names[4] = {"all_gather", "reduce_scatter", "all_to_all", "all_reduce"};

/* Runs collective `kind` and checks every local rank's result. in_place: recv == send. */
static void check_collective(dcp_comm *comm, int kind, dcp_dtype dt, uint64_t count, int in_place, uint32_t salt)
{
    const int N = dcp_comm_size(comm), L = dcp_comm_local_count(comm), first = dcp_comm_first_rank(comm);
    const uint32_t es = dcp_dtype_size(dt);
    uint64_t send_n = (kind == RS || kind == A2A) ? count * N : count;
    uint64_t recv_n = (kind == AG || kind == A2A) ? count * N : count;
    uint64_t buf_n = send_n > recv_n ? send_n : recv_n;
    dcp_buffer *sb[16], *rb[16];
    dcp_comm_buf send[16], recv[16];
    void *host = malloc(buf_n * 4);
    for (int l = 0; l < L; l++) {
        dcp_device *dev = dcp_comm_device(comm, l);
        DCP_ASSERT_OK(dcp_buffer_create(dev, buf_n * es + 64, DCP_MEMORY_DEVICE, &sb[l]));
        rb[l] = sb[l];
        if (!in_place) DCP_ASSERT_OK(dcp_buffer_create(dev, recv_n * es + 64, DCP_MEMORY_DEVICE, &rb[l]));
        for (uint64_t i = 0; i < send_n; i++) put(host, dt, i, val(salt, first + l, i));
        DCP_ASSERT_OK(dcp_buffer_upload(sb[l], 16, host, send_n * es));
        send[l] = (dcp_comm_buf){sb[l], 16};
        recv[l] = (dcp_comm_buf){rb[l], in_place ? 16 : 32};
    }
    uint64_t sent0 = dcp_comm_bytes_sent(comm, 0);
    switch (kind) {
    case AG: DCP_ASSERT_OK(dcp_comm_all_gather(send, recv, count, dt, comm)); break;
    case RS: DCP_ASSERT_OK(dcp_comm_reduce_scatter(send, recv, count, dt, DCP_RED_SUM, comm)); break;
    case A2A: DCP_ASSERT_OK(dcp_comm_all_to_all(send, recv, count, dt, comm)); break;
    case AR: DCP_ASSERT_OK(dcp_comm_all_reduce(send, recv, count, dt, DCP_RED_SUM, comm)); break;
    }
    assert_int_equal(dcp_comm_bytes_sent(comm, 0) - sent0, (uint64_t)(N - 1) * count * es);
    for (int l = 0; l < L; l++) {
        int g = first + l;
        DCP_ASSERT_OK(dcp_buffer_download(rb[l], recv[l].offset, host, recv_n * es));
        for (uint64_t i = 0; i < recv_n; i++) {
            float want;
            if (kind == AG) {
                want = val(salt, (int)(i / count), i % count);
            } else if (kind == A2A) {
                want = val(salt, (int)(i / count), (uint64_t)g * count + i % count);
            } else {
                float acc = 0.0f; /* rank order, f32 accumulation: the documented reduction */
                for (int s = 0; s < N; s++) acc += val(salt, s, (kind == RS ? (uint64_t)g * count : 0) + i);
                want = dt == DCP_DTYPE_F16 ? dcp_f16_to_f32(dcp_f32_to_f16(acc)) : acc;
            }
            float got = get(host, dt, i);
            if (memcmp(&got, &want, 4) != 0)
                fail_msg("%s %s %s%s: rank %d element %llu = %.9g, expected %.9g", names[kind],
                         dcp_dtype_name(dt), dcp_transport_name(dcp_comm_transport(comm)),
                         in_place ? " in place" : "", g, (unsigned long long)i, got, want);
        }
    }
    for (int l = 0; l < L; l++) {
        if (rb[l] != sb[l]) dcp_buffer_destroy(rb[l]);
        dcp_buffer_destroy(sb[l]);
    }
    free(host);
}

static void check_all_salted(dcp_comm *comm, uint32_t salt)
{
    for (int kind = 0; kind < 4; kind++)
        for (int t = 0; t < 2; t++) {
            dcp_dtype dt = t ? DCP_DTYPE_F16 : DCP_DTYPE_F32;
            check_collective(comm, kind, dt, 37, 0, salt++);
            check_collective(comm, kind, dt, 1, 1, salt++);
        }
    /* A block larger than the initial mailboxes: they grow. */
    check_collective(comm, A2A, DCP_DTYPE_F32, 40000, 0, salt + 99);
}

static void check_all(dcp_comm *comm) { check_all_salted(comm, 1); }

static dcp_status open_comm(dcp_context *ctx, dcp_transport t, dcp_comm **out)
{
    dcp_device *devs[16];
    int n = dcp_context_device_count(ctx);
    assert_true(n <= 16);
    for (int i = 0; i < n; i++) devs[i] = dcp_context_device(ctx, i);
    dcp_comm_config cfg = DCP_COMM_CONFIG_DEFAULT;
    cfg.transport = t;
    return use_mpi ? dcp_comm_init_mpi(devs, n, &cfg, out) : dcp_comm_init_local(devs, n, &cfg, out);
}

/* Whether the context's devices run on a device-group VkDevice each (DCP_VK_DEVICE_GROUPS=1). */
static int group_devices(dcp_context *ctx)
{
    return dcp_device_get_info(dcp_context_device(ctx, 0))->group_device_count > 0;
}

/* The transport pair s -> d must get when `forced` is asked for (every device here is one
 * physical device; devgroup pairs exist only for a rank with itself on a group-of-one VkDevice). */
static dcp_transport expected(const dcp_comm *c, dcp_transport forced, int s, int d)
{
    const int L = dcp_comm_local_count(c);
    const char *np = getenv("DCP_VK_NODE_PROCS");
    int k = np && *np ? atoi(np) : 0;
    int same_proc = s / L == d / L, same_node = k ? (s / L) / k == (d / L) / k : 1;
    if (!same_node) return DCP_TRANSPORT_MPI;
    if (forced == DCP_TRANSPORT_AUTO) return s == d ? DCP_TRANSPORT_SELF : DCP_TRANSPORT_PEER;
    if (forced == DCP_TRANSPORT_STAGING || forced == DCP_TRANSPORT_MPI)
        return same_proc ? DCP_TRANSPORT_STAGING : DCP_TRANSPORT_MPI;
    return forced;
}

static void test_transports(void **state)
{
    const dcp_transport ts[6] = {DCP_TRANSPORT_STAGING, DCP_TRANSPORT_HOSTMEM, DCP_TRANSPORT_PEER,
                                 DCP_TRANSPORT_MPI,     DCP_TRANSPORT_AUTO,    DCP_TRANSPORT_DEVGROUP};
    int n = dcp_context_device_count(*state);
    for (int k = 0; k < 6; k++) {
        dcp_comm *comm = NULL;
        /* devgroup: only a rank with itself, on a group-of-one VkDevice (see test_selection_errors). */
        if (ts[k] == DCP_TRANSPORT_DEVGROUP && !(group_devices(*state) && n == 1 && !use_mpi)) continue;
        DCP_ASSERT_OK(open_comm(*state, ts[k], &comm));
        int N = dcp_comm_size(comm);
        if (!use_mpi) assert_int_equal(N, n);
        for (int s = 0; s < N; s++)
            for (int d = 0; d < N; d++)
                if (dcp_comm_pair_transport(comm, s, d) != expected(comm, ts[k], s, d))
                    fail_msg("forced %s: pair %d -> %d uses %s, expected %s (%s)", dcp_transport_name(ts[k]), s, d,
                             dcp_transport_name(dcp_comm_pair_transport(comm, s, d)),
                             dcp_transport_name(expected(comm, ts[k], s, d)), dcp_comm_pair_reason(comm, s, d));
        char buf[4096];
        if (world_rank == 0) printf("forced %s: %s\n", dcp_transport_name(ts[k]), dcp_comm_describe(comm, buf, sizeof buf));
        check_all(comm);
        dcp_comm_destroy(comm);
    }
}

static void test_selection_errors(void **state)
{
    dcp_comm *comm = NULL;
    int n = dcp_context_device_count(*state);
    /* devgroup between different VkDevices: refused, naming the pair and why. */
    if (!(group_devices(*state) && n == 1 && !use_mpi)) {
        assert_int_equal(open_comm(*state, DCP_TRANSPORT_DEVGROUP, &comm), DCP_ERR_UNSUPPORTED);
        assert_null(comm);
        assert_non_null(strstr(dcp_last_error(), "devgroup"));
        assert_non_null(strstr(dcp_last_error(), "forced"));
        printf("devgroup here: %s\n", dcp_last_error());
    }
    /* dma-buf: lavapipe imports but does not export it: a forced dmabuf is refused with the reason. */
    assert_int_equal(open_comm(*state, DCP_TRANSPORT_DMABUF, &comm), DCP_ERR_UNSUPPORTED);
    assert_null(comm);
    assert_non_null(strstr(dcp_last_error(), "dma-buf"));
    printf("dmabuf here: %s\n", dcp_last_error());
    setenv("DCP_VK_TRANSPORT", "carrier-pigeon", 1);
    assert_int_equal(open_comm(*state, DCP_TRANSPORT_AUTO, &comm), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "carrier-pigeon"));
    setenv("DCP_VK_TRANSPORT", "staging", 1);
    DCP_ASSERT_OK(open_comm(*state, DCP_TRANSPORT_AUTO, &comm));
    if (!use_mpi) assert_int_equal(dcp_comm_transport(comm), DCP_TRANSPORT_STAGING);
    dcp_comm_destroy(comm);
    unsetenv("DCP_VK_TRANSPORT");
    dcp_transport t;
    assert_int_equal(dcp_transport_parse("hostmem", &t), DCP_OK);
    assert_int_equal(t, DCP_TRANSPORT_HOSTMEM);
    assert_int_equal(dcp_transport_parse("peer", &t), DCP_OK);
    assert_int_equal(t, DCP_TRANSPORT_PEER);
    assert_int_equal(dcp_transport_parse("x", &t), DCP_ERR_INVALID_ARGUMENT);
    assert_int_equal(dcp_transport_parse("mixed", &t), DCP_ERR_INVALID_ARGUMENT);
    /* The same device twice. */
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_device *twice[2] = {dev, dev};
    assert_int_equal(dcp_comm_init_local(twice, 2, NULL, &comm), DCP_ERR_INVALID_ARGUMENT);
}

/* Sub-communicators: groups of 2 consecutive processes, every other process, one process each, and
 * all but process 0 (which joins none). Each group's values carry its color in the salt, so a
 * message that crossed groups would not match. */
static void test_split(void **state)
{
    if (!use_mpi) return;
    dcp_device *devs[16];
    int n = dcp_context_device_count(*state);
    for (int i = 0; i < n; i++) devs[i] = dcp_context_device(*state, i);
    const int P = world_size, p = world_rank;
    struct { int color, members, index; const char *what; } cases[4] = {
        {p / 2, P - p / 2 * 2 < 2 ? P - p / 2 * 2 : 2, p % 2, "pairs"},
        {p % 2, (P + 1 - p % 2) / 2, p / 2, "strided"},
        {p, 1, 0, "singletons"},
        {p == 0 ? -1 : 7, P - 1, p - 1, "all but process 0"},
    };
    for (int k = 0; k < 4; k++) {
        dcp_comm *comm = NULL;
        DCP_ASSERT_OK(dcp_comm_init_mpi_split(devs, n, cases[k].color, NULL, &comm));
        if (cases[k].color < 0) {
            assert_null(comm);
            continue;
        }
        assert_non_null(comm);
        if (dcp_comm_size(comm) != cases[k].members * n || dcp_comm_first_rank(comm) != cases[k].index * n)
            fail_msg("split %s: process %d got size %d first rank %d, expected %d and %d", cases[k].what, p,
                     dcp_comm_size(comm), dcp_comm_first_rank(comm), cases[k].members * n, cases[k].index * n);
        assert_int_equal(dcp_comm_local_count(comm), n);
        /* auto: its own block stays, peer between processes of a node, mpi across "nodes". */
        for (int a = 0; a < dcp_comm_size(comm); a++)
            for (int b = 0; b < dcp_comm_size(comm); b++)
                assert_int_equal(dcp_comm_pair_transport(comm, a, b), expected(comm, DCP_TRANSPORT_AUTO, a, b));
        check_all_salted(comm, 1000u * (uint32_t)(k + 1) + 100u * (uint32_t)cases[k].color);
        dcp_comm_destroy(comm);
    }
    /* Processes of one color that hold different numbers of devices: a clear error everywhere. */
    if (P >= 2) {
        dcp_comm *comm = NULL;
        dcp_status st = dcp_comm_init_mpi_split(devs, p == 0 ? 1 : n, 0, NULL, &comm);
        if (n > 1) {
            assert_int_equal(st, DCP_ERR_CONFIG);
            assert_null(comm);
            assert_non_null(strstr(dcp_last_error(), "same number"));
        } else {
            DCP_ASSERT_OK(st);
            dcp_comm_destroy(comm);
        }
    }
    /* A broadcast from the last process. */
    int v[2] = {p, 12345};
    DCP_ASSERT_OK(dcp_mpi_bcast(v, sizeof v, P - 1));
    assert_int_equal(v[0], P - 1);
    assert_int_equal(v[1], 12345);
}

int main(int argc, char **argv)
{
    int rank = 0, size = 1;
    use_mpi = argc > 1 && strcmp(argv[1], "--mpi") == 0;
    if (use_mpi && dcp_mpi_init(&argc, &argv, &rank, &size) != DCP_OK) {
        fprintf(stderr, "dcp_mpi_init: %s\n", dcp_last_error());
        return 1;
    }
    world_rank = rank;
    world_size = size;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selection_errors),
        cmocka_unit_test(test_transports),
        cmocka_unit_test(test_split),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    if (use_mpi) dcp_mpi_finalize();
    return rc;
}
