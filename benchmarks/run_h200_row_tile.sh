#!/usr/bin/env bash
# The tensor-map GEMMs in CTAs of one 16-row tile over the whole of K (W12 v9, Q v4, bf16 v4) beside their split-K and
# persistent forms: probes of the three and of the default bf16 kernel (v3; fp32 product, 1-16 tokens, a crowded call
# of 1,536 row tiles at 16 tokens, three captured calls equal to the eager one); the fixed cost of cuBLAS, the row
# tiles, the defaults and the kernels they fall back to, cold and warm on the model shapes with the read floor of every
# byte count and the cold sweep; the roofline's one-hot decode checks (bit for bit against the reference decode) of every
# tensor-map kernel but the split-K ones and the 8B shapes timed; the AR step (bf16 and W12, one token and the 16-row
# verify) with the kernels that were the defaults before the row tiles (W12 v8, bf16 v3), then with the defaults (W12
# v10, bf16 v5: the row tiles where rows_pay says); compute-sanitizer
# memcheck over every kernel. Writes the JSON of the fixed cost, the roofline and both AR steps to $OUT, the logs,
# probes and plots in one row_tile_logs.tgz.
# Expected time on one H200: ~4 min (measured 175 s with three probes; torch start ~8 s a process; probes ~13 s each;
# fixed cost ~75 s; roofline ~35 s; AR steps ~25 s each; sanitizer ~25 s; nvcc 15-25 s when
# build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 60 s, probes 25 s each (the first on a fresh machine ran past 15 s), fixed cost 130 s (budget 100 s),
# roofline 70 s (budget 25 s), AR steps 65 s each (budget 45 s), sanitizer 70 s: at most ~9.3 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_row_tile.sh
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
LOGS=$(mktemp -d)
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$LOGS/build.log"
export SPECDEC_PDL=1
failed=0
for v in bf16_v3 v9 q_v4 bf16_v4; do
  timeout 25 python3 -m benchmarks.kernels.bench_roofline --probe "$v" --out "$LOGS/${v}_probe.json" > "$LOGS/${v}_probe.log" 2>&1
  rc=$?
  echo "$v probe: exit $rc ($(tail -n 1 "$LOGS/${v}_probe.log"))"
  [ "$rc" -eq 0 ] || failed=1
done
if [ "$failed" -ne 0 ]; then  # a kernel that is wrong or hangs: the logs, and none of the timed runs
  tail -n 30 "$LOGS"/*_probe.log
  tar -czf "$LOGS/../row_tile_logs.tgz" -C "$LOGS" . && mv "$LOGS/../row_tile_logs.tgz" "$OUT/"
  exit 1
fi
timeout 130 python3 -m benchmarks.kernels.bench_fixed_cost --budget-s 100 --out "$OUT/fixed_cost_row_tile.json" > "$LOGS/fixed_cost.log" 2>&1
echo "fixed cost: exit $?"
SKIP="--skip-variant v5 --skip-variant v6 --skip-variant v7 --skip-variant q_v2 --skip-variant bf16_v2"
# shellcheck disable=SC2086
timeout 70 python3 -m benchmarks.kernels.bench_roofline --budget-s 25 --models qwen3-8b $SKIP \
  --out "$OUT/roofline_row_tile.json" > "$LOGS/roofline.log" 2>&1
echo "roofline: exit $? ($(grep -c '^qwen3' "$LOGS/roofline.log") table rows)"
export SPECDEC_W12_CUDA_VARIANT=v8 SPECDEC_BF16_CUDA_VARIANT=v3
timeout 65 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 45 --out "$OUT/ar_step_v8.json" > "$LOGS/ar_step_v8.log" 2>&1
echo "AR step, W12 v8 / bf16 v3: exit $?"
unset SPECDEC_W12_CUDA_VARIANT SPECDEC_BF16_CUDA_VARIANT
timeout 65 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 45 --out "$OUT/ar_step_default.json" > "$LOGS/ar_step_default.log" 2>&1
echo "AR step, defaults (W12 v10 / bf16 v5): exit $?"
if command -v compute-sanitizer >/dev/null; then
  # shellcheck disable=SC2086
  timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --sanitize \
    $SKIP > "$LOGS/sanitize.log" 2>&1
  echo "compute-sanitizer memcheck: exit $? (0 = clean, 9 = errors, 124 = timed out); $(tail -n 1 "$LOGS/sanitize.log")"
fi
mv "$OUT"/*.png "$LOGS/" 2>/dev/null
tar -czf "$LOGS/../row_tile_logs.tgz" -C "$LOGS" . && mv "$LOGS/../row_tile_logs.tgz" "$OUT/"
echo "=== roofline: decode-check lines with a False: $(grep -E '^decode check' "$LOGS/roofline.log" | grep -c False) of $(grep -cE '^decode check' "$LOGS/roofline.log") ==="
grep -E '^decode check' "$LOGS/roofline.log" | grep False | head -n 4
echo "=== fixed cost ==="
grep -E "^(cublas|cuda|read)_" "$LOGS/fixed_cost.log" | head -n 40
for v in v8 default; do
  echo "=== AR step, $v ==="
  grep -E "^AR step|^verify step" "$LOGS/ar_step_$v.log"
done
