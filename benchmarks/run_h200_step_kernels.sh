#!/usr/bin/env bash
# The lean 8B target's steps kernel by kernel: the AR-step benchmark (bench_roofline --ar-step: the bf16, skinny-bf16
# and W12 one-token steps and their ROWS-row verify steps, each with its torch.profiler breakdown) with programmatic
# launch off (SPECDEC_PDL=0), where each kernel's profiled time is its own, then with the library's default, where a
# kernel launched programmatically is timed from its early start and its time includes its wait for the kernel before.
# MODES (default "0 default"): the $SPECDEC_PDL settings to run, a process each, in order; "default" leaves it unset
# (e.g. MODES="0 gemm elementwise default": which early starts the step's time owes to the GEMMs, which to the
# element-wise kernels). SPECDEC_CUDA_KERNELS, where set, names the library every process loads.
# Expected time on one H200: ~30 s a mode (an H100 ran one in ~25 s). Caps: 70 s a process, plus the build (90 s;
# skipped when build/ was carried).
# Usage (repo root, on the GPU machine): [MODES="..."] bash benchmarks/run_h200_step_kernels.sh [ROWS]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
ROWS=${1:-16}
MODES=${MODES:-0 default}
for pdl in $MODES; do
  case $pdl in
    0 | gemm | elementwise | 1 | default) ;;
    *) echo "MODES: expected 0, gemm, elementwise, 1 or default, got $pdl" >&2; exit 2 ;;
  esac
done
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/step_kernels_build.log"
for pdl in $MODES; do
  case $pdl in
    0 | gemm | elementwise | 1) export SPECDEC_PDL=$pdl ;;
    *) unset SPECDEC_PDL ;;
  esac
  timeout 70 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows "$ROWS" --ar-budget-s 50 \
    --out "$OUT/step_kernels_pdl_$pdl.json" > "$OUT/step_kernels_pdl_$pdl.log" 2>&1
  echo "AR step, programmatic launch $pdl: exit $?"
  grep -E "^(AR step (bf16|w12):|verify step|AR step bf16 with skinny)" "$OUT/step_kernels_pdl_$pdl.log"
done
