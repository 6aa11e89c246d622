/* The synchronous collectives of include/dcpvk/comm.h, built on the recordable exchange
 * (src/comm/put.h): round 1 copies each rank's send into its put area and pushes, the host part
 * runs, round 2 copies the received blocks into recv. Reductions copy them into a host-visible
 * scratch instead and sum on the host, in rank order with f32 accumulation, so every transport
 * gives the same bits. Not used by the engine: the API for users, tested against references. */
#include <stdint.h>

#include "comm/comm_internal.h"
#include "common/error.h"

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

/* One collective of kind (op: for the reducing kinds) over every local rank's send and recv. */
static dcp_status collective(dcp_comm *c, dcp_coll kind, const dcp_comm_buf *send, const dcp_comm_buf *recv,
                             uint64_t count, dcp_dtype dt, dcp_red_op op, const char *name)
{
    dcp_status st = DCP_OK;
    const int N = c->size, L = c->local_count, red = kind == DCP_COLL_REDUCE_SCATTER || kind == DCP_COLL_ALL_REDUCE;
    if (red && op != DCP_RED_SUM) return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: op %d (only sum)", name, (int)op);
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
        if (dcp_coll_gathers(kind))
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
    return collective(comm, DCP_COLL_ALL_GATHER, send, recv, count, dtype, DCP_RED_SUM, "all_gather");
}

dcp_status dcp_comm_reduce_scatter(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                                   dcp_dtype dtype, dcp_red_op op, dcp_comm *comm)
{
    return collective(comm, DCP_COLL_REDUCE_SCATTER, send, recv, count, dtype, op, "reduce_scatter");
}

dcp_status dcp_comm_all_to_all(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                               dcp_dtype dtype, dcp_comm *comm)
{
    return collective(comm, DCP_COLL_ALL_TO_ALL, send, recv, count, dtype, DCP_RED_SUM, "all_to_all");
}

dcp_status dcp_comm_all_reduce(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                               dcp_dtype dtype, dcp_red_op op, dcp_comm *comm)
{
    return collective(comm, DCP_COLL_ALL_REDUCE, send, recv, count, dtype, op, "all_reduce");
}
