#!/bin/sh
# A draft model whose heads do not allow the target's DCP size: dcp-vk-run loads it at DCP 1 over
# the same TP ranks (its KV cache replicated over each DCP group), says so, and the greedy tokens
# equal those without speculation. Two generated models of the built-in vocabulary: the target 16
# query / 2 KV heads (TP 8 / DCP 2 allowed), the draft 16 / 8 (DCP 2 would need 16 KV heads' worth).
# Usage: run_replicated.sh DCP-VK-GGUF DCP-VK-RUN
set -u
gguf=$1
run=$2
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
"$gguf" --make-model "$dir/target.gguf" --n-head 16 --n-head-kv 2 --n-layer 2 >/dev/null || exit 1
"$gguf" --make-model "$dir/draft.gguf" --n-head 16 --n-head-kv 8 --n-layer 1 --seed 7 >/dev/null || exit 1
sh "$(dirname "$0")/run_same.sh" "$run" "{\"model\": \"$dir/draft.gguf\", \"num_speculative_tokens\": 3}" \
  -m "$dir/target.gguf" -p "Once upon a time" -n 24 --temp 0 --tensor-parallel-size 8 \
  --decode-context-parallel-size 2 2>&1
