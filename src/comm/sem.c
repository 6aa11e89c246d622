/* GPU-synchronised rounds (src/comm/put.h): whether a step can be submitted up front with the ranks
 * waiting on each other on the GPU (no pair's blocks need the host, every pair shares semaphores),
 * and the sharing of the ranks' timeline semaphores: the same object on one VkDevice, else exported
 * as an opaque fd and imported (in this process directly, between processes over the descriptor
 * sockets, src/comm/targets.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "common/error.h"
#include "vk/external.h"

void dcp_comm_sync_caps_get(const dcp_comm *c, dcp_comm_sync_caps *out)
{
    const int N = c->size;
    memset(out, 0, sizeof *out);
    out->share = DCP_SEM_SHARE_NATIVE;
    int hs = -1, hd = -1, ns = -1, nd = -1;
    for (int s = 0; s < N; s++)
        for (int d = 0; d < N; d++) {
            if (dcp_transport_host_copies(dcp_comm_pair_info(c, s, d)) && hs < 0) hs = s, hd = d;
            const dcp_rank_caps *a = &c->caps[s], *b = &c->caps[d];
            dcp_sem_share sh;
            if (a->proc == b->proc && a->vkdevice == b->vkdevice) sh = DCP_SEM_SHARE_NATIVE;
            else if (dcp_rank_caps_same_physical(a, b) && a->timeline && b->timeline &&
                     (a->sem_export & DCP_HANDLE_OPAQUE_FD) && (b->sem_import & DCP_HANDLE_OPAQUE_FD))
                sh = DCP_SEM_SHARE_OPAQUE_FD;
            else sh = DCP_SEM_SHARE_NONE;
            if (sh < out->share) {
                out->share = sh;
                if (sh == DCP_SEM_SHARE_NONE) ns = s, nd = d;
            }
        }
    out->host_work = hs >= 0;
    if (hs >= 0)
        snprintf(out->why, sizeof out->why, "ranks %d -> %d exchange through the host (%s)", hs, hd,
                 dcp_comm_pair_info(c, hs, hd)->name);
    else if (ns >= 0)
        snprintf(out->why, sizeof out->why,
                 "ranks %d and %d cannot share a semaphore (%s; %.40s %s export and %s import timeline semaphores as "
                 "opaque fds)",
                 ns, nd,
                 memcmp(c->caps[ns].device_uuid, c->caps[nd].device_uuid, 16) ? "different physical devices"
                                                                             : "no external semaphores",
                 c->caps[ns].name, (c->caps[ns].sem_export & DCP_HANDLE_OPAQUE_FD) ? "does" : "does not",
                 (c->caps[nd].sem_import & DCP_HANDLE_OPAQUE_FD) ? "does" : "does not");
    else
        snprintf(out->why, sizeof out->why, "every pair shares semaphores (%s)",
                 out->share == DCP_SEM_SHARE_NATIVE ? "one VkDevice" : "timeline semaphores as opaque fds");
}

bool dcp_comm_gpu_rounds(const dcp_comm *c, char *why, size_t cap)
{
    dcp_comm_sync_caps sc;
    dcp_comm_sync_caps_get(c, &sc);
    const bool gpu = !sc.host_work && sc.share != DCP_SEM_SHARE_NONE;
    if (why && cap) snprintf(why, cap, "%s", sc.why);
    return gpu;
}

/* For process q: every local rank's semaphore, once for each of q's ranks. */
static dcp_status fill_sems(dcp_comm *c, int q, void *arg, dcp_fdx_msg *msgs, int *fds, int *n)
{
    dcp_sem *const *mine = arg;
    const int L = c->local_count;
    for (int j = 0; j < L; j++)
        for (int b = 0; b < L; b++) {
            msgs[*n] = (dcp_fdx_msg){(uint32_t)(c->first_rank + j), (uint32_t)(q * L + b), DCP_FDX_KIND_SEM, 0, 0, 0};
            dcp_status st = dcp_sem_export_fd(mine[j], &fds[*n]);
            if (st != DCP_OK) return st;
            (*n)++;
        }
    return DCP_OK;
}

dcp_status dcp_comm_share_semaphores(dcp_comm *c, dcp_sem *const *mine, dcp_sem **peers, uint8_t *owned)
{
    dcp_status st = DCP_OK;
    const int L = c->local_count, N = c->size, P = c->net.nproc;
    memset(peers, 0, sizeof *peers * L * N);
    memset(owned, 0, (size_t)L * N);
    for (int i = 0; i < L && st == DCP_OK; i++)
        for (int j = 0; j < L && st == DCP_OK; j++) {
            if (dcp_device_shares_vkdevice(c->devs[i], c->devs[j])) {
                peers[i * N + c->first_rank + j] = mine[j];
                continue;
            }
            int fd = -1;
            st = dcp_sem_export_fd(mine[j], &fd);
            if (st == DCP_OK) st = dcp_sem_import_fd(c->devs[i], fd, &peers[i * N + c->first_rank + j]);
            owned[i * N + c->first_rank + j] = st == DCP_OK;
        }
    if (P <= 1) return st;
    /* Between processes: every process sends every other one all its semaphores. */
    if (!c->fdx) st = dcp_comm_open_fdx(c, st);
    dcp_fdx_msg *in_msgs = NULL;
    int *in_fds = NULL, nin = 0;
    st = dcp_comm_fdx_swap(c, st, fill_sems, (void *)mine, P - 1, "sharing semaphores", &in_msgs, &in_fds, &nin);
    for (int k = 0; k < nin; k++) {
        const int r = (int)in_msgs[k].from_rank, to = (int)in_msgs[k].to_rank;
        if (st != DCP_OK || in_msgs[k].kind != DCP_FDX_KIND_SEM || !dcp_comm_is_local(c, to) || r >= N ||
            peers[(to - c->first_rank) * N + r]) {
            close(in_fds[k]);
            continue;
        }
        const int i = to - c->first_rank;
        st = dcp_sem_import_fd(c->devs[i], in_fds[k], &peers[i * N + r]);
        owned[i * N + r] = st == DCP_OK;
    }
    free(in_msgs);
    free(in_fds);
    return dcp_comm_agree(c, st, "sharing semaphores");
}
