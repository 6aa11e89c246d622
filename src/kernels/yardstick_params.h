/* Push constants of the benchmark's yardstick shader (stream_read), shared by C and GLSL. */
#ifndef DCP_VK_YARDSTICK_PARAMS_H
#define DCP_VK_YARDSTICK_PARAMS_H
#include "common/params_begin.h"

/* stream_read: sums the 32-bit words [0, words) of a buffer, words_per_group per workgroup. */
DCP_PARAMS_STRUCT(dcp_stream_read_params) {
    DCP_U32 words;            /* 32-bit words to read (multiple of 4) */
    DCP_U32 words_per_group;  /* words each workgroup reads */
};
DCP_PARAMS_END(dcp_stream_read_params)

#endif
