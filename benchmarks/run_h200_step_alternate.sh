#!/usr/bin/env bash
# A kernel setting's effect on the lean 8B target's W12 decode steps, in one process: the AR-step benchmark
# (bench_roofline --ar-step, the library's defaults, verify step of ROWS rows, default 64), then the W12 target's
# one-token step and verify step under each of VALUES of the environment variable VAR in turn, three turns
# (--alternate VAR=VALUES: each turn's graphs captured again under its value), e.g. SPECDEC_WIDE_STREAM_K 0,auto: what
# the `auto` persistent rule does to the 64-row verify step. TARGET (default w12): bf16_skinny alternates the bf16
# target's steps with the skinny linears instead (bench_roofline --alternate-target; its linears run the skinny
# kernels at up to 8 rows, cuBLAS past them, so ROWS 8 for e.g. SPECDEC_BF16_CUDA_VARIANT v5,v3,v4).
# MODEL=qwen3-32b LAYERS=24 builds both targets at the 32B's shape with 24 of its 64 layers (~27 GB of bf16 weights
# beside ~20 GB of W12; all 64 would not fit one GPU twice), e.g. SPECDEC_W12_CUDA_VARIANT v10,v9,v8 16: the W12
# kernel rule on the 32B linears in a step (its down projection, K 25600, is the one past the row tiles' K 8192).
# Expected time on one H200: ~1.5 min (the AR step's phases ~35 s, each turn two captures and two timings ~5 s, torch
# start ~10 s; an H100 ran the AR step alone in ~25 s); the 32B's 24 layers ~3 min (an estimate, not yet timed on a
# GPU: the phases' budget 200 s, the 8B's 100 s). Cap: 270 s, plus the build (90 s; skipped when build/ was carried).
# Usage (repo root, on the GPU machine): [MODEL=... LAYERS=...] bash benchmarks/run_h200_step_alternate.sh VAR VALUES [ROWS] [TARGET]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
if [ $# -lt 2 ]; then
  echo "usage: bash benchmarks/run_h200_step_alternate.sh VAR VALUES [ROWS] [TARGET]  (e.g. SPECDEC_WIDE_STREAM_K 0,auto)" >&2
  exit 2
fi
VAR=$1 VALUES=$2 ROWS=${3:-64} TARGET=${4:-w12}
MODEL=${MODEL:-qwen3-8b}
case $MODEL in
  qwen3-8b) BUDGET=100 ;;
  qwen3-32b) BUDGET=200 ;;
  *) echo "MODEL: expected qwen3-8b or qwen3-32b, got $MODEL" >&2; exit 2 ;;
esac
shape=(--ar-model "$MODEL")
if [ -n "${LAYERS:-}" ]; then shape+=(--ar-layers "$LAYERS"); fi
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/step_alternate_build.log"
timeout 270 python3 -m benchmarks.kernels.bench_roofline --ar-step "${shape[@]}" --verify-rows "$ROWS" --ar-budget-s $BUDGET \
  --alternate "$VAR=$VALUES" --alternate-rounds 3 --alternate-target "$TARGET" --out "$OUT/step_alternate.json" > "$OUT/step_alternate.log" 2>&1
echo "AR step, $VAR in turn ($VALUES), verify $ROWS rows, $TARGET: exit $?"
grep -E "^(AR step|verify step|in one process|  )" "$OUT/step_alternate.log"
