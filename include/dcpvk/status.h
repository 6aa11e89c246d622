/* dcp-vk status codes and the thread-local last-error message.
 *
 * Every fallible library call returns a dcp_status (DCP_OK == 0). On failure the call also leaves
 * a message naming what was wrong (file and offset, option and allowed values, device and limit)
 * that dcp_last_error() returns on the same thread until the next failing call. */
#ifndef DCPVK_STATUS_H
#define DCPVK_STATUS_H

#include "dcpvk/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dcp_status {
    DCP_OK = 0,
    DCP_ERR_INVALID_ARGUMENT = 1, /* a parameter value, shape or index is out of its range */
    DCP_ERR_UNSUPPORTED = 2,      /* valid request this build or device does not support */
    DCP_ERR_NO_DEVICE = 3,        /* no Vulkan device, or a device index that does not exist */
    DCP_ERR_VULKAN = 4,           /* a Vulkan call failed */
    DCP_ERR_OUT_OF_MEMORY = 5,    /* a host or device allocation failed */
    DCP_ERR_OUT_OF_PAGES = 6,     /* a KV page pool has no free page */
    DCP_ERR_IO = 7,               /* a file could not be opened, mapped or written */
    DCP_ERR_FORMAT = 8,           /* a file is malformed */
    DCP_ERR_CONFIG = 9,           /* an inconsistent configuration (TP/DCP sizes, interleave) */
    DCP_ERR_MPI = 10,             /* an MPI call failed */
    DCP_ERR_INTERNAL = 11,        /* a bug in dcp-vk */
} dcp_status;

/* Short constant name of a status ("DCP_ERR_FORMAT"). Thread-safe. */
DCP_API const char *dcp_status_string(dcp_status status);

/* The message of the most recent failing dcp-vk call on this thread ("" if none). The pointer stays
 * valid until the next dcp-vk call on this thread. Thread-safe (thread-local storage). */
DCP_API const char *dcp_last_error(void);

/* Clears this thread's last-error message. */
DCP_API void dcp_clear_error(void);

/* Receives the library's messages that are not failures: warnings (a setting ignored, e.g. a
 * sliding window wider than the context) and Vulkan validation-layer warnings and errors. message
 * is one line without a newline, starting "dcp-vk: " ("dcp-vk: warning: ...", "dcp-vk: validation
 * error: ..."); it is valid during the call only. May be called from any thread, so fn must be
 * thread-safe. */
typedef void (*dcp_log_fn)(void *user, const char *message);

/* Sets the process-wide receiver of those messages (fn NULL: dropped, the default; the library
 * itself never prints). The apps set one that prints to stderr. Set it before the first other
 * dcp-vk call; not thread-safe against calls that may log. */
DCP_API void dcp_set_log_callback(dcp_log_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif
