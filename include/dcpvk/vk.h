/* dcp-vk devices: a context owns a Vulkan instance and a list of logical devices; each device owns
 * its dispatch table, queue, command pool, descriptor pools, pipeline cache and pipelines.
 *
 * Threading: a context and its devices may be used from one thread at a time; distinct contexts are
 * independent. */
#ifndef DCPVK_VK_H
#define DCPVK_VK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcpvk/export.h"
#include "dcpvk/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_context dcp_context;
typedef struct dcp_device dcp_device;

typedef struct dcp_context_config {
    /* Comma-separated physical-device indices, e.g. "0,0,1". A repeated index creates another
     * logical device on the same physical device. NULL: $DCP_VK_DEVICES, else every physical
     * device once. */
    const char *devices;
    /* Khronos validation layer: 0 off; 1 on; 2 on with GPU-assisted validation (every shader's
     * buffer accesses bounds-checked as it runs; slow); -1 (default) from $DCP_VK_VALIDATION (0,
     * 1 or gpuav; off if unset). 1 means 2 when $DCP_VK_VALIDATION is gpuav, so that a test
     * suite that asks for validation runs GPU-assisted under that variable. Validation messages
     * are printed to stderr and counted (dcp_context_validation_count). */
    int validation;
    /* Robust buffer access: 1 on, 0 off, -1 (default) on whenever validation is on, except
     * GPU-assisted (which reports out-of-bounds accesses only without it). */
    int robust_access;
    /* Vulkan device groups: 1 creates every VkDevice with VkDeviceGroupDeviceCreateInfo over its
     * physical device's group (logical devices on distinct members of one group share that
     * VkDevice, as device indices; a group of one gives each its own), 0 never, -1 (default) from
     * $DCP_VK_DEVICE_GROUPS (0 or 1), else 1 only when the list names two or more distinct members
     * of one group of several physical devices. */
    int device_groups;
} dcp_context_config;

/* The largest minStorageBufferOffsetAlignment Vulkan allows a device (bytes): offsets that are
 * multiples of it suit every device, and $DCP_VK_MIN_STORAGE_ALIGN may ask for up to it. */
#define DCP_STORAGE_ALIGN_MAX 256u

#define DCP_CONTEXT_CONFIG_DEFAULT {.devices = NULL, .validation = -1, .robust_access = -1, .device_groups = -1}

enum { DCP_MAX_HEAPS = 16 };

/* What dcp-vk records about one device (all values read from the driver). */
typedef struct dcp_device_info {
    int physical_index;              /* index in vkEnumeratePhysicalDevices order */
    int logical_index;               /* index of this device in its context */
    char name[256];                  /* deviceName */
    char driver_name[256];           /* VkPhysicalDeviceDriverProperties::driverName */
    char driver_info[256];           /* driverInfo (driver version string) */
    const char *type;                /* "discrete-gpu", "integrated-gpu", "cpu", ... */
    uint32_t vendor_id, device_id;
    uint32_t api_version;            /* VK_MAKE_API_VERSION encoding */
    uint32_t driver_version;         /* vendor encoding */
    uint8_t device_uuid[16];
    uint32_t subgroup_size;          /* invocations */
    uint32_t min_subgroup_size;      /* smallest subgroup a compute dispatch may get */
    bool subgroup_arithmetic;        /* compute shaders have subgroup arithmetic ops */
    bool subgroup_shuffle;           /* compute shaders have subgroup shuffles */
    bool matmul_lane_rows;           /* matmul's lanes each own whole rows and share x by shuffles
                                        (CPU drivers, whose lanes load one at a time); else a
                                        subgroup's lanes split each row (GPUs).
                                        $DCP_VK_MATMUL_LAYOUT=rows|split forces one */
    bool nonuniform_indexing;        /* storage-buffer arrays take non-uniform indices */
    bool kv_multi_segment;           /* a KV pool may span several buffers (non-uniform indexing
                                        and enough storage-buffer bindings per stage); else pools
                                        are limited to one buffer */
    uint64_t max_storage_buffer_range; /* bytes */
    uint64_t min_storage_offset_alignment; /* bytes every storage-buffer binding offset is a multiple of:
                                        minStorageBufferOffsetAlignment, or the larger value of
                                        $DCP_VK_MIN_STORAGE_ALIGN (a power of two) so that a CPU driver
                                        proves the code honours a GPU's stricter one (256 on some) */
    uint64_t max_allocation_size;    /* bytes */
    uint64_t max_buffer_size;        /* bytes (maintenance4; else max_allocation_size) */
    uint32_t max_shared_memory;      /* bytes per workgroup */
    uint32_t max_workgroup_invocations;
    uint32_t max_workgroup_size[3];
    uint32_t max_push_constants;     /* bytes */
    uint32_t max_storage_buffers_per_stage;
    float timestamp_period_ns;       /* nanoseconds per timestamp tick; 0 if no timestamps */
    uint32_t heap_count;
    uint64_t heap_size[DCP_MAX_HEAPS];  /* bytes */
    bool heap_device_local[DCP_MAX_HEAPS];
    bool has_external_memory_host;   /* VK_EXT_external_memory_host is enabled */
    bool has_memory_budget;          /* VK_EXT_memory_budget is enabled (dcp_device_memory_budget) */
    uint32_t physical_group_size;    /* physical devices in this device's Vulkan device group */
    uint8_t driver_uuid[16];         /* VkPhysicalDeviceIDProperties::driverUUID: with device_uuid,
                                        what decides whether opaque handles can be shared */
    uint32_t mem_export;             /* DCP_HANDLE_* bits: buffer memory this device exports */
    uint32_t mem_import;             /* DCP_HANDLE_* bits: buffer memory this device imports */
    uint32_t sem_export;             /* DCP_HANDLE_* bits: semaphores (opaque fd: timeline; sync fd:
                                        binary) this device exports */
    uint32_t sem_import;             /* DCP_HANDLE_* bits: semaphores this device imports */
    uint32_t timeline_semaphore;     /* 1 if timeline semaphores are enabled */
    uint32_t group_device_count;     /* physical devices of the VkDevice this device runs on: 0 when it
                                        was created without VkDeviceGroupDeviceCreateInfo, else >= 1 */
    uint32_t group_device_index;     /* this device's index in that VkDevice (device mask bit) */
} dcp_device_info;

/* External handle kinds (bits of dcp_device_info's mem_* and sem_* masks). */
enum {
    DCP_HANDLE_OPAQUE_FD = 1, /* same physical device only (equal device and driver UUIDs) */
    DCP_HANDLE_DMA_BUF = 2,   /* Linux dma-buf, between devices of different drivers too */
    DCP_HANDLE_SYNC_FD = 4,   /* semaphores: a sync file (binary semaphore payload) */
    DCP_HANDLE_HOST = 8,      /* memory: host allocation (VK_EXT_external_memory_host), import only */
};

/* Creates the instance and the logical devices that config names. Returns DCP_ERR_NO_DEVICE when
 * there is no Vulkan device or an index does not exist (the message lists what exists).
 * Destroy with dcp_context_destroy. */
DCP_API dcp_status dcp_context_create(const dcp_context_config *config, dcp_context **out);

/* Waits for every device to go idle and destroys them, then the instance. NULL is allowed. Every
 * buffer and command created from the context must be destroyed first. */
DCP_API void dcp_context_destroy(dcp_context *ctx);

DCP_API int dcp_context_device_count(const dcp_context *ctx);
/* The i-th logical device (0 <= i < count); owned by the context. */
DCP_API dcp_device *dcp_context_device(const dcp_context *ctx, int i);
/* Number of physical devices the instance sees. */
DCP_API int dcp_context_physical_device_count(const dcp_context *ctx);
/* Validation-layer messages seen so far (warnings and errors); tests require 0. */
DCP_API uint64_t dcp_context_validation_count(const dcp_context *ctx);

DCP_API const dcp_device_info *dcp_device_get_info(const dcp_device *dev);
DCP_API dcp_context *dcp_device_context(const dcp_device *dev);

/* Parses a device list "0,0,1" into indices. Returns DCP_ERR_INVALID_ARGUMENT naming the bad
 * entry. *count receives the number of entries (at most max). */
DCP_API dcp_status dcp_parse_device_list(const char *list, int *indices, int max, int *count);

/* ---- buffers ------------------------------------------------------------------------------- */

typedef struct dcp_buffer dcp_buffer;

typedef enum dcp_memory {
    DCP_MEMORY_DEVICE = 0, /* device-local, not mapped; filled by upload or shaders */
    DCP_MEMORY_HOST = 1,   /* host-visible, coherent, persistently mapped (dcp_buffer_map) */
} dcp_memory;

/* Creates a storage buffer of size bytes (> 0, at most the device's max storage-buffer range,
 * since every buffer is bindable whole). Destroy with dcp_buffer_destroy before the device. */
DCP_API dcp_status dcp_buffer_create(dcp_device *dev, uint64_t size, dcp_memory memory, dcp_buffer **out);
DCP_API void dcp_buffer_destroy(dcp_buffer *buf);
/* Bytes of buf (0 for NULL). */
DCP_API uint64_t dcp_buffer_size(const dcp_buffer *buf);

/* ---- memory accounting ---------------------------------------------------------------------- */

/* Bytes of the buffers dcp_buffer_create has made on dev and not destroyed (their sizes as
 * requested; imported host memory is not counted). */
DCP_API uint64_t dcp_device_memory_allocated(const dcp_device *dev);
/* Bytes of the staging buffer dev keeps once it has uploaded or downloaded `largest` bytes at once
 * (at least 1 MiB, at most 64 MiB or the storage-buffer range): the size dcp_buffer_upload uses. */
DCP_API uint64_t dcp_device_staging_bytes(const dcp_device *dev, uint64_t largest);

/* What a device may still allocate, for checking a configuration before allocating it. */
typedef struct dcp_memory_budget {
    uint64_t heap_size;   /* bytes of the heap device-local buffers come from */
    uint64_t available;   /* bytes this process may still allocate there: the heap size less what
                           * this context's devices on the same physical device hold, or the
                           * driver's budget less the process's usage (VK_EXT_memory_budget); for a
                           * CPU device (host memory) also at most the address-space limit
                           * (RLIMIT_AS, less the address space in use), the cgroup's memory.max
                           * less its usage and MemAvailable, each less 128 MiB the driver needs
                           * for itself (shader compilation, threads) */
    char source[96];      /* what set `available`, for messages, e.g. "RLIMIT_AS (ulimit -v)" */
} dcp_memory_budget;
/* Fills *out for dev. Reads the driver and, for CPU devices, /proc and /sys; never fails. */
DCP_API void dcp_device_memory_budget(const dcp_device *dev, dcp_memory_budget *out);
DCP_API dcp_device *dcp_buffer_device(const dcp_buffer *buf);
/* Host pointer of a DCP_MEMORY_HOST buffer; NULL for device memory. */
DCP_API void *dcp_buffer_map(dcp_buffer *buf);
/* Synchronous copies through a staging buffer (or directly for host memory). Range-checked. */
DCP_API dcp_status dcp_buffer_upload(dcp_buffer *buf, uint64_t offset, const void *data, uint64_t size);
DCP_API dcp_status dcp_buffer_download(dcp_buffer *buf, uint64_t offset, void *data, uint64_t size);
DCP_API dcp_status dcp_buffer_fill(dcp_buffer *buf, uint64_t offset, uint64_t size, uint32_t value);

/* ---- command recording and submission ------------------------------------------------------ */

typedef struct dcp_cmd dcp_cmd;

/* A command buffer of one device, in the recording state after creation and after reset. Owns the
 * descriptor sets and timestamp queries of what was recorded. Destroy before its device. */
DCP_API dcp_status dcp_cmd_create(dcp_device *dev, dcp_cmd **out);
DCP_API void dcp_cmd_destroy(dcp_cmd *cmd);
DCP_API dcp_device *dcp_cmd_device(const dcp_cmd *cmd);
/* Drops everything recorded and starts recording again. */
DCP_API dcp_status dcp_cmd_reset(dcp_cmd *cmd);
/* Compute dispatches recorded since the last reset (kept while the recording is resubmitted). */
DCP_API uint32_t dcp_cmd_dispatches(const dcp_cmd *cmd);
/* Ends recording (once) and submits; dcp_cmd_wait waits for completion. A submitted command may
 * be submitted again after it completed (the recording is kept). */
DCP_API dcp_status dcp_cmd_submit(dcp_cmd *cmd);
DCP_API dcp_status dcp_cmd_wait(dcp_cmd *cmd);
/* Submit and wait. */
DCP_API dcp_status dcp_cmd_run(dcp_cmd *cmd);
/* Submits cmds[0..n) (one per device, each on its own queue), then waits for all of them: the
 * devices run side by side. On failure waits for every command already submitted. */
DCP_API dcp_status dcp_cmd_run_all(dcp_cmd *const *cmds, uint32_t n);

/* Full memory barrier between compute and transfer work recorded before and after it. */
DCP_API void dcp_cmd_barrier(dcp_cmd *cmd);
/* Barrier: compute and transfer writes recorded before -> host reads (of host-visible memory)
 * after the command completes. */
DCP_API void dcp_cmd_barrier_host(dcp_cmd *cmd);
DCP_API dcp_status dcp_cmd_copy(dcp_cmd *cmd, dcp_buffer *src, uint64_t src_offset, dcp_buffer *dst,
                                uint64_t dst_offset, uint64_t size);
DCP_API dcp_status dcp_cmd_fill(dcp_cmd *cmd, dcp_buffer *dst, uint64_t offset, uint64_t size,
                                uint32_t value);
/* Records a timestamp and returns its slot in *slot (at most 64 per recording). */
DCP_API dcp_status dcp_cmd_timestamp(dcp_cmd *cmd, uint32_t *slot);
/* After completion: nanoseconds between timestamp slots a and b. */
DCP_API dcp_status dcp_cmd_elapsed_ns(dcp_cmd *cmd, uint32_t a, uint32_t b, double *ns);

#ifdef __cplusplus
}
#endif
#endif
