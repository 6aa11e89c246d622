/* The double-precision llama reference (src/ref/model_ref.h) built from a GGUF file's tensors:
 * shared by the model tests. */
#ifndef DCP_TESTS_REF_MODEL_H
#define DCP_TESTS_REF_MODEL_H

#include <stdbool.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/model_config.h"
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

#endif
