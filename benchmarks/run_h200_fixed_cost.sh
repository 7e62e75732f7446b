#!/usr/bin/env bash
# What the weight-streaming GEMMs cost beyond their bytes: cuBLAS bf16 and the tensor-map CUDA kernels (bf16 v2,
# W12 v7, Q v2) on the Qwen3-8B and Qwen3-32B linear shapes at M = 1, 8, 16 with warm weights (one matrix replayed,
# as the roofline) and cold ones (identical copies spanning 3x the L2), then a sweep of N = 4096 / 16384 rows over
# K = 1k-16k at M = 1 and 8 on cold weights, each kernel fitted as fixed time + bytes / rate; an empty kernel's
# launch in the same kind of graph for the floor, and the read floor (benchmarks/kernels/read_floor.py: the fastest
# plain read of the same bytes, cold) at every byte count the kernels read. Writes fixed_cost.json, its PNG and a log.
# Expected time on one H200: ~2 min (torch start ~10 s, copy bandwidth ~2 s, W12 encoding of the 20 weight matrices
# ~15 s, 10 model shapes x 3 M x 7 kernels x 2 timings and 10 sweep shapes x 2 M x 7 kernels, ~50 ms each, the read
# floor ~10 s; nvcc
# adds 15-25 s when build/specdec_cuda_kernels.so was not carried). Caps: nvcc 60 s, the run 150 s (budget 110 s:
# no new shape starts past it, the JSON and table are still written).
# KERNELS (bench_fixed_cost's --kernels, comma-separated) times those kernels instead of the default set.
# Usage (repo root, on the GPU machine): [KERNELS=...] bash benchmarks/run_h200_fixed_cost.sh   (writes JSON, PNG and log to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$OUT/fixed_cost_build.log"
timeout 150 python3 -m benchmarks.kernels.bench_fixed_cost ${KERNELS:+--kernels "$KERNELS"} --budget-s 110 --out "$OUT/fixed_cost.json" \
  2>&1 | tee "$OUT/fixed_cost.log"
