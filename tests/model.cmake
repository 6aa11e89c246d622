# Model kernels and the llama model step against the CPU references; stories260K greedy tokens.
dcp_test(test_ops SOURCES test_ops.c vkutil.c)
# The same in matmul's other layout (docs/design.md section 10): on a CPU driver the lanes own
# rows by default, so this runs the GPUs' split layout there (and the CPU drivers' on a GPU).
dcp_test(test_ops_split_layout EXE test_ops ENV DCP_VK_MATMUL_LAYOUT=split)
dcp_test(test_llama SOURCES test_llama.c ref_model.c vkutil.c ARGS nodcp)
dcp_test(test_llama_dcp EXE test_llama ARGS dcp)
# The llama family on generated models: llama with rope_freqs / linear / YaRN, Mistral's window,
# qwen2, qwen3, phi3 at (1,1) and (8,2) a2a / ag_rs against the reference; unknown architectures refused.
dcp_test(test_archs SOURCES test_archs.c ref_model.c vkutil.c)
dcp_test(test_sampler SOURCES test_sampler.c)
# Many sequences in one run state: batch invariance (bitwise), page accounting, bad steps.
dcp_test(test_batch SOURCES test_batch.c ref_model.c vkutil.c)
# dcp-vk-run end to end (exit codes, --help, stories260K reference ids, same text for every prefill chunk).
dcp_test(test_run SOURCES test_run.c ARGS $<TARGET_FILE:dcp-vk-run>)
add_dependencies(test_run dcp-vk-run)
# The model over MPI processes (one TP rank per process; DCP groups on sub-communicators):
# stories260K greedy from BOS at TP 8 / DCP 2 a2a under mpiexec -n 8: all 256 reference ids
# (about 2 minutes on 2 cores, which 8 processes oversubscribe); ag_rs with interleave = block size and q_replicate after a prefill over
# the shards; 2 processes x 4 devices and 4 x 2 (whole DCP groups in each process, TP over processes).
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  # Without mpiexec: a singleton MPI world, TP 1 through dcp_model_load.
  dcp_test(test_llama_mpi_1 SOURCES test_llama_mpi.c ref_model.c vkutil.c EXE test_llama_mpi ARGS 1 1 a2a 1 16 1 8)
  dcp_mpi_test(test_llama_mpi8_dcp2_a2a 8 test_llama_mpi 8 2 a2a 1 16 1 256)
  set_tests_properties(test_llama_mpi8_dcp2_a2a PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0")
  dcp_mpi_test(test_llama_mpi8_dcp2_ag_rs 8 test_llama_mpi 8 2 ag_rs 8 8 40 24 q_replicate)
  set_tests_properties(test_llama_mpi8_dcp2_ag_rs PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0")
  dcp_mpi_test(test_llama_mpi2x4_dcp2 2 test_llama_mpi 8 2 a2a 1 16 40 24)
  set_tests_properties(test_llama_mpi2x4_dcp2 PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0,0,0")
  dcp_mpi_test(test_llama_mpi4x2_dcp2_ag_rs 4 test_llama_mpi 8 2 ag_rs 2 16 40 24)
  set_tests_properties(test_llama_mpi4x2_dcp2_ag_rs PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0")
  # Half a DCP group per process: a generated model with 2 KV heads allows DCP 4 at TP 8; 4 processes
  # of 2 devices, each DCP group a sub-communicator of 2 processes x 2 devices.
  dcp_mpi_test(test_llama_mpi4x2_dcp4_gen 4 test_llama_mpi 8 4 a2a 2 16 1 24 gen)
  set_tests_properties(test_llama_mpi4x2_dcp4_gen PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0")
  dcp_mpi_test(test_llama_mpi4x2_dcp4_gen_ag_rs 4 test_llama_mpi 8 4 ag_rs 4 16 1 24 q_replicate gen)
  set_tests_properties(test_llama_mpi4x2_dcp4_gen_ag_rs PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0")
endif()
# dcp-vk-run under mpiexec as a user runs it: TP 8 / DCP 2 over 8 processes prints the TP 1 text;
# ag_rs over 4 processes x 2 ranks; exit codes 2 (configuration) and 1 (unreadable model).
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  dcp_test(test_run_mpi SOURCES test_run_mpi.c ARGS ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:dcp-vk-run> TIMEOUT 900)
  add_dependencies(test_run_mpi dcp-vk-run)
  set_tests_properties(test_run_mpi PROPERTIES PROCESSORS 8)
endif()
# The same architectures through dcp-vk-gguf --make-model and dcp-vk-run (TP 1 against TP 8 / DCP 2).
dcp_test(test_archs_apps SOURCES test_archs_apps.c
         ARGS $<TARGET_FILE:dcp-vk-gguf> $<TARGET_FILE:dcp-vk-run> ${CMAKE_CURRENT_BINARY_DIR})
add_dependencies(test_archs_apps dcp-vk-gguf dcp-vk-run)
# The q8_0 KV cache in the model: a generated head-dim-32 llama at TP 1 and TP 8 / DCP 2 (a2a,
# ag_rs) with identical greedy ids, logits within the documented bound of f16 KV and the reference;
# stories260K (head dim 8) refused by name.
dcp_test(test_kv_q8 SOURCES test_kv_q8.c ref_model.c vkutil.c TIMEOUT 600)
# A model of real 7B widths (2 layers, Q8_0, generated in memory) at TP 8 / DCP 2 against TP 1:
# every buffer within the binding range (mailboxes and put areas too), the same greedy tokens.
dcp_test(test_model_7b SOURCES test_model_7b.c vkutil.c ENV "DCP_VK_DEVICES=0,0,0,0,0,0,0,0" TIMEOUT 600
         LABELS model)
