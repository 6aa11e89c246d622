/* MPI transport of the communicator: the only file that includes mpi.h. Moves the host bytes of
 * comm.c between processes (MPI_Allgather, MPI_Alltoallv, MPI_Barrier), on MPI_COMM_WORLD
 * (dcp_comm_init_mpi) or on a sub-communicator from MPI_Comm_split (dcp_comm_init_mpi_split),
 * finds the processes that share a node (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), and
 * offers small MPI helpers to apps and tests. MPI errors become DCP_ERR_MPI with the MPI error
 * string. It also packs and unpacks the blocks of the mpi pairs of an exchange
 * (dcp_comm_net_move, at the end); builds without MPI have mpi_none.c instead. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_internal.h"
#include "common/error.h"

static dcp_status mpi_check(int rc, const char *call)
{
    if (rc == MPI_SUCCESS) return DCP_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return dcp_fail(DCP_ERR_MPI, "%s failed: %s", call, msg);
}

static dcp_status count_ok(uint64_t bytes)
{
    if (bytes > INT_MAX)
        return dcp_fail(DCP_ERR_MPI, "MPI message of %llu bytes exceeds INT_MAX", (unsigned long long)bytes);
    return DCP_OK;
}

/* The net context of a communicator: its MPI communicator (owned when it came from MPI_Comm_split)
 * and the node of every process. */
typedef struct net_ctx {
    MPI_Comm comm;
    int owned;
    int *node;       /* [size] the lowest process index on each process's node */
    int *destroyed;  /* while dcp_comm_create_internal runs: set to 1 if it already destroyed us */
} net_ctx;

static void net_destroy(void *ctx)
{
    net_ctx *nc = ctx;
    int done = 0;
    MPI_Finalized(&done);
    if (!done && nc->owned) MPI_Comm_free(&nc->comm);
    if (nc->destroyed) *nc->destroyed = 1;
    free(nc->node);
    free(nc);
}

static dcp_status net_allgather(void *ctx, const void *send, void *recv, uint64_t bytes)
{
    dcp_status st = count_ok(bytes);
    if (st != DCP_OK) return st;
    return mpi_check(MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, ((net_ctx *)ctx)->comm),
                     "MPI_Allgather");
}

static dcp_status net_alltoallv(void *ctx, const void *send, const uint64_t *scount, const uint64_t *sdispl, void *recv,
                                const uint64_t *rcount, const uint64_t *rdispl)
{
    net_ctx *nc = ctx;
    int n = 0;
    MPI_Comm_size(nc->comm, &n);
    int *v = malloc(sizeof *v * 4 * (size_t)n);
    if (!v) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    dcp_status st = DCP_OK;
    for (int q = 0; q < n && st == DCP_OK; q++) {
        if (sdispl[q] + scount[q] > INT_MAX || rdispl[q] + rcount[q] > INT_MAX)
            st = dcp_fail(DCP_ERR_MPI, "MPI exchange of more than INT_MAX bytes");
        v[q] = (int)scount[q];
        v[n + q] = (int)sdispl[q];
        v[2 * n + q] = (int)rcount[q];
        v[3 * n + q] = (int)rdispl[q];
    }
    if (st == DCP_OK)
        st = mpi_check(MPI_Alltoallv(send, v, v + n, MPI_BYTE, recv, v + 2 * n, v + 3 * n, MPI_BYTE, nc->comm),
                       "MPI_Alltoallv");
    free(v);
    return st;
}

/* Returns once every process has called it: an allgather of one byte (no process completes it
 * before every process has contributed). MPI_Barrier would do, but Debian 12's MPICH runs it about
 * a thousand times slower than a small allgather between processes of one node (1.5 ms against
 * 1 us for two processes), and the exchanges of a step wait here once each. */
static dcp_status net_barrier(void *ctx)
{
    net_ctx *nc = ctx;
    int n = 0;
    MPI_Comm_size(nc->comm, &n);
    char mine = 1, stack[64], *all = n <= 64 ? stack : malloc((size_t)n);
    if (!all) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    dcp_status st = mpi_check(MPI_Allgather(&mine, 1, MPI_CHAR, all, 1, MPI_CHAR, nc->comm), "MPI_Allgather (barrier)");
    if (all != stack) free(all);
    return st;
}

/* The node of every process of mc: processes that share memory (MPI_Comm_split_type with
 * MPI_COMM_TYPE_SHARED) are one node, named by its lowest process index. $DCP_VK_NODE_PROCS = k
 * (tests) splits each node further into nodes of k consecutive processes, so that one machine can
 * play several nodes. */
static dcp_status find_nodes(MPI_Comm mc, int rank, int size, int *node)
{
    MPI_Comm shared = MPI_COMM_NULL, part = MPI_COMM_NULL;
    dcp_status st = mpi_check(MPI_Comm_split_type(mc, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared),
                              "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    int local = 0, leader = rank;
    if (st == DCP_OK) st = mpi_check(MPI_Comm_rank(shared, &local), "MPI_Comm_rank");
    const char *env = getenv("DCP_VK_NODE_PROCS");
    long k = env && *env ? strtol(env, NULL, 10) : 0;
    if (st == DCP_OK && env && *env && k < 1)
        st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "$DCP_VK_NODE_PROCS is \"%s\" (a number of processes >= 1)", env);
    if (st == DCP_OK && k >= 1) {
        st = mpi_check(MPI_Comm_split(shared, (int)(local / k), local, &part), "MPI_Comm_split");
    }
    if (st == DCP_OK)
        st = mpi_check(MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, part != MPI_COMM_NULL ? part : shared),
                       "MPI_Allreduce");
    if (st == DCP_OK) st = mpi_check(MPI_Allgather(&leader, 1, MPI_INT, node, 1, MPI_INT, mc), "MPI_Allgather");
    if (part != MPI_COMM_NULL) MPI_Comm_free(&part);
    if (shared != MPI_COMM_NULL) MPI_Comm_free(&shared);
    (void)size;
    return st;
}

static dcp_status check_inited(const char *fn)
{
    int inited = 0, done = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&done);
    if (!inited || done)
        return dcp_fail(DCP_ERR_MPI, "%s: MPI is not initialised (call dcp_mpi_init) or already finalised", fn);
    return DCP_OK;
}

/* Creates a communicator over the processes of mc (collective over mc). owned: mc came from
 * MPI_Comm_split and passes to the communicator (freed here on failure). `what` names the
 * communicator in messages. */
static dcp_status init_on(MPI_Comm mc, int owned, dcp_device *const *devices, int local_count,
                          const dcp_comm_config *config, const char *what, dcp_comm **out)
{
    dcp_status st;
    int rank = 0, size = 1, destroyed = 0;
    st = mpi_check(MPI_Comm_rank(mc, &rank), "MPI_Comm_rank");
    if (st == DCP_OK) st = mpi_check(MPI_Comm_size(mc, &size), "MPI_Comm_size");
    int lo = local_count, hi = local_count;
    if (st == DCP_OK) st = mpi_check(MPI_Allreduce(&local_count, &lo, 1, MPI_INT, MPI_MIN, mc), "MPI_Allreduce");
    if (st == DCP_OK) st = mpi_check(MPI_Allreduce(&local_count, &hi, 1, MPI_INT, MPI_MAX, mc), "MPI_Allreduce");
    if (st == DCP_OK && lo != hi)
        st = dcp_fail(DCP_ERR_CONFIG,
                      "%s: processes hold between %d and %d devices; every process must hold the same number",
                      what, lo, hi);
    net_ctx *nc = calloc(1, sizeof *nc);
    if (nc) nc->node = calloc(size, sizeof *nc->node);
    if (st == DCP_OK && (!nc || !nc->node)) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    if (nc) {
        nc->comm = mc;
        nc->owned = owned;
    }
    if (st == DCP_OK) st = find_nodes(mc, rank, size, nc->node);
    if (st != DCP_OK) {
        if (nc) net_destroy(nc);
        else if (owned) MPI_Comm_free(&mc);
        return st;
    }
    dcp_comm_net net = {nc, size, rank, nc->node, net_allgather, net_alltoallv, net_barrier, net_destroy};
    nc->destroyed = &destroyed;
    st = dcp_comm_create_internal(devices, local_count, config, &net, out);
    if (!destroyed) {
        nc->destroyed = NULL;
        if (st != DCP_OK) net_destroy(nc); /* failed before the communicator took it */
    }
    if (st != DCP_OK) return dcp_fail_context(st, "%s, MPI rank %d of %d", what, rank, size);
    return DCP_OK;
}

dcp_status dcp_comm_init_mpi(dcp_device *const *devices, int local_count, const dcp_comm_config *config,
                             dcp_comm **out)
{
    *out = NULL;
    dcp_status st = check_inited("dcp_comm_init_mpi");
    if (st != DCP_OK) return st;
    return init_on(MPI_COMM_WORLD, 0, devices, local_count, config, "dcp_comm_init_mpi", out);
}

dcp_status dcp_comm_init_mpi_split(dcp_device *const *devices, int local_count, int color,
                                   const dcp_comm_config *config, dcp_comm **out)
{
    *out = NULL;
    dcp_status st = check_inited("dcp_comm_init_mpi_split");
    if (st != DCP_OK) return st;
    int world = 0;
    st = mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &world), "MPI_Comm_rank");
    if (st != DCP_OK) return st;
    MPI_Comm mc = MPI_COMM_NULL;
    st = mpi_check(MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, world, &mc),
                   "MPI_Comm_split");
    if (st != DCP_OK) return dcp_fail_context(st, "dcp_comm_init_mpi_split (color %d)", color);
    if (color < 0) return DCP_OK; /* this process joins no communicator */
    char what[64];
    snprintf(what, sizeof what, "dcp_comm_init_mpi_split (color %d)", color);
    return init_on(mc, 1, devices, local_count, config, what, out);
}

dcp_status dcp_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    int inited = 0;
    MPI_Initialized(&inited);
    dcp_status st = DCP_OK;
    if (!inited) st = mpi_check(MPI_Init(argc, argv), "MPI_Init");
    /* Failures come back as codes (DCP_ERR_MPI): MPI's default handler would end the process. */
    if (st == DCP_OK) st = mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    if (st == DCP_OK) st = mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, rank), "MPI_Comm_rank");
    if (st == DCP_OK) st = mpi_check(MPI_Comm_size(MPI_COMM_WORLD, size), "MPI_Comm_size");
    return st;
}

void dcp_mpi_finalize(void)
{
    int inited = 0, done = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&done);
    if (inited && !done) MPI_Finalize();
}

void dcp_mpi_barrier(void)
{
    net_ctx world = {MPI_COMM_WORLD, 0, NULL, NULL};
    (void)net_barrier(&world); /* an allgather: see net_barrier */
}

double dcp_mpi_max(double x)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) return x;
    double y = x;
    MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return y;
}

dcp_status dcp_mpi_bcast(void *data, uint64_t bytes, int root)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) return DCP_OK;
    dcp_status st = count_ok(bytes);
    if (st != DCP_OK) return st;
    return mpi_check(MPI_Bcast(data, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

dcp_status dcp_mpi_bcast_idle(void *data, uint64_t bytes, int root, uint32_t sleep_us)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) return DCP_OK;
    dcp_status st = count_ok(bytes);
    if (st != DCP_OK) return st;
    MPI_Request req;
    st = mpi_check(MPI_Ibcast(data, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &req), "MPI_Ibcast");
    if (st != DCP_OK) return st;
    const struct timespec nap = {(time_t)(sleep_us / 1000000u), (long)(sleep_us % 1000000u) * 1000L};
    for (;;) {
        int done = 0;
        st = mpi_check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (st != DCP_OK || done) return st;
        nanosleep(&nap, NULL);
    }
}

dcp_status dcp_mpi_max_u32_idle(uint32_t *vals, uint32_t n, uint32_t sleep_us)
{
    int inited = 0, done = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&done);
    if (!inited || done) return DCP_OK;
    if (n > INT_MAX) return dcp_fail(DCP_ERR_MPI, "MPI reduction of %u values exceeds INT_MAX", n);
    MPI_Request req;
    dcp_status st = mpi_check(MPI_Iallreduce(MPI_IN_PLACE, vals, (int)n, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD, &req),
                              "MPI_Iallreduce");
    if (st != DCP_OK) return st;
    const struct timespec nap = {(time_t)(sleep_us / 1000000u), (long)(sleep_us % 1000000u) * 1000L};
    for (;;) {
        int flag = 0;
        st = mpi_check(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
        if (st != DCP_OK || flag) return st;
        nanosleep(&nap, NULL);
    }
}

void dcp_mpi_abort(int code)
{
    int inited = 0, done = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&done);
    if (inited && !done) MPI_Abort(MPI_COMM_WORLD, code);
}

/* ---- packing the blocks of mpi pairs (src/comm/put.c's host part) ------------------------- */

/* Pairs s -> d whose blocks the net carries. */
static int net_pair(const dcp_comm *c, int s, int d) { return dcp_comm_pair_info(c, s, d)->copier == DCP_COPIER_NET; }

/* Every process sends, per peer process, its local senders' blocks for that process's ranks (a
 * gathered block once per sender and process), in sender then receiver order, with one
 * MPI_Alltoallv (the net's alltoallv), and unpacks what it receives into its receivers' inboxes. */
dcp_status dcp_comm_net_move(dcp_comm *c, dcp_coll kind, uint64_t slot)
{
    const int L = c->local_count, P = c->net.nproc, me = c->net.proc, gat = dcp_coll_gathers(kind);
    uint64_t stot = 0, rtot = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int q = 0; q < P; q++) {
            uint64_t sn = 0, rn = 0;
            for (int a = 0; a < L; a++) {
                int any_s = 0;
                for (int b = 0; b < L; b++) {
                    int here = me * L + a, there = q * L + b;
                    if (q != me && net_pair(c, here, there)) {
                        if (!gat) {
                            if (pass)
                                memcpy(c->net_send + c->sdispl[q] + sn,
                                       dcp_comm_put_host_ptr(c, here, c->send_bank) + (uint64_t)there * slot, slot);
                            sn += slot;
                        }
                        any_s = 1;
                    }
                }
                if (gat && any_s) {
                    if (pass)
                        memcpy(c->net_send + c->sdispl[q] + sn, dcp_comm_put_host_ptr(c, me * L + a, c->send_bank),
                               slot);
                    sn += slot;
                }
            }
            /* Receives from q: per q's sender b, a gathered block once, or per local receiver. */
            for (int b = 0; b < L; b++) {
                int there = q * L + b, any = 0;
                for (int a = 0; a < L; a++)
                    if (q != me && net_pair(c, there, me * L + a)) {
                        any = 1;
                        if (!gat) rn += slot;
                    }
                if (gat && any) rn += slot;
            }
            if (!pass) {
                c->scount[q] = sn;
                c->rcount[q] = rn;
                c->sdispl[q] = stot;
                c->rdispl[q] = rtot;
                stot += sn;
                rtot += rn;
            }
        }
        if (!pass) {
            uint64_t need = stot > rtot ? stot : rtot;
            if (need > c->net_cap) {
                free(c->net_send);
                free(c->net_recv);
                c->net_send = malloc(need ? need : 1);
                c->net_recv = malloc(need ? need : 1);
                c->net_cap = c->net_send && c->net_recv ? need : 0;
                if (!c->net_cap) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory (MPI buffers)");
            }
        }
    }
    dcp_status st = c->net.alltoallv(c->net.ctx, c->net_send, c->scount, c->sdispl, c->net_recv, c->rcount, c->rdispl);
    if (st != DCP_OK) return st;
    for (int q = 0; q < P; q++) {
        uint64_t rn = 0;
        for (int b = 0; b < L; b++) {
            int there = q * L + b;
            const char *blk = NULL;
            for (int a = 0; a < L; a++) {
                int here = me * L + a;
                if (q == me || !net_pair(c, there, here)) continue;
                if (!gat || !blk) {
                    blk = c->net_recv + c->rdispl[q] + rn;
                    rn += slot;
                }
                memcpy(dcp_comm_inbox_host_ptr(c, a, c->send_bank) + (uint64_t)there * slot, blk, slot);
            }
        }
    }
    return DCP_OK;
}
