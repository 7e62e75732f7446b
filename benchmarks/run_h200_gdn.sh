#!/usr/bin/env bash
# GDN tree kernels at the Qwen3.5-27B GDN head shapes: path, dense / blocked WY, snapshots, commit, conv,
# topology build.
# Expected time on one H200: ~4 min (compilation of every config included). Cap: 480 s, within one
# 10-minute call.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_gdn.sh   (writes JSON and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
timeout 480 python3 -m benchmarks.kernels.bench_gdn_tree --out "$OUT/gdn_tree_h200.json" 2>&1 | tee "$OUT/gdn_tree.log"
echo "=== summary ==="
tail -n 30 "$OUT/gdn_tree.log"
