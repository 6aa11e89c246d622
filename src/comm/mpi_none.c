/* The MPI entry points added for sub-communicators and broadcasts when dcp-vk is built without MPI
 * (the older ones are in comm.c): they say so, or do nothing where one process is the whole world. */
#include "common/error.h"
#include "dcpvk/comm.h"

#ifndef DCP_HAVE_MPI
dcp_status dcp_comm_init_mpi_split(dcp_device *const *devices, int local_count, int color,
                                   const dcp_comm_config *config, dcp_comm **out)
{
    *out = NULL;
    return dcp_fail(DCP_ERR_UNSUPPORTED, "dcp-vk was built without MPI (install MPICH and reconfigure)");
}
dcp_status dcp_mpi_bcast(void *data, uint64_t bytes, int root) { return DCP_OK; }
dcp_status dcp_mpi_bcast_idle(void *data, uint64_t bytes, int root, uint32_t sleep_us) { return DCP_OK; }
dcp_status dcp_mpi_max_u32_idle(uint32_t *vals, uint32_t n, uint32_t sleep_us) { return DCP_OK; }
void dcp_mpi_abort(int code) {}
#else
typedef int dcp_mpi_none_unused; /* ISO C wants a non-empty translation unit */
#endif
