/* The run state (include/dcpvk/model.h), the part every architecture shares (src/model/graph.h):
 * communicators, KV caches, the step, per-rank residual stream and step inputs and outputs, and
 * the memory count; the architecture adds its own part through its ops. Page accounting is in
 * pages.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/graph.h"

/* Over MPI: the TP communicator over the world and, when this process holds part of a DCP group,
 * the group's sub-communicator. The collective creations run on every process whatever it meets
 * on the way, then one agreement: a process that failed makes all fail instead of leaving them
 * waiting. */
static dcp_status create_mpi_comms(dcp_model_state *s, dcp_device *const *devs, const dcp_comm_config *cc)
{
    const dcp_model *m = s->m;
    const uint32_t N = m->dcp, nl = m->nl;
    dcp_status st = dcp_comm_init_mpi(devs, (int)nl, cc, &s->comm);
    if (st == DCP_OK && (dcp_comm_size(s->comm) != (int)m->tp || dcp_comm_first_rank(s->comm) != (int)m->first))
        st = dcp_fail(DCP_ERR_CONFIG,
                      "TP size %u with %u ranks per process needs %u MPI processes holding ranks from %u on "
                      "here; found %d processes, ranks from %d on here",
                      m->tp, nl, m->tp / nl, m->first, dcp_comm_size(s->comm) / (int)nl, dcp_comm_first_rank(s->comm));
    if (N > 1 && s->gn < N) { /* this process holds part of one DCP group: colour = group index */
        dcp_status gs = dcp_comm_init_mpi_split(devs, (int)nl, (int)(m->first / N), cc, &s->gcomm[0]);
        if (st == DCP_OK) st = gs;
        if (st == DCP_OK &&
            (dcp_comm_size(s->gcomm[0]) != (int)N || dcp_comm_first_rank(s->gcomm[0]) != (int)(m->first % N)))
            st = dcp_fail(DCP_ERR_CONFIG,
                          "DCP group %u: sub-communicator of %d ranks, ranks from %d here; expected %u, from %u",
                          m->first / N, dcp_comm_size(s->gcomm[0]), dcp_comm_first_rank(s->gcomm[0]), N, m->first % N);
    }
    if (dcp_mpi_max(st != DCP_OK ? 1.0 : 0.0) > 0.0 && st == DCP_OK)
        st = dcp_fail(DCP_ERR_MPI, "model state: another MPI process failed to create its communicators");
    return st;
}

/* The KV cache config of group g (whose ranks held here start at local index g * gn): c after
 * defaults, max_blocks block-table entries per sequence and rank. */
static void cache_config(const dcp_model *m, const dcp_model_state_config *c, uint32_t max_blocks, uint32_t gn,
                         uint32_t g, dcp_kv_cache_config *kc)
{
    *kc = (dcp_kv_cache_config)DCP_KV_CACHE_CONFIG_DEFAULT;
    m->ops->kv_pool(m, g * gn, &kc->pool);
    kc->pool.page_size = c->block_size;
    kc->pool.dtype = c->kv_dtype;
    kc->pool.num_pages = c->kv_pages;
    kc->dcp_size = m->dcp;
    kc->first_rank = m->dcp > 1 ? (m->first + g * gn) % m->dcp : 0;
    kc->interleave = m->dcp > 1 ? c->interleave : 1;
    kc->max_seqs = c->max_seqs;
    kc->max_blocks = max_blocks;
}

/* Group g's KV cache of layer l: the pools of the group's ranks held here. */
static dcp_status create_cache(dcp_model_state *s, dcp_device *const *devs, uint32_t g, uint32_t l)
{
    dcp_kv_cache_config kc;
    cache_config(s->m, &s->cfg, s->max_blocks, s->gn, g, &kc);
    dcp_status st = dcp_kv_cache_create(devs + g * s->gn, s->gn, &kc, &s->caches[l * s->ng + g]);
    if (st != DCP_OK) return dcp_fail_context(st, "layer %u", l);
    return DCP_OK;
}

/* The sizes of the buffers every architecture uses on local rank i (create_rank allocates these,
 * dcp_model_state_bytes counts them): x, xn, part, slots [n_layer], ids, cs; xo, logits, next on
 * local rank 0. 0: no such buffer on this rank. */
typedef struct rank_sizes {
    uint64_t x, xn, part, slot, ids, cs, xo, logits, next;
} rank_sizes;

static rank_sizes rank_buffer_sizes(const dcp_model *m, uint32_t i, uint32_t max_rows, uint32_t max_out,
                                    uint32_t rope_pairs)
{
    const uint64_t R = max_rows, E = m->cfg.n_embd;
    rank_sizes z = {R * E * 4, R * E * 4, m->tp > 1 ? R * E * 4 : 0, R * 4, R * 4, R * (rope_pairs ? rope_pairs : 1) * 8,
                    0, 0, 0};
    if (i == 0) {
        z.xo = (uint64_t)max_out * E * 4;
        z.logits = (uint64_t)max_out * m->cfg.n_vocab * 4;
        z.next = (uint64_t)max_out * 4;
    }
    return z;
}

/* The buffers every architecture uses on local rank i. */
static dcp_status create_rank(dcp_model_state *s, uint32_t i)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const dcp_model_config *mc = &m->cfg;
    dcp_graph_rank *r = &s->r[i];
    const rank_sizes z = rank_buffer_sizes(m, i, s->cfg.max_rows, s->max_out, s->rope_pairs);
    r->dev = m->ranks[i].dev;
    r->g = i / s->gn;
    r->gr = m->dcp > 1 ? (m->first + i) % m->dcp : 0;
    r->gl = i % s->gn;
    r->slots = calloc(mc->n_layer, sizeof *r->slots);
    if (!r->slots) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    DCP_TRY(dcp_buffer_create(r->dev, z.x, DCP_MEMORY_DEVICE, &r->x));
    DCP_TRY(dcp_buffer_create(r->dev, z.xn, DCP_MEMORY_DEVICE, &r->xn));
    if (z.part) DCP_TRY(dcp_buffer_create(r->dev, z.part, DCP_MEMORY_DEVICE, &r->part));
    for (uint32_t l = 0; l < mc->n_layer; l++)
        DCP_TRY(dcp_buffer_create(r->dev, z.slot, DCP_MEMORY_HOST, &r->slots[l]));
    DCP_TRY(dcp_buffer_create(r->dev, z.ids, DCP_MEMORY_HOST, &r->ids));
    DCP_TRY(dcp_buffer_create(r->dev, z.cs, DCP_MEMORY_HOST, &r->cs));
    if (z.xo) {
        DCP_TRY(dcp_buffer_create(r->dev, z.xo, DCP_MEMORY_DEVICE, &r->xo));
        DCP_TRY(dcp_buffer_create(r->dev, z.logits, DCP_MEMORY_HOST, &r->logits));
        DCP_TRY(dcp_buffer_create(r->dev, z.next, DCP_MEMORY_HOST, &r->next));
    }
fail:
    return st;
}

/* The largest all-reduce block: [max_rows][n_embd] f32. */
static uint64_t all_reduce_block(const dcp_model *m, uint32_t max_rows) { return (uint64_t)max_rows * m->cfg.n_embd * 4; }

/* DCP groups held here (wholly or in part) and ranks of each held here. */
static void group_layout(const dcp_model *m, uint32_t *ng, uint32_t *gn)
{
    const uint32_t N = m->dcp, nl = m->nl;
    *ng = N == 1 ? nl : (nl >= N ? nl / N : 1);
    *gn = N == 1 ? 1 : (nl >= N ? N : nl);
}

/* Everything but the warm-up, on s (whose m and cfg are set). On failure the caller destroys s. */
static dcp_status state_build(dcp_model_state *s, bool spread)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const uint32_t N = m->dcp, L = m->cfg.n_layer, nl = m->nl, R = s->cfg.max_rows;
    group_layout(m, &s->ng, &s->gn);
    const uint32_t G = s->ng;
    s->r = calloc(nl, sizeof *s->r);
    s->caches = calloc((size_t)G * L, sizeof *s->caches);
    s->row_seq = calloc(R, sizeof *s->row_seq);
    s->row_len = calloc(R, sizeof *s->row_len);
    s->row_pos = calloc(R, sizeof *s->row_pos);
    s->out_row = calloc(s->max_out, sizeof *s->out_row);
    s->lens = calloc(R, sizeof *s->lens);
    s->bt = calloc((size_t)R * s->max_blocks, sizeof *s->bt);
    s->seq_len = calloc(s->cfg.max_seqs, sizeof *s->seq_len);
    s->seq_add = calloc(s->cfg.max_seqs, sizeof *s->seq_add);
    s->run_seq = calloc(R, sizeof *s->run_seq);
    s->run_count = calloc(R, sizeof *s->run_count);
    s->fwd_rows = calloc(R, sizeof *s->fwd_rows);
    if (N > 1) s->gcomm = calloc(G, sizeof *s->gcomm);
    if (!s->r || !s->caches || !s->row_seq || !s->row_len || !s->row_pos || !s->out_row || !s->lens || !s->bt || !s->seq_len ||
        !s->seq_add || !s->run_seq || !s->run_count || !s->fwd_rows || (N > 1 && !s->gcomm))
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    dcp_device *devs[1024];
    if (nl > 1024) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model state: %u ranks in one process (at most 1024)", nl);
    for (uint32_t i = 0; i < nl; i++) devs[i] = m->ranks[i].dev;
    dcp_comm_config cc = DCP_COMM_CONFIG_DEFAULT;
    if (spread && (st = create_mpi_comms(s, devs, &cc)) != DCP_OK) return st;
    if (m->tp > 1 && !spread) DCP_TRY(dcp_comm_init_local(devs, (int)m->tp, &cc, &s->comm));
    for (uint32_t g = 0; N > 1 && s->gn == N && g < G; g++)
        DCP_TRY(dcp_comm_init_local(devs + g * N, (int)N, &cc, &s->gcomm[g]));
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t g = 0; g < G; g++) DCP_TRY(create_cache(s, devs, g, l));
    for (uint32_t i = 0; i < nl; i++) DCP_TRY(create_rank(s, i));
    DCP_TRY(dcp_step_create(devs, nl, &s->step));
    if (s->comm) {
        DCP_TRY(dcp_step_add_comm(s->step, s->comm));
        /* Mailboxes for the largest all-reduce, so that they never move between steps. */
        DCP_TRY(dcp_comm_reserve(s->comm, all_reduce_block(m, R)));
    }
    for (uint32_t g = 0; N > 1 && g < G; g++) DCP_TRY(dcp_step_add_comm(s->step, s->gcomm[g]));
    DCP_TRY(m->ops->state_create(s));
fail:
    return st;
}

/* A state config with its defaults applied, and the sizes derived from it. */
typedef struct state_shape {
    dcp_model_state_config c; /* n_ctx, max_seqs, interleave, chunk_tokens, kv_pages filled in */
    uint32_t max_blocks, max_out, rope_pairs;
} state_shape;

static dcp_status state_defaults(const dcp_model *m, const dcp_model_state_config *config, state_shape *sh)
{
    const dcp_model_config *mc = &m->cfg;
    dcp_model_state_config c = *config;
    const uint32_t N = m->dcp;
    if (c.n_ctx == 0) {
        c.n_ctx = mc->n_ctx_train < 4096 ? mc->n_ctx_train : 4096;
        if (mc->sliding_window && c.n_ctx > mc->sliding_window) c.n_ctx = mc->sliding_window;
    }
    if (mc->sliding_window && c.n_ctx > mc->sliding_window)
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "model state: a context of %u tokens exceeds the model's sliding attention window of %u "
                        "tokens (%s.attention.sliding_window); dcp-vk runs full attention, which equals "
                        "sliding-window attention only while the context fits in the window: use n_ctx <= %u",
                        c.n_ctx, mc->sliding_window, mc->arch_name, mc->sliding_window);
    if (c.max_seqs == 0) c.max_seqs = 1;
    if (c.interleave == 0) c.interleave = 1;
    if (c.chunk_tokens == 0) c.chunk_tokens = 512;
    if (c.block_size == 0 || c.max_rows == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model state: block size %u and rows per step %u must be >= 1",
                        c.block_size, c.max_rows);
    if (N > 1) {
        dcp_status ps = dcp_kv_placement_check(N, c.interleave, c.block_size);
        if (ps) return ps;
    }
    sh->max_blocks = dcp_graph_shard_pages(N, c.block_size, c.interleave, c.n_ctx, 0) + (N > 1 ? 1 : 0);
    if (c.kv_pages == 0) {
        uint64_t pages = (uint64_t)c.max_seqs * sh->max_blocks;
        if (pages > UINT32_MAX)
            return dcp_fail(DCP_ERR_CONFIG, "model state: %u sequences of %u tokens need %llu KV pages per rank (at most %u)",
                            c.max_seqs, c.n_ctx, (unsigned long long)pages, UINT32_MAX);
        c.kv_pages = (uint32_t)pages;
    }
    if (c.max_logits > c.max_rows)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model state: max_logits %u exceeds max_rows %u (rows per step)",
                        c.max_logits, c.max_rows);
    if (c.max_logits == 0) c.max_logits = c.max_rows < c.max_seqs ? c.max_rows : c.max_seqs;
    sh->max_out = c.max_logits;
    sh->rope_pairs = mc->n_rot / 2;
    sh->c = c;
    return DCP_OK;
}

void dcp_graph_count(dcp_model_memory *mem, uint64_t *field, uint64_t bytes, const char *what)
{
    *field += bytes;
    if (bytes > mem->largest) {
        mem->largest = bytes;
        mem->largest_what = what;
    }
}

/* What state_build and the architecture allocate, rank by rank (the same sizes: rank_buffer_sizes,
 * cache_config, all_reduce_block, the modules' *_bytes functions). */
static dcp_status state_bytes(const dcp_model *m, const state_shape *sh, dcp_model_memory *per_rank)
{
    const dcp_model_state_config *c = &sh->c;
    const uint32_t L = m->cfg.n_layer, N = m->dcp;
    uint32_t ng, gn;
    group_layout(m, &ng, &gn);
    (void)ng;
    dcp_comm_config cc = DCP_COMM_CONFIG_DEFAULT;
    for (uint32_t i = 0; i < m->nl; i++) {
        dcp_model_memory *mem = &per_rank[i];
        memset(mem, 0, sizeof *mem);
        mem->largest_what = "";
        dcp_device *dev = m->ranks[i].dev;
        mem->weights = m->rank_bytes[i];
        if (m->rank_largest[i] > mem->largest) {
            mem->largest = m->rank_largest[i];
            mem->largest_what = "a weight matrix";
        }
        const rank_sizes z = rank_buffer_sizes(m, i, c->max_rows, sh->max_out, sh->rope_pairs);
        dcp_graph_count(mem, &mem->activations, z.x + z.xn + z.part, "the residual stream");
        for (uint32_t l = 0; l < L; l++) dcp_graph_count(mem, &mem->activations, z.slot, "the KV slot table");
        dcp_graph_count(mem, &mem->activations, z.ids + z.cs + z.xo + z.next, "the step inputs");
        dcp_graph_count(mem, &mem->activations, z.logits, "the logits");
        /* The KV cache of each layer: the rank's pool, and the slot table of its appends. */
        dcp_kv_cache_config kc;
        cache_config(m, c, sh->max_blocks, gn, i / gn, &kc);
        uint64_t pool, seg;
        dcp_status st = dcp_kv_pool_bytes(dev, &kc.pool, &pool, &seg);
        if (st != DCP_OK) return st;
        mem->kv += (uint64_t)L * pool; /* split into segments: the largest buffer is a segment */
        if (seg > mem->largest) {
            mem->largest = seg;
            mem->largest_what = "a KV pool segment";
        }
        /* Communicators: the TP all-reduce's and, with DCP, the group's (the block its steps reserve). */
        uint64_t dcp_block = 0;
        st = m->ops->state_bytes(m, i, c, &kc, mem, &dcp_block);
        if (st != DCP_OK) return st;
        const uint64_t floor = cc.block_bytes ? cc.block_bytes : 65536;
        /* Two buffers each (put area and inbox): the largest buffer is one of them. */
        if (m->tp > 1) {
            uint64_t b = all_reduce_block(m, c->max_rows);
            b = b > floor ? b : floor;
            dcp_graph_count(mem, &mem->exchange, dcp_comm_mailbox_buffer_bytes((int)m->tp, b),
                            "the TP communicator's put area");
            dcp_graph_count(mem, &mem->exchange, dcp_comm_mailbox_bytes((int)m->tp, b) -
                            dcp_comm_mailbox_buffer_bytes((int)m->tp, b), "the TP communicator's inbox");
        }
        if (N > 1) {
            uint64_t b = dcp_block > floor ? dcp_block : floor;
            dcp_graph_count(mem, &mem->exchange, dcp_comm_mailbox_buffer_bytes((int)N, b),
                            "the DCP communicator's put area");
            dcp_graph_count(mem, &mem->exchange, dcp_comm_mailbox_bytes((int)N, b) - dcp_comm_mailbox_buffer_bytes((int)N, b),
                            "the DCP communicator's inbox");
        }
        /* The staging buffer: grown to the largest upload (a weight matrix; the state writes
         * through host-visible buffers). */
        mem->transfer = dcp_device_staging_bytes(dev, m->rank_largest[i]);
        mem->total = mem->weights + mem->kv + mem->activations + mem->attention + mem->exchange + mem->transfer;
    }
    return DCP_OK;
}

dcp_status dcp_model_state_bytes(const dcp_model *m, const dcp_model_state_config *config, dcp_model_memory *per_rank)
{
    state_shape sh = {0};
    dcp_status st = state_defaults(m, config, &sh);
    if (st != DCP_OK) return st;
    return state_bytes(m, &sh, per_rank);
}

dcp_status dcp_model_state_config_resolve(const dcp_model *m, const dcp_model_state_config *config,
                                          dcp_model_state_config *out)
{
    state_shape sh = {0};
    dcp_status st = state_defaults(m, config, &sh);
    if (st == DCP_OK) *out = sh.c;
    return st;
}

/* "1.27 GiB", "610.4 MiB", "12.0 KiB", "123 bytes" into buf. */
static const char *human(char *buf, size_t cap, uint64_t v)
{
    if (v >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", v / 1073741824.0);
    else if (v >= (1ull << 20)) snprintf(buf, cap, "%.1f MiB", v / 1048576.0);
    else if (v >= (1ull << 10)) snprintf(buf, cap, "%.1f KiB", v / 1024.0);
    else snprintf(buf, cap, "%llu bytes", (unsigned long long)v);
    return buf;
}

/* Whether sh fits the devices: every buffer within its device's range, and the ranks of each
 * physical device within what it may still allocate. */
typedef struct fit {
    dcp_status st;          /* DCP_OK, or the estimate's own error */
    int range_rank;         /* -1, or the local rank with a buffer beyond its device's range */
    int mem_rank;           /* -1, or the first local rank of the physical device that lacks memory */
    uint64_t need, avail;   /* that device's need and what it has */
    uint64_t reserved;      /* of need: the draft model's bytes on its ranks */
    uint32_t ranks;         /* ranks held there */
    dcp_memory_budget budget;
} fit;

/* The draft state's bytes beside a state of shape sh (config.draft; dmem [m->nl]). */
static dcp_status draft_bytes(const dcp_model *m, const state_shape *sh, dcp_model_memory *dmem)
{
    const dcp_model *d = sh->c.draft;
    if (d->nl != m->nl || d->first != m->first)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model state: the draft model holds TP ranks [%u, %u), the model [%u, %u)",
                        d->first, d->first + d->nl, m->first, m->first + m->nl);
    dcp_model_state_config c = sh->c;
    c.kv_pages = 0;
    c.max_logits = 0;
    c.draft = NULL;
    state_shape dsh = {0};
    dcp_status st = state_defaults(d, &c, &dsh);
    if (st == DCP_OK) st = state_bytes(d, &dsh, dmem);
    return st == DCP_OK ? DCP_OK : dcp_fail_context(st, "the draft model's run state");
}

static fit check_fit(const dcp_model *m, const state_shape *sh, dcp_model_memory *mem, bool margin)
{
    fit f = {DCP_OK, -1, -1, 0, 0, 0, 0, {0}};
    f.st = state_bytes(m, sh, mem);
    if (f.st != DCP_OK) return f;
    dcp_model_memory *dmem = NULL;
    if (sh->c.draft) {
        if (!(dmem = calloc(m->nl, sizeof *dmem))) {
            f.st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            return f;
        }
        if ((f.st = draft_bytes(m, sh, dmem)) != DCP_OK) {
            free(dmem);
            return f;
        }
    }
    for (uint32_t i = 0; i < m->nl; i++)
        if (mem[i].largest > dcp_device_get_info(m->ranks[i].dev)->max_storage_buffer_range) {
            f.range_rank = (int)i;
            free(dmem);
            return f;
        }
    /* The ranks of one physical device share its memory; CPU devices all share host memory. */
    for (uint32_t i = 0; i < m->nl; i++) {
        const dcp_device_info *a = dcp_device_get_info(m->ranks[i].dev);
        bool first = true;
        for (uint32_t j = 0; j < i && first; j++) {
            const dcp_device_info *b = dcp_device_get_info(m->ranks[j].dev);
            if (b->physical_index == a->physical_index || (!strcmp(a->type, "cpu") && !strcmp(b->type, "cpu")))
                first = false;
        }
        if (!first) continue;
        uint64_t need = 0, reserved = 0;
        uint32_t ranks = 0;
        for (uint32_t j = i; j < m->nl; j++) {
            const dcp_device_info *b = dcp_device_get_info(m->ranks[j].dev);
            if (b->physical_index != a->physical_index && !(!strcmp(a->type, "cpu") && !strcmp(b->type, "cpu")))
                continue;
            /* A loaded model's weights and staging buffers are held already (the budget knows them). */
            need += mem[j].total - (m->count_only ? 0 : mem[j].weights + mem[j].transfer);
            if (dmem) { /* the draft: its weights unless loaded already, and its state */
                const uint64_t dn = dmem[j].total - (sh->c.draft->count_only ? 0 : dmem[j].weights + dmem[j].transfer);
                need += dn;
                reserved += dn;
            }
            ranks++;
        }
        dcp_memory_budget b;
        dcp_device_memory_budget(m->ranks[i].dev, &b);
        /* margin: a context suggested to the user keeps 1/32 of the memory free, so that it still
         * fits after the weights load (drivers map a little more than the buffers they hold). */
        if (margin) b.available -= b.available / 32;
        if (need > b.available) {
            f.mem_rank = (int)i;
            f.need = need;
            f.avail = b.available;
            f.ranks = ranks;
            f.reserved = reserved;
            f.budget = b;
            free(dmem);
            return f;
        }
    }
    free(dmem);
    return f;
}

dcp_status dcp_model_state_check(const dcp_model *m, const dcp_model_state_config *config, uint32_t *max_ctx)
{
    if (max_ctx) *max_ctx = 0;
    state_shape sh = {0};
    dcp_status st = state_defaults(m, config, &sh);
    if (st != DCP_OK) return st;
    dcp_model_memory *mem = calloc(m->nl, sizeof *mem);
    if (!mem) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    fit f = check_fit(m, &sh, mem, false);
    if (f.st == DCP_OK && f.range_rank < 0 && f.mem_rank < 0) {
        if (max_ctx) *max_ctx = sh.c.n_ctx;
        free(mem);
        return DCP_OK;
    }
    /* What went wrong, in the user's terms, before the search below overwrites mem. */
    char why[1024], a[32], b[32], c2[32], d[32], e[32], g[32], h[32], k[32], res[96] = "";
    st = f.st;
    if (f.st == DCP_ERR_UNSUPPORTED) { /* no context helps (e.g. a q8_0 cache for head dims not of whole blocks) */
        free(mem);
        return dcp_fail_context(f.st, "model state");
    }
    if (f.st != DCP_OK) {
        snprintf(why, sizeof why, "%s", dcp_last_error());
    } else if (f.range_rank >= 0) {
        const dcp_device_info *info = dcp_device_get_info(m->ranks[f.range_rank].dev);
        snprintf(why, sizeof why,
                 "%u tokens of context: on TP rank %u (device %d, %s) %s would be %s, more than the device's "
                 "largest storage buffer (maxStorageBufferRange) of %s",
                 sh.c.n_ctx, m->first + (uint32_t)f.range_rank, info->logical_index, info->name,
                 mem[f.range_rank].largest_what, human(a, sizeof a, mem[f.range_rank].largest),
                 human(b, sizeof b, info->max_storage_buffer_range));
        st = DCP_ERR_CONFIG;
    } else {
        const dcp_model_memory *r = &mem[f.mem_rank];
        const dcp_device_info *info = dcp_device_get_info(m->ranks[f.mem_rank].dev);
        if (f.reserved) {
            char rv[32];
            snprintf(res, sizeof res, "; and %s for the draft model's weights and run state",
                     human(rv, sizeof rv, f.reserved));
        }
        snprintf(why, sizeof why,
                 "%u tokens of context need %s on %s device %d (%s), %u TP rank%s there, each: weights %s%s, KV "
                 "cache %s, activations %s, attention %s, exchange %s, staging %s%s; %s %s available (%s)",
                 sh.c.n_ctx, human(a, sizeof a, f.need), strcmp(info->type, "cpu") ? "physical" : "CPU (host memory)",
                 info->physical_index, info->name, f.ranks, f.ranks == 1 ? "" : "s", human(b, sizeof b, r->weights),
                 m->count_only ? "" : " (loaded)", human(c2, sizeof c2, r->kv), human(d, sizeof d, r->activations),
                 human(e, sizeof e, r->attention), human(g, sizeof g, r->exchange), human(h, sizeof h, r->transfer),
                 res, human(k, sizeof k, f.avail), f.avail == 1 ? "is" : "are", f.budget.source);
        st = DCP_ERR_OUT_OF_MEMORY;
    }
    /* The longest context that fits: the estimate is monotone in n_ctx, so a binary search. */
    uint32_t lo = 0, hi = sh.c.n_ctx; /* lo fits (0: nothing does), hi does not */
    const uint32_t kv_pages = config->kv_pages;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        dcp_model_state_config t = *config;
        t.n_ctx = mid;
        t.kv_pages = kv_pages;
        state_shape ts;
        dcp_status ds = state_defaults(m, &t, &ts);
        fit tf = ds == DCP_OK ? check_fit(m, &ts, mem, true) : (fit){ds, -1, -1, 0, 0, 0, 0, {0}};
        if (tf.st == DCP_OK && tf.range_rank < 0 && tf.mem_rank < 0) lo = mid;
        else hi = mid;
    }
    free(mem);
    if (max_ctx) *max_ctx = lo;
    if (lo > 0)
        return dcp_fail(st, "model state: %s. The longest context that fits is %u tokens", why, lo);
    return dcp_fail(st, "model state: %s. No context fits: the weights and fixed buffers alone are too large "
                        "(more devices or tensor-parallel ranks, or a smaller weight type)", why);
}

dcp_status dcp_model_state_create(dcp_model *m, const dcp_model_state_config *config, dcp_model_state **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    const bool spread = m->nl < m->tp; /* the TP group spans processes (MPI) */
    if (m->count_only)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model state: the model was loaded with count_only (no weights "
                                                  "on the devices)");
    state_shape sh = {0};
    if ((st = state_defaults(m, config, &sh)) != DCP_OK) return st;
    const dcp_model_state_config c = sh.c;
    if (m->cfg.sliding_window && (m->first == 0 || !spread))
        dcp_log("dcp-vk: warning: %s.attention.sliding_window = %u is ignored: the context of %u tokens "
                "fits in the window, where full attention is the same",
                m->cfg.arch_name, m->cfg.sliding_window, c.n_ctx);
    dcp_model_state *s = calloc(1, sizeof *s);
    if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->m = m;
    s->cfg = c;
    s->cfg.draft = NULL; /* read by the check only */
    s->max_blocks = sh.max_blocks;
    s->max_out = sh.max_out;
    s->rope_pairs = sh.rope_pairs;
    /* Memory first, allocating nothing: a configuration the devices cannot hold is refused with
     * what it needs and what fits (inside the MPI agreement below). */
    st = dcp_model_state_check(m, config, NULL);
    if (st == DCP_OK) st = state_build(s, spread);
    /* Over MPI, one more agreement: a process that failed makes all fail (none waits for it). */
    if (spread && dcp_mpi_max(st != DCP_OK ? 1.0 : 0.0) > 0.0 && st == DCP_OK)
        st = dcp_fail(DCP_ERR_MPI, "model state: another MPI process failed to create its part of the state");
    if (st != DCP_OK) goto fail;
    /* Warm-up: a 2-token prefill and a decode step create every pipeline the steps use, so that
     * the first real step does not pay for shader compilation; then the sequence is forgotten. */
    if (c.n_ctx >= 3) {
        int32_t warm[2] = {0, 0};
        DCP_TRY(dcp_model_state_forward(s, warm, c.max_rows > 1 ? 2 : 1, NULL, NULL));
        DCP_TRY(dcp_model_state_forward(s, warm, 1, NULL, NULL));
        dcp_model_state_reset(s);
        s->tokens_run = 0;
        if (s->comm) dcp_comm_reset_stats(s->comm);
        for (uint32_t g = 0; s->gcomm && g < s->ng; g++) dcp_comm_reset_stats(s->gcomm[g]);
    }
    *out = s;
    return DCP_OK;
fail:
    dcp_model_state_destroy(s);
    return st;
}

void dcp_model_state_destroy(dcp_model_state *s)
{
    if (!s) return;
    const uint32_t G = s->ng, L = s->m->cfg.n_layer;
    dcp_step_destroy(s->step);
    dcp_graph_prefix_destroy(s);
    dcp_graph_fork_destroy(s);
    if (s->arch) s->m->ops->state_destroy(s);
    for (uint32_t i = 0; s->r && i < s->m->nl; i++) {
        dcp_graph_rank *r = &s->r[i];
        for (uint32_t l = 0; r->slots && l < L; l++) dcp_buffer_destroy(r->slots[l]);
        dcp_buffer *bufs[] = {r->x, r->xn, r->part, r->xo, r->ids, r->cs, r->logits, r->next};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) dcp_buffer_destroy(bufs[k]);
        free(r->slots);
    }
    for (uint32_t i = 0; s->caches && i < G * L; i++) dcp_kv_cache_destroy(s->caches[i]);
    for (uint32_t g = 0; s->gcomm && g < G; g++) dcp_comm_destroy(s->gcomm[g]);
    dcp_comm_destroy(s->comm);
    free(s->caches);
    free(s->gcomm);
    free(s->r);
    free(s->row_seq);
    free(s->row_len);
    free(s->row_pos);
    free(s->out_row);
    free(s->lens);
    free(s->bt);
    free(s->seq_len);
    free(s->seq_add);
    free(s->run_seq);
    free(s->run_count);
    free(s->fwd_rows);
    free(s);
}

const dcp_model_state_config *dcp_model_state_get_config(const dcp_model_state *s) { return &s->cfg; }
dcp_model *dcp_model_state_get_model(const dcp_model_state *s) { return s->m; }

void dcp_model_state_free_seq(dcp_model_state *s, uint32_t seq)
{
    if (seq >= s->cfg.max_seqs) return;
    dcp_graph_prefix_release(s, seq); /* its cached blocks stay, held by the cache */
    dcp_graph_fork_release(s, seq);   /* its shared pages stay with the rest of its group */
    for (uint32_t i = 0; i < s->ng * s->m->cfg.n_layer; i++) dcp_kv_cache_free_seq(s->caches[i], seq);
    s->seq_len[seq] = 0;
}

dcp_status dcp_model_state_truncate_seq(dcp_model_state *s, uint32_t seq, uint32_t length)
{
    if (seq >= s->cfg.max_seqs)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model state: truncating sequence %u; the state has slots 0..%u", seq,
                        s->cfg.max_seqs - 1);
    if (length > s->seq_len[seq])
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model state: truncating sequence %u of %u tokens to %u (longer)",
                        seq, s->seq_len[seq], length);
    const uint64_t cached = (uint64_t)dcp_graph_prefix_held(s, seq) * s->cfg.block_size * s->m->dcp;
    if (length < cached)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "model state: truncating sequence %u to %u tokens, inside its first %llu tokens, which are "
                        "prefix-cache blocks shared with other sequences", seq, length, (unsigned long long)cached);
    const dcp_status fs = dcp_graph_fork_check_truncate(s, seq, length);
    if (fs != DCP_OK) return fs;
    /* Checked above, so no cache refuses: every layer's cache holds the same sequence lengths. */
    for (uint32_t i = 0; i < s->ng * s->m->cfg.n_layer; i++) {
        dcp_status st = dcp_kv_cache_truncate_seq(s->caches[i], seq, length);
        if (st != DCP_OK) return st;
    }
    s->seq_len[seq] = length;
    return DCP_OK;
}

uint32_t dcp_model_state_max_logits(const dcp_model_state *s) { return s->max_out; }

void dcp_model_state_reset(dcp_model_state *s)
{
    for (uint32_t q = 0; q < s->cfg.max_seqs; q++)
        if (s->seq_len[q]) dcp_model_state_free_seq(s, q);
}

uint32_t dcp_model_state_seq_length(const dcp_model_state *s, uint32_t seq)
{
    return seq < s->cfg.max_seqs ? s->seq_len[seq] : 0;
}

uint32_t dcp_model_state_n_ctx(const dcp_model_state *s) { return s->cfg.n_ctx; }

uint64_t dcp_model_state_kv_bytes(const dcp_model_state *s)
{
    uint64_t b = 0;
    for (uint32_t l = 0; l < s->m->cfg.n_layer; l++) {
        const dcp_kv_pool *p = dcp_kv_cache_pool(s->caches[l * s->ng], 0);
        b += dcp_kv_pool_page_bytes(p) * dcp_kv_pool_get_config(p)->num_pages;
    }
    return b;
}

uint64_t dcp_model_state_exchange_bytes(const dcp_model_state *s)
{
    uint64_t b = s->comm ? dcp_comm_bytes_sent(s->comm, 0) : 0;
    if (s->gcomm) b += dcp_comm_bytes_sent(s->gcomm[0], 0);
    return b;
}

uint64_t dcp_model_state_tokens_run(const dcp_model_state *s) { return s->tokens_run; }
uint32_t dcp_model_state_last_rounds(const dcp_model_state *s) { return dcp_step_last_rounds(s->step); }
uint32_t dcp_model_state_last_host_waits(const dcp_model_state *s) { return dcp_step_last_host_waits(s->step); }
uint32_t dcp_model_state_last_dispatches(const dcp_model_state *s) { return dcp_step_last_dispatches(s->step); }

uint32_t dcp_model_state_last_rank_dispatches(const dcp_model_state *s)
{
    uint32_t top = 0;
    for (uint32_t i = 0; i < dcp_step_count(s->step); i++) {
        uint32_t d = dcp_step_last_rank_dispatches(s->step, i);
        if (d > top) top = d;
    }
    return top;
}

void dcp_model_state_set_timing(dcp_model_state *s, bool on) { dcp_step_set_timing(s->step, on); }

void dcp_model_state_last_timing(const dcp_model_state *s, double *compute_ns, double *exchange_ns)
{
    double total;
    dcp_step_last_timing(s->step, compute_ns, &total);
    *exchange_ns = total > *compute_ns ? total - *compute_ns : 0.0;
}

const char *dcp_model_state_describe_exchange(const dcp_model_state *s, char *buf, size_t cap)
{
    size_t n = 0;
    char part[4096];
    const char *why;
    dcp_step_sync sync = dcp_step_sync_mode(s->step, &why);
    if (cap) buf[0] = 0;
    n += (size_t)snprintf(buf + n, cap - n, "rounds: %s: %s", sync == DCP_STEP_SYNC_GPU ? "gpu" : "host", why);
    if (s->comm && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "\nTP group (%d ranks): %s", dcp_comm_size(s->comm),
                              dcp_comm_describe(s->comm, part, sizeof part));
    if (s->gcomm && s->gcomm[0] && n < cap)
        snprintf(buf + n, cap - n, "\nDCP group (%d ranks): %s", dcp_comm_size(s->gcomm[0]),
                 dcp_comm_describe(s->gcomm[0], part, sizeof part));
    return buf;
}
bool dcp_model_state_last_replayed(const dcp_model_state *s) { return dcp_step_last_replayed(s->step); }

dcp_status dcp_graph_run_copies(dcp_cmd **cmd, bool *rec, dcp_cmd **run, uint32_t nloc, bool host)
{
    uint32_t n = 0;
    for (uint32_t L = 0; L < nloc; L++)
        if (rec[L]) {
            if (host) dcp_cmd_barrier_host(cmd[L]);
            else dcp_cmd_barrier(cmd[L]);
            run[n++] = cmd[L];
        }
    dcp_status st = n ? dcp_cmd_run_all(run, n) : DCP_OK;
    for (uint32_t L = 0; L < nloc; L++)
        if (rec[L]) {
            rec[L] = false;
            const dcp_status r = dcp_cmd_reset(cmd[L]);
            if (st == DCP_OK) st = r;
        }
    return st;
}
