#version 450
// moe_route: MoE routing of one token per workgroup (src/kernels/ds2_params.h, llama.cpp's
// build_moe_ffn): gate probabilities (softmax or sigmoid of the router logits), the selection bias
// (exp_probs_b) added for the choice only, the group limit (keep the n_groups_used groups whose two
// best selection values sum highest), the top n_used experts in descending order (ties: lower id),
// and their weights: the unbiased probabilities, renormalised (sum clamped below at 2^-14) when
// asked, times the scale. The work is small and serial (n_expert <= DCP_MOE_MAX_EXPERTS, about
// n_used * n_expert steps), done by one invocation in shared memory so that every TP rank computes
// the same bits from the same logits.
#extension GL_GOOGLE_include_directive : require
#include "dcp_math.glsl"
#include "kernels/ds2_params.h"

layout(constant_id = 0) const uint WG = 1;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_moe_route_params p; };
layout(std430, binding = 0) readonly buffer Logits { float logits[]; }; // [tokens][logits_stride]
layout(std430, binding = 1) readonly buffer Bias { float bias[]; };     // [n_expert] (has_bias)
layout(std430, binding = 2) writeonly buffer Ids { uint ids[]; };       // [tokens][n_used]
layout(std430, binding = 3) writeonly buffer Wt { float wt[]; };        // [tokens][n_used]

shared float prob[DCP_MOE_MAX_EXPERTS];
shared float sel[DCP_MOE_MAX_EXPERTS];
shared uint avail[DCP_MOE_MAX_EXPERTS];
shared float gscore[DCP_MOE_MAX_EXPERTS / 2];
shared uint gkeep[DCP_MOE_MAX_EXPERTS / 2];

void main()
{
    const uint t = gl_WorkGroupID.x;
    if (gl_LocalInvocationID.x != 0u || t >= p.tokens) return;
    const uint X = p.n_expert, base = t * p.logits_stride;
    if (p.sigmoid != 0u) {
        for (uint e = 0u; e < X; e++) prob[e] = 1.0 / (1.0 + exp(-logits[base + e]));
    } else {
        float mx = logits[base];
        for (uint e = 1u; e < X; e++) mx = max(mx, logits[base + e]);
        float sum = 0.0;
        for (uint e = 0u; e < X; e++) {
            const float v = exp(logits[base + e] - mx);
            prob[e] = v;
            sum += v;
        }
        for (uint e = 0u; e < X; e++) prob[e] /= sum;
    }
    for (uint e = 0u; e < X; e++) {
        sel[e] = prob[e] + (p.has_bias != 0u ? bias[e] : 0.0);
        avail[e] = 1u;
    }
    if (p.n_groups > 1u) {
        const uint per = X / p.n_groups;
        for (uint g = 0u; g < p.n_groups; g++) {
            float b1 = dcp_neg_inf(), b2 = dcp_neg_inf();
            for (uint e = g * per; e < (g + 1u) * per; e++) {
                const float s = sel[e];
                if (s > b1) {
                    b2 = b1;
                    b1 = s;
                } else if (s > b2) {
                    b2 = s;
                }
            }
            gscore[g] = b1 + b2;
            gkeep[g] = 0u;
        }
        for (uint k = 0u; k < p.n_groups_used; k++) {
            uint best = 0xffffffffu;
            for (uint g = 0u; g < p.n_groups; g++)
                if (gkeep[g] == 0u && (best == 0xffffffffu || gscore[g] > gscore[best])) best = g;
            gkeep[best] = 1u;
        }
        for (uint e = 0u; e < X; e++) avail[e] = gkeep[e / per];
    }
    float sum = 0.0;
    for (uint k = 0u; k < p.n_used; k++) {
        uint best = 0xffffffffu;
        for (uint e = 0u; e < X; e++)
            if (avail[e] != 0u && (best == 0xffffffffu || sel[e] > sel[best])) best = e;
        avail[best] = 0u;
        ids[t * p.n_used + k] = best;
        sum += prob[best];
    }
    const float div = p.norm != 0u ? max(sum, 6.103515625e-5) : 1.0;
    for (uint k = 0u; k < p.n_used; k++) wt[t * p.n_used + k] = prob[ids[t * p.n_used + k]] / div * p.scale;
}
