/* The MPI entry points when dcp-vk is built without MPI (mpi_transport.c is not compiled): they say
 * so, or do what one process that is the whole world would do. */
#include "comm/comm_internal.h"
#include "common/error.h"
#include "dcpvk/comm.h"

#ifndef DCP_HAVE_MPI
static dcp_status no_mpi(void)
{
    return dcp_fail(DCP_ERR_UNSUPPORTED, "dcp-vk was built without MPI (install MPICH and reconfigure)");
}

dcp_status dcp_comm_init_mpi(dcp_device *const *devices, int local_count, const dcp_comm_config *config,
                             dcp_comm **out)
{
    *out = NULL;
    return no_mpi();
}
dcp_status dcp_comm_init_mpi_split(dcp_device *const *devices, int local_count, int color,
                                   const dcp_comm_config *config, dcp_comm **out)
{
    *out = NULL;
    return no_mpi();
}
dcp_status dcp_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    *rank = 0;
    *size = 1;
    return no_mpi();
}
void dcp_mpi_finalize(void) {}
void dcp_mpi_barrier(void) {}
double dcp_mpi_max(double x) { return x; }
dcp_status dcp_mpi_bcast(void *data, uint64_t bytes, int root) { return DCP_OK; }
dcp_status dcp_mpi_bcast_idle(void *data, uint64_t bytes, int root, uint32_t sleep_us) { return DCP_OK; }
dcp_status dcp_mpi_max_u32_idle(uint32_t *vals, uint32_t n, uint32_t sleep_us) { return DCP_OK; }
void dcp_mpi_abort(int code) {}
/* Without MPI every communicator is one process: no pair's copier is the net, so put.c never
 * calls this. */
dcp_status dcp_comm_net_move(dcp_comm *c, dcp_coll kind, uint64_t slot)
{
    return dcp_fail(DCP_ERR_INTERNAL, "communicator: an mpi exchange in a build without MPI");
}
#else
typedef int dcp_mpi_none_unused; /* ISO C wants a non-empty translation unit */
#endif
