#!/usr/bin/env bash
# The lean 8B target's 64-row W12 verify step with one and two wide CTAs an SM ($SPECDEC_WIDE_CTAS), with and
# without programmatic dependent launch ($SPECDEC_PDL), each step's kernels split under torch.profiler: where the
# per-call gains of two CTAs at 64 rows go in the captured step; then ncu's throughput, occupancy and warp-state
# sections of one W12 and one Q wide call on the 8B o at 32 / 64 rows in each form; the Q view's wide kernel with two
# CTAs an SM against the Triton Q kernel (the Q view's path at 17-128 rows) on the 8B linears at 17 / 32 / 64 rows.
# Expected time on one H200: ~3 min (136 s on an H100 on 2026-12-06).
# Caps: 4 x 50 + 2 x 60 + 60 = 380 s, plus the build (skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_ctas_step.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_ctas_step_build.log"
export SPECDEC_WIDE_PIPELINE=0
unset SPECDEC_WIDE_GEMM
step64() {
  export SPECDEC_PDL=$1 SPECDEC_WIDE_CTAS=$2
  timeout 50 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 25 --out "$OUT/step64_pdl$1_ctas$2.json" > "$OUT/step64_pdl$1_ctas$2.log" 2>&1
  echo "verify step, 64 rows, SPECDEC_PDL=$1 SPECDEC_WIDE_CTAS=$2: exit $?"
}
step64 1 2
step64 1 1
export SPECDEC_PDL=1 SPECDEC_WIDE_CTAS=2
timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 17,32,64 --kernels cublas_bf16,cuda_q_wide,triton_q --budget-s 45 --out "$OUT/q_wide_triton.json" > "$OUT/q_wide_triton.log" 2>&1
echo "Q wide (two CTAs an SM) and Triton Q, 8B: exit $?"
NCU=(--clock-control none --profile-from-start off --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats)
for ctas in 2 1; do
  export SPECDEC_WIDE_CTAS=$ctas
  timeout 60 ncu "${NCU[@]}" python3 -m benchmarks.kernels.probe_wide --rows 32,64 --out "$OUT/probe_wide_ctas$ctas.json" \
    > "$OUT/wide_ctas${ctas}_ncu.txt" 2> "$OUT/wide_ctas${ctas}_ncu.err"
  echo "ncu, SPECDEC_WIDE_CTAS=$ctas: exit $?"
done
for ctas in 2 1; do
  echo "=== ncu, SPECDEC_WIDE_CTAS=$ctas ==="
  grep -E "tma_wide_kernel|^ +(Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Issued Warp Per Scheduler|Warp Cycles Per Issued Instruction|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Registers Per Thread|Block Limit Shared Mem)" \
    "$OUT/wide_ctas${ctas}_ncu.txt" | sed -E 's/ +/ /g' | head -60
done
step64 0 2
step64 0 1
echo "=== Q wide (two CTAs an SM) and Triton Q (us and x cuBLAS bf16) ==="
grep -E "^checks|FAILED" "$OUT/q_wide_triton.log" | head -4
grep -E "^qwen3" "$OUT/q_wide_triton.log" | tail -n 15
for pdl in 1 0; do
  for ctas in 2 1; do
    echo "=== SPECDEC_PDL=$pdl SPECDEC_WIDE_CTAS=$ctas ==="
    grep -E "^AR step w12:|^verify step w12|^w12 verify step kernels" "$OUT/step64_pdl${pdl}_ctas$ctas.log"
  done
done
