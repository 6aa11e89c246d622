# deepseek2 (MLA + MoE): hyperparameters, test models, the double-precision reference, the loader's
# tensor checks and tensor-parallel slices (host only).
dcp_test(test_deepseek2_ref SOURCES test_deepseek2_ref.c ref_deepseek2.c vkutil.c TIMEOUT 300 LABELS host)
# The MLA latent decode against its reference, on one device and on two logical devices.
dcp_test(test_mla_decode SOURCES test_mla_decode.c vkutil.c LABELS mesa22)
dcp_test(test_mla_decode_2dev EXE test_mla_decode ENV "DCP_VK_DEVICES=0,0")
