#!/usr/bin/env bash
# W12 at 8-16 tokens, part by part: the library built four ways (skinny_gemm.cu's build-time switches): as shipped
# (the escape warp in the 8- and 16-token kernels, two halves of consumers), `esc8` (the escape warp only at 8 tokens,
# the 16-token kernel adds the escapes in its epilogue), `esc0` (no escape warp at all) and `halves1` (one half of
# consumers). Each: the W12 v7 probe (one-hot exact and deterministic at 1, 8, 12, 16 tokens), then W12 v7 timed in
# CUDA graphs on the Qwen3-8B o, down and lm_head shapes at 1, 8 and 16 tokens with Gaussian weights (Q v2 beside it
# once); the shipped and esc8 libraries also with the planted weights (a crowded escape tile); the AR step (bf16 and
# W12, one token and the 16-row verify) with esc8; esc0 under compute-sanitizer memcheck. Writes the AR step's JSON
# and one w12_tokens.tgz (timings, probes, logs) to $OUT.
# Expected time on one H200: ~6 min (nvcc ~20 s a library when build/w12_*.so were not carried; torch start ~10 s a
# process; probes ~15 s, four; timings ~25 s, six; AR step ~45 s; sanitizer ~40 s).
# Measured: 141 s with the libraries carried (2026-12-04). Caps: nvcc 60 s a library, probes 20 s, timings 40 s
# (budget 30 s), AR step 80 s (budget 60 s), sanitizer 70 s: at most ~9 min when the libraries were carried.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_w12_tokens.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
export SPECDEC_PDL=1
flags_of() {
  case "$1" in
    default) echo "" ;;
    esc8) echo "-DSPECDEC_W12_ESCAPE_WARP_TOKENS=8" ;;
    esc0) echo "-DSPECDEC_W12_ESCAPE_WARP_TOKENS=0" ;;
    halves1) echo "-DSPECDEC_W12_HALVES=1" ;;
  esac
}
CASES=qwen3-8b/o,qwen3-8b/down,qwen3-8b/lm_head
for lib in default esc8 esc0 halves1; do
  so=build/w12_$lib.so
  if [ ! -f "$so" ]; then
    mkdir -p build
    # shellcheck disable=SC2046
    timeout 60 nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 --shared -Xcompiler -fPIC -cudart static $(flags_of "$lib") \
      specdec/kernels/cuda/skinny_gemm.cu -o "$so" > "$LOGS/build_$lib.log" 2>&1
    echo "nvcc $lib: exit $?"
  fi
  export SPECDEC_CUDA_KERNELS=$so
  timeout 20 python3 -m benchmarks.kernels.bench_roofline --probe v7 --out "$LOGS/probe_$lib.json" > "$LOGS/probe_$lib.log" 2>&1
  echo "$lib: W12 v7 probe exit $? ($(tail -n 1 "$LOGS/probe_$lib.log"))"
  extra=()
  if [ "$lib" = default ]; then extra=(--only-kernel cuda_q_v2); fi
  timeout 40 python3 -m benchmarks.kernels.profile_ncu --launch --cases "$CASES" --only-kernel cuda_w12_v7 ${extra[@]+"${extra[@]}"} \
    --ms 1,8,16 --weights gaussian --time-reps 10 --budget-s 30 --out "$LOGS/time_$lib.json" > "$LOGS/time_$lib.log" 2>&1
  echo "$lib: timing exit $?"
  if [ "$lib" = default ] || [ "$lib" = esc8 ]; then
    timeout 40 python3 -m benchmarks.kernels.profile_ncu --launch --cases qwen3-8b/o,qwen3-8b/down --only-kernel cuda_w12_v7 \
      --ms 1,8,16 --weights planted --time-reps 10 --budget-s 30 --out "$LOGS/time_planted_$lib.json" > "$LOGS/time_planted_$lib.log" 2>&1
    echo "$lib: timing with planted weights exit $?"
  fi
done
export SPECDEC_CUDA_KERNELS=build/w12_esc8.so
timeout 80 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 60 --out "$OUT/ar_step_w12_esc8.json" > "$LOGS/ar_step_esc8.log" 2>&1
echo "AR step with esc8: exit $?"
if command -v compute-sanitizer >/dev/null; then
  export SPECDEC_CUDA_KERNELS=build/w12_esc0.so
  timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --sanitize > "$LOGS/sanitize_esc0.log" 2>&1
  echo "compute-sanitizer memcheck, esc0: exit $? (0 = clean, 9 = errors, 124 = timed out)"
fi
tar -czf "$LOGS/../w12_tokens.tgz" -C "$LOGS" . && mv "$LOGS/../w12_tokens.tgz" "$OUT/"
for lib in default esc8 esc0 halves1; do
  echo "=== $lib, Gaussian weights (us a call) ==="
  grep -E "^cuda_" "$LOGS/time_$lib.log"
done
for lib in default esc8; do
  echo "=== $lib, planted weights ==="
  grep -E "^cuda_" "$LOGS/time_planted_$lib.log"
done
echo "=== AR step, esc8 ==="
grep -E "^AR step|^verify step" "$LOGS/ar_step_esc8.log"
