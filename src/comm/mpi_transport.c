/* MPI transport of the communicator: the only file that includes mpi.h. Moves the host blocks of
 * comm.c between processes with MPI_Allgather and MPI_Alltoall, on MPI_COMM_WORLD
 * (dcp_comm_init_mpi) or on a sub-communicator from MPI_Comm_split (dcp_comm_init_mpi_split), and
 * offers small MPI helpers to apps and tests. MPI errors become DCP_ERR_MPI with the MPI error
 * string. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The net context of a communicator: NULL for MPI_COMM_WORLD, else a split_ctx it owns. */
typedef struct split_ctx {
    MPI_Comm comm;   /* from MPI_Comm_split; freed by split_destroy */
    int *destroyed;  /* while dcp_comm_create_internal runs: set to 1 if it already destroyed us */
} split_ctx;

static MPI_Comm net_comm(void *ctx) { return ctx ? ((split_ctx *)ctx)->comm : MPI_COMM_WORLD; }

static void split_destroy(void *ctx)
{
    split_ctx *sc = ctx;
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Comm_free(&sc->comm);
    if (sc->destroyed) *sc->destroyed = 1;
    free(sc);
}

static dcp_status net_allgather(void *ctx, const void *send, void *recv, uint64_t bytes)
{
    dcp_status st = count_ok(bytes);
    if (st != DCP_OK) return st;
    return mpi_check(MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, net_comm(ctx)),
                     "MPI_Allgather");
}

static dcp_status net_alltoall(void *ctx, const void *send, void *recv, uint64_t bytes)
{
    dcp_status st = count_ok(bytes);
    if (st != DCP_OK) return st;
    return mpi_check(MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, net_comm(ctx)),
                     "MPI_Alltoall");
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

/* Creates a communicator over the processes of mc (collective over mc). sc: the split context that
 * owns mc (NULL for MPI_COMM_WORLD); ownership passes to the communicator, and on failure sc is
 * freed here. `what` names the communicator in messages. */
static dcp_status init_on(MPI_Comm mc, split_ctx *sc, dcp_device *const *devices, int local_count,
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
    if (st != DCP_OK) {
        if (sc) split_destroy(sc);
        return st;
    }
    dcp_comm_net net = {sc, size, rank, net_allgather, net_alltoall, sc ? split_destroy : NULL};
    if (sc) sc->destroyed = &destroyed;
    st = dcp_comm_create_internal(devices, local_count, config, &net, out);
    if (sc && !destroyed) {
        sc->destroyed = NULL;
        if (st != DCP_OK) split_destroy(sc); /* failed before the communicator took it */
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
    return init_on(MPI_COMM_WORLD, NULL, devices, local_count, config, "dcp_comm_init_mpi", out);
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
    split_ctx *sc = calloc(1, sizeof *sc);
    if (!sc) {
        MPI_Comm_free(&mc);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    sc->comm = mc;
    char what[64];
    snprintf(what, sizeof what, "dcp_comm_init_mpi_split (color %d)", color);
    return init_on(mc, sc, devices, local_count, config, what, out);
}

dcp_status dcp_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    int inited = 0;
    MPI_Initialized(&inited);
    dcp_status st = DCP_OK;
    if (!inited) st = mpi_check(MPI_Init(argc, argv), "MPI_Init");
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

void dcp_mpi_barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }

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
