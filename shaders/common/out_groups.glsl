// Where a decode's or merge's output row goes. Row = token b * heads + head h. Plain (group 0):
// [rows][width]. Grouped, for the DCP a2a's messages (src/attn/cp_attn.c): the heads in groups of
// `group`, group n = h / group starting at n * group_stride and holding [b][h % group][width],
// so that each destination's message is written in place by the kernel that computes it.
// Units of the output's element (vec4 for O, float for LSE).
#ifndef DCP_OUT_GROUPS_GLSL
#define DCP_OUT_GROUPS_GLSL
uint dcp_out_at(uint row, uint heads, uint group, uint group_stride, uint width)
{
    if (group == 0u) return row * width;
    const uint b = row / heads, h = row % heads;
    return (h / group) * group_stride + (b * group + h % group) * width;
}
#endif
