/* The quantizer's per-tensor types against llama-quantize's: a generated F32 model of every
 * architecture (llama, llama with a tied output, qwen2, qwen3, phi3, deepseek2 in both layouts)
 * is quantized to every file type by dcp_gguf_quantize, and the type of every tensor of the
 * written file is compared with the table below.
 *
 * Where the table comes from: it was written by hand, by reading llama.cpp's llama-quantize rules
 * (src/llama-quant.cpp, llama_tensor_get_type and its caller llama_model_quantize_impl, in the
 * 2025 versions where attn_qkv has its own rule, attn_kv_b none and Q2_K / Q3_K fall back to
 * IQ4_NL; no importance matrix, no --pure, no overrides) and applying them to these shapes by
 * hand; not by running this project's quantizer. What the rules say for these models:
 *   - only tensors of 2 or 3 dimensions whose name ends in "weight" are converted, never
 *     *_norm.weight nor ffn_gate_inp.weight; F32 / F16 / BF16 files convert them all to that type
 *     without any rule;
 *   - output.weight (token_embd.weight when tied): Q8_0 in a Q8_0 file, else Q6_K;
 *   - attn_v (8 layers, 8 heads / 2 KV heads = 4): Q2_K -> Q4_K; Q3_K_M -> Q5_K on layers 0, 1,
 *     else Q4_K; Q3_K_L -> Q5_K; IQ4_NL / IQ4_XS -> Q5_K; Q4_K_M, Q5_K_M -> Q6_K on the
 *     "more bits" layers 0, 3, 6, 7 of 8; Q4_K_S -> Q5_K on layers 0..3;
 *   - attn_qkv (phi3): Q3_K_M, Q3_K_L -> Q4_K; Q4_K_M -> Q5_K; Q5_K_M -> Q6_K;
 *   - attn_output: Q2_K -> Q3_K; Q3_K_M -> Q4_K; Q3_K_L -> Q5_K (fewer than 8 experts);
 *   - ffn_down (n = block_count): Q2_K -> Q3_K; Q3_K_M -> Q5_K before layer n/16, else Q4_K;
 *     Q3_K_L -> Q5_K; Q4_K_M, Q5_K_M -> Q6_K on the more-bits layers (of 2: layer 1); Q4_K_S and
 *     IQ4_NL / IQ4_XS -> Q5_K before layer n/8;
 *   - everything else (attn_q, attn_k, ffn_gate, ffn_up, the experts' gate / up, attn_kv_a_mqa,
 *     attn_kv_b, attn_k_b, attn_v_b, token_embd.weight): the file type's base type;
 *   - then rows (ne0) that are not whole blocks of the chosen type: Q2_K, Q3_K, IQ4_XS -> IQ4_NL,
 *     Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0 (here: the llama family's ffn_down of 96
 *     columns, deepseek2's attn_kv_b, attn_k_b and attn_v_b of 32).
 * Before issue 21 this project gave phi3's attn_qkv and deepseek2's attn_kv_b attn_v's rules and
 * fell back to Q4_0: those cells are the ones that catch it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcpvk/gguf.h"
#include "test_gguf_util.h"
#include "testmodel/testmodel.h"
#include "vkutil.h"

/* The file types, in the order of the table's columns. */
static const dcp_ftype mixes[] = {
    DCP_FTYPE_F32,    DCP_FTYPE_F16,    DCP_FTYPE_BF16,   DCP_FTYPE_Q8_0,   DCP_FTYPE_Q4_0,
    DCP_FTYPE_Q4_1,   DCP_FTYPE_Q5_0,   DCP_FTYPE_Q5_1,   DCP_FTYPE_Q2_K,   DCP_FTYPE_Q3_K_S,
    DCP_FTYPE_Q3_K_M, DCP_FTYPE_Q3_K_L, DCP_FTYPE_Q4_K_S, DCP_FTYPE_Q4_K_M, DCP_FTYPE_Q5_K_S,
    DCP_FTYPE_Q5_K_M, DCP_FTYPE_Q6_K,   DCP_FTYPE_IQ4_NL, DCP_FTYPE_IQ4_XS,
};
enum { N_MIX = sizeof mixes / sizeof mixes[0] };

/* A row: the tensor (a whole name, or the part after "blk.N.") and its type in each file type,
 * space-separated in the order of `mixes`; one word: that type in every file type. A word
 * "A@0,3/B" is A on the listed layers and B on the others. */
typedef struct row {
    const char *tensor, *types;
} row;

/*                                F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M
 *                                Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS */
#define BASE "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q3_K Q3_K Q4_K Q4_K Q5_K Q5_K Q6_K IQ4_NL IQ4_XS"
#define OUTPUT "F32 F16 BF16 Q8_0 Q6_K Q6_K Q6_K Q6_K Q6_K Q6_K Q6_K Q6_K Q6_K Q6_K Q6_K Q6_K Q6_K Q6_K Q6_K"
#define ATTN_V                                                                                                         \
    "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q3_K Q5_K@0,1/Q4_K Q5_K Q5_K@0,1,2,3/Q4_K Q6_K@0,3,6,7/Q4_K Q5_K "   \
    "Q6_K@0,3,6,7/Q5_K Q6_K Q5_K Q5_K"
#define ATTN_OUTPUT "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q3_K Q3_K Q4_K Q5_K Q4_K Q4_K Q5_K Q5_K Q6_K IQ4_NL IQ4_XS"
#define ATTN_QKV "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q4_K Q4_K Q5_K Q5_K Q6_K Q6_K IQ4_NL IQ4_XS"
/* ffn_down of 96 columns (8 layers): the rule's type, then its fallback */
#define FFN_DOWN_96                                                                                                   \
    "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL IQ4_NL Q5_0 Q5_1 Q5_1@0/Q5_0 Q8_0@0,3,6,7/Q5_0 Q5_1 "               \
    "Q8_0@0,3,6,7/Q5_1 Q8_0 Q5_1@0/IQ4_NL Q5_1@0/IQ4_NL"
/* 32 columns: every 256-block type falls back */
#define ROWS_32 "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL IQ4_NL IQ4_NL IQ4_NL Q5_0 Q5_0 Q5_1 Q5_1 Q8_0 IQ4_NL IQ4_NL"
/* deepseek2's ffn_down of 2 layers: layer 0 (dense) is no more-bits layer, layer 1 (MoE) is */
#define DS2_DOWN_0 "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q3_K Q3_K Q4_K Q5_K Q4_K Q4_K Q5_K Q5_K Q6_K IQ4_NL IQ4_XS"
#define DS2_DOWN_1 "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q3_K Q3_K Q4_K Q5_K Q4_K Q6_K Q5_K Q6_K Q6_K IQ4_NL IQ4_XS"

static const row llama_rows[] = {
    {"token_embd.weight", BASE}, {"output.weight", OUTPUT}, {"output_norm.weight", "F32"},
    {"attn_norm.weight", "F32"}, {"attn_q.weight", BASE},   {"attn_k.weight", BASE},
    {"attn_v.weight", ATTN_V},   {"attn_output.weight", ATTN_OUTPUT}, {"ffn_norm.weight", "F32"},
    {"ffn_gate.weight", BASE},   {"ffn_up.weight", BASE},   {"ffn_down.weight", FFN_DOWN_96},
    {"attn_q.bias", "F32"},      {"attn_k.bias", "F32"},    {"attn_v.bias", "F32"}, /* qwen2 */
    {"attn_q_norm.weight", "F32"}, {"attn_k_norm.weight", "F32"},                    /* qwen3 */
    {NULL, NULL}};

static const row llama_tied_rows[] = {
    {"token_embd.weight", OUTPUT}, {"output_norm.weight", "F32"}, {"attn_norm.weight", "F32"},
    {"attn_q.weight", BASE},       {"attn_k.weight", BASE},       {"attn_v.weight", ATTN_V},
    {"attn_output.weight", ATTN_OUTPUT}, {"ffn_norm.weight", "F32"}, {"ffn_gate.weight", BASE},
    {"ffn_up.weight", BASE},       {"ffn_down.weight", FFN_DOWN_96}, {NULL, NULL}};

static const row phi3_rows[] = {
    {"token_embd.weight", BASE},   {"output.weight", OUTPUT},          {"output_norm.weight", "F32"},
    {"attn_norm.weight", "F32"},   {"attn_qkv.weight", ATTN_QKV},      {"attn_output.weight", ATTN_OUTPUT},
    {"ffn_norm.weight", "F32"},    {"ffn_up.weight", BASE},            {"ffn_down.weight", FFN_DOWN_96},
    {NULL, NULL}};

static const row deepseek2_rows[] = {
    {"token_embd.weight", BASE},      {"output.weight", OUTPUT},         {"output_norm.weight", "F32"},
    {"attn_norm.weight", "F32"},      {"attn_q.weight", BASE},           {"attn_kv_a_mqa.weight", BASE},
    {"attn_kv_a_norm.weight", "F32"}, {"attn_kv_b.weight", ROWS_32},     {"attn_k_b.weight", ROWS_32},
    {"attn_v_b.weight", ROWS_32},     {"attn_output.weight", ATTN_OUTPUT}, {"ffn_norm.weight", "F32"},
    {"ffn_gate.weight", BASE},        {"ffn_up.weight", BASE},           {"ffn_down.weight", DS2_DOWN_0},
    {"ffn_gate_inp.weight", "F32"},   {"ffn_gate_exps.weight", BASE},    {"ffn_up_exps.weight", BASE},
    {"ffn_down_exps.weight", DS2_DOWN_1}, {"ffn_gate_shexp.weight", BASE}, {"ffn_up_shexp.weight", BASE},
    {"ffn_down_shexp.weight", DS2_DOWN_1}, {NULL, NULL}};

/* The type the table gives tensor `name` (layer `layer`, -1 for none) in column `mix`. */
static dcp_ggml_type table_type(const row *rows, const char *name, int mix)
{
    int layer = -1;
    const char *key = name;
    if (!strncmp(name, "blk.", 4)) {
        layer = atoi(name + 4);
        key = strchr(name + 4, '.') + 1;
    }
    for (const row *r = rows; r->tensor; r++) {
        if (strcmp(r->tensor, key)) continue;
        /* the mix-th word, or the only one */
        char words[N_MIX][48];
        int n = 0;
        for (const char *p = r->types; *p && n < N_MIX;) {
            while (*p == ' ') p++;
            size_t k = strcspn(p, " ");
            if (!k) break;
            snprintf(words[n++], sizeof words[0], "%.*s", (int)k, p);
            p += k;
        }
        if (n != 1 && n != N_MIX) fail_msg("table row %s has %d words, not 1 or %d", r->tensor, n, N_MIX);
        char *w = words[n == 1 ? 0 : mix], *at = strchr(w, '@');
        if (at) { /* A@layers/B */
            char *slash = strchr(at, '/');
            if (!slash) fail_msg("table word %s: no /", w);
            *at = *slash = '\0';
            int on = 0;
            for (char *l = at + 1; *l;) {
                if (atoi(l) == layer) on = 1;
                l += strcspn(l, ",");
                if (*l == ',') l++;
            }
            w = on ? w : slash + 1;
        }
        dcp_ggml_type t;
        if (dcp_ggml_type_from_name(w, &t) != DCP_OK) fail_msg("table word %s is not a type", w);
        return t;
    }
    fail_msg("tensor %s has no row in the table", name);
    return DCP_GGML_TYPE_F32;
}

/* Quantizes in_path to every file type and compares each tensor's type with the table. */
static void check_arch(const char *label, const char *in_path, const row *rows)
{
    char out[256];
    snprintf(out, sizeof out, "%s", tg_tmp_path("table-out.gguf"));
    uint64_t cells = 0;
    for (int m = 0; m < N_MIX; m++) {
        dcp_quantize_config qc = DCP_QUANTIZE_CONFIG_DEFAULT;
        qc.ftype = mixes[m];
        DCP_ASSERT_OK(dcp_gguf_quantize(in_path, out, &qc, NULL, NULL));
        dcp_gguf *g;
        DCP_ASSERT_OK(dcp_gguf_open(out, &g));
        for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); i++) {
            const dcp_gguf_tensor *t = dcp_gguf_tensor_at(g, i);
            dcp_ggml_type want = table_type(rows, t->name, m);
            if (t->type != want)
                fail_msg("%s, %s: %s [%llu, ...] is %s, llama-quantize writes %s", label, dcp_ftype_name(mixes[m]),
                         t->name, (unsigned long long)t->ne[0], dcp_ggml_type_name(t->type), dcp_ggml_type_name(want));
            cells++;
        }
        dcp_gguf_close(g);
    }
    printf("%-24s %llu tensor types over %d file types agree with llama-quantize's table\n", label,
           (unsigned long long)cells, N_MIX);
    unlink(out);
}

static dcp_test_model_config llama_like(const char *arch)
{
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.arch = arch;
    mc.n_embd = 256; /* whole 256-blocks for most matrices, so that the mix rules show */
    mc.n_layer = 8;  /* more-bits layers 0, 3, 6, 7 */
    mc.n_head = 8;
    mc.n_head_kv = 2; /* 4 heads a KV head: Q2_K's attn_v rule */
    mc.head_dim = 32;
    mc.n_ff = 96;    /* ffn_down's rows of 96 are no whole 256-blocks: the fallbacks */
    mc.seed = 21;
    return mc;
}

static void test_llama_family(void **state)
{
    (void)state;
    static const struct { const char *label, *arch; int tied; const row *rows; } cases[] = {
        {"llama", "llama", 0, llama_rows},    {"llama, tied output", "llama", 1, llama_tied_rows},
        {"qwen2", "qwen2", 0, llama_rows},    {"qwen3", "qwen3", 0, llama_rows},
        {"phi3", "phi3", 0, phi3_rows},
    };
    char in[256];
    snprintf(in, sizeof in, "%s", tg_tmp_path("table-in.gguf"));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dcp_test_model_config mc = llama_like(cases[c].arch);
        mc.tie_output = cases[c].tied;
        DCP_ASSERT_OK(dcp_gguf_make_test_model(in, &mc));
        check_arch(cases[c].label, in, cases[c].rows);
    }
    unlink(in);
}

static void test_deepseek2(void **state)
{
    (void)state;
    char in[256];
    snprintf(in, sizeof in, "%s", tg_tmp_path("table-ds2.gguf"));
    for (char v = 'A'; v <= 'C'; v += 2) { /* A: attn_k_b / attn_v_b; C: the legacy attn_kv_b */
        dcp_test_deepseek2_config dc;
        DCP_ASSERT_OK(dcp_test_deepseek2_preset(v, &dc));
        dc.n_embd = 256;
        dc.head_dim_nope = 32;
        dc.head_dim_v = 64; /* attn_output of 4 x 64 = 256 columns */
        dc.n_ff = 256;
        dc.n_ff_exp = 256;
        DCP_ASSERT_OK(dcp_gguf_make_test_model_deepseek2(in, &dc));
        check_arch(v == 'A' ? "deepseek2 (A)" : "deepseek2 (C, attn_kv_b)", in, deepseek2_rows);
    }
    unlink(in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_family),
        cmocka_unit_test(test_deepseek2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
