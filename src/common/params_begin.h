/* Shared C/GLSL spelling of push-constant structs. Include once at the top of each *_params.h.
 * In GLSL (glslang defines VULKAN) DCP_U32 is uint; in C it is uint32_t. */
#ifndef DCP_PARAMS_BEGIN_H
#define DCP_PARAMS_BEGIN_H
#ifdef VULKAN
#define DCP_U32 uint
#define DCP_F32 float
#define DCP_PARAMS_STRUCT(name) struct name
#define DCP_PARAMS_END(name)
#else
#include <stddef.h>
#include <stdint.h>
#define DCP_U32 uint32_t
#define DCP_F32 float
#define DCP_PARAMS_STRUCT(name) typedef struct name name; struct name
#define DCP_PARAMS_END(name) _Static_assert(sizeof(name) <= 128, #name " exceeds 128 bytes of push constants");
#endif
#endif
