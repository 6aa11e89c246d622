/* dcp-vk-bench's roofline in JSON (matmul and ops: a "results" array; attn and attn --mla: one
 * configuration per document; attn --dcp: one, its local decode's in a "local_roofline" member),
 * and dcp-vk-run's dispatches and host waits per decode step, as a user gets them: the command (after `--`) is run, its stdout parsed with cJSON and every field
 * checked for a sane value: positive and finite, and consistent with the yardsticks printed beside
 * it (roofline time = max(bytes / read rate, FLOPs / FMA rate), fraction = roofline / measured).
 * No speed is asserted.
 *   test_bench_json bench <dcp-vk-bench> <command> <args...>
 *   test_bench_json run <dcp-vk-run> <args...> */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "testutil.h"

static int g_argc;
static char **g_argv;

/* The number `name` of object o, which must be present, finite and > min (>= min when or_equal). */
static double number(const cJSON *o, const char *where, const char *name, double min, int or_equal)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsNumber(v)) fail_msg("%s: \"%s\" is missing or not a number", where, name);
    double x = v->valuedouble;
    if (!isfinite(x) || (or_equal ? x < min : x <= min))
        fail_msg("%s: \"%s\" = %g, expected a finite value %s %g", where, name, x, or_equal ? ">=" : ">", min);
    return x;
}

/* |a - b| within rel of |b| (the JSON prints 6 significant digits). */
static void close_to(const char *where, const char *what, double a, double b, double rel)
{
    if (!(fabs(a - b) <= rel * fabs(b))) fail_msg("%s: %s = %.9g, expected %.9g", where, what, a, b);
}

static cJSON *run_json(const char *const *argv)
{
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("%s exited %d:\n%s\n%s", argv[0], r.code, r.out, r.err);
    if (strstr(r.err, "alidation")) fail_msg("%s: validation messages:\n%s", argv[0], r.err);
    cJSON *j = cJSON_Parse(r.out);
    if (!j) fail_msg("%s: stdout is not one JSON document:\n%s", argv[0], r.out);
    dcp_test_result_free(&r);
    return j;
}

static void check_yardsticks(const cJSON *y, const char *where)
{
    if (!cJSON_IsObject(y)) fail_msg("%s: no \"yardsticks\" object", where);
    number(y, where, "stream_read_gbps", 0, 0);
    number(y, where, "fma_gflops", 0, 0);
    number(y, where, "fma_flops", 0, 0);
    number(y, where, "dispatch_us", 0, 0);
    number(y, where, "host_wait_us", 0, 0);
    number(y, where, "samples", 1, 1);
}

static void test_bench(void **state)
{
    (void)state;
    cJSON *j = run_json((const char *const *)g_argv + 2);
    check_yardsticks(cJSON_GetObjectItemCaseSensitive(j, "yardsticks"), "yardsticks");
    /* matmul and ops: a "results" array; attn (one configuration): the document is the result. */
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "results");
    cJSON *one = NULL;
    if (!res) {
        one = cJSON_CreateArray();
        cJSON_AddItemReferenceToArray(one, j);
        res = one;
    }
    if (!cJSON_IsArray(res) || cJSON_GetArraySize(res) == 0) fail_msg("no \"results\" array, or an empty one");
    const cJSON *item;
    int n = 0;
    cJSON_ArrayForEach(item, res)
    {
        const cJSON *r = item;
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(r, one ? "bench" : "kernel");
        if (!cJSON_IsString(k)) fail_msg("result %d: no \"%s\" name", n, one ? "bench" : "kernel");
        char where[160];
        snprintf(where, sizeof where, "result %d (%s)", n, k->valuestring);
        /* attn --dcp: the local decode's roofline is a member object. */
        const cJSON *local = cJSON_GetObjectItemCaseSensitive(r, "local_roofline");
        if (local) {
            if (!cJSON_IsObject(local)) fail_msg("%s: \"local_roofline\" is not an object", where);
            r = local;
        }
        double bytes = number(r, where, "bytes", 0, 0), flops = number(r, where, "flops", 0, 1);
        double measured = number(r, where, "measured_us", 0, 0), roof = number(r, where, "roofline_us", 0, 0);
        double frac = number(r, where, "of_roofline", 0, 0), intensity = number(r, where, "intensity", 0, 1);
        double read = number(r, where, "read_gbps", 0, 0), fma = number(r, where, "fma_gflops", 0, 0);
        number(r, where, "achieved_gbps", 0, 0);
        number(r, where, "achieved_gflops", 0, 1);
        const cJSON *bound = cJSON_GetObjectItemCaseSensitive(r, "bound");
        if (!cJSON_IsString(bound)) fail_msg("%s: no \"bound\"", where);
        double t_read = bytes / read * 1e-3, t_fma = flops / fma * 1e-3; /* microseconds */
        close_to(where, "roofline_us", roof, t_read > t_fma ? t_read : t_fma, 1e-4);
        if (strcmp(bound->valuestring, t_read >= t_fma ? "read" : "fma") != 0 && fabs(t_read - t_fma) > 1e-4 * roof)
            fail_msg("%s: bound \"%s\" but read %g us, FMA %g us", where, bound->valuestring, t_read, t_fma);
        close_to(where, "of_roofline", frac, roof / measured, 1e-4);
        close_to(where, "intensity", intensity, flops / bytes, 1e-4);
        n++;
    }
    printf("%d results, every roofline field sane\n", n);
    cJSON_Delete(one);
    cJSON_Delete(j);
}

static void test_run(void **state)
{
    (void)state;
    cJSON *j = run_json((const char *const *)g_argv + 2);
    const char *where = "dcp-vk-run --json";
    double d = number(j, where, "decode_step_dispatches", 0, 0);
    double rd = number(j, where, "decode_step_rank_dispatches", 0, 0);
    double w = number(j, where, "decode_step_host_waits", 1, 1);
    double rounds = number(j, where, "decode_step_rounds", 1, 1);
    if (rd > d) fail_msg("%s: the busiest rank's %g dispatches exceed the step's %g", where, rd, d);
    /* The host waits after every round, or once when the rounds wait on each other on the GPU. */
    if (w != rounds && w != 1) fail_msg("%s: %g host waits in %g rounds", where, w, rounds);
    printf("decode step: %g dispatches (busiest rank %g), %g host waits, %g rounds\n", d, rd, w, rounds);
    cJSON_Delete(j);
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "bench") != 0 && strcmp(argv[1], "run") != 0)) {
        fprintf(stderr, "usage: %s bench|run <program> <args...>\n", argv[0]);
        return 2;
    }
    g_argc = argc;
    g_argv = argv;
    const struct CMUnitTest bench[] = {cmocka_unit_test(test_bench)};
    const struct CMUnitTest run[] = {cmocka_unit_test(test_run)};
    if (strcmp(argv[1], "bench") == 0) return cmocka_run_group_tests(bench, NULL, NULL);
    return cmocka_run_group_tests(run, NULL, NULL);
}
