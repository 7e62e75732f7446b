#!/usr/bin/env bash
# The lean 8B target's steps kernel by kernel: the AR-step benchmark (bench_roofline --ar-step: the bf16, skinny-bf16
# and W12 one-token steps and their ROWS-row verify steps, each with its torch.profiler breakdown) with programmatic
# launch off (SPECDEC_PDL=0), where each kernel's profiled time is its own, then with the library's default, where a
# kernel launched programmatically is timed from its early start and its time includes its wait for the kernel before.
# Expected time on one H200: ~1 min (two AR-step processes of ~30 s; an H100 ran one in ~25 s). Caps: 70 s a process,
# plus the build (90 s; skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_step_kernels.sh [ROWS]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
ROWS=${1:-16}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/step_kernels_build.log"
for pdl in 0 default; do
  if [ "$pdl" = 0 ]; then export SPECDEC_PDL=0; else unset SPECDEC_PDL; fi
  timeout 70 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows "$ROWS" --ar-budget-s 50 \
    --out "$OUT/step_kernels_pdl_$pdl.json" > "$OUT/step_kernels_pdl_$pdl.log" 2>&1
  echo "AR step, programmatic launch $pdl: exit $?"
  grep -E "^(AR step (bf16|w12):|verify step|AR step bf16 with skinny)" "$OUT/step_kernels_pdl_$pdl.log"
done
