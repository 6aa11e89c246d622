#!/usr/bin/env python3
"""Prefix caching on a multi-turn agent trace through dcp-vk-serve (issue 20 section 4): TTFT, output
tokens/s and the prefix-cache hit rate with caching off, on, and on with KV offload to host memory,
for TP only against TP with DCP at the same KV pages per rank.

The trace (deterministic from --seed): C conversations (--conversations) of T turns (--turns) on one
shared system prompt (--system-words words). Turn t of a conversation sends the whole history as
one text completion:
    SYSTEM\\n\\nUser: U1\\nAssistant:A1\\nUser: U2\\nAssistant:A2 ... \\nUser: Ut\\nAssistant:
where Ui is a user message of --user-words random words and Ai the model's answer of turn i
(--max-tokens tokens, greedy, ignore_eos: the same text in every configuration, the engine being
batch-invariant). The turns run in rounds: round t sends turn t of every conversation, in an order
shuffled from the seed, --concurrency at a time, so the conversations interleave and each one's
next turn comes after all the others' (the LRU pool sees the whole working set between two hits).

For each configuration (TPxDCP in --configs) and mode (--modes: off = --no-enable-prefix-caching,
on = the server's default, offload = on with --kv-offloading-size --offload-gib, and
--kv-offloading-backend native where the server has that option too), the script starts
its own dcp-vk-serve (--port 0, the port read from its banner; SIGTERM at the end, exit 0 checked,
Vulkan validation messages fail), sends a warm-up request (not of the trace) and measures:
  TTFT p50 / p99    time to the first streamed text of each turn
  output tokens/s   completion tokens of the trace / wall time of the trace
  hit rate          sum of usage.prompt_tokens_details.cached_tokens / sum of usage.prompt_tokens,
                    cross-checked with /metrics (vllm:prefix_cache_hits_total / _queries_total over
                    the trace; they count every admission, so they differ only by preemptions'
                    recomputations, which the table shows too)
  evictions         dcpvk_prefix_cache_evictions_total over the trace (the pool was the limit)
Every configuration gets the same --kv-pages per rank, so DCP N holds N times the tokens: pick it
so the pool is the limit at DCP 1 (evictions > 0) and the larger cache of DCP shows as a higher
hit rate. Under DCP N a prefix is reused in whole blocks of block-size x N tokens (docs/design.md
section 18), so a small --block-size keeps that rounding small.

The offload mode needs a dcp-vk-serve with --kv-offloading-size (read from its --help); without
one the mode is skipped with a note on stdout and in the JSON ("skipped").

Without --model the script writes a llama test model with dcp-vk-gguf --make-model (beside
--server): 8 query heads and 1 KV head, so TP 8 allows DCP 1, 2, 4 and 8, and a 2048-token context.
Each server gets DCP_VK_DEVICES=0,0,... (TP logical devices on device 0) unless DCP_VK_DEVICES is
set, and LP_NUM_THREADS=0 unless set (lavapipe: each logical device's work on its queue thread).

Writes --result-json, prints a Markdown table, and with --plot a PNG (matplotlib: hit rate and TTFT
p50 per configuration); --from-json FILE runs nothing and prints / plots an earlier result. Only
the Python standard library is needed, matplotlib for --plot only.
Example (the README's table):
  python3 scripts/bench-prefix.py --server build/dcp-vk-serve --result-json prefix.json \\
      --plot docs/prefix-cache.png
"""
import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time

from serve_bench_util import Server, pct, sse_events

WORDS = ("the agent reads file code test build error line function value list table page cache token "
         "prompt model server request answer plan step tool call result check run fix change commit branch "
         "review note issue report time small large fast slow first last next every other same new old "
         "open close write send take give keep find make show tell ask need want try use add remove move "
         "copy start stop wait look see know think say go come work help turn word name number part place "
         "little big good bad long short high low right left up down in out on off over under again still "
         "then now here there when where why how what which who all some many few more most less each both "
         "red blue green tree house dog cat sun day night water road city story girl boy friend happy").split()


def fail(msg):
    print(f"bench-prefix: {msg}", file=sys.stderr)
    sys.exit(1)


def start_server(args, tp, dcp, mode):
    """One dcp-vk-serve for configuration TP x DCP and mode (off, on, offload)."""
    cmd = [args.server, "-m", args.model, "--port", "0", "--tensor-parallel-size", str(tp),
           "--decode-context-parallel-size", str(dcp), "-c", str(args.ctx), "--max-seqs", str(args.max_seqs),
           "--kv-pages", str(args.kv_pages), "--block-size", str(args.block_size),
           "--prefill-chunk", str(args.prefill_chunk), "--max-queued", "1024"]
    if mode == "off":
        cmd.append("--no-enable-prefix-caching")
    elif mode == "offload":
        cmd += ["--kv-offloading-size", str(args.offload_gib)]
        if args.offload_backend:
            cmd += ["--kv-offloading-backend", args.offload_backend]
    cmd += args.extra.split() if args.extra else []
    env = dict(os.environ)
    env.setdefault("DCP_VK_DEVICES", ",".join(["0"] * tp))
    env.setdefault("LP_NUM_THREADS", "0")
    srv = Server(cmd, fail, "dcp-vk-serve-prefix-", env=env)
    srv.env = {k: env[k] for k in ("DCP_VK_DEVICES", "LP_NUM_THREADS")}
    return srv


def stop_server(srv):
    """SIGTERM; fails unless the server exits 0 without Vulkan validation messages."""
    code, text = srv.stop()
    if code != 0:
        fail(f"the server exited with {code} at SIGTERM: {' '.join(srv.cmd)}\n{text}")
    if "dcp-vk: validation" in text:
        fail(f"Vulkan validation messages: {' '.join(srv.cmd)}\n{text}")


def stream_completion(port, prompt, max_tokens, rec):
    """One streaming text completion; fills rec with its times, text and usage."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": True, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    rec["send"] = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        rec["error"] = f"{r.status} {r.read().decode()[:300]}"
        c.close()
        return
    first, text, usage = None, [], None
    for now, ev in sse_events(r):
        if not ev.startswith("data: ") or ev[6:] == "[DONE]":
            continue
        j = json.loads(ev[6:])
        if j.get("usage"):
            usage = j["usage"]
        for ch in j.get("choices", []):
            if ch.get("text"):
                if first is None:
                    first = now
                text.append(ch["text"])
    c.close()
    rec["done"] = time.perf_counter()
    if usage is None:
        rec["error"] = "no usage chunk in the stream"
        return
    rec["first"] = first
    rec["text"] = "".join(text)
    rec["prompt_tokens"] = usage["prompt_tokens"]
    rec["completion_tokens"] = usage["completion_tokens"]
    rec["cached_tokens"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


def make_trace(args):
    """The system prompt, user messages [c][t] and each round's order, all from --seed."""
    rng = random.Random(args.seed)
    words = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    system = "You are a coding agent. " + words(args.system_words) + "."
    users = [[words(args.user_words) for _ in range(args.turns)] for _ in range(args.conversations)]
    orders = []
    for _ in range(args.turns):
        o = list(range(args.conversations))
        rng.shuffle(o)
        orders.append(o)
    return system, users, orders


def prompt_of(system, users_c, answers_c, t):
    parts = [system, "\n"]
    for i in range(t):
        parts.append(f"\nUser: {users_c[i]}\nAssistant:{answers_c[i]}")
    parts.append(f"\nUser: {users_c[t]}\nAssistant:")
    return "".join(parts)


def run_trace(srv, args, trace):
    system, users, orders = trace
    C, T = args.conversations, args.turns
    answers = [[None] * T for _ in range(C)]
    recs = [[dict() for _ in range(T)] for _ in range(C)]
    m0 = srv.metrics()
    t0 = time.perf_counter()
    for t in range(T):
        queue = list(orders[t])
        lock = threading.Lock()

        def worker():
            while True:
                with lock:
                    if not queue:
                        return
                    c = queue.pop(0)
                rec = recs[c][t]
                stream_completion(srv.port, prompt_of(system, users[c], answers[c], t), args.max_tokens, rec)
                answers[c][t] = rec.get("text", "")

        threads = [threading.Thread(target=worker) for _ in range(min(args.concurrency, C))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    t1 = time.perf_counter()
    m1 = srv.metrics()
    flat = [r for rc in recs for r in rc]
    errors = [r["error"] for r in flat if "error" in r]
    if errors:
        fail(f"requests failed: {errors[:3]}")
    if any(r["cached_tokens"] is None for r in flat):
        fail("a response has no usage.prompt_tokens_details.cached_tokens")
    # a metric's change over the trace, summed over its series (vLLM's carry model_name and engine)
    d = lambda name: sum(v - m0.get(k, 0.0) for k, v in m1.items() if k.split("{", 1)[0] == name)  # noqa: E731
    ttft = [r["first"] - r["send"] for r in flat if r["first"] is not None]
    prompt = sum(r["prompt_tokens"] for r in flat)
    cached = sum(r["cached_tokens"] for r in flat)
    out = sum(r["completion_tokens"] for r in flat)
    q, h = d("vllm:prefix_cache_queries_total"), d("vllm:prefix_cache_hits_total")
    res = {
        "requests": len(flat),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "completion_tokens": out,
        "hit_rate": cached / prompt if prompt else 0.0,
        "metrics_queries": q,
        "metrics_hits": h,
        "metrics_hit_rate": h / q if q else 0.0,  # 0 with caching off: no queries
        "evictions": d("dcpvk_prefix_cache_evictions_total"),
        "preemptions": d("dcpvk_preemptions_total"),
        "duration_s": t1 - t0,
        "output_tokens_per_s": out / (t1 - t0),
        "ttft_p50_s": pct(ttft, 50),
        "ttft_p99_s": pct(ttft, 99),
        "ttft_s": ttft,
        "hit_rate_by_turn": [sum(recs[c][t]["cached_tokens"] for c in range(C)) /
                             max(1, sum(recs[c][t]["prompt_tokens"] for c in range(C))) for t in range(T)],
        "answers_digest": hash_texts(answers),
        # what the server shows about offload (transfers, host pool): each series before and after
        "offload_metrics": {k: [m0.get(k, 0.0), v] for k, v in m1.items() if "offload" in k},
    }
    # dcpvk_kv_offload_blocks_total{direction="..."} over the trace: blocks copied each way
    by_dir = {}
    for k, v in m1.items():
        m = re.fullmatch(r'dcpvk_kv_offload_blocks_total\{direction="([^"]+)"\}', k)
        if m:
            by_dir[m.group(1)] = v - m0.get(k, 0.0)
    res["offload_blocks"] = by_dir
    # The usage fields count each request's first admission; /metrics every admission (a preempted
    # request's recomputation queries again). Without preemptions they agree exactly.
    # With caching off the server looks nothing up (both counters stay 0).
    if q == 0 and (h != 0 or cached != 0):
        fail(f"no prefix-cache queries in /metrics but {h:.0f} hits / {cached} cached tokens in the usage fields")
    if q != 0 and res["preemptions"] == 0 and (q != prompt or h != cached):
        fail(f"/metrics prefix counters {h:.0f} / {q:.0f} disagree with the usage fields {cached} / {prompt}")
    return res


def hash_texts(answers):
    import hashlib
    return hashlib.sha256(json.dumps(answers).encode()).hexdigest()[:16]


def server_supports(server, option):
    p = subprocess.run([server, "--help"], capture_output=True, text=True)
    return option in (p.stdout + p.stderr)


def make_model(args, tmpdir):
    tool = args.gguf_tool or os.path.join(os.path.dirname(os.path.abspath(args.server)), "dcp-vk-gguf")
    if not os.access(tool, os.X_OK):
        fail(f"{tool} is not an executable (dcp-vk-gguf for --make-model; --gguf-tool or --model)")
    path = os.path.join(tmpdir, "bench-prefix-model.gguf")
    cmd = [tool, "--make-model", path, "--n-embd", "128", "--n-layer", "4", "--n-head", "8", "--n-head-kv", "1",
           "--head-dim", "16", "--n-ff", "384", "--n-ctx", "2048", "--type", "f32", "--seed", "1234"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return path, " ".join(["dcp-vk-gguf"] + cmd[1:2] + ["MODEL.gguf"] + cmd[3:])


def table(result):
    lines = ["| config | prefix caching | hit rate | hit rate (/metrics) | evictions | TTFT p50 (ms) | "
             "TTFT p99 (ms) | output tok/s |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    offload = any(r["mode"] == "offload" for r in result["runs"])
    if offload:  # a column of the offload transfers, in blocks each way
        lines[0] += " offload blocks |"
        lines[1] += "---|"
    for r in result["runs"]:
        lines.append(f"| TP {r['tp']} DCP {r['dcp']} | {r['mode']} | {100 * r['hit_rate']:.1f}% | "
                     f"{100 * r['metrics_hit_rate']:.1f}% | {r['evictions']:.0f} | {1e3 * r['ttft_p50_s']:.0f} | "
                     f"{1e3 * r['ttft_p99_s']:.0f} | {r['output_tokens_per_s']:.1f} |")
        if offload:
            lines[-1] += " " + (", ".join(f"{k} {v:.0f}" for k, v in sorted(r["offload_blocks"].items())) or "-") + " |"
    return "\n".join(lines)


def plot(result, path):
    try:
        import matplotlib
    except ImportError:
        fail(f"--plot needs matplotlib (Debian: python3-matplotlib; {sys.executable} has none)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    modes = [m for m in result["modes"] if m not in result["skipped"]]
    cfgs = [f"TP {tp} DCP {dcp}" for tp, dcp in result["configs"]]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    w = 0.8 / max(1, len(modes))
    for i, m in enumerate(modes):
        rs = [next(r for r in result["runs"] if r["mode"] == m and (r["tp"], r["dcp"]) == tuple(c))
              for c in result["configs"]]
        xs = [k + (i - (len(modes) - 1) / 2) * w for k in range(len(cfgs))]
        b1 = a1.bar(xs, [100 * r["hit_rate"] for r in rs], w, label=f"caching {m}")
        b2 = a2.bar(xs, [1e3 * r["ttft_p50_s"] for r in rs], w, label=f"caching {m}")
        a1.bar_label(b1, fmt="%.0f", fontsize=8)
        a2.bar_label(b2, fmt="%.0f", fontsize=8)
    for a, title in ((a1, "prefix-cache hit rate (%)"), (a2, "TTFT p50 (ms)")):
        a.set_xticks(range(len(cfgs)))
        a.set_xticklabels(cfgs)
        a.set_title(title)
        a.legend()
        a.grid(axis="y", alpha=0.3)
    t = result["trace"]
    fig.suptitle(f"agent trace: {t['conversations']} conversations x {t['turns']} turns, concurrency "
                 f"{t['concurrency']}, {result['kv_pages_per_rank']} KV pages of {result['block_size']} tokens "
                 f"per rank" + ("; offload skipped: the server has no --kv-offloading-size"
                                if "offload" in result["skipped"] else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", help="the dcp-vk-serve executable (required unless --from-json)")
    ap.add_argument("--model", help="GGUF model (default: a test model from dcp-vk-gguf --make-model)")
    ap.add_argument("--gguf-tool", help="dcp-vk-gguf for --make-model (default: beside --server)")
    ap.add_argument("--configs", default="8x1,8x2,8x4,8x8", help="TPxDCP list (default 8x1,8x2,8x4,8x8)")
    ap.add_argument("--modes", default="off,on,offload", help="off, on, offload (default: all three)")
    ap.add_argument("--offload-gib", default="0.0625",
                    help="--kv-offloading-size of the offload mode, GiB (default 0.0625: 64 MiB, within "
                         "lavapipe's 128 MiB storage-buffer range)")
    ap.add_argument("--conversations", type=int, default=8, help="conversations (default 8)")
    ap.add_argument("--turns", type=int, default=4, help="turns per conversation (default 4)")
    ap.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    ap.add_argument("--system-words", type=int, default=50, help="words of the shared system prompt (default 50)")
    ap.add_argument("--user-words", type=int, default=8, help="words per user message (default 8)")
    ap.add_argument("--max-tokens", type=int, default=16, help="tokens per answer (default 16)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the trace (default 1)")
    ap.add_argument("--kv-pages", type=int, default=192, help="KV pages per rank, every config (default 192)")
    ap.add_argument("--block-size", type=int, default=4, help="tokens per KV page (default 4)")
    ap.add_argument("--prefill-chunk", type=int, default=256, help="rows per step (default 256)")
    ap.add_argument("--max-seqs", type=int, default=8, help="sequence slots (default 8)")
    ap.add_argument("--ctx", type=int, default=1024, help="context per request (default 1024)")
    ap.add_argument("--extra", default="", help="more dcp-vk-serve options, space-separated")
    ap.add_argument("--result-json", default="bench-prefix.json", help="JSON output (default bench-prefix.json)")
    ap.add_argument("--plot", help="PNG of hit rate and TTFT p50 per configuration (needs matplotlib)")
    ap.add_argument("--from-json", metavar="FILE",
                    help="run nothing: print the table of an earlier --result-json FILE (and --plot it)")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            result = json.load(f)
        print(table(result))
        for note in result["skipped"].values():
            print(f"\n{note}")
        if args.plot:
            plot(result, args.plot)
            print(f"wrote {args.plot}")
        return
    configs = []
    for c in args.configs.split(","):
        m = re.fullmatch(r"(\d+)x(\d+)", c.strip())
        if not m:
            fail(f"--configs: '{c}' is not TPxDCP (e.g. 8x2)")
        configs.append((int(m.group(1)), int(m.group(2))))
    if not args.server:
        fail("--server DCP-VK-SERVE is required (or --from-json FILE)")
    if not os.access(args.server, os.X_OK):
        fail(f"--server: {args.server} is not an executable")
    modes = [m.strip() for m in args.modes.split(",")]
    for m in modes:
        if m not in ("off", "on", "offload"):
            fail(f"--modes: '{m}' is not off, on or offload")
    skipped = {}
    if "offload" in modes and not server_supports(args.server, "--kv-offloading-size"):
        skipped["offload"] = (f"{args.server} has no --kv-offloading-size (its --help does not list it): "
                              "the offload mode is skipped")
        print(f"note: {skipped['offload']}", flush=True)
    # vLLM's --kv-offloading-backend native, passed where the server has the option
    args.offload_backend = "native" if "offload" in modes and "offload" not in skipped and \
        server_supports(args.server, "--kv-offloading-backend") else None
    tmpdir = tempfile.mkdtemp(prefix="bench-prefix-")
    model_cmd = None
    if not args.model:
        try:
            args.model, model_cmd = make_model(args, tmpdir)
        except BaseException:
            os.rmdir(tmpdir)
            raise
    trace = make_trace(args)
    result = {
        "model": os.path.basename(args.model),
        "model_command": model_cmd,
        "command": " ".join(["scripts/bench-prefix.py"] + sys.argv[1:]),
        "configs": configs,
        "modes": modes,
        "skipped": skipped,
        "kv_pages_per_rank": args.kv_pages,
        "block_size": args.block_size,
        "prefill_chunk": args.prefill_chunk,
        "max_seqs": args.max_seqs,
        "ctx": args.ctx,
        "trace": {"conversations": args.conversations, "turns": args.turns, "concurrency": args.concurrency,
                  "system_words": args.system_words, "user_words": args.user_words, "max_tokens": args.max_tokens,
                  "seed": args.seed},
        "machine": os.uname().nodename + " " + os.uname().machine + f", {os.cpu_count()} CPUs",
        "load_average_at_start": os.getloadavg(),
        "runs": [],
    }
    try:
        for tp, dcp in configs:
            for mode in modes:
                if mode in skipped:
                    continue
                srv = start_server(args, tp, dcp, mode)
                print(f"# {srv.banner}", flush=True)
                stream_completion(srv.port, "Warm up: " + " ".join(WORDS[-8:]), 4, {})  # pipelines, not the trace
                try:
                    r = run_trace(srv, args, trace)
                except BaseException:
                    srv.proc.kill()  # a failed trace (fail() exits) leaves no server behind
                    srv.proc.wait()
                    os.unlink(srv.err.name)
                    raise
                stop_server(srv)
                r.update({"tp": tp, "dcp": dcp, "mode": mode, "banner": srv.banner, "env": srv.env})
                result["runs"].append(r)
                print(f"TP {tp} DCP {dcp} caching {mode:7s}: hit {100 * r['hit_rate']:5.1f}% (/metrics "
                      f"{100 * r['metrics_hit_rate']:5.1f}%)  evictions {r['evictions']:.0f}  TTFT p50 "
                      f"{1e3 * r['ttft_p50_s']:.0f} p99 {1e3 * r['ttft_p99_s']:.0f} ms  "
                      f"{r['output_tokens_per_s']:.1f} tok/s  prompt {r['prompt_tokens']} cached "
                      f"{r['cached_tokens']}  preemptions {r['preemptions']:.0f}  answers {r['answers_digest']}",
                      flush=True)
                with open(args.result_json + ".tmp", "w") as f:
                    json.dump(result, f, indent=1)
                os.replace(args.result_json + ".tmp", args.result_json)
    finally:
        if model_cmd:
            os.unlink(args.model)
        os.rmdir(tmpdir)
    print()
    print(table(result))
    for note in skipped.values():
        print(f"\n{note}")
    if args.plot:
        plot(result, args.plot)
        print(f"wrote {args.plot}")
    print(f"wrote {args.result_json}")


if __name__ == "__main__":
    main()
