#!/usr/bin/env python3
"""Throughput against concurrency for dcp-vk-serve: TP only against TP with DCP, same KV budget
(scripts/bench-serve.py is the general client, as `vllm bench serve`; this one starts the servers).

For each DCP size the script starts dcp-vk-serve (same model, same TP size, same devices, same
--kv-pages per rank pool), then for each concurrency C offers C streaming completions at once
(each client sends --requests-per-client requests back to back; long prompts of random token ids,
ignore_eos, greedy) and measures:
  output tokens/s   all completion tokens / wall time from the first send to the last [DONE]
  TTFT p50 / p99    time to the first streamed text of each request
  ITL p50 / p99     gaps between streamed chunks after the first (one chunk is usually one token;
                    a chunk may carry more when the client falls behind, as in vLLM's benchmark)
  running max/mean  requests holding KV at once, sampled from /metrics (max), and the mean
                    requests per step (dcpvk_step_sequences_total / dcpvk_steps_total)
  fit               requests of prompt + max tokens that the pool holds at once by the placement
                    formula (pages per rank of one request, interleave 1)
and the preemptions. Every request of a level gets the same prompts in every configuration. Writes
one JSON file (--out); scripts/plot-serve.py draws it.

Only the Python standard library is needed. Example (this machine: lavapipe, 2 cores; with many
logical devices on lavapipe, LP_NUM_THREADS=0 keeps each device's work on its queue thread):
  build/dcp-vk-gguf --make-model /tmp/bench-model.gguf --n-embd 256 --n-layer 4 --n-head 8 \\
      --n-head-kv 1 --head-dim 32 --n-ff 768 --n-ctx 4096 --type f16
  LP_NUM_THREADS=0 python3 scripts/bench-serve-dcp.py --server build/dcp-vk-serve \\
      --model /tmp/bench-model.gguf --tp 8 --dcp 1,2,4,8 --concurrency 1,2,4,8,16 \\
      --prompt-tokens 512 --max-tokens 256 --kv-pages 96 --out serve-curve.json
"""
import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time

from serve_bench_util import Server, pct, sse_events


def start_server(args, dcp):
    """One dcp-vk-serve at TP args.tp and DCP dcp."""
    cmd = [args.server, "-m", args.model, "--port", "0", "--tensor-parallel-size", str(args.tp),
           "--decode-context-parallel-size", str(dcp), "-c", str(args.ctx), "--max-seqs", str(args.max_seqs),
           "--kv-pages", str(args.kv_pages), "--block-size", str(args.block_size),
           "--prefill-chunk", str(args.prefill_chunk), "--max-queued", "1024", "--dcp-comm-backend",
           args.backend] + (args.extra.split() if args.extra else [])
    return Server(cmd, lambda msg: sys.exit(f"bench-serve-dcp: {msg}"), "dcp-vk-serve-bench-", poll_s=0.2)


def stream_request(port, prompt, max_tokens, rec):
    """One streaming completion; fills rec with send time, chunk times and token count."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    rec["send"] = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        rec["error"] = f"{r.status} {r.read().decode()[:200]}"
        return
    chunks, tokens = [], 0
    for now, ev in sse_events(r):
        if not ev.startswith("data: "):
            continue
        payload = ev[6:]
        if payload == "[DONE]":
            continue
        j = json.loads(payload)
        if j.get("usage"):
            tokens = j["usage"]["completion_tokens"]
        for ch in j.get("choices", []):
            if ch.get("text"):
                chunks.append(now)
    c.close()
    rec["chunks"] = chunks
    rec["tokens"] = tokens
    rec["done"] = time.perf_counter()


def run_level(srv, args, conc, seed):
    rng = random.Random(seed)
    V = args.vocab
    prompts = [[rng.randrange(args.token_lo, V) for _ in range(args.prompt_tokens)]
               for _ in range(conc * args.requests_per_client)]
    recs = [dict() for _ in prompts]
    m0 = srv.metrics()
    peak = [0.0]
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], srv.metrics()["dcpvk_requests_running"])
            except Exception:
                pass
            stop.wait(0.05)

    def client(k):
        for i in range(args.requests_per_client):
            idx = k * args.requests_per_client + i
            stream_request(srv.port, prompts[idx], args.max_tokens, recs[idx])

    st = threading.Thread(target=sampler)
    st.start()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = time.perf_counter()
    stop.set()
    st.join()
    m1 = srv.metrics()
    errors = [r["error"] for r in recs if "error" in r]
    if errors:
        sys.exit(f"bench-serve-dcp: requests failed: {errors[:3]}")
    ttft = [r["chunks"][0] - r["send"] for r in recs if r["chunks"]]
    itl = [b - a for r in recs for a, b in zip(r["chunks"], r["chunks"][1:])]
    out_tokens = sum(r["tokens"] for r in recs)
    steps = m1["dcpvk_steps_total"] - m0["dcpvk_steps_total"]
    seqs = m1["dcpvk_step_sequences_total"] - m0["dcpvk_step_sequences_total"]
    return {
        "concurrency": conc,
        "requests": len(recs),
        "output_tokens": out_tokens,
        "duration_s": t1 - t0,
        "output_tokens_per_s": out_tokens / (t1 - t0),
        "ttft_p50_s": pct(ttft, 50),
        "ttft_p99_s": pct(ttft, 99),
        "itl_p50_s": pct(itl, 50),
        "itl_p99_s": pct(itl, 99),
        "itl_mean_s": statistics.mean(itl) if itl else None,
        "running_max": peak[0],
        "running_mean_per_step": seqs / steps if steps else 0,
        "steps": steps,
        "preemptions": m1["dcpvk_preemptions_total"] - m0["dcpvk_preemptions_total"],
    }


def fit(args, dcp):
    """Requests of prompt + max tokens that kv_pages per rank hold (placement, interleave 1)."""
    total = args.prompt_tokens + args.max_tokens
    per_rank = -(-total // dcp)  # the busiest rank's tokens
    pages = -(-per_rank // args.block_size)
    return args.kv_pages // pages


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="the dcp-vk-serve executable")
    ap.add_argument("--model", required=True, help="GGUF model")
    ap.add_argument("--tp", type=int, default=8, help="TP size of every configuration (default 8)")
    ap.add_argument("--dcp", default="1,2,4,8", help="DCP sizes to compare (default 1,2,4,8)")
    ap.add_argument("--backend", default="a2a", help="DCP exchange, a2a or ag_rs (default a2a)")
    ap.add_argument("--concurrency", default="1,2,4,8,16", help="concurrent clients (default 1,2,4,8,16)")
    ap.add_argument("--requests-per-client", type=int, default=1, help="requests each client sends (default 1)")
    ap.add_argument("--prompt-tokens", type=int, default=1024, help="prompt length in tokens (default 1024)")
    ap.add_argument("--max-tokens", type=int, default=64, help="tokens generated per request (default 64)")
    ap.add_argument("--vocab", type=int, default=576, help="prompt ids are drawn from [token-lo, vocab)")
    ap.add_argument("--token-lo", type=int, default=259, help="(default 259: past SPM's control and byte tokens)")
    ap.add_argument("--kv-pages", type=int, default=140, help="KV pages per rank pool, every config (default 140)")
    ap.add_argument("--block-size", type=int, default=16, help="tokens per KV page (default 16)")
    ap.add_argument("--prefill-chunk", type=int, default=128, help="rows per step (default 128)")
    ap.add_argument("--max-seqs", type=int, default=16, help="sequence slots (default 16)")
    ap.add_argument("--ctx", type=int, default=2048, help="context per request (default 2048)")
    ap.add_argument("--extra", default="", help="more dcp-vk-serve options, space-separated")
    ap.add_argument("--out", default="serve-curve.json", help="JSON output (default serve-curve.json)")
    args = ap.parse_args()
    result = {
        "model": os.path.basename(args.model),
        "tp": args.tp,
        "backend": args.backend,
        "kv_pages_per_rank": args.kv_pages,
        "block_size": args.block_size,
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "requests_per_client": args.requests_per_client,
        "prefill_chunk": args.prefill_chunk,
        "max_seqs": args.max_seqs,
        "machine": os.uname().nodename + " " + os.uname().machine + f", {os.cpu_count()} CPUs",
        "env": {k: os.environ[k] for k in ("LP_NUM_THREADS", "DCP_VK_DEVICES", "VK_ICD_FILENAMES") if k in os.environ},
        "load_average_at_start": os.getloadavg(),
        "configs": [],
    }
    # Every configuration's server is started first (one at a time, each warmed up), then the levels
    # run configuration after configuration for each concurrency, so that a change of the machine's
    # load (shared machines) spreads over the configurations instead of biasing one of them. Only
    # one server works at a time; the idle ones wait on a condition variable.
    servers = {}
    for dcp in [int(x) for x in args.dcp.split(",")]:
        srv = start_server(args, dcp)
        print(f"# {srv.banner}", flush=True)
        stream_request(srv.port, [args.token_lo] * 8, 4, {})  # warm-up: pipelines, allocations
        servers[dcp] = srv
        result["configs"].append({"dcp": dcp, "fit": fit(args, dcp), "banner": srv.banner, "results": []})
    try:
        for conc in [int(x) for x in args.concurrency.split(",")]:
            for cfg in result["configs"]:
                dcp = cfg["dcp"]
                load0 = os.getloadavg()[0]
                r = run_level(servers[dcp], args, conc, seed=1000 + conc)
                r["load_average_1min"] = [load0, os.getloadavg()[0]]
                cfg["results"].append(r)
                print(f"TP {args.tp} DCP {dcp} C {conc:3d}: {r['output_tokens_per_s']:8.2f} tok/s  TTFT p50 "
                      f"{r['ttft_p50_s']:7.2f} p99 {r['ttft_p99_s']:7.2f} s  ITL p50 {r['itl_p50_s'] * 1e3:7.1f} p99 "
                      f"{r['itl_p99_s'] * 1e3:7.1f} ms  running max {r['running_max']:.0f} mean "
                      f"{r['running_mean_per_step']:.1f} (fit {cfg['fit']})  preemptions {r['preemptions']:.0f}  "
                      f"load {load0:.1f}", flush=True)
                with open(args.out + ".tmp", "w") as f:
                    json.dump(result, f, indent=1)
                os.replace(args.out + ".tmp", args.out)
    finally:
        for dcp, srv in servers.items():
            code, _ = srv.stop()
            if code != 0:
                print(f"bench-serve-dcp: the DCP {dcp} server exited with {code}", file=sys.stderr)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
