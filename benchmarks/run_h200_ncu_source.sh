#!/usr/bin/env bash
# Where a weight-streaming kernel's warps wait, instruction by instruction: Nsight Compute's warp-state sampling
# (SourceCounters, WarpStateStats) of one kernel on some cases, saved as a report, then exported as the SASS source
# page (each instruction's samples by stall reason) and the details page, both as CSV, which
# `benchmarks/kernels/ncu_source.py` sums by opcode and stall reason (here, or later on any machine). Default: the W12
# row tiles (cuda_w12_v9, the library's W12 kernel wherever K <= 8192) on the 8B gate_up at 8 and 16 tokens (what the
# 16-token consumers wait on). SPECDEC_CUDA_KERNELS, where set, names the library profiled.
# Expected time on one H200: ~1.5 min (torch start and planted weights ~20 s, two profiled launches with the sampling
# sections ~20-40 s, the exports ~10 s each; nvcc ~20 s when build/specdec_cuda_kernels.so was not carried).
# Caps: nvcc 40 s; ncu 90 s (the launch program's own budget, 40 s); each export 40 s; the parse 30 s.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_ncu_source.sh [KERNEL] [CASES] [TOKENS]
#   e.g. bash benchmarks/run_h200_ncu_source.sh cuda_w12_v9 qwen3-8b/gate_up 8,16
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
KERNEL=${1:-cuda_w12_v9}
CASES=${2:-qwen3-8b/gate_up}
TOKENS=${3:-8,16}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 40 "$OUT/ncu_source_build.log"
command -v ncu >/dev/null || { echo "ncu not found on the PATH" >&2; exit 1; }
timeout 10 ncu --version | tail -n 1
REPORT="$OUT/ncu_source"
rm -f "$REPORT.ncu-rep"
NCU_ARGS=(--clock-control none --profile-from-start off --nvtx --section SourceCounters --section WarpStateStats --import-source no -o "$REPORT")
timeout 90 ncu "${NCU_ARGS[@]}" python3 -m benchmarks.kernels.profile_ncu --launch --only-kernel "$KERNEL" --cases "$CASES" \
  --ms "$TOKENS" --budget-s 40 --out "$OUT/ncu_source_launch.json" > "$OUT/ncu_source_launch.log" 2>&1
echo "ncu (report): exit $?"
[ -f "$REPORT.ncu-rep" ] || { tail -n 20 "$OUT/ncu_source_launch.log"; exit 1; }
# The source page as SASS with each instruction's sampling columns; ncu versions name the option differently, so the
# first form that gives rows is kept.
for form in "--page source --print-source sass" "--page source --print-source=sass" "--page source"; do
  # shellcheck disable=SC2086
  timeout 40 ncu --import "$REPORT.ncu-rep" $form --csv > "$OUT/ncu_source_sass.csv" 2> "$OUT/ncu_source_sass.err"
  rc=$?
  echo "export ($form): exit $rc, $(wc -l < "$OUT/ncu_source_sass.csv") lines"
  [ "$rc" = 0 ] && [ "$(wc -l < "$OUT/ncu_source_sass.csv")" -gt 10 ] && break
  head -n 5 "$OUT/ncu_source_sass.err"
done
timeout 40 ncu --import "$REPORT.ncu-rep" --page details --csv --print-units base > "$OUT/ncu_source_details.csv" 2>&1
echo "export (details): exit $?"
timeout 30 python3 -m benchmarks.kernels.ncu_source --sass "$OUT/ncu_source_sass.csv" --details "$OUT/ncu_source_details.csv" \
  --launch "$OUT/ncu_source_launch.json" --out "$OUT/ncu_source.json" > "$OUT/ncu_source_parse.log" 2>&1
echo "parse: exit $?"
tail -n 60 "$OUT/ncu_source_parse.log"
