#!/usr/bin/env bash
# A kernel setting's effect on the two-level verifier's passes of the Qwen3-8B shape (random weights, the W12 target
# with its packed Q view): the exact pass and the Q-view pass of each of ROWS rows (default 1,8,16), captured in graphs
# and chained as a decode step runs them, under each of VALUES of the environment variable VAR in turn, three turns in
# one process (bench_two_level --alternate: each turn's graphs captured again under its value), e.g.
# SPECDEC_Q_CUDA_VARIANT v5,v2,v4: whether the Q view's row-tile rule, set from cold isolated calls, holds in the pass
# (as the W12 one did not, benchmarks/NOTES.md, "The W12 kernel family in the 16-row verify step: measured").
# Expected time on one H200: ~1.5 min (the 8B target built, encoded and its graphs captured ~50 s, each turn a capture
# and the timed passes ~3 s a value; torch start ~10 s). Cap: 150 s, plus the build (60 s; skipped when build/ was
# carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_pass_alternate.sh VAR VALUES [ROWS]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
if [ $# -lt 2 ]; then
  echo "usage: bash benchmarks/run_h200_pass_alternate.sh VAR VALUES [ROWS]  (e.g. SPECDEC_Q_CUDA_VARIANT v5,v2,v4)" >&2
  exit 2
fi
VAR=$1 VALUES=$2 ROWS=${3:-1,8,16}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 60 "$OUT/pass_alternate_build.log"
timeout 150 python3 -m benchmarks.decode.bench_two_level --variants w12-packed --profiles none --reps 10 \
  --pass-rows "$ROWS" --alternate "$VAR=$VALUES" --alternate-rounds 3 --out "$OUT/pass_alternate.json" \
  > "$OUT/pass_alternate.log" 2>&1
echo "two-level passes, $VAR in turn ($VALUES), rows $ROWS: exit $?"
tail -n 12 "$OUT/pass_alternate.log"
