#!/usr/bin/env bash
# The wide kernels' epilogue, phase by phase and timed, in one call. Libraries built with -DSPECDEC_WIDE_TRACE=1 for
# each epilogue (-DSPECDEC_WIDE_EPILOGUE=0, the shipped one, and 1, finish_wide_row_block_async) record every CTA's
# phases on the 8B linears at 32 and 64 rows (benchmarks/kernels/wide_trace.py); the library built with
# -DSPECDEC_WIDE_EPILOGUE=1 runs the wide checks and compute-sanitizer memcheck over them; then the shipped and that
# library time the wide kernels (8B and 32B linears, 32 and 64 rows) beside cuBLAS bf16, alternated (shipped,
# flagged, shipped, flagged), without programmatic launch, and the lean 8B target's 64-row verify step with each.
# Expected time on one H200: ~7 min (the three nvcc builds ~30 s side by side where build/ lacks them; checks ~25 s,
# memcheck ~60 s, each trace ~35 s, each timing ~35 s, each AR step ~35 s, torch start ~10 s a process).
# Caps: 60 + 90 + 2 x 50 + 4 x 50 + 2 x 60 = 570 s, plus the builds (90 s, side by side).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_wide_epilogue.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/wide_epilogue_build.log" &
build_cuda_library_with "-DSPECDEC_WIDE_TRACE=1" build/wide_trace0.so 90 "$OUT/wide_epilogue_build_trace0.log" &
build_cuda_library_with "-DSPECDEC_WIDE_TRACE=1 -DSPECDEC_WIDE_EPILOGUE=1" build/wide_trace1.so 90 "$OUT/wide_epilogue_build_trace1.log" &
build_cuda_library_with "-DSPECDEC_WIDE_EPILOGUE=1" build/wide_epilogue1.so 90 "$OUT/wide_epilogue_build_1.log" &
wait
unset SPECDEC_WIDE_GEMM SPECDEC_WIDE_UNROLL SPECDEC_WIDE_GROUPS SPECDEC_SPLIT_WORKSPACE
export SPECDEC_PDL=0
export SPECDEC_CUDA_KERNELS=build/wide_epilogue1.so
timeout 60 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --models qwen3-8b \
  --out "$OUT/wide_epilogue_checks.json" > "$OUT/wide_epilogue_checks.log" 2>&1
echo "wide checks, epilogue 1: exit $?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only \
  --models qwen3-8b --out "$OUT/wide_epilogue_memcheck.json" > "$OUT/wide_epilogue_memcheck.log" 2>&1
echo "memcheck, epilogue 1: exit $? (0 clean, 9 errors)"
for e in 0 1; do
  export SPECDEC_CUDA_KERNELS=build/wide_trace$e.so
  timeout 50 python3 -m benchmarks.kernels.wide_trace --rows 32,64 --budget-s 35 \
    --out "$OUT/wide_trace_epilogue$e.json" > "$OUT/wide_trace_epilogue$e.log" 2>&1
  echo "trace, epilogue $e: exit $?"
done
for pass in shipped1 flagged1 shipped2 flagged2; do
  case $pass in shipped*) export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so ;; *) export SPECDEC_CUDA_KERNELS=build/wide_epilogue1.so ;; esac
  timeout 50 python3 -m benchmarks.kernels.bench_wide_w12 --rows 32,64 --kernels cublas_bf16,cuda_w12_wide,cuda_q_wide \
    --budget-s 32 --out "$OUT/wide_epilogue_$pass.json" > "$OUT/wide_epilogue_$pass.log" 2>&1
  echo "wide kernels, $pass: exit $?"
done
unset SPECDEC_PDL
for lib in shipped flagged; do
  case $lib in shipped) export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so ;; *) export SPECDEC_CUDA_KERNELS=build/wide_epilogue1.so ;; esac
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows 64 --ar-budget-s 40 \
    --out "$OUT/wide_epilogue_ar_step_$lib.json" > "$OUT/wide_epilogue_ar_step_$lib.log" 2>&1
  echo "AR step, verify 64 rows, $lib: exit $?"
done
unset SPECDEC_CUDA_KERNELS
grep -E "^checks|FAILED" "$OUT/wide_epilogue_checks.log" | head -3
tail -n 2 "$OUT/wide_epilogue_memcheck.log"
for e in 0 1; do
  echo "=== trace, epilogue $e ==="
  grep -E "^qwen3-8b |^model|FAILED" "$OUT/wide_trace_epilogue$e.log"
done
for pass in shipped1 flagged1 shipped2 flagged2; do
  echo "=== $pass ==="
  grep -E "^qwen3-(8b|32b) (gate_up|o|qkv|down|lm_head) [0-9]+:" "$OUT/wide_epilogue_$pass.log"
done
for lib in shipped flagged; do
  echo "=== AR step, $lib ==="
  grep -E "^AR step (bf16|w12):|^verify step" "$OUT/wide_epilogue_ar_step_$lib.log"
done
