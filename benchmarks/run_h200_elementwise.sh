#!/usr/bin/env bash
# The dense layers' element-wise kernels (q/k norm + RoPE, SwiGLU product, residual add + norm) on one H200:
# 1. bench_elementwise: each kernel against its PyTorch reference on the GPU (bitwise where it must be; exit 1
#    otherwise), each timed alone at 1-256 rows, and one Qwen3-8B-shaped layer graph-captured with the kernels and
#    with the references (time and launches);
# 2. the AR step of the Qwen3-8B-shaped lean target (bf16, W12), now with the bf16 step under the references too;
# 3. the engine's goal case at concurrency 16 with the forward split out, with the kernels and with the references
#    (`--elementwise torch`): what the kernels change in the speedup over batched AR.
# Expected time on one H200: ~6 min (nvcc ~20 s unless build/specdec_cuda_kernels.so is carried; part 1 ~60 s, most
# of it Triton compiling 3 dtypes x 4 shapes x 4 ops; part 2 ~50 s; part 3 ~100 s each: the 8B target built and
# planted ~15 s, the alone reference ~40 s, AR and spec at c=16 twice each). Caps: nvcc 90 s, part 1 110 s, part 2
# 80 s (budget 65 s), part 3 120 s twice (wall budget 90 s); sum of the caps 520 s. Logs go into one tarball so that
# the outputs stay within the eight files a call returns.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_elementwise.sh   (writes JSON, PNG, logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/elementwise_build.log"
timeout 110 python3 -m benchmarks.kernels.bench_elementwise --out "$OUT/elementwise.json" > "$OUT/elementwise.log" 2>&1
rc_ew=$?
timeout 80 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 65 --out "$OUT/ar_step_h200.json" > "$OUT/ar_step.log" 2>&1
rc_ar=$?
ENGINE=(--dtype bfloat16 --weights planted --new-tokens 128 --waves 3 --layouts packed --concurrency 16 --wall-budget-s 90 --split-forward)
timeout 120 python3 -m benchmarks.decode.bench_engine "${ENGINE[@]}" --out "$OUT/bench_engine.json" > "$OUT/bench_engine.log" 2>&1
rc_engine=$?
timeout 120 python3 -m benchmarks.decode.bench_engine "${ENGINE[@]}" --elementwise torch --out "$OUT/bench_engine_reference.json" > "$OUT/bench_engine_reference.log" 2>&1
rc_reference=$?
rm -f "$OUT/bench_engine_reference.png"
echo "=== engine with the references (exit $rc_reference) ==="
tail -n 4 "$OUT/bench_engine_reference.log"
echo "=== engine with the kernels (exit $rc_engine) ==="
tail -n 4 "$OUT/bench_engine.log"
echo "=== AR step (exit $rc_ar) ==="
tail -n 12 "$OUT/ar_step.log"
echo "=== element-wise kernels (exit $rc_ew) ==="
tail -n 30 "$OUT/elementwise.log"
(cd "$OUT" && tar czf logs.tar.gz ./*.log && rm -f ./*.log)
