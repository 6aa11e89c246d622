#!/bin/bash
# Two builds of dcp-vk measured against each other in one window, for before / after tables.
#
#   scripts/bench-ab.sh [--quick] BEFORE_BUILD AFTER_BUILD OUTDIR
#   scripts/roofline-compare.py --before OUTDIR/*.before.json --after OUTDIR/*.after.json
#
# BEFORE_BUILD and AFTER_BUILD are build trees (each with dcp-vk-bench and dcp-vk-run); OUTDIR is
# created and must be empty. Every case runs six times, before, after, after, before, before,
# after, so that a machine that gets busier or quieter during the window weighs on both alike and
# one disturbed run does not move a median; each kernel bench
# samples its yardsticks beside every result (docs/design.md section 16). The cases: the
# yardsticks; GQA paged decode at 32K (heads 32/32, 32/8, 64/8; f16 and q8_0 KV); MLA latent decode
# at 32K (16 heads f16 and q8_0, 128 heads f16) and 128K (16 heads f16); matmul 4096 x 4096 of every
# weight type at batch 1, 8 and 32; the other ops at 1 and 32 tokens; stories260K greedy at TP 1 and
# TP 8 / DCP 2 on eight logical devices (with and without --dcp-q-replicate). $DCP_AB_MODEL, a GGUF
# file, adds a 16-token greedy run of it at TP 1 (the README uses a 7B-shaped model:
# `dcp-vk-gguf --make-model M.gguf --n-embd 4096 --n-head 32 --n-head-kv 32 --head-dim 128
# --n-ff 11008 --n-layer 2 --type q8_0`).
# --quick runs small shapes in seconds (the test app_bench_ab). A case that one build cannot run
# (an option it does not have) leaves its reason in OUTDIR/NAME.SIDE.err and the table a "-".
set -u
quick=0
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
if [ $# -ne 3 ]; then
    echo "usage: $0 [--quick] BEFORE_BUILD AFTER_BUILD OUTDIR" >&2
    exit 2
fi
before=$1 after=$2 out=$3
for b in "$before" "$after"; do
    for exe in dcp-vk-bench dcp-vk-run; do
        if [ ! -x "$b/$exe" ]; then
            echo "$0: $b/$exe: not an executable (BEFORE_BUILD and AFTER_BUILD are build trees)" >&2
            exit 2
        fi
    done
done
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
    echo "$0: $out: exists and is not empty" >&2
    exit 2
fi
mkdir -p "$out" || exit 2
here=$(cd "$(dirname "$0")/.." && pwd)
stories=$here/tests/data/stories260K.gguf
failed=0

# ab NAME EXE ARGS...: six runs, ABBAAB, stdout to OUT/NAME.SIDE.json, stderr to OUT/NAME.SIDE.err.
ab() {
    local name=$1 exe=$2 side dir
    shift 2
    for side in before after after before before after; do
        dir=$before
        [ "$side" = after ] && dir=$after
        echo "$(date +%T) $side $name" >&2
        "$dir/$exe" "$@" >>"$out/$name.$side.json" 2>>"$out/$name.$side.err" || failed=$((failed + 1))
    done
}

ab yardsticks dcp-vk-bench yardsticks --json
if [ $quick = 1 ]; then # each kind of case once, small
    ab gqa_8_2_f16 dcp-vk-bench attn --ctx 1024 --q-heads 8 --kv-heads 2 --head-dim 64 --iters 1 --json
    ab gqa_8_2_q8_0 dcp-vk-bench attn --ctx 1024 --q-heads 8 --kv-heads 2 --head-dim 64 --kv-dtype q8_0 --iters 1 --json
    ab mla4_f16 dcp-vk-bench attn --mla --ctx 512 --q-heads 4 --kv-lora 64 --rope 16 --iters 1 --json
    ab matmul dcp-vk-bench matmul --rows 256 --k 256 --types f16,q4_k --batch 1,8 --iters 1 --json
    ab ops_1tok dcp-vk-bench ops --ops rmsnorm,swiglu --n-embd 256 --n-ff 512 --iters 1 --json
    ab stories_tp1 dcp-vk-run -m "$stories" -n 8 --temp 0 --json
    DCP_VK_DEVICES=0,0,0,0,0,0,0,0 ab stories_tp8_dcp2 dcp-vk-run -m "$stories" -n 8 --temp 0 \
        --tensor-parallel-size 8 --decode-context-parallel-size 2 --json
else
    for heads in "32 32" "32 8" "64 8"; do
        set -- $heads
        for dt in f16 q8_0; do
            ab "gqa_$1_$2_$dt" dcp-vk-bench attn --ctx 32768 --q-heads $1 --kv-heads $2 --head-dim 128 \
                --kv-dtype $dt --iters 3 --json
        done
    done
    ab mla16_f16 dcp-vk-bench attn --mla --ctx 32768 --iters 3 --json
    ab mla16_q8_0 dcp-vk-bench attn --mla --ctx 32768 --kv-dtype q8_0 --iters 3 --json
    ab mla128_f16 dcp-vk-bench attn --mla --ctx 32768 --q-heads 128 --iters 2 --json
    ab mla16_f16_128k dcp-vk-bench attn --mla --ctx 131072 --iters 2 --json
    ab matmul dcp-vk-bench matmul --rows 4096 --k 4096 --batch 1,8,32 --iters 5 --json
    ab ops_1tok dcp-vk-bench ops --json
    ab ops_32tok dcp-vk-bench ops --tokens 32 --json
    ab stories_tp1 dcp-vk-run -m "$stories" -n 256 --temp 0 --json
    DCP_VK_DEVICES=0,0,0,0,0,0,0,0 ab stories_tp8_dcp2 dcp-vk-run -m "$stories" -n 256 --temp 0 \
        --tensor-parallel-size 8 --decode-context-parallel-size 2 --json
    DCP_VK_DEVICES=0,0,0,0,0,0,0,0 ab stories_tp8_dcp2_qrep dcp-vk-run -m "$stories" -n 256 --temp 0 \
        --tensor-parallel-size 8 --decode-context-parallel-size 2 --dcp-q-replicate --json
    if [ -n "${DCP_AB_MODEL:-}" ]; then
        ab "model_$(basename "$DCP_AB_MODEL" .gguf)" dcp-vk-run -m "$DCP_AB_MODEL" -p "Once upon a time" -n 16 \
            --temp 0 --json
    fi
fi
ab yardsticks_end dcp-vk-bench yardsticks --json
echo "$0: $failed of the runs failed (their reasons in $out/*.err)" >&2
exit 0
