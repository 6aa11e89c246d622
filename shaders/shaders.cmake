# Shader list: dcp_shader(<symbol> <source> [DEFINES...]). Variants by -D, never by copied files.
dcp_shader(stream_read stream_read.comp)
dcp_shader(lse_merge lse_merge.comp)
dcp_shader(paged_decode_f32 paged_decode.comp)
dcp_shader(paged_decode_f16 paged_decode.comp KV_F16=1)
