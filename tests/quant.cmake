# Block-quantized weight types (issue 11): the shaders against the reference dequantizer x a
# double matmul, batch invariance, get_rows, refused shapes.
dcp_test(test_quant_ops SOURCES test_quant_ops.c vkutil.c LABELS quant)
dcp_test(test_quant SOURCES test_quant.c vkutil.c TIMEOUT 120 LABELS quant host)
