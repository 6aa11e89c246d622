/* JSON-constrained decoding fuzz target (fuzz/more_fuzz_targets.h): the input up to its first NUL
 * is a JSON Schema (empty: json_object), the rest output bytes fed to the recognizer one at a time.
 * Invariants (a violation aborts): a rejected byte leaves the state as it was; feeding the accepted
 * bytes all at once gives the state fed one by one; finished implies can_end and that no byte is
 * accepted; a valid prefix is never a dead end (it can end or some byte continues it). */
#include <stdlib.h>
#include <string.h>

#include "dcpvk/json_constraint.h"
#include "more_fuzz_targets.h"

static bool some_byte(const dcp_json_state *st, dcp_json_state *tmp)
{
    for (unsigned c = 0; c < 256; c++) {
        const uint8_t b = (uint8_t)c;
        dcp_json_state_copy(tmp, st);
        if (dcp_json_state_feed(tmp, &b, 1)) return true;
    }
    return false;
}

int dcp_fuzz_json(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    const size_t sl = nul ? (size_t)(nul - data) : size;
    dcp_json_schema *s = NULL;
    if (dcp_json_schema_compile(sl ? (const char *)data : NULL, sl, &s) != DCP_OK) {
        if (s) abort(); /* a failure leaves no schema */
        return 0;
    }
    dcp_json_state *st = NULL, *tmp = NULL, *whole = NULL;
    if (dcp_json_state_create(s, &st) != DCP_OK || dcp_json_state_create(s, &tmp) != DCP_OK ||
        dcp_json_state_create(s, &whole) != DCP_OK)
        goto done;
    const uint8_t *out = nul ? nul + 1 : data + size;
    const size_t n = nul ? size - sl - 1 : 0;
    uint8_t *kept = malloc(n ? n : 1);
    if (!kept) goto done;
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) {
        dcp_json_state_copy(tmp, st);
        if (dcp_json_state_feed(st, out + i, 1)) {
            kept[nk++] = out[i];
        } else {
            /* unchanged: it accepts exactly what tmp accepts */
            const bool a = some_byte(st, whole), b = some_byte(tmp, whole);
            if (a != b || dcp_json_state_can_end(st) != dcp_json_state_can_end(tmp)) abort();
        }
        const bool fin = dcp_json_state_finished(st), end = dcp_json_state_can_end(st);
        if (fin && !end) abort();
        if (fin && some_byte(st, tmp)) abort();
        if (!end && !some_byte(st, tmp)) abort(); /* a dead end */
    }
    dcp_json_state *fresh = NULL;
    if (dcp_json_state_create(s, &fresh) == DCP_OK) {
        if (!dcp_json_state_feed(fresh, kept, nk)) abort();
        if (dcp_json_state_can_end(fresh) != dcp_json_state_can_end(st) ||
            dcp_json_state_finished(fresh) != dcp_json_state_finished(st))
            abort();
        dcp_json_state_destroy(fresh);
    }
    free(kept);
done:
    dcp_json_state_destroy(whole);
    dcp_json_state_destroy(tmp);
    dcp_json_state_destroy(st);
    dcp_json_schema_destroy(s);
    return 0;
}
