#!/usr/bin/env bash
# The tensor-map GEMMs' ring without math (benchmarks/kernels/stream_probe.cu): every stage layout (the split-K GEMMs'
# row boxes for W12, Q and bf16 and the same bytes stored stage after stage, at the GEMMs' K split; the row tiles' boxes
# and their bytes stored stage after stage, over the whole of K) on the Qwen3-8B qkv, o, down, gate_up and lm_head
# shapes, a split sweep on the one-wave shapes, W12's boxes under each L2 promotion; the GEMMs themselves (cuBLAS bf16,
# bf16 v2, W12 v7, Q v2, W12 v9, Q v4, bf16 v4) at M = 1 in the same run with the read floor of each of their byte
# counts; all on cold weights. Writes stream_layout.json, its PNG and a log.
# Expected time on one H200: ~2.5 min (torch start ~10 s, nvcc for the probe ~30 s and for the GEMMs 15-25 s when
# build/ was not carried, copy bandwidth ~2 s, ~90 probe cases of ~0.1-0.3 s each after a 1-2 GB random pool a shape,
# the W12 encoding of five weights ~12 s, 35 GEMM timings and 15 read floors). Caps: nvcc 60 s, the run 240 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_stream_layout.sh   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$OUT/stream_layout_build.log"
timeout 240 python3 -m benchmarks.kernels.bench_stream_layout --out "$OUT/stream_layout.json" 2>&1 | tee "$OUT/stream_layout.log"
