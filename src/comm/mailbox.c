/* Where every rank's memory lives (src/comm/comm_internal.h has the layout): planned from the rows
 * of the pairs' transports (select.c), the node's shared host segment (one allocation in a
 * process, one POSIX shared-memory segment between processes), the put areas and inboxes, and their
 * growth (dcp_comm_reserve). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "common/error.h"
#include "vk/external.h"
#include "vk/hostmem.h"

/* ---- the plan ---------------------------------------------------------------------------- */

void dcp_comm_plan_layout(dcp_comm *c)
{
    const int N = c->size;
    const int my_node = c->caps[c->first_rank].node;
    c->node_ranks = 0;
    c->node_first_rank = -1;
    for (int g = 0; g < N; g++) {
        c->node_rank[g] = c->caps[g].node == my_node ? c->node_ranks++ : -1;
        if (c->node_rank[g] == 0) c->node_first_rank = g;
    }
    /* Put areas: in the segment if some pair from g puts there, host-visible if some pair's host reads it. */
    for (int g = 0; g < N; g++) {
        c->put_seg[g] = c->put_host[g] = 0;
        for (int d = 0; d < N; d++) {
            const dcp_transport_info *x = dcp_comm_pair_info(c, g, d);
            if (x->put == DCP_PUT_SEGMENT) c->put_seg[g] = 1;
            if (x->put == DCP_PUT_HOST) c->put_host[g] = 1;
        }
        if (c->put_seg[g]) c->put_host[g] = 1;
    }
    /* Views: the segment itself when every pair into d may be read where it was put. */
    for (int d = 0; d < N; d++) {
        int shared = 1;
        for (int s = 0; s < N; s++)
            if (!dcp_comm_pair_info(c, s, d)->in_place || !c->put_seg[s]) shared = 0;
        c->view_seg[d] = (uint8_t)shared;
    }
    c->seg_needed = c->has_net = c->cross_sync = c->has_fdx = 0;
    for (int d = 0; d < N; d++) {
        c->inbox_host[d] = 0;
        c->inbox_handles[d] = 0;
        for (int s = 0; s < N; s++) {
            const dcp_transport_info *x = dcp_comm_pair_info(c, s, d);
            const int host = dcp_transport_host_copies(x);
            const int other_proc = c->caps[s].proc != c->caps[d].proc;
            if (host) c->inbox_host[d] = 1;
            if (x->reach == DCP_REACH_FD) c->inbox_handles[d] |= x->handle;
            if (x->copier == DCP_COPIER_NET) c->has_net = 1;
            /* A GPU of one process writes memory another process reads: they wait for each other. */
            if (other_proc && !host) c->cross_sync = 1;
            if (other_proc && x->reach == DCP_REACH_FD) c->has_fdx = 1;
            if (x->put == DCP_PUT_SEGMENT && (c->caps[s].node == my_node || c->caps[d].node == my_node))
                c->seg_needed = 1;
        }
    }
}

/* ---- memory ------------------------------------------------------------------------------- */

void dcp_comm_free_mailboxes(dcp_comm *c)
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
    c->region = (2 * dcp_comm_bank_bytes(c) + align - 1) / align * align;
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
    st = dcp_comm_agree(c, st, "creating the node's shared memory");
    if (st != DCP_OK) return st;
    char (*names)[DCP_SHM_NAME_MAX] = calloc(c->net.nproc, sizeof *names);
    if (!names) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    st = c->net.allgather(c->net.ctx, name, names, DCP_SHM_NAME_MAX);
    if (st == DCP_OK && c->seg_needed && !leader)
        st = dcp_shm_open(names[c->caps[c->node_first_rank].proc], c->seg_size, &c->shm);
    free(names);
    st = dcp_comm_agree(c, st, "mapping the node's shared memory");
    if (st == DCP_OK) st = c->net.barrier(c->net.ctx); /* every process has mapped it */
    dcp_shm_unlink(&c->shm);
    if (st == DCP_OK && c->seg_needed) c->seg = c->shm.ptr;
    return st;
}

char *dcp_comm_put_host_ptr(const dcp_comm *c, int g, int bank)
{
    int i = g - c->first_rank;
    char *base = c->put_seg[g] ? c->seg : dcp_buffer_map(c->put[i]);
    return base + dcp_comm_put_off(c, g, bank);
}

char *dcp_comm_inbox_host_ptr(const dcp_comm *c, int i, int bank)
{
    return (char *)dcp_buffer_map(c->inbox[i]) + dcp_comm_inbox_off(c, bank);
}

dcp_status dcp_comm_alloc_mailboxes(dcp_comm *c, uint64_t cap)
{
    dcp_status st = DCP_OK;
    const int L = c->local_count;
    c->cap = (cap + DCP_STORAGE_ALIGN_MAX - 1) / DCP_STORAGE_ALIGN_MAX * DCP_STORAGE_ALIGN_MAX;
    const uint64_t two = 2 * dcp_comm_bank_bytes(c);
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
    st = dcp_comm_agree(c, st, "allocating mailboxes");
    if (st == DCP_OK) st = dcp_comm_make_targets(c);
    if (st != DCP_OK) goto fail;
    c->generation++;
    return DCP_OK;
fail:
    dcp_comm_free_mailboxes(c);
    return dcp_fail_context(st, "communicator mailboxes (%llu bytes per block)", (unsigned long long)cap);
}

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
        st = dcp_comm_agree(c, st, "growing the mailboxes");
        if (st == DCP_OK) st = c->net.barrier(c->net.ctx);
    }
    if (st != DCP_OK) return st;
    dcp_comm_free_mailboxes(c);
    return dcp_comm_alloc_mailboxes(c, bytes);
}
