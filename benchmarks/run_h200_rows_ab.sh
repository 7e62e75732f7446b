#!/usr/bin/env bash
# The 1-16 token row-tile kernels (tma_rows_kernel) of the shipped library against libraries built with extra nvcc
# FLAGS (skinny_gemm.cu's -D switches), in one call: e.g. -DSPECDEC_WIDE_ABLATE=64 (their ring without x's box:
# products wrong by design, timed unchecked; 128 the same of the 64-row tensor-map kernels that the calls the row
# tiles do not take run) beside a row-tile change built behind a switch of its own. A library
# that is not an ablation is probed first (bench_roofline --probe of the row-tile W12 / Q / bf16
# kernels: the fp32 product at 1-16 tokens, a crowded call, a tall shape of an odd count of row tiles) and run under
# compute-sanitizer memcheck (bench_roofline --sanitize). Then the 8B linears at 1, 8 and 16 tokens (bench_fixed_cost:
# cuBLAS bf16, W12 v10, Q v5, bf16 v5, cold, no programmatic launch; every product checked against float32 but an
# ablation's) with each library in turn, twice (shipped, each flagged one, shipped, each flagged one); last the lean 8B
# target's AR step and 16-row verify step (bench_roofline --ar-step: the W12 verify-16 goal) with the shipped library
# and each one not an ablation, a process each.
# Expected time on one H200: ~1.5 min a library and ~35 s an AR step (a process ~30 s: torch start ~10 s, the 8B
# shapes' encodings and cold copies; probes ~13 s each and memcheck ~25 s a library not an ablation; nvcc ~45 s a
# library not carried in build/): ~5.5 min for a change and the ablation together.
# MODELS=qwen3-8b,qwen3-32b adds the 32B linears to every timing (~50 s a library more: ~8 min for a change and an
# ablation; 70 s of cases a timing instead of 40).
# Caps: 100 s a timing, 60 s an AR step, 25 s a probe, 70 s memcheck, 90 s a build; carry build/specdec_cuda_kernels.so and
# build/rows_ab_<switch>.so (<switch>: FLAGS' -DSPECDEC_ part lower-cased, = and spaces as _, e.g.
# build/rows_ab_wide_ablate_64.so) built with `-Xfatbin -compress-all`, ~2 MB each, to skip the builds.
# ROUNDS (default 2) sets the rounds of the linears' timings (0: none) and STEP_ROUNDS (default 1) the rounds of the
# AR steps (shipped, then each library not an ablation, each round; past one round the JSON and log names end in
# _<round>): ROUNDS=0 STEP_ROUNDS=2 with one switch is the short form, ~3.5 min (probes and memcheck ~1 min, four AR
# steps ~40 s each), the step goal with the spread between processes seen twice.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_rows_ab.sh FLAGS [FLAGS ...]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
MODELS=${MODELS:-qwen3-8b}
ROUNDS=${ROUNDS:-2}
STEP_ROUNDS=${STEP_ROUNDS:-1}
case $ROUNDS in 0 | 1 | 2 | 3) ;; *) echo "ROUNDS: expected 0 to 3 rounds of timings, got $ROUNDS" >&2; exit 2 ;; esac
case $STEP_ROUNDS in 1 | 2 | 3) ;; *) echo "STEP_ROUNDS: expected 1 to 3 rounds of AR steps, got $STEP_ROUNDS" >&2; exit 2 ;; esac
case $MODELS in
  qwen3-8b) TIMING_BUDGET=40 ;;
  qwen3-8b,qwen3-32b | qwen3-32b) TIMING_BUDGET=70 ;;
  *) echo "MODELS: expected qwen3-8b, qwen3-32b or qwen3-8b,qwen3-32b, got $MODELS" >&2; exit 2 ;;
esac
if [ $# -lt 1 ]; then
  echo 'usage: bash benchmarks/run_h200_rows_ab.sh FLAGS [FLAGS ...]  (e.g. "-DSPECDEC_WIDE_ABLATE=64")' >&2
  exit 2
fi
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/rows_ab_build.log"
labels=()
for flags in "$@"; do
  case $flags in
    -D*) ;;
    *) echo "FLAGS: expected nvcc -D switches of skinny_gemm.cu, got $flags" >&2; exit 2 ;;
  esac
  label=$(echo "$flags" | sed -e 's/-DSPECDEC_//g' -e 's/[= ]/_/g' | tr 'A-Z' 'a-z')
  labels+=("$label")
  build_cuda_library_with "$flags" "build/rows_ab_$label.so" 90 "$OUT/rows_ab_build_$label.log"
  echo "$flags" > "$OUT/rows_ab_flags_$label.txt"
done
unset SPECDEC_W12_CUDA_VARIANT SPECDEC_Q_CUDA_VARIANT SPECDEC_BF16_CUDA_VARIANT
export SPECDEC_PDL=0
for label in "${labels[@]}"; do
  case $label in *ablate*) continue ;; esac
  export SPECDEC_CUDA_KERNELS=build/rows_ab_$label.so
  for v in v9 q_v4 bf16_v4; do
    timeout 25 python3 -m benchmarks.kernels.bench_roofline --probe "$v" --out "$OUT/rows_ab_${label}_${v}_probe.json" \
      > "$OUT/rows_ab_${label}_${v}_probe.log" 2>&1
    echo "$label, $v probe: exit $? ($(tail -n 1 "$OUT/rows_ab_${label}_${v}_probe.log"))"
  done
  timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --sanitize \
    --skip-variant v5 --skip-variant v6 --skip-variant v7 --skip-variant q_v2 --skip-variant bf16_v2 \
    > "$OUT/rows_ab_${label}_memcheck.log" 2>&1
  echo "$label, memcheck: exit $? (0 clean, 9 errors, 124 timed out); $(tail -n 1 "$OUT/rows_ab_${label}_memcheck.log")"
done
passes=()
for round in $(seq 1 "$ROUNDS"); do
  passes+=("shipped$round")
  for label in "${labels[@]}"; do passes+=("$label$round"); done
done
for pass in "${passes[@]}"; do
  case $pass in
    shipped*) export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so ;;
    *) export SPECDEC_CUDA_KERNELS=build/rows_ab_${pass%[123]}.so ;;
  esac
  timeout 100 python3 -m benchmarks.kernels.bench_fixed_cost --models "$MODELS" --no-read-floor --budget-s "$TIMING_BUDGET" \
    --kernels cublas_bf16,cuda_w12_v10,cuda_q_v5,cuda_bf16_v5 --out "$OUT/rows_ab_$pass.json" > "$OUT/rows_ab_$pass.log" 2>&1
  echo "$MODELS linears at 1-16 tokens, $pass: exit $?"
done
unset SPECDEC_PDL
steps=(shipped)
for label in "${labels[@]}"; do
  case $label in *ablate*) ;; *) steps+=("$label") ;; esac
done
step_runs=()
for round in $(seq 1 "$STEP_ROUNDS"); do
  for lib in "${steps[@]}"; do
    if [ "$STEP_ROUNDS" = 1 ]; then step_runs+=("$lib"); else step_runs+=("${lib}_$round"); fi
  done
done
for run in "${step_runs[@]}"; do
  lib=$run
  [ "$STEP_ROUNDS" = 1 ] || lib=${run%_[123]}
  case $lib in shipped) export SPECDEC_CUDA_KERNELS=build/specdec_cuda_kernels.so ;; *) export SPECDEC_CUDA_KERNELS=build/rows_ab_$lib.so ;; esac
  timeout 60 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 40 --out "$OUT/rows_ab_ar_step_$run.json" \
    > "$OUT/rows_ab_ar_step_$run.log" 2>&1
  echo "AR step and 16-row verify step, $run: exit $?"
done
unset SPECDEC_CUDA_KERNELS
for pass in "${passes[@]}"; do
  echo "=== $pass ==="
  grep -E "^qwen3-(8b|32b) [a-z_]+ +[0-9]+ +cuda_" "$OUT/rows_ab_$pass.log"
done
for run in "${step_runs[@]}"; do
  echo "=== AR step, $run ==="
  grep -E "^AR step (bf16|w12):|^verify step" "$OUT/rows_ab_ar_step_$run.log"
done
