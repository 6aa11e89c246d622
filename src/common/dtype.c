/* Element types and IEEE binary16 conversion (round to nearest even). */
#include <string.h>

#include "dcpvk/dtype.h"

uint32_t dcp_dtype_size(dcp_dtype t) { return t == DCP_DTYPE_Q8_0 ? 1u : t == DCP_DTYPE_F16 ? 2u : 4u; }
const char *dcp_dtype_name(dcp_dtype t)
{
    return t == DCP_DTYPE_Q8_0 ? "q8_0" : t == DCP_DTYPE_F16 ? "f16" : "f32";
}

bool dcp_dtype_parse(const char *name, dcp_dtype *out)
{
    static const struct { const char *name; dcp_dtype t; } known[] = {
        {"f32", DCP_DTYPE_F32}, {"f16", DCP_DTYPE_F16}, {"q8_0", DCP_DTYPE_Q8_0}};
    for (size_t i = 0; name && i < sizeof known / sizeof known[0]; i++)
        if (strcmp(name, known[i].name) == 0) {
            *out = known[i].t;
            return true;
        }
    return false;
}

uint16_t dcp_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xffu) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++; /* may carry into the exponent */
    return (uint16_t)(sign | half);
}

float dcp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else {
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        x = sign | 0x7f800000u | (man << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}
