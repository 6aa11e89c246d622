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
# A whole deepseek2 forward on one device from the loader's slices and the kernels: logits of the
# test models A, B, C within 1e-4 of the double-precision oracle, the same greedy tokens, A = C.
dcp_test(test_deepseek2_forward SOURCES test_deepseek2_forward.c ref_deepseek2.c vkutil.c TIMEOUT 600)

# The tools: deepseek2 test models from dcp-vk-gguf (listed with their MLA / MoE hyperparameters),
# and dcp-vk-bench's MLA decode checked against the reference.
add_test(NAME dcp_vk_gguf_make_deepseek2
         COMMAND dcp-vk-gguf --make-model ${CMAKE_CURRENT_BINARY_DIR}/dcp-vk-test-ds2-B.gguf --arch deepseek2
                 --mla-config B)
set_tests_properties(dcp_vk_gguf_make_deepseek2 PROPERTIES PASS_REGULAR_EXPRESSION "^wrote "
                     FIXTURES_SETUP ds2_model LABELS gguf)
add_test(NAME dcp_vk_gguf_list_deepseek2 COMMAND dcp-vk-gguf ${CMAKE_CURRENT_BINARY_DIR}/dcp-vk-test-ds2-B.gguf)
set_tests_properties(dcp_vk_gguf_list_deepseek2 PROPERTIES
                     PASS_REGULAR_EXPRESSION "MLA: attn_k_b/attn_v_b layout, q_lora 40, kv_lora 32, rope 16, nope 24, v 20.*rope scaling yarn \\(factor 4, original context 32.*MoE: 1 dense leading layers \\(FFN 72\\), 6 experts of 56 \\(2 used, 1 shared\\), gating sigmoid, weights normalised x 2.5, groups 3 \\(2 used\\)"
                     FIXTURES_REQUIRED ds2_model LABELS gguf)
add_test(NAME dcp_vk_gguf_mla_config_bad COMMAND dcp-vk-gguf --make-model ${CMAKE_CURRENT_BINARY_DIR}/x.gguf
                 --arch deepseek2 --mla-config D)
set_tests_properties(dcp_vk_gguf_mla_config_bad PROPERTIES WILL_FAIL TRUE LABELS gguf)
add_test(NAME dcp_vk_bench_mla_verify COMMAND dcp-vk-bench attn --mla --ctx 300 --q-heads 4 --kv-lora 32 --rope 16
                 --iters 1 --verify)
set_tests_properties(dcp_vk_bench_mla_verify PROPERTIES PASS_REGULAR_EXPRESSION "verify: ok"
                     ENVIRONMENT "${DCP_TEST_ENV}")
# deepseek2 through the model API: logits of A, B, C against the non-absorbed oracle, negative
# controls (NEOX RoPE, the wrong scale, base-2 LSE merging) that must fail, the same greedy tokens
# for every TP / DCP layout, backend, interleave and Q mode, and batch invariance at TP 4 / DCP 4.
dcp_test(test_deepseek2_model SOURCES test_deepseek2_model.c ref_deepseek2.c ref_model.c vkutil.c TIMEOUT 900)
