#!/usr/bin/env bash
# Hardware counters (Nsight Compute) of the decode-size weight-streaming GEMMs: cuBLAS bf16 and the CUDA bf16 / W12 /
# W12 streaming (v3) / W12 split-K (v4) / W12 bulk-copy (v5: one producer warp, v6: four) / W12 TMA (v7) / Q skinny /
# Q TMA (v2) / bf16 TMA (v2) kernels on the Qwen3-8B o, qkv, lm_head, gate_up, down and Qwen3-32B down shapes at M = 1
# and 8 (132 NVTX ranges, one profiled launch each), parsed into a per-kernel table with a limiter verdict.
# Expected time on one H200: ~3.5 min (50 s measured on 2026-12-02 with the 60 ranges before v4; a probe of each
# staged kernel (W12 v5, v6, v7, Q v2 and bf16 v2) ~15 s (torch start, four small shapes); torch start ~10 s, planted weights
# and W12 conversion ~10 s, 120-134 kernels profiled with the sections below, ~10-20 replay passes each, ~45-70 s;
# parse ~5 s; nvcc adds 15-25 s when build/specdec_cuda_kernels.so was not carried). Caps: nvcc 40 s; each probe 30 s
# (five); ncu --version 10 s; ncu 78 s (the launch program's own budget, 40 s, stops starting new shapes so ncu can
# still print its CSV); one retry with the basic section set, 40 s, only when the first attempt failed within 20 s
# (an option this ncu does not know); then either the parse, 20 s, or, without a profile, the same launches timed
# with CUDA events, 30 s: at most 40 + 5 x 30 + 10 + 78 + 30 = 308 s on any path.
# `bf16_16`: cuBLAS bf16 and the bf16 tensor-map kernels (split-K v2, persistent v3) on the Qwen3-32B qkv at 1, 8 and 16
# tokens (9 ranges, no probes, with the shared-memory tables as well; ~1 min).
# `wide`: cuBLAS bf16 and the wide W12 kernel in its one-set and pipelined loops on the 8B o and qkv at 16-128 rows (24
# ranges, no probes; ~1.5 min).
# `rows_16`: the W12 and Q row-tile kernels (v9, q_v4) on the 8B gate_up and qkv at 1, 8 and 16 tokens (12 ranges, no
# probes, with the memory tables and the L2's bytes and throughput; ~1 min): whether x's L2 reads hold the 16-token calls.
# Usage (repo root, on the GPU machine): bash benchmarks/run_h200_ncu.sh [w12 | w12_16 | bf16_16 | wide | rows_16]   (ROOFLINE=roofline.json to take its copy
# bandwidth; writes ncu_raw.csv, ncu_launch.json, ncu_profile.json and logs to $OUT)
set -u -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
source benchmarks/cuda_kernels.sh
build_cuda_kernels 40 "$OUT/ncu_build.log"
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active,launch__registers_per_thread,launch__waves_per_multiprocessor
# Only the calls between cudaProfilerStart/Stop (one per NVTX range) are profiled; kernels carry their range's name.
NCU_COMMON=(--clock-control none --profile-from-start off --nvtx --print-nvtx-rename kernel --csv --page raw --print-units base)
NCU_SECTIONS=(--section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats --section ComputeWorkloadAnalysis --metrics "$METRICS")
NCU_BASIC=(--set basic --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum)

profiled() {  # at least one kernel row (a quoted numeric ID) in the CSV
  grep -q '^"[0-9]' "$OUT/ncu_raw.csv" 2>/dev/null
}
show_ncu_errors() {
  echo "ncu gave no profile ($1). Its errors (LibraryNotLoaded: ncu cannot load its injection library on this runtime):"
  grep -h -E "==ERROR==|LibraryNotLoaded|ERR_NVGPUCTRPERM|Error|error" "$OUT/ncu_raw.csv" "$OUT/ncu_launch.log" 2>/dev/null | head -n 15
  echo "--- tail of the launch log ---"
  tail -n 5 "$OUT/ncu_launch.log" 2>/dev/null
}

# `run_h200_ncu.sh w12`: only the tensor-map kernels (W12 v7, Q v2, bf16 v2) on the 8B down, o and lm_head shapes
# (18 ranges, no probes: the roofline runner probes them), to compare the W12 stage with the Q and bf16 ones.
# `run_h200_ncu.sh w12_16`: W12 v7 and Q v2 on 8B down and o at 1, 8 and 16 tokens (12 ranges): what the second MMA
# n-tile costs each consumer.
SELECT=()
if [ "${1:-}" = w12 ]; then
  SELECT=(--cases qwen3-8b/down,qwen3-8b/o,qwen3-8b/lm_head --only-kernel cuda_w12_v7 --only-kernel cuda_q_v2 --only-kernel cuda_bf16_v2)
elif [ "${1:-}" = w12_16 ]; then
  SELECT=(--cases qwen3-8b/down,qwen3-8b/o --only-kernel cuda_w12_v7 --only-kernel cuda_q_v2 --ms 1,8,16)
elif [ "${1:-}" = bf16_16 ]; then
  # what eight and sixteen tokens add to the persistent bf16 kernel's 32B qkv (NOTES.md, "x resident, x's box in the
  # tensor-map kernels and the consumers' bank conflicts: measured"): neither x's box nor the bank conflicts
  SELECT=(--cases qwen3-32b/qkv --only-kernel cublas_bf16 --only-kernel cuda_bf16_v2 --only-kernel cuda_bf16_v3 --ms 1,8,16)
  NCU_SECTIONS+=(--section MemoryWorkloadAnalysis_Tables)
elif [ "${1:-}" = rows_16 ]; then
  # what 16 tokens add to the row tiles (NOTES.md, "The attention in programs of 16 rows, and x before the weights:
  # measured"): x's reads from the L2 (1.33x the W12 weights' bytes at 16 tokens) against the L2's throughput
  SELECT=(--cases qwen3-8b/gate_up,qwen3-8b/qkv --only-kernel cuda_w12_v9 --only-kernel cuda_q_v4 --ms 1,8,16)
  METRICS+=,lts__t_bytes.sum,lts__t_sectors_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct
  NCU_SECTIONS=(--section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --metrics "$METRICS")
elif [ "${1:-}" = wide ]; then
  # what holds the wide kernel's time growing ~10 us an n-tile (tensor pipe, issue, or the wait on its MMAs), and
  # what the pipelined loop changes
  SELECT=(--cases qwen3-8b/o,qwen3-8b/qkv --only-kernel cublas_bf16 --only-kernel cuda_w12_wide --only-kernel cuda_w12_wide_pipe --ms 16,32,64,128)
fi
# Each staged kernel alone first: if it faults or does not finish, the launches leave it out.
SKIP_BULK=()
for v in v5 v6 v7 q_v2 bf16_v2; do
  if [ ${#SELECT[@]} -gt 0 ]; then continue; fi
  timeout 30 python3 -m benchmarks.kernels.bench_roofline --probe "$v" --out "$OUT/ncu_${v}_probe.json" > "$OUT/ncu_${v}_probe.log" 2>&1
  rc_probe=$?
  if [ "$rc_probe" != 0 ]; then
    case "$v" in q_* | bf16_*) kernel="cuda_$v" ;; *) kernel="cuda_w12_$v" ;; esac
    echo "$v probe: exit $rc_probe (124 = timed out); $kernel left out of the profile"
    tail -n 6 "$OUT/ncu_${v}_probe.log"
    SKIP_BULK+=(--skip-kernel "$kernel")
  fi
done
ncu_ok=0
rm -f "$OUT/ncu_raw.csv" "$OUT/ncu_launch.json"
if command -v ncu >/dev/null; then
  timeout 10 ncu --version | tail -n 1
  t0=$SECONDS
  timeout 78 ncu "${NCU_COMMON[@]}" "${NCU_SECTIONS[@]}" --log-file "$OUT/ncu_raw.csv" python3 -m benchmarks.kernels.profile_ncu --launch ${SKIP_BULK[@]+"${SKIP_BULK[@]}"} ${SELECT[@]+"${SELECT[@]}"} --budget-s 40 --out "$OUT/ncu_launch.json" > "$OUT/ncu_launch.log" 2>&1
  rc=$?
  if profiled; then
    ncu_ok=1
  else
    show_ncu_errors "exit $rc after $((SECONDS - t0)) s, sections ${NCU_SECTIONS[*]}"
    if [ $((SECONDS - t0)) -lt 20 ]; then
      echo "retrying with --set basic"
      rm -f "$OUT/ncu_raw.csv"
      timeout 40 ncu "${NCU_COMMON[@]}" "${NCU_BASIC[@]}" --log-file "$OUT/ncu_raw.csv" python3 -m benchmarks.kernels.profile_ncu --launch ${SKIP_BULK[@]+"${SKIP_BULK[@]}"} ${SELECT[@]+"${SELECT[@]}"} --budget-s 20 --out "$OUT/ncu_launch.json" > "$OUT/ncu_launch.log" 2>&1
      rc=$?
      if profiled; then ncu_ok=1; else show_ncu_errors "retry, exit $rc"; fi
    fi
  fi
else
  echo "ncu not found on the PATH: no counters"
fi

if [ "$ncu_ok" = 1 ]; then
  tail -n 2 "$OUT/ncu_launch.log"
  MANIFEST=()  # the launch program's JSON (weight bytes, copy bandwidth), when it got as far as writing it
  if [ -f "$OUT/ncu_launch.json" ]; then MANIFEST=(--manifest "$OUT/ncu_launch.json"); fi
  timeout 20 python3 -m benchmarks.kernels.profile_ncu --parse "$OUT/ncu_raw.csv" ${MANIFEST[@]+"${MANIFEST[@]}"} ${ROOFLINE:+--roofline "$ROOFLINE"} --out "$OUT/ncu_profile.json" > "$OUT/ncu_parse.log" 2>&1
  echo "=== ncu profile (parse exit $?) ==="
  tail -n 100 "$OUT/ncu_parse.log"
else
  echo "=== no counters: the same launches timed with CUDA events instead ==="
  timeout 30 python3 -m benchmarks.kernels.profile_ncu --launch ${SKIP_BULK[@]+"${SKIP_BULK[@]}"} ${SELECT[@]+"${SELECT[@]}"} --time-reps 10 --budget-s 18 --out "$OUT/ncu_fallback_timing.json" > "$OUT/ncu_fallback.log" 2>&1
  echo "=== CUDA-event timing (exit $?) ==="
  tail -n 100 "$OUT/ncu_fallback.log"
fi
