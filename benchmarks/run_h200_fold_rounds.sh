#!/usr/bin/env bash
# W12's escape fold against the shipped library (one round of escapes at a time), in one call: skinny_gemm.cu built
# with -DSPECDEC_FOLD_ROUNDS=R (default 4: the positions and values of R rounds loaded together; build/foldR.so) and
# with it -DSPECDEC_FOLD_PREFETCH=1 (each persistent W12 CTA asks the L2 for its run's escapes as it starts;
# build/foldRpf.so). The second library's wide checks and compute-sanitizer memcheck over them with every wide call
# persistent; then for each library the wide W12 kernels on the 8B linears at 32 and 64 rows beside cuBLAS bf16,
# split-K and persistent taken in turn twice in one process (bench_wide_w12 --alternate SPECDEC_WIDE_STREAM_K=0,1),
# and the 8B linears at 1, 8 and 16 tokens (bench_fixed_cost: the tensor-map and row-tile kernels, whose escape warps
# fold the same way), beside cuBLAS bf16, without programmatic launch.
# Expected time on one H200: ~5 min (nvcc ~30 s a library not carried in build/; checks ~20 s, memcheck ~50 s, each
# library's timings ~30 + ~35 s, torch start ~10 s a process). Caps: 60 + 90 + 3 x (80 + 60) = 570 s, plus the
# builds (90 s each).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_fold_rounds.sh [R]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
R=${1:-4}
case $R in
  [2-8]) ;;
  *) echo "R: expected the rounds loaded together, 2 to 8, got $R" >&2; exit 2 ;;
esac
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/fold_rounds_build.log"
build_cuda_library_with "-DSPECDEC_FOLD_ROUNDS=$R" "build/fold$R.so" 90 "$OUT/fold_rounds_build_rounds.log"
so=build/fold${R}pf.so
build_cuda_library_with "-DSPECDEC_FOLD_ROUNDS=$R -DSPECDEC_FOLD_PREFETCH=1" "$so" 90 "$OUT/fold_rounds_build_prefetch.log"
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_SPLIT_WORKSPACE SPECDEC_WIDE_PIPELINE SPECDEC_WIDE_CTAS
export SPECDEC_PDL=0
export SPECDEC_CUDA_KERNELS=$so SPECDEC_WIDE_STREAM_K=1
timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/fold_rounds_checks.json" > "$OUT/fold_rounds_checks.log" 2>&1
echo "wide checks, fold of $R rounds and the run's escapes prefetched, persistent: exit $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only \
  --models qwen3-8b --out "$OUT/fold_rounds_memcheck.json" > "$OUT/fold_rounds_memcheck.log" 2>&1
echo "memcheck, fold of $R rounds and the run's escapes prefetched, persistent: exit $? (0 clean, 9 errors)"
unset SPECDEC_WIDE_STREAM_K
for lib in shipped "fold$R" "fold${R}pf"; do
  if [ "$lib" = shipped ]; then export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so; else export SPECDEC_CUDA_KERNELS=build/$lib.so; fi
  timeout 80 python3 -m benchmarks.kernels.bench_wide_w12 --models qwen3-8b --rows 32,64 --kernels cublas_bf16,cuda_w12_wide \
    --alternate SPECDEC_WIDE_STREAM_K=0,1 --alternate-rounds 2 --budget-s 60 \
    --out "$OUT/fold_rounds_$lib.json" > "$OUT/fold_rounds_$lib.log" 2>&1
  echo "wide W12 kernels, $lib library: exit $?"
  timeout 60 python3 -m benchmarks.kernels.bench_fixed_cost --models qwen3-8b --kernels cublas_bf16,cuda_w12_v10 --no-read-floor \
    --budget-s 30 --out "$OUT/fold_rounds_fixed_cost_$lib.json" > "$OUT/fold_rounds_fixed_cost_$lib.log" 2>&1
  echo "8B linears at 1-16 tokens, $lib library: exit $?"
done
unset SPECDEC_CUDA_KERNELS SPECDEC_PDL
grep -E "^checks|FAILED" "$OUT/fold_rounds_checks.log" | head -3
tail -n 2 "$OUT/fold_rounds_memcheck.log"
for lib in shipped "fold$R" "fold${R}pf"; do
  echo "=== $lib ==="
  grep -E "^qwen3-8b (gate_up|o|qkv|down|lm_head) [0-9]+ " "$OUT/fold_rounds_$lib.log"
  grep -E "^qwen3-8b [a-z_]+ +[0-9]+ +cuda_w12_v10" "$OUT/fold_rounds_fixed_cost_$lib.log"
done
