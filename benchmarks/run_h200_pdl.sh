#!/usr/bin/env bash
# Programmatic dependent launch ($SPECDEC_PDL, specdec/kernels/launch.py) on and off: the W12 v7, Q v2 and bf16 v2
# probes with it on (one-hot exact, deterministic); the fixed cost of the tensor-map GEMMs and cuBLAS on the Qwen3-8B
# and Qwen3-32B shapes (cold weights, calls back to back in a graph) with it off and with the GEMMs launching
# programmatically; the AR step of the Qwen3-8B-shaped lean target (bf16 and W12 weights, graphs) off, GEMMs only,
# and GEMMs with the norms and SwiGLU; the CUDA kernels under compute-sanitizer memcheck with it on. Writes JSON to $OUT, and the logs,
# the probes' JSON and the fixed-cost PNGs in one pdl_logs.tgz.
# Expected time on one H200: ~4 min (torch start ~10 s a process; probes ~15 s each, three; fixed cost ~25 s each,
# two; AR step ~25 s each, three; sanitizer ~30 s; nvcc 15-25 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, probes 30 s each, fixed cost 75 s each (budget 55 s), AR steps 60 s each (budget 45 s), sanitizer
# 60 s: at most ~8.5 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_pdl.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/pdl_build.log"
export SPECDEC_PDL=1
for v in v7 q_v2 bf16_v2; do
  timeout 30 python3 -m benchmarks.kernels.bench_roofline --probe "$v" --out "$LOGS/${v}_probe_pdl.json" > "$LOGS/${v}_probe_pdl.log" 2>&1
  echo "$v probe with SPECDEC_PDL=1: exit $? ($(tail -n 1 "$LOGS/${v}_probe_pdl.log"))"
done
for mode in 0 gemm; do
  export SPECDEC_PDL=$mode
  timeout 75 python3 -m benchmarks.kernels.bench_fixed_cost --budget-s 55 --out "$OUT/fixed_cost_pdl_$mode.json" > "$LOGS/fixed_cost_pdl_$mode.log" 2>&1
  echo "fixed cost, SPECDEC_PDL=$mode: exit $?"
done
for mode in 0 gemm 1; do
  export SPECDEC_PDL=$mode
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 45 \
    --out "$OUT/ar_step_pdl_$mode.json" > "$LOGS/ar_step_pdl_$mode.log" 2>&1
  echo "AR step, SPECDEC_PDL=$mode: exit $?"
done
if command -v compute-sanitizer >/dev/null; then
  export SPECDEC_PDL=1
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --sanitize > "$LOGS/pdl_sanitize.log" 2>&1
  echo "compute-sanitizer memcheck with SPECDEC_PDL=1: exit $? (0 = clean, 9 = errors, 124 = timed out)"
else
  echo "compute-sanitizer not found: memcheck not run"
fi
mv "$OUT"/fixed_cost_pdl_*.png "$LOGS/" 2>/dev/null
tar -czf "$LOGS/../pdl_logs.tgz" -C "$LOGS" . && mv "$LOGS/../pdl_logs.tgz" "$OUT/"
for mode in 0 gemm; do
  echo "=== fixed cost, SPECDEC_PDL=$mode: fits, then the Qwen3-8B shapes at M = 1 (cold, back to back) ==="
  grep -E "^(cublas|cuda)_" "$LOGS/fixed_cost_pdl_$mode.log" | head -n 16
  grep -E "^qwen3-8b .* 1   " "$LOGS/fixed_cost_pdl_$mode.log"
done
for mode in 0 gemm 1; do
  echo "=== AR step, SPECDEC_PDL=$mode ==="
  grep -E "^AR step|^verify step" "$LOGS/ar_step_pdl_$mode.log"
done
