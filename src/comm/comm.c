/* Communicator: transports in one process (hostmem, staging; devgroup detection), host mailboxes,
 * collectives (see include/dcpvk/comm.h). The MPI part lives in mpi_transport.c. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/put.h"
#include "common/error.h"
#include "vk/hostmem.h"

/* Mailbox layout of one rank's region (block stride = the call's block bytes, capacity cap):
 *   out [size][cap] at 0; in [2 banks][size][cap] at size * cap; res [cap] at 3 * size * cap;
 *   put [2 banks][size][cap] at (3 * size + 1) * cap.
 * The put area serves the put-style exchange (dcp_comm_put_area): with hostmem every device sees
 * every rank's region in the one imported allocation, so a rank writes its outgoing blocks once
 * into its own put bank and receivers read them there; other transports move them into the in
 * areas on the host.
 * The in area has two banks that alternate between consecutive collectives: the DCP step records
 * the receive of one collective and the sends of the next into one submission, and with hostmem
 * the sends write straight into the peers' in areas. */
struct dcp_comm {
    int size, local_count, first_rank;
    dcp_transport transport;  /* HOSTMEM, STAGING or MPI */
    dcp_comm_net net;         /* nproc 1 without MPI */
    dcp_device **devs;        /* [local_count] */
    dcp_cmd **cmds;           /* [local_count] the collectives' own commands */
    uint64_t cap;             /* block capacity, bytes */
    uint64_t region;          /* bytes of one rank's region */
    dcp_buffer **views;       /* [local_count] device view of the mailboxes */
    uint64_t *view_base;      /* [local_count] offset of rank i's own region in views[i] */
    char **host;              /* [local_count] host pointer of rank i's region */
    void *shared;             /* hostmem: the one host allocation of every region */
    char *net_send, *net_recv;/* MPI packing buffers */
    uint64_t net_cap;
    uint64_t *bytes_sent;     /* [local_count] */
    int send_bank, recv_bank; /* in-area banks of the next send and of the last exchange */
    uint64_t generation;      /* bumped whenever the mailboxes move (recorded commands referring to them go stale) */
};

const char *dcp_transport_name(dcp_transport t)
{
    switch (t) {
    case DCP_TRANSPORT_AUTO: return "auto";
    case DCP_TRANSPORT_DEVGROUP: return "devgroup";
    case DCP_TRANSPORT_HOSTMEM: return "hostmem";
    case DCP_TRANSPORT_STAGING: return "staging";
    case DCP_TRANSPORT_MPI: return "mpi";
    }
    return "unknown";
}

dcp_status dcp_transport_parse(const char *name, dcp_transport *out)
{
    for (int t = DCP_TRANSPORT_AUTO; t <= DCP_TRANSPORT_MPI; t++)
        if (name && strcmp(name, dcp_transport_name((dcp_transport)t)) == 0) {
            *out = (dcp_transport)t;
            return DCP_OK;
        }
    return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                    "transport \"%s\" is not one of auto, devgroup, hostmem, staging, mpi", name ? name : "(null)");
}

/* Why the devices cannot use device-group peer copies (always, today). */
static dcp_status devgroup_unsupported(dcp_device *const *devices, int count)
{
    for (int i = 0; i < count; i++) {
        const dcp_device_info *a = dcp_device_get_info(devices[i]);
        for (int j = 0; j < i; j++)
            if (dcp_device_get_info(devices[j])->physical_index == a->physical_index)
                return dcp_fail(DCP_ERR_UNSUPPORTED,
                                "transport devgroup: devices %d and %d are the same physical device %d "
                                "(%s); peer memory needs distinct devices of one Vulkan device group",
                                j, i, a->physical_index, a->name);
        if (a->physical_group_size < (uint32_t)count)
            return dcp_fail(DCP_ERR_UNSUPPORTED,
                            "transport devgroup: device %d (%s) is in a Vulkan device group of %u physical "
                            "device(s), not a group holding all %d devices with peer memory",
                            i, a->name, a->physical_group_size, count);
    }
    return dcp_fail(DCP_ERR_UNSUPPORTED,
                    "transport devgroup: the devices form a Vulkan device group, but dcp-vk creates one "
                    "VkDevice per device, so peer memory is not available; use hostmem or staging");
}

static void free_mailboxes(dcp_comm *c)
{
    for (int i = 0; i < c->local_count; i++) {
        dcp_buffer_destroy(c->views[i]);
        c->views[i] = NULL;
    }
    free(c->shared);
    c->shared = NULL;
    c->cap = 0;
}

uint64_t dcp_comm_mailbox_bytes(int size, uint64_t bytes)
{
    return (5ull * (uint64_t)size + 1) * ((bytes + 255) / 256 * 256);
}

static dcp_status alloc_mailboxes(dcp_comm *c, uint64_t cap)
{
    dcp_status st = DCP_OK;
    cap = (cap + 255) / 256 * 256;
    uint64_t region = dcp_comm_mailbox_bytes(c->size, cap);
    if (c->transport == DCP_TRANSPORT_HOSTMEM) {
        uint64_t align = 4096;
        for (int i = 0; i < c->local_count; i++) {
            uint64_t a;
            DCP_TRY(dcp_vk_host_import_alignment(c->devs[i], &a));
            if (a > align) align = a;
        }
        region = (region + align - 1) / align * align;
        uint64_t total = region * c->local_count;
        c->shared = aligned_alloc(align, total);
        if (!c->shared) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory (%llu bytes of mailboxes)",
                                        (unsigned long long)total);
        memset(c->shared, 0, total);
        for (int i = 0; i < c->local_count; i++) {
            DCP_TRY(dcp_buffer_import_host(c->devs[i], c->shared, total, &c->views[i]));
            c->view_base[i] = region * i;
            c->host[i] = (char *)c->shared + region * i;
        }
    } else {
        for (int i = 0; i < c->local_count; i++) {
            DCP_TRY(dcp_buffer_create(c->devs[i], region, DCP_MEMORY_HOST, &c->views[i]));
            c->view_base[i] = 0;
            c->host[i] = dcp_buffer_map(c->views[i]);
        }
    }
    c->cap = cap;
    c->region = region;
    c->generation++;
    return DCP_OK;
fail:
    free_mailboxes(c);
    return dcp_fail_context(st, "communicator mailboxes (transport %s)", dcp_transport_name(c->transport));
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
    if (t == DCP_TRANSPORT_MPI)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "transport mpi is chosen by dcp_comm_init_mpi, not by config");
    if (t == DCP_TRANSPORT_DEVGROUP) return devgroup_unsupported(devices, local_count);
    int all_host = 1;
    for (int i = 0; i < local_count; i++)
        if (!dcp_device_get_info(devices[i])->has_external_memory_host) all_host = 0;
    if (t == DCP_TRANSPORT_HOSTMEM && !all_host)
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "transport hostmem: a device lacks VK_EXT_external_memory_host (use staging)");
    if (t == DCP_TRANSPORT_AUTO) t = all_host ? DCP_TRANSPORT_HOSTMEM : DCP_TRANSPORT_STAGING;
    if (net && net->nproc > 1) t = DCP_TRANSPORT_MPI;

    dcp_comm *c = calloc(1, sizeof *c);
    if (!c) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    c->local_count = local_count;
    if (net) c->net = *net;
    else c->net.nproc = 1;
    c->size = local_count * c->net.nproc;
    c->first_rank = c->net.proc * local_count;
    c->transport = t;
    c->devs = calloc(local_count, sizeof *c->devs);
    c->cmds = calloc(local_count, sizeof *c->cmds);
    c->views = calloc(local_count, sizeof *c->views);
    c->view_base = calloc(local_count, sizeof *c->view_base);
    c->host = calloc(local_count, sizeof *c->host);
    c->bytes_sent = calloc(local_count, sizeof *c->bytes_sent);
    if (!c->devs || !c->cmds || !c->views || !c->view_base || !c->host || !c->bytes_sent) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    for (int i = 0; i < local_count; i++) {
        c->devs[i] = devices[i];
        DCP_TRY(dcp_cmd_create(devices[i], &c->cmds[i]));
    }
    DCP_TRY(alloc_mailboxes(c, config->block_bytes ? config->block_bytes : 65536));
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
    if (c->views) free_mailboxes(c);
    if (c->net.destroy) c->net.destroy(c->net.ctx);
    free(c->devs);
    free(c->cmds);
    free(c->views);
    free(c->view_base);
    free(c->host);
    free(c->bytes_sent);
    free(c->net_send);
    free(c->net_recv);
    free(c);
}

int dcp_comm_size(const dcp_comm *c) { return c->size; }
int dcp_comm_local_count(const dcp_comm *c) { return c->local_count; }
int dcp_comm_first_rank(const dcp_comm *c) { return c->first_rank; }
dcp_device *dcp_comm_device(const dcp_comm *c, int i) { return i >= 0 && i < c->local_count ? c->devs[i] : NULL; }
dcp_transport dcp_comm_transport(const dcp_comm *c) { return c->transport; }
uint64_t dcp_comm_bytes_sent(const dcp_comm *c, int i)
{
    return i >= 0 && i < c->local_count ? c->bytes_sent[i] : 0;
}
void dcp_comm_reset_stats(dcp_comm *c) { memset(c->bytes_sent, 0, sizeof *c->bytes_sent * c->local_count); }
static void count_sent(dcp_comm *c, int i, uint64_t bytes) { c->bytes_sent[i] += bytes; }

dcp_status dcp_comm_reserve(dcp_comm *c, uint64_t bytes)
{
    if (bytes <= c->cap) return DCP_OK;
    for (int i = 0; i < c->local_count; i++) {
        dcp_status st = dcp_cmd_wait(c->cmds[i]);
        if (st != DCP_OK) return st;
    }
    free_mailboxes(c);
    return alloc_mailboxes(c, bytes);
}

/* Device offsets in views[i]: rank `owner`'s (local index) areas. */
static uint64_t off_out(const dcp_comm *c, int owner_local, uint64_t slot, uint64_t block)
{
    return c->view_base[owner_local] + slot * block;
}
static uint64_t off_in(const dcp_comm *c, int owner_local, int bank, uint64_t slot, uint64_t block)
{
    return c->view_base[owner_local] + (1ull + bank) * c->size * c->cap + slot * block;
}
static uint64_t off_res(const dcp_comm *c, int owner_local)
{
    return c->view_base[owner_local] + 3ull * c->size * c->cap;
}
/* The same places as host pointers. */
static char *host_out(const dcp_comm *c, int l, uint64_t slot, uint64_t block) { return c->host[l] + slot * block; }
static char *host_in(const dcp_comm *c, int l, int bank, uint64_t slot, uint64_t block)
{
    return c->host[l] + (1ull + bank) * c->size * c->cap + slot * block;
}
static char *host_res(const dcp_comm *c, int l) { return c->host[l] + 3ull * c->size * c->cap; }

static int gathers(dcp_coll k) { return k == DCP_COLL_ALL_GATHER || k == DCP_COLL_ALL_REDUCE; }

/* Records local rank i's sends of collective kind into cmd (on rank i's device): block = bytes of
 * one block (count * dtype size). Ends with a barrier towards the host. */
static dcp_status record_send(dcp_cmd *cmd, dcp_comm *c, int i, dcp_coll kind, dcp_comm_buf send, uint64_t block)
{
    dcp_status st = DCP_OK;
    if (block > c->cap)
        return dcp_fail(DCP_ERR_INTERNAL, "communicator: block of %llu bytes over the prepared %llu",
                        (unsigned long long)block, (unsigned long long)c->cap);
    int g = c->first_rank + i;
    if (c->transport == DCP_TRANSPORT_HOSTMEM) {
        /* Straight into every peer's mailbox (all peers are local: one process). */
        for (int d = 0; d < c->size; d++) {
            uint64_t src = send.offset + (gathers(kind) ? 0 : (uint64_t)d * block);
            DCP_TRY(dcp_cmd_copy(cmd, send.buffer, src, c->views[i], off_in(c, d, c->send_bank, (uint64_t)g, block),
                                 block));
        }
    } else {
        uint64_t n = gathers(kind) ? block : block * c->size;
        DCP_TRY(dcp_cmd_copy(cmd, send.buffer, send.offset, c->views[i], off_out(c, i, 0, block), n));
    }
    dcp_cmd_barrier_host(cmd); /* copies into mailboxes -> host exchange */
    count_sent(c, i, block * (uint64_t)(c->size - 1));
    return DCP_OK;
fail:
    return dcp_fail_context(st, "communicator send of rank %d", g);
}

static void reduce_sum(dcp_comm *c, int l, uint64_t count, dcp_dtype dt, uint64_t block)
{
    char *res = host_res(c, l);
    for (uint64_t e = 0; e < count; e++) {
        float acc = 0.0f;
        for (int s = 0; s < c->size; s++) {
            const char *p = host_in(c, l, c->send_bank, (uint64_t)s, block);
            acc += dt == DCP_DTYPE_F32 ? ((const float *)p)[e] : dcp_f16_to_f32(((const uint16_t *)p)[e]);
        }
        if (dt == DCP_DTYPE_F32) ((float *)res)[e] = acc;
        else ((uint16_t *)res)[e] = dcp_f32_to_f16(acc);
    }
}

/* Host step once every local rank's send recording has completed: moves blocks between ranks and
 * reduces (sum, rank order, f32 accumulation) for REDUCE_SCATTER / ALL_REDUCE, then flips the
 * mailbox bank. */
static dcp_status host_exchange(dcp_comm *c, dcp_coll kind, uint64_t count, dcp_dtype dt)
{
    uint64_t block = count * dcp_dtype_size(dt);
    const int L = c->local_count, P = c->net.nproc;
    if (c->transport == DCP_TRANSPORT_STAGING) {
        for (int d = 0; d < L; d++)
            for (int s = 0; s < L; s++)
                memcpy(host_in(c, d, c->send_bank, (uint64_t)s, block),
                       host_out(c, s, gathers(kind) ? 0 : (uint64_t)d, block), block);
    } else if (c->transport == DCP_TRANSPORT_MPI) {
        uint64_t need = (uint64_t)P * L * L * block;
        if (need > c->net_cap) {
            free(c->net_send);
            free(c->net_recv);
            c->net_send = malloc(need);
            c->net_recv = malloc(need);
            c->net_cap = c->net_send && c->net_recv ? need : 0;
            if (!c->net_cap) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory (MPI buffers)");
        }
        dcp_status st;
        if (gathers(kind)) {
            /* send [L][block] -> recv [P][L][block] = every global rank's block in order */
            for (int l = 0; l < L; l++) memcpy(c->net_send + l * block, host_out(c, l, 0, block), block);
            st = c->net.allgather(c->net.ctx, c->net_send, c->net_recv, (uint64_t)L * block);
            if (st != DCP_OK) return st;
            for (int d = 0; d < L; d++)
                memcpy(host_in(c, d, c->send_bank, 0, block), c->net_recv, (uint64_t)c->size * block);
        } else {
            /* send [dst proc][dst local][src local][block] -> recv [src proc][dst local][src local] */
            for (int dp = 0; dp < P; dp++)
                for (int dl = 0; dl < L; dl++)
                    for (int sl = 0; sl < L; sl++)
                        memcpy(c->net_send + (((uint64_t)dp * L + dl) * L + sl) * block,
                               host_out(c, sl, (uint64_t)dp * L + dl, block), block);
            st = c->net.alltoall(c->net.ctx, c->net_send, c->net_recv, (uint64_t)L * L * block);
            if (st != DCP_OK) return st;
            for (int sp = 0; sp < P; sp++)
                for (int dl = 0; dl < L; dl++)
                    for (int sl = 0; sl < L; sl++)
                        memcpy(host_in(c, dl, c->send_bank, (uint64_t)sp * L + sl, block),
                               c->net_recv + (((uint64_t)sp * L + dl) * L + sl) * block, block);
        }
    }
    /* HOSTMEM: the devices already wrote every mailbox. */
    if (kind == DCP_COLL_REDUCE_SCATTER || kind == DCP_COLL_ALL_REDUCE)
        for (int l = 0; l < L; l++) reduce_sum(c, l, count, dt, block);
    c->recv_bank = c->send_bank;
    c->send_bank ^= 1;
    return DCP_OK;
}

/* Records local rank i's copy of the result into recv (a barrier orders it before later work). */
static dcp_status record_recv(dcp_cmd *cmd, dcp_comm *c, int i, dcp_coll kind, dcp_comm_buf recv, uint64_t block)
{
    dcp_status st;
    if (kind == DCP_COLL_REDUCE_SCATTER || kind == DCP_COLL_ALL_REDUCE)
        st = dcp_cmd_copy(cmd, c->views[i], off_res(c, i), recv.buffer, recv.offset, block);
    else
        st = dcp_cmd_copy(cmd, c->views[i], off_in(c, i, c->recv_bank, 0, block), recv.buffer, recv.offset,
                          block * (uint64_t)c->size);
    if (st != DCP_OK) return dcp_fail_context(st, "communicator receive of rank %d", c->first_rank + i);
    dcp_cmd_barrier(cmd); /* mailbox -> recv copy -> later readers of recv */
    return DCP_OK;
}

/* ---- put-style exchange ---------------------------------------------------------------------- */

static uint64_t off_put(const dcp_comm *c, int owner_local, int bank)
{
    return c->view_base[owner_local] + (3ull * c->size + 1) * c->cap + (uint64_t)bank * c->size * c->cap;
}

void dcp_comm_reset_banks(dcp_comm *c)
{
    c->send_bank = 0;
    c->recv_bank = 1;
}

uint64_t dcp_comm_generation(const dcp_comm *c) { return c->generation; }

dcp_comm_buf dcp_comm_put_area(const dcp_comm *c, int i)
{
    if (c->transport == DCP_TRANSPORT_HOSTMEM) return (dcp_comm_buf){c->views[i], off_put(c, i, c->send_bank)};
    return (dcp_comm_buf){c->views[i], off_out(c, i, 0, 0)};
}

void dcp_comm_record_put(dcp_cmd *cmd)
{
    dcp_cmd_barrier_host(cmd); /* writes into the put area (copies, shaders) -> host exchange / peers' reads */
}

dcp_status dcp_comm_put_exchange(dcp_comm *c, dcp_coll kind, uint64_t slot, uint64_t payload)
{
    if (slot > c->cap)
        return dcp_fail(DCP_ERR_INTERNAL, "communicator: put slot of %llu bytes over the prepared %llu",
                        (unsigned long long)slot, (unsigned long long)c->cap);
    for (int i = 0; i < c->local_count; i++) count_sent(c, i, payload * (uint64_t)(c->size - 1));
    if (c->transport != DCP_TRANSPORT_HOSTMEM) {
        /* Move the blocks into the in areas (no reduction: receivers sum on their devices). */
        dcp_coll move = kind == DCP_COLL_ALL_GATHER || kind == DCP_COLL_ALL_REDUCE ? DCP_COLL_ALL_GATHER
                                                                                    : DCP_COLL_ALL_TO_ALL;
        return host_exchange(c, move, slot / 4, DCP_DTYPE_F32);
    }
    c->recv_bank = c->send_bank;
    c->send_bank ^= 1;
    return DCP_OK;
}

void dcp_comm_put_view(const dcp_comm *c, int i, dcp_coll kind, uint64_t slot, dcp_comm_buf *first,
                       uint64_t *stride)
{
    const int gathers_ = kind == DCP_COLL_ALL_GATHER || kind == DCP_COLL_ALL_REDUCE;
    if (c->transport == DCP_TRANSPORT_HOSTMEM) {
        /* Source s's put bank sits in region s of the one allocation that views[i] covers. */
        *first = (dcp_comm_buf){c->views[i],
                                off_put(c, 0, c->recv_bank) + (gathers_ ? 0 : (uint64_t)(c->first_rank + i) * slot)};
        *stride = c->region;
    } else {
        *first = (dcp_comm_buf){c->views[i], off_in(c, i, c->recv_bank, 0, slot)};
        *stride = slot;
    }
}

static dcp_status collective(dcp_comm *c, dcp_coll kind, const dcp_comm_buf *send, const dcp_comm_buf *recv,
                             uint64_t count, dcp_dtype dt, const char *name)
{
    dcp_status st = DCP_OK;
    if (dt != DCP_DTYPE_F32 && dt != DCP_DTYPE_F16)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: dtype %d (f32 or f16)", name, (int)dt);
    if (count == 0) return DCP_OK;
    uint64_t block = count * dcp_dtype_size(dt);
    for (int i = 0; i < c->local_count; i++) {
        if (!send[i].buffer || !recv[i].buffer || dcp_buffer_device(send[i].buffer) != c->devs[i] ||
            dcp_buffer_device(recv[i].buffer) != c->devs[i])
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: send/recv of local rank %d is NULL or on another device",
                            name, i);
    }
    DCP_TRY(dcp_comm_reserve(c, block));
    for (int i = 0; i < c->local_count; i++) {
        DCP_TRY(dcp_cmd_reset(c->cmds[i]));
        DCP_TRY(record_send(c->cmds[i], c, i, kind, send[i], block));
    }
    DCP_TRY(dcp_cmd_run_all(c->cmds, (uint32_t)c->local_count));
    DCP_TRY(host_exchange(c, kind, count, dt));
    for (int i = 0; i < c->local_count; i++) {
        DCP_TRY(dcp_cmd_reset(c->cmds[i]));
        DCP_TRY(record_recv(c->cmds[i], c, i, kind, recv[i], block));
    }
    DCP_TRY(dcp_cmd_run_all(c->cmds, (uint32_t)c->local_count));
    return DCP_OK;
fail:
    return dcp_fail_context(st, "%s of %llu %s values over %d ranks (%s)", name, (unsigned long long)count,
                            dcp_dtype_name(dt), c->size, dcp_transport_name(c->transport));
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
