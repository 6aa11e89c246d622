# DCP across devices: placement, KV cache and kv_append, communicator, DCP attention step.
dcp_test(test_placement SOURCES test_placement.c)
dcp_test(test_kv_cache SOURCES test_kv_cache.c vkutil.c)
dcp_test(test_kv_cache_4dev EXE test_kv_cache ENV "DCP_VK_DEVICES=0,0,0,0")
dcp_test(test_comm SOURCES test_comm.c vkutil.c ENV "DCP_VK_DEVICES=0")
dcp_test(test_comm_3dev EXE test_comm ENV "DCP_VK_DEVICES=0,0,0")
dcp_test(test_comm_4dev EXE test_comm ENV "DCP_VK_DEVICES=0,0,0,0")
