/* Passing file descriptors (exported Vulkan memory and semaphores) between the processes of a
 * node: each process listens on a Linux abstract-namespace Unix socket with an unpredictable name;
 * a sender connects to the receiver's socket and sends its messages, each with one descriptor
 * (SCM_RIGHTS). The receiver accepts only connections from the expected process ids of its own
 * user (SO_PEERCRED). No MPI here: the caller exchanges names and process ids (allgather) and
 * knows how many connections to expect.
 *
 * Order of use, so that nothing waits on a peer that waits too: every process opens its endpoint,
 * the names are exchanged, every process sends all it has to send (connect, send, close: the
 * kernel queues it), then every process receives. */
#ifndef DCP_COMM_FDX_H
#define DCP_COMM_FDX_H

#include <stdint.h>
#include <sys/types.h>

#include "dcpvk/status.h"

enum { DCP_FDX_NAME_MAX = 64 };

/* One message: what the descriptor is, for the receiver to check and use. */
typedef struct dcp_fdx_msg {
    uint32_t from_rank, to_rank; /* communicator ranks: the exporter and the importer */
    uint32_t kind;               /* caller's code (memory handle kind, semaphore, ...) */
    uint32_t type;               /* memory type index (opaque fds) */
    uint64_t alloc_size, size;   /* bytes of the allocation and of the buffer */
} dcp_fdx_msg;

typedef struct dcp_fdx dcp_fdx;

/* Opens a listening endpoint; *name (NUL-terminated, without the abstract namespace's leading
 * NUL) is what peers connect to. */
dcp_status dcp_fdx_open(dcp_fdx **out, char name[DCP_FDX_NAME_MAX]);
void dcp_fdx_close(dcp_fdx *x);
/* Sends n messages with their descriptors over one connection to `name` (the descriptors stay
 * the caller's: it closes them after). */
dcp_status dcp_fdx_send(const char *name, const dcp_fdx_msg *msgs, const int *fds, int n);
/* Accepts `connections` connections from processes whose ids are in pids[0..npids), reads every
 * message of each until its sender closes it. *msgs and *fds (malloc'd, *n entries) receive them;
 * the caller owns the descriptors. Gives up after timeout_s seconds without progress. */
dcp_status dcp_fdx_recv(dcp_fdx *x, int connections, const pid_t *pids, int npids, int timeout_s, dcp_fdx_msg **msgs,
                        int **fds, int *n);

#endif
