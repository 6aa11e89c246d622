/* dcp-vk-gguf: inspect GGUF files (metadata, tensor directory, text or JSON), run their tokenizer
 * both ways, make the project's deterministic test models, and quantize files as llama-quantize
 * does (the same file type names and mixes). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model_config.h"
#include "dcpvk/tokenizer.h"
#include "dcpvk/utf8.h"
#include "testmodel/testmodel.h"

enum { ABBREV = 8 };

static void usage(FILE *f)
{
    dcp_cli_print_text(f,
            "usage: dcp-vk-gguf FILE [--json] [--full]\n"
            "       dcp-vk-gguf FILE --tokenize TEXT [--bos] [--special]\n"
            "       dcp-vk-gguf FILE --detokenize IDS [--special]\n"
            "       dcp-vk-gguf --make-model OUT.gguf [model options]\n"
            "       dcp-vk-gguf --quantize IN.gguf OUT.gguf --type T [--pure]\n"
            "                   [--split-max-size N[M|G]] [--split-max-tensors N]\n"
            "       dcp-vk-gguf --version | --help\n"
            "\n"
            "  FILE                print the metadata (arrays longer than %d elements abbreviated)\n"
            "                      and the tensor directory; of a split model (FILE its first part,\n"
            "                      NAME-00001-of-0000N.gguf) every part's\n"
            "  --json              print them as one JSON object instead\n"
            "  --full              print whole arrays (default: abbreviated)\n"
            "  --tokenize TEXT     print the token ids of TEXT on one line, space-separated\n"
            "  --bos               with --tokenize: prepend BOS (default: off)\n"
            "  --special           --tokenize: match control tokens like <s> in TEXT;\n"
            "                      --detokenize: show control tokens (default: off)\n"
            "  --detokenize IDS    print the text of IDS (space- or comma-separated)\n"
            "  --make-model OUT    write a deterministic test model (GGUF v3, built-in vocabulary)\n"
            "  --quantize IN OUT   convert IN (F32, F16, BF16 or quantized) to OUT with --type T, a\n"
            "                      llama-quantize file type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,\n"
            "                      q5_1, q2_k, q3_k_s, q3_k_m (= q3_k), q3_k_l, q4_k_s, q4_k_m (= q4_k),\n"
            "                      q5_k_s, q5_k_m (= q5_k), q6_k, iq4_nl, iq4_xs; its mix rules give\n"
            "                      output.weight Q6_K, some attn_v / ffn_down more bits, and\n"
            "                      tensors whose rows are not whole blocks a fallback type (see\n"
            "                      include/dcpvk/gguf.h); prints each tensor\n"
            "  --pure              with --quantize: no mix rules, every matrix in the base type\n"
            "                      (--type copy: every tensor keeps its type, to re-split a file)\n"
            "  --split-max-size N  with --quantize: write a split model as gguf-split does,\n"
            "                      OUT-00001-of-0000K.gguf, ... (OUT less .gguf), a new part when the\n"
            "                      next tensor would pass N bytes of tensor data (N, NM or NG: bytes,\n"
            "                      MiB or GiB; default: one file)\n"
            "  --split-max-tensors N  with --quantize: split, at most N tensors a part (default: none)\n"
            "  --force             with --make-model / --quantize: an OUT that is a symbolic link,\n"
            "                      device node, FIFO or socket is replaced by the new file (the entry\n"
            "                      itself; what it points to is never written). Without it such an\n"
            "                      OUT is refused. OUT is written to an exclusive temporary beside it\n"
            "                      and renamed over it when complete; a directory is always refused\n"
            "\n"
            "model options (with --make-model):\n"
            "  --arch NAME         llama, qwen2, qwen3, phi3 or deepseek2 (default llama)\n"
            "  --mla-config C      deepseek2: A (V2-Lite layout: attn_q, attn_k_b/attn_v_b, softmax\n"
            "                      gating), B (every feature: q_lora, YaRN, sigmoid gating with\n"
            "                      exp_probs_b, weight norm and scale, expert groups) or C (A in the\n"
            "                      legacy attn_kv_b layout, same weights) (default A). deepseek2 takes\n"
            "                      --name, --n-embd, --n-layer, --n-head, --n-ff (dense FFN), --n-ctx,\n"
            "                      --rms-eps, --rope-base, --type (f32, f16) and --seed; its other\n"
            "                      shapes come from the configuration\n"
            "  --name NAME         general.name (default dcp-vk-test)\n"
            "  --n-embd N          embedding size (default 256)\n"
            "  --n-layer N         layers (default 4)\n"
            "  --n-head N          query heads (default 16)\n"
            "  --n-head-kv N       KV heads, divides --n-head (default 8)\n"
            "  --head-dim N        head size, 0 = n-embd / n-head (default 16)\n"
            "  --n-ff N            FFN hidden size (default 768)\n"
            "  --n-ctx N           context length (default 4096)\n"
            "  --rms-eps X         RMS norm epsilon (default 1e-5)\n"
            "  --rope-base X       RoPE frequency base (default 10000)\n"
            "  --type T            matrix weight type, every matrix (f32, f16, bf16, q8_0, q4_0, q4_1,\n"
            "                      q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs; its block\n"
            "                      must divide the sizes), or a file type mix (q3_k_s/m/l, q4_k_s,\n"
            "                      q4_k_m, q5_k_s, q5_k_m: an F32 model quantized as --quantize does)\n"
            "                      (default f32)\n"
            "  --seed N            random seed (default 1234)\n"
            "  --rope-freqs        rope_freqs.weight, Llama 3.x-style factors (--arch llama only)\n"
            "  --rope-scaling none|linear|yarn, --rope-scale X (1..1024),\n"
            "  --sliding-window N, --tie-output (no output.weight): llama family extras\n"
            "\n"
            "Errors print a message on stderr; the exit status is 1 for a failure (unreadable file,\n"
            "bad tokenizer data, an OUT that may not be replaced, a failed write), 2 for a usage\n"
            "error. Sizes are decimal (010 is ten); a sign or anything else is refused.\n",
            ABBREV);
}

/* Prints "dcp-vk-gguf: <what>: <last error>" (what once: a message that already starts with it is
 * not prefixed again). */
static int die(const char *what)
{
    const char *err = dcp_last_error();
    size_t n = strlen(what);
    if (strncmp(err, what, n) == 0 && err[n] == ':') fprintf(stderr, "dcp-vk-gguf: %s\n", err);
    else fprintf(stderr, "dcp-vk-gguf: %s%s%s\n", what, err[0] ? ": " : "", err);
    return DCP_EXIT_RUNTIME;
}

static int bad_usage(const char *msg, const char *arg)
{
    fprintf(stderr, "dcp-vk-gguf: %s%s%s (see --help)\n", msg, arg ? " " : "", arg ? arg : "");
    return DCP_EXIT_USAGE;
}

/* ---- printing ------------------------------------------------------------------------------ */

/* Prints a string: JSON mode through dcp_cli_json_string (as every app's JSON); text mode quoted
 * with C escapes. Bytes that are not UTF-8 are shown as U+FFFD (include/dcpvk/utf8.h), so the output
 * is always valid UTF-8. */
static void put_str(const char *s, size_t n, bool json)
{
    if (json) {
        dcp_cli_json_string(stdout, s, n);
        return;
    }
    char small[256];
    char *u = DCP_UTF8_OUT_MAX(n) <= sizeof small ? small : malloc(DCP_UTF8_OUT_MAX(n));
    if (!u) {
        fputs("\"(out of memory)\"", stdout);
        return;
    }
    n = dcp_utf8_sanitize(s, n, u);
    putchar('"');
    for (size_t i = 0; i < n; ++i) {
        unsigned char c = (unsigned char)u[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (u != small) free(u);
}

static void put_float(double v, bool json)
{
    if (json && !isfinite(v)) fputs("null", stdout);
    else printf("%.9g", v);
}

static void put_scalar(const dcp_gguf_kv *kv, bool json)
{
    switch (kv->type) {
    case DCP_GGUF_TYPE_UINT8:
    case DCP_GGUF_TYPE_UINT16:
    case DCP_GGUF_TYPE_UINT32:
    case DCP_GGUF_TYPE_UINT64: printf("%llu", (unsigned long long)kv->v.u64); break;
    case DCP_GGUF_TYPE_INT8:
    case DCP_GGUF_TYPE_INT16:
    case DCP_GGUF_TYPE_INT32:
    case DCP_GGUF_TYPE_INT64: printf("%lld", (long long)kv->v.i64); break;
    case DCP_GGUF_TYPE_FLOAT32:
    case DCP_GGUF_TYPE_FLOAT64: put_float(kv->v.f64, json); break;
    case DCP_GGUF_TYPE_BOOL: fputs(kv->v.b ? "true" : "false", stdout); break;
    case DCP_GGUF_TYPE_STRING: put_str(kv->str, (size_t)kv->str_len, json); break;
    default: fputs("?", stdout); break;
    }
}

static void put_elem(const dcp_gguf_kv *kv, uint64_t i, bool json)
{
    const char *s;
    size_t n;
    uint64_t u;
    int64_t v;
    double f;
    switch (kv->array_type) {
    case DCP_GGUF_TYPE_STRING:
        if (dcp_gguf_array_string(kv, i, &s, &n) == DCP_OK) put_str(s, n, json);
        break;
    case DCP_GGUF_TYPE_FLOAT32:
    case DCP_GGUF_TYPE_FLOAT64:
        if (dcp_gguf_array_float(kv, i, &f) == DCP_OK) put_float(f, json);
        break;
    case DCP_GGUF_TYPE_BOOL:
        if (dcp_gguf_array_uint(kv, i, &u) == DCP_OK) fputs(u ? "true" : "false", stdout);
        break;
    case DCP_GGUF_TYPE_UINT8:
    case DCP_GGUF_TYPE_UINT16:
    case DCP_GGUF_TYPE_UINT32:
    case DCP_GGUF_TYPE_UINT64:
        if (dcp_gguf_array_uint(kv, i, &u) == DCP_OK) printf("%llu", (unsigned long long)u);
        break;
    default:
        if (dcp_gguf_array_int(kv, i, &v) == DCP_OK) printf("%lld", (long long)v);
        break;
    }
}

static void put_array(const dcp_gguf_kv *kv, bool json, bool full)
{
    uint64_t n = kv->array_len, shown = full || n <= 2 * ABBREV ? n : ABBREV;
    if (json && shown < n)
        printf("{\"array_type\": \"%s\", \"length\": %llu, \"first\": ", dcp_gguf_type_name(kv->array_type),
               (unsigned long long)n);
    putchar('[');
    for (uint64_t i = 0; i < shown; ++i) {
        if (i) fputs(", ", stdout);
        put_elem(kv, i, json);
    }
    if (shown < n) fputs(json ? "]}" : ", ...]", stdout);
    else putchar(']');
}

static void put_shape(const dcp_gguf_tensor *t)
{
    putchar('[');
    for (uint32_t d = 0; d < t->n_dims; ++d) printf("%s%llu", d ? ", " : "", (unsigned long long)t->ne[d]);
    putchar(']');
}

/* One file's header, metadata and tensor directory. */
static void print_file_text(const dcp_gguf *g, bool full)
{
    printf("file: %s\n", dcp_gguf_name(g));
    printf("GGUF version %u, %llu bytes, alignment %llu, tensor data at offset %llu\n",
           dcp_gguf_version(g), (unsigned long long)dcp_gguf_file_size(g),
           (unsigned long long)dcp_gguf_alignment(g), (unsigned long long)dcp_gguf_data_offset(g));
    printf("\nmetadata (%llu keys):\n", (unsigned long long)dcp_gguf_kv_count(g));
    for (uint64_t i = 0; i < dcp_gguf_kv_count(g); ++i) {
        const dcp_gguf_kv *kv = dcp_gguf_kv_at(g, i);
        if (kv->type == DCP_GGUF_TYPE_ARRAY) {
            printf("  %-40s array[%s; %llu] = ", kv->key, dcp_gguf_type_name(kv->array_type),
                   (unsigned long long)kv->array_len);
            put_array(kv, false, full);
        } else {
            printf("  %-40s %-7s = ", kv->key, dcp_gguf_type_name(kv->type));
            put_scalar(kv, false);
        }
        putchar('\n');
    }
    printf("\ntensors (%llu):\n", (unsigned long long)dcp_gguf_tensor_count(g));
    if (dcp_gguf_tensor_count(g))
        printf("  %5s  %-32s %-6s %-24s %12s %12s\n", "#", "name", "type", "shape (ne)", "offset", "bytes");
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); ++i) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(g, i);
        char shape[96];
        int k = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims && k < (int)sizeof shape; ++d)
            k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%llu", d ? ", " : "", (unsigned long long)t->ne[d]);
        if (k < (int)sizeof shape) snprintf(shape + k, sizeof shape - (size_t)k, "]");
        printf("  %5llu  %-32s %-6s %-24s %12llu %12llu%s\n", (unsigned long long)i, t->name,
               dcp_ggml_type_name(t->type), shape, (unsigned long long)t->offset,
               (unsigned long long)t->size, dcp_ggml_type_supported(t->type) ? "" : "  (unsupported type)");
    }
}

static void print_text(const dcp_gguf *g, bool full)
{
    const uint32_t parts = dcp_gguf_part_count(g);
    if (parts == 1) print_file_text(g, full);
    else {
        printf("split model: %u parts, %llu tensors, %llu bytes\n", parts,
               (unsigned long long)dcp_gguf_tensor_count(g), (unsigned long long)dcp_gguf_file_size(g));
        for (uint32_t k = 0; k < parts; k++) {
            printf("\n== part %u of %u ==\n", k + 1, parts);
            print_file_text(dcp_gguf_part(g, k), full);
        }
    }
    dcp_model_config mc;
    if (dcp_gguf_kv_find(g, "general.architecture") && dcp_gguf_tensor_count(g)) {
        if (dcp_model_config_read(g, &mc) == DCP_OK) {
            printf("\nhyperparameters: arch %s, n_embd %u, n_layer %u, n_head %u, n_head_kv %u, "
                   "head_dim %u, n_ff %u, n_ctx_train %u, n_vocab %u, n_rot %u, rms_eps %g, "
                   "rope_freq_base %g\n", mc.arch_name, mc.n_embd, mc.n_layer, mc.n_head,
                   mc.n_head_kv, mc.head_dim, mc.n_ff, mc.n_ctx_train, mc.n_vocab, mc.n_rot,
                   (double)mc.rms_eps, (double)mc.rope_freq_base);
            if (mc.arch == DCP_ARCH_DEEPSEEK2)
                printf("MLA: %s layout, q_lora %u, kv_lora %u, rope %u, nope %u, v %u, attention scale %g, rope "
                   "scaling %s (factor %g, original context %u, log multiplier %g, beta %g/%g, magnitude %g)\n"
                   "MoE: %u dense leading layers (FFN %u), %u experts of %u (%u used, %u shared), gating %s, "
                   "weights %s x %g, groups %u (%u used)\n",
                   mc.mla_layout ? "attn_k_b/attn_v_b" : "legacy attn_kv_b", mc.q_lora_rank, mc.kv_lora_rank,
                   mc.n_rot, mc.head_dim_nope, mc.head_dim_v_mla, (double)mc.attn_scale,
                   mc.rope_scaling == DCP_ROPE_SCALING_YARN ? "yarn" : "none", (double)mc.rope_scaling_factor,
                   mc.rope_n_ctx_orig, (double)mc.rope_yarn_log_mul, (double)mc.rope_yarn_beta_fast,
                   (double)mc.rope_yarn_beta_slow, (double)mc.rope_attn_factor, mc.n_layer_dense_lead, mc.n_ff,
                   mc.n_expert, mc.n_ff_exp, mc.n_expert_used, mc.n_expert_shared,
                   mc.expert_gating == DCP_EXPERT_GATING_SIGMOID ? "sigmoid" : "softmax",
                   mc.expert_weights_norm ? "normalised" : "unnormalised", (double)mc.expert_weights_scale,
                   mc.n_expert_groups, mc.n_expert_groups_used);
            else {
                static const char *const scaling[] = {"none", "linear", "yarn"};
                printf("llama family: RoPE %s pairs, scaling %s x %g%s, sliding window %u%s\n",
                       mc.rope_neox ? "NEOX (i, i + n_rot/2)" : "NORM (2i, 2i+1)",
                       (unsigned)mc.rope_scaling < 3 ? scaling[mc.rope_scaling] : "?", (double)mc.rope_scaling_factor,
                       dcp_gguf_tensor_find(g, "rope_freqs.weight") ? ", rope_freqs.weight factors" : "",
                       mc.sliding_window, mc.sliding_window ? " tokens" : " (none)");
            }
        } else
            printf("\nhyperparameters: not read (%s)\n", dcp_last_error());
    }
}

/* One file as a JSON object (no newline after it). */
static void print_file_json(const dcp_gguf *g, bool full)
{
    printf("{\"file\": ");
    put_str(dcp_gguf_name(g), strlen(dcp_gguf_name(g)), true);
    printf(", \"version\": %u, \"size\": %llu, \"alignment\": %llu, \"data_offset\": %llu,\n",
           dcp_gguf_version(g), (unsigned long long)dcp_gguf_file_size(g),
           (unsigned long long)dcp_gguf_alignment(g), (unsigned long long)dcp_gguf_data_offset(g));
    printf(" \"metadata\": {");
    for (uint64_t i = 0; i < dcp_gguf_kv_count(g); ++i) {
        const dcp_gguf_kv *kv = dcp_gguf_kv_at(g, i);
        printf("%s\n  ", i ? "," : "");
        put_str(kv->key, strlen(kv->key), true);
        printf(": {\"type\": \"%s\", \"value\": ", dcp_gguf_type_name(kv->type));
        if (kv->type == DCP_GGUF_TYPE_ARRAY) put_array(kv, true, full);
        else put_scalar(kv, true);
        putchar('}');
    }
    printf("\n },\n \"tensors\": [");
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); ++i) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(g, i);
        printf("%s\n  {\"name\": ", i ? "," : "");
        put_str(t->name, strlen(t->name), true);
        printf(", \"type\": \"%s\", \"shape\": ", dcp_ggml_type_name(t->type));
        put_shape(t);
        printf(", \"offset\": %llu, \"size\": %llu}", (unsigned long long)t->offset, (unsigned long long)t->size);
    }
    printf("\n ]\n}");
}

/* A single file: its object; a split model: {"file": first part, "split_count": N, "size": all
 * parts' bytes, "tensor_count": T, "parts": [each part's object]}. */
static void print_json(const dcp_gguf *g, bool full)
{
    const uint32_t parts = dcp_gguf_part_count(g);
    if (parts == 1) {
        print_file_json(g, full);
        putchar('\n');
        return;
    }
    printf("{\"file\": ");
    put_str(dcp_gguf_name(g), strlen(dcp_gguf_name(g)), true);
    printf(", \"split_count\": %u, \"size\": %llu, \"tensor_count\": %llu, \"parts\": [\n", parts,
           (unsigned long long)dcp_gguf_file_size(g), (unsigned long long)dcp_gguf_tensor_count(g));
    for (uint32_t k = 0; k < parts; k++) {
        if (k) printf(",\n");
        print_file_json(dcp_gguf_part(g, k), full);
    }
    printf("\n]}\n");
}

/* ---- commands ------------------------------------------------------------------------------ */

static int tokenize(const dcp_gguf *g, const char *text, bool bos, bool special)
{
    dcp_tokenizer *t;
    int32_t *ids;
    size_t n;
    if (dcp_tokenizer_create(g, &t) != DCP_OK) return die("cannot load the tokenizer");
    unsigned flags = (bos ? DCP_TOKENIZE_ADD_BOS : 0) | (special ? DCP_TOKENIZE_PARSE_SPECIAL : 0);
    if (dcp_tokenizer_encode(t, text, strlen(text), flags, &ids, &n) != DCP_OK) {
        dcp_tokenizer_destroy(t);
        return die("tokenize");
    }
    for (size_t i = 0; i < n; ++i) printf("%s%d", i ? " " : "", (int)ids[i]);
    putchar('\n');
    free(ids);
    dcp_tokenizer_destroy(t);
    return DCP_EXIT_OK;
}

static int detokenize(const dcp_gguf *g, const char *list, bool special)
{
    dcp_tokenizer *t;
    dcp_detokenizer *d;
    const char *piece;
    size_t len;
    int rc = DCP_EXIT_OK;
    if (dcp_tokenizer_create(g, &t) != DCP_OK) return die("cannot load the tokenizer");
    if (dcp_detokenizer_create(t, special ? DCP_DECODE_SPECIAL : 0, &d) != DCP_OK) {
        dcp_tokenizer_destroy(t);
        return die("detokenize");
    }
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') ++p;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < -2147483647L || v > 2147483647L) {
            fflush(stdout);
            rc = bad_usage("--detokenize: not a token id:", p);
            goto out;
        }
        p = end;
        if (dcp_detokenizer_push(d, (int32_t)v, &piece, &len) != DCP_OK) {
            fflush(stdout);
            rc = die("detokenize");
            goto out;
        }
        fwrite(piece, 1, len, stdout);
    }
    if (dcp_detokenizer_flush(d, &piece, &len) == DCP_OK) fwrite(piece, 1, len, stdout);
    putchar('\n');
out:
    dcp_detokenizer_destroy(d);
    dcp_tokenizer_destroy(t);
    return rc;
}

static void quantize_report(void *user, const dcp_gguf_tensor *t, dcp_ggml_type to, int fell_back, uint32_t part)
{
    uint32_t *parts = user;
    if (part + 1 > *parts) *parts = part + 1;
    char shape[64];
    int k = snprintf(shape, sizeof shape, "[");
    for (uint32_t d = 0; d < t->n_dims && k < (int)sizeof shape; ++d)
        k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%llu", d ? ", " : "", (unsigned long long)t->ne[d]);
    if (k < (int)sizeof shape) snprintf(shape + k, sizeof shape - (size_t)k, "]");
    printf("  %-32s %-16s %-6s -> %-6s%s", t->name, shape, dcp_ggml_type_name(t->type), dcp_ggml_type_name(to),
           fell_back ? "  (fallback: rows are not whole blocks of the mix's type)" : "");
    if (part) printf("  (part %u)", part + 1);
    putchar('\n');
}

static int quantize(const char *in, const char *out, const dcp_quantize_config *qc)
{
    const bool split = qc->split_max_bytes || qc->split_max_tensors;
    printf("quantizing %s to %s as %s%s%s\n", in, out, qc->copy ? "copy" : dcp_ftype_name(qc->ftype),
           qc->pure ? " (pure)" : "", split ? " (split)" : "");
    uint32_t parts = 0;
    if (dcp_gguf_quantize(in, out, qc, quantize_report, &parts) != DCP_OK) {
        fflush(stdout);
        return die("--quantize");
    }
    char *first = NULL;
    if (split) { /* read back from the first part */
        size_t len = strlen(out);
        if (len > 5 && !strcmp(out + len - 5, ".gguf")) len -= 5;
        char *prefix = strndup(out, len);
        int need = prefix ? dcp_gguf_split_path(NULL, 0, prefix, 0, parts ? parts : 1) : -1;
        first = need > 0 ? malloc((size_t)need + 1) : NULL;
        if (first) dcp_gguf_split_path(first, (size_t)need + 1, prefix, 0, parts ? parts : 1);
        free(prefix);
        if (!first) return die("--quantize: out of memory");
    }
    dcp_gguf *g;
    if (dcp_gguf_open(first ? first : out, &g) != DCP_OK) {
        free(first);
        return die("--quantize: reading the output back");
    }
    uint64_t weights = 0, bytes = 0;
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); ++i) {
        weights += dcp_gguf_tensor_at(g, i)->n_elements;
        bytes += dcp_gguf_tensor_at(g, i)->size;
    }
    for (uint32_t k = 0; split && k < dcp_gguf_part_count(g); k++) {
        const dcp_gguf *p = dcp_gguf_part(g, k);
        printf("wrote part %u of %u, %s: %llu bytes, %llu tensors\n", k + 1, dcp_gguf_part_count(g), dcp_gguf_name(p),
               (unsigned long long)dcp_gguf_file_size(p), (unsigned long long)dcp_gguf_tensor_count(p));
    }
    printf("wrote %s: %llu bytes, %.3f bits per weight over %llu tensors\n", first ? first : out,
           (unsigned long long)dcp_gguf_file_size(g), weights ? 8.0 * (double)bytes / (double)weights : 0.0,
           (unsigned long long)dcp_gguf_tensor_count(g));
    dcp_gguf_close(g);
    free(first);
    return 0;
}

/* N, NM or NG (bytes, MiB, GiB), > 0. */
static bool parse_size(const char *v, uint64_t *out)
{
    size_t n = strlen(v);
    uint64_t mul = 1;
    if (n && (v[n - 1] == 'M' || v[n - 1] == 'G')) {
        mul = v[n - 1] == 'M' ? 1ull << 20 : 1ull << 30;
        n--;
    }
    char num[32];
    if (n == 0 || n >= sizeof num) return false;
    memcpy(num, v, n);
    num[n] = '\0';
    uint64_t x;
    if (!dcp_cli_parse_u64(num, &x) || x == 0 || x > UINT64_MAX / mul) return false;
    *out = x * mul;
    return true;
}

/* --make-model with a file type mix: an F32 model in an exclusive temporary beside OUT, quantized
 * into OUT, then removed. */
static int make_mixed(const char *out, dcp_test_model_config *mc, dcp_ftype ftype, unsigned flags)
{
    size_t n = strlen(out);
    char *tmp = malloc(n + 12);
    if (!tmp) return die("--make-model: out of memory");
    memcpy(tmp, out, n);
    memcpy(tmp + n, ".f32.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr, "dcp-vk-gguf: --make-model: cannot create a temporary beside %s: %s\n", out, strerror(errno));
        free(tmp);
        return 1;
    }
    close(fd);
    mc->weight_type = DCP_GGML_TYPE_F32;
    int rc = 0;
    if (dcp_gguf_make_test_model(tmp, mc) != DCP_OK) rc = die("--make-model");
    else {
        dcp_quantize_config qc = DCP_QUANTIZE_CONFIG_DEFAULT;
        qc.ftype = ftype;
        qc.write_flags = flags;
        if (dcp_gguf_quantize(tmp, out, &qc, NULL, NULL) != DCP_OK) rc = die("--make-model");
    }
    unlink(tmp);
    free(tmp);
    return rc;
}

/* --make-model with one weight type: built in memory, written safely (dcp_gguf_writer_write_to). */
static int make_plain(const char *out, const dcp_test_model_config *mc, unsigned flags)
{
    dcp_gguf_writer *w = NULL;
    dcp_status st = dcp_gguf_build_test_model(mc, &w);
    if (st == DCP_OK) st = dcp_gguf_writer_write_to(w, out, flags);
    dcp_gguf_writer_destroy(w);
    if (st == DCP_OK) return DCP_EXIT_OK;
    int rc = die("--make-model");
    return st == DCP_ERR_INVALID_ARGUMENT ? DCP_EXIT_USAGE : rc; /* sizes that do not fit together */
}

static int run(int argc, char **argv)
{
    const char *file = NULL, *tok_text = NULL, *detok = NULL, *make = NULL, *q_in = NULL, *q_out = NULL;
    const char *type_name = NULL;
    bool json = false, full = false, bos = false, special = false, pure = false;
    uint64_t split_bytes = 0;
    uint32_t split_tensors = 0;
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    bool model_opt = false, force = false;
    const char *prog = "dcp-vk-gguf";
    const char *mla_config = NULL;
    /* Options given, for deepseek2 (which takes a subset of them over its configuration). */
    enum { G_NAME = 1, G_EMBD = 2, G_LAYER = 4, G_HEAD = 8, G_FF = 16, G_CTX = 32, G_EPS = 64, G_ROPE = 128,
           G_TYPE = 256, G_SEED = 512, G_LLAMA_ONLY = 1024 };
    unsigned given = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
#define NEEDS_VALUE                                                                                 \
    do {                                                                                           \
        if (!v) return bad_usage("missing value for", a);                                          \
        ++i;                                                                                       \
    } while (0)
#define U32(field) dcp_cli_u32(prog, a, v, 0, UINT32_MAX, field)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return DCP_EXIT_OK;
        } else if (!strcmp(a, "--version")) {
            dcp_cli_print_version("dcp-vk-gguf");
            return DCP_EXIT_OK;
        } else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--full")) full = true;
        else if (!strcmp(a, "--bos")) bos = true;
        else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "--tokenize")) { NEEDS_VALUE; tok_text = v; }
        else if (!strcmp(a, "--detokenize")) { NEEDS_VALUE; detok = v; }
        else if (!strcmp(a, "--make-model")) { NEEDS_VALUE; make = v; }
        else if (!strcmp(a, "--quantize")) {
            if (i + 2 >= argc) return bad_usage("--quantize needs IN and OUT", NULL);
            q_in = argv[++i];
            q_out = argv[++i];
        } else if (!strcmp(a, "--pure")) pure = true;
        else if (!strcmp(a, "--split-max-size")) {
            NEEDS_VALUE;
            if (!parse_size(v, &split_bytes))
                return bad_usage("--split-max-size: not a size (N, NM or NG: bytes, MiB, GiB, N > 0):", v);
        } else if (!strcmp(a, "--split-max-tensors")) {
            NEEDS_VALUE;
            ok = dcp_cli_u32(prog, a, v, 1, UINT32_MAX, &split_tensors);
        }
        else if (!strcmp(a, "--arch")) { NEEDS_VALUE; mc.arch = v; model_opt = true; }
        else if (!strcmp(a, "--name")) { NEEDS_VALUE; mc.name = v; model_opt = true; given |= G_NAME; }
        else if (!strcmp(a, "--n-embd")) { NEEDS_VALUE; ok = U32(&mc.n_embd); model_opt = true; given |= G_EMBD; }
        else if (!strcmp(a, "--n-layer")) { NEEDS_VALUE; ok = U32(&mc.n_layer); model_opt = true; given |= G_LAYER; }
        else if (!strcmp(a, "--n-head")) { NEEDS_VALUE; ok = U32(&mc.n_head); model_opt = true; given |= G_HEAD; }
        else if (!strcmp(a, "--n-head-kv")) { NEEDS_VALUE; ok = U32(&mc.n_head_kv); model_opt = true; given |= G_LLAMA_ONLY; }
        else if (!strcmp(a, "--head-dim")) { NEEDS_VALUE; ok = U32(&mc.head_dim); model_opt = true; given |= G_LLAMA_ONLY; }
        else if (!strcmp(a, "--n-ff")) { NEEDS_VALUE; ok = U32(&mc.n_ff); model_opt = true; given |= G_FF; }
        else if (!strcmp(a, "--n-ctx")) { NEEDS_VALUE; ok = U32(&mc.n_ctx); model_opt = true; given |= G_CTX; }
        else if (!strcmp(a, "--seed")) { NEEDS_VALUE; ok = dcp_cli_u64(prog, a, v, 0, UINT64_MAX, &mc.seed); model_opt = true; given |= G_SEED; }
        else if (!strcmp(a, "--tie-output")) { mc.tie_output = 1; model_opt = true; given |= G_LLAMA_ONLY; }
        else if (!strcmp(a, "--rope-freqs")) { mc.rope_freqs = 1; model_opt = true; given |= G_LLAMA_ONLY; }
        else if (!strcmp(a, "--rope-scaling")) {
            NEEDS_VALUE;
            if (strcmp(v, "none") && strcmp(v, "linear") && strcmp(v, "yarn"))
                return bad_usage("--rope-scaling: not one of none, linear, yarn:", v);
            mc.rope_scaling = v;
            model_opt = true;
            given |= G_LLAMA_ONLY;
        } else if (!strcmp(a, "--rope-scale")) {
            NEEDS_VALUE;
            ok = dcp_cli_f32(prog, a, v, 1.0f, 1024.0f, &mc.rope_scale);
            model_opt = true;
            given |= G_LLAMA_ONLY;
        } else if (!strcmp(a, "--sliding-window")) {
            NEEDS_VALUE;
            ok = dcp_cli_u32(prog, a, v, 1, UINT32_MAX, &mc.sliding_window);
            model_opt = true;
            given |= G_LLAMA_ONLY;
        }
        else if (!strcmp(a, "--rms-eps") || !strcmp(a, "--rope-base")) {
            NEEDS_VALUE;
            float x = 0;
            /* positive and finite as a float */
            ok = dcp_cli_f32(prog, a, v, 1e-38f, 3e38f, &x);
            if (!strcmp(a, "--rms-eps")) mc.rms_eps = x, given |= G_EPS;
            else mc.rope_base = x, given |= G_ROPE;
            model_opt = true;
        } else if (!strcmp(a, "--force")) force = true;
        else if (!strcmp(a, "--type")) {
            NEEDS_VALUE;
            type_name = v;
            given |= G_TYPE;
        } else if (!strcmp(a, "--mla-config")) {
            NEEDS_VALUE;
            mla_config = v;
            ok = strlen(v) == 1 && strchr("ABCabc", v[0]) != NULL;
            model_opt = true;
        } else if (a[0] == '-' && a[1]) return bad_usage("unknown option", a);
        else if (!file) file = a;
        else return bad_usage("more than one FILE:", a);
        if (!ok) return DCP_EXIT_USAGE; /* the parser said why */
#undef NEEDS_VALUE
#undef U32
    }

    if (q_in) {
        if (make || file || tok_text || detok || json || model_opt)
            return bad_usage("--quantize takes only --type, --pure, --split-max-size, --split-max-tensors and --force",
                             NULL);
        if (!type_name) return bad_usage("--quantize needs --type T", NULL);
        dcp_quantize_config qc = DCP_QUANTIZE_CONFIG_DEFAULT;
        if (!strcasecmp(type_name, "copy")) {
            if (pure) return bad_usage("--pure does not apply to --type copy", NULL);
            qc.copy = true;
        } else if (dcp_ftype_from_name(type_name, &qc.ftype) != DCP_OK)
            return bad_usage(dcp_last_error(), "(or copy)");
        qc.pure = pure;
        qc.write_flags = force ? DCP_GGUF_WRITE_REPLACE : 0;
        qc.split_max_bytes = split_bytes;
        qc.split_max_tensors = split_tensors;
        return quantize(q_in, q_out, &qc);
    }
    if (pure) return bad_usage("--pure needs --quantize", NULL);
    if (split_bytes || split_tensors) return bad_usage("--split-max-size / --split-max-tensors need --quantize", NULL);
    if (force && !make) return bad_usage("--force needs --make-model or --quantize", NULL);
    if (make) {
        if (file || tok_text || detok || json) return bad_usage("--make-model takes no FILE, --tokenize, --detokenize or --json", NULL);
        if (mc.arch && !strcmp(mc.arch, "deepseek2")) {
            dcp_test_deepseek2_config dc;
            if (given & G_LLAMA_ONLY)
                return bad_usage("--n-head-kv, --head-dim, --rope-freqs, --rope-scaling, --rope-scale, "
                                 "--sliding-window and --tie-output do not apply to deepseek2 (see --mla-config)", NULL);
            if (dcp_test_deepseek2_preset(mla_config ? mla_config[0] : 'A', &dc) != DCP_OK) return die("--mla-config");
            if (given & G_NAME) dc.name = mc.name;
            if (given & G_EMBD) dc.n_embd = mc.n_embd;
            if (given & G_LAYER) {
                dc.n_layer = mc.n_layer;
                if (dc.n_layer_dense > dc.n_layer) dc.n_layer_dense = dc.n_layer;
            }
            if (given & G_HEAD) dc.n_head = mc.n_head;
            if (given & G_FF) dc.n_ff = mc.n_ff;
            if (given & G_CTX) dc.n_ctx = mc.n_ctx;
            if (given & G_EPS) dc.rms_eps = mc.rms_eps;
            if (given & G_ROPE) dc.rope_base = mc.rope_base;
            if ((given & G_TYPE) && dcp_ggml_type_from_name(type_name, &dc.weight_type) != DCP_OK)
                return bad_usage("--type: not a tensor type:", type_name);
            if (given & G_SEED) dc.seed = mc.seed;
            dcp_gguf_writer *w = NULL;
            dcp_status st = dcp_gguf_build_test_model_deepseek2(&dc, &w);
            if (st == DCP_OK) st = dcp_gguf_writer_write_to(w, make, force ? DCP_GGUF_WRITE_REPLACE : 0);
            dcp_gguf_writer_destroy(w);
            if (st != DCP_OK) return die("--make-model");
            printf("wrote %s\n", make);
            return DCP_EXIT_OK;
        }
        if (mla_config) return bad_usage("--mla-config needs --arch deepseek2", NULL);
        if (mc.rope_freqs && strcmp(mc.arch, "llama"))
            return bad_usage("--rope-freqs applies to --arch llama only (qwen2, qwen3 and phi3 files have no "
                             "rope_freqs.weight; llama.cpp refuses one); got --arch", mc.arch);
        if (mc.rope_scaling && strcmp(mc.rope_scaling, "none") && mc.rope_scale == 0.0f)
            return bad_usage("--rope-scaling linear / yarn needs --rope-scale X", NULL);
        dcp_ftype mix = DCP_FTYPE_F32;
        if (type_name && dcp_ggml_type_from_name(type_name, &mc.weight_type) != DCP_OK) {
            if (dcp_ftype_from_name(type_name, &mix) != DCP_OK)
                return bad_usage("--type: not a tensor type or file type:", type_name);
            if (make_mixed(make, &mc, mix, force ? DCP_GGUF_WRITE_REPLACE : 0)) return DCP_EXIT_RUNTIME;
        } else {
            int rc = make_plain(make, &mc, force ? DCP_GGUF_WRITE_REPLACE : 0);
            if (rc) return rc;
        }
        printf("wrote %s\n", make);
        return DCP_EXIT_OK;
    }
    if (type_name) model_opt = true;
    if (model_opt) return bad_usage("model options need --make-model", NULL);
    if (!file) return bad_usage("no FILE given", NULL);
    if (tok_text && detok) return bad_usage("--tokenize and --detokenize exclude each other", NULL);

    dcp_gguf *g;
    if (dcp_gguf_open(file, &g) != DCP_OK) return die("cannot read GGUF file");
    int rc = DCP_EXIT_OK;
    if (tok_text) rc = tokenize(g, tok_text, bos, special);
    else if (detok) rc = detokenize(g, detok, special);
    else if (json) print_json(g, full);
    else print_text(g, full);
    dcp_gguf_close(g);
    return rc;
}

int main(int argc, char **argv)
{
    dcp_set_log_callback(dcp_cli_log_stderr, NULL);
    return dcp_cli_finish_stdout("dcp-vk-gguf", run(argc, argv));
}
