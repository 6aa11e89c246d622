#!/usr/bin/env python3
"""scripts/bench-serve.py against a real dcp-vk-serve (run by CTest, test app_bench_serve):
  python3 bench_serve_check.py DCP-VK-SERVE MODEL.gguf BENCH-SERVE.py
Starts the server on a free port (--port 0, the port read from its banner), then runs the benchmark
three times: random prompts at a Poisson rate with a concurrency limit and goodput SLOs, a prompt
file (plain lines and JSONL) all at once, and chat completions. Checks each --result-json: vLLM's fields, the counts (every
request completed, ignore_eos: output tokens = max_tokens), the per-request lists, the throughputs
against the totals and the duration, mean / median / p99 of TTFT, TPOT, ITL and E2EL in order, the
goodput within the request throughput; then the server's vllm:request_success_total against the
requests sent (each run's test request included), and that the server exits 0 at SIGTERM without
Vulkan validation messages."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request


def fail(msg):
    print(f"bench_serve_check: {msg}", file=sys.stderr)
    sys.exit(1)


def check_result(path, n, out_len, goodput):
    with open(path) as f:
        r = json.load(f)
    keys = ["date", "model_id", "num_prompts", "request_rate", "max_concurrency", "duration", "completed", "failed",
            "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
            "output_throughput", "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls", "e2els",
            "generated_texts", "errors"]
    for m in ("ttft", "tpot", "itl", "e2el"):
        keys += [f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms", f"p99_{m}_ms"]
    missing = [k for k in keys if k not in r]
    if missing:
        fail(f"{path}: no {missing}")
    if r["completed"] != n or r["failed"] != 0 or any(r["errors"]):
        fail(f"{path}: completed {r['completed']} failed {r['failed']} errors {r['errors'][:2]}")
    for k in ("input_lens", "output_lens", "ttfts", "itls", "e2els", "generated_texts"):
        if len(r[k]) != n:
            fail(f"{path}: {k} has {len(r[k])} entries, want {n}")
    if r["output_lens"] != out_len:
        fail(f"{path}: output_lens {r['output_lens']}, want {out_len} (ignore_eos)")
    if r["total_output_tokens"] != sum(out_len) or r["total_input_tokens"] != sum(r["input_lens"]):
        fail(f"{path}: totals {r['total_input_tokens']} / {r['total_output_tokens']}")
    if min(r["input_lens"]) < 1 or not all(t for t in r["generated_texts"]):
        fail(f"{path}: an empty prompt or text")
    d = r["duration"]
    close = lambda a, b: abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))  # noqa: E731
    if not (d > 0 and close(r["request_throughput"], n / d) and close(r["output_throughput"], sum(out_len) / d)
            and close(r["total_token_throughput"], (sum(out_len) + sum(r["input_lens"])) / d)):
        fail(f"{path}: throughputs do not match the totals over {d} s")
    for m in ("ttft", "tpot", "itl", "e2el"):
        mean, med, p99 = r[f"mean_{m}_ms"], r[f"median_{m}_ms"], r[f"p99_{m}_ms"]
        if not (0 < med <= p99 and 0 < mean <= p99):
            fail(f"{path}: {m} mean {mean} median {med} p99 {p99}")
    for i in range(n):  # each request: TTFT <= E2EL, and as many gaps as chunks after the first
        if not (0 < r["ttfts"][i] <= r["e2els"][i]) or len(r["itls"][i]) > out_len[i] - 1:
            fail(f"{path}: request {i}: ttft {r['ttfts'][i]} e2el {r['e2els'][i]} itls {len(r['itls'][i])}")
    if goodput:
        if r["request_goodput"] is None or not (0 <= r["request_goodput"] <= r["request_throughput"] + 1e-12):
            fail(f"{path}: goodput {r['request_goodput']} against throughput {r['request_throughput']}")
    elif r["request_goodput"] is not None:
        fail(f"{path}: goodput without SLOs")
    return r


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: bench_serve_check.py DCP-VK-SERVE MODEL.gguf BENCH-SERVE.py")
    server, model, bench = sys.argv[1:]
    tmp = tempfile.mkdtemp(prefix="dcp-vk-bench-serve-")
    err_path = os.path.join(tmp, "server.log")
    err = open(err_path, "w")
    proc = subprocess.Popen([server, "-m", model, "--port", "0", "-c", "256", "--max-seqs", "4",
                             "--chat-template", "chatml"],
                            stdout=subprocess.DEVNULL, stderr=err)
    try:
        t0 = time.time()
        while True:
            text = open(err_path).read()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
            if m:
                port = int(m.group(1))
                break
            if proc.poll() is not None:
                fail(f"the server exited before listening: {text}")
            if time.time() - t0 > 300:
                fail("the server did not listen within 300 s")
            time.sleep(0.1)
        base = f"http://127.0.0.1:{port}"

        def run(extra, json_path):
            cmd = [sys.executable, bench, "--base-url", base, "--seed", "7", "--ignore-eos", "--result-json",
                   json_path] + extra
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if p.returncode != 0:
                fail(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
            for title in ("Serving Benchmark Result", "Request throughput (req/s):", "Request goodput",
                          "Output token throughput (tok/s):", "Total token throughput (tok/s):", "Median TTFT (ms):",
                          "P99 TPOT (ms):", "Mean ITL (ms):", "P99 E2EL (ms):"):
                if title not in p.stdout and not (title == "Request goodput" and "--goodput" not in extra):
                    fail(f"the report has no '{title}':\n{p.stdout}")
            print(p.stdout)

        # 1: random prompts, Poisson arrivals at 20/s, 3 in flight at most, SLOs
        j1 = os.path.join(tmp, "random.json")
        run(["--dataset", "random", "--num-prompts", "8", "--random-input-len", "12", "--random-output-len", "10",
             "--request-rate", "20", "--max-concurrency", "3", "--goodput", "ttft:60000", "tpot:60000", "e2el:600000"],
            j1)
        r1 = check_result(j1, 8, [10] * 8, True)
        if r1["request_goodput"] != r1["request_throughput"]:  # SLOs no request misses
            fail(f"goodput {r1['request_goodput']} with SLOs of minutes, throughput {r1['request_throughput']}")
        if r1["max_concurrency"] != 3 or r1["request_rate"] != 20:
            fail(f"settings in the JSON: {r1['max_concurrency']} {r1['request_rate']}")
        # 2: a prompt file (a plain line, JSONL lines with and without max_tokens), all at once
        ds = os.path.join(tmp, "prompts.txt")
        with open(ds, "w") as f:
            f.write("Once upon a time\n")
            f.write(json.dumps({"prompt": "The cat sat", "max_tokens": 5}) + "\n\n")
            f.write(json.dumps({"prompt": "Lily saw a big dog"}) + "\n")
        j2 = os.path.join(tmp, "file.json")
        run(["--dataset", "file", ds, "--num-prompts", "5", "--random-output-len", "7"], j2)
        r2 = check_result(j2, 5, [7, 5, 7, 7, 5], False)
        if r2["request_rate"] != "inf":
            fail(f"request_rate {r2['request_rate']}, want inf")
        # 3: chat completions (each prompt one user message)
        j3 = os.path.join(tmp, "chat.json")
        run(["--endpoint", "/v1/chat/completions", "--num-prompts", "3", "--random-input-len", "6",
             "--random-output-len", "6", "--max-concurrency", "2"], j3)
        check_result(j3, 3, [6] * 3, False)
        # the server saw them all: 8 + 5 + 3 and each run's test request
        with urllib.request.urlopen(f"{base}/metrics", timeout=30) as resp:
            metrics = resp.read().decode()
        m = re.search(r'^vllm:request_success_total\{[^}]*finished_reason="length"\} (\d+)$', metrics, re.M)
        if not m or int(m.group(1)) != 8 + 5 + 3 + 3:
            fail(f"vllm:request_success_total{{length}}: {m.group(1) if m else None}, want 19")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        err.close()
    text = open(err_path).read()
    if "dcp-vk: validation" in text:
        fail(f"Vulkan validation messages:\n{text}")
    if code != 0:
        fail(f"the server exited {code}:\n{text}")
    shutil.rmtree(tmp)
    print("bench-serve: random and file datasets, completions and chat checked")


if __name__ == "__main__":
    main()
