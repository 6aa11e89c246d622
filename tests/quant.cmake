# Block-quantized weight types (issue 11): the shaders against the reference dequantizer x a
# double matmul, batch invariance, get_rows, refused shapes.
# lavapipe JIT-compiles two matmul variants per type (one token, several): about a minute of CPU.
dcp_test(test_quant_ops SOURCES test_quant_ops.c vkutil.c TIMEOUT 1200 LABELS quant)
# ... in matmul's other layout (the GPUs' on a CPU driver; see test_ops_split_layout).
dcp_test(test_quant_ops_split_layout EXE test_quant_ops ENV DCP_VK_MATMUL_LAYOUT=split TIMEOUT 1200 LABELS quant)
dcp_test(test_quant SOURCES test_quant.c test_gguf_util.c vkutil.c TIMEOUT 120 LABELS quant host)
# Whole quantized models in dcp-vk-run: stories260K --quantize'd to Q4_0 and a generated Q4_K_M
# model give the same greedy text at TP 1 and TP 8 / DCP 2 (a2a and ag_rs).
dcp_test(test_quant_model SOURCES test_quant_model.c LABELS quant
         ARGS $<TARGET_FILE:dcp-vk-gguf> $<TARGET_FILE:dcp-vk-run> ${CMAKE_CURRENT_BINARY_DIR})
add_dependencies(test_quant_model dcp-vk-gguf dcp-vk-run)
# The quantizer's per-tensor types against a table of llama-quantize's choices (written in the
# test from reading its rules): every architecture's generated model, every file type.
dcp_test(test_quant_table SOURCES test_quant_table.c test_gguf_util.c vkutil.c TIMEOUT 600 LABELS quant host)
# Fused parts of different types (issue 18 section 4): a matrix of parts gives bitwise the
# per-part matmuls; Q4_K_M llama / qwen2 / qwen3 (attn_v Q6_K on some layers) at TP 1, 2, 4 over
# logical devices hold nothing as F32, their weights the quantized sizes, logits and greedy ids
# those of the dequantized reference; a Q4_K_M llama whose row-parallel slices cut the 256-weight
# blocks at TP 2 and 8 the same at TP 1, 2, 8 (each cut slice its covering blocks, a column window).
dcp_test(test_quant_mixed SOURCES test_quant_mixed.c ref_model.c vkutil.c TIMEOUT 900 LABELS quant
         ARGS ${CMAKE_CURRENT_BINARY_DIR})
