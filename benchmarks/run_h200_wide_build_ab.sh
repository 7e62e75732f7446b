#!/usr/bin/env bash
# The shipped library against one built with extra nvcc FLAGS (e.g. -DSPECDEC_WIDE_STAGGER=1: each CTA starts its K
# slice at its own stage), in one call: the flagged library's wide checks and compute-sanitizer memcheck over them;
# the wide W12 / Q kernels of both at ROWS (default 32,64) on the 8B and 32B linears beside cuBLAS bf16, twice each in
# alternation (shipped, flagged, shipped, flagged), without programmatic launch; the lean 8B target's 64-row verify
# step with each (bench_roofline --ar-step --verify-rows 64).
# Expected time on one H200: ~5 min (nvcc ~20 s a library not carried in build/; checks ~25 s, memcheck ~60 s, each
# timing ~30 s, each AR step ~35 s, torch start ~10 s a process).
# Caps: 60 + 90 + 4 x 60 + 2 x 60 = 510 s, plus the builds.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_build_ab.sh "FLAGS" [ROWS]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
if [ $# -lt 1 ]; then
  echo 'usage: bash benchmarks/run_h200_wide_build_ab.sh "FLAGS" [ROWS]  (e.g. "-DSPECDEC_WIDE_STAGGER=1")' >&2
  exit 2
fi
FLAGS=$1 ROWS=${2:-32,64}
case $FLAGS in
  -D*) ;;
  *) echo "FLAGS: expected nvcc -D switches of skinny_gemm.cu, got $FLAGS" >&2; exit 2 ;;
esac
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/build_ab_build.log"
so=build/wide_build_ab.so
build_cuda_library_with "$FLAGS" "$so" 90 "$OUT/build_ab_build_flagged.log"
echo "$FLAGS" > "$OUT/build_ab_flags.txt"
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_SPLIT_WORKSPACE
export SPECDEC_PDL=0
export SPECDEC_CUDA_KERNELS=$so
timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/build_ab_checks.json" > "$OUT/build_ab_checks.log" 2>&1
echo "wide checks, $FLAGS: exit $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only \
  --models qwen3-8b --out "$OUT/build_ab_memcheck.json" > "$OUT/build_ab_memcheck.log" 2>&1
echo "memcheck, $FLAGS: exit $? (0 clean, 9 errors)"
for pass in shipped1 flagged1 shipped2 flagged2; do
  case $pass in shipped*) export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so ;; *) export SPECDEC_CUDA_KERNELS=$so ;; esac
  timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --rows "$ROWS" --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide \
    --budget-s 40 --out "$OUT/build_ab_$pass.json" > "$OUT/build_ab_$pass.log" 2>&1
  echo "wide kernels, $pass: exit $?"
done
unset SPECDEC_PDL
for lib in shipped flagged; do
  case $lib in shipped) export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so ;; *) export SPECDEC_CUDA_KERNELS=$so ;; esac
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 40 \
    --out "$OUT/build_ab_ar_step_$lib.json" > "$OUT/build_ab_ar_step_$lib.log" 2>&1
  echo "AR step, verify 64 rows, $lib: exit $?"
done
unset SPECDEC_CUDA_KERNELS
grep -E "^checks|FAILED" "$OUT/build_ab_checks.log" | head -3
tail -n 2 "$OUT/build_ab_memcheck.log"
for pass in shipped1 flagged1 shipped2 flagged2; do
  echo "=== $pass ==="
  grep -E "^qwen3-(8b|32b) (gate_up|o|qkv|down|lm_head) [0-9]+:" "$OUT/build_ab_$pass.log"
done
for lib in shipped flagged; do
  echo "=== AR step, $lib ==="
  grep -E "^AR step (bf16|w12):|^verify step" "$OUT/build_ab_ar_step_$lib.log"
done
