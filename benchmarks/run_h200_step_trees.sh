#!/usr/bin/env bash
# The lean 8B target's decode steps from two trees of the package, alternated: the AR-step benchmark (bench_roofline
# --ar-step: the bf16, skinny-bf16 and W12 one-token steps and their ROWS-row verify steps) run from BEFORE_DIR with
# the library BEFORE_SO, then from this tree with its own, twice each, so that a change to the Python side (which a
# build switch cannot A/B) is timed against the tree before it on one machine. BEFORE_DIR holds an earlier commit's
# specdec/ (without its assets) and benchmarks/, made on the CPU machine with
#   mkdir -p .before && git archive COMMIT specdec benchmarks/__init__.py benchmarks/common.py benchmarks/kernels \
#     ':(exclude)specdec/assets' | tar x -C .before
# (`.before` ignored through .git/info/exclude and carried); BEFORE_SO may be this tree's library, to time the Python
# change alone. BEFORE_COMMIT, if set, is the commit the before processes' provenance names (else this tree's).
# Expected time on one H200: ~2.5 min (four AR-step processes of ~30 s each, torch start ~10 s each; an H100 ran one in
# ~25 s). Caps: 70 s a process, plus the build (90 s; skipped when build/ was carried).
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_step_trees.sh BEFORE_DIR BEFORE_SO [ROWS]
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=$(mkdir -p "${OUT:-.}" && cd "${OUT:-.}" && pwd)
source benchmarks/cuda_kernels.sh  # unpacks a carried build/libraries.tar.xz: BEFORE_SO may be in it
build_cuda_kernels 90 "$OUT/step_trees_build.log"  # this tree's library, which BEFORE_SO may name
if [ $# -lt 2 ] || [ ! -d "${1:-}/specdec" ] || [ ! -d "${1:-}/benchmarks/kernels" ] || [ ! -f "${2:-}" ]; then
  echo "usage: bash benchmarks/run_h200_step_trees.sh BEFORE_DIR BEFORE_SO [ROWS]" >&2
  echo "  BEFORE_DIR: a folder with specdec/ and benchmarks/kernels/ (got '${1:-}'); BEFORE_SO: a built library (got '${2:-}')" >&2
  exit 2
fi
REPO=$(pwd)
BEFORE_DIR=$(cd "$1" && pwd) BEFORE_SO=$(cd "$(dirname "$2")" && pwd)/$(basename "$2") ROWS=${3:-16}
AFTER_SO=${SPECDEC_CUDA_KERNELS:-build/specdec_cuda_kernels.so}
case $AFTER_SO in /*) ;; *) AFTER_SO=$REPO/$AFTER_SO ;; esac  # absolute: the before processes run elsewhere
export SPECDEC_CUDA_KERNELS=$AFTER_SO
for round in 1 2; do
  (
    cd "$BEFORE_DIR" || exit 2
    export SPECDEC_CUDA_KERNELS=$BEFORE_SO
    if [ -n "${BEFORE_COMMIT:-}" ]; then export SPECDEC_GIT_COMMIT=$BEFORE_COMMIT; fi
    timeout 70 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows "$ROWS" --ar-budget-s 50 \
      --out "$OUT/step_trees_before$round.json" > "$OUT/step_trees_before$round.log" 2>&1
  )
  echo "before tree, round $round: exit $?"
  timeout 70 python3 -m benchmarks.kernels.bench_roofline --ar-step --verify-rows "$ROWS" --ar-budget-s 50 \
    --out "$OUT/step_trees_after$round.json" > "$OUT/step_trees_after$round.log" 2>&1
  echo "this tree, round $round: exit $?"
done
for run in before1 after1 before2 after2; do
  echo "=== $run ==="
  grep -E "^(AR step|verify step)" "$OUT/step_trees_$run.log"
done
