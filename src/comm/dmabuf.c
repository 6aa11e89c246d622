/* The dma-buf negotiation between two devices of one process (different GPUs): the receiver
 * exports a probe buffer as a dma-buf, the sender imports it (vkGetMemoryFdPropertiesKHR says
 * whether and as what), then a probe times the sender's copies into it against the host-memory
 * path (the sender's copy into imported host memory plus the receiver's copy out of it). The
 * kernel may place an imported dma-buf in system RAM, so only a faster probe makes it worth it. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "comm/select.h"
#include "common/error.h"
#include "vk/external.h"
#include "vk/hostmem.h"

enum { PROBE_BYTES = 4u << 20, PROBE_RUNS = 3 };

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Best of PROBE_RUNS of a copy of PROBE_BYTES from src to dst on cmd's device (wall clock, ns). */
static dcp_status time_copy(dcp_cmd *cmd, dcp_buffer *src, dcp_buffer *dst, double *ns)
{
    dcp_status st = DCP_OK;
    *ns = 0;
    for (int r = 0; r <= PROBE_RUNS; r++) { /* run 0 warms up */
        DCP_TRY(dcp_cmd_reset(cmd));
        DCP_TRY(dcp_cmd_copy(cmd, src, 0, dst, 0, PROBE_BYTES));
        double t0 = now_ns();
        DCP_TRY(dcp_cmd_run(cmd));
        double t = now_ns() - t0;
        if (r > 0 && (*ns == 0 || t < *ns)) *ns = t;
    }
fail:
    return st;
}

dcp_status dcp_comm_dmabuf_negotiate(dcp_device *exporter, dcp_device *importer, dcp_dmabuf_verdict *verdict,
                                     char *why, size_t cap)
{
    const dcp_device_info *e = dcp_device_get_info(exporter), *m = dcp_device_get_info(importer);
    dcp_buffer *probe = NULL, *imported = NULL, *src = NULL, *host_in = NULL, *host_out = NULL, *dst = NULL;
    dcp_cmd *cmd_i = NULL, *cmd_e = NULL;
    void *host = NULL;
    dcp_status st = DCP_OK;
    *verdict = DCP_DMABUF_REFUSED;
    if (!(e->mem_export & DCP_HANDLE_DMA_BUF)) {
        snprintf(why, cap, "dma-buf refused: device %d (%s) cannot export dma-buf memory (VK_EXT_external_memory_dma_buf "
                           "export of storage buffers)", e->logical_index, e->name);
        return DCP_OK;
    }
    if (!(m->mem_import & DCP_HANDLE_DMA_BUF)) {
        snprintf(why, cap, "dma-buf refused: device %d (%s) cannot import dma-buf memory", m->logical_index, m->name);
        return DCP_OK;
    }
    int fd = -1;
    st = dcp_buffer_create_exportable(exporter, PROBE_BYTES, DCP_MEMORY_DEVICE, DCP_HANDLE_DMA_BUF, &probe);
    if (st == DCP_OK) st = dcp_buffer_export_fd(probe, DCP_HANDLE_DMA_BUF, &fd);
    if (st == DCP_OK)
        st = dcp_buffer_import_fd(importer, DCP_HANDLE_DMA_BUF, fd, dcp_buffer_alloc_size(probe), 0, PROBE_BYTES,
                                  &imported);
    if (st != DCP_OK) {
        snprintf(why, cap, "dma-buf refused: %s", dcp_last_error());
        dcp_clear_error();
        goto done;
    }
    /* The probe: the sender's copy into the dma-buf, against host memory in and out. */
    uint64_t align = 4096, a;
    if (dcp_vk_host_import_alignment(importer, &a) == DCP_OK && a > align) align = a;
    if (dcp_vk_host_import_alignment(exporter, &a) == DCP_OK && a > align) align = a;
    dcp_clear_error();
    double t_dma = 0, t_in = 0, t_out = 0;
    host = aligned_alloc(align, PROBE_BYTES);
    st = host ? DCP_OK : dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    if (st == DCP_OK) st = dcp_buffer_create(importer, PROBE_BYTES, DCP_MEMORY_DEVICE, &src);
    if (st == DCP_OK) st = dcp_buffer_create(exporter, PROBE_BYTES, DCP_MEMORY_DEVICE, &dst);
    if (st == DCP_OK) st = dcp_buffer_import_host(importer, host, PROBE_BYTES, &host_in);
    if (st == DCP_OK) st = dcp_buffer_import_host(exporter, host, PROBE_BYTES, &host_out);
    if (st == DCP_OK) st = dcp_cmd_create(importer, &cmd_i);
    if (st == DCP_OK) st = dcp_cmd_create(exporter, &cmd_e);
    if (st == DCP_OK) st = time_copy(cmd_i, src, imported, &t_dma);
    if (st == DCP_OK) st = time_copy(cmd_i, src, host_in, &t_in);
    if (st == DCP_OK) st = time_copy(cmd_e, host_out, dst, &t_out);
    if (st != DCP_OK) {
        /* No host path to compare with: dma-buf works, use it. */
        *verdict = DCP_DMABUF_OK;
        snprintf(why, cap, "imported; the host-memory path could not be probed (%s)", dcp_last_error());
        dcp_clear_error();
        st = DCP_OK;
    } else {
        *verdict = dcp_comm_dmabuf_probe_verdict(t_dma, t_in + t_out, PROBE_BYTES, why, cap);
    }
done:
    dcp_cmd_destroy(cmd_i);
    dcp_cmd_destroy(cmd_e);
    dcp_buffer_destroy(host_in);
    dcp_buffer_destroy(host_out);
    dcp_buffer_destroy(src);
    dcp_buffer_destroy(dst);
    dcp_buffer_destroy(imported);
    dcp_buffer_destroy(probe);
    free(host);
    return st;
}
