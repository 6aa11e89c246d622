/* Shared helpers for the CMocka tests: paths to tests/data, child processes, deterministic random data. */
#ifndef DCP_TESTUTIL_H
#define DCP_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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

#endif
