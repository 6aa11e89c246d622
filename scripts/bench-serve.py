#!/usr/bin/env python3
"""Benchmarks an OpenAI-compatible server (dcp-vk-serve, vLLM, llama-server) as `vllm bench serve`
does, and reports what it reports.

Sends --num-prompts streaming completions (server-sent events, usage included) to --base-url, at
--request-rate requests/s (Poisson arrivals drawn with --seed; inf: all at once), at most
--max-concurrency in flight, and measures each on the client's monotonic clock:
  TTFT   time to first token: the send to the first chunk with text
  TPOT   time per output token after the first: (E2EL - TTFT) / (output tokens - 1)
  ITL    inter-token latency: the gaps between chunks with text (a chunk may carry more than one
         token when the client falls behind, as in vLLM's benchmark)
  E2EL   end-to-end latency: the send to the end of the stream
and prints request throughput, output-token and total-token throughput (the server's usage
counts), mean / median / p99 (--metric-percentiles) of each latency in ms, and with --goodput the
requests/s that met every SLO given (ttft:MS tpot:MS e2el:MS). --result-json writes vLLM's JSON
fields (duration, completed, total_input_tokens, ..., mean_ttft_ms, p99_itl_ms, ..., and the
per-request lists); scripts/plot-serve.py draws it.

Prompts: --dataset random (words drawn from a list of short common words, --random-input-len
of them, max_tokens --random-output-len; --random-range-ratio R draws both lengths uniformly in
[len (1 - R), len (1 + R)]), or --dataset file PATH (one prompt a line; a JSONL line is an object
with "prompt", and optionally "max_tokens"; other lines are the prompt themselves, max_tokens
--random-output-len). --endpoint /v1/chat/completions sends each prompt as one user message.
Python's standard library only. Example:
  build/dcp-vk-serve -m tests/data/stories260K.gguf --port 8080 &
  python3 scripts/bench-serve.py --base-url http://127.0.0.1:8080 --num-prompts 50 \\
      --dataset random --random-input-len 32 --random-output-len 64 --ignore-eos \\
      --request-rate 10 --max-concurrency 8 --goodput ttft:500 tpot:50 --result-json bench.json
"""
import argparse
import http.client
import json
import math
import os
import random
import statistics
import sys
import threading
import time
import urllib.parse
from datetime import datetime

from serve_bench_util import pct, sse_events

# Short words, most of them one token in common vocabularies: random prompts of about as many
# tokens as words, whatever the tokenizer (the server's usage gives the exact counts).
WORDS = ("the a and to of in it was he she they we you is on for with his her at but had that one day "
         "big little cat dog sun tree ball red blue happy sad run play went saw said mom dad boy girl "
         "park home time old new good bad friend toy box car bird fish water food look go up down "
         "out can not very so then when there this all make like see").split()


def parse_goodput(items):
    slo = {}
    for it in items or []:
        key, sep, val = it.partition(":")
        if not sep or key not in ("ttft", "tpot", "e2el"):
            sys.exit(f"bench-serve: --goodput '{it}': want ttft:MS, tpot:MS or e2el:MS")
        try:
            slo[key] = float(val)
        except ValueError:
            sys.exit(f"bench-serve: --goodput '{it}': '{val}' is not a number of milliseconds")
        if slo[key] < 0:
            sys.exit(f"bench-serve: --goodput '{it}': negative")
    return slo


def load_prompts(args, rng):
    """[(prompt, max_tokens)] of --num-prompts requests."""
    kind = args.dataset[0]
    out = []
    if kind == "random":
        if len(args.dataset) != 1:
            sys.exit("bench-serve: --dataset random takes no path")
        r = args.random_range_ratio
        if not 0 <= r < 1:
            sys.exit("bench-serve: --random-range-ratio must be in [0, 1)")

        def draw(n):
            return max(1, rng.randint(int(n * (1 - r)), int(math.ceil(n * (1 + r))))) if r else n

        for _ in range(args.num_prompts):
            out.append((" ".join(rng.choice(WORDS) for _ in range(draw(args.random_input_len))),
                        draw(args.random_output_len)))
        return out
    if kind != "file" or len(args.dataset) != 2:
        sys.exit("bench-serve: --dataset is 'random' or 'file PATH'")
    lines = []
    with open(args.dataset[1], encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if line.lstrip().startswith("{"):
                try:
                    j = json.loads(line)
                except json.JSONDecodeError as e:
                    sys.exit(f"bench-serve: {args.dataset[1]}:{n}: {e}")
                if not isinstance(j.get("prompt"), str):
                    sys.exit(f"bench-serve: {args.dataset[1]}:{n}: no \"prompt\" string")
                lines.append((j["prompt"], int(j.get("max_tokens", args.random_output_len))))
            else:
                lines.append((line, args.random_output_len))
    if not lines:
        sys.exit(f"bench-serve: {args.dataset[1]} holds no prompt")
    # as vLLM: the file's prompts in order, again from the start when more are asked for
    return [lines[i % len(lines)] for i in range(args.num_prompts)]


class Target:
    def __init__(self, base_url, api_key, timeout):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            sys.exit(f"bench-serve: --base-url '{base_url}': want http://HOST:PORT")
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout

    def conn(self):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def get_json(self, path):
        c = self.conn()
        c.request("GET", self.prefix + path, headers=self.headers)
        r = c.getresponse()
        body = r.read().decode()
        c.close()
        if r.status != 200:
            sys.exit(f"bench-serve: GET {path}: {r.status} {body[:300]}")
        return json.loads(body)


def stream_completion(t, endpoint, body, rec):
    """One streaming completion: fills rec (success, ttft, itl, latency, tokens, text, error)."""
    rec.update(success=False, ttft=0.0, itl=[], latency=0.0, prompt_tokens=0, output_tokens=0,
               generated_text="", error="")
    try:
        c = t.conn()
        st = time.perf_counter()
        c.request("POST", t.prefix + endpoint, json.dumps(body), t.headers)
        r = c.getresponse()
        if r.status != 200:
            rec["error"] = f"HTTP {r.status}: {r.read().decode(errors='replace')[:300]}"
            c.close()
            return
        last, text, usage, done = None, [], None, False
        for now, ev in sse_events(r):
            for line in ev.splitlines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    continue
                j = json.loads(payload)
                if "error" in j:
                    rec["error"] = json.dumps(j["error"])[:300]
                if j.get("usage"):
                    usage = j["usage"]
                for ch in j.get("choices", []):
                    piece = ch.get("text") or (ch.get("delta") or {}).get("content") or ""
                    if piece:
                        if last is None:
                            rec["ttft"] = now - st
                        else:
                            rec["itl"].append(now - last)
                        last = now
                        text.append(piece)
            if done:
                break
        rec["latency"] = time.perf_counter() - st
        c.close()
        rec["generated_text"] = "".join(text)
        if rec["error"]:
            return
        if not done:
            rec["error"] = "the stream ended without [DONE]"
            return
        if usage:
            rec["prompt_tokens"] = usage.get("prompt_tokens", 0)
            rec["output_tokens"] = usage.get("completion_tokens", 0)
        else:  # a server without usage in streams: one token a chunk
            rec["output_tokens"] = len(rec["itl"]) + (1 if last is not None else 0)
        rec["success"] = True
    except (OSError, http.client.HTTPException, json.JSONDecodeError, UnicodeDecodeError) as e:
        rec["error"] = f"{type(e).__name__}: {e}"


def summarize(args, recs, duration, slo):
    ok = [r for r in recs if r["success"]]
    ttfts = [r["ttft"] for r in ok]
    tpots = [(r["latency"] - r["ttft"]) / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1]
    itls = [x for r in ok for x in r["itl"]]
    e2els = [r["latency"] for r in ok]
    total_in = sum(r["prompt_tokens"] for r in ok)
    total_out = sum(r["output_tokens"] for r in ok)
    res = {
        "max_concurrency": args.max_concurrency,
        "duration": duration,
        "completed": len(ok),
        "failed": len(recs) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration else 0.0,
        "request_goodput": None,
        "output_throughput": total_out / duration if duration else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration else 0.0,
    }
    if slo:
        good = 0
        for r in ok:
            tpot = (r["latency"] - r["ttft"]) / (r["output_tokens"] - 1) if r["output_tokens"] > 1 else 0.0
            got = {"ttft": r["ttft"] * 1e3, "tpot": tpot * 1e3, "e2el": r["latency"] * 1e3}
            good += all(got[k] <= v for k, v in slo.items())
        res["request_goodput"] = good / duration if duration else 0.0
    ps = [float(p) for p in args.metric_percentiles.split(",")]
    for key, xs in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        ms = [x * 1e3 for x in xs]
        res[f"mean_{key}_ms"] = statistics.mean(ms) if ms else 0.0
        res[f"median_{key}_ms"] = statistics.median(ms) if ms else 0.0
        res[f"std_{key}_ms"] = statistics.pstdev(ms) if ms else 0.0
        for p in ps:
            res[f"p{p:g}_{key}_ms"] = pct(ms, p, empty=0.0)
    res["input_lens"] = [r["prompt_tokens"] for r in recs]
    res["output_lens"] = [r["output_tokens"] for r in recs]
    res["ttfts"] = [r["ttft"] for r in recs]
    res["itls"] = [r["itl"] for r in recs]
    res["e2els"] = [r["latency"] for r in recs]
    res["generated_texts"] = [r["generated_text"] for r in recs]
    res["errors"] = [r["error"] for r in recs]
    return res, ps


def report(res, ps, slo):
    w = 50

    def line(name, v, fmt="{:.2f}"):
        print(f"{name:<40}{fmt.format(v):>10}")

    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=w, c="="))
    line("Successful requests:", res["completed"], "{}")
    if res["failed"]:
        line("Failed requests:", res["failed"], "{}")
    if res.get("max_concurrency"):
        line("Maximum request concurrency:", res["max_concurrency"], "{}")
    line("Benchmark duration (s):", res["duration"])
    line("Total input tokens:", res["total_input_tokens"], "{}")
    line("Total generated tokens:", res["total_output_tokens"], "{}")
    line("Request throughput (req/s):", res["request_throughput"])
    if slo:
        line("Request goodput (req/s):", res["request_goodput"])
    line("Output token throughput (tok/s):", res["output_throughput"])
    line("Total token throughput (tok/s):", res["total_token_throughput"])
    for key, title, short in (("ttft", "Time to First Token", "TTFT"),
                              ("tpot", "Time per Output Token (excl. 1st token)", "TPOT"),
                              ("itl", "Inter-token Latency", "ITL"), ("e2el", "End-to-end Latency", "E2EL")):
        print("{s:{c}^{n}}".format(s=title, n=w, c="-"))
        line(f"Mean {short} (ms):", res[f"mean_{key}_ms"])
        line(f"Median {short} (ms):", res[f"median_{key}_ms"])
        for p in ps:
            line(f"P{p:g} {short} (ms):", res[f"p{p:g}_{key}_ms"])
    print("=" * w)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8080", help="the server (default http://127.0.0.1:8080)")
    ap.add_argument("--endpoint", default="/v1/completions",
                    help="/v1/completions (default) or /v1/chat/completions (each prompt one user message)")
    ap.add_argument("--model", default=None, help="model name sent (default: the first of GET /v1/models)")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="Bearer token (default $OPENAI_API_KEY)")
    ap.add_argument("--dataset", nargs="+", default=["random"], metavar="random|file PATH",
                    help="prompts: random words, or a file (one prompt a line, or JSONL) (default random)")
    ap.add_argument("--num-prompts", type=int, default=100, help="requests to send (default 100)")
    ap.add_argument("--random-input-len", type=int, default=128, help="words of a random prompt (default 128)")
    ap.add_argument("--random-output-len", type=int, default=128, help="max_tokens of a request (default 128)")
    ap.add_argument("--random-range-ratio", type=float, default=0.0, help="length spread, [0, 1) (default 0)")
    ap.add_argument("--ignore-eos", action="store_true", help="send ignore_eos: every request generates max_tokens")
    ap.add_argument("--temperature", type=float, default=0.0, help="(default 0: greedy)")
    ap.add_argument("--request-rate", type=float, default=float("inf"),
                    help="requests/s, Poisson arrivals (default inf: all at once)")
    ap.add_argument("--max-concurrency", type=int, default=None, help="requests in flight at most (default no limit)")
    ap.add_argument("--seed", type=int, default=0, help="prompts and arrival times (default 0)")
    ap.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                    help="SLOs for goodput: ttft:MS tpot:MS e2el:MS (a request is good when it meets all given)")
    ap.add_argument("--metric-percentiles", default="99", help="percentiles reported, comma-separated (default 99)")
    ap.add_argument("--result-json", default=None, help="write the results here (JSON)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one request may take (default 3600)")
    args = ap.parse_args()
    if args.num_prompts < 1:
        sys.exit("bench-serve: --num-prompts must be >= 1")
    if args.request_rate <= 0:
        sys.exit("bench-serve: --request-rate must be > 0 (inf: all at once)")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        sys.exit("bench-serve: --max-concurrency must be >= 1")
    slo = parse_goodput(args.goodput)
    rng = random.Random(args.seed)
    prompts = load_prompts(args, rng)
    t = Target(args.base_url, args.api_key, args.timeout)
    model = args.model or t.get_json("/v1/models")["data"][0]["id"]

    chat = args.endpoint.rstrip("/").endswith("chat/completions")

    def body(prompt, max_tokens):
        b = {"model": model, "max_tokens": max_tokens, "temperature": args.temperature,
             "stream": True, "stream_options": {"include_usage": True}}
        if chat:  # the prompt as one user message
            b["messages"] = [{"role": "user", "content": prompt}]
        else:
            b["prompt"] = prompt
        if args.ignore_eos:
            b["ignore_eos"] = True
        return b

    # One request first, as vLLM's benchmark: the setup works (and the server is warm).
    probe = {}
    stream_completion(t, args.endpoint, body(prompts[0][0], min(prompts[0][1], 8)), probe)
    if not probe["success"]:
        sys.exit(f"bench-serve: the test request failed: {probe['error']}")
    print(f"model {model}, {args.num_prompts} prompts, request rate {args.request_rate}, "
          f"max concurrency {args.max_concurrency}", flush=True)

    # Arrival times (seconds from the start): exponential gaps at the rate, seeded.
    arrivals, at = [], 0.0
    for _ in prompts:
        arrivals.append(at)
        if not math.isinf(args.request_rate):
            at += rng.expovariate(args.request_rate)
    recs = [dict() for _ in prompts]
    gate = threading.Semaphore(args.max_concurrency) if args.max_concurrency else None

    def one(i):
        if gate:
            with gate:
                stream_completion(t, args.endpoint, body(*prompts[i]), recs[i])
        else:
            stream_completion(t, args.endpoint, body(*prompts[i]), recs[i])

    threads = []
    t0 = time.perf_counter()
    for i, a in enumerate(arrivals):
        wait = t0 + a - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        th = threading.Thread(target=one, args=(i,), daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    duration = time.perf_counter() - t0
    res, ps = summarize(args, recs, duration, slo)
    report(res, ps, slo)
    failed = [e for e in res["errors"] if e]
    if failed:
        print(f"bench-serve: {len(failed)} requests failed, the first: {failed[0]}", file=sys.stderr)
    if args.result_json:
        out = {
            "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
            "backend": "openai",
            "base_url": args.base_url,
            "endpoint": args.endpoint,
            "model_id": model,
            "dataset": args.dataset[0],
            "num_prompts": args.num_prompts,
            "request_rate": "inf" if math.isinf(args.request_rate) else args.request_rate,
            "burstiness": 1.0,
            "seed": args.seed,
            "goodput_slo_ms": slo or None,
            "percentiles": ps,
            **res,
        }
        with open(args.result_json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {args.result_json}")
    return 1 if res["completed"] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
