#!/usr/bin/env bash
# Roofline of the decode-size GEMMs (M = 1, 2, 4, 8): cuBLAS bf16 / fp8, Triton W12 / Q, the CUDA skinny kernels,
# on the Qwen3-8B and Qwen3-32B linear shapes, against the copy bandwidth of the same run; then the AR step of the
# Qwen3-8B-shaped lean target, bf16 vs W12 weights (CUDA graphs; the one-token step and the 16-row verify step);
# then the CUDA kernels once under compute-sanitizer memcheck.
# Expected time on one H200: ~4.5 min (83 s measured on 2026-12-02 with the .so carried, before the v5 kernel: main
# part ~35 s of timing after ~10 s of torch start, AR step ~20 s, sanitizer ~25 s; each staged kernel (W12 v5, v6,
# v7, Q v2 and bf16 v2) adds a probe of ~15 s (torch start, four small shapes), ~8 s of timing and decode checks and
# ~3 s of sanitizer; nvcc adds 15-25 s when build/specdec_cuda_kernels.so was not carried). Caps: nvcc 90 s, each
# probe 30 s (five), main 112 s (budget 92 s: the W12 v4, v5, v6, v7, Q v2 and bf16 v2 kernels add a column each), AR
# step 65 s (budget 50 s) twice (W12 linears with the default kernel, v7, then with v1), sanitizer 60 s; no new case
# starts past a budget (JSON and summary are still written). Sum of the caps: ~7.6 min.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_roofline.sh   (writes JSON, PNG and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 90 "$OUT/roofline_build.log"
# Each staged kernel alone first: if it faults or does not finish, the main run and the sanitizer leave it out.
SKIP_BULK=()
for v in v5 v6 v7 q_v2 bf16_v2; do
  timeout 30 python3 -m benchmarks.kernels.bench_roofline --probe "$v" --out "$OUT/${v}_probe_h200.json" > "$OUT/${v}_probe.log" 2>&1
  rc_probe=$?
  tail -n 6 "$OUT/${v}_probe.log"
  if [ "$rc_probe" != 0 ]; then
    case "$v" in q_* | bf16_*) kernel="cuda_$v" ;; *) kernel="cuda_w12_$v" ;; esac
    echo "$v probe: exit $rc_probe (124 = timed out); $kernel left out of the main run and the sanitizer"
    SKIP_BULK+=(--skip-variant "$v")
  fi
done
timeout 112 python3 -m benchmarks.kernels.bench_roofline --budget-s 92 ${SKIP_BULK[@]+"${SKIP_BULK[@]}"} --out "$OUT/roofline_h200.json" 2>&1 | tee "$OUT/roofline.log"
rc=$?
timeout 65 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 50 --out "$OUT/ar_step_h200.json" 2>&1 | tee "$OUT/ar_step.log"
rc_ar=$?
# The same step with the register W12 kernel (v1) in every W12 linear (the default runs v7 where K % 32 == 0).
export SPECDEC_W12_CUDA_VARIANT=v1
timeout 65 python3 -m benchmarks.kernels.bench_roofline --ar-step --ar-budget-s 50 --out "$OUT/ar_step_v1_h200.json" 2>&1 | tee "$OUT/ar_step_v1.log"
unset SPECDEC_W12_CUDA_VARIANT
if command -v compute-sanitizer >/dev/null; then
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m benchmarks.kernels.bench_roofline --sanitize ${SKIP_BULK[@]+"${SKIP_BULK[@]}"} > "$OUT/roofline_sanitize.log" 2>&1
  echo "compute-sanitizer memcheck: exit $? (0 = clean, 9 = errors, 124 = timed out); tail:"
  tail -n 4 "$OUT/roofline_sanitize.log"
else
  echo "compute-sanitizer not found: memcheck not run"
fi
echo "=== AR step (exit $rc_ar) ==="
tail -n 7 "$OUT/ar_step.log"
echo "=== AR step, W12 kernel v1 ==="
tail -n 4 "$OUT/ar_step_v1.log"
echo "=== summary (main run exit $rc) ==="
tail -n 15 "$OUT/roofline.log"
