# deepseek2 (MLA + MoE): hyperparameters, test models, the double-precision reference, the loader's
# tensor checks and tensor-parallel slices (host only).
dcp_test(test_deepseek2_ref SOURCES test_deepseek2_ref.c ref_deepseek2.c vkutil.c TIMEOUT 300 LABELS host)
# The MLA latent decode against its reference, on one device and on two logical devices.
dcp_test(test_mla_decode SOURCES test_mla_decode.c vkutil.c LABELS mesa22)
dcp_test(test_mla_decode_2dev EXE test_mla_decode ENV "DCP_VK_DEVICES=0,0")
# The MLA model kernels and one MLA attention layer over a DCP group (interleaved latent cache,
# absorbed query, per-rank latent decode, lse_merge, W_UV) against the non-absorbed attention.
dcp_test(test_mla_kernels SOURCES test_mla_kernels.c vkutil.c LABELS mesa22)
dcp_test(test_mla_kernels_2dev EXE test_mla_kernels ENV "DCP_VK_DEVICES=0,0")
# The MoE kernels, and test model B's MoE feed-forward split over TP 1, 2, 4.
dcp_test(test_moe_kernels SOURCES test_moe_kernels.c ref_deepseek2.c vkutil.c LABELS mesa22)
dcp_test(test_moe_kernels_2dev EXE test_moe_kernels ENV "DCP_VK_DEVICES=0,0")
