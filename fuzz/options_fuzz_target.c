/* Option parser fuzz target body (more_fuzz_targets.h). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "more_fuzz_targets.h"
#include "cli/run.h"

enum { MAX_ARGS = 48 };

/* Reference reading of a decimal u64: digits only, at least one, no overflow. */
static bool ref_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s) return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* Reference syntax of a decimal number: [+-] digits [. digits] [(e|E) [+-] digits], some digit
 * before the exponent. */
static bool ref_number_syntax(const char *s)
{
    size_t digits = 0;
    if (*s == '+' || *s == '-') s++;
    while (*s >= '0' && *s <= '9') s++, digits++;
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++) digits++;
    if (!digits) return false;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!(*s >= '0' && *s <= '9')) return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    return *s == 0;
}

static void numbers(const char *a)
{
    uint64_t u, r;
    bool ok = dcp_cli_parse_u64(a, &u), rok = ref_u64(a, &r);
    if (ok != rok || (ok && u != r)) abort();
    uint32_t u32;
    if (dcp_cli_u32("fuzz", "--n", a, 1, 4096, &u32) == 1 && (!rok || r != u32 || u32 < 1 || u32 > 4096)) abort();
    double d;
    bool range;
    ok = dcp_cli_parse_double(a, &d, &range);
    bool syntax = ref_number_syntax(a);
    if (ok && (!syntax || !isfinite(d) || d != strtod(a, NULL))) abort();
    if (syntax && !ok && !range) abort();
    float f;
    if (dcp_cli_f32("fuzz", "--temp", a, 0.0f, 2.0f, &f) == 1 && !(f >= 0.0f && f <= 2.0f)) abort();
    static const char *const choices[] = {"a2a", "ag_rs", NULL};
    int c = dcp_cli_choice("fuzz", "--dcp-comm-backend", a, choices);
    if (c >= 0 && strcmp(a, choices[c]) != 0) abort();
    if (c < 0 && (!strcmp(a, "a2a") || !strcmp(a, "ag_rs"))) abort();
}

int dcp_fuzz_options(const uint8_t *data, size_t size)
{
    static bool quiet;
    if (!quiet) dcp_cli_quiet(quiet = true);
    /* NUL-separated arguments, each its own exact-size allocation (ASan sees over-reads) */
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = strdup("dcp-vk-run");
    for (size_t i = 0; i <= size && argc < MAX_ARGS;) {
        size_t n = 0;
        while (i + n < size && data[i + n]) n++;
        if (i == size && argc > 1) break;
        char *a = malloc(n + 1);
        if (!a) break;
        memcpy(a, data + i, n);
        a[n] = 0;
        argv[argc++] = a;
        i += n + 1;
    }
    argv[argc] = NULL;
    for (int i = 1; i < argc; i++) numbers(argv[i]);
    run_options o;
    int rc = run_parse(argc, argv, &o);
    if (rc != 0 && rc != 2) abort(); /* usage errors exit 2 */
    if (rc == 0 && !o.help) {
        if (o.tp < 1 || o.dcp < 1 || o.block_size < 1 || o.prefill_chunk < 1 || !(o.temp >= 0.0f) ||
            !(o.top_p > 0.0f && o.top_p <= 1.0f) || !o.backend || !o.kv_dtype)
            abort();
        if (strcmp(o.backend, "a2a") && strcmp(o.backend, "ag_rs")) abort();
        if (strcmp(o.kv_dtype, "f16") && strcmp(o.kv_dtype, "f32")) abort();
        /* vLLM's TP/DCP rules against a few head layouts: allowed (0) or a usage error (2) */
        static const uint32_t heads[][2] = {{8, 4}, {32, 8}, {6, 1}, {64, 64}};
        for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++) {
            int v = run_validate(&o, heads[h][0], heads[h][1], "fuzz");
            if (v != 0 && v != 2) abort();
        }
    }
    for (int i = 0; i < argc; i++) free(argv[i]);
    return 0;
}
