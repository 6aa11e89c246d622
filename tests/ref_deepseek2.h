/* The double-precision deepseek2 reference (src/ref/deepseek2_ref.h) built from a GGUF file's
 * tensors (found and checked by dcp_ds2_tensors_find): shared by the deepseek2 tests. */
#ifndef DCP_TESTS_REF_DEEPSEEK2_H
#define DCP_TESTS_REF_DEEPSEEK2_H

#include "dcpvk/gguf.h"
#include "dcpvk/model_config.h"
#include "model/arch/deepseek2_weights.h"
#include "ref/deepseek2_ref.h"

typedef struct dcp_test_ds2 {
    dcp_gguf *g;
    dcp_model_config cfg;
    dcp_ds2_tensors t;
    dcp_ref_ds2 ref;             /* points into the arrays below */
    dcp_ref_ds2_layer *layers;   /* [n_layer] */
    float **arrays;              /* f32 host copies of the tensors */
    size_t n_arrays;
} dcp_test_ds2;

/* Writes test model `variant` ('A', 'B', 'C'; weight type F32 unless f16) to path. */
void dcp_test_ds2_make(const char *path, char variant, int f16);
/* Opens path, reads its config and tensors, and sets up the reference (absorbed or not) with a
 * cache of n_ctx tokens. */
void dcp_test_ds2_load(dcp_test_ds2 *m, const char *path, int absorbed, uint32_t n_ctx);
void dcp_test_ds2_free(dcp_test_ds2 *m);
/* A path for a scratch file named `name` in $TMPDIR (or /tmp), unique to this process. */
const char *dcp_test_ds2_tmp(const char *name, char *buf, size_t cap);

#endif
