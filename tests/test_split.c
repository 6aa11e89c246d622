/* Split GGUF models (llama.cpp's gguf-split layout: NAME-00001-of-00003.gguf ..., keys split.no,
 * split.count, split.tensors.count): written by dcp_gguf_quantize with a split limit, opened from
 * the first part (the others found by name), refused naming the file and what did not match (a
 * missing part, parts reordered, a part of another model, a tensor in two parts, a wrong total, a
 * part other than the first, a first part not named -00001-of-N); a generated model split in
 * three parts gives the same logits (bitwise) and greedy tokens as the one file at TP 1 and at
 * TP 8 / DCP 2 on logical devices; each rank reads only its own slices of the mapped files
 * (dcp_model_file_bytes) and the progress count ends exactly at the total it announced. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "ref_model.h"
#include "test_gguf_util.h"
#include "testmodel/testmodel.h"
#include "vkutil.h"

enum { PREFILL = 5, STEPS = 6, N_CTX = 64 };

static dcp_test_model_config small_model(uint32_t n_layer, uint64_t seed)
{
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.n_embd = 64;
    mc.n_layer = n_layer;
    mc.n_head = 8;
    mc.n_head_kv = 4;
    mc.head_dim = 16;
    mc.n_ff = 256;                      /* TP 8: 32 FFN columns a rank, whole Q8_0 blocks */
    mc.weight_type = DCP_GGML_TYPE_Q8_0; /* attn_output's 16 columns a rank cut its blocks */
    mc.seed = seed;
    return mc;
}

/* Writes a test model to `path` and splits it into `parts` parts of about equal tensor counts
 * under prefix (dcp_gguf_quantize, --type copy). Returns the tensor count. */
static uint64_t make_split(const dcp_test_model_config *mc, const char *path, const char *prefix, uint32_t parts)
{
    DCP_ASSERT_OK(dcp_gguf_make_test_model(path, mc));
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open(path, &g));
    uint64_t n = dcp_gguf_tensor_count(g);
    dcp_gguf_close(g);
    dcp_quantize_config qc = DCP_QUANTIZE_CONFIG_DEFAULT;
    qc.copy = true;
    qc.split_max_tensors = (uint32_t)((n + parts - 1) / parts);
    DCP_ASSERT_OK(dcp_gguf_quantize(path, prefix, &qc, NULL, NULL));
    return n;
}

static const char *part_path(const char *prefix, uint32_t part, uint32_t count)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    dcp_gguf_split_path(buf[k], sizeof buf[k], prefix, part, count);
    return buf[k];
}

static void remove_parts(const char *prefix, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++) unlink(part_path(prefix, i, count));
}

/* The open must fail with st, the message naming every string of want (NULL-terminated). */
static void expect_refused(const char *path, dcp_status st, const char *const *want)
{
    dcp_gguf *g = NULL;
    dcp_status got = dcp_gguf_open(path, &g);
    if (got != st) fail_msg("opening %s: status %s, want %s (%s)", path, dcp_status_string(got), dcp_status_string(st),
                            dcp_last_error());
    assert_null(g);
    for (int i = 0; want[i]; i++)
        if (!strstr(dcp_last_error(), want[i])) fail_msg("message \"%s\" does not name \"%s\"", dcp_last_error(), want[i]);
    printf("refused as expected: %s\n", dcp_last_error());
}

/* The three parts hold every tensor byte for byte, the first part's keys are the model's, and
 * each part can be looked at on its own. */
static void test_split_reader(void **state)
{
    (void)state;
    const char *one = "split_one.gguf";
    char prefix[64];
    snprintf(prefix, sizeof prefix, "split_%ld", (long)getpid());
    dcp_test_model_config mc = small_model(3, 77);
    uint64_t n = make_split(&mc, one, prefix, 3);
    dcp_gguf *a, *b;
    DCP_ASSERT_OK(dcp_gguf_open(one, &a));
    DCP_ASSERT_OK(dcp_gguf_open(part_path(prefix, 0, 3), &b));
    assert_int_equal(dcp_gguf_part_count(a), 1);
    assert_ptr_equal(dcp_gguf_part(a, 0), a);
    assert_int_equal(dcp_gguf_part_count(b), 3);
    assert_null(dcp_gguf_part(b, 3));
    assert_int_equal(dcp_gguf_tensor_count(b), n);
    uint64_t sum = 0, sizes = 0;
    for (uint32_t k = 0; k < 3; k++) {
        const dcp_gguf *p = dcp_gguf_part(b, k);
        assert_string_equal(dcp_gguf_name(p), part_path(prefix, k, 3));
        uint64_t no, count;
        int64_t total;
        DCP_ASSERT_OK(dcp_gguf_get_uint(p, "split.no", &no));
        DCP_ASSERT_OK(dcp_gguf_get_uint(p, "split.count", &count));
        DCP_ASSERT_OK(dcp_gguf_get_int(p, "split.tensors.count", &total));
        assert_int_equal(no, k);
        assert_int_equal(count, 3);
        assert_int_equal(total, (int64_t)n);
        assert_int_equal(dcp_gguf_kv_find(p, "split.no")->type, DCP_GGUF_TYPE_UINT16);
        assert_int_equal(dcp_gguf_kv_find(p, "split.tensors.count")->type, DCP_GGUF_TYPE_INT32);
        if (k) assert_int_equal(dcp_gguf_kv_count(p), 3); /* only the split keys after the first */
        assert_true(dcp_gguf_tensor_count(p) >= 1);
        sum += dcp_gguf_tensor_count(p);
        sizes += dcp_gguf_file_size(p);
    }
    assert_int_equal(sum, n);
    assert_int_equal(dcp_gguf_file_size(b), sizes);
    for (uint64_t i = 0; i < n; i++) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(a, i), *u = dcp_gguf_tensor_find(b, t->name);
        assert_non_null(u);
        assert_int_equal(u->type, t->type);
        assert_int_equal(u->size, t->size);
        assert_memory_equal(u->data, t->data, t->size);
        assert_non_null(dcp_gguf_tensor_find(dcp_gguf_part(b, u->part), t->name));
    }
    /* The model's keys: the first part's, the same values as the one file's. */
    for (uint64_t i = 0; i < dcp_gguf_kv_count(a); i++) {
        const dcp_gguf_kv *kv = dcp_gguf_kv_at(a, i), *kw = dcp_gguf_kv_find(b, kv->key);
        assert_non_null(kw);
        assert_int_equal(kw->type, kv->type);
    }
    assert_int_equal(dcp_gguf_kv_count(b), dcp_gguf_kv_count(a) + 3);
    dcp_model_config ca, cb;
    DCP_ASSERT_OK(dcp_model_config_read(a, &ca));
    DCP_ASSERT_OK(dcp_model_config_read(b, &cb));
    assert_int_equal(ca.n_vocab, cb.n_vocab);
    assert_int_equal(ca.n_layer, cb.n_layer);
    dcp_gguf_close(a);
    dcp_gguf_close(b);
    /* Splitting by size: parts of at most 40000 bytes of tensor data (a bigger tensor alone). */
    dcp_quantize_config qc = DCP_QUANTIZE_CONFIG_DEFAULT;
    qc.copy = true;
    qc.split_max_bytes = 40000;
    char prefix2[80];
    snprintf(prefix2, sizeof prefix2, "%s_size.gguf", prefix);
    DCP_ASSERT_OK(dcp_gguf_quantize(one, prefix2, &qc, NULL, NULL));
    prefix2[strlen(prefix2) - 5] = '\0'; /* the .gguf ending is dropped */
    uint32_t count = 0;
    for (uint32_t c = 2; c < 64 && !count; c++)
        if (access(part_path(prefix2, 0, c), F_OK) == 0) count = c;
    assert_true(count >= 2);
    DCP_ASSERT_OK(dcp_gguf_open(part_path(prefix2, 0, count), &b));
    assert_int_equal(dcp_gguf_tensor_count(b), n);
    for (uint32_t k = 0; k < count; k++) {
        const dcp_gguf *p = dcp_gguf_part(b, k);
        uint64_t bytes = 0;
        for (uint64_t i = 0; i < dcp_gguf_tensor_count(p); i++) bytes += dcp_gguf_tensor_at(p, i)->size;
        assert_true(bytes <= 40000 || dcp_gguf_tensor_count(p) == 1);
    }
    printf("split by size: %u parts of at most 40000 tensor bytes\n", count);
    dcp_gguf_close(b);
    remove_parts(prefix2, count);
    remove_parts(prefix, 3);
    unlink(one);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    char *p = dcp_test_read_file(from, &n);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
    free(p);
}

/* A hand-made split model: `parts` files with the given tensor names (one F32 [4] each) and split
 * keys (split.count = count, split.tensors.count = total). */
static void write_parts(const char *prefix, uint32_t parts, uint32_t count, int64_t total, const char *const *names)
{
    for (uint32_t k = 0; k < parts; k++) {
        dcp_gguf_writer *w;
        DCP_ASSERT_OK(dcp_gguf_writer_create(32, &w));
        if (k == 0) DCP_ASSERT_OK(dcp_gguf_writer_set_string(w, "general.architecture", "llama", 5));
        DCP_ASSERT_OK(dcp_gguf_writer_set_uint(w, "split.no", DCP_GGUF_TYPE_UINT16, k));
        DCP_ASSERT_OK(dcp_gguf_writer_set_uint(w, "split.count", DCP_GGUF_TYPE_UINT16, count));
        DCP_ASSERT_OK(dcp_gguf_writer_set_int(w, "split.tensors.count", DCP_GGUF_TYPE_INT32, total));
        const float x[4] = {1, 2, 3, 4};
        const uint64_t ne[1] = {4};
        DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, names[k], DCP_GGML_TYPE_F32, 1, ne, x, sizeof x));
        DCP_ASSERT_OK(dcp_gguf_writer_write(w, part_path(prefix, k, count)));
        dcp_gguf_writer_destroy(w);
    }
}

static void test_split_refused(void **state)
{
    (void)state;
    char prefix[64], other[64], four[64];
    snprintf(prefix, sizeof prefix, "refuse_%ld", (long)getpid());
    snprintf(other, sizeof other, "refuse_other_%ld", (long)getpid());
    snprintf(four, sizeof four, "refuse_four_%ld", (long)getpid());
    dcp_test_model_config mc = small_model(3, 5), mo = small_model(4, 6);
    make_split(&mc, "refuse_one.gguf", prefix, 3);
    make_split(&mo, "refuse_other.gguf", other, 3);
    make_split(&mc, "refuse_one.gguf", four, 4);
    char p1[512], p2[512], p3[512], keep2[600], keep3[600];
    snprintf(p1, sizeof p1, "%s", part_path(prefix, 0, 3));
    snprintf(p2, sizeof p2, "%s", part_path(prefix, 1, 3));
    snprintf(p3, sizeof p3, "%s", part_path(prefix, 2, 3));
    snprintf(keep2, sizeof keep2, "%s.keep", p2);
    snprintf(keep3, sizeof keep3, "%s.keep", p3);
    copy_file(p2, keep2);
    copy_file(p3, keep3);
    /* A missing part. */
    unlink(p3);
    expect_refused(p1, DCP_ERR_IO, (const char *const[]){p3, "part 3 of 3", "missing", NULL});
    /* Parts reordered: 2 and 3 swapped. */
    copy_file(keep3, p2);
    copy_file(keep2, p3);
    expect_refused(p1, DCP_ERR_FORMAT, (const char *const[]){p2, "split.no is 2", "expected 1", "out of order", NULL});
    /* A part of another model (same part count, other tensor total). */
    copy_file(keep2, p2);
    copy_file(part_path(other, 2, 3), p3);
    expect_refused(p1, DCP_ERR_FORMAT, (const char *const[]){p3, "split.tensors.count", "another split model", NULL});
    /* A part of a split into four. */
    copy_file(part_path(four, 2, 4), p3);
    expect_refused(p1, DCP_ERR_FORMAT, (const char *const[]){p3, "split.count is 4", NULL});
    /* A file that is no part at all. */
    copy_file("refuse_other.gguf", p3);
    expect_refused(p1, DCP_ERR_FORMAT, (const char *const[]){p3, "not a part of a split model", "part 3 of 3", NULL});
    copy_file(keep3, p3);
    /* Opening a part other than the first. */
    expect_refused(p2, DCP_ERR_FORMAT, (const char *const[]){p2, "part 2 of 3", "first part", NULL});
    /* A first part whose name does not say -00001-of-00003: the others cannot be found. */
    copy_file(p1, "refuse_renamed.gguf");
    expect_refused("refuse_renamed.gguf", DCP_ERR_FORMAT,
                   (const char *const[]){"refuse_renamed.gguf", "-00001-of-00003.gguf", NULL});
    /* Still whole: it opens. */
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open(p1, &g));
    dcp_gguf_close(g);
    /* A tensor name in two parts; a tensor total other than split.tensors.count. */
    char dup[64];
    snprintf(dup, sizeof dup, "refuse_dup_%ld", (long)getpid());
    write_parts(dup, 2, 2, 2, (const char *const[]){"a.weight", "a.weight"});
    expect_refused(part_path(dup, 0, 2), DCP_ERR_FORMAT,
                   (const char *const[]){part_path(dup, 1, 2), "a.weight", "also in", part_path(dup, 0, 2), NULL});
    write_parts(dup, 2, 2, 3, (const char *const[]){"a.weight", "b.weight"});
    expect_refused(part_path(dup, 0, 2), DCP_ERR_FORMAT, (const char *const[]){"hold 2 tensors", "says 3", NULL});
    remove_parts(dup, 2);
    remove_parts(prefix, 3);
    remove_parts(other, 3);
    remove_parts(four, 4);
    unlink(keep2);
    unlink(keep3);
    unlink("refuse_one.gguf");
    unlink("refuse_other.gguf");
    unlink("refuse_renamed.gguf");
}

static dcp_context *logical_context(uint32_t n)
{
    char list[64];
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++) k += (size_t)snprintf(list + k, sizeof list - k, i ? ",0" : "0");
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = list;
    cc.validation = 1;
    dcp_context *ctx;
    DCP_ASSERT_OK(dcp_context_create(&cc, &ctx));
    return ctx;
}

typedef struct progress_log {
    uint64_t last, total, calls;
    int monotone;
} progress_log;

static void on_progress(void *user, uint64_t done, uint64_t total)
{
    progress_log *p = user;
    if (done < p->last || (p->calls && total != p->total) || done > total) p->monotone = 0;
    p->last = done;
    p->total = total;
    p->calls++;
}

/* Prefill, then STEPS greedy steps at (tp, dcp); logits of every step to logits [STEPS + 1][V]. */
static void run(dcp_context *ctx, const dcp_gguf *g, const dcp_model_config *cfg, uint32_t tp, uint32_t dcp,
                float *logits, int32_t *ids, progress_log *pl)
{
    dcp_device *devs[8];
    for (uint32_t r = 0; r < tp; r++) devs[r] = dcp_context_device(ctx, (int)r);
    dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    lc.devices = devs;
    lc.count = tp;
    lc.tp = tp;
    lc.dcp = dcp;
    lc.progress = on_progress;
    lc.progress_user = pl;
    dcp_model *w;
    DCP_ASSERT_OK(dcp_model_load(&lc, g, cfg, &w));
    /* The progress count ends at its total, which is what the ranks read of the files. */
    assert_true(pl->monotone && pl->calls >= 2);
    assert_int_equal(pl->last, pl->total);
    assert_int_equal(pl->total, dcp_model_file_bytes(w));
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.kv_dtype = DCP_DTYPE_F32;
    sc.n_ctx = N_CTX;
    sc.max_rows = 8;
    sc.block_size = 4;
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(w, &sc, &s));
    static const int32_t prompt[PREFILL] = {1, 300, 412, 77, 530};
    int32_t next = -1;
    DCP_ASSERT_OK(dcp_model_state_forward(s, prompt, PREFILL, logits, &next));
    for (uint32_t step = 0; step < STEPS; step++) {
        ids[step] = next;
        int32_t tok = next;
        DCP_ASSERT_OK(dcp_model_state_forward(s, &tok, 1, logits + (uint64_t)(step + 1) * cfg->n_vocab, &next));
    }
    dcp_model_state_destroy(s);
    dcp_model_destroy(w);
}

/* The model split in three parts runs exactly as the one file: TP 1 and TP 8 / DCP 2. */
static void test_split_tokens(void **state)
{
    (void)state;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "tokens_%ld", (long)getpid());
    dcp_test_model_config mc = small_model(2, 31);
    make_split(&mc, "tokens_one.gguf", prefix, 3);
    dcp_gguf *a, *b;
    DCP_ASSERT_OK(dcp_gguf_open("tokens_one.gguf", &a));
    DCP_ASSERT_OK(dcp_gguf_open(part_path(prefix, 0, 3), &b));
    assert_int_equal(dcp_gguf_part_count(b), 3);
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_model_config_read(b, &cfg));
    const uint64_t V = cfg.n_vocab, nl = (uint64_t)(STEPS + 1) * V;
    float *la = malloc(nl * 4), *lb = malloc(nl * 4);
    int32_t ia[STEPS], ib[STEPS], i8[STEPS];
    dcp_context *ctx1 = logical_context(1), *ctx8 = logical_context(8);
    static const struct { uint32_t tp, dcp; } layouts[] = {{1, 1}, {8, 2}};
    for (size_t k = 0; k < 2; k++) {
        const uint32_t tp = layouts[k].tp, dcp = layouts[k].dcp;
        dcp_context *ctx = tp == 1 ? ctx1 : ctx8;
        progress_log pa = {0, 0, 0, 1}, pb = {0, 0, 0, 1};
        run(ctx, a, &cfg, tp, dcp, la, ia, &pa);
        run(ctx, b, &cfg, tp, dcp, lb, ib, &pb);
        assert_int_equal(pa.total, pb.total);
        assert_memory_equal(la, lb, nl * 4); /* the same bytes in, the same logits out */
        for (int i = 0; i < STEPS; i++)
            if (ia[i] != ib[i]) fail_msg("TP %u DCP %u: greedy id %d: %d from the file, %d from the parts", tp, dcp, i, ia[i], ib[i]);
        if (tp == 1) memcpy(i8, ia, sizeof i8);
        else
            for (int i = 0; i < STEPS; i++) assert_int_equal(ia[i], i8[i]);
        printf("TP %u DCP %u: %d greedy ids and all logits equal from the file and from 3 parts; %llu bytes of the "
               "files read\n", tp, dcp, STEPS, (unsigned long long)pb.total);
    }
    /* Each rank reads its own slices only: TP 1 reads every tensor byte once; one rank of TP 8
     * reads the replicated tensors (embedding, norms, and the output head: every process computes
     * the logits) and of each layer exactly: attn_q 1 head (16 rows), attn_k and attn_v 1 KV head
     * each (16 rows), attn_output the Q8_0 block of 32 columns covering its 16, ffn_gate and ffn_up
     * 32 rows, ffn_down 32 columns: (16 + 16 + 16 + 32 + 32 + 32 + 32) x 64 weights, in Q8_0
     * (34 bytes a 32), from the parts as from the one file. */
    uint64_t all = 0, replicated = 0, layers = 0;
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(b); i++) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(b, i);
        all += t->size;
        if (t->n_dims == 1 || !strncmp(t->name, "output", 6) || !strcmp(t->name, "token_embd.weight"))
            replicated += t->size;
        else layers += t->size;
    }
    const uint64_t per_layer = 176ull * 64 / 32 * 34, want_rank = replicated + cfg.n_layer * per_layer;
    dcp_device *devs[8];
    for (int r = 0; r < 8; r++) devs[r] = dcp_context_device(ctx8, r);
    for (int f = 0; f < 2; f++) {
        const dcp_gguf *g = f ? b : a;
        dcp_model *w;
        DCP_ASSERT_OK(dcp_test_model_load(devs, 0, 1, 1, 1, false, g, &cfg, &w));
        assert_int_equal(dcp_model_file_bytes(w), all);
        dcp_model_destroy(w);
        dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
        lc.devices = devs + 3;
        lc.count = 1;
        lc.first_rank = 3;
        lc.tp = 8;
        lc.dcp = 2;
        lc.count_only = true;
        DCP_ASSERT_OK(dcp_model_load(&lc, g, &cfg, &w));
        const uint64_t got = dcp_model_file_bytes(w);
        printf("%s: TP 1 reads %llu bytes (all); rank 3 of TP 8 reads %llu (replicated %llu + %llu of %llu layer "
               "bytes)\n", f ? "3 parts" : "one file", (unsigned long long)all, (unsigned long long)got,
               (unsigned long long)replicated, (unsigned long long)(got - replicated), (unsigned long long)layers);
        assert_int_equal(got, want_rank);
        dcp_model_destroy(w);
    }
    dcp_test_context_done(ctx8);
    dcp_test_context_done(ctx1);
    free(la);
    free(lb);
    dcp_gguf_close(a);
    dcp_gguf_close(b);
    remove_parts(prefix, 3);
    unlink("tokens_one.gguf");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_reader),
        cmocka_unit_test(test_split_refused),
        cmocka_unit_test(test_split_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
