/* UTF-8 sanitizer (include/dcpvk/utf8.h): a byte-at-a-time decoder of the well-formed sequences
 * of the Unicode standard (table 3-7), emitting whole characters and U+FFFD. */
#include "dcpvk/utf8.h"

#include <string.h>

static size_t put_fffd(char *out)
{
    memcpy(out, "\xef\xbf\xbd", 3);
    return 3;
}

/* Length of the character that lead byte c starts (2..4), or 0 if c never starts one. */
static uint8_t lead_length(unsigned char c)
{
    if (c >= 0xc2 && c <= 0xdf) return 2;
    if (c >= 0xe0 && c <= 0xef) return 3;
    if (c >= 0xf0 && c <= 0xf4) return 4;
    return 0;
}

/* Whether b may follow the held bytes: the second byte's range depends on the lead byte (no
 * overlong forms, no surrogates, nothing above U+10FFFF); later bytes are 80..BF. */
static int continues(const dcp_utf8_stream *s, unsigned char b)
{
    unsigned char lo = 0x80, hi = 0xbf;
    if (s->n_hold == 1) {
        switch (s->hold[0]) {
        case 0xe0: lo = 0xa0; break;
        case 0xed: hi = 0x9f; break;
        case 0xf0: lo = 0x90; break;
        case 0xf4: hi = 0x8f; break;
        default: break;
        }
    }
    return b >= lo && b <= hi;
}

size_t dcp_utf8_push(dcp_utf8_stream *s, const char *in, size_t n, char *out)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)in[i];
        if (s->n_hold) {
            if (continues(s, b)) {
                if (s->n_hold + 1 == s->need) { /* the character is complete */
                    memcpy(out + m, s->hold, s->n_hold);
                    m += s->n_hold;
                    out[m++] = (char)b;
                    s->n_hold = 0;
                } else {
                    s->hold[s->n_hold++] = b;
                }
                continue;
            }
            /* The held bytes are a maximal ill-formed subsequence; b starts afresh. */
            m += put_fffd(out + m);
            s->n_hold = 0;
        }
        if (b < 0x80) {
            out[m++] = (char)b;
        } else if ((s->need = lead_length(b)) != 0) {
            s->hold[0] = b;
            s->n_hold = 1;
        } else {
            m += put_fffd(out + m);
        }
    }
    return m;
}

size_t dcp_utf8_flush(dcp_utf8_stream *s, char *out)
{
    size_t m = s->n_hold ? put_fffd(out) : 0;
    s->n_hold = 0;
    return m;
}

size_t dcp_utf8_sanitize(const char *in, size_t n, char *out)
{
    dcp_utf8_stream s = DCP_UTF8_STREAM_INIT;
    size_t m = dcp_utf8_push(&s, in, n, out);
    return m + dcp_utf8_flush(&s, out + m);
}
