/* --speculative-config of dcp-vk-run and dcp-vk-serve (vLLM's option and field names): the JSON
 * object parsed with cJSON (a build without cJSON refuses the option, saying so), and the
 * draft model it may name loaded beside the target: the same devices, TP and DCP layout (its KV
 * cache sharded over the same DCP group by the same placement rule: docs/design.md section 17; a
 * draft whose heads do not allow the DCP size has DCP 1 over the same ranks, its cache replicated
 * over each DCP group), its own run state of the target's slots, context and block size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DCP_CLI_HAVE_CJSON
#include <cjson/cJSON.h>
#endif

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "cli/run.h"

static int bad(const char *prog, const char *what, const char *detail)
{
    fprintf(dcp_cli_diag(), "%s: option --speculative-config: %s%s\n", prog, what, detail ? detail : "");
    return DCP_EXIT_USAGE;
}

#ifdef DCP_CLI_HAVE_CJSON
/* A whole number in [lo, hi] at key; *present whether the key is there. */
static int get_u32(const cJSON *o, const char *key, uint32_t lo, uint32_t hi, uint32_t *out, const char *prog)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return 0;
    char msg[160];
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(long long)v->valuedouble || v->valuedouble < lo ||
        v->valuedouble > hi) {
        snprintf(msg, sizeof msg, "\"%s\" must be a whole number in [%u, %u]", key, lo, hi);
        return bad(prog, msg, NULL);
    }
    *out = (uint32_t)v->valuedouble;
    return 0;
}

int run_spec_parse(const char *json, run_spec *sp, const char *prog)
{
    memset(sp, 0, sizeof *sp);
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return bad(prog, "not a JSON object: ", json);
    }
    static const char *const known[] = {"method", "model", "num_speculative_tokens", "prompt_lookup_max",
                                        "prompt_lookup_min", NULL};
    int rc = 0;
    for (const cJSON *it = o->child; it && !rc; it = it->next) {
        int k = 0;
        while (known[k] && strcmp(known[k], it->string)) k++;
        if (!known[k]) {
            char msg[200];
            snprintf(msg, sizeof msg, "unknown field \"%.64s\" (allowed: method, model, num_speculative_tokens, "
                     "prompt_lookup_max, prompt_lookup_min)", it->string);
            rc = bad(prog, msg, NULL);
        }
    }
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(o, "method");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (!rc && model && (!cJSON_IsString(model) || !*model->valuestring))
        rc = bad(prog, "\"model\" must be the draft model's GGUF path", NULL);
    if (!rc && method) {
        if (!cJSON_IsString(method)) rc = bad(prog, "\"method\" must be a string (allowed: ngram, draft_model)", NULL);
        else if (strcmp(method->valuestring, "ngram") == 0) sp->method = DCP_SPEC_NGRAM;
        else if (strcmp(method->valuestring, "draft_model") == 0) sp->method = DCP_SPEC_DRAFT;
        else rc = bad(prog, "\"method\" is not one of ngram, draft_model: ", method->valuestring);
    } else if (!rc) {
        sp->method = model ? DCP_SPEC_DRAFT : DCP_SPEC_NONE; /* vLLM: a model without a method is a draft model */
        if (!model) rc = bad(prog, "needs \"method\": \"ngram\" or a draft \"model\"", NULL);
    }
    if (!rc && sp->method == DCP_SPEC_DRAFT && !model) rc = bad(prog, "method draft_model needs \"model\" (a GGUF path)", NULL);
    if (!rc && sp->method == DCP_SPEC_NGRAM && model) rc = bad(prog, "method ngram takes no \"model\"", NULL);
    if (!rc && !cJSON_GetObjectItemCaseSensitive(o, "num_speculative_tokens"))
        rc = bad(prog, "needs \"num_speculative_tokens\"", NULL);
    if (!rc) rc = get_u32(o, "num_speculative_tokens", 1, DCP_SPEC_MAX_TOKENS, &sp->k, prog);
    if (!rc) rc = get_u32(o, "prompt_lookup_max", 1, 1024, &sp->lookup_max, prog);
    if (!rc) rc = get_u32(o, "prompt_lookup_min", 1, 1024, &sp->lookup_min, prog);
    if (!rc && sp->method == DCP_SPEC_DRAFT && (sp->lookup_max || sp->lookup_min))
        rc = bad(prog, "prompt_lookup_max and prompt_lookup_min are for method ngram", NULL);
    if (!rc && model && !(sp->model = strdup(model->valuestring))) rc = DCP_EXIT_RUNTIME;
    cJSON_Delete(o);
    return rc;
}
#else
int run_spec_parse(const char *json, run_spec *sp, const char *prog)
{
    (void)json;
    memset(sp, 0, sizeof *sp);
    return bad(prog, "this build has no cJSON (apt-get install libcjson-dev, then configure again)", NULL);
}
#endif

/* Prints why loading the draft failed; DCP_EXIT_RUNTIME. */
static int load_failed(const char *prog, const run_spec *sp, const char *what, dcp_status st)
{
    fprintf(stderr, "%s: draft model %s: %s: %s: %s\n", prog, sp->model, what, dcp_status_string(st), dcp_last_error());
    return DCP_EXIT_RUNTIME;
}

/* Opens the draft's file and reads its hyperparameters, once. */
static int open_draft(run_spec *sp, const char *prog)
{
    dcp_status st;
    if (sp->g) return 0;
    if ((st = dcp_gguf_open(sp->model, &sp->g))) return load_failed(prog, sp, "reading it", st);
    if ((st = dcp_model_config_read(sp->g, &sp->mc))) return load_failed(prog, sp, "reading its hyperparameters", st);
    return 0;
}

/* A count_only load of the draft at layout lc into *out; the status. */
static dcp_status count_at(run_spec *sp, const dcp_model_load_config *lc, dcp_model **out)
{
    dcp_model_load_config c = *lc;
    c.count_only = true;
    c.progress = NULL;
    return dcp_model_load(&c, sp->g, &sp->mc, out);
}

int run_spec_count(run_spec *sp, const dcp_model_load_config *load, const char *prog)
{
    if (sp->method != DCP_SPEC_DRAFT || sp->counted) return 0;
    int rc = open_draft(sp, prog);
    if (rc) return rc;
    /* The target's layout; where the draft's heads do not allow its DCP size, the same TP ranks
     * with DCP 1: the draft's KV cache replicated over each DCP group instead of sharded. */
    sp->dcp = load->dcp;
    dcp_status st = count_at(sp, load, &sp->counted);
    if (st == DCP_ERR_CONFIG && load->dcp > 1) {
        char why[512];
        snprintf(why, sizeof why, "%s", dcp_last_error());
        dcp_model_load_config one = *load;
        one.dcp = 1;
        one.q_replicate = false;
        if ((st = count_at(sp, &one, &sp->counted)) == DCP_OK) {
            sp->dcp = 1;
            fprintf(dcp_cli_diag(), "%s: draft model %s: its heads do not allow DCP size %u (%s): its KV cache is "
                    "replicated over each DCP group (DCP 1 over the same %u TP ranks)\n", prog, sp->model, load->dcp,
                    why, load->tp ? load->tp : load->count);
        }
    }
    if (st != DCP_OK) {
        fprintf(stderr, "%s: draft model %s: counting it at the target's TP and DCP sizes: %s: %s\n", prog, sp->model,
                dcp_status_string(st), dcp_last_error());
        return st == DCP_ERR_CONFIG || st == DCP_ERR_INVALID_ARGUMENT || st == DCP_ERR_UNSUPPORTED ? DCP_EXIT_USAGE
                                                                                                   : DCP_EXIT_RUNTIME;
    }
    return 0;
}

int run_spec_load(run_spec *sp, const dcp_model_load_config *target_load, const dcp_model_state *target,
                    const dcp_tokenizer *target_tok, const char *prog)
{
    if (sp->method != DCP_SPEC_DRAFT) return 0;
    dcp_status st;
    int rc = run_spec_count(sp, target_load, prog); /* opens it and chooses its DCP size */
    if (rc) return rc;
    if ((st = dcp_tokenizer_create(sp->g, &sp->tok))) return load_failed(prog, sp, "reading its tokenizer", st);
    if ((st = dcp_engine_spec_check_vocab(target_tok, sp->tok))) return load_failed(prog, sp, "its vocabulary", st);
    /* The target's devices and layout: the draft's KV is sharded like the target's (or replicated
     * over each DCP group, run_spec_count). */
    dcp_model_load_config lc = *target_load;
    if (sp->dcp != lc.dcp) {
        lc.dcp = sp->dcp;
        lc.q_replicate = false;
    }
    if ((st = dcp_model_load(&lc, sp->g, &sp->mc, &sp->m)))
        return load_failed(prog, sp, "loading it at the target's TP and DCP sizes", st);
    dcp_model_state_config dc = *dcp_model_state_get_config(target);
    dc.n_ctx = dcp_model_state_n_ctx(target);
    dc.kv_pages = 0; /* every slot at full context: the draft never waits for pages */
    dc.max_logits = 0; /* (what dcp_model_state_config.draft counted) */
    if ((st = dcp_model_state_create(sp->m, &dc, &sp->s))) return load_failed(prog, sp, "creating its run state", st);
    return 0;
}

void run_spec_config(const run_spec *sp, dcp_spec_config *out)
{
    *out = (dcp_spec_config)DCP_SPEC_CONFIG_DEFAULT;
    out->method = sp->method;
    out->num_speculative_tokens = sp->k;
    out->prompt_lookup_max = sp->lookup_max;
    out->prompt_lookup_min = sp->lookup_min;
    out->draft = sp->s;
    out->draft_tokenizer = sp->tok;
}

void run_spec_free(run_spec *sp)
{
    dcp_model_state_destroy(sp->s);
    dcp_model_destroy(sp->m);
    dcp_model_destroy(sp->counted);
    dcp_tokenizer_destroy(sp->tok);
    dcp_gguf_close(sp->g);
    free(sp->model);
    memset(sp, 0, sizeof *sp);
}
