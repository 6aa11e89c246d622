/* The double-precision llama reference (src/ref/model_ref.h) built from a GGUF file's tensors:
 * shared by the model tests; and the builders of a loaded model the engine tests share. */
#ifndef DCP_TESTS_REF_MODEL_H
#define DCP_TESTS_REF_MODEL_H

#include <stdbool.h>

#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/model_config.h"
#include "dcpvk/tokenizer.h"
#include "dcpvk/vk.h"
#include "ref/model_ref.h"
#include "testmodel/testmodel.h"

typedef struct dcp_test_ref_model {
    dcp_ref_llama ref;           /* points into the arrays below */
    dcp_ref_llama_layer *layers; /* [n_layer] */
    float **tensors;             /* f32 host copies of the GGUF tensors */
    size_t n_tensors;
} dcp_test_ref_model;

/* Reads every tensor the reference uses from g as f32 and allocates a KV cache of n_ctx tokens. */
void dcp_test_ref_model_load(dcp_test_ref_model *m, const dcp_gguf *g, const dcp_model_config *c, uint32_t n_ctx);
/* Zeroes the reference's KV cache. */
void dcp_test_ref_model_reset(dcp_test_ref_model *m);
void dcp_test_ref_model_free(dcp_test_ref_model *m);

/* dcp_model_load over devs[0 .. count): TP ranks [first, first + count) of a group of tp
 * with DCP groups of dcp. */
dcp_status dcp_test_model_load(dcp_device *const *devs, uint32_t first, uint32_t count, uint32_t tp, uint32_t dcp,
                                  bool q_replicate, const dcp_gguf *g, const dcp_model_config *cfg,
                                  dcp_model **out);

/* Opens what w wrote, in memory: *bytes holds the file (the caller frees it after closing the
 * returned gguf), name is its name in messages; destroys w. Fails the test on an error. */
dcp_gguf *dcp_test_gguf_of_writer(dcp_gguf_writer *w, void **bytes, const char *name);
/* Reads g's config into *cfg and its tokenizer into *tok, and loads its weights into *m over ctx's
 * devices 0 .. tp at TP tp / DCP dcp (dcp_test_model_load). Fails the test on an error. */
void dcp_test_model_open(dcp_context *ctx, const dcp_gguf *g, uint32_t tp, uint32_t dcp, bool q_replicate,
                         dcp_model_config *cfg, dcp_tokenizer **tok, dcp_model **m);
/* Destroys m, checks that the validation layer said nothing and destroys ctx
 * (dcp_test_context_done), then destroys tok and closes g (what the model opened with). */
void dcp_test_model_close(dcp_context *ctx, dcp_model *m, dcp_tokenizer *tok, dcp_gguf *g);
/* A generated deepseek2 of preset 'A' (MLA latent cache, MoE), opened in memory as
 * dcp_test_gguf_of_writer opens it; q8_rows: kv_lora_rank 48, latent rows of 48 + 16 = 64 values
 * (whole q8_0 blocks). */
dcp_gguf *dcp_test_open_deepseek2(bool q8_rows, void **bytes);

/* A model, its state and an engine over them (tests/test_engine.c, test_prefix.c, test_choices.c). */
typedef struct dcp_test_engine {
    dcp_gguf *g;
    void *bytes; /* g's file when it was generated in memory (freed by dcp_test_engine_close), or NULL */
    dcp_model_config cfg;
    dcp_context *ctx;
    dcp_model *m;
    dcp_model_state *s;
    dcp_tokenizer *tok;
    dcp_engine *e;
} dcp_test_engine;

/* With f->g (and f->bytes) opened by the caller: loads the model at TP tp / DCP dcp on a context of
 * tp logical devices (dcp_test_model_open), creates its state from sc and the engine from ec. */
void dcp_test_engine_open(dcp_test_engine *f, uint32_t tp, uint32_t dcp, const dcp_model_state_config *sc,
                          const dcp_engine_config *ec);
/* Destroys what dcp_test_engine_open made (the engine first; f->e may be NULL already) and closes
 * f->g, freeing f->bytes. */
void dcp_test_engine_close(dcp_test_engine *f);

#endif
