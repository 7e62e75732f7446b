#!/usr/bin/env bash
# Roofline of the decode-size GEMMs (M = 1, 2, 4, 8): cuBLAS bf16 / fp8, Triton W12 / Q, the CUDA skinny kernels,
# on the Qwen3-8B and Qwen3-32B linear shapes, against the copy bandwidth of the same run; then the CUDA kernels
# once under compute-sanitizer memcheck.
# Expected time on one H200: ~2.5 min (estimate, not yet measured: ~10 s torch start, 0-25 s nvcc when
# build/specdec_cuda_kernels.so was not carried, ~20 s Triton compiles, ~5 s one-hot decode checks, ~40 s timing
# of 10 shapes x 4 M x 7 kernels (graphs of 20 calls, 10 replays), ~40 s sanitizer). Cap: 180 s for the whole
# runner; the Python budget is what is left after the build minus the sanitizer's 50 s, and no new case starts
# past it (JSON, PNG and summary are still written).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_roofline.sh   (writes JSON, PNG and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
CAP=180
SO=${SPECDEC_CUDA_KERNELS:-build/specdec_cuda_kernels.so}
if [ ! -f "$SO" ]; then
  echo "building $SO"
  mkdir -p "$(dirname "$SO")"
  timeout 90 nvcc -O3 -arch=sm_90a -std=c++17 --shared -Xcompiler -fPIC -cudart static -Xptxas -v \
    specdec/kernels/cuda/skinny_gemm.cu -o "$SO" 2>&1 | grep -E "registers|spill" | tee "$OUT/roofline_build.log"
fi
left=$((CAP - SECONDS - 55))
budget=$((left - 35))
echo "main run: timeout ${left}s, --budget-s ${budget}"
timeout "$left" python3 -m benchmarks.kernels.bench_roofline --budget-s "$budget" --out "$OUT/roofline_h200.json" 2>&1 | tee "$OUT/roofline.log"
rc=$?
sleft=$((CAP - SECONDS - 3))
if command -v compute-sanitizer >/dev/null && [ "$sleft" -gt 20 ]; then
  timeout "$sleft" compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --sanitize \
    > "$OUT/roofline_sanitize.log" 2>&1
  echo "compute-sanitizer memcheck: exit $? (0 = clean, 9 = errors, 124 = timed out); tail:"
  tail -n 4 "$OUT/roofline_sanitize.log"
else
  echo "compute-sanitizer not run (missing or ${sleft}s left)"
fi
echo "=== summary (main run exit $rc) ==="
tail -n 10 "$OUT/roofline.log"
