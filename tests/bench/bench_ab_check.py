#!/usr/bin/env python3
"""scripts/bench-ab.sh --quick and scripts/roofline-compare.py on one build against itself: every
run succeeds, each case has three runs a side (before, after, after, before, before, after), and
the tables carry every case with each run's time and roofline fraction and a speedup; bad arguments are refused
naming what was wrong. Never a speed asserted.

usage: bench_ab_check.py BUILD_DIR SCRIPTS_DIR WORK_DIR"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def documents(path):
    text, dec, i, out = open(path).read(), json.JSONDecoder(), 0, []
    while True:
        j = text.find("{", i)
        if j < 0:
            return out
        doc, i = dec.raw_decode(text, j)
        out.append(doc)


def main(build, scripts, work):
    ab, cmp = os.path.join(scripts, "bench-ab.sh"), os.path.join(scripts, "roofline-compare.py")
    shutil.rmtree(work, ignore_errors=True)
    out = os.path.join(work, "ab")

    # refusals: a build tree without the apps, an output folder that is not empty
    r = subprocess.run(["bash", ab, "--quick", os.path.join(work, "nowhere"), build, out], capture_output=True, text=True)
    if r.returncode != 2 or "nowhere/dcp-vk-bench: not an executable" not in r.stderr:
        fail(f"missing build tree: rc {r.returncode}, stderr {r.stderr!r}")
    os.makedirs(out)
    open(os.path.join(out, "x"), "w").close()
    r = subprocess.run(["bash", ab, "--quick", build, build, out], capture_output=True, text=True)
    if r.returncode != 2 or "exists and is not empty" not in r.stderr:
        fail(f"non-empty OUTDIR: rc {r.returncode}, stderr {r.stderr!r}")
    os.remove(os.path.join(out, "x"))

    r = subprocess.run(["bash", ab, "--quick", build, build, out], capture_output=True, text=True)
    if r.returncode != 0 or ": 0 of the runs failed" not in r.stderr:
        fail(f"bench-ab.sh --quick: rc {r.returncode}, stderr tail {r.stderr[-2000:]!r}")
    cases = sorted({os.path.basename(p).rsplit(".", 2)[0] for p in glob.glob(os.path.join(out, "*.json"))})
    want = ["gqa_8_2_f16", "gqa_8_2_q8_0", "matmul", "mla4_f16", "ops_1tok", "stories_tp1", "stories_tp8_dcp2",
            "yardsticks", "yardsticks_end"]
    if cases != want:
        fail(f"cases {cases}, expected {want}")
    for c in cases:
        for side in ("before", "after"):
            docs = documents(os.path.join(out, f"{c}.{side}.json"))
            if len(docs) != 3:
                fail(f"{c}.{side}.json: {len(docs)} documents, expected 3 (ABBAAB)")
            if os.path.getsize(os.path.join(out, f"{c}.{side}.err")) and c.startswith(("gqa", "mla", "matmul", "ops")):
                fail(f"{c}.{side}.err: {open(os.path.join(out, f'{c}.{side}.err')).read()[:500]!r}")

    before, after = sorted(glob.glob(os.path.join(out, "*.before.json"))), sorted(glob.glob(os.path.join(out, "*.after.json")))
    r = subprocess.run([sys.executable, cmp, "--before", *before, "--after", *after], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"roofline-compare.py: rc {r.returncode}, stderr {r.stderr!r}")
    text = r.stdout
    run = r"[0-9.e+]+ \([0-9.]+\)"
    two = rf"{run}, {run}, {run}"
    rows = {
        "GQA 8/2, D 64, ctx 1K, batch 1, f16": 1, "GQA 8/2, D 64, ctx 1K, batch 1, q8_0": 1,
        "MLA 4 heads, rows 64+16, ctx 512, batch 1, f16": 1, "F16": 2, "Q4_K": 2, "rmsnorm": 1, "swiglu": 1,
    }
    for name, cols in rows.items():
        pat = r"\| " + re.escape(name) + r" \| " + r" \| ".join([rf"{two} \| {two} \| [0-9.]+x"] * cols) + r" \|"
        if not re.search(pat, text):
            fail(f"no row for {name!r} with three runs a side and a speedup in:\n{text}")
    for case, tpdcp in (("stories_tp1", "1 / 1"), ("stories_tp8_dcp2", "8 / 2")):
        pat = rf"\| {case} \| {tpdcp} \| [0-9.]+, [0-9.]+, [0-9.]+ \| [0-9.]+, [0-9.]+, [0-9.]+ \| [0-9.]+x \| \d+ / \d+ \| \d+ / \d+ \| \d+ \| \d+ \|"
        if not re.search(pat, text):
            fail(f"no model row for {case}:\n{text}")
    if text.count("Yardsticks beside the results: before streaming read") != 4:
        fail(f"expected 4 kernel tables headed by their yardsticks:\n{text}")

    r = subprocess.run([sys.executable, cmp, "--before", os.path.join(out, "none.json"), "--after", *after],
                       capture_output=True, text=True)
    if r.returncode == 0 or "none.json: no such file" not in r.stderr:
        fail(f"missing input: rc {r.returncode}, stderr {r.stderr!r}")
    r = subprocess.run([sys.executable, cmp, "--names", "old", "--before", *before, "--after", *after],
                       capture_output=True, text=True)
    if r.returncode == 0 or "--names takes two comma-separated names" not in r.stderr:
        fail(f"bad --names: rc {r.returncode}, stderr {r.stderr!r}")
    print(text)
    print("bench_ab_check: ok")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(*sys.argv[1:])
