/* Push targets: where each local sender's GPU copies its blocks for receiver d (the pairs whose row
 * says DCP_COPIER_SENDER_GPU, src/comm/select.c): the receiver's inbox itself when it is the
 * sender's own, a device-group peer view of it, or the inbox exported as an fd and imported by the
 * sender (in this process directly; between the processes of a node over the descriptor sockets of
 * src/comm/fdx.c). The descriptor exchange between processes is shared with sem.c. */
#include <stdlib.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "common/error.h"
#include "vk/external.h"

enum { FDX_TIMEOUT_S = 120 };

/* ---- descriptors between processes ------------------------------------------------------- */

dcp_status dcp_comm_open_fdx(dcp_comm *c, dcp_status st)
{
    char name[DCP_FDX_NAME_MAX] = "";
    int32_t pid = (int32_t)getpid();
    if (st == DCP_OK && !c->fdx_names) c->fdx_names = calloc(c->net.nproc, sizeof *c->fdx_names);
    if (st == DCP_OK && !c->pids) c->pids = calloc(c->net.nproc, sizeof *c->pids);
    if (st == DCP_OK && (!c->fdx_names || !c->pids)) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    if (st == DCP_OK) st = dcp_fdx_open(&c->fdx, name);
    st = dcp_comm_agree(c, st, "opening descriptor sockets");
    if (st == DCP_OK) st = c->net.allgather(c->net.ctx, name, c->fdx_names, DCP_FDX_NAME_MAX);
    if (st == DCP_OK) st = c->net.allgather(c->net.ctx, &pid, c->pids, sizeof pid);
    return st;
}

dcp_status dcp_comm_fdx_swap(dcp_comm *c, dcp_status st, dcp_comm_fdx_fill fill, void *arg, int connections,
                             const char *what, dcp_fdx_msg **in_msgs, int **in_fds, int *nin)
{
    const int L = c->local_count, P = c->net.nproc;
    *in_msgs = NULL;
    *in_fds = NULL;
    *nin = 0;
    dcp_fdx_msg *msgs = calloc((size_t)L * L + 1, sizeof *msgs);
    int *fds = calloc((size_t)L * L + 1, sizeof *fds);
    pid_t *pids = calloc(P, sizeof *pids);
    if (st == DCP_OK && (!msgs || !fds || !pids)) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    /* Every process sends all it has to send (the kernel queues it), then receives. */
    for (int q = 0; q < P && st == DCP_OK; q++) {
        if (q == c->net.proc) continue;
        int n = 0;
        st = fill(c, q, arg, msgs, fds, &n);
        if (st == DCP_OK && n) st = dcp_fdx_send(c->fdx_names[q], msgs, fds, n);
        for (int k = 0; k < n; k++) close(fds[k]);
    }
    st = dcp_comm_agree(c, st, what);
    for (int q = 0; pids && q < P; q++) pids[q] = c->pids[q];
    if (st == DCP_OK && connections)
        st = dcp_fdx_recv(c->fdx, connections, pids, P, FDX_TIMEOUT_S, in_msgs, in_fds, nin);
    free(msgs);
    free(fds);
    free(pids);
    return st;
}

/* ---- push targets ------------------------------------------------------------------------- */

/* For process q: the inboxes of this process's receivers whose senders are on q, exported. */
static dcp_status fill_inboxes(dcp_comm *c, int q, void *arg, dcp_fdx_msg *msgs, int *fds, int *n)
{
    (void)arg;
    const int L = c->local_count;
    for (int j = 0; j < L; j++)
        for (int k = 0; k < L; k++) {
            const int me = c->first_rank + j, other = q * L + k;
            const dcp_transport_info *x = dcp_comm_pair_info(c, other, me);
            if (x->reach != DCP_REACH_FD) continue;
            const dcp_buffer *b = c->inbox[j];
            msgs[*n] = (dcp_fdx_msg){(uint32_t)me, (uint32_t)other, DCP_FDX_KIND_MEM, dcp_buffer_memory_type(b),
                                     dcp_buffer_alloc_size(b), dcp_buffer_size(b)};
            dcp_status st = dcp_buffer_export_fd(c->inbox[j], x->handle, &fds[*n]);
            if (st != DCP_OK) return st;
            (*n)++;
        }
    return DCP_OK;
}

/* Local sender i's target for local receiver d. */
static dcp_status local_target(dcp_comm *c, int i, int d)
{
    dcp_status st = DCP_OK;
    const int N = c->size, s = c->first_rank + i, j = d - c->first_rank;
    const dcp_transport_info *x = dcp_comm_pair_info(c, s, d);
    dcp_buffer **tg = &c->target[i * N + d];
    int fd = -1;
    switch (x->reach) {
    case DCP_REACH_OWN:
        *tg = c->inbox[j];
        break;
    case DCP_REACH_PEER_VIEW:
        st = dcp_buffer_peer_view(c->devs[i], c->inbox[j], tg);
        c->target_owned[i * N + d] = 1;
        break;
    case DCP_REACH_FD:
        st = dcp_buffer_export_fd(c->inbox[j], x->handle, &fd);
        if (st == DCP_OK)
            st = dcp_buffer_import_fd(c->devs[i], x->handle, fd, dcp_buffer_alloc_size(c->inbox[j]),
                                      dcp_buffer_memory_type(c->inbox[j]), dcp_buffer_size(c->inbox[j]), tg);
        c->target_owned[i * N + d] = 1;
        c->target_release[i * N + d] = 1;
        c->inbox_acquire[j] = 1;
        break;
    default:
        st = dcp_fail(DCP_ERR_INTERNAL, "a sending GPU with no way into the receiver's memory");
    }
    if (st != DCP_OK) st = dcp_fail_context(st, "push target %d -> %d (%s)", s, d, x->name);
    return st;
}

dcp_status dcp_comm_make_targets(dcp_comm *c)
{
    dcp_status st = DCP_OK;
    const int L = c->local_count, N = c->size, P = c->net.nproc;
    /* In this process. */
    for (int i = 0; i < L && st == DCP_OK; i++)
        for (int d = 0; d < N && st == DCP_OK; d++)
            if (dcp_comm_is_local(c, d) && dcp_comm_pushes(c, c->first_rank + i, d)) st = local_target(c, i, d);
    for (int j = 0; j < L; j++)
        for (int s = 0; s < N; s++)
            if (!dcp_comm_is_local(c, s) && dcp_comm_pair_info(c, s, c->first_rank + j)->reach == DCP_REACH_FD)
                c->inbox_acquire[j] = 1;
    if (!c->has_fdx) return dcp_comm_agree(c, st, "preparing push targets");
    /* Across processes: every local receiver's inbox to the processes of its remote senders; one
     * connection from every process whose receivers this process's senders write. */
    int connections = 0;
    for (int q = 0; q < P; q++) {
        int from_q = 0;
        for (int i = 0; q != c->net.proc && i < L; i++)
            for (int k = 0; k < L; k++)
                if (dcp_comm_pair_info(c, c->first_rank + i, q * L + k)->reach == DCP_REACH_FD) from_q = 1;
        connections += from_q;
    }
    dcp_fdx_msg *in_msgs = NULL;
    int *in_fds = NULL, nin = 0;
    st = dcp_comm_fdx_swap(c, st, fill_inboxes, NULL, connections, "sending inboxes", &in_msgs, &in_fds, &nin);
    /* One process imports at a time: Mesa's lavapipe reads an opaque fd's header with lseek and
     * read on the descriptor, whose offset every process that received a copy of it shares, so
     * two processes importing one buffer at once can read each other's offset and refuse it. */
    for (int turn = 0; turn < P; turn++) {
        for (int k = 0; turn == c->net.proc && k < nin; k++) {
            const dcp_fdx_msg *m = &in_msgs[k];
            const int d = (int)m->from_rank, s = (int)m->to_rank;
            if (st != DCP_OK || !dcp_comm_is_local(c, s) || d >= N || m->kind != DCP_FDX_KIND_MEM ||
                dcp_comm_pair_info(c, s, d)->reach != DCP_REACH_FD || c->target[(s - c->first_rank) * N + d]) {
                if (st == DCP_OK)
                    st = dcp_fail(DCP_ERR_IO, "descriptor socket: an unexpected message (rank %d -> %d, kind %u)", d, s,
                                  m->kind);
                close(in_fds[k]);
                continue;
            }
            const int i = s - c->first_rank;
            st = dcp_buffer_import_fd(c->devs[i], dcp_comm_pair_info(c, s, d)->handle, in_fds[k], m->alloc_size,
                                      m->type, m->size, &c->target[i * N + d]);
            if (st != DCP_OK)
                st = dcp_fail_context(st, "push target %d -> %d (%s, from process %d)", s, d,
                                      dcp_comm_pair_info(c, s, d)->name, d / L);
            c->target_owned[i * N + d] = 1;
            c->target_release[i * N + d] = 1;
        }
        dcp_status bs = c->net.barrier(c->net.ctx);
        if (st == DCP_OK) st = bs;
    }
    for (int i = 0; st == DCP_OK && i < L; i++)
        for (int d = 0; d < N; d++)
            if (dcp_comm_pushes(c, c->first_rank + i, d) && !c->target[i * N + d])
                st = dcp_fail(DCP_ERR_IO, "rank %d received no buffer of rank %d", c->first_rank + i, d);
    free(in_msgs);
    free(in_fds);
    return dcp_comm_agree(c, st, "preparing push targets");
}
