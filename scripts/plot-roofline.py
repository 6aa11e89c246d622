#!/usr/bin/env python3
"""The roofline of dcp-vk's kernels from `dcp-vk-bench ... --json` output.

Reads one or more files holding the JSON of `dcp-vk-bench attn`, `attn --mla`, `matmul`, `ops` and
`yardsticks` (several documents per file are fine: one per line, or pretty-printed one after the
other) and
  - draws a PNG (--png): arithmetic intensity (FLOPs per byte) on x, achieved FLOP/s on y, log-log,
    the streaming-read ceiling (read rate x intensity) and the FMA ceiling of each device measured
    in the same runs, one point per kernel result; kernels that count no FLOPs (argmax, get_rows,
    the MoE routing) cannot sit on a log axis and are listed under the plot instead;
  - prints Markdown tables (--table), one per bench, headed by the yardsticks of its runs: per result the bytes, FLOPs, intensity, measured time,
    roofline time max(bytes / read rate, FLOPs / FMA rate), which ceiling binds, the fraction of the
    roofline reached, and the yardsticks it was compared with (those sampled beside it).
Without --png or --table it prints the table.

Needs matplotlib for --png (Debian: python3-matplotlib; run it with the system Python,
/usr/bin/python3, when another python3 comes first on PATH):
  build/dcp-vk-bench matmul --json > mm.json
  build/dcp-vk-bench ops --json > ops.json
  build/dcp-vk-bench attn --ctx 32768 --q-heads 32 --kv-heads 8 --head-dim 128 --json > attn.json
  /usr/bin/python3 scripts/plot-roofline.py --png roofline.png --table mm.json ops.json attn.json
"""
import argparse
import json
import math
import statistics
import sys


def documents(path):
    """Every JSON object in the file, in order (lines that are not JSON are skipped)."""
    text = open(path).read()
    dec = json.JSONDecoder()
    i, out = 0, []
    while i < len(text):
        j = text.find("{", i)
        if j < 0:
            break
        try:
            doc, end = dec.raw_decode(text, j)
        except ValueError:
            i = text.find("\n", j)
            i = len(text) if i < 0 else i + 1
            continue
        out.append(doc)
        i = end
    return out


def shape_of(doc, r):
    """A short description of one result's shape."""
    bench = doc.get("bench", r.get("bench", ""))
    if "batch" in r and bench == "matmul":
        return f"{doc.get('rows')}x{doc.get('k')} batch {r['batch']}"
    if bench == "ops":
        return f"{r.get('tokens', doc.get('tokens'))} token(s)"
    def ctx(n):
        return f"{n // 1024}K" if n and n % 1024 == 0 else str(n)
    if bench == "attn_mla":
        return (f"MLA {r.get('heads')} heads, rows {r.get('kv_lora')}+{r.get('rope')}, ctx {ctx(r.get('ctx'))}, "
                f"batch {r.get('batch')}, {r.get('kv_dtype')}")
    if bench == "attn":
        return (f"GQA {r.get('q_heads')}/{r.get('kv_heads')}, D {r.get('head_dim')}, ctx {ctx(r.get('ctx'))}, "
                f"batch {r.get('batch')}, {r.get('kv_dtype')}")
    return r.get("shape", "")


def points(paths):
    """(points, ceilings): one dict per kernel result; the distinct (device, read GB/s, GFLOP/s)."""
    pts, ceilings = [], {}
    for path in paths:
        for n, doc in enumerate(documents(path)):
            y = doc.get("yardsticks") or {}
            dev = doc.get("device", "device")
            if y.get("stream_read_gbps") and y.get("fma_gflops"):
                ceilings.setdefault((dev, round(y["stream_read_gbps"], 3), round(y["fma_gflops"], 3)), path)
            rows = doc.get("results") if isinstance(doc.get("results"), list) else [doc]
            for r in rows:
                if not isinstance(r, dict) or "of_roofline" not in r:
                    continue
                p = dict(r)
                p["bench"] = doc.get("bench", r.get("bench", "?"))
                p["kernel"] = r.get("kernel", p["bench"])
                p["shape"] = shape_of(doc, r)
                p["device"] = dev
                p["run_yardsticks"] = y
                p["run"] = (path, n)
                pts.append(p)
    return pts, ceilings


def fmt(x, digits=3):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if x == 0:
        return "0"
    if abs(x) >= 1e6 or abs(x) < 1e-2:
        return f"{x:.{digits}g}"
    return f"{x:.{digits}g}" if abs(x) < 100 else f"{x:.0f}"


TITLES = {"matmul": "matmul (every weight type, batch 1, 8, 32)", "ops": "the other model kernels",
          "attn": "attention: GQA paged decode", "attn_mla": "attention: MLA latent decode"}


def yardstick_line(y):
    """The yardsticks of one run, as one line."""
    if not y:
        return "yardsticks: beside each result"
    return (f"yardsticks of the run (medians): streaming read {fmt(y.get('stream_read_gbps'))} GB/s, "
            f"FMA {fmt(y.get('fma_gflops'))} GFLOP/s, empty dispatch {fmt(y.get('dispatch_us'))} us, "
            f"host wait {fmt(y.get('host_wait_us'))} us")


def frac(x):
    return "-" if x is None else f"{x:.2f}"


def matmul_name(p):
    """A matmul result's row: its weight type, with the fusions of `--fuse` (norm_glu_Q4_K)."""
    k = p.get("kernel", "")
    return k[len("matmul_"):] if k.startswith("matmul_") else p.get("type", k)


def matmul_table(mine):
    """Weight types (and fusions) down, batch sizes across: the time and the fraction of the roofline."""
    batches = list(dict.fromkeys(p["batch"] for p in mine))
    head = "| type | bits/weight | " + " | ".join(f"batch {b}: us | of roofline" for b in batches) + " |"
    rule = "| --- | ---: | " + " | ".join("---: | ---:" for _ in batches) + " |"
    out = [head, rule]
    for t in dict.fromkeys(matmul_name(p) for p in mine):
        cells = []
        for b in batches:
            q = next((p for p in mine if matmul_name(p) == t and p["batch"] == b), None)
            cells.append(f"{fmt(q.get('measured_us'))} | {frac(q.get('of_roofline'))}" if q else "- | -")
        bits = next(p.get("bits_per_weight") for p in mine if matmul_name(p) == t)
        out.append(f"| {t} | {fmt(bits)} | " + " | ".join(cells) + " |")
    return out


def ops_table(mine):
    """Ops down, the token counts of the runs across: intensity, time, bound, fraction of the
    roofline, and the time as a multiple of the empty dispatch."""
    counts = list(dict.fromkeys(p.get("tokens") for p in mine))
    head = "| op | " + " | ".join(f"{t} tok: FLOP/B | us | bound | of roofline | x dispatch" for t in counts) + " |"
    rule = "| --- | " + " | ".join("---: | ---: | --- | ---: | ---:" for _ in counts) + " |"
    out = [head, rule]
    for k in dict.fromkeys(p["kernel"] for p in mine):
        cells = []
        for t in counts:
            q = next((p for p in mine if p["kernel"] == k and p.get("tokens") == t), None)
            cells.append(f"{fmt(q.get('intensity'))} | {fmt(q.get('measured_us'))} | {q.get('bound', '-')} | "
                         f"{frac(q.get('of_roofline'))} | {fmt(q.get('x_dispatch'))}" if q else "- | - | - | - | -")
        out.append(f"| {k} | " + " | ".join(cells) + " |")
    return out


def attn_table(mine):
    out = ["| shape | step ms | bytes | FLOPs | FLOP/B | roofline ms | bound | of roofline | KV read GB/s | "
           "read GB/s | FMA GFLOP/s |",
           "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    for p in mine:
        roof = p.get("roofline_us")
        out.append(f"| {p['shape']} | {fmt(p.get('step_ms'))} | {fmt(p.get('bytes'))} | {fmt(p.get('flops'))} | "
                   f"{fmt(p.get('intensity'))} | {fmt(roof * 1e-3 if roof else None)} | {p.get('bound', '-')} | "
                   f"{frac(p.get('of_roofline'))} | {fmt(p.get('kv_read_gbps'))} | {fmt(p.get('read_gbps'))} | "
                   f"{fmt(p.get('fma_gflops'))} |")
    return out


def generic_table(mine):
    out = ["| kernel | shape | bytes | FLOPs | FLOP/B | measured us | roofline us | bound | of roofline | "
           "read GB/s | FMA GFLOP/s |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for p in mine:
        out.append(f"| {p['kernel']} | {p['shape']} | {fmt(p.get('bytes'))} | {fmt(p.get('flops'))} | "
                   f"{fmt(p.get('intensity'))} | {fmt(p.get('measured_us'))} | {fmt(p.get('roofline_us'))} | "
                   f"{p.get('bound', '-')} | {frac(p.get('of_roofline'))} | {fmt(p.get('read_gbps'))} | "
                   f"{fmt(p.get('fma_gflops'))} |")
    return out


def table(pts):
    """One Markdown table per bench (all its runs together), headed by the yardsticks of its runs
    (the medians of the samples of each run; every result is compared with those sampled beside it,
    which its JSON names)."""
    out = []
    for bench in dict.fromkeys(p["bench"] for p in pts):
        mine = [p for p in pts if p["bench"] == bench]
        out.append(f"### {TITLES.get(bench, bench)} on {mine[0]['device']}")
        out.append("")
        runs = list(dict.fromkeys(p["run"] for p in mine))
        for run in runs:
            first = next(p for p in mine if p["run"] == run)
            what = f"{first.get('tokens')} token(s)" if bench == "ops" else first["shape"] if bench != "matmul" else \
                first["shape"].split(" batch")[0]
            out.append(f"- {what}: {yardstick_line(first['run_yardsticks'])}" if len(runs) > 1 else
                       f"{yardstick_line(first['run_yardsticks'])}.")
        out.append("")
        maker = {"matmul": matmul_table, "ops": ops_table, "attn": attn_table, "attn_mla": attn_table}
        out.extend(maker.get(bench, generic_table)(mine))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def label(p):
    """A short name for a point: the weight type and batch of a matmul, an op and its tokens, an
    attention shape."""
    if p["bench"] == "matmul":
        return f"{matmul_name(p)} b{p.get('batch')}"
    if p["bench"] == "ops":
        return f"{p['kernel']} T{p.get('tokens')}"
    return p["shape"].replace(", batch 1", "")


def plot(pts, ceilings, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [p for p in pts if (p.get("flops") or 0) > 0 and (p.get("measured_us") or 0) > 0]
    hidden = [p for p in pts if p not in shown]
    fig, ax = plt.subplots(figsize=(11, 7))
    xs = [p["intensity"] for p in shown] or [1.0]
    lo, hi = min(xs) / 4, max(xs) * 4
    for (dev, read, fma), _ in ceilings.items():
        ridge = fma / read
        lo, hi = min(lo, ridge / 8), max(hi, ridge * 8)
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    # One ceiling per device: its runs' yardsticks as the median line, with the band between the
    # lowest and the highest ceilings of the runs when there are several.
    devices = list(dict.fromkeys(dev for dev, _, _ in ceilings))
    for n, dev in enumerate(devices):
        mine = [(read, fma) for d, read, fma in ceilings if d == dev]
        style = ["-", "--", ":", "-."][n % 4]
        reads, fmas = sorted(r for r, _ in mine), sorted(f for _, f in mine)
        read, fma = statistics.median(reads), statistics.median(fmas)
        if len(mine) == 1:
            text = f"{dev}: read {read:.3g} GB/s, FMA {fma:.3g} GFLOP/s"
        else:
            text = (f"{dev}, {len(mine)} runs: read {reads[0]:.3g}-{reads[-1]:.3g} GB/s, "
                    f"FMA {fmas[0]:.3g}-{fmas[-1]:.3g} GFLOP/s (line: medians; band: their range)")
            ax.fill_between(grid, [min(min(r * x, f) for r, f in mine) for x in grid],
                            [max(min(r * x, f) for r, f in mine) for x in grid], color="0.85", zorder=1)
        ax.plot(grid, [min(read * x, fma) for x in grid], "k" + style, lw=1.2, label=text, zorder=2)
    markers = {"matmul": "o", "ops": "s", "attn": "^"}
    benches = sorted({p["bench"] for p in shown})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for b_i, b in enumerate(benches):
        mine = [p for p in shown if p["bench"] == b]
        ax.scatter([p["intensity"] for p in mine], [p["achieved_gflops"] for p in mine],
                   marker=markers.get(b, "D"), color=colors[b_i % len(colors)], label=f"dcp-vk-bench {b}",
                   s=90 if b.startswith("attn") else 30, zorder=4 if b.startswith("attn") else 3)
        for p in mine:
            ax.annotate(f"{label(p)} ({p['of_roofline']:.2f})", (p["intensity"], p["achieved_gflops"]),
                        fontsize=8 if b.startswith("attn") else 6, xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte read or written)")
    ax.set_ylabel("achieved GFLOP/s (2 FLOPs per multiply-add)")
    ax.set_title("dcp-vk kernels against the yardsticks of the same run (fraction of the roofline in brackets)")
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=7, loc="lower right")
    if hidden:
        names = ", ".join(sorted({f"{label(p)} ({p['of_roofline']:.2f})" for p in hidden}))
        fig.text(0.01, 0.01, f"no FLOPs counted, not plotted: {names}", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out, dpi=130)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="dcp-vk-bench --json output")
    ap.add_argument("--png", help="write the roofline plot here")
    ap.add_argument("--table", action="store_true", help="print the Markdown table")
    a = ap.parse_args()
    pts, ceilings = points(a.files)
    if not pts:
        sys.exit("plot-roofline: no kernel results with roofline fields in " + ", ".join(a.files))
    if a.png:
        plot(pts, ceilings, a.png)
        print(f"plot-roofline: {len(pts)} results, {len(ceilings)} device ceiling(s) -> {a.png}", file=sys.stderr)
    if a.table or not a.png:
        sys.stdout.write(table(pts))


if __name__ == "__main__":
    main()
