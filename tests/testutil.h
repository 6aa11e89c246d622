/* Shared helpers for the CMocka tests: paths to tests/data, child processes, deterministic random data. */
#ifndef DCP_TESTUTIL_H
#define DCP_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dcpvk/engine.h"

/* Path of a file of tests/data/ (tests/data/README.md lists them; DCP_TEST_DATA_DIR is set by
 * tests/CMakeLists.txt to that folder of the source tree). Returns a pointer to a static buffer. */
const char *dcp_test_data_path(const char *name);

/* Reads a whole file into a malloc'd buffer (NUL-terminated); fails the test if it cannot. */
char *dcp_test_read_file(const char *path, size_t *size_out);

/* A finished child process: exit code (-1 if it did not exit) and what it printed. */
typedef struct dcp_test_result {
    int code;
    char *out, *err; /* malloc'd, NUL-terminated */
} dcp_test_result;

/* Runs argv[0] (searched in PATH when it has no slash) with argv, capturing stdout and stderr. */
dcp_test_result dcp_test_spawn(const char *const *argv);
void dcp_test_result_free(dcp_test_result *r);

/* 1 if s[0, n) is well-formed UTF-8: decoded code point by code point, no overlong forms, no
 * surrogates, nothing above U+10FFFF (written independently of src/text/utf8.c). */
int dcp_test_valid_utf8(const char *s, size_t n);

/* Deterministic random numbers for test data: SplitMix64 (src/common/splitmix.h). */
typedef struct dcp_test_rng {
    uint64_t state;
} dcp_test_rng;
uint64_t dcp_test_rng_next(dcp_test_rng *rng);
/* Uniform in [lo, hi). */
float dcp_test_rng_uniform(dcp_test_rng *rng, float lo, float hi);
/* n values uniform in [lo, hi) (malloc'd; the caller frees them). */
float *dcp_test_rand_floats(dcp_test_rng *rng, uint64_t n, float lo, float hi);

/* What one engine request (or one choice of it) produced (tests/test_engine.c, test_spec.c,
 * test_prefix.c, test_choices.c): its tokens, streamed text, finish reason, completion-token count
 * and the prompt tokens it took from the prefix cache; done once its FINISHED event came. */
enum { DCP_TEST_OUT_MAXT = 256 };
typedef struct dcp_test_out {
    int32_t toks[DCP_TEST_OUT_MAXT];
    uint32_t n;
    char text[4096];
    size_t len;
    dcp_engine_finish finish;
    uint32_t completion;
    uint32_t cached; /* the FINISHED event's cached_tokens */
    bool done;
    uint64_t id;     /* not touched by dcp_test_drain: where a test keeps the request's id */
} dcp_test_out;

/* Routes every pending event of e to the dcp_test_out of its choice: user points to an array of
 * the request's n (one when n is 1), indexed by the event's index (below DCP_ENGINE_MAX_CHOICES);
 * fails the test on a request that finished with an error, an event after FINISHED, or an
 * overflow. */
void dcp_test_drain(dcp_engine *e);

#endif
