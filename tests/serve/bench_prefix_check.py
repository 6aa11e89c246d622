#!/usr/bin/env python3
"""scripts/bench-prefix.py against real dcp-vk-serve servers (run by CTest, test app_bench_prefix):
  python3 bench_prefix_check.py DCP-VK-SERVE BENCH-PREFIX.py
Runs the benchmark on a tiny trace (2 conversations x 2 turns, its default generated model) at TP 1
and TP 2 with DCP 2, caching off, on and offload; checks that it exits 0 (the script itself fails on
a server's non-zero exit at SIGTERM, on Vulkan validation messages, and on /metrics prefix counters
that disagree with the usage fields), that the JSON has every field and one run per configuration
and mode the server supports (offload skipped with a note where dcp-vk-serve has no
--kv-offloading-size), that the hit rate is 0 with caching off and > 0 with caching on, and that the
Markdown table is on stdout. No speed is asserted."""
import json
import os
import subprocess
import sys
import tempfile


def fail(msg):
    print(f"bench_prefix_check: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    server, script = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="bench-prefix-check-") as d:
        out = os.path.join(d, "r.json")
        cmd = [sys.executable, script, "--server", server, "--configs", "1x1,2x2", "--conversations", "2",
               "--turns", "2", "--concurrency", "2", "--system-words", "30", "--user-words", "4", "--max-tokens", "4",
               "--kv-pages", "64", "--seed", "7", "--result-json", out]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=500)
        if p.returncode != 0:
            fail(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
        with open(out) as f:
            r = json.load(f)
    for k in ("model", "command", "configs", "modes", "skipped", "kv_pages_per_rank", "block_size", "trace",
              "machine", "runs"):
        if k not in r:
            fail(f"the JSON has no '{k}'")
    help_text = subprocess.run([server, "--help"], capture_output=True, text=True).stdout
    has_offload = "--kv-offloading-size" in help_text
    if has_offload == ("offload" in r["skipped"]):
        fail(f"offload skipped {r['skipped']} but --kv-offloading-size in --help: {has_offload}")
    if not has_offload and "no --kv-offloading-size" not in p.stdout:
        fail(f"no note on stdout that the offload mode is skipped:\n{p.stdout}")
    modes = ["off", "on"] + (["offload"] if has_offload else [])
    want = [(tp, dcp, m) for tp, dcp in ((1, 1), (2, 2)) for m in modes]
    got = [(x["tp"], x["dcp"], x["mode"]) for x in r["runs"]]
    if got != want:
        fail(f"runs {got}, want {want}")
    fields = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "hit_rate", "metrics_queries",
              "metrics_hits", "metrics_hit_rate", "evictions", "preemptions", "duration_s", "output_tokens_per_s",
              "ttft_p50_s", "ttft_p99_s", "ttft_s", "hit_rate_by_turn", "answers_digest", "banner")
    for x in r["runs"]:
        name = f"TP {x['tp']} DCP {x['dcp']} {x['mode']}"
        missing = [k for k in fields if k not in x]
        if missing:
            fail(f"{name}: no {missing}")
        if x["requests"] != 4 or x["completion_tokens"] != 4 * 4 or len(x["ttft_s"]) != 4:
            fail(f"{name}: {x['requests']} requests, {x['completion_tokens']} tokens, {len(x['ttft_s'])} TTFTs")
        if not (0 < x["ttft_p50_s"] <= x["ttft_p99_s"] and x["output_tokens_per_s"] > 0):
            fail(f"{name}: TTFT p50 {x['ttft_p50_s']} p99 {x['ttft_p99_s']}, {x['output_tokens_per_s']} tok/s")
        if x["mode"] == "off":
            if x["hit_rate"] != 0 or x["cached_tokens"] != 0 or x["metrics_hits"] != 0:
                fail(f"{name}: hits with caching off: {x['cached_tokens']} cached, {x['metrics_hits']} in /metrics")
        else:
            # the shared system prompt and the first turn's history are whole blocks at DCP 1 and 2
            if not (x["hit_rate"] > 0 and x["hit_rate_by_turn"][1] > 0 and x["metrics_hit_rate"] > 0):
                fail(f"{name}: hit rate {x['hit_rate']} (by turn {x['hit_rate_by_turn']}, /metrics "
                     f"{x['metrics_hit_rate']}) with caching on")
    if "| config | prefix caching | hit rate |" not in p.stdout:
        fail(f"no Markdown table on stdout:\n{p.stdout}")
    print(p.stdout)


if __name__ == "__main__":
    main()
