/* Block-quantized ggml weight types: Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL (blocks of 32 weights) and
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (super-blocks of 256). Dequantizers written from the block layouts, reference
 * quantizers, and the repack into the device layout that shaders/common/quants.glsl reads.
 *
 * GGUF block layouts (little-endian, no padding; "f16" is an IEEE half; element e of the block):
 *   Q4_0  18 B: d f16 | qs[16]          w = d * (q - 8),  q = e < 16 ? qs[e] & 15 : qs[e-16] >> 4
 *   Q4_1  20 B: d, m f16 | qs[16]       w = d * q + m,    q as Q4_0
 *   Q5_0  22 B: d f16 | qh u32 | qs[16] w = d * (q - 16), q = (Q4_0's nibble) | bit e of qh << 4
 *   Q5_1  24 B: d, m f16 | qh | qs[16]  w = d * q + m,    q as Q5_0
 *   Q2_K  84 B: scales[16] | qs[64] | d, dmin f16. e = 128n + 32s + l (n < 2, s < 4, l < 32):
 *               q = (qs[32n + l] >> 2s) & 3, j = 8n + 2s + l/16 (16-weight sub-block),
 *               w = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4)
 *   Q3_K 110 B: hmask[32] | qs[64] | scales[12] | d f16. e, j as Q2_K:
 *               q = ((qs[32n + l] >> 2s) & 3) + 4 * (hmask[l] >> (4n + s) & 1) - 4,
 *               w = d * (sc_j - 32) * q, sc_j 6 bits: low 4 from scales[j] (j < 8, low nibble)
 *               or scales[j-8] (high nibble), high 2 from scales[8 + j%4] >> 2(j/4)
 *   Q4_K 144 B: d, dmin f16 | scales[12] | qs[128]. e = 64c + 32h + l (c < 4, h < 2, l < 32):
 *               q = qs[32c + l] >> 4h & 15, j = 2c + h (32-weight sub-block),
 *               w = d * sc_j * q - dmin * m_j, (sc_j, m_j) 6 bits each: j < 4: scales[j] & 63,
 *               scales[j+4] & 63; else (scales[j+4] & 15) | (scales[j-4] >> 6) << 4,
 *               (scales[j+4] >> 4) | (scales[j] >> 6) << 4
 *   Q5_K 176 B: d, dmin f16 | scales[12] | qh[32] | qs[128]. As Q4_K with
 *               q |= (qh[l] >> (2c + h) & 1) << 4
 *   Q6_K 210 B: ql[128] | qh[64] | scales[16] (int8) | d f16. e = 128n + 32g + l (g < 4):
 *               q = ((ql[64n + 32(g&1) + l] >> 4(g/2)) & 15 | (qh[32n + l] >> 2g & 3) << 4) - 32,
 *               w = d * scales[8n + 2g + l/16] * q
 *   IQ4_NL 18 B: d f16 | qs[16]         w = d * K[q], q the nibble as Q4_0, K = dcp_iq4_levels
 *               (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
 *   IQ4_XS 136 B: d f16 | scales_h u16 | scales_l[4] | qs[128]. e = 32j + 16h + l (j < 8, h < 2,
 *               l < 16): q = qs[16j + l] >> 4h & 15, ls_j 6 bits = (scales_l[j/2] >> 4(j%2) & 15)
 *               | (scales_h >> 2j & 3) << 4, w = (d * (ls_j - 32)) * K[q]
 *
 * Device layout ("body | scales"): each block's f16 scale field(s) (d; or d and dmin / m, which
 * always sit together) are moved out, so that what remains, the body, is a whole number of
 * 32-bit words read with aligned loads: [blocks][body_words] u32 (the block's bytes in GGUF order
 * without the f16 fields), then at word scale_offset the f16 fields [blocks][scale_halves] packed
 * two to a word (low half first). Same bytes as the GGUF tensor, plus at most 2 of padding.
 * Q4_K and Q5_K move their first 16 bytes (d, dmin and the 12 scale bytes, contiguous in the GGUF
 * block) out together (scale_halves = 8), so that both parts are whole 16-byte vectors: the body
 * (Q4_K qs[128]; Q5_K qh[32] | qs[128]) and the 16 bytes of scales, read with uvec4 loads.
 * IQ4_XS moves its first 8 bytes out together (scale_halves = 4: d, then scales_h and scales_l[4]
 * as raw bits, not halves), leaving qs[128], 32 words read with uvec4 loads. */
#ifndef DCP_QUANT_QUANTS_H
#define DCP_QUANT_QUANTS_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/quant.h"

typedef struct dcp_quant_layout {
    dcp_ggml_type type;
    uint32_t block_elems;   /* weights per block: 32 or 256 */
    uint32_t block_bytes;   /* GGUF bytes per block */
    uint32_t scale_at;      /* byte offset of the f16 field(s) in the GGUF block */
    uint32_t scale_halves;  /* f16 values there: 1 (d) or 2 (d, dmin or d, m); Q4_K, Q5_K: 8
                             * (d, dmin and the 12 scale bytes, 16 bytes moved out); IQ4_XS: 4
                             * (d, scales_h, scales_l[4]: 8 bytes) */
    uint32_t body_words;    /* (block_bytes - 2 * scale_halves) / 4 */
} dcp_quant_layout;

/* The 16 levels of IQ4_NL / IQ4_XS, ascending. */
extern const int8_t dcp_iq4_levels[16];

/* Layout of a block-quantized type above, or NULL for any other type. Thread-safe. */
const dcp_quant_layout *dcp_quant_layout_of(dcp_ggml_type type);

/* n weights (a multiple of the block size) of GGUF blocks src -> dst [n] f32, exactly as the
 * layouts above define (f32 arithmetic: (d * sc) * q - (dmin * m)). */
dcp_status dcp_quant_dequantize(dcp_ggml_type type, const void *src, float *dst, uint64_t n);

/* Reference quantizer: n f32 values (a multiple of the block size) -> GGUF blocks dst.
 * Round to nearest against the f16-rounded scales actually stored. Q4_0 / Q5_0 take
 * d = (signed value of largest magnitude) / -8 (-16), Q4_1 / Q5_1 d = (max - min) / 15 (31),
 * m = min. The k-quants fit each sub-block with a scale search: 21 candidate scales around
 * range / levels, each followed by a least-squares refit of scale (and min), keeping the one of
 * least squared error; the super-block scales d (and dmin) then quantize the sub-block scales
 * to their 4 / 6 / 8 bits, and the weights are re-rounded against those. IQ4_NL / IQ4_XS fit each
 * 32 weights to the nearest of the 16 levels: 22 candidate scales (the largest magnitude near
 * the lowest or the highest level), each refit by least squares; IQ4_XS then quantizes the 8
 * sub-block scales to 6 bits against d = (largest) / -32. Inputs must be finite. */
dcp_status dcp_quant_quantize(dcp_ggml_type type, const float *src, void *dst, uint64_t n);

/* Device layout: bytes of `blocks` blocks of type (see above). */
uint64_t dcp_quant_device_bytes(const dcp_quant_layout *l, uint64_t blocks);

/* Repacks `blocks` GGUF blocks src into the device layout: block i's body to
 * body + (first + i) * body_words, its f16 fields to halves + (first + i) * scale_halves.
 * body / halves point into one host image of the whole matrix. */
void dcp_quant_repack(const dcp_quant_layout *l, const uint8_t *src, uint64_t blocks, uint64_t first,
                      uint32_t *body, uint16_t *halves);

#endif
