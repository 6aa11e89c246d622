/* IEEE half conversions (src/common/dtype.c) against a double-precision oracle: every half value
 * round-trips, and float -> half rounds to nearest even, overflows to infinity, keeps NaN. */
#include <math.h>
#include <string.h>

#include "dcpvk/dtype.h"
#include "testutil.h"

/* The value of half h computed from its fields in double. */
static double half_value(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    double v = exp == 0 ? ldexp(man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

static void test_every_half_round_trips(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dcp_f16_to_f32((uint16_t)h);
        double want = half_value((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(f));
            assert_true((dcp_f32_to_f16(f) & 0x7c00) == 0x7c00 && (dcp_f32_to_f16(f) & 0x3ff) != 0);
            continue;
        }
        if ((double)f != want) fail_msg("half 0x%04x -> %.10g, expected %.10g", h, f, want);
        if (dcp_f32_to_f16(f) != h) fail_msg("half 0x%04x -> %.10g -> 0x%04x", h, f, dcp_f32_to_f16(f));
    }
}

/* Nearest half by search over the finite halves, ties to the even one; beyond 65520: infinity. */
static uint16_t nearest_half(float f)
{
    double x = fabs((double)f);
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (x >= 65520.0) return sign | 0x7c00;
    uint16_t lo = 0, hi = 0x7bff; /* largest h with value <= x, by bisection */
    while (lo < hi) {
        uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if (half_value(mid) <= x) lo = mid; else hi = (uint16_t)(mid - 1);
    }
    if (lo == 0x7bff) return sign | lo;
    double a = half_value(lo), b = half_value((uint16_t)(lo + 1));
    uint16_t pick = (x - a < b - x) ? lo : (x - a > b - x) ? (uint16_t)(lo + 1) : ((lo & 1) ? (uint16_t)(lo + 1) : lo);
    return sign | pick;
}

static void test_rounding(void **state)
{
    (void)state;
    dcp_test_rng rng = {7};
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)dcp_test_rng_next(&rng);
        /* exponents around the half range: subnormals, normals, overflow */
        bits = (bits & 0x807fffffu) | ((uint32_t)(100 + (bits >> 23) % 50) << 23);
        float f;
        memcpy(&f, &bits, 4);
        uint16_t got = dcp_f32_to_f16(f), want = nearest_half(f);
        if (got != want) fail_msg("%.10g -> 0x%04x, expected 0x%04x", f, got, want);
    }
    /* Ties: halfway between 1 and the next half rounds to even (1); above it to the odd neighbour. */
    assert_int_equal(dcp_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(dcp_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(dcp_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(dcp_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(dcp_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(dcp_f32_to_f16(0x1p-25f), 0x0000);           /* tie to even zero */
    assert_int_equal(dcp_f32_to_f16(0x1p-25f + 0x1p-40f), 0x0001);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_half_round_trips),
        cmocka_unit_test(test_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
