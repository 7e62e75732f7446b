"""Hardware counters of the decode-size weight-streaming GEMMs under Nsight Compute: which limit stops each kernel.

Two roles.

``--launch`` is the program ``ncu`` runs. It builds the planted weights of ``bench_roofline`` for a fixed case
list (Qwen3-8B o, qkv, lm_head, gate_up, down and the Qwen3-32B down, M = 1 and 8) and launches, per case and
kernel (cuBLAS bf16 ``F.linear``, the CUDA ``specdec::skinny_gemm_bf16``, ``w12_gemm_small_m`` and
``q_gemm_small_m`` with their register kernels (``SPECDEC_BF16_CUDA_VARIANT=v1``, ``SPECDEC_W12_CUDA_VARIANT=v1``,
``SPECDEC_Q_CUDA_VARIANT=v1``), ``w12_gemm_small_m`` with ``SPECDEC_W12_CUDA_VARIANT=v3`` ... ``v8`` as
``cuda_w12_v3`` ... ``cuda_w12_v8``, ``q_gemm_small_m`` with ``SPECDEC_Q_CUDA_VARIANT=v2`` / ``v3`` as ``cuda_q_v2`` /
``cuda_q_v3`` and ``skinny_gemm_bf16`` with ``SPECDEC_BF16_CUDA_VARIANT=v2`` / ``v3`` as ``cuda_bf16_v2`` /
``cuda_bf16_v3``; the row tiles W12 v9, Q and bf16 ``v4`` likewise), one untimed warm call, then exactly one call between ``cudaProfilerStart`` and
``cudaProfilerStop`` inside an NVTX range named ``<kernel>|<shape>|M=<m>`` (168 ranges). Run under
``ncu --profile-from-start off --nvtx --print-nvtx-rename kernel``, only those calls are profiled and each
profiled kernel carries its range's name. It writes a manifest (``--out``: one entry per range, in launch
order, with the weight bytes the kernel must read and the copy bandwidth of the same process). With
``--time-reps N`` it also times every case with CUDA events (``bench_roofline.time_per_call``: a CUDA graph of
calls, median of replays): the fallback when ``ncu`` cannot profile.

``--parse CSV`` (any machine) reads ncu's raw page as CSV, the output of
``ncu --csv --page raw --print-units base --log-file CSV ...`` (or, the same layout,
``ncu --import rep.ncu-rep --csv --page raw --print-units base --print-nvtx-rename kernel > CSV``): a header
row of column and metric names, a row of units, one row per profiled kernel; lines of the tool's own log
(``==PROF==``, ``==WARNING==``) around it are skipped, values may carry thousands separators, units with a
decimal prefix (``usecond``, ``Mbyte``) are scaled to seconds and bytes. Per range (kernels of one range are
added: durations and bytes summed, the rates of the longest kernel kept) it writes JSON and prints a table:
duration, DRAM bytes read, achieved DRAM bandwidth (read + written bytes / duration) and its fraction of the
copy bandwidth, DRAM and SM throughput (% of peak), achieved occupancy, issue-slot use and IPC, registers per
thread, waves per SM, the top three warp-stall reasons with their share of all stall cycles, and a verdict:

==========================  ===================================================================================
``dram-bound``              DRAM throughput >= ``DRAM_BOUND_PCT`` (80) % of peak (the copy reaches ~88 %)
``issue-bound``             issue slots busy >= ``ISSUE_BOUND_PCT`` (70) % of active cycles
``launch/tail-bound``       duration < ``LAUNCH_BOUND_S`` (10 us), or fewer than ``MIN_WAVES`` (1) waves
``latency-bound``           DRAM < ``LATENCY_DRAM_PCT`` (60) %, the largest stall is a wait on memory or a
                            dependency (``LATENCY_STALLS``) and fewer than ``LOW_ELIGIBLE_WARPS`` (1) warps per
                            scheduler are eligible per cycle
``mixed``                   none of the above (e.g. DRAM at 60-80 % without an issue or latency signature)
``unknown``                 a metric a rule needs is missing
==========================  ===================================================================================

The first matching rule in that order is the ``limiter``; the others that also match are listed in ``also``.
A missing metric is ``null`` in the JSON, never an error.

    ncu --clock-control none --profile-from-start off --nvtx --print-nvtx-rename kernel --csv --page raw \\
        --print-units base --section SpeedOfLight ... --log-file raw.csv \\
        python -m benchmarks.kernels.profile_ncu --launch --out launch.json      # GPU (benchmarks/run_h200_ncu.sh)
    python -m benchmarks.kernels.profile_ncu --parse raw.csv --manifest launch.json --out ncu_profile.json
    python -m benchmarks.kernels.profile_ncu --launch --time-reps 10 --out timing.json   # GPU, without ncu
    python -m benchmarks.kernels.profile_ncu --launch --smoke --time-reps 2             # CPU, reference ops
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import copy_bandwidth, env_set, provenance, provenance_line, write_json
from benchmarks.kernels.bench_roofline import (
    BULK_VARIANTS,
    SMOKE_SHAPES,
    bf16_variant,
    bulk_call,
    linear_shapes,
    planted_weight,
    q_variant,
    sync,
    time_per_call,
    w12_v3,
    w12_v4,
    w12_variant,
    weight_bytes,
)
from benchmarks.kernels.bench_roofline import (
    KERNELS as ROOFLINE_KERNELS,
)
from specdec.kernels.cuda.ops import TENSOR_MAP_MAX_TOKENS, WIDE_MAX_TOKENS, WIDE_PIPELINE_ENV, WIDE_STAGE_K

# The roofline's kernels less the lossy fp8 reference and the Triton kernels, in the roofline's order: the default set.
DEFAULT_KERNELS = tuple(k for k in ROOFLINE_KERNELS if k not in ("cublas_fp8", "triton_w12", "triton_q"))
# The 17-128-row kernels (specdec/kernels/cuda/README.md, "Wide calls"), each in its one-set and its pipelined consumer
# loop ($SPECDEC_WIDE_PIPELINE): launched only when named with --only-kernel.
WIDE_KERNELS = ("cuda_w12_wide", "cuda_w12_wide_pipe", "cuda_q_wide", "cuda_q_wide_pipe")
KERNELS = DEFAULT_KERNELS + WIDE_KERNELS
MS = (1, 8)
# (model, linear) in launch order: the shapes the roofline notes ask about first (8B o, lm_head) early.
CASES = (
    ("qwen3-8b", "o"),
    ("qwen3-8b", "qkv"),
    ("qwen3-8b", "lm_head"),
    ("qwen3-8b", "gate_up"),
    ("qwen3-8b", "down"),
    ("qwen3-32b", "down"),
)
MODEL_TAGS = {"qwen3-8b": "8b", "qwen3-32b": "32b", "smoke": "smoke"}
RANGE_PATTERN = r"(?P<kernel>[A-Za-z0-9_]+)\|(?P<shape>[A-Za-z0-9_]+)\[(?P<n>\d+)x(?P<k>\d+)\]\|M=(?P<m>\d+)"

DRAM_BOUND_PCT = 80.0
ISSUE_BOUND_PCT = 70.0
LAUNCH_BOUND_S = 10e-6
MIN_WAVES = 1.0
LATENCY_DRAM_PCT = 60.0
LOW_ELIGIBLE_WARPS = 1.0
LATENCY_STALLS = ("long_scoreboard", "wait", "short_scoreboard", "lg_throttle", "drain", "membar")

# Raw metric names read, each with alternatives in order of preference (ncu versions and sections differ).
METRICS = {
    "duration": ("gpu__time_duration.sum",),
    "dram_read": ("dram__bytes_read.sum", "dram__bytes_op_read.sum"),
    "dram_write": ("dram__bytes_write.sum", "dram__bytes_op_write.sum"),
    "dram_pct": ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    "sm_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "issue_pct": ("smsp__issue_active.avg.pct_of_peak_sustained_active", "sm__inst_issued.avg.pct_of_peak_sustained_active"),
    "ipc": ("sm__inst_executed.avg.per_cycle_active", "smsp__inst_executed.avg.per_cycle_active"),
    "inst_sum_per_active_cycle": ("sm__inst_executed.sum.per_cycle_active",),
    "sm_active_cycles": ("sm__cycles_active.avg",),
    "eligible_warps": ("smsp__warps_eligible.avg.per_cycle_active",),
    "active_warps": ("smsp__warps_active.avg.per_cycle_active",),
    "registers": ("launch__registers_per_thread",),
    "waves": ("launch__waves_per_multiprocessor",),
    "l2_bytes": ("lts__t_bytes.sum",),
    "l2_pct": ("lts__throughput.avg.pct_of_peak_sustained_elapsed",),
    "l2_hit_pct": ("lts__t_sector_hit_rate.pct",),
    "grid": ("launch__grid_size",),
    "block": ("launch__block_size",),
}
# Families of per-reason stall metrics, first family with any value wins; "selected" is issuing, not a stall.
STALL_FAMILIES = (
    r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$",
    r"^smsp__warp_issue_stalled_(\w+?)_per_warp_active\.pct$",
    r"^smsp__average_warp_latency_issue_stalled_(\w+?)(?:\.ratio|\.sum)?$",
    r"^smsp__pcsamp_warps_issue_stalled_(\w+?)(?:\.sum)?$",
)
NOT_STALLS = {"selected"}
# The metrics the runner asks for beside its sections (names every Hopper ncu knows).
NCU_METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "smsp__warps_eligible.avg.per_cycle_active",
    "launch__registers_per_thread",
    "launch__waves_per_multiprocessor",
)
_WARNED: list[bool] = []
UNIT_SCALE = {
    "nsecond": 1e-9,
    "usecond": 1e-6,
    "msecond": 1e-3,
    "second": 1.0,
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "byte": 1.0,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    "Tbyte": 1e12,
    "KiB": 1024.0,
    "MiB": 1024.0**2,
    "GiB": 1024.0**3,
}


def range_name(kernel: str, model: str, linear: str, n: int, k: int, m: int) -> str:
    """The NVTX range (and, renamed by ncu, kernel) name of one profiled launch.

    Example:
        >>> range_name("cuda_w12", "qwen3-8b", "qkv", 6144, 4096, 8)
        'cuda_w12|8b_qkv[6144x4096]|M=8'
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel: expected one of {KERNELS}, got {kernel!r}")
    return f"{kernel}|{MODEL_TAGS.get(model, model)}_{linear}[{n}x{k}]|M={m}"


def _range(device: torch.device, name: str | None) -> None:
    # NVTX ranges and the profiler window exist on CUDA only; the CPU smoke run takes the same path without them.
    if device.type != "cuda":
        return
    try:
        if name is None:
            torch.cuda.nvtx.range_pop()
            torch.cuda.profiler.stop()
        else:
            torch.cuda.profiler.start()
            torch.cuda.nvtx.range_push(name)
    except (RuntimeError, AttributeError) as exc:  # no profiler window: nothing is profiled, the timing still runs
        if not _WARNED:
            print(
                f"NVTX range / cudaProfilerStart unavailable ({type(exc).__name__}: {exc}); ncu will see no kernels", flush=True
            )
            _WARNED.append(True)


def case_list(text: str) -> tuple[tuple[str, str], ...]:
    """``"qwen3-8b/down,qwen3-8b/lm_head"`` -> ``(("qwen3-8b", "down"), ("qwen3-8b", "lm_head"))``; each must be a known linear.

    Example:
        >>> case_list("qwen3-8b/down,qwen3-32b/down")
        (('qwen3-8b', 'down'), ('qwen3-32b', 'down'))
    """
    out = []
    for item in text.split(","):
        model, _, linear = item.strip().partition("/")
        try:
            known = linear_shapes(model)
        except (KeyError, ValueError):
            known = {}
        if linear not in known:
            raise argparse.ArgumentTypeError(f"--cases: expected model/linear of a known model, got {item.strip()!r}")
        out.append((model, linear))
    return tuple(out)


def _with_wide_pipeline(pipelined: bool, call):
    """``call`` run with ``$SPECDEC_WIDE_PIPELINE`` set to ``"1"`` or ``"0"`` (read by the wide ops on every call),
    the variable's earlier state restored after."""

    def run():
        with env_set(WIDE_PIPELINE_ENV, "1" if pipelined else "0"):
            return call()

    return run


def case_functions(x: torch.Tensor, w: torch.Tensor, w12, ops) -> dict:
    """kernel name -> a call computing ``x @ w^T`` with that kernel (``w12``: ``w`` as a ``W12Tensor``), in ``KERNELS`` order."""
    planes = (w12.ae, w12.nib, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits)
    wide = {
        "cuda_w12_wide": lambda: ops.w12_gemm_wide(x, *planes),
        "cuda_q_wide": lambda: ops.q_gemm_wide(x, w12.ae, w12.base),
    }
    calls = {
        "cublas_bf16": lambda: F.linear(x, w),
        "cuda_bf16": lambda: bf16_variant(ops, "v1", x, w),
        "cuda_w12": lambda: w12_variant(ops, "v1", x, *planes),
        "cuda_q": lambda: q_variant(ops, "v1", x, w12.ae, w12.base),
        "cuda_w12_v3": lambda: w12_v3(ops, x, *planes),
        "cuda_w12_v4": lambda: w12_v4(ops, x, *planes),
        **{f"cuda_w12_{v}": (lambda v=v: bulk_call(v)(ops, x, *planes)) for v in BULK_VARIANTS},
        **{f"cuda_q_{v}": (lambda v=v: q_variant(ops, v, x, w12.ae, w12.base)) for v in ("v2", "v3", "v4")},
        **{f"cuda_bf16_{v}": (lambda v=v: bf16_variant(ops, v, x, w)) for v in ("v2", "v3", "v4")},
        **{name: _with_wide_pipeline(False, call) for name, call in wide.items()},
        **{f"{name}_pipe": _with_wide_pipeline(True, call) for name, call in wide.items()},
    }
    return {kernel: calls[kernel] for kernel in KERNELS}


def chosen_kernels(args) -> tuple[str, ...]:
    """The kernels a launch runs, in ``KERNELS`` order: ``--only-kernel``'s if any were named, else ``DEFAULT_KERNELS``,
    less ``--skip-kernel``'s.

    Example:
        >>> from types import SimpleNamespace
        >>> chosen_kernels(SimpleNamespace(only_kernels=["cuda_w12_wide_pipe", "cublas_bf16"], skip_kernels=[]))
        ('cublas_bf16', 'cuda_w12_wide_pipe')
    """
    pool = args.only_kernels or DEFAULT_KERNELS
    return tuple(k for k in KERNELS if k in pool and k not in args.skip_kernels)


def launch(args, device: torch.device, t_start: float) -> dict:
    """Every case: one warm call, one profiled call in its NVTX range; with ``time_reps``, CUDA-event timing too."""
    from specdec.formats.w12 import W12Tensor
    from specdec.kernels.cuda import ops

    if device.type == "cuda":
        from specdec.kernels.cuda.build import library_path, load_library

        load_library()
        print(f"CUDA kernels: {library_path()}", flush=True)
    gen = torch.Generator(device=device).manual_seed(0)
    if args.smoke:
        cases = [("smoke", lname, n, k) for lname, (n, k) in SMOKE_SHAPES["smoke"].items()]
    else:
        chosen = CASES if args.cases is None else args.cases
        cases = [(model, lname, *linear_shapes(model)[lname]) for model, lname in chosen]
    entries, skipped, not_launched = [], [], []
    for model, lname, n, k in cases:
        if time.time() - t_start > args.budget_s:
            print(f"budget reached, not run: {model}/{lname}", flush=True)
            skipped.append(f"{model}/{lname}")
            continue
        if args.weights == "planted":
            w = planted_weight(n, k, gen, device)
        else:  # Gaussian, std 0.02: the roofline's weights (escapes ~7.6e-5 of them, spread out)
            w = (torch.randn(n, k, generator=gen, device=device) * 0.02).to(torch.bfloat16)
        w12 = W12Tensor.from_bf16(w)
        for m in args.ms:
            x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
            for kernel, fn in case_functions(x, w, w12, ops).items():
                if kernel not in chosen_kernels(args):
                    continue
                name = range_name(kernel, model, lname, n, k, m)
                entry = dict(range=name, kernel=kernel, model=model, linear=lname, N=n, K=k, M=m)
                if kernel in WIDE_KERNELS and k % WIDE_STAGE_K:
                    print(f"not launched: {name} (the wide kernels take K a multiple of {WIDE_STAGE_K})", flush=True)
                    not_launched.append(name)
                    continue
                entry["weight_bytes"] = weight_bytes(kernel, n, k, w12)
                entry["escapes"] = int(w12.num_escapes)
                fn()  # warm: first-call work (library load, plan, cuBLAS heuristics) stays out of the profile
                sync(device)
                _range(device, name)
                fn()
                _range(device, None)
                sync(device)
                if args.time_reps:
                    entry["time_s"] = time_per_call(fn, device, calls=args.calls, reps=args.time_reps)
                    entry["weight_bytes_per_s"] = entry["weight_bytes"] / entry["time_s"]
                entries.append(entry)
        del w, w12
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"launched {model}/{lname} [{n}x{k}] M={args.ms}: {len(chosen_kernels(args))} kernels each", flush=True)
    return dict(ranges=entries, skipped=skipped, not_launched=not_launched, wall_s=time.time() - t_start)


def timing_lines(result: dict) -> list[str]:
    """The summary table of a ``--time-reps`` launch run (CUDA-event timing, no counters)."""
    copy_bw = result.get("copy_bandwidth_bytes_per_s")
    lines = [f"{'range':36s} {'time us':>9s} {'weight TB/s':>12s} {'of copy':>8s}"]
    for e in result["ranges"]:
        if "time_s" not in e:
            continue
        frac = e["weight_bytes_per_s"] / copy_bw if copy_bw and copy_bw == copy_bw else None
        lines.append(
            f"{e['range']:36s} {e['time_s'] * 1e6:9.1f} {e['weight_bytes_per_s'] / 1e12:12.3f} "
            f"{'n/a' if frac is None else f'{frac:.2f}':>8s}"
        )
    return lines


def parse_number(text: str, unit: str = "") -> float | None:
    """A raw-page value as a float in base units (seconds, bytes), ``None`` when empty or not a number.

    Example:
        >>> parse_number("1,234.5", "usecond")
        0.0012345
        >>> parse_number("12,832", "ns")  # ncu 2025.3 writes durations in ns under --print-units base
        1.2832e-05
        >>> parse_number("n/a") is None
        True
    """
    text = text.strip().replace(",", "")
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    unit = unit.strip()
    if unit in UNIT_SCALE:
        return value * UNIT_SCALE[unit]
    if unit.endswith("/second") and unit.split("/")[0] in UNIT_SCALE:
        return value * UNIT_SCALE[unit.split("/")[0]]
    return value


def read_raw_csv(text: str) -> list[dict[str, float | str | None]]:
    """Rows of ncu's raw page (CSV): one dict per kernel, metric values in base units, text columns as text.

    Lines of the tool's log (starting with ``==``), anything before the header row (the row whose first field
    is ``ID``) and rows whose first field is not a kernel ID are skipped; the row after the header holds the units.

    Example:
        >>> raw = '==PROF== done\\n"ID","Kernel Name","gpu__time_duration.sum"\\n"","","usecond"\\n"0","k","1,500"\\n'
        >>> read_raw_csv(raw)[0]["gpu__time_duration.sum"]
        0.0015
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected the CSV as a str, got {type(text).__name__}")
    lines = [line for line in text.splitlines() if not line.startswith("==")]
    records = list(csv.reader(io.StringIO("\n".join(lines))))
    start = next((i for i, rec in enumerate(records) if rec and rec[0].strip() == "ID"), None)
    if start is None or start + 1 >= len(records):
        return []
    header, units = records[start], records[start + 1]
    if units and units[0].strip() not in ("", "ID"):  # no unit row: the first data row follows the header
        units, first = [""] * len(header), start + 1
    else:
        first = start + 2
    text_columns = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Device", "CC"}
    rows = []
    for rec in records[first:]:
        if not rec or not rec[0].strip().isdigit():  # kernel rows start with their numeric ID; anything else is log
            continue
        row: dict[str, float | str | None] = {}
        for i, name in enumerate(header):
            value = rec[i] if i < len(rec) else ""
            if name in text_columns or name.endswith(" Size"):
                row[name] = value
            else:
                row[name] = parse_number(value, units[i] if i < len(units) else "")
        rows.append(row)
    return rows


def _first(row: dict, names: tuple[str, ...]) -> float | None:
    for name in names:
        value = row.get(name)
        if isinstance(value, float):
            return value
    return None


def warp_instructions(rows: list[dict]) -> float | None:
    """Warp instructions the kernels of ``rows`` executed on all SMs: ``sm__inst_executed.sum.per_cycle_active`` (the
    sum over SMs per active cycle of the average SM) times ``sm__cycles_active.avg``, added over the kernels; ``None``
    when a kernel lacks either metric. Unlike ``ipc x duration`` it does not depend on how many SMs were busy.

    Example:
        >>> warp_instructions([{"sm__inst_executed.sum.per_cycle_active": 200.0, "sm__cycles_active.avg": 50.0}] * 2)
        20000.0
        >>> warp_instructions([{"sm__cycles_active.avg": 50.0}]) is None
        True
    """
    total = 0.0
    for row in rows:
        per_cycle, cycles = _first(row, METRICS["inst_sum_per_active_cycle"]), _first(row, METRICS["sm_active_cycles"])
        if per_cycle is None or cycles is None:
            return None
        total += per_cycle * cycles
    return total


def stall_breakdown(row: dict) -> list[tuple[str, float]]:
    """(reason, share of all stall cycles) of one kernel, largest first, from the first stall family present.

    Example:
        >>> stall_breakdown({"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": 1.0,
        ...                  "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": 3.0})
        [('long_scoreboard', 0.75), ('wait', 0.25)]
    """
    for family in STALL_FAMILIES:
        found = {}
        for name, value in row.items():
            hit = re.match(family, name)
            if hit and isinstance(value, float) and hit[1] not in NOT_STALLS:
                found[hit[1]] = value
        total = sum(found.values())
        if found and total > 0:
            return sorted(((r, v / total) for r, v in found.items()), key=lambda rv: (-rv[1], rv[0]))
    return []


def verdict(rec: dict) -> tuple[str, list[str]]:
    """(limiter, other matching rules) of one record of :func:`summarise`, by the thresholds of the module doc.

    Example:
        >>> verdict(dict(dram_pct=85.0, issue_pct=20.0, duration_s=50e-6, waves=3.0, stalls=[], eligible_warps=2.0))
        ('dram-bound', [])
    """
    dram, issue, dur, waves = rec.get("dram_pct"), rec.get("issue_pct"), rec.get("duration_s"), rec.get("waves")
    stalls, eligible = rec.get("stalls") or [], rec.get("eligible_warps")
    matched = []
    if dram is not None and dram >= DRAM_BOUND_PCT:
        matched.append("dram-bound")
    if issue is not None and issue >= ISSUE_BOUND_PCT:
        matched.append("issue-bound")
    if (dur is not None and dur < LAUNCH_BOUND_S) or (waves is not None and waves < MIN_WAVES):
        matched.append("launch/tail-bound")
    if (
        dram is not None
        and dram < LATENCY_DRAM_PCT
        and stalls
        and stalls[0][0] in LATENCY_STALLS
        and eligible is not None
        and eligible < LOW_ELIGIBLE_WARPS
    ):
        matched.append("latency-bound")
    if matched:
        return matched[0], matched[1:]
    if dram is None or issue is None or dur is None:
        return "unknown", []
    return "mixed", []


def summarise(rows: list[dict], manifest: dict | None, copy_bw: float | None) -> list[dict]:
    """One record per NVTX range (kernels of a range added), in the order the kernels ran.

    Kernels whose name holds no ``<kernel>|<shape>[NxK]|M=<m>`` range are matched to the manifest's ranges in
    launch order when there are exactly as many as ranges (ncu did not rename them), else kept under their
    own name with ``attributed`` false.
    """
    names = [str(r.get("Kernel Name", "")) for r in rows]
    ranges = (manifest or {}).get("ranges", [])
    by_range = {e["range"]: e for e in ranges}
    if names and not any(re.search(RANGE_PATTERN, n) for n in names) and len(ranges) == len(rows):
        names = [e["range"] for e in ranges]
    groups: dict[str, list[dict]] = {}
    for name, row in zip(names, rows):
        hit = re.search(RANGE_PATTERN, name)
        groups.setdefault(hit[0] if hit else name, []).append(row)
    out = []
    for key, group in groups.items():
        hit = re.search(RANGE_PATTERN, key)
        main = max(group, key=lambda r: _first(r, METRICS["duration"]) or 0.0)
        rec: dict = dict(range=key, attributed=bool(hit), kernels=len(group))
        if hit:
            rec.update(kernel=hit["kernel"], shape=hit["shape"], N=int(hit["n"]), K=int(hit["k"]), M=int(hit["m"]))
        for field in ("duration", "dram_read", "dram_write"):
            values = [_first(r, METRICS[field]) for r in group]
            rec[f"{field}_s" if field == "duration" else f"{field}_bytes"] = None if None in values else sum(values)
        rec["warp_instructions"] = warp_instructions(group)
        for field in (
            "dram_pct",
            "sm_pct",
            "occupancy_pct",
            "issue_pct",
            "ipc",
            "eligible_warps",
            "active_warps",
            "registers",
            "waves",
            "l2_bytes",
            "l2_pct",
            "l2_hit_pct",
        ):
            rec[field] = _first(main, METRICS[field])
        dur, read, write = rec["duration_s"], rec["dram_read_bytes"], rec["dram_write_bytes"]
        moved = None if read is None else read + (write or 0.0)
        rec["dram_bytes_per_s"] = moved / dur if moved is not None and dur else None
        rec["frac_of_copy"] = rec["dram_bytes_per_s"] / copy_bw if rec["dram_bytes_per_s"] and copy_bw else None
        entry = by_range.get(key)
        rec["weight_bytes"] = entry["weight_bytes"] if entry else None
        rec["weight_bytes_per_s"] = rec["weight_bytes"] / dur if rec["weight_bytes"] and dur else None
        rec["dram_read_over_weight"] = read / rec["weight_bytes"] if read is not None and rec["weight_bytes"] else None
        rec["stalls"] = [(reason, round(share, 4)) for reason, share in stall_breakdown(main)]
        rec["top_stalls"] = rec["stalls"][:3]
        rec["limiter"], rec["also"] = verdict(rec)
        out.append(rec)
    return out


def table_lines(records: list[dict], copy_bw: float | None) -> list[str]:
    """The printed table of :func:`summarise`'s records."""

    def f(value, fmt: str, scale: float = 1.0) -> str:
        return "n/a".rjust(int(fmt.split(".")[0])) if value is None else format(value * scale, fmt)

    copy = f"{copy_bw / 1e12:.2f} TB/s" if copy_bw else "not given"
    lines = [
        f"copy bandwidth {copy}; limiter rules: dram >= {DRAM_BOUND_PCT:.0f}% | issue >= {ISSUE_BOUND_PCT:.0f}% | "
        f"duration < {LAUNCH_BOUND_S * 1e6:.0f} us or waves < {MIN_WAVES:g} | dram < {LATENCY_DRAM_PCT:.0f}% with a memory/"
        f"dependency stall on top and < {LOW_ELIGIBLE_WARPS:g} eligible warps/scheduler",
        f"{'range':36s} {'us':>7s} {'DRAM MB':>8s} {'TB/s':>5s} {'copy':>5s} {'dram%':>5s} {'sm%':>4s} {'occ%':>4s} "
        f"{'iss%':>4s} {'ipc':>4s} {'elig':>4s} {'reg':>3s} {'waves':>5s} {'wTB/s':>5s}  {'top stalls (share)':46s} limiter",
    ]
    for r in records:
        stalls = " ".join(f"{reason[:15]} {share:.0%}" for reason, share in r["top_stalls"]) or "n/a"
        lines.append(
            f"{r['range'][:36]:36s} {f(r['duration_s'], '7.1f', 1e6)} {f(r['dram_read_bytes'], '8.1f', 1e-6)} "
            f"{f(r['dram_bytes_per_s'], '5.2f', 1e-12)} {f(r['frac_of_copy'], '5.2f')} {f(r['dram_pct'], '5.1f')} "
            f"{f(r['sm_pct'], '4.0f')} {f(r['occupancy_pct'], '4.0f')} {f(r['issue_pct'], '4.0f')} {f(r['ipc'], '4.2f')} "
            f"{f(r['eligible_warps'], '4.2f')} {f(r['registers'], '3.0f')} {f(r['waves'], '5.2f')} "
            f"{f(r['weight_bytes_per_s'], '5.2f', 1e-12)}  {stalls:46s} "
            f"{r['limiter']}" + (f" (also {', '.join(r['also'])})" if r["also"] else "")
        )
    return lines


def parse(args) -> dict:
    """The JSON result of ``--parse``: the records, the copy bandwidth used and where it came from."""
    text = Path(args.parse).read_text(errors="replace")
    rows = read_raw_csv(text)
    manifest = json.loads(Path(args.manifest).read_text()) if args.manifest else None
    copy_bw, source = None, None
    if args.copy_tbs is not None:
        if not args.copy_tbs > 0:
            raise ValueError(f"--copy-tbs: expected a positive bandwidth in TB/s, got {args.copy_tbs}")
        copy_bw, source = args.copy_tbs * 1e12, "--copy-tbs"
    elif args.roofline:
        value = json.loads(Path(args.roofline).read_text()).get("copy_bandwidth_bytes_per_s")
        if value and value == value:
            copy_bw, source = float(value), f"roofline JSON {args.roofline}"
    if copy_bw is None and manifest:
        value = manifest.get("copy_bandwidth_bytes_per_s")
        if value and value == value:
            copy_bw, source = float(value), "measured by the --launch process"
    records = summarise(rows, manifest, copy_bw)
    return dict(
        csv=str(args.parse),
        kernels_in_csv=len(rows),
        copy_bandwidth_bytes_per_s=copy_bw,
        copy_bandwidth_source=source,
        thresholds=dict(
            dram_bound_pct=DRAM_BOUND_PCT,
            issue_bound_pct=ISSUE_BOUND_PCT,
            launch_bound_s=LAUNCH_BOUND_S,
            min_waves=MIN_WAVES,
            latency_dram_pct=LATENCY_DRAM_PCT,
            low_eligible_warps=LOW_ELIGIBLE_WARPS,
            latency_stalls=LATENCY_STALLS,
        ),
        launch_provenance=(manifest or {}).get("provenance"),
        records=records,
    )


def token_counts(text: str) -> tuple[int, ...]:
    """``"1,8,16"`` -> ``(1, 8, 16)``: the token counts (M) to launch, each 1 to 128 (past 16 only the wide kernels
    and cuBLAS: :func:`check_token_counts`).

    Example:
        >>> token_counts("1,16")
        (1, 16)
    """
    try:
        ms = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not ms or any(not 1 <= m <= WIDE_MAX_TOKENS for m in ms):
        raise argparse.ArgumentTypeError(f"expected token counts from 1 to {WIDE_MAX_TOKENS}, got {text!r}")
    return ms


def check_token_counts(ms: tuple[int, ...], kernels: tuple[str, ...]) -> str | None:
    """Why ``kernels`` cannot all run at every token count of ``ms`` (``None`` if they can): past
    ``TENSOR_MAP_MAX_TOKENS`` rows only cuBLAS and the wide kernels take a call.

    Example:
        >>> check_token_counts((16, 64), ("cublas_bf16", "cuda_w12_wide"))
        >>> check_token_counts((1, 32), ("cuda_w12_v9",))
        '--ms: 32 rows exceed the 16 that cuda_w12_v9 takes (past 16: cublas_bf16 and the wide kernels)'
    """
    over = [m for m in ms if m > TENSOR_MAP_MAX_TOKENS]
    narrow = [k for k in kernels if k != "cublas_bf16" and k not in WIDE_KERNELS]
    if over and narrow:
        return (
            f"--ms: {over[0]} rows exceed the {TENSOR_MAP_MAX_TOKENS} that {', '.join(narrow)} take"
            f"{'s' if len(narrow) == 1 else ''} (past {TENSOR_MAP_MAX_TOKENS}: cublas_bf16 and the wide kernels)"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    role = parser.add_mutually_exclusive_group(required=True)
    role.add_argument("--launch", action="store_true", help="the program ncu runs: one profiled call per case")
    role.add_argument("--parse", metavar="CSV", help="ncu's raw page as CSV (--csv --page raw --print-units base)")
    parser.add_argument("--out", default=None, help="JSON to write (default: $OUT/ncu_launch.json or $OUT/ncu_profile.json)")
    parser.add_argument("--smoke", action="store_true", help="--launch on the CPU: reference ops, tiny shapes")
    parser.add_argument("--budget-s", type=float, default=45.0, help="--launch: no new shape starts after this")
    parser.add_argument("--time-reps", type=int, default=0, help="--launch: also time each case (median of N graph replays)")
    parser.add_argument("--calls", type=int, default=10, help="--launch --time-reps: calls per CUDA graph")
    parser.add_argument(
        "--skip-kernel", dest="skip_kernels", action="append", default=[], choices=KERNELS, help="--launch: leave this kernel out"
    )
    parser.add_argument(
        "--only-kernel", dest="only_kernels", action="append", default=[], choices=KERNELS, help="--launch: only these kernels"
    )
    parser.add_argument(
        "--cases", type=case_list, default=None, help="--launch: comma-separated model/linear cases (default: CASES)"
    )
    parser.add_argument(
        "--weights",
        choices=("planted", "gaussian"),
        default="planted",
        help="--launch: planted escapes (a crowded tile among them) or plain Gaussian weights",
    )
    parser.add_argument(
        "--ms", type=token_counts, default=MS, help="--launch: comma-separated token counts (default 1,8; past 16 wide kernels)"
    )
    parser.add_argument("--manifest", default=None, help="--parse: the --launch JSON (weight bytes, copy bandwidth)")
    parser.add_argument("--roofline", default=None, help="--parse: a bench_roofline JSON whose copy bandwidth to use")
    parser.add_argument("--copy-tbs", type=float, default=None, help="--parse: copy bandwidth in TB/s (overrides the JSONs)")
    args = parser.parse_args(argv)
    if args.time_reps < 0:
        parser.error(f"--time-reps: expected >= 0, got {args.time_reps}")
    if args.launch and (problem := check_token_counts(args.ms, chosen_kernels(args))):
        parser.error(problem)
    out_dir = os.environ.get("OUT", ".")
    prov = provenance(0 if args.launch else None)
    print(provenance_line(prov), flush=True)
    if args.parse:
        result = parse(args)
        out = write_json(args.out or os.path.join(out_dir, "ncu_profile.json"), result, prov, indent=1)
        print(f"wrote {out}: {len(result['records'])} ranges from {result['kernels_in_csv']} profiled kernels")
        for line in table_lines(result["records"], result["copy_bandwidth_bytes_per_s"]):
            print(line)
        return 0 if result["records"] else 1
    if args.smoke:
        device = torch.device("cpu")
        args.calls = min(args.calls, 2)
    else:
        if not torch.cuda.is_available():
            parser.error("--launch needs CUDA; add --smoke on a CPU")
        device = torch.device("cuda")
    t_start = time.time()
    copy_bw = copy_bandwidth(device)
    result = launch(args, device, t_start)
    result.update(
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (reference ops)",
        copy_bandwidth_bytes_per_s=copy_bw,
        kernels=chosen_kernels(args),
        ms=args.ms,
        weights=args.weights,
    )
    out = write_json(args.out or os.path.join(out_dir, "ncu_launch.json"), result, prov, indent=1)
    print(f"wrote {out}: {len(result['ranges'])} ranges, skipped {result['skipped'] or 'none'}")
    if args.time_reps:
        for line in timing_lines(result):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
