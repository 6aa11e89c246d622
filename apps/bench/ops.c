/* dcp-vk-bench ops: the model kernels other than matmul and attention (norms, RoPE and the KV
 * store, SwiGLU, add, embedding lookup, argmax, the MLA per-head products and RoPE, the latent
 * store, MoE routing and experts, the LSE merge), each against the roofline of the yardsticks
 * sampled between its runs (a ruler sample, a run of the op, a ruler sample, ...). Shapes are a
 * decode step of a 7B-class llama layer and of a DeepSeek-V2-Lite-shaped MLA/MoE layer by default.
 * What each op counts as bytes and FLOPs: docs/design.md section 16 (and `counts` below). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "common/error.h"
#include "dcpvk/attn.h"
#include "dcpvk/ops.h"
#include "dcpvk/quant.h"
#include "kernels/ds2_params.h"

enum { MAX_ITERS = 30 };

/* The ops, in the order they are measured. */
#define OPS_LIST(X)                                                                                \
    X(RMSNORM, "rmsnorm")                                                                          \
    X(RMSNORM_PARTS, "rmsnorm_parts")                                                              \
    X(RMSNORM_HEADS, "rmsnorm_heads")                                                              \
    X(ROPE_STORE, "rope_store")                                                                    \
    X(SWIGLU, "swiglu")                                                                            \
    X(ADD, "add")                                                                                  \
    X(GET_ROWS, "get_rows")                                                                        \
    X(ARGMAX, "argmax")                                                                            \
    X(LSE_MERGE, "lse_merge")                                                                      \
    X(HEAD_MATMUL_UK, "head_matmul_uk")                                                            \
    X(HEAD_MATMUL_UV, "head_matmul_uv")                                                            \
    X(MLA_ROPE, "mla_rope")                                                                        \
    X(MLA_KV_STORE, "mla_kv_store")                                                                \
    X(MOE_ROUTE, "moe_route")                                                                      \
    X(MOE_GATE_UP, "moe_gate_up")                                                                  \
    X(MOE_DOWN, "moe_down")

typedef enum op_id {
#define X(id, name) OP_##id,
    OPS_LIST(X)
#undef X
    OP_COUNT
} op_id;

static const char *const op_names[OP_COUNT] = {
#define X(id, name) name,
    OPS_LIST(X)
#undef X
};

typedef struct ops_opts {
    uint32_t tokens, n_embd, n_ff, q_heads, kv_heads, head_dim, vocab, parts;
    uint32_t mla_heads, kv_lora, rope, nope, v_dim;
    uint32_t moe_embd, experts, experts_used, expert_ff;
    dcp_ggml_type type;
    uint32_t iters, device;
    bool want[OP_COUNT];
    int json;
} ops_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dcp-vk-bench ops [options]\n"
            "  --ops LIST         ops, comma-separated (default all:");
    for (int i = 0; i < OP_COUNT; i++) fprintf(f, "%s%s", i ? "," : " ", op_names[i]);
    fprintf(f,
            ")\n"
            "  --tokens T         rows of the step (default 1: a decode step of one sequence; 1..512)\n"
            "  --n-embd E         hidden size of the llama layer (default 4096)\n"
            "  --n-ff F           FFN width, SwiGLU's output (default 11008)\n"
            "  --q-heads H        query heads (default 32); --kv-heads (default 8); --head-dim D (default 128)\n"
            "  --vocab V          logits per row for argmax (default 32000)\n"
            "  --parts P          all-reduce parts of rmsnorm_parts and partial states of lse_merge (default 4)\n"
            "  --mla-heads H      MLA heads of the rank (default 16); --kv-lora (512); --rope (64);\n"
            "                     --nope (128); --v-dim (128)\n"
            "  --moe-embd E       hidden size of the MoE layer (default 2048); --experts (16);\n"
            "                     --experts-used (6); --expert-ff (1408)\n"
            "  --type T           weights of get_rows, head_matmul and the experts: f32, f16, bf16, q8_0\n"
            "                     (default q8_0)\n"
            "  --iters N          timed runs per op, the median is reported (default 5, at most %d)\n"
            "  --device I         device index among $DCP_VK_DEVICES / all devices (default 0)\n"
            "  --json             one JSON object instead of the table\n"
            "Every op is recorded as the model records it and timed alone (GPU timestamps around its\n"
            "dispatch), after a sample of the yardsticks; roofline = max(bytes / read rate, FLOPs /\n"
            "FMA rate) with the yardsticks of its own samples; 'of roofline' = roofline / time;\n"
            "'x dispatch' = time / the empty dispatch's. get_rows reads the T looked-up rows of a\n"
            "1024-row table; the experts read the matrices of the experts the routing selected.\n",
            MAX_ITERS);
}

static int parse_ops(const char *p, const char *v, ops_opts *o)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    memset(o->want, 0, sizeof o->want);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < OP_COUNT && strcmp(op_names[k], t) != 0) k++;
        if (k == OP_COUNT) {
            fprintf(stderr, "%s: --ops: '%s' is not an op (allowed:", p, t);
            for (int i = 0; i < OP_COUNT; i++) fprintf(stderr, " %s", op_names[i]);
            fprintf(stderr, ")\n");
            return 0;
        }
        o->want[k] = true;
        n++;
    }
    return n > 0;
}

static int parse_type(const char *p, const char *v, ops_opts *o)
{
    static const char *const allowed[] = {"f32", "f16", "bf16", "q8_0"};
    for (int i = 0; i < 4; i++)
        if (strcmp(v, allowed[i]) == 0) return dcp_ggml_type_from_name(v, &o->type) == DCP_OK;
    fprintf(stderr, "%s: --type: '%s' is not allowed (allowed: f32 f16 bf16 q8_0)\n", p, v);
    return 0;
}

/* A rows x k matrix of type t with seeded values in [-1, 1): 64 distinct rows, repeated (every
 * row is read from its own address, so the timing is that of a matrix of distinct rows). */
static dcp_status make_matrix(dcp_device *dev, dcp_ggml_type t, uint32_t rows, uint32_t k, uint64_t seed,
                              dcp_matrix *out)
{
    enum { DISTINCT = 64 };
    memset(out, 0, sizeof *out);
    uint64_t row_bytes = 0;
    uint32_t be, bb;
    if (!dcp_ggml_type_block(t, &be, &bb) || k % be) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "k %u is not a multiple of %s's block", k, dcp_ggml_type_name(t));
    row_bytes = (uint64_t)k / be * bb;
    uint32_t d = rows < DISTINCT ? rows : DISTINCT;
    float *w = malloc((size_t)d * k * sizeof *w);
    uint8_t *raw = malloc((size_t)(row_bytes * rows));
    dcp_status st = DCP_OK;
    if (!w || !raw) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for a %u x %u matrix", rows, k);
    if (st == DCP_OK) {
        dcp_bench_fill_random(w, (uint64_t)d * k, DCP_DTYPE_F32, seed);
        st = dcp_ggml_from_f32(t, w, raw, (uint64_t)d * k);
    }
    for (uint32_t r = d; st == DCP_OK && r < rows; r++) memcpy(raw + r * row_bytes, raw + (r % d) * row_bytes, row_bytes);
    const void *parts[1] = {raw};
    uint32_t part_rows[1] = {rows};
    if (st == DCP_OK) st = dcp_matrix_create(dev, t, k, 1, parts, part_rows, out);
    free(w);
    free(raw);
    return st;
}

/* Every buffer of the run (f32 unless said). */
typedef struct ops_bufs {
    dcp_buffer *a, *c;       /* inputs [act_floats] */
    dcp_buffer *b, *r;       /* outputs [act_floats] (r: rmsnorm_parts' residual, rmsnorm_heads in place) */
    dcp_buffer *w;           /* norm weights [max(E, 2D)] */
    dcp_buffer *cs;          /* RoPE cos, sin [T][max(D, rope) / 2][2] */
    dcp_buffer *ids, *slots; /* [T] u32: table rows; 0, 1, .. T-1 */
    dcp_buffer *moe_ids, *moe_w, *out_ids; /* [T][n_used] u32, f32; argmax [T] u32 */
    dcp_kv_pool *pool, *mla_pool;
    dcp_matrix emb, uk, uv, gu, dn;
    uint32_t distinct_experts; /* experts the routing selected over the T rows */
} ops_bufs;

/* Records op k. */
static dcp_status record(dcp_cmd *cmd, op_id k, const ops_opts *o, ops_bufs *B)
{
    uint32_t T = o->tokens, E = o->n_embd, D = o->head_dim, Hq = o->q_heads, Hkv = o->kv_heads;
    uint32_t H = o->mla_heads, R = o->kv_lora, P = o->rope;
    switch (k) {
    case OP_RMSNORM: {
        dcp_rmsnorm_args a = {.x = B->a, .x_stride = E, .w = B->w, .n = E, .y = B->b, .y_stride = E, .tokens = T,
                              .eps = 1e-5f};
        return dcp_op_rmsnorm(cmd, &a);
    }
    case OP_RMSNORM_PARTS: {
        dcp_rmsnorm_parts_args a = {.norm = {.x = B->r, .x_stride = E, .w = B->w, .n = E, .y = B->b, .y_stride = E,
                                             .tokens = T, .eps = 1e-5f},
                                    .p = B->c, .parts = o->parts, .part_stride = T * E};
        return dcp_op_rmsnorm_parts(cmd, &a);
    }
    case OP_RMSNORM_HEADS: {
        dcp_rmsnorm_heads_args a = {.x = B->r, .x_stride = (Hq + Hkv) * D, .heads = Hq + Hkv, .head_dim = D,
                                    .w_split = Hq, .w = B->w, .tokens = T, .eps = 1e-6f};
        return dcp_op_rmsnorm_heads(cmd, &a);
    }
    case OP_ROPE_STORE: {
        dcp_rope_store_args a = {.tokens = T, .q_heads = Hq, .kv_heads = Hkv, .head_dim = D, .n_rot = D,
                                 .src_stride = (Hq + 2 * Hkv) * D, .src = B->a, .slot = B->slots, .cs = B->cs,
                                 .q_out = B->b, .pool = B->pool};
        return dcp_op_rope_store(cmd, &a);
    }
    case OP_SWIGLU: {
        dcp_swiglu_args a = {.x = B->a, .x_stride = 2 * o->n_ff, .y = B->b, .y_stride = o->n_ff, .n = o->n_ff,
                             .tokens = T};
        return dcp_op_swiglu(cmd, &a);
    }
    case OP_ADD: return dcp_op_add(cmd, B->a, B->c, B->b, T * E);
    case OP_GET_ROWS: {
        dcp_get_rows_args a = {.w = &B->emb, .ids = B->ids, .y = B->b, .y_stride = E, .tokens = T};
        return dcp_op_get_rows(cmd, &a);
    }
    case OP_ARGMAX: {
        dcp_argmax_args a = {.x = B->a, .n = o->vocab, .stride = o->vocab, .rows = T, .out = B->out_ids};
        return dcp_op_argmax(cmd, &a);
    }
    case OP_LSE_MERGE: {
        dcp_merge_args a = {.parts = o->parts, .rows = T * Hq, .head_dim = D, .o_part_stride = T * Hq * D,
                            .lse_part_stride = T * Hq, .o_in = B->c, .lse_in = B->a, .o_out = B->b, .lse_out = B->r};
        return dcp_lse_merge_record(cmd, &a);
    }
    case OP_HEAD_MATMUL_UK: {
        dcp_head_matmul_args a = {.w = &B->uk, .heads = H, .rows = R, .tokens = T, .x = B->a,
                                  .x_stride = H * o->nope, .x_head_stride = o->nope, .y = B->b,
                                  .y_stride = H * (R + P), .y_head_stride = R + P};
        return dcp_op_head_matmul(cmd, &a);
    }
    case OP_HEAD_MATMUL_UV: {
        dcp_head_matmul_args a = {.w = &B->uv, .heads = H, .rows = o->v_dim, .tokens = T, .x = B->a,
                                  .x_stride = H * R, .x_head_stride = R, .y = B->b, .y_stride = H * o->v_dim,
                                  .y_head_stride = o->v_dim};
        return dcp_op_head_matmul(cmd, &a);
    }
    case OP_MLA_ROPE: {
        dcp_mla_rope_args a = {.tokens = T, .heads = H, .n_rot = P, .src = B->a,
                               .src_stride = H * (o->nope + P), .src_head_stride = o->nope + P,
                               .src_offset = o->nope, .dst = B->b, .dst_stride = H * (R + P),
                               .dst_head_stride = R + P, .dst_offset = R, .cs = B->cs};
        return dcp_op_mla_rope(cmd, &a);
    }
    case OP_MLA_KV_STORE: {
        dcp_mla_kv_store_args a = {.tokens = T, .kv_lora = R, .n_rot = P, .c = B->a, .c_stride = R + P,
                                   .kpe = B->a, .kpe_stride = R + P, .kpe_offset = R, .cs = B->cs,
                                   .slot = B->slots, .pool = B->mla_pool};
        return dcp_op_mla_kv_store(cmd, &a);
    }
    case OP_MOE_ROUTE: {
        dcp_moe_route_args a = {.tokens = T, .n_expert = o->experts, .n_used = o->experts_used, .n_groups = 1,
                                .n_groups_used = 1, .gating = DCP_EXPERT_GATING_SOFTMAX, .norm = 0, .scale = 1.0f,
                                .logits = B->c, .logits_stride = o->experts, .ids = B->moe_ids,
                                .weights = B->moe_w};
        return dcp_op_moe_route(cmd, &a);
    }
    case OP_MOE_GATE_UP: {
        dcp_moe_matmul_args a = {.w = &B->gu, .n_expert = o->experts, .rows = 2 * o->expert_ff, .tokens = T,
                                 .n_used = o->experts_used, .ids = B->moe_ids, .weights = B->moe_w, .x = B->a,
                                 .x_stride = o->moe_embd, .y = B->b, .y_stride = o->experts_used * 2 * o->expert_ff,
                                 .y_used_stride = 2 * o->expert_ff};
        return dcp_op_moe_gate_up(cmd, &a);
    }
    case OP_MOE_DOWN: {
        dcp_moe_matmul_args a = {.w = &B->dn, .n_expert = o->experts, .rows = o->moe_embd, .tokens = T,
                                 .n_used = o->experts_used, .ids = B->moe_ids, .weights = B->moe_w, .x = B->a,
                                 .x_stride = o->experts_used * o->expert_ff, .x_used_stride = o->expert_ff,
                                 .y = B->b, .y_stride = o->moe_embd};
        return dcp_op_moe_down(cmd, &a);
    }
    default: return dcp_fail(DCP_ERR_INTERNAL, "op %d", (int)k);
    }
}

/* Bytes read and written and FLOPs (2 per multiply-add; 1 per add or multiply alone; exp, max,
 * division by a sum and dequantization not counted) of op k over the step. */
static void counts(op_id k, const ops_opts *o, const ops_bufs *B, double *bytes, double *flops)
{
    double T = o->tokens, E = o->n_embd, D = o->head_dim, Hq = o->q_heads, Hkv = o->kv_heads, F = o->n_ff;
    double H = o->mla_heads, R = o->kv_lora, P = o->rope, Pa = o->parts, U = o->experts_used;
    double f16kv = 2.0; /* the f16 pools' bytes per value */
    switch (k) {
    case OP_RMSNORM: /* x in, y out, w; sum of squares (1 FMA) and x * inv * w per value */
        *bytes = 4 * (2 * T * E + E);
        *flops = 4 * T * E;
        return;
    case OP_RMSNORM_PARTS: /* x in and out, the parts, w, y; P adds, then as rmsnorm */
        *bytes = 4 * (3 * T * E + Pa * T * E + E);
        *flops = (Pa + 4) * T * E;
        return;
    case OP_RMSNORM_HEADS: /* in place over (Hq + Hkv) heads of D; two weight vectors */
        *bytes = 4 * (2 * T * (Hq + Hkv) * D + 2 * D);
        *flops = 4 * T * (Hq + Hkv) * D;
        return;
    case OP_ROPE_STORE: /* Q|K|V rows in, cos/sin, slots; Q out (f32), K and V into the f16 pool;
                         * 6 FLOPs per rotated pair of Q and K */
        *bytes = 4 * T * (Hq + 2 * Hkv) * D + 4 * T * D + 4 * T + 4 * T * Hq * D + f16kv * T * 2 * Hkv * D;
        *flops = 6 * T * (Hq + Hkv) * D / 2;
        return;
    case OP_SWIGLU: /* gate|up in, out; silu(g) u = g u / (1 + e^-g): 3 FLOPs + the division's add */
        *bytes = 4 * 3 * T * F;
        *flops = 4 * T * F;
        return;
    case OP_ADD:
        *bytes = 4 * 3 * T * E;
        *flops = T * E;
        return;
    case OP_GET_ROWS: /* T rows of the table, ids, the f32 rows out */
        *bytes = T * (double)dcp_matrix_bytes(o->type, o->n_embd, 1) + 4 * T + 4 * T * E;
        *flops = 0;
        return;
    case OP_ARGMAX:
        *bytes = 4 * T * o->vocab + 4 * T;
        *flops = 0;
        return;
    case OP_LSE_MERGE: /* P states (O and LSE) in, one out; a weighted sum (FMA) per part and value,
                        * one normalising multiply per value */
        *bytes = 4 * (Pa + 1) * T * Hq * (D + 1);
        *flops = (2 * Pa + 1) * T * Hq * D;
        return;
    case OP_HEAD_MATMUL_UK: /* W_UK [H][R][nope], x [T][H][nope], y [T][H][R] */
        *bytes = (double)dcp_buffer_size(B->uk.buf) + 4 * T * H * (o->nope + R);
        *flops = 2 * T * H * R * o->nope;
        return;
    case OP_HEAD_MATMUL_UV: /* W_UV [H][v][R], x [T][H][R], y [T][H][v] */
        *bytes = (double)dcp_buffer_size(B->uv.buf) + 4 * T * H * (R + o->v_dim);
        *flops = 2 * T * H * o->v_dim * R;
        return;
    case OP_MLA_ROPE: /* q_pe of every head in and out, cos/sin */
        *bytes = 4 * (2 * T * H * P + T * P);
        *flops = 6 * T * H * P / 2;
        return;
    case OP_MLA_KV_STORE: /* [c | k_pe] in, cos/sin, slots; the f16 latent row out */
        *bytes = 4 * T * (R + P) + 4 * T * P + 4 * T + f16kv * T * (R + P);
        *flops = 6 * T * P / 2;
        return;
    case OP_MOE_ROUTE: /* logits in, ids and weights out; a softmax and a top-k: no FLOPs counted */
        *bytes = 4 * T * o->experts + 8 * T * U;
        *flops = 0;
        return;
    case OP_MOE_GATE_UP: /* the selected experts' gate|up rows, x, ids, weights, y */
        *bytes = B->distinct_experts * (double)dcp_matrix_bytes(o->type, o->moe_embd, 2ull * o->expert_ff) +
                 4 * T * o->moe_embd + 8 * T * U + 4 * T * U * 2 * o->expert_ff;
        *flops = 2 * T * U * 2 * o->expert_ff * o->moe_embd;
        return;
    case OP_MOE_DOWN: /* the selected experts' down rows, x per slot, ids, weights, y */
        *bytes = B->distinct_experts * (double)dcp_matrix_bytes(o->type, o->expert_ff, o->moe_embd) +
                 4 * T * U * o->expert_ff + 8 * T * U + 4 * T * o->moe_embd;
        *flops = 2 * T * U * o->moe_embd * o->expert_ff + 2 * T * U * o->moe_embd;
        return;
    default: *bytes = *flops = 0; return;
    }
}

/* One op in a command of its own; its time into *ns. */
static dcp_status run_op(dcp_cmd *cmd, op_id k, const ops_opts *o, ops_bufs *B, double *ns)
{
    uint32_t t0, t1;
    dcp_status st = dcp_cmd_reset(cmd);
    if (st == DCP_OK) st = dcp_cmd_timestamp(cmd, &t0);
    if (st == DCP_OK) st = record(cmd, k, o, B);
    if (st == DCP_OK) st = dcp_cmd_timestamp(cmd, &t1);
    if (st == DCP_OK) st = dcp_cmd_run(cmd);
    if (st == DCP_OK) st = dcp_cmd_elapsed_ns(cmd, t0, t1, ns);
    return st;
}

static dcp_status upload_random(dcp_buffer *b, uint64_t floats, float lo, float hi, uint64_t seed)
{
    float *v = malloc(floats * sizeof *v);
    if (!v) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    dcp_bench_fill_random(v, floats, DCP_DTYPE_F32, seed);
    for (uint64_t i = 0; i < floats; i++) v[i] = lo + (hi - lo) * 0.5f * (v[i] + 1.0f);
    dcp_status st = dcp_buffer_upload(b, 0, v, floats * 4);
    free(v);
    return st;
}

static dcp_status upload_u32(dcp_buffer *b, uint32_t n, uint32_t mul, uint32_t mod)
{
    uint32_t *v = malloc((size_t)n * sizeof *v);
    if (!v) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t i = 0; i < n; i++) v[i] = (uint32_t)((uint64_t)i * mul % mod);
    dcp_status st = dcp_buffer_upload(b, 0, v, (uint64_t)n * 4);
    free(v);
    return st;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Creates every buffer the wanted ops need. */
static dcp_status setup(dcp_device *dev, const ops_opts *o, ops_bufs *B, dcp_cmd *cmd)
{
    uint64_t T = o->tokens, E = o->n_embd, D = o->head_dim, Hq = o->q_heads, Hkv = o->kv_heads;
    uint64_t H = o->mla_heads, R = o->kv_lora, P = o->rope, U = o->experts_used;
    /* The largest activation any op reads or writes, in floats. */
    uint64_t act = T * max_u64(max_u64(2 * o->n_ff, (Hq + 2 * Hkv) * D), max_u64(o->vocab, o->parts * E));
    act = max_u64(act, (uint64_t)o->parts * T * Hq * (D + 1));
    act = max_u64(act, T * H * max_u64(R + P, o->nope + P));
    act = max_u64(act, T * max_u64(U * 2 * o->expert_ff, max_u64(o->moe_embd, o->experts)));
    uint64_t rot = max_u64(D, P) / 2 * 2;
    dcp_status st = DCP_OK;
    dcp_buffer **f32s[] = {&B->a, &B->c, &B->b, &B->r};
    for (int i = 0; st == DCP_OK && i < 4; i++) st = dcp_buffer_create(dev, act * 4, DCP_MEMORY_DEVICE, f32s[i]);
    if (st == DCP_OK) st = upload_random(B->a, act, -1.0f, 1.0f, 11);
    if (st == DCP_OK) st = upload_random(B->c, act, -1.0f, 1.0f, 12);
    if (st == DCP_OK) st = upload_random(B->r, act, -1.0f, 1.0f, 13);
    if (st == DCP_OK) st = dcp_buffer_create(dev, max_u64(E, 2 * D) * 4, DCP_MEMORY_DEVICE, &B->w);
    if (st == DCP_OK) st = upload_random(B->w, max_u64(E, 2 * D), 0.5f, 1.5f, 14);
    if (st == DCP_OK) st = dcp_buffer_create(dev, T * rot * 4, DCP_MEMORY_DEVICE, &B->cs);
    if (st == DCP_OK) st = upload_random(B->cs, T * rot, -1.0f, 1.0f, 15);
    if (st == DCP_OK) st = dcp_buffer_create(dev, T * 4, DCP_MEMORY_DEVICE, &B->ids);
    if (st == DCP_OK) st = upload_u32(B->ids, (uint32_t)T, 2654435761u, 1024);
    if (st == DCP_OK) st = dcp_buffer_create(dev, T * 4, DCP_MEMORY_DEVICE, &B->slots);
    if (st == DCP_OK) st = upload_u32(B->slots, (uint32_t)T, 1, UINT32_MAX);
    if (st == DCP_OK) st = dcp_buffer_create(dev, T * 4, DCP_MEMORY_DEVICE, &B->out_ids);
    if (st == DCP_OK) st = dcp_buffer_create(dev, T * U * 4, DCP_MEMORY_DEVICE, &B->moe_ids);
    if (st == DCP_OK) st = dcp_buffer_create(dev, T * U * 4, DCP_MEMORY_DEVICE, &B->moe_w);
    if (st == DCP_OK && o->want[OP_ROPE_STORE]) {
        dcp_kv_pool_config pc = DCP_KV_POOL_CONFIG_DEFAULT;
        pc.kv_heads = o->kv_heads;
        pc.head_dim = o->head_dim;
        pc.num_pages = (uint32_t)((T + pc.page_size - 1) / pc.page_size);
        st = dcp_kv_pool_create(dev, &pc, &B->pool);
    }
    if (st == DCP_OK && o->want[OP_MLA_KV_STORE]) {
        dcp_kv_pool_config pc = DCP_KV_POOL_CONFIG_DEFAULT;
        pc.kv_heads = 1;
        pc.head_dim = o->kv_lora + o->rope;
        pc.k_only = 1;
        pc.num_pages = (uint32_t)((T + pc.page_size - 1) / pc.page_size);
        st = dcp_kv_pool_create(dev, &pc, &B->mla_pool);
    }
    if (st == DCP_OK && o->want[OP_GET_ROWS]) st = make_matrix(dev, o->type, 1024, o->n_embd, 21, &B->emb);
    if (st == DCP_OK && o->want[OP_HEAD_MATMUL_UK]) st = make_matrix(dev, o->type, o->mla_heads * o->kv_lora, o->nope, 22, &B->uk);
    if (st == DCP_OK && o->want[OP_HEAD_MATMUL_UV]) st = make_matrix(dev, o->type, o->mla_heads * o->v_dim, o->kv_lora, 23, &B->uv);
    if (st == DCP_OK && o->want[OP_MOE_GATE_UP])
        st = make_matrix(dev, o->type, o->experts * 2 * o->expert_ff, o->moe_embd, 24, &B->gu);
    if (st == DCP_OK && o->want[OP_MOE_DOWN]) st = make_matrix(dev, o->type, o->experts * o->moe_embd, o->expert_ff, 25, &B->dn);
    /* The experts read by gate_up and down: the routing of the logits in c, once. */
    if (st == DCP_OK && (o->want[OP_MOE_GATE_UP] || o->want[OP_MOE_DOWN])) {
        st = dcp_cmd_reset(cmd);
        if (st == DCP_OK) st = record(cmd, OP_MOE_ROUTE, o, B);
        if (st == DCP_OK) st = dcp_cmd_run(cmd);
        uint32_t *ids = malloc(T * U * 4);
        if (st == DCP_OK && !ids) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        if (st == DCP_OK) st = dcp_buffer_download(B->moe_ids, 0, ids, T * U * 4);
        bool seen[DCP_MOE_MAX_EXPERTS] = {false};
        for (uint64_t i = 0; st == DCP_OK && i < T * U; i++)
            if (ids[i] < o->experts && !seen[ids[i]]) {
                seen[ids[i]] = true;
                B->distinct_experts++;
            }
        free(ids);
    }
    return st;
}

static void teardown(ops_bufs *B)
{
    dcp_buffer *bufs[] = {B->a, B->b, B->c, B->r, B->w, B->cs, B->ids, B->slots, B->moe_ids, B->moe_w, B->out_ids};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dcp_buffer_destroy(bufs[i]);
    dcp_kv_pool_destroy(B->pool);
    dcp_kv_pool_destroy(B->mla_pool);
    dcp_matrix *ms[] = {&B->emb, &B->uk, &B->uv, &B->gu, &B->dn};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        if (ms[i]->buf) dcp_matrix_destroy(ms[i]);
}

typedef struct op_result {
    double ns;
    dcp_bench_yardsticks ys;
    dcp_bench_roofline roof;
} op_result;

int dcp_bench_ops(int argc, char **argv)
{
    const char *p = "dcp-vk-bench ops";
    ops_opts o = {.tokens = 1, .n_embd = 4096, .n_ff = 11008, .q_heads = 32, .kv_heads = 8, .head_dim = 128,
                  .vocab = 32000, .parts = 4, .mla_heads = 16, .kv_lora = 512, .rope = 64, .nope = 128,
                  .v_dim = 128, .moe_embd = 2048, .experts = 16, .experts_used = 6, .expert_ff = 1408,
                  .type = DCP_GGML_TYPE_Q8_0, .iters = 5};
    for (int i = 0; i < OP_COUNT; i++) o.want[i] = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int ok = 1;
        struct {
            const char *name;
            uint32_t *dst, min, max;
        } u32s[] = {
            {"--tokens", &o.tokens, 1, 512},          {"--n-embd", &o.n_embd, 32, 1u << 16},
            {"--n-ff", &o.n_ff, 1, 1u << 18},          {"--q-heads", &o.q_heads, 1, 256},
            {"--kv-heads", &o.kv_heads, 1, 256},       {"--head-dim", &o.head_dim, 4, 256},
            {"--vocab", &o.vocab, 1, 1u << 20},        {"--parts", &o.parts, 1, 64},
            {"--mla-heads", &o.mla_heads, 1, 256},     {"--kv-lora", &o.kv_lora, 32, 2048},
            {"--rope", &o.rope, 2, 256},               {"--nope", &o.nope, 32, 512},
            {"--v-dim", &o.v_dim, 1, 512},             {"--moe-embd", &o.moe_embd, 32, 1u << 16},
            {"--experts", &o.experts, 1, DCP_MOE_MAX_EXPERTS}, {"--experts-used", &o.experts_used, 1, 64},
            {"--expert-ff", &o.expert_ff, 32, 1u << 16}, {"--iters", &o.iters, 1, MAX_ITERS},
            {"--device", &o.device, 0, 1023},
        };
        int matched = 0;
        for (size_t k = 0; k < sizeof u32s / sizeof u32s[0] && !matched; k++)
            if (strcmp(a, u32s[k].name) == 0) {
                matched = 1;
                ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, u32s[k].min, u32s[k].max, u32s[k].dst);
            }
        if (matched) {
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return DCP_EXIT_OK;
        } else if (strcmp(a, "--ops") == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && parse_ops(p, v, &o);
        else if (strcmp(a, "--type") == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && parse_type(p, v, &o);
        else if (strcmp(a, "--json") == 0) o.json = 1;
        else {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", p, a);
            ok = 0;
        }
        if (!ok) return DCP_EXIT_USAGE;
    }
    if (o.q_heads % o.kv_heads) {
        fprintf(stderr, "%s: --q-heads %u is not a multiple of --kv-heads %u\n", p, o.q_heads, o.kv_heads);
        return DCP_EXIT_USAGE;
    }
    if (o.experts_used > o.experts) {
        fprintf(stderr, "%s: --experts-used %u is more than --experts %u\n", p, o.experts_used, o.experts);
        return DCP_EXIT_USAGE;
    }
    uint32_t be, bb;
    dcp_ggml_type_block(o.type, &be, &bb);
    if (o.n_embd % be || o.nope % be || o.kv_lora % be || o.moe_embd % be || o.expert_ff % be || o.head_dim % 4 ||
        o.rope % 2) {
        fprintf(stderr, "%s: --n-embd %u, --nope %u, --kv-lora %u, --moe-embd %u and --expert-ff %u must be "
                        "multiples of %s's block of %u, --head-dim %u of 4 and --rope %u even\n",
                p, o.n_embd, o.nope, o.kv_lora, o.moe_embd, o.expert_ff, dcp_ggml_type_name(o.type), be, o.head_dim,
                o.rope);
        return DCP_EXIT_USAGE;
    }

    int rc = DCP_EXIT_RUNTIME;
    dcp_context *ctx = NULL;
    dcp_bench_ruler *ruler = NULL;
    dcp_cmd *cmd = NULL;
    ops_bufs B;
    memset(&B, 0, sizeof B);
    op_result res[OP_COUNT];
    memset(res, 0, sizeof res);
    dcp_device *dev = NULL;
    if ((rc = dcp_bench_open_device(p, o.device, &ctx, &dev))) goto out;
    rc = DCP_EXIT_RUNTIME;
    dcp_status st;
    const dcp_device_info *info = dcp_device_get_info(dev);
    st = dcp_cmd_create(dev, &cmd);
    if (st == DCP_OK) st = setup(dev, &o, &B, cmd);
    if (st != DCP_OK) {
        dcp_cli_report(p, "creating the buffers", st);
        goto out;
    }
    if (dcp_bench_ruler_create(dev, &ruler) != 0) goto out;
    for (int k = 0; k < OP_COUNT; k++) {
        if (!o.want[k]) continue;
        double t[MAX_ITERS], warm;
        int first = dcp_bench_ruler_count(ruler);
        st = run_op(cmd, (op_id)k, &o, &B, &warm);
        for (uint32_t i = 0; st == DCP_OK && i < o.iters; i++) {
            if (dcp_bench_ruler_sample(ruler)) goto out;
            st = run_op(cmd, (op_id)k, &o, &B, &t[i]);
        }
        if (st != DCP_OK) {
            char what[64];
            snprintf(what, sizeof what, "running %s", op_names[k]);
            dcp_cli_report(p, what, st);
            goto out;
        }
        res[k].ns = dcp_bench_median(t, (int)o.iters);
        dcp_bench_ruler_get(ruler, first, &res[k].ys);
        double bytes, flops;
        counts((op_id)k, &o, &B, &bytes, &flops);
        res[k].roof = dcp_bench_roofline_of(&res[k].ys, bytes, flops, res[k].ns);
    }
    dcp_bench_yardsticks ys;
    dcp_bench_ruler_get(ruler, 0, &ys);
    if (o.json) {
        printf("{\"bench\": \"ops\", \"device\": ");
        dcp_cli_json_string(stdout, info->name, strlen(info->name));
        printf(", \"tokens\": %u, \"n_embd\": %u, \"n_ff\": %u, \"q_heads\": %u, \"kv_heads\": %u, \"head_dim\": %u, "
               "\"vocab\": %u, \"parts\": %u, \"mla_heads\": %u, \"kv_lora\": %u, \"rope\": %u, \"nope\": %u, "
               "\"v_dim\": %u, \"moe_embd\": %u, \"experts\": %u, \"experts_used\": %u, \"expert_ff\": %u, "
               "\"type\": \"%s\", \"iters\": %u, \"distinct_experts\": %u,\n \"yardsticks\": ",
               o.tokens, o.n_embd, o.n_ff, o.q_heads, o.kv_heads, o.head_dim, o.vocab, o.parts, o.mla_heads, o.kv_lora,
               o.rope, o.nope, o.v_dim, o.moe_embd, o.experts, o.experts_used, o.expert_ff,
               dcp_ggml_type_name(o.type), o.iters, B.distinct_experts);
        dcp_bench_yardsticks_json(stdout, &ys);
        printf(",\n \"results\": [");
        int n = 0;
        for (int k = 0; k < OP_COUNT; k++) {
            if (!o.want[k]) continue;
            printf("%s\n  {\"kernel\": \"%s\", \"tokens\": %u, \"us\": %.3f, \"x_dispatch\": %.4g, ", n++ ? "," : "",
                   op_names[k], o.tokens, res[k].ns * 1e-3,
                   res[k].ys.dispatch_ns > 0 ? res[k].ns / res[k].ys.dispatch_ns : 0.0);
            dcp_bench_roofline_json(stdout, &res[k].roof, &res[k].ys);
            printf("}");
        }
        printf("\n ]}\n");
    } else {
        printf("model ops, %u token%s, on %s (weights %s)\n", o.tokens, o.tokens == 1 ? "" : "s", info->name,
               dcp_ggml_type_name(o.type));
        dcp_bench_yardsticks_text(stdout, info->name, &ys);
        printf("%-15s %11s %12s %10s %11s %12s %5s %12s %11s\n", "op", "us", "bytes", "FLOPs", "GB/s", "roofline us",
               "bound", "of roofline", "x dispatch");
        for (int k = 0; k < OP_COUNT; k++) {
            if (!o.want[k]) continue;
            const dcp_bench_roofline *r = &res[k].roof;
            printf("%-15s %11.1f %12.0f %10.0f %11.2f %12.2f %5s %11.1f%% %11.1f\n", op_names[k], res[k].ns * 1e-3,
                   r->bytes, r->flops, r->bytes / res[k].ns, r->roofline_ns * 1e-3, dcp_bench_roofline_bound(r),
                   100.0 * r->fraction, res[k].ys.dispatch_ns > 0 ? res[k].ns / res[k].ys.dispatch_ns : 0.0);
        }
    }
    rc = DCP_EXIT_OK;
out:
    dcp_bench_ruler_destroy(ruler);
    teardown(&B);
    dcp_cmd_destroy(cmd);
    dcp_context_destroy(ctx);
    return rc;
}
