/* MPI transport of the communicator: the only file that includes mpi.h. Moves the host blocks of
 * comm.c between processes with MPI_Allgather and MPI_Alltoall on MPI_COMM_WORLD, and offers small
 * MPI helpers to apps and tests. MPI errors become DCP_ERR_MPI with the MPI error string. */
#include <limits.h>
#include <mpi.h>

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

static dcp_status net_allgather(void *ctx, const void *send, void *recv, uint64_t bytes)
{
    dcp_status st = count_ok(bytes);
    if (st != DCP_OK) return st;
    return mpi_check(MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD),
                     "MPI_Allgather");
}

static dcp_status net_alltoall(void *ctx, const void *send, void *recv, uint64_t bytes)
{
    dcp_status st = count_ok(bytes);
    if (st != DCP_OK) return st;
    return mpi_check(MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD),
                     "MPI_Alltoall");
}

dcp_status dcp_comm_init_mpi(dcp_device *const *devices, int local_count, const dcp_comm_config *config,
                             dcp_comm **out)
{
    dcp_status st;
    *out = NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) return dcp_fail(DCP_ERR_MPI, "dcp_comm_init_mpi: MPI is not initialised (call dcp_mpi_init)");
    int rank = 0, size = 1;
    st = mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
    if (st == DCP_OK) st = mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    if (st != DCP_OK) return st;
    int lo = local_count, hi = local_count;
    st = mpi_check(MPI_Allreduce(&local_count, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
    if (st == DCP_OK) st = mpi_check(MPI_Allreduce(&local_count, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    if (st != DCP_OK) return st;
    if (lo != hi)
        return dcp_fail(DCP_ERR_CONFIG,
                        "dcp_comm_init_mpi: processes hold between %d and %d devices; every process must hold "
                        "the same number",
                        lo, hi);
    dcp_comm_net net = {NULL, size, rank, net_allgather, net_alltoall, NULL};
    st = dcp_comm_create_internal(devices, local_count, config, &net, out);
    if (st != DCP_OK) return dcp_fail_context(st, "MPI rank %d of %d", rank, size);
    return DCP_OK;
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
