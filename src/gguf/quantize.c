/* Quantizing a GGUF file as llama.cpp's llama-quantize does: a file type (general.file_type) names
 * the weight type of most matrices and, for the k-quant mixes (Q4_K_M, Q5_K_M, ...), which
 * tensors get more bits; tensors whose rows are not whole blocks of the chosen type fall back to
 * another type. Rules learnt by reading llama.cpp's llama_tensor_get_type (src/llama-quant.cpp,
 * the 2025 versions before its tensor categories, where attn_qkv and attn_kv_b do not take
 * attn_v's rules and Q2_K / Q3_K fall back to IQ4_NL) for the file types below, every
 * architecture but Falcon; written here from their description, see dcp_ftype in gguf.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "dcpvk/gguf.h"

typedef unsigned long long ull;

typedef struct ftype_info {
    dcp_ftype ftype;
    const char *name;
    dcp_ggml_type base;
} ftype_info;

static const ftype_info ftypes[] = {
    {DCP_FTYPE_F32, "F32", DCP_GGML_TYPE_F32},       {DCP_FTYPE_F16, "F16", DCP_GGML_TYPE_F16},
    {DCP_FTYPE_BF16, "BF16", DCP_GGML_TYPE_BF16},    {DCP_FTYPE_Q8_0, "Q8_0", DCP_GGML_TYPE_Q8_0},
    {DCP_FTYPE_Q4_0, "Q4_0", DCP_GGML_TYPE_Q4_0},    {DCP_FTYPE_Q4_1, "Q4_1", DCP_GGML_TYPE_Q4_1},
    {DCP_FTYPE_Q5_0, "Q5_0", DCP_GGML_TYPE_Q5_0},    {DCP_FTYPE_Q5_1, "Q5_1", DCP_GGML_TYPE_Q5_1},
    {DCP_FTYPE_Q2_K, "Q2_K", DCP_GGML_TYPE_Q2_K},    {DCP_FTYPE_Q3_K_S, "Q3_K_S", DCP_GGML_TYPE_Q3_K},
    {DCP_FTYPE_Q3_K_M, "Q3_K_M", DCP_GGML_TYPE_Q3_K}, {DCP_FTYPE_Q3_K_L, "Q3_K_L", DCP_GGML_TYPE_Q3_K},
    {DCP_FTYPE_Q4_K_S, "Q4_K_S", DCP_GGML_TYPE_Q4_K}, {DCP_FTYPE_Q4_K_M, "Q4_K_M", DCP_GGML_TYPE_Q4_K},
    {DCP_FTYPE_Q5_K_S, "Q5_K_S", DCP_GGML_TYPE_Q5_K}, {DCP_FTYPE_Q5_K_M, "Q5_K_M", DCP_GGML_TYPE_Q5_K},
    {DCP_FTYPE_Q6_K, "Q6_K", DCP_GGML_TYPE_Q6_K},   {DCP_FTYPE_IQ4_NL, "IQ4_NL", DCP_GGML_TYPE_IQ4_NL},
    {DCP_FTYPE_IQ4_XS, "IQ4_XS", DCP_GGML_TYPE_IQ4_XS},
};

static const ftype_info *ftype_of(dcp_ftype f)
{
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
        if (ftypes[i].ftype == f) return &ftypes[i];
    return NULL;
}

const char *dcp_ftype_name(dcp_ftype f)
{
    const ftype_info *i = ftype_of(f);
    return i ? i->name : NULL;
}

dcp_status dcp_ftype_from_name(const char *name, dcp_ftype *out)
{
    /* llama-quantize's aliases: Q3_K, Q4_K, Q5_K are the _M mixes. */
    static const struct { const char *alias; dcp_ftype f; } aliases[] = {
        {"Q3_K", DCP_FTYPE_Q3_K_M}, {"Q4_K", DCP_FTYPE_Q4_K_M}, {"Q5_K", DCP_FTYPE_Q5_K_M}};
    for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
        if (strcasecmp(name, ftypes[i].name) == 0) {
            *out = ftypes[i].ftype;
            return DCP_OK;
        }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcasecmp(name, aliases[i].alias) == 0) {
            *out = aliases[i].f;
            return DCP_OK;
        }
    return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "unknown file type '%s' (allowed: f32, f16, bf16, q8_0, q4_0, q4_1, "
                    "q5_0, q5_1, q2_k, q3_k_s, q3_k_m (q3_k), q3_k_l, q4_k_s, q4_k_m (q4_k), q5_k_s, "
                    "q5_k_m (q5_k), q6_k, iq4_nl, iq4_xs)", name);
}

dcp_ggml_type dcp_ftype_base_type(dcp_ftype f)
{
    const ftype_info *i = ftype_of(f);
    return i ? i->base : DCP_GGML_TYPE_F32;
}

static int is_quantized(dcp_ggml_type t)
{
    return t != DCP_GGML_TYPE_F32 && t != DCP_GGML_TYPE_F16 && t != DCP_GGML_TYPE_BF16;
}

static uint32_t block_of(dcp_ggml_type t)
{
    uint32_t be, bb;
    dcp_ggml_type_block(t, &be, &bb);
    return be;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every third between. */
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

dcp_ggml_type dcp_quantize_fallback(dcp_ggml_type type, uint64_t ne0)
{
    uint32_t be = block_of(type);
    if (be == 0 || ne0 % be == 0) return type;
    dcp_ggml_type f;
    switch (type) {
    case DCP_GGML_TYPE_IQ2_XXS:
    case DCP_GGML_TYPE_IQ2_XS:
    case DCP_GGML_TYPE_IQ2_S:
    case DCP_GGML_TYPE_IQ3_XXS:
    case DCP_GGML_TYPE_IQ3_S:
    case DCP_GGML_TYPE_IQ1_S:
    case DCP_GGML_TYPE_IQ1_M:
    case DCP_GGML_TYPE_Q2_K:
    case DCP_GGML_TYPE_Q3_K:
    case DCP_GGML_TYPE_IQ4_XS: f = DCP_GGML_TYPE_IQ4_NL; break;
    case DCP_GGML_TYPE_TQ1_0:
    case DCP_GGML_TYPE_TQ2_0: f = DCP_GGML_TYPE_Q4_0; break;
    case DCP_GGML_TYPE_Q4_K: f = DCP_GGML_TYPE_Q5_0; break;
    case DCP_GGML_TYPE_Q5_K: f = DCP_GGML_TYPE_Q5_1; break;
    case DCP_GGML_TYPE_Q6_K: f = DCP_GGML_TYPE_Q8_0; break;
    default: f = DCP_GGML_TYPE_F16; break; /* llama-quantize stops here */
    }
    return ne0 % block_of(f) == 0 ? f : DCP_GGML_TYPE_F16;
}

/* The layer of a "blk.N." tensor name, or -1. */
static int layer_of(const char *name)
{
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long l = strtol(name + 4, &end, 10);
    return end != name + 4 && *end == '.' && l >= 0 && l < INT32_MAX ? (int)l : -1;
}

static uint32_t arch_uint(const dcp_gguf *g, const char *arch, const char *suffix, uint32_t dflt)
{
    char key[160];
    uint64_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return dcp_gguf_get_uint(g, key, &v) == DCP_OK && v <= UINT32_MAX ? (uint32_t)v : dflt;
}

dcp_status dcp_quantize_plan_init(const dcp_gguf *g, dcp_ftype ftype, bool pure, dcp_quantize_plan *p)
{
    memset(p, 0, sizeof *p);
    if (!ftype_of(ftype)) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "file type %d is not supported", (int)ftype);
    p->ftype = ftype;
    p->pure = pure;
    p->tied = dcp_gguf_tensor_find(g, "output.weight") == NULL;
    int max_layer = -1;
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); i++) {
        const char *n = dcp_gguf_tensor_at(g, i)->name;
        if (strstr(n, "attn_v.weight") || strstr(n, "attn_qkv.weight") || strstr(n, "attn_kv_b.weight"))
            p->n_attn_v++;
        int l = layer_of(n);
        if (l > max_layer) max_layer = l;
    }
    const char *arch = "";
    size_t len;
    if (dcp_gguf_get_string(g, "general.architecture", &arch, &len) != DCP_OK || len >= 64) arch = "";
    uint32_t heads = arch_uint(g, arch, "attention.head_count", 0);
    uint32_t kv_heads = arch_uint(g, arch, "attention.head_count_kv", heads);
    p->n_gqa = heads && kv_heads ? heads / kv_heads : 1;
    p->n_expert = arch_uint(g, arch, "expert_count", 0);
    p->n_layer = arch_uint(g, arch, "block_count", (uint32_t)(max_layer + 1));
    /* llama.cpp's LLM_TYPE_70B (llama with grouped KV heads, qwen2; 80 layers): attn_v one step up. */
    p->type_70b = p->n_layer == 80 && ((strcmp(arch, "llama") == 0 && heads != kv_heads) || strcmp(arch, "qwen2") == 0);
    dcp_clear_error();
    return DCP_OK;
}

dcp_ggml_type dcp_quantize_tensor_type(const dcp_quantize_plan *p, const dcp_gguf_tensor *t, int *fell_back)
{
    const char *name = t->name;
    *fell_back = 0;
    /* Only 2-D (and larger) weight matrices are quantized; norms, the router and other vectors stay. */
    if (t->n_dims < 2 || !ends_with(name, "weight") || strstr(name, "_norm.weight") ||
        strstr(name, "ffn_gate_inp.weight"))
        return t->type;
    dcp_ggml_type type = dcp_ftype_base_type(p->ftype);
    if (!is_quantized(type)) return type;
    const dcp_ftype f = p->ftype;
    const int layer = layer_of(name), n_layer = (int)p->n_layer, experts8 = p->n_expert == 8;
    const int iq4 = f == DCP_FTYPE_IQ4_NL || f == DCP_FTYPE_IQ4_XS;
    const int output = strcmp(name, "output.weight") == 0 || (p->tied && strcmp(name, "token_embd.weight") == 0);
    if (!p->pure) {
        if (output) {
            if (t->ne[0] % block_of(type)) type = DCP_GGML_TYPE_Q8_0;
            else if (type != DCP_GGML_TYPE_Q8_0) type = DCP_GGML_TYPE_Q6_K;
        } else if (strcmp(name, "token_embd.weight") == 0) {
            /* the base type */
        } else if (strstr(name, "attn_v.weight")) {
            /* i: llama-quantize's count of attn_v tensors before this one in its (layer, name)
             * order, which is the layer; n: attn_v, attn_qkv and attn_kv_b tensors. */
            const int i = layer, n = (int)p->n_attn_v;
            if (f == DCP_FTYPE_Q2_K) type = p->n_gqa >= 4 ? DCP_GGML_TYPE_Q4_K : DCP_GGML_TYPE_Q3_K;
            else if (f == DCP_FTYPE_Q3_K_M) type = i < 2 ? DCP_GGML_TYPE_Q5_K : DCP_GGML_TYPE_Q4_K;
            else if (f == DCP_FTYPE_Q3_K_L) type = DCP_GGML_TYPE_Q5_K;
            else if (iq4 && p->n_gqa >= 4) type = DCP_GGML_TYPE_Q5_K;
            else if ((f == DCP_FTYPE_Q4_K_M || f == DCP_FTYPE_Q5_K_M) && more_bits(i, n)) type = DCP_GGML_TYPE_Q6_K;
            else if (f == DCP_FTYPE_Q4_K_S && i < 4) type = DCP_GGML_TYPE_Q5_K;
            if (p->type_70b && (type == DCP_GGML_TYPE_Q3_K || type == DCP_GGML_TYPE_Q4_K)) type = DCP_GGML_TYPE_Q5_K;
            if (experts8) type = DCP_GGML_TYPE_Q8_0;
        } else if (strstr(name, "attn_k.weight")) {
            if (experts8) type = DCP_GGML_TYPE_Q8_0;
        } else if (strstr(name, "attn_q.weight")) {
            /* no rule for these file types */
        } else if (strstr(name, "ffn_down")) {
            const int i = layer, n = n_layer;
            if (f == DCP_FTYPE_Q2_K) type = DCP_GGML_TYPE_Q3_K;
            else if (f == DCP_FTYPE_Q3_K_M) type = i < n / 16 ? DCP_GGML_TYPE_Q5_K : DCP_GGML_TYPE_Q4_K;
            else if (f == DCP_FTYPE_Q3_K_L) type = DCP_GGML_TYPE_Q5_K;
            else if (f == DCP_FTYPE_Q4_K_M) {
                if (more_bits(i, n)) type = DCP_GGML_TYPE_Q6_K;
            } else if (iq4 && i < n / 8) type = DCP_GGML_TYPE_Q5_K;
            else if (f == DCP_FTYPE_Q5_K_M && more_bits(i, n)) type = DCP_GGML_TYPE_Q6_K;
            else if (f == DCP_FTYPE_Q4_K_S && i < n / 8) type = DCP_GGML_TYPE_Q5_K;
        } else if (strstr(name, "attn_output.weight")) {
            if (experts8) {
                if (f == DCP_FTYPE_Q2_K || f == DCP_FTYPE_Q3_K_S || f == DCP_FTYPE_Q3_K_M || f == DCP_FTYPE_Q4_K_S ||
                    f == DCP_FTYPE_Q4_K_M || iq4)
                    type = DCP_GGML_TYPE_Q5_K;
            } else if (f == DCP_FTYPE_Q2_K) type = DCP_GGML_TYPE_Q3_K;
            else if (f == DCP_FTYPE_Q3_K_M) type = DCP_GGML_TYPE_Q4_K;
            else if (f == DCP_FTYPE_Q3_K_L) type = DCP_GGML_TYPE_Q5_K;
        } else if (strstr(name, "attn_qkv.weight")) {
            /* the fused Q|K|V (phi3) has its own rule, not attn_v's */
            if (f == DCP_FTYPE_Q3_K_M || f == DCP_FTYPE_Q3_K_L) type = DCP_GGML_TYPE_Q4_K;
            else if (f == DCP_FTYPE_Q4_K_M) type = DCP_GGML_TYPE_Q5_K;
            else if (f == DCP_FTYPE_Q5_K_M) type = DCP_GGML_TYPE_Q6_K;
        }
        /* attn_kv_b (deepseek2's legacy layout), attn_k_b / attn_v_b, ffn_gate, ffn_up and the rest:
         * the base type */
    }
    dcp_ggml_type fb = dcp_quantize_fallback(type, t->ne[0]);
    *fell_back = fb != type;
    return fb;
}

/* ---- whole files -------------------------------------------------------------------------------- */

typedef struct qjob {
    const dcp_gguf *g;
    const dcp_gguf_tensor **src;   /* [tensors] */
    dcp_ggml_type *type;           /* [tensors] target types */
} qjob;

/* One output part's view of the job: its tensors are the job's [first, ...). */
typedef struct qpart {
    qjob *job;
    uint64_t first;
} qpart;

/* Writer fill: tensor index's bytes in its target type (copied when unchanged). */
static dcp_status fill(void *user, uint64_t index, void *dst, uint64_t size)
{
    const qpart *qp = user;
    qjob *j = qp->job;
    index += qp->first;
    const dcp_gguf_tensor *t = j->src[index];
    if (j->type[index] == t->type) {
        memcpy(dst, t->data, (size_t)size);
        return DCP_OK;
    }
    float *x = malloc(t->n_elements * sizeof *x);
    if (!x) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "quantize: out of memory for tensor %s", t->name);
    dcp_status st = dcp_gguf_tensor_to_f32(j->g, t, x);
    if (st == DCP_OK) st = dcp_ggml_from_f32(j->type[index], x, dst, t->n_elements);
    if (st) dcp_fail_context(st, "quantize: tensor %s", t->name);
    free(x);
    return st;
}

static const char *const replaced_keys[] = {"general.file_type", "general.quantization_version", "general.alignment",
                                            "split.no", "split.count", "split.tensors.count"};

static dcp_status set_split_keys(dcp_gguf_writer *w, uint32_t no, uint32_t count, uint64_t tensors)
{
    dcp_status st;
    DCP_TRY(dcp_gguf_writer_set_uint(w, "split.no", DCP_GGUF_TYPE_UINT16, no));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "split.count", DCP_GGUF_TYPE_UINT16, count));
    DCP_TRY(dcp_gguf_writer_set_int(w, "split.tensors.count", DCP_GGUF_TYPE_INT32, (int64_t)tensors));
fail:
    return st;
}

dcp_status dcp_gguf_quantize(const char *in_path, const char *out_path, const dcp_quantize_config *cfg,
                             dcp_quantize_report_fn report, void *user)
{
    static const dcp_quantize_config defaults = DCP_QUANTIZE_CONFIG_DEFAULT;
    const dcp_quantize_config *c = cfg ? cfg : &defaults;
    const bool split = c->split_max_bytes > 0 || c->split_max_tensors > 0;
    dcp_status st = DCP_OK;
    dcp_gguf *g = NULL;
    dcp_gguf_writer **w = NULL;
    qjob job = {0};
    uint32_t *part_of = NULL, n_parts = 0;
    qpart *qp = NULL;
    char **paths = NULL, *prefix = NULL;
    DCP_TRY(dcp_gguf_open(in_path, &g));
    dcp_quantize_plan plan;
    DCP_TRY(dcp_quantize_plan_init(g, c->copy ? DCP_FTYPE_F32 : c->ftype, c->pure, &plan));
    uint64_t n = dcp_gguf_tensor_count(g);
    if (split && n > INT32_MAX) {
        st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "quantize: %llu tensors do not fit split.tensors.count", (ull)n);
        goto fail;
    }
    job.g = g;
    job.src = calloc(n ? n : 1, sizeof *job.src);
    job.type = calloc(n ? n : 1, sizeof *job.type);
    part_of = calloc(n ? n : 1, sizeof *part_of);
    if (!job.src || !job.type || !part_of) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "quantize: out of memory");
        goto fail;
    }
    /* Target types, then the parts: a new part starts when the next tensor would pass the size
     * limit or the tensor limit (a part holds at least one tensor), as gguf-split cuts them. */
    uint64_t part_bytes = 0, part_tensors = 0;
    for (uint64_t i = 0; i < n; i++) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(g, i);
        int fell_back = 0;
        dcp_ggml_type to = c->copy ? t->type : dcp_quantize_tensor_type(&plan, t, &fell_back);
        if (to != t->type && !dcp_ggml_type_supported(t->type)) {
            st = dcp_fail(DCP_ERR_UNSUPPORTED, "%s: tensor %s has type %s, which dcp-vk cannot read to requantize "
                          "(supported: " DCP_GGML_SUPPORTED_LIST ")", in_path, t->name, dcp_ggml_type_name(t->type));
            goto fail;
        }
        uint32_t be, bb;
        dcp_ggml_type_block(to, &be, &bb);
        const uint64_t bytes = t->n_elements / be * bb;
        if (split && part_tensors > 0 &&
            ((c->split_max_tensors && part_tensors >= c->split_max_tensors) ||
             (c->split_max_bytes && part_bytes + bytes > c->split_max_bytes))) {
            n_parts++;
            part_bytes = part_tensors = 0;
        }
        part_bytes += bytes;
        part_tensors++;
        job.src[i] = t;
        job.type[i] = to;
        part_of[i] = n_parts;
        if (report) report(user, t, to, fell_back, n_parts);
    }
    n_parts = split ? n_parts + 1 : 1;
    if (n_parts > 99999) {
        st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "quantize: %u parts (more than gguf-split's 99999): raise the split limit",
                      n_parts);
        goto fail;
    }
    w = calloc(n_parts, sizeof *w);
    qp = calloc(n_parts, sizeof *qp);
    paths = calloc(n_parts, sizeof *paths);
    if (!w || !qp || !paths) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "quantize: out of memory");
        goto fail;
    }
    if (split) { /* OUT or OUT.gguf -> OUT-00001-of-0000N.gguf, ... */
        size_t len = strlen(out_path);
        if (len > 5 && strcmp(out_path + len - 5, ".gguf") == 0) len -= 5;
        prefix = strndup(out_path, len);
        if (!prefix) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "quantize: out of memory");
            goto fail;
        }
    }
    for (uint32_t k = 0; k < n_parts; k++) {
        DCP_TRY(dcp_gguf_writer_create((uint32_t)dcp_gguf_alignment(g), &w[k]));
        qp[k].job = &job;
        if (split) {
            int need = dcp_gguf_split_path(NULL, 0, prefix, k, n_parts);
            paths[k] = malloc((size_t)need + 1);
            if (!paths[k]) {
                st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "quantize: out of memory");
                goto fail;
            }
            dcp_gguf_split_path(paths[k], (size_t)need + 1, prefix, k, n_parts);
        } else if (!(paths[k] = strdup(out_path))) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "quantize: out of memory");
            goto fail;
        }
    }
    /* The model's keys go to the first part; every part of a split output has the split keys. */
    for (uint64_t i = 0; i < dcp_gguf_kv_count(g); i++) {
        const dcp_gguf_kv *kv = dcp_gguf_kv_at(g, i);
        int skip = 0;
        for (size_t k = 0; k < sizeof replaced_keys / sizeof replaced_keys[0]; k++) {
            if (c->copy && k < 2) continue; /* a copy keeps the file type */
            skip |= strcmp(kv->key, replaced_keys[k]) == 0;
        }
        if (!skip) DCP_TRY(dcp_gguf_writer_copy_kv(w[0], kv));
    }
    if (!c->copy) {
        DCP_TRY(dcp_gguf_writer_set_uint(w[0], "general.file_type", DCP_GGUF_TYPE_UINT32, (uint64_t)c->ftype));
        DCP_TRY(dcp_gguf_writer_set_uint(w[0], "general.quantization_version", DCP_GGUF_TYPE_UINT32, 2));
    }
    if (split)
        for (uint32_t k = 0; k < n_parts; k++) DCP_TRY(set_split_keys(w[k], k, n_parts, n));
    for (uint64_t i = 0; i < n; i++) {
        const dcp_gguf_tensor *t = job.src[i];
        const uint32_t k = part_of[i];
        uint32_t be, bb;
        dcp_ggml_type_block(job.type[i], &be, &bb);
        if (dcp_gguf_writer_tensor_count(w[k]) == 0) qp[k].first = i;
        DCP_TRY(dcp_gguf_writer_add_tensor_fill(w[k], t->name, job.type[i], t->n_dims, t->ne, t->n_elements / be * bb,
                                                fill, &qp[k]));
    }
    st = dcp_gguf_writer_write_parts((const dcp_gguf_writer *const *)w, (const char *const *)paths, n_parts,
                                     c->write_flags);
fail:
    for (uint32_t k = 0; w && k < n_parts; k++) dcp_gguf_writer_destroy(w[k]);
    for (uint32_t k = 0; paths && k < n_parts; k++) free(paths[k]);
    free(w);
    free(qp);
    free(paths);
    free(prefix);
    free(part_of);
    dcp_gguf_close(g);
    free(job.src);
    free(job.type);
    return st;
}
