# Attention kernels against the CPU reference, on one device and on two logical devices.
dcp_test(test_paged_decode SOURCES test_paged_decode.c vkutil.c)
dcp_test(test_paged_decode_2dev EXE test_paged_decode ENV "DCP_VK_DEVICES=0,0")
dcp_test(test_lse_merge SOURCES test_lse_merge.c vkutil.c)
dcp_test(test_lse_merge_2dev EXE test_lse_merge ENV "DCP_VK_DEVICES=0,0")
dcp_test(test_dtype SOURCES test_dtype.c)
dcp_test(test_public_api SOURCES test_public_api.c)
