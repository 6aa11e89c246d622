/* Model loader fuzz target body (more_fuzz_targets.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/model_config.h"
#include "more_fuzz_targets.h"

static dcp_context *ctx;
uint64_t dcp_fuzz_loader_counted, dcp_fuzz_loader_loaded;

static void make_context(void)
{
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = getenv("DCP_VK_DEVICES") && *getenv("DCP_VK_DEVICES") ? NULL : "0,0";
    if (dcp_context_create(&cc, &ctx) != DCP_OK) {
        fprintf(stderr, "fuzz_loader: no Vulkan device: %s\n", dcp_last_error());
        abort();
    }
}

void dcp_fuzz_loader_done(void)
{
    dcp_context_destroy(ctx);
    ctx = NULL;
}

/* Small budget: weights of at most this many bytes per rank are loaded for real. */
#define LOAD_BUDGET (4u << 20)

static void load(const dcp_gguf *g, const dcp_model_config *cfg, uint32_t tp)
{
    dcp_device *devs[2];
    for (uint32_t i = 0; i < tp; i++) devs[i] = dcp_context_device(ctx, (int)i % dcp_context_device_count(ctx));
    dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    lc.devices = devs;
    lc.count = tp;
    lc.count_only = true;
    dcp_model *m;
    dcp_status st = dcp_model_load(&lc, g, cfg, &m);
    if (st != DCP_OK) {
        if (!dcp_last_error()[0]) abort(); /* failures explain themselves */
        return;
    }
    dcp_fuzz_loader_counted++;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < tp; i++) bytes = bytes > dcp_model_rank_bytes(m, i) ? bytes : dcp_model_rank_bytes(m, i);
    dcp_model_destroy(m);
    if (bytes > LOAD_BUDGET) return;
    lc.count_only = false;
    st = dcp_model_load(&lc, g, cfg, &m);
    if (st != DCP_OK) {
        if (!dcp_last_error()[0]) abort();
        return;
    }
    dcp_fuzz_loader_loaded++;
    /* what was counted is what was loaded */
    for (uint32_t i = 0; i < tp; i++)
        if (dcp_model_rank_bytes(m, i) > bytes) abort();
    dcp_model_destroy(m);
}

int dcp_fuzz_loader(const uint8_t *data, size_t size)
{
    if (!ctx) make_context();
    dcp_gguf *g;
    if (dcp_gguf_open_memory(data, size, "fuzz-input", &g) != DCP_OK) return 0;
    dcp_model_config cfg;
    if (dcp_model_config_read(g, &cfg) == DCP_OK) {
        load(g, &cfg, 1);
        if (dcp_context_device_count(ctx) >= 2) load(g, &cfg, 2);
    } else if (!dcp_last_error()[0]) abort();
    dcp_gguf_close(g);
    return 0;
}
