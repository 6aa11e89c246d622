/* Communicator (include/dcpvk/comm.h): its ranks, what every process learns about every rank's
 * device, the transport of every pair (chosen by src/comm/select.c from those facts), creation and
 * destruction, the queries, and the agreement between processes that every collective step of
 * set-up ends with. Where the memory lives is mailbox.c, the push targets targets.c, the exchange
 * put.c, semaphores sem.c, the copying collectives collectives.c (src/comm/comm_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "common/error.h"
#include "vk/external.h"

/* ---- agreement between processes ---------------------------------------------------------- */

dcp_status dcp_comm_agree(dcp_comm *c, dcp_status st, const char *what)
{
    if (c->net.nproc <= 1) return st;
    struct { int32_t st; char msg[DCP_COMM_MSG_CAP]; } mine, *all = malloc(sizeof mine * c->net.nproc);
    memset(&mine, 0, sizeof mine);
    mine.st = st;
    if (st != DCP_OK) snprintf(mine.msg, sizeof mine.msg, "%s", dcp_last_error());
    if (!all) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    dcp_status gs = c->net.allgather(c->net.ctx, &mine, all, sizeof mine);
    if (gs == DCP_OK && st == DCP_OK)
        for (int p = 0; p < c->net.nproc; p++)
            if (all[p].st != DCP_OK) {
                gs = dcp_fail((dcp_status)all[p].st, "%s: process %d failed: %s", what, p, all[p].msg);
                break;
            }
    free(all);
    if (st != DCP_OK) return st;
    return gs;
}

/* ---- facts and choices -------------------------------------------------------------------- */

static void fill_caps(const dcp_comm *c, int i, dcp_rank_caps *k)
{
    const dcp_device_info *inf = dcp_device_get_info(c->devs[i]);
    memset(k, 0, sizeof *k);
    memcpy(k->device_uuid, inf->device_uuid, 16);
    memcpy(k->driver_uuid, inf->driver_uuid, 16);
    k->proc = c->net.proc;
    k->node = c->net.node ? c->net.node[c->net.proc] : 0;
    k->pid = (int32_t)getpid();
    k->local = i;
    k->mem_export = inf->mem_export;
    k->mem_import = inf->mem_import;
    k->sem_export = inf->sem_export;
    k->sem_import = inf->sem_import;
    k->timeline = inf->timeline_semaphore;
    k->group_count = inf->group_device_count;
    k->group_index = inf->group_device_index;
    k->vkdevice = dcp_device_vkdevice_id(c->devs[i]);
    k->logical_index = inf->logical_index;
    snprintf(k->name, sizeof k->name, "%.63s", inf->name);
}

/* The facts about pair s -> d (s local), the dma-buf negotiation included where it is wanted. */
static void pair_facts(dcp_comm *c, int s, int d, dcp_comm_pair_facts *f)
{
    const dcp_rank_caps *a = &c->caps[s], *b = &c->caps[d];
    memset(f, 0, sizeof *f);
    f->self = s == d;
    f->same_node = a->node == b->node;
    f->same_proc = a->proc == b->proc;
    f->multi_proc = c->net.nproc > 1;
    f->same_physical = dcp_rank_caps_same_physical(a, b);
    f->opaque_ok = f->same_physical && (b->mem_export & DCP_HANDLE_OPAQUE_FD) && (a->mem_import & DCP_HANDLE_OPAQUE_FD);
    f->host_ok = (a->mem_import & DCP_HANDLE_HOST) && (b->mem_import & DCP_HANDLE_HOST);
    const int negotiate_dmabuf = dcp_comm_dmabuf_wanted(f, c->forced);
    if (f->same_proc) {
        dcp_device *ds = c->devs[s - c->first_rank], *dd = c->devs[d - c->first_rank];
        if (dcp_device_peer_copy_check(ds, dd) == DCP_OK) {
            f->devgroup_ok = 1;
        } else {
            snprintf(f->devgroup_why, sizeof f->devgroup_why, "%s", dcp_last_error());
            dcp_clear_error();
        }
        if (negotiate_dmabuf)
            (void)dcp_comm_dmabuf_negotiate(dd, ds, &f->dmabuf, f->dmabuf_why, sizeof f->dmabuf_why);
    } else {
        snprintf(f->devgroup_why, sizeof f->devgroup_why, "the ranks are in different processes");
        if (negotiate_dmabuf) {
            f->dmabuf = DCP_DMABUF_REFUSED;
            snprintf(f->dmabuf_why, sizeof f->dmabuf_why,
                     "dma-buf is negotiated between the devices of one process only");
        }
    }
}

/* Chooses the transport of every pair whose sender is local, gathers every process's choices. */
static dcp_status choose_pairs(dcp_comm *c)
{
    dcp_status st = DCP_OK;
    const int N = c->size, L = c->local_count;
    dcp_pair_choice *mine = calloc((size_t)L * N, sizeof *mine);
    if (!mine) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int i = 0; i < L && st == DCP_OK; i++)
        for (int d = 0; d < N && st == DCP_OK; d++) {
            int s = c->first_rank + i;
            const dcp_rank_caps *a = &c->caps[s], *b = &c->caps[d];
            dcp_comm_pair_facts f;
            pair_facts(c, s, d, &f);
            dcp_transport t;
            st = dcp_comm_choose_pair(&f, c->forced, &t, mine[i * N + d].why, DCP_COMM_WHY_CAP);
            if (st != DCP_OK)
                st = dcp_fail_context(st, "ranks %d -> %d (devices %d %s and %d %s)", s, d, a->logical_index, a->name,
                                      b->logical_index, b->name);
            mine[i * N + d].transport = (int32_t)t;
        }
    st = dcp_comm_agree(c, st, "choosing transports");
    if (st == DCP_OK) {
        if (c->net.nproc > 1)
            st = c->net.allgather(c->net.ctx, mine, c->pair, sizeof *mine * L * N);
        else
            memcpy(c->pair, mine, sizeof *mine * L * N);
    }
    free(mine);
    return st;
}

dcp_status dcp_comm_create_internal(dcp_device *const *devices, int local_count, const dcp_comm_config *config,
                                    const dcp_comm_net *net, dcp_comm **out)
{
    dcp_status st = DCP_OK;
    dcp_comm_config defaults = DCP_COMM_CONFIG_DEFAULT;
    if (!config) config = &defaults;
    *out = NULL;
    if (local_count < 1)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "communicator of %d devices", local_count);
    for (int i = 0; i < local_count; i++)
        for (int j = 0; j < i; j++)
            if (devices[i] == devices[j])
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                                "communicator: devices %d and %d are the same dcp_device (open several "
                                "logical devices, e.g. DCP_VK_DEVICES=0,0)", j, i);
    dcp_transport t;
    st = dcp_comm_forced_transport(config->transport, &t);
    if (st != DCP_OK) return st;

    dcp_comm *c = calloc(1, sizeof *c);
    if (!c) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    c->local_count = local_count;
    if (net) c->net = *net;
    else c->net.nproc = 1;
    c->size = local_count * c->net.nproc;
    c->first_rank = c->net.proc * local_count;
    c->forced = t;
    const int N = c->size, L = local_count;
    c->devs = calloc(L, sizeof *c->devs);
    c->cmds = calloc(L, sizeof *c->cmds);
    c->caps = calloc(N, sizeof *c->caps);
    c->pair = calloc((size_t)N * N, sizeof *c->pair);
    c->node_rank = calloc(N, sizeof *c->node_rank);
    c->put_seg = calloc(N, 1);
    c->put_host = calloc(N, 1);
    c->view_seg = calloc(N, 1);
    c->inbox_host = calloc(N, 1);
    c->inbox_handles = calloc(N, sizeof *c->inbox_handles);
    c->segview = calloc(L, sizeof *c->segview);
    c->put = calloc(L, sizeof *c->put);
    c->inbox = calloc(L, sizeof *c->inbox);
    c->target = calloc((size_t)L * N, sizeof *c->target);
    c->target_owned = calloc((size_t)L * N, 1);
    c->target_release = calloc((size_t)L * N, 1);
    c->inbox_acquire = calloc(L, 1);
    c->bytes_sent = calloc(L, sizeof *c->bytes_sent);
    c->scratch = calloc(L, sizeof *c->scratch);
    c->scount = calloc(c->net.nproc * 4, sizeof *c->scount);
    if (!c->devs || !c->cmds || !c->caps || !c->pair || !c->node_rank || !c->put_seg || !c->put_host || !c->view_seg ||
        !c->inbox_host || !c->inbox_handles || !c->segview || !c->put || !c->inbox || !c->target || !c->target_owned ||
        !c->target_release || !c->inbox_acquire || !c->bytes_sent || !c->scratch || !c->scount) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    c->sdispl = c->scount + c->net.nproc;
    c->rcount = c->sdispl + c->net.nproc;
    c->rdispl = c->rcount + c->net.nproc;
    for (int i = 0; i < L; i++) {
        c->devs[i] = devices[i];
        DCP_TRY(dcp_cmd_create(devices[i], &c->cmds[i]));
    }
    /* Every rank's devices and place, then the pairs, then where the memory goes. */
    dcp_rank_caps *mine = calloc(L, sizeof *mine);
    if (!mine) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    for (int i = 0; i < L; i++) fill_caps(c, i, &mine[i]);
    if (c->net.nproc > 1) st = c->net.allgather(c->net.ctx, mine, c->caps, sizeof *mine * L);
    else memcpy(c->caps, mine, sizeof *mine * L);
    free(mine);
    if (st != DCP_OK) goto fail;
    DCP_TRY(choose_pairs(c));
    dcp_comm_plan_layout(c);
    if (c->has_fdx) DCP_TRY(dcp_comm_open_fdx(c, DCP_OK));
    DCP_TRY(dcp_comm_alloc_mailboxes(c, config->block_bytes ? config->block_bytes : 65536));
    dcp_comm_reset_banks(c, false);
    *out = c;
    return DCP_OK;
fail:
    dcp_comm_destroy(c);
    return st;
}

dcp_status dcp_comm_init_local(dcp_device *const *devices, int count, const dcp_comm_config *config,
                               dcp_comm **out)
{
    return dcp_comm_create_internal(devices, count, config, NULL, out);
}

void dcp_comm_destroy(dcp_comm *c)
{
    if (!c) return;
    for (int i = 0; c->cmds && i < c->local_count; i++) dcp_cmd_destroy(c->cmds[i]);
    for (int i = 0; c->scratch && i < c->local_count; i++) dcp_buffer_destroy(c->scratch[i]);
    if (c->put) dcp_comm_free_mailboxes(c);
    dcp_fdx_close(c->fdx);
    if (c->net.destroy) c->net.destroy(c->net.ctx);
    void *arrays[] = {c->devs, c->cmds, c->caps, c->pair, c->node_rank, c->put_seg, c->put_host, c->view_seg,
                      c->inbox_host, c->inbox_handles, c->segview, c->put, c->inbox, c->target, c->target_owned,
                      c->target_release, c->inbox_acquire, c->bytes_sent, c->scratch, c->scount, c->net_send,
                      c->net_recv, c->fdx_names, c->pids};
    for (size_t k = 0; k < sizeof arrays / sizeof arrays[0]; k++) free(arrays[k]);
    free(c);
}

int dcp_comm_size(const dcp_comm *c) { return c->size; }
int dcp_comm_local_count(const dcp_comm *c) { return c->local_count; }
int dcp_comm_first_rank(const dcp_comm *c) { return c->first_rank; }
dcp_device *dcp_comm_device(const dcp_comm *c, int i) { return i >= 0 && i < c->local_count ? c->devs[i] : NULL; }

dcp_transport dcp_comm_transport(const dcp_comm *c)
{
    if (c->size == 1) return dcp_comm_pair_t(c, 0, 0); /* one rank: how its own block moves */
    const dcp_transport t = dcp_comm_pair_t(c, 0, 1);
    for (int s = 0; s < c->size; s++)
        for (int d = 0; d < c->size; d++)
            if (s != d && dcp_comm_pair_t(c, s, d) != t) return DCP_TRANSPORT_MIXED;
    return t;
}

dcp_transport dcp_comm_pair_transport(const dcp_comm *c, int s, int d)
{
    if (s < 0 || d < 0 || s >= c->size || d >= c->size) return DCP_TRANSPORT_AUTO;
    return dcp_comm_pair_t(c, s, d);
}

const char *dcp_comm_pair_reason(const dcp_comm *c, int s, int d)
{
    if (s < 0 || d < 0 || s >= c->size || d >= c->size) return "no such pair";
    return c->pair[s * c->size + d].why;
}

const char *dcp_comm_describe(const dcp_comm *c, char *buf, size_t cap)
{
    size_t n = 0;
    if (cap) buf[0] = 0;
    const int N = c->size;
    uint8_t *done = calloc((size_t)N * N, 1);
    if (!done) return buf;
    for (int k = 0; k < N * N; k++) {
        if (done[k]) continue;
        int count = 0;
        for (int m = k; m < N * N; m++)
            if (!done[m] && c->pair[m].transport == c->pair[k].transport && !strcmp(c->pair[m].why, c->pair[k].why)) {
                done[m] = 1;
                count++;
            }
        int s = k / N, d = k % N;
        if (n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s, %d pair%s (e.g. %d -> %d): %s", n ? "\n" : "",
                                  dcp_transport_name(dcp_comm_pair_t(c, s, d)), count, count == 1 ? "" : "s", s, d,
                                  c->pair[k].why);
    }
    free(done);
    return buf;
}

uint64_t dcp_comm_bytes_sent(const dcp_comm *c, int i) { return i >= 0 && i < c->local_count ? c->bytes_sent[i] : 0; }
void dcp_comm_reset_stats(dcp_comm *c) { memset(c->bytes_sent, 0, sizeof *c->bytes_sent * c->local_count); }

