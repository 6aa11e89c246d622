/* Internal helpers to fail with a status and a formatted message (see include/dcpvk/status.h). */
#ifndef DCP_COMMON_ERROR_H
#define DCP_COMMON_ERROR_H

#include "dcpvk/status.h"

#if defined(__GNUC__)
#define DCP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DCP_PRINTF(a, b)
#endif

/* Sets this thread's last-error message and returns status, so that `return dcp_fail(...)` reads
 * naturally. */
dcp_status dcp_fail(dcp_status status, const char *fmt, ...) DCP_PRINTF(2, 3);

/* Prepends "prefix: " to the current message (adds context on the way out) and returns status. */
dcp_status dcp_fail_context(dcp_status status, const char *fmt, ...) DCP_PRINTF(2, 3);

/* Formats one message (a line, no newline) and passes it to the dcp_set_log_callback() receiver;
 * dropped where none is set. */
void dcp_log(const char *fmt, ...) DCP_PRINTF(1, 2);

/* Evaluates a dcp_status expression; on failure stores it in `st` and jumps to `fail`. */
#define DCP_TRY(expr)                                                                               \
    do {                                                                                           \
        st = (expr);                                                                               \
        if (st != DCP_OK) goto fail;                                                               \
    } while (0)

#endif
