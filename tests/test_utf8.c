/* The UTF-8 sanitizer (src/text/utf8.c) that every printed text goes through: valid UTF-8 passes
 * unchanged; ill-formed bytes become U+FFFD, one per maximal subpart, as the Unicode standard
 * recommends (its own example, chapter 3 "U+FFFD Substitution of Maximal Subparts", is checked
 * below); a character split over several pushes (tokens) comes out whole; the output always is
 * valid UTF-8 and within DCP_UTF8_OUT_MAX. CPU only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/utf8.h"
#include "testutil.h"

#define FFFD "\xef\xbf\xbd"

/* Whole-text sanitize of in (n bytes) must give want (NUL-terminated). */
static void expect(const char *in, size_t n, const char *want)
{
    char *out = malloc(DCP_UTF8_OUT_MAX(n));
    assert_non_null(out);
    size_t m = dcp_utf8_sanitize(in, n, out);
    if (m != strlen(want) || memcmp(out, want, m)) {
        printf("input:");
        for (size_t i = 0; i < n; i++) printf(" %02x", (unsigned char)in[i]);
        printf("\noutput:");
        for (size_t i = 0; i < m; i++) printf(" %02x", (unsigned char)out[i]);
        printf("\n");
        fail_msg("sanitized output differs (%zu bytes, want %zu)", m, strlen(want));
    }
    free(out);
}
#define EXPECT(in, want) expect(in, sizeof(in) - 1, want)

static void test_valid_passes(void **state)
{
    (void)state;
    EXPECT("", "");
    EXPECT("plain ASCII, tabs\tand\nnewlines", "plain ASCII, tabs\tand\nnewlines");
    /* the boundaries of each length: U+007F, U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFD, U+FFFF,
     * U+10000, U+10FFFF */
    static const char b[] = "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbd\xef\xbf\xbf"
                            "\xf0\x90\x80\x80\xf4\x8f\xbf\xbf";
    EXPECT(b, b);
    EXPECT("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xbd\xa0\xe5\xa5\xbd",
           "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xbd\xa0\xe5\xa5\xbd");
}

static void test_ill_formed(void **state)
{
    (void)state;
    /* The Unicode standard's example of maximal-subpart substitution (Unicode 15, section 3.9,
     * table 3-8): 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d. */
    EXPECT("\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64", "a" FFFD FFFD FFFD "b" FFFD "c" FFFD FFFD "d");
    /* Bytes never valid in UTF-8, one U+FFFD each. */
    EXPECT("\xc0\xc1\xf5\xf8\xfe\xff", FFFD FFFD FFFD FFFD FFFD FFFD);
    /* Stray continuation bytes. */
    EXPECT("x\x80y\xbf", "x" FFFD "y" FFFD);
    /* Overlong forms, surrogates and code points above U+10FFFF: the lead byte cannot be followed by
     * that byte, so every byte is its own maximal subpart (the standard's table 3-9 cases). */
    EXPECT("\xc0\xaf", FFFD FFFD);
    EXPECT("\xe0\x80\xaf", FFFD FFFD FFFD);
    EXPECT("\xed\xa0\x80", FFFD FFFD FFFD);
    EXPECT("\xf0\x80\x80\xaf", FFFD FFFD FFFD FFFD);
    EXPECT("\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD);
    /* A character cut short by a byte that does not continue it: one U+FFFD, then that byte. */
    EXPECT("\xe2\x82" "A", FFFD "A");
    EXPECT("\xf0\x9f\x98" "\xc3\xa9", FFFD "\xc3\xa9");
    /* Cut short by the end of the text. */
    EXPECT("ok\xf0\x9f\x98", "ok" FFFD);
    EXPECT("\xc3", FFFD);
}

/* Pushes in[0, n) in pieces cut at the given positions (ascending, < n), then flushes. */
static size_t push_split(const char *in, size_t n, const size_t *cuts, size_t ncuts, char *out)
{
    dcp_utf8_stream s = DCP_UTF8_STREAM_INIT;
    size_t m = 0, at = 0;
    for (size_t c = 0; c <= ncuts; c++) {
        size_t end = c < ncuts ? cuts[c] : n;
        m += dcp_utf8_push(&s, in + at, end - at, out + m);
        at = end;
    }
    return m + dcp_utf8_flush(&s, out + m);
}

static void test_split_over_pieces(void **state)
{
    (void)state;
    /* Token pieces that split characters: held until complete, nothing emitted early. */
    dcp_utf8_stream s = DCP_UTF8_STREAM_INIT;
    char out[64];
    assert_int_equal(dcp_utf8_push(&s, "a\xf0\x9f", 3, out), 1);
    assert_memory_equal(out, "a", 1);
    assert_int_equal(dcp_utf8_push(&s, "\x98", 1, out), 0);
    assert_int_equal(dcp_utf8_push(&s, "\x80" "b", 2, out), 5);
    assert_memory_equal(out, "\xf0\x9f\x98\x80" "b", 5);
    assert_int_equal(dcp_utf8_flush(&s, out), 0);
    /* an incomplete character at the end of the stream becomes U+FFFD at flush, once */
    assert_int_equal(dcp_utf8_push(&s, "\xe2\x82", 2, out), 0);
    assert_int_equal(dcp_utf8_flush(&s, out), 3);
    assert_memory_equal(out, FFFD, 3);
    assert_int_equal(dcp_utf8_flush(&s, out), 0);
    /* a held lead byte that the next piece does not continue */
    assert_int_equal(dcp_utf8_push(&s, "\xe4", 1, out), 0);
    assert_int_equal(dcp_utf8_push(&s, "x", 1, out), 4);
    assert_memory_equal(out, FFFD "x", 4);

    /* Every split of a text of mixed valid and ill-formed bytes gives the whole-text result. */
    static const char text[] = "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x82" "A\x80\xf4\x8f\xbf\xbf\xed\xa0\x80z";
    const size_t n = sizeof text - 1;
    char whole[DCP_UTF8_OUT_MAX(sizeof text)], split[DCP_UTF8_OUT_MAX(sizeof text)];
    size_t wm = dcp_utf8_sanitize(text, n, whole);
    for (size_t a = 1; a < n; a++) {
        for (size_t b = a; b < n; b++) {
            size_t cuts[2] = {a, b};
            size_t m = push_split(text, n, cuts, 2, split);
            if (m != wm || memcmp(split, whole, m)) fail_msg("cut at %zu and %zu differs from the whole text", a, b);
        }
    }
}

/* Random bytes (biased towards UTF-8's interesting bytes), pushed one byte at a time and in random
 * pieces: same output as the whole text, valid UTF-8, within the size bound, and valid input
 * comes back unchanged. */
static void test_random(void **state)
{
    (void)state;
    static const unsigned char pick[] = {0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1,
                                         0xc2, 0xdf, 0xe0, 0xe1, 0xed, 0xef, 0xf0, 0xf1, 0xf4, 0xf5, 0xff};
    dcp_test_rng rng = {0x5eed};
    enum { N = 64 };
    char in[N], whole[DCP_UTF8_OUT_MAX(N) + 8], piecewise[DCP_UTF8_OUT_MAX(N) + 8];
    int valid_inputs = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = (size_t)(dcp_test_rng_next(&rng) % (N + 1));
        for (size_t i = 0; i < n; i++) {
            uint64_t r = dcp_test_rng_next(&rng);
            in[i] = (char)(r & 1 ? pick[(r >> 1) % sizeof pick] : (unsigned char)(r >> 8));
        }
        memset(whole, 0x5a, sizeof whole);
        size_t wm = dcp_utf8_sanitize(in, n, whole);
        assert_true(wm <= DCP_UTF8_OUT_MAX(n));
        for (size_t i = DCP_UTF8_OUT_MAX(n); i < sizeof whole; i++) assert_int_equal((unsigned char)whole[i], 0x5a);
        if (!dcp_test_valid_utf8(whole, wm)) fail_msg("iteration %d: output is not valid UTF-8", iter);
        if (dcp_test_valid_utf8(in, n)) {
            valid_inputs++;
            assert_int_equal(wm, n);
            assert_memory_equal(whole, in, n);
        }
        size_t cuts[N], nc = 0;
        for (size_t i = 1; i < n; i++)
            if (iter % 2 == 0 || dcp_test_rng_next(&rng) % 3 == 0) cuts[nc++] = i;
        size_t pm = push_split(in, n, cuts, nc, piecewise);
        if (pm != wm || memcmp(piecewise, whole, wm)) fail_msg("iteration %d: pieces differ from the whole text", iter);
    }
    printf("20000 random texts, %d of them valid UTF-8\n", valid_inputs);
    assert_true(valid_inputs > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_passes),
        cmocka_unit_test(test_ill_formed),
        cmocka_unit_test(test_split_over_pieces),
        cmocka_unit_test(test_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
