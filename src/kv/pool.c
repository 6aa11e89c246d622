/* KV page pools split into segments (see include/dcpvk/kv.h). */
#include <stdlib.h>

#include "common/error.h"
#include "dcpvk/kv.h"
#include "kv/kv_internal.h"

struct dcp_kv_pool {
    dcp_device *dev;
    dcp_kv_pool_config cfg;
    uint64_t page_bytes;
    uint32_t pages_per_segment;
    uint32_t segment_count;
    dcp_buffer *segments[DCP_KV_MAX_SEGMENTS];
};

/* The pool's layout on a device: checks the config, then page bytes, pages per segment (a power of
 * two) and segments. Shared by dcp_kv_pool_create and dcp_kv_pool_bytes. */
static dcp_status pool_layout(const dcp_device_info *info, const dcp_kv_pool_config *c, uint64_t *page_bytes_out,
                              uint64_t *pps_out, uint64_t *nseg_out)
{
    if (c->head_dim == 0 || c->head_dim % 4 || c->head_dim > DCP_KV_MAX_HEAD_DIM)
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "KV pool: head dim %u is not supported (supported: multiples of 4 from 4 to %d)",
                        c->head_dim, DCP_KV_MAX_HEAD_DIM);
    if (c->kv_heads == 0 || c->page_size == 0 || c->num_pages == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "KV pool: kv_heads (%u), page_size (%u) and num_pages (%u) must be >= 1",
                        c->kv_heads, c->page_size, c->num_pages);
    if (c->dtype != DCP_DTYPE_F32 && c->dtype != DCP_DTYPE_F16)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "KV pool: dtype %d is not supported (f32, f16)", (int)c->dtype);
    uint64_t page_bytes = (c->k_only ? 1ull : 2ull) * c->kv_heads * c->page_size * c->head_dim * dcp_dtype_size(c->dtype);
    uint64_t seg_max = info->max_storage_buffer_range;
    if (info->max_allocation_size < seg_max) seg_max = info->max_allocation_size;
    if (seg_max > (2ull << 30)) seg_max = 2ull << 30;
    if (page_bytes > seg_max)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "KV pool: a page of %llu bytes exceeds device %d's binding limit of %llu bytes "
                        "(use a smaller page size)",
                        (unsigned long long)page_bytes, info->logical_index, (unsigned long long)seg_max);
    /* Pages per segment: a power of two (the shaders split page ids with a shift and a mask). */
    uint64_t pps = 1;
    while (pps * 2 <= seg_max / page_bytes && pps < c->num_pages) pps *= 2;
    uint64_t nseg = (c->num_pages + pps - 1) / pps;
    if (nseg > 1 && !info->kv_multi_segment)
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "KV pool: %u pages of %llu bytes need %llu buffers, but device %d (%s) lacks "
                        "shaderStorageBufferArrayNonUniformIndexing (or %d storage buffers per "
                        "stage), so a pool is limited to one buffer of %llu bytes (%llu pages); use fewer pages, more devices, or a newer "
                        "driver (Mesa 23+)",
                        c->num_pages, (unsigned long long)page_bytes, (unsigned long long)nseg,
                        info->logical_index, info->name, DCP_KV_MAX_SEGMENTS + 8,
                        (unsigned long long)seg_max, (unsigned long long)(seg_max / page_bytes));
    if (nseg > DCP_KV_MAX_SEGMENTS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "KV pool: %u pages of %llu bytes need %llu buffers on device %d (range limit "
                        "%llu bytes), more than the %d a pool may span",
                        c->num_pages, (unsigned long long)page_bytes, (unsigned long long)nseg,
                        info->logical_index, (unsigned long long)seg_max, DCP_KV_MAX_SEGMENTS);
    *page_bytes_out = page_bytes;
    *pps_out = pps;
    *nseg_out = nseg;
    return DCP_OK;
}

dcp_status dcp_kv_pool_bytes(const dcp_device *dev, const dcp_kv_pool_config *c, uint64_t *bytes, uint64_t *largest)
{
    uint64_t page_bytes = 0, pps = 1, nseg = 0;
    *bytes = *largest = 0;
    dcp_status st = pool_layout(dcp_device_get_info(dev), c, &page_bytes, &pps, &nseg);
    if (st != DCP_OK) return st;
    *bytes = (uint64_t)c->num_pages * page_bytes;
    *largest = (c->num_pages < pps ? c->num_pages : pps) * page_bytes;
    return DCP_OK;
}

dcp_status dcp_kv_pool_create(dcp_device *dev, const dcp_kv_pool_config *c, dcp_kv_pool **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    uint64_t page_bytes = 0, pps = 1, nseg = 0;
    st = pool_layout(dcp_device_get_info(dev), c, &page_bytes, &pps, &nseg);
    if (st != DCP_OK) return st;
    dcp_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    p->dev = dev;
    p->cfg = *c;
    p->page_bytes = page_bytes;
    p->pages_per_segment = (uint32_t)pps;
    for (uint32_t s = 0; s < nseg; s++) {
        uint64_t pages = c->num_pages - (uint64_t)s * pps;
        if (pages > pps) pages = pps;
        DCP_TRY(dcp_buffer_create(dev, pages * page_bytes, DCP_MEMORY_DEVICE, &p->segments[s]));
        p->segment_count = s + 1;
        DCP_TRY(dcp_buffer_fill(p->segments[s], 0, pages * page_bytes, 0));
    }
    *out = p;
    return DCP_OK;
fail:
    dcp_kv_pool_destroy(p);
    return dcp_fail_context(st, "KV pool of %u pages", c->num_pages);
}

void dcp_kv_pool_destroy(dcp_kv_pool *p)
{
    if (!p) return;
    for (uint32_t s = 0; s < p->segment_count; s++) dcp_buffer_destroy(p->segments[s]);
    free(p);
}

const dcp_kv_pool_config *dcp_kv_pool_get_config(const dcp_kv_pool *p) { return &p->cfg; }
dcp_device *dcp_kv_pool_device(const dcp_kv_pool *p) { return p->dev; }
uint64_t dcp_kv_pool_page_bytes(const dcp_kv_pool *p) { return p->page_bytes; }
uint32_t dcp_kv_pool_pages_per_segment(const dcp_kv_pool *p) { return p->pages_per_segment; }
uint32_t dcp_kv_pool_segment_count(const dcp_kv_pool *p) { return p->segment_count; }
dcp_buffer *dcp_kv_pool_segment(const dcp_kv_pool *p, uint32_t i)
{
    return i < p->segment_count ? p->segments[i] : NULL;
}

void dcp_kv_pool_bindings(const dcp_kv_pool *p, dcp_binding *out)
{
    for (uint32_t s = 0; s < DCP_KV_MAX_SEGMENTS; s++)
        out[s] = (dcp_binding){p->segments[s < p->segment_count ? s : 0], 0, 0};
}

dcp_status dcp_kv_pool_write_pages(dcp_kv_pool *p, uint32_t first, uint32_t count, const void *data)
{
    if (first > p->cfg.num_pages || count > p->cfg.num_pages - first)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV pool: pages [%u, %u) outside the pool of %u pages",
                        first, first + count, p->cfg.num_pages);
    const char *src = data;
    while (count) {
        uint32_t seg = first / p->pages_per_segment;
        uint32_t in_seg = first % p->pages_per_segment;
        uint32_t n = p->pages_per_segment - in_seg;
        if (n > count) n = count;
        dcp_status st = dcp_buffer_upload(p->segments[seg], (uint64_t)in_seg * p->page_bytes, src,
                                          (uint64_t)n * p->page_bytes);
        if (st != DCP_OK) return st;
        src += (uint64_t)n * p->page_bytes;
        first += n;
        count -= n;
    }
    return DCP_OK;
}
