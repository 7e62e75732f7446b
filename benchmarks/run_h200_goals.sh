#!/usr/bin/env bash
# Every goal of the weight-streaming GEMMs from one call (benchmarks/kernels/goals.py), then the wide kernels' parts.
# First the goals, on the library's defaults: cuBLAS bf16 and the default CUDA kernels at 1, 8 and 16 tokens
# (bench_fixed_cost, cold, with the read floor), cuBLAS bf16, the wide W12 / Q kernels and the Triton Q kernel at 17-64
# rows (bench_wide_w12, cold, its checks first, with the read floor), both without programmatic launch (what a call costs, not chains that
# overlap), then the lean 8B target's AR step and 16-row verify step with the library's settings (bench_roofline
# --ar-step), and the goals table from the three. Then the wide consumers part by part: libraries built with
# -DSPECDEC_WIDE_ABLATE=1 (no decode), 2 (no MMAs) and 3 (neither), each timing the wide kernels at 32 and 64 rows
# beside cuBLAS bf16 (their products wrong by design, not checked); the goals' wide run is their baseline.
# Expected time on one H200: ~5 min (fixed cost ~70 s, wide ~60 s, AR step ~35 s, goals ~5 s, each ablated library
# ~25 s, torch start ~10 s a process; nvcc ~20 s a library not carried in build/).
# Caps: 150 + 100 + 70 + 30 + 3 x 60 = 530 s, plus the builds (skipped when build/ was carried). With --goals-only
# the goals alone: ~3 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_goals.sh [--goals-only]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
PARTS=1
case ${1:-} in
  "") ;;
  --goals-only) PARTS=0 ;;
  *) echo "usage: bash benchmarks/run_h200_goals.sh [--goals-only]; got $1" >&2; exit 2 ;;
esac
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/goals_build.log"
[ "$PARTS" = 1 ] && for a in 1 2 3; do
  build_cuda_library_with "-DSPECDEC_WIDE_ABLATE=$a" "build/wide_ablate$a.so" 90 "$OUT/goals_build_ablate$a.log"
done
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_SPLIT_WORKSPACE SPECDEC_CUDA_KERNELS
export SPECDEC_PDL=0
timeout 150 python3 -m benchmarks.kernels.bench_fixed_cost --kernels cublas_bf16,cuda_w12_v10,cuda_q_v5,cuda_bf16_v5 \
  --budget-s 110 --out "$OUT/goals_fixed_cost.json" > "$OUT/goals_fixed_cost.log" 2>&1
echo "fixed cost, 1-16 tokens: exit $?"
timeout 100 python3 -m benchmarks.kernels.bench_wide_w12 --rows 17,24,32,33,48,64 --read-floor \
  --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide,triton_q --budget-s 70 --out "$OUT/goals_wide.json" > "$OUT/goals_wide.log" 2>&1
echo "wide, 17-64 rows: exit $?"
unset SPECDEC_PDL
timeout 70 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 16 --ar-budget-s 50 \
  --out "$OUT/goals_ar_step.json" > "$OUT/goals_ar_step.log" 2>&1
echo "AR step, 16-row verify: exit $?"
timeout 30 python3 -m benchmarks.kernels.goals --fixed-cost "$OUT/goals_fixed_cost.json" --wide "$OUT/goals_wide.json" \
  --ar-step "$OUT/goals_ar_step.json" --out "$OUT/goals.json" > "$OUT/goals.log" 2>&1
echo "goals: exit $?"
if [ "$PARTS" = 0 ]; then
  cat "$OUT/goals.log"
  exit 0
fi
export SPECDEC_PDL=0
for a in 1 2 3; do
  export SPECDEC_CUDA_KERNELS=build/wide_ablate$a.so
  timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --rows 32,64 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide \
    --budget-s 40 --out "$OUT/goals_wide_ablate$a.json" > "$OUT/goals_wide_ablate$a.log" 2>&1
  echo "wide kernels, SPECDEC_WIDE_ABLATE=$a: exit $?"
done
unset SPECDEC_CUDA_KERNELS SPECDEC_PDL
grep -E "^checks|FAILED" "$OUT/goals_wide.log" | head -3
for a in 1 2 3; do
  echo "=== SPECDEC_WIDE_ABLATE=$a ==="
  grep -E "^qwen3-8b (gate_up|o|lm_head) (32|64):" "$OUT/goals_wide_ablate$a.log"
done
echo "=== baseline (the goals' wide run) ==="
grep -E "^qwen3-8b (gate_up|o|lm_head) (32|64):" "$OUT/goals_wide.log"
echo "=== goals ==="
cat "$OUT/goals.log"
