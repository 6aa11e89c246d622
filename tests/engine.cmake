# The serving engine over stories260K: batch invariance with requests joining and leaving at TP 8 /
# DCP 2 (a2a, ag_rs), preemption and cancellation with the real pools checked, stop strings, max
# tokens, EOS, refused requests.
dcp_test(test_engine SOURCES test_engine.c ref_model.c vkutil.c)
# Chat template families: recognition and rendering (host only).
dcp_test(test_chat SOURCES test_chat.c LABELS host)
# Logprobs of the engine's tokens against a CPU computation from the same logits, batch-invariant,
# the same under n-gram speculation; prompt logprobs against the CPU double reference (TP 1 and
# TP 8 / DCP 2), batch- and chunk-invariant, with prefix caching; the whole vocabulary (prompt_top_logprobs
# ALL) likewise.
dcp_test(test_logprobs SOURCES test_logprobs.c ref_model.c vkutil.c)
# JSON-constrained requests (response_format) in the engine: bitwise the same alone and batched with
# other schemas and unconstrained requests, greedy and seeded, TP 1 and TP 8 / DCP 2 on logical devices.
dcp_test(test_engine_json SOURCES test_engine_json.c ref_model.c vkutil.c ENV "DCP_VK_DEVICES=0,0,0,0,0,0,0,0")
