#!/bin/sh
# dcp-vk-run with and without --speculative-config: the same generated tokens (greedy), and the
# speculative run's spec_decode counters. Usage: run_same.sh DCP-VK-RUN SPEC-JSON ARGS...
set -u
run=$1
spec=$2
shift 2
plain=$("$run" "$@" --json) || { echo "dcp-vk-run without speculation failed"; exit 1; }
fast=$("$run" "$@" --json --speculative-config "$spec") || { echo "dcp-vk-run with speculation failed"; exit 1; }
a=$(printf '%s' "$plain" | grep -o '"tokens": \[[^]]*\]')
b=$(printf '%s' "$fast" | grep -o '"tokens": \[[^]]*\]')
counters=$(printf '%s' "$fast" | grep -o '"spec_decode": {.*}')
if [ -z "$a" ] || [ "$a" != "$b" ]; then
  echo "different tokens: without $a; with $b"
  exit 1
fi
echo "same tokens; $counters"
