/* Interleaved placement of a sequence over the ranks of a DCP group (docs/design.md section 4). */
#include "common/error.h"
#include "dcpvk/kv.h"

dcp_status dcp_kv_placement_check(uint32_t n, uint32_t interleave, uint32_t page_size)
{
    if (n == 0) return dcp_fail(DCP_ERR_CONFIG, "DCP size 0 (must be >= 1)");
    if (interleave == 0 || page_size == 0 || interleave > page_size || page_size % interleave)
        return dcp_fail(DCP_ERR_CONFIG,
                        "interleave size %u does not divide the page size %u (need 1 <= I <= page size "
                        "and page size %% I == 0)",
                        interleave, page_size);
    return DCP_OK;
}

uint32_t dcp_kv_owner(uint64_t pos, uint32_t n, uint32_t interleave)
{
    return (uint32_t)((pos / interleave) % n);
}

uint64_t dcp_kv_local_index(uint64_t pos, uint32_t n, uint32_t interleave)
{
    return pos / ((uint64_t)interleave * n) * interleave + pos % interleave;
}

uint64_t dcp_kv_local_length(uint64_t length, uint32_t rank, uint32_t n, uint32_t interleave)
{
    uint64_t base = length / ((uint64_t)interleave * n) * interleave;
    uint64_t rem = length - base * n;
    uint64_t start = (uint64_t)rank * interleave;
    uint64_t extra = rem > start ? rem - start : 0;
    if (extra > interleave) extra = interleave;
    return base + extra;
}

uint64_t dcp_kv_max_length(uint64_t pages, uint32_t page_size, uint32_t n, uint32_t interleave)
{
    const uint64_t c = pages * page_size; /* tokens one rank holds */
    return c / interleave * interleave * n + c % interleave;
}
