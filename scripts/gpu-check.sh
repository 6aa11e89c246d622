#!/usr/bin/env bash
# GPU check: run from a clone on a machine with a GPU and its Vulkan driver. Builds dcp-vk, runs the
# test suite on the GPU, then measures what a reader compares across devices, and prints one JSON
# summary (also written to --out):
#   - dcp-vk-bench attn at long context on real shapes: GQA 32/8 and 64/8 at head dim 128, and MLA
#     576/512 when the bench has --mla; contexts 8K to 128K as far as device memory allows; f16 KV;
#     batch 1 and 8; the KV read rate as a fraction of the same device's vkCmdCopyBuffer rate and of
#     its streaming-read shader;
#   - the roofline of every kernel (dcp-vk-bench yardsticks, matmul, ops, and the attention runs
#     above): the fraction of max(bytes / streaming-read rate, FLOPs / FMA rate) each reaches, with
#     the yardsticks of the same run, as the table of the README's performance section
#     (OUT-roofline.md beside the summary OUT.json; OUT-roofline.png when matplotlib is installed);
#   - dcp-vk-run tokens/s for a generated model of 7B shape (llama-2 widths: embedding 4096, 32 heads
#     of 128, FFN 11008, f16 weights) with few layers, at TP 1;
#   - the multi-device path on the one GPU: four logical devices (DCP_VK_DEVICES=0,0,0,0): the same
#     model at TP 4, the DCP attention step over 4 ranks checked against the CPU reference, and
#     dcp-vk-bench comm (exchange latency per transport).
# --quick: small shapes and a subset of the tests, so that it runs end to end on a CPU driver
# (lavapipe) in minutes. Figures measured on lavapipe are CPU figures, not GPU figures.
#
# Usage: scripts/gpu-check.sh [--quick] [--build-dir DIR] [--out FILE] [--skip-build] [--skip-tests]
#                             [--jobs N]
# Needs: cmake, a C compiler, glslang, the Vulkan loader and a driver, python3 (for the summary);
# MPI is used by the tests when installed. Exit status 0 when everything ran (failed tests and
# benchmarks are reported in the summary, with status 1 at the end).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
quick=0
build=""
out=""
skip_build=0
skip_tests=0
jobs=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --build-dir) build=$2; shift ;;
    --out) out=$2; shift ;;
    --skip-build) skip_build=1 ;;
    --skip-tests) skip_tests=1 ;;
    --jobs) jobs=$2; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$build" ] || build="$here/build-gpu-check"
[ -n "$out" ] || out="$build/gpu-check.json"
command -v python3 >/dev/null || { echo "gpu-check: python3 is needed for the JSON summary" >&2; exit 2; }
mkdir -p "$build"
work=$(mktemp -d "${TMPDIR:-/tmp}/dcp-vk-gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
log() { echo "gpu-check: $*" >&2; }
failures=0

# ---- build ------------------------------------------------------------------------------------
if [ $skip_build = 0 ]; then
    log "building in $build"
    cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$work/cmake.log" 2>&1 ||
        { cat "$work/cmake.log" >&2; exit 1; }
    cmake --build "$build" -j "$jobs" > "$work/build.log" 2>&1 || { tail -50 "$work/build.log" >&2; exit 1; }
fi
bin="$build"
for app in dcp-vk-info dcp-vk-bench dcp-vk-run dcp-vk-gguf; do
    [ -x "$bin/$app" ] || { log "$bin/$app is missing (build first)"; exit 1; }
done

# ---- the device -------------------------------------------------------------------------------
# When the first Vulkan device is a CPU driver and a GPU is present, leave the CPU driver out, so
# that device 0 (which the tests use) is the GPU.
"$bin/dcp-vk-info" --json > "$work/info.json"
gpu_index=$(python3 - "$work/info.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))["devices"]
gpus = [x["index"] for x in d if x["type"] in ("discrete-gpu", "integrated-gpu", "virtual-gpu")]
print(gpus[0] if gpus else -1)
EOF
)
first_type=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["devices"][0]["type"])' "$work/info.json")
if [ "$gpu_index" != "-1" ] && [ "$first_type" = "cpu" ]; then
    icds=""
    for f in /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json; do
        [ -e "$f" ] || continue
        case "$(basename "$f")" in lvp_icd*) continue ;; esac
        icds="${icds:+$icds:}$f"
    done
    export VK_DRIVER_FILES="$icds" VK_ICD_FILENAMES="$icds"
    log "leaving lavapipe out: VK_DRIVER_FILES=$icds"
    "$bin/dcp-vk-info" --json > "$work/info.json"
fi
unset DCP_VK_DEVICES DCP_VK_TRANSPORT DCP_VK_STEP_SYNC
device=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["devices"][0]; print(d["name"])' "$work/info.json")
devtype=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["devices"][0]; print(d["type"])' "$work/info.json")
mem=$(python3 -c '
import json,sys
d=json.load(open(sys.argv[1]))["devices"][0]
h=[x["size"] for x in d["memory_heaps"] if x["device_local"]] or [x["size"] for x in d["memory_heaps"]]
print(max(h))' "$work/info.json")
log "device 0: $device ($devtype), $((mem >> 20)) MiB device-local"
[ "$devtype" = "cpu" ] && log "note: a CPU driver: the figures below are CPU figures, not GPU figures"

# ---- the test suite ---------------------------------------------------------------------------
tests_passed=0
tests_failed=0
tests_total=0
if [ $skip_tests = 0 ]; then
    sel=()
    [ $quick = 1 ] && sel=(-R '^(test_ops|test_paged_decode|test_lse_merge|test_public_api|test_dcp_2dev|test_comm|test_comm_3dev|test_xport|test_xport_model|test_dcp_devgroup)$')
    log "running the tests${sel:+ (quick subset)}"
    (cd "$build" && ctest -j "$jobs" --output-on-failure "${sel[@]}") > "$work/ctest.log" 2>&1 || true
    line=$(grep -E "tests passed, [0-9]+ tests failed out of" "$work/ctest.log" | tail -1 || true)
    if [ -n "$line" ]; then
        tests_failed=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/')
        tests_total=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\2/')
        tests_passed=$((tests_total - tests_failed))
    fi
    log "tests: $tests_passed of $tests_total passed"
    [ "$tests_failed" = 0 ] || { failures=$((failures + 1)); grep -E "\*\*\*Failed|Failed  " "$work/ctest.log" >&2 || true; }
fi

# ---- attention at long context ----------------------------------------------------------------
if [ $quick = 1 ]; then contexts="2048 4096"; iters=2; else contexts="8192 16384 32768 65536 131072"; iters=5; fi
: > "$work/attn.jsonl"
run_attn() { # name, then bench arguments; appends its JSON (or the error) to attn.jsonl
    local name=$1; shift
    if "$bin/dcp-vk-bench" attn "$@" --iters "$iters" --kv-dtype f16 --json > "$work/one.json" 2> "$work/one.err"; then
        python3 - "$work/one.json" "$name" >> "$work/attn.jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        d = json.loads(line); d["shape"] = sys.argv[2]; print(json.dumps(d))
EOF
    else
        failures=$((failures + 1))
        python3 -c 'import json,sys; print(json.dumps({"shape": sys.argv[1], "args": sys.argv[3:], "error": open(sys.argv[2]).read().strip()[-400:]}))' \
            "$name" "$work/one.err" "$@" >> "$work/attn.jsonl"
    fi
}
mla_note=""
if "$bin/dcp-vk-bench" attn --help 2>&1 | grep -q -- '--mla'; then have_mla=1; else
    have_mla=0; mla_note="dcp-vk-bench attn has no --mla: the MLA 576/512 shape was skipped"; log "$mla_note"; fi
for ctx in $contexts; do
    for batch in 1 8; do
        for shape in "gqa-32/8:32:8" "gqa-64/8:64:8"; do
            IFS=: read -r name hq hkv <<< "$shape"
            kv=$((ctx * batch * hkv * 128 * 2 * 2)) # K and V, f16
            if [ $((kv * 2)) -gt "$mem" ]; then
                log "attn $name ctx $ctx batch $batch: KV of $((kv >> 20)) MiB does not fit half the device memory: skipped"
                echo "{\"shape\": \"$name\", \"ctx\": $ctx, \"batch\": $batch, \"skipped\": \"KV $kv bytes over half the device memory\"}" >> "$work/attn.jsonl"
                continue
            fi
            log "attn $name ctx $ctx batch $batch"
            run_attn "$name" --ctx "$ctx" --batch "$batch" --q-heads "$hq" --kv-heads "$hkv" --head-dim 128
        done
        if [ $have_mla = 1 ]; then
            log "attn mla-576/512 ctx $ctx batch $batch"
            run_attn "mla-576/512" --mla --ctx "$ctx" --batch "$batch"
        fi
    done
done

# ---- the roofline of the other kernels ----------------------------------------------------------
# The attention runs above carry their roofline fields; matmul of every weight type and the model
# ops at decode shapes (batch 1, 8, 32; one token and 32) add theirs. The same table as the README.
if [ $quick = 1 ]; then mmargs=(--rows 1024 --k 1024 --iters 2); opargs=(--iters 2); else mmargs=(--iters 5); opargs=(--iters 5); fi
log "dcp-vk-bench yardsticks, matmul, ops (roofline)"
"$bin/dcp-vk-bench" yardsticks --json > "$work/yardsticks.json" 2> "$work/roof.err" ||
    { failures=$((failures + 1)); cat "$work/roof.err" >&2; echo '{}' > "$work/yardsticks.json"; }
"$bin/dcp-vk-bench" matmul "${mmargs[@]}" --json > "$work/matmul.json" 2> "$work/roof.err" ||
    { failures=$((failures + 1)); cat "$work/roof.err" >&2; echo '{}' > "$work/matmul.json"; }
: > "$work/ops.json"
for tokens in 1 32; do
    "$bin/dcp-vk-bench" ops --tokens "$tokens" "${opargs[@]}" --json >> "$work/ops.json" 2> "$work/roof.err" ||
        { failures=$((failures + 1)); cat "$work/roof.err" >&2; }
done
roof_md="${out%.json}-roofline.md"
python3 "$here/scripts/plot-roofline.py" --table "$work/attn.jsonl" "$work/matmul.json" "$work/ops.json" \
    > "$roof_md" 2> "$work/roof.err" || { failures=$((failures + 1)); cat "$work/roof.err" >&2; }
plot_py=""
for py in python3 /usr/bin/python3; do # a Python with matplotlib (Debian's, when another comes first)
    if [ -z "$plot_py" ] && "$py" -c 'import matplotlib' 2> /dev/null; then plot_py=$py; fi
done
if [ -n "$plot_py" ]; then
    "$plot_py" "$here/scripts/plot-roofline.py" --png "${out%.json}-roofline.png" "$work/attn.jsonl" "$work/matmul.json" \
        "$work/ops.json" 2> "$work/roof.err" || { failures=$((failures + 1)); cat "$work/roof.err" >&2; }
else
    log "no matplotlib (Debian: python3-matplotlib): the roofline plot is left out (the table is in $roof_md)"
fi
log "roofline table written to $roof_md"

# ---- a 7B-shaped model at TP 1, then on four logical devices -----------------------------------
if [ $quick = 1 ]; then
    margs=(--n-embd 512 --n-head 8 --n-head-kv 8 --head-dim 64 --n-ff 1376 --n-layer 2 --type f16); ngen=16
else
    margs=(--n-embd 4096 --n-head 32 --n-head-kv 32 --head-dim 128 --n-ff 11008 --n-layer 4 --type f16); ngen=64
fi
log "generating the model (${margs[*]})"
"$bin/dcp-vk-gguf" --make-model "$work/model.gguf" "${margs[@]}" > /dev/null
run_model() { # out file, devices, TP
    DCP_VK_DEVICES=$2 "$bin/dcp-vk-run" -m "$work/model.gguf" -p "Once upon a time" -n "$ngen" --temp 0 \
        --tensor-parallel-size "$3" --json > "$1" 2> "$1.err" || { failures=$((failures + 1)); cat "$1.err" >&2; echo '{}' > "$1"; }
}
log "dcp-vk-run at TP 1"
run_model "$work/run1.json" 0 1
log "dcp-vk-run at TP 4 on four logical devices of device 0"
run_model "$work/run4.json" 0,0,0,0 4

# ---- the multi-device path on one GPU -----------------------------------------------------------
if [ $quick = 1 ]; then dctx=4096; cmax=65536; citers=3; else dctx=32768; cmax=16777216; citers=20; fi
log "DCP attention over 4 logical devices (a2a and ag_rs, checked against the CPU reference)"
: > "$work/dcp.jsonl"
for be in a2a ag_rs; do
    DCP_VK_DEVICES=0,0,0,0 "$bin/dcp-vk-bench" attn --dcp 4 --backend "$be" --interleave 16 --ctx "$dctx" --batch 4 \
        --q-heads 32 --kv-heads 8 --head-dim 128 --kv-dtype f16 --iters "$iters" --verify --json \
        >> "$work/dcp.jsonl" 2> "$work/dcp.err" || { failures=$((failures + 1)); cat "$work/dcp.err" >&2; }
done
log "dcp-vk-bench comm over 4 logical devices"
DCP_VK_DEVICES=0,0,0,0 "$bin/dcp-vk-bench" comm --json --max-bytes "$cmax" --iters "$citers" \
    --model-layers 2 --model-steps 4 > "$work/comm.jsonl" 2> "$work/comm.err" ||
    { failures=$((failures + 1)); cat "$work/comm.err" >&2; }
DCP_VK_DEVICES=0,0,0,0 "$bin/dcp-vk-info" --json > "$work/info4.json" || echo '{}' > "$work/info4.json"

# ---- the summary -------------------------------------------------------------------------------
python3 - "$work" "$out" "$quick" "$tests_passed" "$tests_failed" "$tests_total" "$mla_note" "$failures" \
    "$here/scripts" <<'EOF'
import json, sys
work, out, quick, tp, tf, tt, mla_note, failures, scripts = sys.argv[1:10]
sys.path.insert(0, scripts)
roofline = __import__("plot-roofline")
def lines(name):
    r = []
    for l in open(f"{work}/{name}"):
        l = l.strip()
        if l.startswith("{"):
            try: r.append(json.loads(l))
            except ValueError: pass
    return r
def one(name):
    try: return json.load(open(f"{work}/{name}"))
    except (ValueError, OSError): return {}
def pairs(info):
    """Distinct (transport, reason) of the pairs between distinct ranks, with their counts."""
    seen = {}
    for t in info.get("transports") or []:
        if t["src"] != t["dst"]:
            seen.setdefault((t["transport"], t["reason"]), 0)
            seen[(t["transport"], t["reason"])] += 1
    return [{"transport": k[0], "reason": k[1], "pairs": v} for k, v in seen.items()]
info = json.load(open(f"{work}/info.json"))
dev = info["devices"][0]
r1, r4 = one("run1.json"), one("run4.json")
keep = ("generated_tokens_per_s", "prompt_tokens_per_s", "decode_step_rounds", "decode_step_host_waits",
        "decode_step_dispatches", "decode_step_rank_dispatches", "exchange")
attn = []
for a in lines("attn.jsonl"):
    attn.append({k: a.get(k) for k in ("shape", "ctx", "batch", "q_heads", "kv_heads", "head_dim", "step_ms",
                                        "kv_read_gbps", "copy_gbps", "stream_read_gbps", "ratio_vs_copy",
                                        "ratio_vs_stream_read", "flops", "roofline_us", "bound", "of_roofline",
                                        "skipped", "error") if k in a})
pts, _ = roofline.points([f"{work}/attn.jsonl", f"{work}/matmul.json", f"{work}/ops.json"])
roof = [{k: p.get(k) for k in ("bench", "kernel", "shape", "bytes", "flops", "intensity", "measured_us", "roofline_us",
                               "bound", "of_roofline", "read_gbps", "fma_gflops")} for p in pts]
summary = {
    "device": dev["name"], "type": dev["type"], "driver": dev.get("driver"), "driver_info": dev.get("driver_info"),
    "quick": quick == "1",
    "note": "CPU driver: these are CPU figures, not GPU figures" if dev["type"] == "cpu" else None,
    "tests": {"passed": int(tp), "failed": int(tf), "total": int(tt)},
    "yardsticks": one("yardsticks.json").get("yardsticks"),
    "roofline": roof,
    "attn": attn,
    "mla": mla_note or "run",
    "model_tp1": {k: r1.get(k) for k in keep if k in r1},
    "model_tp4_logical": {k: r4.get(k) for k in keep if k in r4},
    "tp4_tokens_equal_tp1": bool(r1.get("tokens")) and r1.get("tokens") == r4.get("tokens"),
    "dcp_attn_4_logical": [{k: d.get(k) for k in ("backend", "transport", "ctx", "local_ms", "exchange_ms", "merge_ms",
                                                  "total_ms", "verify") if k in d}
                           for d in lines("dcp.jsonl")],
    "comm_4_logical": [d for d in lines("comm.jsonl") if d.get("bytes") in (None, 1024, 65536, 1048576, 16777216)
                       or d.get("model_step")],
    "transports_4_logical": pairs(one("info4.json")),
    "step_rounds_4_logical": one("info4.json").get("step_rounds_reason"),
    "failures": int(failures),
}
json.dump(summary, open(out, "w"), indent=1)
print(json.dumps(summary))
EOF
log "summary written to $out"
[ "$failures" = 0 ] && [ "$tests_failed" = 0 ]
