/* The model apps' library configurations from their options (cli/run.h): the run state's and the
 * weights' load, alike in dcp-vk-run and dcp-vk-serve. */
#include <string.h>

#include "cli/run.h"
#include "dcpvk/dtype.h"

dcp_model_state_config run_state_config(const run_options *o)
{
    dcp_model_state_config c = DCP_MODEL_STATE_CONFIG_DEFAULT;
    c.n_ctx = o->ctx;
    c.block_size = o->block_size;
    c.kv_dtype = DCP_DTYPE_F16;
    if (!dcp_dtype_parse(o->kv_dtype, &c.kv_dtype)) c.kv_dtype = DCP_DTYPE_F16; /* checked by the option parser */
    c.max_rows = o->prefill_chunk;
    c.interleave = o->interleave;
    c.backend = strcmp(o->backend, "ag_rs") == 0 ? DCP_CP_AG_RS : DCP_CP_A2A;
    return c;
}

dcp_model_load_config run_load_config(const run_options *o, dcp_context *ctx, uint32_t first, uint32_t count,
                                      dcp_device **devs)
{
    dcp_model_load_config c = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    for (uint32_t r = 0; r < count; r++) devs[r] = dcp_context_device(ctx, (int)r);
    c.devices = devs;
    c.count = count;
    c.first_rank = first;
    c.tp = o->tp;
    c.dcp = o->dcp;
    c.q_replicate = o->q_replicate;
    return c;
}
