#!/usr/bin/env bash
# Runs several H200 runners back to back, each writing into its own folder, and packs all of their results
# into $OUT/results.tgz (one file back, whatever the runners write). Prints each runner's exit code, wall
# time and the tail of its log.
# Time: the sum of the runners' caps (each runner's header states its own).
# Usage (repo root, on the GPU machine):
#   bash benchmarks/h200_many.sh run_h200_ssd.sh:sim run_h200_engine.sh    (RUNNER[:ARGUMENT] ...)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
work=$(mktemp -d)
for item in "$@"; do
  runner=${item%%:*}
  arg=""
  [[ $item == *:* ]] && arg=${item#*:}
  name=${runner%.sh}${arg:+_$arg}
  mkdir -p "$work/$name"
  echo "=== $name (start $(date -u +%T))"
  start=$SECONDS
  # shellcheck disable=SC2086
  OUT="$work/$name" bash "benchmarks/$runner" $arg > "$work/$name/runner.log" 2>&1
  rc=$?
  echo "--- $name: exit $rc, $((SECONDS - start)) s"
  tail -n 30 "$work/$name/runner.log"
  tar czf "$OUT/results.tgz" -C "$work" .
done
