/* Thread-local last-error message, the status names and the log receiver. */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { DCP_ERROR_MAX = 1024 };
static _Thread_local char last_error[DCP_ERROR_MAX];

const char *dcp_status_string(dcp_status status)
{
    switch (status) {
    case DCP_OK: return "DCP_OK";
    case DCP_ERR_INVALID_ARGUMENT: return "DCP_ERR_INVALID_ARGUMENT";
    case DCP_ERR_UNSUPPORTED: return "DCP_ERR_UNSUPPORTED";
    case DCP_ERR_NO_DEVICE: return "DCP_ERR_NO_DEVICE";
    case DCP_ERR_VULKAN: return "DCP_ERR_VULKAN";
    case DCP_ERR_OUT_OF_MEMORY: return "DCP_ERR_OUT_OF_MEMORY";
    case DCP_ERR_OUT_OF_PAGES: return "DCP_ERR_OUT_OF_PAGES";
    case DCP_ERR_IO: return "DCP_ERR_IO";
    case DCP_ERR_FORMAT: return "DCP_ERR_FORMAT";
    case DCP_ERR_CONFIG: return "DCP_ERR_CONFIG";
    case DCP_ERR_MPI: return "DCP_ERR_MPI";
    case DCP_ERR_INTERNAL: return "DCP_ERR_INTERNAL";
    }
    return "DCP_ERR_UNKNOWN";
}

static dcp_log_fn log_fn;
static void *log_user;

void dcp_set_log_callback(dcp_log_fn fn, void *user)
{
    log_fn = fn;
    log_user = user;
}

void dcp_log(const char *fmt, ...)
{
    if (!log_fn) return;
    char msg[4 * DCP_ERROR_MAX]; /* validation messages run long */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(log_user, msg);
}

const char *dcp_last_error(void) { return last_error; }

void dcp_clear_error(void) { last_error[0] = '\0'; }

dcp_status dcp_fail(dcp_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

dcp_status dcp_fail_context(dcp_status status, const char *fmt, ...)
{
    char prefix[DCP_ERROR_MAX];
    char old[DCP_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof last_error - 3) n = sizeof last_error - 3;
    memcpy(last_error, prefix, n);
    memcpy(last_error + n, ": ", 2);
    size_t rest = sizeof last_error - n - 3;
    size_t m = strnlen(old, rest);
    memcpy(last_error + n + 2, old, m);
    last_error[n + 2 + m] = '\0';
    return status;
}
