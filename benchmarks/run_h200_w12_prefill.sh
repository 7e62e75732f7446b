#!/usr/bin/env bash
# W12 linears past the skinny kernels' 128 rows: the fused Triton kernel (the library's path there today) against the
# weight decoded once a call (w12_dequant) and multiplied by cuBLAS, with cuBLAS on the bf16 weight and the PyTorch
# decode beside them, on the Qwen3-8B layer linears at 128-4096 rows (warm), the decode checked bit for bit and every
# product against fp32 first. Writes w12_prefill.json, its PNG and a log; its last lines give a prefill's GEMM time
# by variant and the fewest rows from which the decode-then-cuBLAS path wins on every linear.
# Expected time on one H200: ~1.5 min, an estimate (this runner has not run on a GPU yet): torch start ~10 s, the W12
# encode of four weights ~5 s, 4 linears x 6 widths x 5 variants x 13 calls, the Triton kernel's at 4096 rows the
# longest (~5 ms each). Cap: 240 s (budget 180 s: no new linear starts past it).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_w12_prefill.sh   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 240 python3 -m benchmarks.kernels.bench_w12_prefill --budget-s 180 --out "$OUT/w12_prefill.json" 2>&1 | tee "$OUT/w12_prefill.log"
