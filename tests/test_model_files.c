/* Generated test models are files llama.cpp reads (issue 21 section 5): deepseek2 models of any
 * layer count carry every key llama.cpp's deepseek2 loader requires (q_lora_rank is required
 * unless the layer count is a V2-Lite one; expert_feed_forward_length, expert_shared_count and
 * expert_weights_scale always); rope_freqs.weight is a llama tensor only, refused by the test
 * model generator for qwen2 / qwen3 / phi3 and, in such a file, by the loader as llama.cpp does
 * ("wrong number of tensors"), as is any other tensor the architecture does not read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "testmodel/testmodel.h"
#include "vkutil.h"

/* Keys llama.cpp's deepseek2 loader reads without a default (llama_model::load_hparams and its
 * deepseek2 case), for a model whose layer count is not 26 / 27. */
static const char *const ds2_required[] = {
    "deepseek2.context_length",          "deepseek2.embedding_length",
    "deepseek2.block_count",             "deepseek2.feed_forward_length",
    "deepseek2.attention.head_count",    "deepseek2.attention.layer_norm_rms_epsilon",
    "deepseek2.leading_dense_block_count", "deepseek2.attention.q_lora_rank",
    "deepseek2.attention.kv_lora_rank",  "deepseek2.expert_feed_forward_length",
    "deepseek2.expert_shared_count",     "deepseek2.expert_weights_scale",
    NULL};

static void test_deepseek2_keys(void **state)
{
    (void)state;
    for (const char *v = "ABC"; *v; v++)
        for (uint32_t dense = 1; dense <= 2; dense++) { /* one MoE layer, or every layer dense */
            dcp_test_deepseek2_config dc;
            DCP_ASSERT_OK(dcp_test_deepseek2_preset(*v, &dc));
            dc.n_layer = 2;
            dc.n_layer_dense = dense;
            dcp_gguf_writer *w;
            DCP_ASSERT_OK(dcp_gguf_build_test_model_deepseek2(&dc, &w));
            void *data;
            size_t n;
            DCP_ASSERT_OK(dcp_gguf_writer_write_memory(w, &data, &n));
            dcp_gguf_writer_destroy(w);
            dcp_gguf *g;
            DCP_ASSERT_OK(dcp_gguf_open_memory(data, n, "ds2.gguf", &g));
            for (int k = 0; ds2_required[k]; k++)
                if (!dcp_gguf_kv_find(g, ds2_required[k]))
                    fail_msg("deepseek2 %c (%u dense of 2 layers): key %s missing", *v, dense, ds2_required[k]);
            uint64_t q;
            DCP_ASSERT_OK(dcp_gguf_get_uint(g, "deepseek2.attention.q_lora_rank", &q));
            assert_int_equal(q, dc.q_lora_rank);
            assert_int_equal(dcp_gguf_tensor_find(g, "blk.0.attn_q.weight") != NULL, dc.q_lora_rank == 0);
            dcp_model_config c;
            DCP_ASSERT_OK(dcp_model_config_read(g, &c));
            assert_int_equal(c.q_lora_rank, dc.q_lora_rank);
            assert_int_equal(c.n_layer_dense_lead, dense);
            dcp_gguf_close(g);
            free(data);
        }
}

/* Loads g (count_only on one device) and expects DCP_ERR_FORMAT naming `tensor`. */
static void expect_load_refused(dcp_context *ctx, const dcp_gguf *g, const char *tensor)
{
    dcp_model_config c;
    DCP_ASSERT_OK(dcp_model_config_read(g, &c));
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    lc.devices = &dev;
    lc.count_only = true;
    dcp_model *m = NULL;
    dcp_status st = dcp_model_load(&lc, g, &c, &m);
    if (st != DCP_ERR_FORMAT) fail_msg("%s with %s: status %s (%s)", c.arch_name, tensor, dcp_status_string(st), dcp_last_error());
    assert_null(m);
    assert_non_null(strstr(dcp_last_error(), tensor));
    assert_non_null(strstr(dcp_last_error(), "wrong number of tensors"));
    printf("refused: %s\n", dcp_last_error());
}

/* A test model of arch with an extra F32 tensor `extra` [n], opened from memory (*data freed by
 * the caller after close). */
static dcp_gguf *with_extra(const char *arch, const char *extra, uint64_t n, void **data)
{
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.arch = arch;
    mc.n_embd = 64;
    mc.n_layer = 1;
    mc.n_head = 4;
    mc.n_head_kv = 2;
    mc.head_dim = 16;
    mc.n_ff = 64;
    dcp_gguf_writer *w;
    DCP_ASSERT_OK(dcp_gguf_build_test_model(&mc, &w));
    if (extra) {
        float *f = calloc(n, sizeof *f);
        for (uint64_t i = 0; i < n; i++) f[i] = 1.0f;
        const uint64_t ne[1] = {n};
        DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, extra, DCP_GGML_TYPE_F32, 1, ne, f, n * 4));
        free(f);
    }
    size_t size;
    DCP_ASSERT_OK(dcp_gguf_writer_write_memory(w, data, &size));
    dcp_gguf_writer_destroy(w);
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open_memory(*data, size, "extra.gguf", &g));
    return g;
}

static void test_rope_freqs(void **state)
{
    (void)state;
    /* The generator refuses rope_freqs outside llama, naming the field and the architecture. */
    static const char *const others[] = {"qwen2", "qwen3", "phi3"};
    for (int i = 0; i < 3; i++) {
        dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
        mc.arch = others[i];
        mc.rope_freqs = 1;
        dcp_gguf_writer *w = NULL;
        assert_int_equal(dcp_gguf_build_test_model(&mc, &w), DCP_ERR_INVALID_ARGUMENT);
        assert_null(w);
        assert_non_null(strstr(dcp_last_error(), "rope_freqs"));
        assert_non_null(strstr(dcp_last_error(), others[i]));
    }
    dcp_context *ctx = dcp_test_context();
    void *data;
    /* Such a file is refused at load; llama reads it; any tensor an architecture does not read is
     * refused likewise. */
    for (int i = 0; i < 3; i++) {
        dcp_gguf *g = with_extra(others[i], "rope_freqs.weight", 8, &data);
        expect_load_refused(ctx, g, "rope_freqs.weight");
        dcp_gguf_close(g);
        free(data);
    }
    dcp_gguf *g = with_extra("llama", "rope_freqs.weight", 8, &data);
    dcp_model_config c;
    DCP_ASSERT_OK(dcp_model_config_read(g, &c));
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    lc.devices = &dev;
    lc.count_only = true;
    dcp_model *m;
    DCP_ASSERT_OK(dcp_model_load(&lc, g, &c, &m));
    dcp_model_destroy(m);
    dcp_gguf_close(g);
    free(data);
    g = with_extra("llama", "blk.0.attn_sinks.weight", 4, &data);
    expect_load_refused(ctx, g, "blk.0.attn_sinks.weight");
    dcp_gguf_close(g);
    free(data);
    g = with_extra("qwen3", "blk.1.attn_norm.weight", 64, &data); /* a layer past block_count */
    expect_load_refused(ctx, g, "blk.1.attn_norm.weight");
    dcp_gguf_close(g);
    free(data);
    dcp_test_context_done(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepseek2_keys),
        cmocka_unit_test(test_rope_freqs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
