#!/usr/bin/env python3
"""Before / after tables of dcp-vk's kernels against their roofline.

Reads the `dcp-vk-bench ... --json` output of two builds (`--before FILE...`, `--after FILE...`;
the files scripts/bench-ab.sh writes, several documents per file, one per run) and prints one
Markdown table per bench (attention GQA, MLA, matmul, the other ops): for every kernel and shape
the measured time of each run with its fraction of the roofline in brackets, before and after, and
the speedup (median time before / median time after). Each fraction was computed by the bench
against the yardsticks sampled beside that result; the line above each table gives their range
over the runs of each side, so that a table read alone says how busy the machine was.

  scripts/bench-ab.sh OLD_BUILD build /tmp/ab          # alternates the two builds, writes /tmp/ab/*.json
  scripts/roofline-compare.py --before /tmp/ab/*.before.json --after /tmp/ab/*.after.json
"""
import argparse
import importlib.util
import os
import statistics
import sys

sys.dont_write_bytecode = True  # nothing written beside the scripts
_spec = importlib.util.spec_from_file_location(
    "plot_roofline", os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot-roofline.py"))
roof = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(roof)

TITLES = {"attn": "attention: GQA paged decode", "attn_mla": "attention: MLA latent decode",
          "matmul": "matmul", "ops": "the other model kernels"}


ROW = {"attn": "shape", "attn_mla": "shape", "matmul": "weight type", "ops": "op"}


def key_of(p):
    """(row, column) of a result: matmul by type and batch, ops by op and tokens, attention by shape."""
    if p["bench"] == "matmul":
        return roof.matmul_name(p), f"batch {p['batch']}"
    if p["bench"] == "ops":
        return p["kernel"], f"{p.get('tokens')} tok"
    return p["shape"], ""


def time_of(p):
    """The result's time in its bench's unit (attention: ms a step; the others: us)."""
    if p["bench"] in ("attn", "attn_mla"):
        return p.get("step_ms")
    return p.get("measured_us")


def cell(runs):
    if not runs:
        return "-"
    return ", ".join(f"{roof.fmt(time_of(p))} ({roof.frac(p.get('of_roofline'))})" for p in runs)


def speedup(before, after):
    b = [time_of(p) for p in before if time_of(p)]
    a = [time_of(p) for p in after if time_of(p)]
    if not a or not b:
        return "-"
    return f"{statistics.median(b) / statistics.median(a):.2f}x"


def span(values, digits=3):
    v = [x for x in values if x]
    if not v:
        return "-"
    lo, hi = roof.fmt(min(v), digits), roof.fmt(max(v), digits)
    return lo if lo == hi else f"{lo}-{hi}"


def yardsticks(pts):
    return (f"streaming read {span([p.get('read_gbps') for p in pts])} GB/s, "
            f"FMA {span([p.get('fma_gflops') for p in pts])} GFLOP/s")


def compare(before, after, names):
    out = []
    benches = list(dict.fromkeys([p["bench"] for p in before + after]))
    for bench in benches:
        b = [p for p in before if p["bench"] == bench]
        a = [p for p in after if p["bench"] == bench]
        unit = "ms a step" if bench in ("attn", "attn_mla") else "us"
        dev = (a or b)[0]["device"]
        out.append(f"### {TITLES.get(bench, bench)} on {dev}: {names[0]} against {names[1]}")
        out.append("")
        out.append(f"Yardsticks beside the results: {names[0]} {yardsticks(b) if b else '(no runs)'}; "
                   f"{names[1]} {yardsticks(a) if a else '(no runs)'}. Each cell: the time of each run "
                   f"({unit}) and its fraction of the roofline in brackets.")
        out.append("")
        rows = list(dict.fromkeys(key_of(p)[0] for p in b + a))
        cols = list(dict.fromkeys(key_of(p)[1] for p in b + a))
        head = f"| {ROW.get(bench, 'kernel')} | " + " | ".join(f"{c + ': ' if c else ''}{names[0]} | {names[1]} | speedup" for c in cols)
        out.append(head + " |")
        out.append("| --- | " + " | ".join("---: | ---: | ---:" for _ in cols) + " |")
        for r in rows:
            cells = []
            for c in cols:
                rb = [p for p in b if key_of(p) == (r, c)]
                ra = [p for p in a if key_of(p) == (r, c)]
                cells.append(f"{cell(rb)} | {cell(ra)} | {speedup(rb, ra)}")
            out.append(f"| {r} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def model_runs(paths):
    """The dcp-vk-run --json documents of the files, by the file's case name (NAME of NAME.SIDE.json)."""
    runs = {}
    for path in paths:
        name = os.path.basename(path)
        for suffix in (".before.json", ".after.json", ".json"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        for doc in roof.documents(path):
            if "generated_tokens_per_s" in doc:
                runs.setdefault(name, []).append(doc)
    return runs


def model_table(before, after, names):
    """Whole-model runs: tokens/s of each run, the speedup of the medians, and the dispatches, host
    waits and exchange rounds of a decode step."""
    b, a = model_runs(before), model_runs(after)
    if not b and not a:
        return []
    out = [f"### whole-model greedy decode (dcp-vk-run --json): {names[0]} against {names[1]}", "",
           "| case | TP / DCP | tokens/s: " + names[0] + " | " + names[1] + " | speedup | dispatches a step (all ranks / "
           "busiest): " + names[0] + " | " + names[1] + " | host waits a step | rounds a step |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def tps(docs):
        return ", ".join(f"{d['generated_tokens_per_s']:.1f}" for d in docs) or "-"

    def disp(docs):
        if not docs:
            return "-"
        d = docs[0]
        return f"{d.get('decode_step_dispatches', '-')} / {d.get('decode_step_rank_dispatches', '-')}"

    def same(docs, field):
        return ", ".join(dict.fromkeys(str(d.get(field, "-")) for d in docs)) or "-"

    for case in dict.fromkeys(list(b) + list(a)):
        rb, ra = b.get(case, []), a.get(case, [])
        d0 = (ra or rb)[0]
        sp = "-"
        if rb and ra:
            ratio = (statistics.median(d["generated_tokens_per_s"] for d in ra) /
                     statistics.median(d["generated_tokens_per_s"] for d in rb))
            sp = f"{ratio:.2f}x"
        out.append(f"| {case} | {d0.get('tensor_parallel_size')} / {d0.get('decode_context_parallel_size')} | "
                   f"{tps(rb)} | {tps(ra)} | {sp} | {disp(rb)} | {disp(ra)} | {same(rb + ra, 'decode_step_host_waits')} | "
                   f"{same(rb + ra, 'decode_step_rounds')} |")
    out.append("")
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", nargs="+", required=True, metavar="FILE", help="JSON of the first build")
    ap.add_argument("--after", nargs="+", required=True, metavar="FILE", help="JSON of the second build")
    ap.add_argument("--names", default="before,after", help="the two columns' names (default before,after)")
    args = ap.parse_args(argv)
    names = args.names.split(",")
    if len(names) != 2 or not all(names):
        ap.error(f"--names takes two comma-separated names, got \"{args.names}\"")
    for f in args.before + args.after:
        if not os.path.isfile(f):
            ap.error(f"{f}: no such file")
    before, _ = roof.points(args.before)
    after, _ = roof.points(args.after)
    lines = compare(before, after, names) + model_table(args.before, args.after, names)
    if not lines:
        ap.error("no kernel results (with of_roofline) and no dcp-vk-run --json runs in the files given")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
