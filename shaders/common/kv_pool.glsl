// Access to the segments of a KV page pool (a binding array of DCP_KV_MAX_SEGMENTS buffers).
// By default the segment index may differ between invocations (non-uniform indexing, Vulkan 1.2
// feature shaderStorageBufferArrayNonUniformIndexing). Built with KV_ONE_SEGMENT, the shader only
// touches segment 0: the variant for devices without that feature, where pools have one segment
// (src/vk/pipelines.def selects it per device).
#ifndef DCP_KV_POOL_GLSL
#define DCP_KV_POOL_GLSL
// Declare the pool binding as `... kv[DCP_KV_ARRAY]` and index it with DCP_KV_SEG(segment).
#ifdef KV_ONE_SEGMENT
#define DCP_KV_ARRAY 1
#define DCP_KV_SEG(s) 0
#else
#extension GL_EXT_nonuniform_qualifier : require
#define DCP_KV_ARRAY DCP_KV_MAX_SEGMENTS
#define DCP_KV_SEG(s) nonuniformEXT(s)
#endif
#endif
