/* UTF-8 sanitizer for text that is printed: bytes in, valid UTF-8 out. Streaming, so that a
 * character split over several pieces (tokens) comes out whole: the bytes of an incomplete
 * character are held until the next push completes it. Bytes that cannot form a character
 * become U+FFFD, one per maximal ill-formed subsequence (Unicode's "maximal subpart" practice):
 * a stray continuation byte, a byte never valid in UTF-8 (C0, C1, F5..FF), an overlong or
 * surrogate form, or a character cut short by a byte that does not continue it. Valid UTF-8
 * passes through unchanged. Used by the detokenizer and by the apps for every printed text.
 * Thread-safe: all state is in the caller's dcp_utf8_stream. */
#ifndef DCPVK_UTF8_H
#define DCPVK_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "dcpvk/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_utf8_stream {
    unsigned char hold[3]; /* leading bytes of an incomplete character */
    uint8_t n_hold;        /* bytes held (0: between characters) */
    uint8_t need;          /* length of the held character */
} dcp_utf8_stream;

#define DCP_UTF8_STREAM_INIT {{0, 0, 0}, 0, 0}

/* Room one push of n bytes (or one flush, n = 0) may write: each byte gives at most 3 bytes
 * (U+FFFD), plus the held bytes it completes. */
#define DCP_UTF8_OUT_MAX(n) (3 * ((size_t)(n) + 3))

/* Appends the sanitized form of in[0, n) to out (room for DCP_UTF8_OUT_MAX(n) bytes); returns
 * the bytes written. The tail of an incomplete character is held in s for the next push. */
DCP_API size_t dcp_utf8_push(dcp_utf8_stream *s, const char *in, size_t n, char *out);
/* Ends the stream: a held incomplete character becomes U+FFFD. Returns the bytes written (0 or
 * 3) and leaves s ready for a new stream. */
DCP_API size_t dcp_utf8_flush(dcp_utf8_stream *s, char *out);
/* Whole text at once: push then flush. out has room for DCP_UTF8_OUT_MAX(n) bytes. */
DCP_API size_t dcp_utf8_sanitize(const char *in, size_t n, char *out);

#ifdef __cplusplus
}
#endif
#endif
