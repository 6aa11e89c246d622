/* The recordable put exchange (src/comm/put.h): put areas, the pushes a sender's recording ends
 * with, the pulls a receiver's next recording starts with, the host part between the rounds (memcpy
 * in this process; the net's packing for mpi pairs, mpi_transport.c), the views receivers read in
 * place, and the two banks. Which pair does what is its transport's row (select.c). */
#include <string.h>

#include "comm/comm_internal.h"
#include "common/error.h"
#include "vk/external.h"

/* ---- banks --------------------------------------------------------------------------------- */

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

/* ---- recorded parts ------------------------------------------------------------------------ */

dcp_comm_buf dcp_comm_put_area(const dcp_comm *c, int i)
{
    int g = c->first_rank + i;
    dcp_buffer *b = c->put_seg[g] ? c->segview[i] : c->put[i];
    return (dcp_comm_buf){b, dcp_comm_put_off(c, g, c->send_bank)};
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
        uint64_t from = src.offset + dcp_coll_slot_of(kind, d, slot);
        uint64_t to = dcp_comm_inbox_off(c, c->send_bank) + (uint64_t)s * slot;
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
        dcp_cmd_acquire_external(cmd, c->inbox[i], dcp_comm_inbox_off(c, c->recv_bank), dcp_comm_bank_bytes(c));
        any = 1;
    }
    for (int s = 0; s < N; s++) {
        if (dcp_comm_pair_info(c, s, d)->copier != DCP_COPIER_RECEIVER_GPU) continue;
        /* s's block for d, out of s's put region in the segment, into d's inbox. */
        uint64_t from = dcp_comm_put_off(c, s, c->recv_bank) + dcp_coll_slot_of(kind, d, slot);
        uint64_t to = dcp_comm_inbox_off(c, c->recv_bank) + (uint64_t)s * slot;
        DCP_TRY(dcp_cmd_copy(cmd, c->segview[i], from, c->inbox[i], to, slot));
        any = 1;
    }
    if (any) dcp_cmd_barrier(cmd); /* received blocks -> their readers */
    return DCP_OK;
fail:
    return dcp_fail_context(st, "pull of rank %d", d);
}

/* ---- between the rounds -------------------------------------------------------------------- */

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

dcp_status dcp_comm_put_exchange(dcp_comm *c, dcp_coll kind, uint64_t slot, uint64_t payload)
{
    dcp_status st = DCP_OK;
    if (slot > c->cap)
        return dcp_fail(DCP_ERR_INTERNAL, "communicator: put slot of %llu bytes over the prepared %llu",
                        (unsigned long long)slot, (unsigned long long)c->cap);
    count_payload(c, payload);
    /* The host copies (staging): memcpy between this process's ranks. */
    for (int j = 0; j < c->local_count; j++)
        for (int i = 0; i < c->local_count; i++) {
            int s = c->first_rank + i, d = c->first_rank + j;
            if (dcp_comm_pair_info(c, s, d)->copier != DCP_COPIER_HOST) continue;
            memcpy(dcp_comm_inbox_host_ptr(c, j, c->send_bank) + (uint64_t)s * slot,
                   dcp_comm_put_host_ptr(c, s, c->send_bank) + dcp_coll_slot_of(kind, d, slot), slot);
        }
    /* The net copies (mpi): packed, moved between processes, unpacked. */
    if (c->has_net && (st = dcp_comm_net_move(c, kind, slot)) != DCP_OK) return dcp_fail_context(st, "MPI exchange");
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
        *first = (dcp_comm_buf){c->segview[i], dcp_comm_put_off(c, 0, c->recv_bank) + dcp_coll_slot_of(kind, d, slot)};
        *stride = c->region;
    } else {
        *first = (dcp_comm_buf){c->inbox[i], dcp_comm_inbox_off(c, c->recv_bank)};
        *stride = slot;
    }
}
