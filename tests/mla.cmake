# deepseek2 (MLA + MoE): hyperparameters, test models, the double-precision reference, the loader's
# tensor checks and tensor-parallel slices (host only).
dcp_test(test_deepseek2_ref SOURCES test_deepseek2_ref.c ref_deepseek2.c vkutil.c TIMEOUT 300 LABELS host)
