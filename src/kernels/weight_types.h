/* The weight types of the weight kernels (matmul, get_rows, head_matmul, moe_matmul, moe_down):
 * each kernel of DCP_KERNEL_WEIGHTS in kernels.def is built once per type listed here, in this
 * order, with the GLSL define W_<T> (shaders/common/weights.glsl, quants.glsl). <T> is also the
 * suffix of the GGUF type DCP_GGML_TYPE_<T> it reads. Read by C (a list macro: X(T, ...) once per
 * type, the extra arguments passed on) and by CMake (shaders/shaders.cmake takes the names from
 * the X(...) lines), so the type x op product is written nowhere else. One type a line. */
#ifndef DCP_KERNELS_WEIGHT_TYPES_H
#define DCP_KERNELS_WEIGHT_TYPES_H

#define DCP_WEIGHT_TYPES(X, ...) \
    X(F32, __VA_ARGS__)          \
    X(F16, __VA_ARGS__)          \
    X(BF16, __VA_ARGS__)         \
    X(Q8_0, __VA_ARGS__)         \
    X(Q4_0, __VA_ARGS__)         \
    X(Q4_1, __VA_ARGS__)         \
    X(Q5_0, __VA_ARGS__)         \
    X(Q5_1, __VA_ARGS__)         \
    X(Q2_K, __VA_ARGS__)         \
    X(Q3_K, __VA_ARGS__)         \
    X(Q4_K, __VA_ARGS__)         \
    X(Q5_K, __VA_ARGS__)         \
    X(Q6_K, __VA_ARGS__)         \
    X(IQ4_NL, __VA_ARGS__)       \
    X(IQ4_XS, __VA_ARGS__)

#endif
