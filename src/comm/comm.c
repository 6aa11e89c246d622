/* Communicator (include/dcpvk/comm.h): its ranks, the transport of every pair (src/comm/select.h),
 * the memory each needs, the put-style exchange that steps record (src/comm/put.h) and the
 * synchronous collectives built on it. Transport set-up between processes (shared memory,
 * descriptor passing) is here too; only the byte moving and node discovery of MPI live in
 * mpi_transport.c.
 *
 * Memory of local rank i (global rank g), with bank = size * cap bytes ([rank][cap] slots) and
 * two banks that alternate between consecutive exchanges:
 *   put area  [2][size][cap]: where its recordings write outgoing blocks. In the node's shared
 *             segment (region of g) when some pair from g is hostmem; else its own buffer,
 *             host-visible when some pair from g is staging or mpi, else device-local.
 *   view      where it reads what it received: the shared segment itself (source s's put region
 *             at stride `region`) when every pair into g is hostmem (or its own block); else its
 *             inbox [2][size][cap] (source s at s * slot), into which senders push (peer, dmabuf,
 *             devgroup: GPU copies into the exported / peer-bound inbox), the host writes
 *             (staging, mpi), or g's own GPU pulls hostmem blocks out of the segment.
 * A pair's bytes are the same whichever way they go, so results do not depend on transports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_internal.h"
#include "comm/fdx.h"
#include "comm/put.h"
#include "comm/select.h"
#include "comm/shm.h"
#include "common/error.h"
#include "vk/external.h"
#include "vk/hostmem.h"

enum { WHY_CAP = 384, MSG_CAP = 512 };

/* What every process learns about every rank (gathered). */
typedef struct rank_caps {
    uint8_t device_uuid[16], driver_uuid[16];
    int32_t proc, node, pid, local;
    uint32_t mem_export, mem_import, sem_export, sem_import, timeline;
    uint32_t group_count, group_index;
    uint64_t vkdevice;
    int32_t logical_index;
    char name[64];
} rank_caps;

/* A pair's choice as gathered: transport and reason. */
typedef struct pair_choice {
    int32_t transport;
    char why[WHY_CAP];
} pair_choice;

struct dcp_comm {
    int size, local_count, first_rank;
    dcp_transport forced;         /* AUTO: best per pair */
    dcp_comm_net net;             /* nproc 1 without MPI */
    dcp_device **devs;            /* [local_count] */
    dcp_cmd **cmds;               /* [local_count] the synchronous collectives' commands */
    rank_caps *caps;              /* [size] */
    pair_choice *pair;            /* [size][size]: pair[s * size + d] */
    /* where things live (from the pairs; the same on every process) */
    int *node_rank;               /* [size] index among the comm's ranks on its node (segment region) */
    int node_ranks;               /* the comm's ranks on this process's node */
    int node_first_rank;          /* the first of them */
    uint8_t *put_seg;             /* [size] put area in the node's segment */
    uint8_t *put_host;            /* [size] put area host-visible */
    uint8_t *view_seg;            /* [size] the view is the segment */
    uint8_t *inbox_host;          /* [size] inbox host-visible */
    uint32_t *inbox_handles;      /* [size] DCP_HANDLE_* the inbox is exported as */
    int seg_needed;               /* this node has a shared segment */
    int has_mpi, cross_sync, has_fdx;
    /* memory */
    uint64_t cap;                 /* slot capacity, bytes (multiple of 256) */
    uint64_t region;              /* bytes of one node rank's region of the segment */
    void *seg_private;            /* one process: the segment */
    dcp_shm shm;                  /* several processes: the node's segment */
    char *seg;                    /* segment base here */
    uint64_t seg_size;
    dcp_buffer **segview;         /* [local] the segment on local rank i's device */
    dcp_buffer **put;             /* [local] own put buffer (NULL: in the segment) */
    dcp_buffer **inbox;           /* [local] (NULL: the view is the segment) */
    dcp_buffer **target;          /* [local][size] where local sender i pushes to rank d */
    uint8_t *target_owned;        /* [local][size] */
    uint8_t *target_release;      /* [local][size] another VkDevice's memory: release after writing */
    uint8_t *inbox_acquire;       /* [local] the inbox is written by other VkDevices */
    /* processes */
    char *net_send, *net_recv;
    uint64_t net_cap;
    uint64_t *scount, *sdispl, *rcount, *rdispl; /* [nproc] */
    dcp_fdx *fdx;
    char (*fdx_names)[DCP_FDX_NAME_MAX];         /* [nproc] */
    int32_t *pids;                               /* [nproc] */
    /* state */
    uint64_t *bytes_sent;         /* [local] */
    dcp_buffer **scratch;         /* [local] host-visible [size + 1][block] for reductions */
    uint64_t scratch_bytes;
    int send_bank, recv_bank;
    uint32_t flips;               /* exchanges since the banks were last reset */
    uint64_t generation;
};

const char *dcp_transport_name(dcp_transport t)
{
    switch (t) {
    case DCP_TRANSPORT_AUTO: return "auto";
    case DCP_TRANSPORT_DEVGROUP: return "devgroup";
    case DCP_TRANSPORT_HOSTMEM: return "hostmem";
    case DCP_TRANSPORT_STAGING: return "staging";
    case DCP_TRANSPORT_MPI: return "mpi";
    case DCP_TRANSPORT_PEER: return "peer";
    case DCP_TRANSPORT_DMABUF: return "dmabuf";
    case DCP_TRANSPORT_MIXED: return "mixed";
    case DCP_TRANSPORT_SELF: return "self";
    }
    return "unknown";
}

dcp_status dcp_transport_parse(const char *name, dcp_transport *out)
{
    for (int t = DCP_TRANSPORT_AUTO; t <= DCP_TRANSPORT_DMABUF; t++)
        if (name && strcmp(name, dcp_transport_name((dcp_transport)t)) == 0) {
            *out = (dcp_transport)t;
            return DCP_OK;
        }
    return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                    "transport \"%s\" is not one of auto, devgroup, peer, dmabuf, hostmem, staging, mpi",
                    name ? name : "(null)");
}

static int gathers(dcp_coll k) { return k == DCP_COLL_ALL_GATHER || k == DCP_COLL_ALL_REDUCE; }
static dcp_transport pair_t(const dcp_comm *c, int s, int d) { return (dcp_transport)c->pair[s * c->size + d].transport; }
static int is_local(const dcp_comm *c, int g) { return g >= c->first_rank && g < c->first_rank + c->local_count; }
static int proc_of(const dcp_comm *c, int g) { return g / c->local_count; }
/* Pairs whose sender's GPU copies into the receiver's memory. */
static int pushes(const dcp_comm *c, int s, int d)
{
    dcp_transport t = pair_t(c, s, d);
    return t == DCP_TRANSPORT_PEER || t == DCP_TRANSPORT_DMABUF || t == DCP_TRANSPORT_DEVGROUP ||
           (t == DCP_TRANSPORT_SELF && !c->view_seg[d]);
}
static int host_moves(dcp_transport t) { return t == DCP_TRANSPORT_STAGING || t == DCP_TRANSPORT_MPI; }

/* ---- agreement between processes ---------------------------------------------------------- */

/* Every process passes its status; all return failure if any failed (the first failing process's
 * message on the others). */
static dcp_status agree(dcp_comm *c, dcp_status st, const char *what)
{
    if (c->net.nproc <= 1) return st;
    struct { int32_t st; char msg[MSG_CAP]; } mine, *all = malloc(sizeof mine * c->net.nproc);
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

static void fill_caps(const dcp_comm *c, int i, rank_caps *k)
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


/* The facts about pair s -> d (s local). */
static void pair_facts(dcp_comm *c, int s, int d, int negotiate_dmabuf, dcp_comm_pair_facts *f)
{
    const rank_caps *a = &c->caps[s], *b = &c->caps[d];
    memset(f, 0, sizeof *f);
    f->self = s == d;
    f->same_node = a->node == b->node;
    f->same_proc = a->proc == b->proc;
    f->multi_proc = c->net.nproc > 1;
    f->same_physical = !memcmp(a->device_uuid, b->device_uuid, 16) && !memcmp(a->driver_uuid, b->driver_uuid, 16);
    f->opaque_ok = f->same_physical && (b->mem_export & DCP_HANDLE_OPAQUE_FD) && (a->mem_import & DCP_HANDLE_OPAQUE_FD);
    f->host_ok = (a->mem_import & DCP_HANDLE_HOST) && (b->mem_import & DCP_HANDLE_HOST);
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
    pair_choice *mine = calloc((size_t)L * N, sizeof *mine);
    if (!mine) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int i = 0; i < L && st == DCP_OK; i++)
        for (int d = 0; d < N && st == DCP_OK; d++) {
            int s = c->first_rank + i;
            const rank_caps *a = &c->caps[s], *b = &c->caps[d];
            /* dma-buf: between different devices of one process under auto, or wherever forced. */
            int same_phys = !memcmp(a->device_uuid, b->device_uuid, 16) && !memcmp(a->driver_uuid, b->driver_uuid, 16);
            int negotiate = a->node == b->node &&
                            (c->forced == DCP_TRANSPORT_DMABUF || (c->forced == DCP_TRANSPORT_AUTO && s != d && !same_phys));
            dcp_comm_pair_facts f;
            pair_facts(c, s, d, negotiate, &f);
            dcp_transport t;
            st = dcp_comm_choose_pair(&f, c->forced, &t, mine[i * N + d].why, WHY_CAP);
            if (st != DCP_OK)
                st = dcp_fail_context(st, "ranks %d -> %d (devices %d %s and %d %s)", s, d, a->logical_index, a->name,
                                      b->logical_index, b->name);
            mine[i * N + d].transport = (int32_t)t;
        }
    st = agree(c, st, "choosing transports");
    if (st == DCP_OK) {
        if (c->net.nproc > 1)
            st = c->net.allgather(c->net.ctx, mine, c->pair, sizeof *mine * L * N);
        else
            memcpy(c->pair, mine, sizeof *mine * L * N);
    }
    free(mine);
    return st;
}

/* Where every rank's memory lives, from the pairs (the same on every process). */
static void plan_layout(dcp_comm *c)
{
    const int N = c->size;
    const int my_node = c->caps[c->first_rank].node;
    c->node_ranks = 0;
    c->node_first_rank = -1;
    for (int g = 0; g < N; g++) {
        c->node_rank[g] = c->caps[g].node == my_node ? c->node_ranks++ : -1;
        if (c->node_rank[g] == 0) c->node_first_rank = g;
    }
    for (int g = 0; g < N; g++) {
        c->put_seg[g] = c->put_host[g] = 0;
        for (int d = 0; d < N; d++) {
            dcp_transport t = pair_t(c, g, d);
            if (t == DCP_TRANSPORT_HOSTMEM) c->put_seg[g] = 1;
            if (host_moves(t)) c->put_host[g] = 1;
        }
        if (c->put_seg[g]) c->put_host[g] = 1;
    }
    c->seg_needed = 0;
    c->has_mpi = c->cross_sync = 0;
    for (int d = 0; d < N; d++) {
        int shared = 1;
        for (int s = 0; s < N; s++) {
            dcp_transport t = pair_t(c, s, d);
            if (!(t == DCP_TRANSPORT_HOSTMEM || (t == DCP_TRANSPORT_SELF && c->put_seg[d]))) shared = 0;
        }
        c->view_seg[d] = (uint8_t)shared;
    }
    for (int d = 0; d < N; d++) {
        c->inbox_host[d] = 0;
        c->inbox_handles[d] = 0;
        for (int s = 0; s < N; s++) {
            dcp_transport t = pair_t(c, s, d);
            if (host_moves(t)) c->inbox_host[d] = 1;
            if (t == DCP_TRANSPORT_PEER) c->inbox_handles[d] |= DCP_HANDLE_OPAQUE_FD;
            if (t == DCP_TRANSPORT_DMABUF) c->inbox_handles[d] |= DCP_HANDLE_DMA_BUF;
            if (t == DCP_TRANSPORT_MPI) c->has_mpi = 1;
            /* A GPU of one process writes memory another process reads: they wait for each other. */
            if (c->caps[s].proc != c->caps[d].proc && !host_moves(t)) c->cross_sync = 1;
            if (t == DCP_TRANSPORT_HOSTMEM && (c->caps[s].node == my_node || c->caps[d].node == my_node))
                c->seg_needed = 1;
        }
    }
    c->has_fdx = 0;
    for (int s = 0; s < N; s++)
        for (int d = 0; d < N; d++)
            if (c->caps[s].proc != c->caps[d].proc && pair_t(c, s, d) == DCP_TRANSPORT_PEER) c->has_fdx = 1;
}

/* ---- memory ------------------------------------------------------------------------------- */

static void free_mailboxes(dcp_comm *c)
{
    const int L = c->local_count, N = c->size;
    for (int i = 0; c->target && i < L; i++)
        for (int d = 0; d < N; d++) {
            if (c->target_owned[i * N + d]) dcp_buffer_destroy(c->target[i * N + d]);
            c->target[i * N + d] = NULL;
            c->target_owned[i * N + d] = 0;
        }
    for (int i = 0; c->put && i < L; i++) {
        dcp_buffer_destroy(c->put[i]);
        dcp_buffer_destroy(c->inbox[i]);
        dcp_buffer_destroy(c->segview[i]);
        c->put[i] = c->inbox[i] = c->segview[i] = NULL;
    }
    free(c->seg_private);
    c->seg_private = NULL;
    dcp_shm_close(&c->shm);
    c->seg = NULL;
    c->cap = 0;
}

static uint64_t bank_bytes(const dcp_comm *c) { return (uint64_t)c->size * c->cap; }

/* Per local rank: a put area and an inbox of two banks of `size` blocks each, both allocated on the
 * device unless they live in the node's shared host segment (hostmem): then fewer. */
uint64_t dcp_comm_mailbox_bytes(int size, uint64_t bytes) { return 2 * dcp_comm_mailbox_buffer_bytes(size, bytes); }

uint64_t dcp_comm_mailbox_buffer_bytes(int size, uint64_t bytes)
{
    return 2ull * (uint64_t)size * ((bytes + DCP_STORAGE_ALIGN_MAX - 1) / DCP_STORAGE_ALIGN_MAX * DCP_STORAGE_ALIGN_MAX);
}

/* The node's shared segment: every node rank's put region. */
static dcp_status make_segment(dcp_comm *c)
{
    dcp_status st = DCP_OK;
    uint64_t align = 4096;
    for (int i = 0; i < c->local_count; i++) {
        uint64_t a;
        if (dcp_vk_host_import_alignment(c->devs[i], &a) == DCP_OK && a > align) align = a;
        dcp_clear_error();
    }
    c->region = (2 * bank_bytes(c) + align - 1) / align * align;
    c->seg_size = c->region * (uint64_t)(c->node_ranks > 0 ? c->node_ranks : 1);
    if (c->net.nproc <= 1) {
        if (c->seg_needed) {
            c->seg_private = aligned_alloc(align, c->seg_size);
            if (!c->seg_private)
                return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory (%llu bytes of shared mailboxes)",
                                (unsigned long long)c->seg_size);
            memset(c->seg_private, 0, c->seg_size);
            c->seg = c->seg_private;
        }
        return DCP_OK;
    }
    /* Several processes: the node's first process creates, the others map it, then it is unlinked. */
    const int leader = c->caps[c->node_first_rank].proc == c->net.proc;
    char name[DCP_SHM_NAME_MAX] = "";
    if (c->seg_needed && leader) {
        st = dcp_shm_create(c->seg_size, &c->shm);
        if (st == DCP_OK) snprintf(name, sizeof name, "%s", c->shm.name);
    }
    st = agree(c, st, "creating the node's shared memory");
    if (st != DCP_OK) return st;
    char (*names)[DCP_SHM_NAME_MAX] = calloc(c->net.nproc, sizeof *names);
    if (!names) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    st = c->net.allgather(c->net.ctx, name, names, DCP_SHM_NAME_MAX);
    if (st == DCP_OK && c->seg_needed && !leader)
        st = dcp_shm_open(names[c->caps[c->node_first_rank].proc], c->seg_size, &c->shm);
    free(names);
    st = agree(c, st, "mapping the node's shared memory");
    if (st == DCP_OK) st = c->net.barrier(c->net.ctx); /* every process has mapped it */
    dcp_shm_unlink(&c->shm);
    if (st == DCP_OK && c->seg_needed) c->seg = c->shm.ptr;
    return st;
}

/* Offsets: bank b of the put area of rank g (in its own buffer, or in the segment). */
static uint64_t put_off(const dcp_comm *c, int g, int bank)
{
    uint64_t base = c->put_seg[g] ? (uint64_t)c->node_rank[g] * c->region : 0;
    return base + (uint64_t)bank * bank_bytes(c);
}
static uint64_t inbox_off(const dcp_comm *c, int bank) { return (uint64_t)bank * bank_bytes(c); }
static char *put_host_ptr(const dcp_comm *c, int g, int bank)
{
    int i = g - c->first_rank;
    char *base = c->put_seg[g] ? c->seg : dcp_buffer_map(c->put[i]);
    return base + put_off(c, g, bank);
}
static char *inbox_host_ptr(const dcp_comm *c, int i, int bank)
{
    return (char *)dcp_buffer_map(c->inbox[i]) + inbox_off(c, bank);
}

enum { FDX_MEM = 1 };

/* The push targets of every local sender: imports, peer views, its own inbox. Collective. */
static dcp_status make_targets(dcp_comm *c)
{
    dcp_status st = DCP_OK;
    const int L = c->local_count, N = c->size, P = c->net.nproc;
    dcp_fdx_msg *msgs = NULL, *in_msgs = NULL;
    int *fds = NULL, *in_fds = NULL, nin = 0;
    /* In this process. */
    for (int i = 0; i < L && st == DCP_OK; i++) {
        int s = c->first_rank + i;
        for (int d = 0; d < N && st == DCP_OK; d++) {
            if (!is_local(c, d) || !pushes(c, s, d)) continue;
            int j = d - c->first_rank;
            dcp_transport t = pair_t(c, s, d);
            dcp_buffer **tg = &c->target[i * N + d];
            if (t == DCP_TRANSPORT_SELF) {
                *tg = c->inbox[j];
            } else if (t == DCP_TRANSPORT_DEVGROUP) {
                st = dcp_buffer_peer_view(c->devs[i], c->inbox[j], tg);
                c->target_owned[i * N + d] = 1;
            } else {
                uint32_t h = t == DCP_TRANSPORT_DMABUF ? DCP_HANDLE_DMA_BUF : DCP_HANDLE_OPAQUE_FD;
                int fd = -1;
                st = dcp_buffer_export_fd(c->inbox[j], h, &fd);
                if (st == DCP_OK)
                    st = dcp_buffer_import_fd(c->devs[i], h, fd, dcp_buffer_alloc_size(c->inbox[j]),
                                              dcp_buffer_memory_type(c->inbox[j]), dcp_buffer_size(c->inbox[j]), tg);
                c->target_owned[i * N + d] = 1;
                c->target_release[i * N + d] = 1;
                c->inbox_acquire[j] = 1;
            }
            if (st != DCP_OK) st = dcp_fail_context(st, "push target %d -> %d (%s)", s, d, dcp_transport_name(t));
        }
    }
    for (int j = 0; j < L; j++)
        for (int s = 0; s < N; s++)
            if (!is_local(c, s) && pair_t(c, s, c->first_rank + j) == DCP_TRANSPORT_PEER) c->inbox_acquire[j] = 1;
    if (!c->has_fdx) return agree(c, st, "preparing push targets");
    /* Across processes: every local receiver's inbox to the processes of its remote peer senders. */
    int connections = 0, nmsg = 0;
    msgs = calloc((size_t)L * N + 1, sizeof *msgs);
    fds = calloc((size_t)L * N + 1, sizeof *fds);
    if (!msgs || !fds) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int q = 0; q < P && st == DCP_OK; q++) {
        if (q == c->net.proc) continue;
        /* What this process sends to q, and whether q sends to it. */
        nmsg = 0;
        int from_q = 0;
        for (int j = 0; j < L; j++)
            for (int k = 0; k < L; k++) {
                int me = c->first_rank + j, other = q * L + k;
                if (pair_t(c, other, me) == DCP_TRANSPORT_PEER && st == DCP_OK) {
                    msgs[nmsg] = (dcp_fdx_msg){(uint32_t)me, (uint32_t)other, FDX_MEM, dcp_buffer_memory_type(c->inbox[j]),
                                               dcp_buffer_alloc_size(c->inbox[j]), dcp_buffer_size(c->inbox[j])};
                    st = dcp_buffer_export_fd(c->inbox[j], DCP_HANDLE_OPAQUE_FD, &fds[nmsg]);
                    if (st == DCP_OK) nmsg++;
                }
                if (pair_t(c, me, other) == DCP_TRANSPORT_PEER) from_q = 1;
            }
        if (st == DCP_OK && nmsg) st = dcp_fdx_send(c->fdx_names[q], msgs, fds, nmsg);
        for (int k = 0; k < nmsg; k++) close(fds[k]);
        connections += from_q;
    }
    if (st == DCP_OK && connections) {
        pid_t *pids = calloc(P, sizeof *pids);
        if (!pids) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        for (int q = 0; pids && q < P; q++) pids[q] = c->pids[q];
        if (st == DCP_OK) st = dcp_fdx_recv(c->fdx, connections, pids, P, 120, &in_msgs, &in_fds, &nin);
        free(pids);
    }
    /* One process imports at a time: Mesa's lavapipe reads an opaque fd's header with lseek and
     * read on the descriptor, whose offset every process that received a copy of it shares, so
     * two processes importing one buffer at once can read each other's offset and refuse it. */
    for (int turn = 0; turn < P; turn++) {
        for (int k = 0; turn == c->net.proc && k < nin; k++) {
            const dcp_fdx_msg *m = &in_msgs[k];
            int d = (int)m->from_rank, s = (int)m->to_rank;
            if (st != DCP_OK || !is_local(c, s) || d >= N || m->kind != FDX_MEM || pair_t(c, s, d) != DCP_TRANSPORT_PEER ||
                c->target[(s - c->first_rank) * N + d]) {
                if (st == DCP_OK)
                    st = dcp_fail(DCP_ERR_IO, "descriptor socket: an unexpected message (rank %d -> %d, kind %u)", d, s, m->kind);
                close(in_fds[k]);
                continue;
            }
            int i = s - c->first_rank;
            st = dcp_buffer_import_fd(c->devs[i], DCP_HANDLE_OPAQUE_FD, in_fds[k], m->alloc_size, m->type, m->size,
                                      &c->target[i * N + d]);
            if (st != DCP_OK) st = dcp_fail_context(st, "push target %d -> %d (peer, from process %d)", s, d, proc_of(c, d));
            c->target_owned[i * N + d] = 1;
            c->target_release[i * N + d] = 1;
        }
        dcp_status bs = c->net.barrier(c->net.ctx);
        if (st == DCP_OK) st = bs;
    }
    for (int i = 0; st == DCP_OK && i < L; i++)
        for (int d = 0; d < N; d++)
            if (pushes(c, c->first_rank + i, d) && !c->target[i * N + d])
                st = dcp_fail(DCP_ERR_IO, "rank %d received no buffer of rank %d", c->first_rank + i, d);
    free(msgs);
    free(fds);
    free(in_msgs);
    free(in_fds);
    return agree(c, st, "preparing push targets");
}

static dcp_status alloc_mailboxes(dcp_comm *c, uint64_t cap)
{
    dcp_status st = DCP_OK;
    const int L = c->local_count;
    c->cap = (cap + DCP_STORAGE_ALIGN_MAX - 1) / DCP_STORAGE_ALIGN_MAX * DCP_STORAGE_ALIGN_MAX;
    const uint64_t two = 2 * bank_bytes(c);
    DCP_TRY(make_segment(c));
    for (int i = 0; i < L && st == DCP_OK; i++) {
        int g = c->first_rank + i;
        if (c->seg && dcp_device_get_info(c->devs[i])->has_external_memory_host)
            st = dcp_buffer_import_host(c->devs[i], c->seg, c->seg_size, &c->segview[i]);
        if (st == DCP_OK && !c->put_seg[g])
            st = dcp_buffer_create(c->devs[i], two, c->put_host[g] ? DCP_MEMORY_HOST : DCP_MEMORY_DEVICE, &c->put[i]);
        if (st == DCP_OK && !c->view_seg[g])
            st = dcp_buffer_create_exportable(c->devs[i], two, c->inbox_host[g] ? DCP_MEMORY_HOST : DCP_MEMORY_DEVICE,
                                              c->inbox_handles[g], &c->inbox[i]);
        if (st == DCP_OK && (c->put_seg[g] || c->view_seg[g]) && !c->segview[i])
            st = dcp_fail(DCP_ERR_UNSUPPORTED, "rank %d: device %d cannot import the shared host memory", g,
                          dcp_device_get_info(c->devs[i])->logical_index);
        if (st == DCP_OK && c->inbox[i] && dcp_buffer_map(c->inbox[i])) memset(dcp_buffer_map(c->inbox[i]), 0, two);
    }
    st = agree(c, st, "allocating mailboxes");
    if (st == DCP_OK) st = make_targets(c);
    if (st != DCP_OK) goto fail;
    c->generation++;
    return DCP_OK;
fail:
    free_mailboxes(c);
    return dcp_fail_context(st, "communicator mailboxes (%llu bytes per block)", (unsigned long long)cap);
}

/* ---- creation ----------------------------------------------------------------------------- */

static dcp_status open_fdx(dcp_comm *c)
{
    dcp_status st = DCP_OK;
    char name[DCP_FDX_NAME_MAX] = "";
    int32_t pid = (int32_t)getpid();
    c->fdx_names = calloc(c->net.nproc, sizeof *c->fdx_names);
    c->pids = calloc(c->net.nproc, sizeof *c->pids);
    if (!c->fdx_names || !c->pids) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    if (st == DCP_OK) st = dcp_fdx_open(&c->fdx, name);
    st = agree(c, st, "opening descriptor sockets");
    if (st == DCP_OK) st = c->net.allgather(c->net.ctx, name, c->fdx_names, DCP_FDX_NAME_MAX);
    if (st == DCP_OK) st = c->net.allgather(c->net.ctx, &pid, c->pids, sizeof pid);
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
    dcp_transport t = config->transport;
    if (t == DCP_TRANSPORT_AUTO) {
        const char *env = getenv("DCP_VK_TRANSPORT");
        if (env && *env) {
            st = dcp_transport_parse(env, &t);
            if (st != DCP_OK) return dcp_fail_context(st, "$DCP_VK_TRANSPORT");
        }
    }
    if (t == DCP_TRANSPORT_MIXED || (int)t < 0 || t > DCP_TRANSPORT_DMABUF)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "communicator: transport %d cannot be asked for", (int)t);

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
    rank_caps *mine = calloc(L, sizeof *mine);
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
    plan_layout(c);
    if (c->has_fdx) DCP_TRY(open_fdx(c));
    DCP_TRY(alloc_mailboxes(c, config->block_bytes ? config->block_bytes : 65536));
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
    if (c->put) free_mailboxes(c);
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
    dcp_transport t = DCP_TRANSPORT_AUTO;
    for (int s = 0; s < c->size; s++)
        for (int d = 0; d < c->size; d++) {
            if (s == d) continue;
            if (t == DCP_TRANSPORT_AUTO) t = pair_t(c, s, d);
            else if (t != pair_t(c, s, d)) return DCP_TRANSPORT_MIXED;
        }
    if (t != DCP_TRANSPORT_AUTO) return t;
    return pair_t(c, 0, 0); /* one rank: how its own block moves */
}

dcp_transport dcp_comm_pair_transport(const dcp_comm *c, int s, int d)
{
    if (s < 0 || d < 0 || s >= c->size || d >= c->size) return DCP_TRANSPORT_AUTO;
    return pair_t(c, s, d);
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
                                  dcp_transport_name(pair_t(c, s, d)), count, count == 1 ? "" : "s", s, d,
                                  c->pair[k].why);
    }
    free(done);
    return buf;
}

uint64_t dcp_comm_bytes_sent(const dcp_comm *c, int i) { return i >= 0 && i < c->local_count ? c->bytes_sent[i] : 0; }
void dcp_comm_reset_stats(dcp_comm *c) { memset(c->bytes_sent, 0, sizeof *c->bytes_sent * c->local_count); }

dcp_status dcp_comm_reserve(dcp_comm *c, uint64_t bytes)
{
    if (bytes <= c->cap) return DCP_OK;
    dcp_status st = DCP_OK;
    for (int i = 0; i < c->local_count; i++) {
        dcp_status w = dcp_cmd_wait(c->cmds[i]);
        if (st == DCP_OK) st = w;
    }
    /* No peer may still use the memory that goes away. */
    if (c->net.nproc > 1) {
        st = agree(c, st, "growing the mailboxes");
        if (st == DCP_OK) st = c->net.barrier(c->net.ctx);
    }
    if (st != DCP_OK) return st;
    free_mailboxes(c);
    return alloc_mailboxes(c, bytes);
}

/* ---- the put-style exchange --------------------------------------------------------------- */

dcp_status dcp_comm_reset_banks(dcp_comm *c, bool host_sync)
{
    /* After an even number of exchanges bank 0 was last read before the last exchange, which every
     * process has passed: writing it again is safe. After an odd number, peers may still read it. */
    int odd = c->flips & 1;
    c->send_bank = 0;
    c->recv_bank = 1;
    c->flips = 0;
    if (host_sync && c->cross_sync && odd) return c->net.barrier(c->net.ctx);
    return DCP_OK;
}

uint64_t dcp_comm_generation(const dcp_comm *c) { return c->generation; }

dcp_comm_buf dcp_comm_put_area(const dcp_comm *c, int i)
{
    int g = c->first_rank + i;
    dcp_buffer *b = c->put_seg[g] ? c->segview[i] : c->put[i];
    return (dcp_comm_buf){b, put_off(c, g, c->send_bank)};
}

void dcp_comm_record_put(dcp_cmd *cmd)
{
    dcp_cmd_barrier_host(cmd); /* writes into the put area (copies, shaders) -> host exchange / peers' reads */
}

dcp_status dcp_comm_record_push(dcp_comm *c, int i, dcp_cmd *cmd, dcp_coll kind, uint64_t slot)
{
    dcp_status st = DCP_OK;
    const int N = c->size, s = c->first_rank + i;
    if (slot > c->cap)
        return dcp_fail(DCP_ERR_INTERNAL, "communicator: push of %llu-byte slots over the prepared %llu",
                        (unsigned long long)slot, (unsigned long long)c->cap);
    int any = 0;
    for (int d = 0; d < N; d++) any |= c->target[i * N + d] != NULL;
    if (!any) return DCP_OK;
    dcp_cmd_barrier(cmd); /* put-area writes -> push copies */
    dcp_comm_buf src = dcp_comm_put_area(c, i);
    for (int d = 0; d < N; d++) {
        dcp_buffer *t = c->target[i * N + d];
        if (!t) continue;
        uint64_t from = src.offset + (gathers(kind) ? 0 : (uint64_t)d * slot);
        uint64_t to = inbox_off(c, c->send_bank) + (uint64_t)s * slot;
        DCP_TRY(dcp_cmd_copy(cmd, src.buffer, from, t, to, slot));
        if (c->target_release[i * N + d]) dcp_cmd_release_external(cmd, t, to, slot);
    }
    dcp_cmd_barrier_host(cmd); /* push copies -> the receivers' reads after the round */
    return DCP_OK;
fail:
    return dcp_fail_context(st, "push of rank %d", s);
}

dcp_status dcp_comm_record_pull(dcp_comm *c, int i, dcp_cmd *cmd, dcp_coll kind, uint64_t slot)
{
    dcp_status st = DCP_OK;
    const int N = c->size, d = c->first_rank + i;
    if (c->view_seg[d]) return DCP_OK;
    int any = 0;
    if (c->inbox_acquire[i]) {
        dcp_cmd_acquire_external(cmd, c->inbox[i], inbox_off(c, c->recv_bank), bank_bytes(c));
        any = 1;
    }
    for (int s = 0; s < N; s++) {
        dcp_transport t = pair_t(c, s, d);
        if (t != DCP_TRANSPORT_HOSTMEM) continue;
        /* s's block for d, out of s's put region in the segment, into d's inbox. */
        uint64_t from = put_off(c, s, c->recv_bank) + (gathers(kind) ? 0 : (uint64_t)d * slot);
        DCP_TRY(dcp_cmd_copy(cmd, c->segview[i], from, c->inbox[i], inbox_off(c, c->recv_bank) + (uint64_t)s * slot, slot));
        any = 1;
    }
    if (any) dcp_cmd_barrier(cmd); /* received blocks -> their readers */
    return DCP_OK;
fail:
    return dcp_fail_context(st, "pull of rank %d", d);
}

static void count_payload(dcp_comm *c, uint64_t payload)
{
    for (int i = 0; i < c->local_count; i++) c->bytes_sent[i] += payload * (uint64_t)(c->size - 1);
}

static void flip(dcp_comm *c)
{
    c->recv_bank = c->send_bank;
    c->send_bank ^= 1;
    c->flips++;
}

/* mpi pairs: every process sends, per peer process, its local senders' blocks for that process's
 * ranks (a gathered block once per sender and process), in sender then receiver order. */
static dcp_status mpi_move(dcp_comm *c, dcp_coll kind, uint64_t slot)
{
    const int L = c->local_count, P = c->net.nproc, me = c->net.proc, gat = gathers(kind);
    uint64_t stot = 0, rtot = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int q = 0; q < P; q++) {
            uint64_t sn = 0, rn = 0;
            for (int a = 0; a < L; a++) {
                int any_s = 0, any_r = 0;
                for (int b = 0; b < L; b++) {
                    int here = me * L + a, there = q * L + b;
                    if (q != me && pair_t(c, here, there) == DCP_TRANSPORT_MPI) {
                        if (!gat) {
                            if (pass) memcpy(c->net_send + c->sdispl[q] + sn, put_host_ptr(c, here, c->send_bank) + (uint64_t)there * slot, slot);
                            sn += slot;
                        }
                        any_s = 1;
                    }
                    if (q != me && pair_t(c, there, here) == DCP_TRANSPORT_MPI) any_r = 1;
                }
                if (gat && any_s) {
                    if (pass) memcpy(c->net_send + c->sdispl[q] + sn, put_host_ptr(c, me * L + a, c->send_bank), slot);
                    sn += slot;
                }
                (void)any_r;
            }
            /* Receives from q: per q's sender b, a gathered block once, or per local receiver. */
            for (int b = 0; b < L; b++) {
                int there = q * L + b, any = 0;
                for (int a = 0; a < L; a++)
                    if (q != me && pair_t(c, there, me * L + a) == DCP_TRANSPORT_MPI) {
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
                if (q == me || pair_t(c, there, here) != DCP_TRANSPORT_MPI) continue;
                if (!gat || !blk) {
                    blk = c->net_recv + c->rdispl[q] + rn;
                    rn += slot;
                }
                memcpy(inbox_host_ptr(c, a, c->send_bank) + (uint64_t)there * slot, blk, slot);
            }
        }
    }
    return DCP_OK;
}

dcp_status dcp_comm_put_exchange(dcp_comm *c, dcp_coll kind, uint64_t slot, uint64_t payload)
{
    dcp_status st = DCP_OK;
    if (slot > c->cap)
        return dcp_fail(DCP_ERR_INTERNAL, "communicator: put slot of %llu bytes over the prepared %llu",
                        (unsigned long long)slot, (unsigned long long)c->cap);
    count_payload(c, payload);
    /* staging: memcpy between this process's ranks. */
    for (int j = 0; j < c->local_count; j++)
        for (int i = 0; i < c->local_count; i++) {
            int s = c->first_rank + i, d = c->first_rank + j;
            if (pair_t(c, s, d) != DCP_TRANSPORT_STAGING) continue;
            memcpy(inbox_host_ptr(c, j, c->send_bank) + (uint64_t)s * slot,
                   put_host_ptr(c, s, c->send_bank) + (gathers(kind) ? 0 : (uint64_t)d * slot), slot);
        }
    if (c->has_mpi && (st = mpi_move(c, kind, slot)) != DCP_OK) return dcp_fail_context(st, "MPI exchange");
    /* GPUs of other processes wrote (or read) memory of this one: all rounds have completed. */
    if (c->cross_sync && (st = c->net.barrier(c->net.ctx)) != DCP_OK) return st;
    flip(c);
    return DCP_OK;
}

void dcp_comm_put_advance(dcp_comm *c, dcp_coll kind, uint64_t slot, uint64_t payload)
{
    (void)kind;
    (void)slot;
    count_payload(c, payload);
    flip(c);
}

void dcp_comm_put_view(const dcp_comm *c, int i, dcp_coll kind, uint64_t slot, dcp_comm_buf *first,
                       uint64_t *stride)
{
    int d = c->first_rank + i;
    if (c->view_seg[d]) {
        /* Source s's put bank sits in region s of the segment (the whole comm is on this node). */
        *first = (dcp_comm_buf){c->segview[i], put_off(c, 0, c->recv_bank) + (gathers(kind) ? 0 : (uint64_t)d * slot)};
        *stride = c->region;
    } else {
        *first = (dcp_comm_buf){c->inbox[i], inbox_off(c, c->recv_bank)};
        *stride = slot;
    }
}

/* ---- GPU-synchronised rounds ----------------------------------------------------------------- */

void dcp_comm_sync_caps_get(const dcp_comm *c, dcp_comm_sync_caps *out)
{
    const int N = c->size;
    memset(out, 0, sizeof *out);
    out->share = DCP_SEM_SHARE_NATIVE;
    int hs = -1, hd = -1, ns = -1, nd = -1;
    for (int s = 0; s < N; s++)
        for (int d = 0; d < N; d++) {
            if (host_moves(pair_t(c, s, d)) && hs < 0) hs = s, hd = d;
            const rank_caps *a = &c->caps[s], *b = &c->caps[d];
            dcp_sem_share sh;
            if (a->proc == b->proc && a->vkdevice == b->vkdevice) sh = DCP_SEM_SHARE_NATIVE;
            else if (!memcmp(a->device_uuid, b->device_uuid, 16) && !memcmp(a->driver_uuid, b->driver_uuid, 16) &&
                     a->timeline && b->timeline && (a->sem_export & DCP_HANDLE_OPAQUE_FD) &&
                     (b->sem_import & DCP_HANDLE_OPAQUE_FD))
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
                 dcp_transport_name(pair_t(c, hs, hd)));
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

enum { FDX_SEM = 2 };

dcp_status dcp_comm_share_semaphores(dcp_comm *c, dcp_sem *const *mine, dcp_sem **peers, uint8_t *owned)
{
    dcp_status st = DCP_OK;
    const int L = c->local_count, N = c->size, P = c->net.nproc;
    dcp_fdx_msg *msgs = NULL, *in_msgs = NULL;
    int *fds = NULL, *in_fds = NULL, nin = 0;
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
    if (P > 1) {
        if (!c->fdx && st == DCP_OK) st = open_fdx(c);
        msgs = calloc((size_t)L * N + 1, sizeof *msgs);
        fds = calloc((size_t)L * N + 1, sizeof *fds);
        if (!msgs || !fds) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        for (int q = 0; q < P && st == DCP_OK; q++) {
            if (q == c->net.proc) continue;
            int n = 0;
            for (int j = 0; j < L && st == DCP_OK; j++)
                for (int b = 0; b < L && st == DCP_OK; b++) {
                    msgs[n] = (dcp_fdx_msg){(uint32_t)(c->first_rank + j), (uint32_t)(q * L + b), FDX_SEM, 0, 0, 0};
                    st = dcp_sem_export_fd(mine[j], &fds[n]);
                    if (st == DCP_OK) n++;
                }
            if (st == DCP_OK) st = dcp_fdx_send(c->fdx_names[q], msgs, fds, n);
            for (int k = 0; k < n; k++) close(fds[k]);
        }
        st = agree(c, st, "sharing semaphores");
        if (st == DCP_OK) {
            pid_t *pids = calloc(P, sizeof *pids);
            if (!pids) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            for (int q = 0; pids && q < P; q++) pids[q] = c->pids[q];
            if (st == DCP_OK) st = dcp_fdx_recv(c->fdx, P - 1, pids, P, 120, &in_msgs, &in_fds, &nin);
            free(pids);
        }
        for (int k = 0; k < nin; k++) {
            int r = (int)in_msgs[k].from_rank, to = (int)in_msgs[k].to_rank;
            if (st != DCP_OK || in_msgs[k].kind != FDX_SEM || !is_local(c, to) || r >= N || peers[(to - c->first_rank) * N + r]) {
                close(in_fds[k]);
                continue;
            }
            int i = to - c->first_rank;
            st = dcp_sem_import_fd(c->devs[i], in_fds[k], &peers[i * N + r]);
            owned[i * N + r] = st == DCP_OK;
        }
    }
    free(msgs);
    free(fds);
    free(in_msgs);
    free(in_fds);
    return agree(c, st, "sharing semaphores");
}

/* ---- synchronous collectives ---------------------------------------------------------------- */

static dcp_status scratch_for(dcp_comm *c, uint64_t bytes)
{
    dcp_status st = DCP_OK;
    if (bytes <= c->scratch_bytes) return DCP_OK;
    for (int i = 0; i < c->local_count; i++) {
        dcp_buffer_destroy(c->scratch[i]);
        c->scratch[i] = NULL;
    }
    c->scratch_bytes = 0;
    for (int i = 0; i < c->local_count; i++) DCP_TRY(dcp_buffer_create(c->devs[i], bytes, DCP_MEMORY_HOST, &c->scratch[i]));
    c->scratch_bytes = bytes;
fail:
    return st;
}

/* res = sum over ranks s (in order, f32 accumulation) of parts [s][count]. */
static void reduce_sum(const char *parts, char *res, int size, uint64_t count, dcp_dtype dt, uint64_t block)
{
    for (uint64_t e = 0; e < count; e++) {
        float acc = 0.0f;
        for (int s = 0; s < size; s++) {
            const char *p = parts + (uint64_t)s * block;
            acc += dt == DCP_DTYPE_F32 ? ((const float *)p)[e] : dcp_f16_to_f32(((const uint16_t *)p)[e]);
        }
        if (dt == DCP_DTYPE_F32) ((float *)res)[e] = acc;
        else ((uint16_t *)res)[e] = dcp_f32_to_f16(acc);
    }
}

static dcp_status collective(dcp_comm *c, dcp_coll kind, const dcp_comm_buf *send, const dcp_comm_buf *recv,
                             uint64_t count, dcp_dtype dt, const char *name)
{
    dcp_status st = DCP_OK;
    const int N = c->size, L = c->local_count, red = kind == DCP_COLL_REDUCE_SCATTER || kind == DCP_COLL_ALL_REDUCE;
    if (dt != DCP_DTYPE_F32 && dt != DCP_DTYPE_F16)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: dtype %d (f32 or f16)", name, (int)dt);
    if (count == 0) return DCP_OK;
    const uint64_t block = count * dcp_dtype_size(dt), slot = (block + 3) / 4 * 4;
    for (int i = 0; i < L; i++) {
        if (!send[i].buffer || !recv[i].buffer || dcp_buffer_device(send[i].buffer) != c->devs[i] ||
            dcp_buffer_device(recv[i].buffer) != c->devs[i])
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: send/recv of local rank %d is NULL or on another device",
                            name, i);
    }
    DCP_TRY(dcp_comm_reserve(c, slot));
    if (red) DCP_TRY(scratch_for(c, (uint64_t)(N + 1) * block));
    /* Round 1: the blocks into the put areas, pushed. */
    for (int i = 0; i < L; i++) {
        dcp_cmd *cmd = c->cmds[i];
        DCP_TRY(dcp_cmd_reset(cmd));
        dcp_comm_buf area = dcp_comm_put_area(c, i);
        if (gathers(kind))
            DCP_TRY(dcp_cmd_copy(cmd, send[i].buffer, send[i].offset, area.buffer, area.offset, block));
        else
            for (int d = 0; d < N; d++)
                DCP_TRY(dcp_cmd_copy(cmd, send[i].buffer, send[i].offset + (uint64_t)d * block, area.buffer,
                                     area.offset + (uint64_t)d * slot, block));
        dcp_comm_record_put(cmd);
        DCP_TRY(dcp_comm_record_push(c, i, cmd, kind, slot));
    }
    DCP_TRY(dcp_cmd_run_all(c->cmds, (uint32_t)L));
    DCP_TRY(dcp_comm_put_exchange(c, kind, slot, block));
    /* Round 2: the received blocks into recv (reductions: into the scratch, summed on the host). */
    for (int i = 0; i < L; i++) {
        dcp_cmd *cmd = c->cmds[i];
        DCP_TRY(dcp_cmd_reset(cmd));
        DCP_TRY(dcp_comm_record_pull(c, i, cmd, kind, slot));
        dcp_comm_buf first;
        uint64_t stride;
        dcp_comm_put_view(c, i, kind, slot, &first, &stride);
        for (int s = 0; s < N; s++) {
            if (red)
                DCP_TRY(dcp_cmd_copy(cmd, first.buffer, first.offset + (uint64_t)s * stride, c->scratch[i],
                                     (uint64_t)s * block, block));
            else
                DCP_TRY(dcp_cmd_copy(cmd, first.buffer, first.offset + (uint64_t)s * stride, recv[i].buffer,
                                     recv[i].offset + (uint64_t)s * block, block));
        }
        if (red) dcp_cmd_barrier_host(cmd); /* scratch copies -> host sum */
        else dcp_cmd_barrier(cmd);          /* recv copies -> later readers */
    }
    DCP_TRY(dcp_cmd_run_all(c->cmds, (uint32_t)L));
    if (red) {
        for (int i = 0; i < L; i++) {
            char *p = dcp_buffer_map(c->scratch[i]);
            reduce_sum(p, p + (uint64_t)N * block, N, count, dt, block);
            DCP_TRY(dcp_cmd_reset(c->cmds[i]));
            DCP_TRY(dcp_cmd_copy(c->cmds[i], c->scratch[i], (uint64_t)N * block, recv[i].buffer, recv[i].offset, block));
            dcp_cmd_barrier(c->cmds[i]); /* result copy -> later readers */
        }
        DCP_TRY(dcp_cmd_run_all(c->cmds, (uint32_t)L));
    }
    return DCP_OK;
fail:
    return dcp_fail_context(st, "%s of %llu %s values over %d ranks (%s)", name, (unsigned long long)count,
                            dcp_dtype_name(dt), c->size, dcp_transport_name(dcp_comm_transport(c)));
}

dcp_status dcp_comm_all_gather(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                               dcp_dtype dtype, dcp_comm *comm)
{
    return collective(comm, DCP_COLL_ALL_GATHER, send, recv, count, dtype, "all_gather");
}

dcp_status dcp_comm_reduce_scatter(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                                   dcp_dtype dtype, dcp_red_op op, dcp_comm *comm)
{
    if (op != DCP_RED_SUM) return dcp_fail(DCP_ERR_UNSUPPORTED, "reduce_scatter: op %d (only sum)", (int)op);
    return collective(comm, DCP_COLL_REDUCE_SCATTER, send, recv, count, dtype, "reduce_scatter");
}

dcp_status dcp_comm_all_to_all(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                               dcp_dtype dtype, dcp_comm *comm)
{
    return collective(comm, DCP_COLL_ALL_TO_ALL, send, recv, count, dtype, "all_to_all");
}

dcp_status dcp_comm_all_reduce(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                               dcp_dtype dtype, dcp_red_op op, dcp_comm *comm)
{
    if (op != DCP_RED_SUM) return dcp_fail(DCP_ERR_UNSUPPORTED, "all_reduce: op %d (only sum)", (int)op);
    return collective(comm, DCP_COLL_ALL_REDUCE, send, recv, count, dtype, "all_reduce");
}

#ifndef DCP_HAVE_MPI
dcp_status dcp_comm_init_mpi(dcp_device *const *devices, int local_count, const dcp_comm_config *config,
                             dcp_comm **out)
{
    *out = NULL;
    return dcp_fail(DCP_ERR_UNSUPPORTED, "dcp-vk was built without MPI (install MPICH and reconfigure)");
}
dcp_status dcp_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    *rank = 0;
    *size = 1;
    return dcp_fail(DCP_ERR_UNSUPPORTED, "dcp-vk was built without MPI (install MPICH and reconfigure)");
}
void dcp_mpi_finalize(void) {}
void dcp_mpi_barrier(void) {}
double dcp_mpi_max(double x) { return x; }
#endif
