#!/usr/bin/env python3
"""Plots the serving benchmarks' JSON into a PNG:
 - scripts/bench-serve.py's --result-json (one file or several, e.g. one per request rate): the
   distributions of TTFT, TPOT, ITL and E2E latency (ms), with each run's mean, median and p99
   marked, and the throughputs and goodput in the legend;
 - scripts/bench-serve-dcp.py's sweep: output tokens/s, TTFT p99, inter-token latency p99 and the
   requests per step against concurrency, one line per configuration (TP only, TP with DCP N).

Needs matplotlib (Debian: python3-matplotlib, which scripts/setup.sh installs; run it with the
system Python, /usr/bin/python3, when another python3 comes first on PATH):
  /usr/bin/python3 scripts/plot-serve.py bench.json [bench-rate20.json ...] bench.png
  /usr/bin/python3 scripts/plot-serve.py serve-curve.json serve-curve.png
"""
import os
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_bench(runs, out):
    """bench-serve.py results: one histogram panel per latency, one colour per run."""
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.6))
    panels = [("ttft", "time to first token (ms)"), ("tpot", "time per output token (ms)"),
              ("itl", "inter-token latency (ms)"), ("e2el", "end-to-end latency (ms)")]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n, (name, r) in enumerate(runs):
        c = colors[n % len(colors)]
        ok = [i for i, e in enumerate(r["errors"]) if not e]
        per = {
            "ttft": [r["ttfts"][i] * 1e3 for i in ok],
            "tpot": [(r["e2els"][i] - r["ttfts"][i]) * 1e3 / (r["output_lens"][i] - 1) for i in ok
                     if r["output_lens"][i] > 1],
            "itl": [x * 1e3 for i in ok for x in r["itls"][i]],
            "e2el": [r["e2els"][i] * 1e3 for i in ok],
        }
        label = (f"{name}: rate {r['request_rate']}, concurrency {r['max_concurrency'] or 'any'}; "
                 f"{r['request_throughput']:.2f} req/s, {r['output_throughput']:.1f} out tok/s"
                 + (f", goodput {r['request_goodput']:.2f} req/s" if r.get("request_goodput") is not None else ""))
        for ax, (key, _) in zip(axes, panels):
            xs = per[key]
            if not xs:
                continue
            ax.hist(xs, bins=30, alpha=0.45, color=c, label=label if key == "ttft" else None)
            for stat, style in (("mean", ":"), ("median", "--"), ("p99", "-")):
                v = r.get(f"{stat}_{key}_ms")
                if v is not None:
                    ax.axvline(v, color=c, linestyle=style, linewidth=1.2)
    for ax, (_, title) in zip(axes, panels):
        ax.set_title(title + "\n(dotted mean, dashed median, solid p99)", fontsize=9)
        ax.set_ylabel("count")
        ax.grid(True, alpha=0.3)
    fig.legend(loc="lower center", fontsize=8, ncol=1)
    first = runs[0][1]
    fig.suptitle(f"bench-serve against {first.get('model_id', '?')} at {first.get('base_url', '?')}: "
                 f"{first['num_prompts']} prompts ({first.get('dataset', '?')})", fontsize=10)
    fig.tight_layout(rect=(0, 0.06 + 0.03 * len(runs), 1, 1))
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: plot-serve.py RESULTS.json [MORE.json ...] OUT.png")
    runs = []
    for path in sys.argv[1:-1]:
        with open(path) as f:
            runs.append((os.path.basename(path), json.load(f)))
    if all("ttfts" in r for _, r in runs):
        return plot_bench(runs, sys.argv[-1])
    if len(runs) != 1 or "configs" not in runs[0][1]:
        sys.exit("plot-serve: want bench-serve.py result files, or one bench-serve-dcp.py sweep")
    r = runs[0][1]
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.6))
    panels = [("output_tokens_per_s", "output tokens/s", 1.0), ("ttft_p99_s", "TTFT p99 (s)", 1.0),
              ("itl_p99_s", "inter-token latency p99 (ms)", 1e3),
              ("running_mean_per_step", "requests per step (mean)", 1.0)]
    all_cs = sorted({x["concurrency"] for cfg in r["configs"] for x in cfg["results"]})
    for cfg in r["configs"]:
        cs = [x["concurrency"] for x in cfg["results"]]
        label = f"TP {r['tp']}" + (f" + DCP {cfg['dcp']}" if cfg["dcp"] > 1 else " only") + f" (fit {cfg['fit']})"
        for ax, (key, _, scale) in zip(axes, panels):
            ax.plot(cs, [x[key] * scale for x in cfg["results"]], marker="o", label=label)
    for ax, (_, title, _) in zip(axes, panels):
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_cs)
        ax.set_xticklabels([str(c) for c in all_cs])
        ax.minorticks_off()
        ax.set_xlabel("concurrent requests")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes[1].set_yscale("log")
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"dcp-vk-serve, {r['model']}: {r['prompt_tokens']}-token prompts, {r['max_tokens']} tokens out, "
                 f"{r['kv_pages_per_rank']} KV pages of {r['block_size']} tokens per rank (same for all)", fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[-1], dpi=110)
    print(f"wrote {sys.argv[-1]}")


if __name__ == "__main__":
    main()
