#!/usr/bin/env python3
"""Plots scripts/bench-serve.py's JSON: output tokens/s, TTFT p99, inter-token latency p99 and the
requests per step against concurrency, one line per configuration (TP only, TP with DCP N), into a
PNG.

Needs matplotlib (Debian: python3-matplotlib, which scripts/setup.sh installs; run it with the
system Python, /usr/bin/python3, when another python3 comes first on PATH):
  /usr/bin/python3 scripts/plot-serve.py serve-curve.json serve-curve.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot-serve.py RESULTS.json OUT.png")
    with open(sys.argv[1]) as f:
        r = json.load(f)
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
    fig.savefig(sys.argv[2], dpi=110)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
