"""The wide and persistent tensor-map kernels' phases on the GPU's clock: where one call's time goes, CTA by CTA.

A library built with ``-DSPECDEC_WIDE_TRACE=1`` (``$SPECDEC_CUDA_KERNELS`` naming it) makes one thread of every CTA of
``w12_gemm_wide`` / ``q_gemm_wide`` (kinds ``w12``, ``q``: 17-128 rows), and of the 1-16 token persistent tensor-map
kernel of 64-row blocks (kinds ``bf16_v3``, ``w12_v8``, ``q_v3``: the bf16, W12 and Q entry points that run it where
split K would need several waves) and of the 1-16 token row tiles (kinds ``bf16_v4``, ``w12_v9``, ``q_v4``; a call an
entry point runs with another kernel records nothing and is reported as such), record the global clock (``%globaltimer``, ns) at each point of its life
(``ops.WIDE_TRACE_FIELDS``): the start, the K loop's end (warp 0, the second stage group, the escape warp, the
producer, then all warps), the sums' tile complete, the partial tile stored, the row block's counter read, the last
CTA's sum of the splits, the output stored. From those, per CTA:

* ``loop``: start to the K loop's end (every warp); ``wait_warps``: warp 0's wait there for the CTA's other warps, and
  which warp it waited for: ``group1_lag``, ``escape_lag``, ``producer_lag``, each the time that warp left its loop
  less the time warp 0 left its own (negative: earlier; absent where the CTA has no such warp);
* ``sums``: the escape and stage groups' sums added into the tile; ``partial``: the partial tile stored and ordered;
  ``count``: the counter's round trip; ``reduce``: the last CTA's sum of the other splits' tiles; ``store``: the bf16
  output (after ``reduce``; after ``sums`` without K splits); ``exit``: a CTA that is not its row block's last, from
  the count to its end;

and per call: ``span`` (first start to last end), ``skew`` (first to last start) and ``tail`` (the last K loop's end to
the last end: what the epilogue adds to the call where nothing else runs). For the kernels that are not persistent, each
case also gets its CTAs' loop ends by SM over its calls (``sm_effect``: whether the same SMs end late call after call).
A persistent CTA (``$SPECDEC_WIDE_STREAM_K``: one CTA an SM over a run of row blocks' stages, segment by segment)
records sums over its segments instead (``PERSISTENT_PHASES``): ``loop`` (warp 0's K loops), ``wait_warps`` (its waits
there for the other warps), ``epilogue`` (the segments' sums, stored rows or partial tiles and counts), ``between`` (the
rest of its run: the segment loop's own work), ``finish`` (the row blocks' sums it owes after its run), with
``segments`` and ``partial_segments``, and where the kernel records them (the 1-16 token one) ``issued``, its producer's
last copy issued from the start, and its epilogues split (``EPILOGUE_PARTS``: the halves' and escape sums, the partial
tiles' stores, the rest: the count or a whole block's rows); its ``tail`` runs from the last run's end. Each (linear,
rows, kind) is traced on cold weights (copies spanning 3x the L2, one call a copy, each launched alone with the trace
zeroed before it), ``--reps`` calls; the table gives medians over the calls of each phase's median over CTAs and of the
phases of the CTA that ends last. The traced build's products are the shipped build's (checked here against the float32
product); its records add one store a point and one barrier before a CTA's exit.

Usage (repository root, GPU, a traced library): ``SPECDEC_CUDA_KERNELS=build/wide_trace.so python3 -m
benchmarks.kernels.wide_trace --out $OUT/wide_trace.json`` (~30 s on one H200). CPU: ``--smoke`` checks the phase
arithmetic on a made-up trace and writes its JSON (nothing is measured there). Random weights (Gaussian, std 0.02).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import agg_pyplot, provenance, provenance_line, redraw, report
from benchmarks.kernels.bench_roofline import (
    bf16_variant,
    linear_shapes,
    q_variant,
    sync,
    w12_planes,
    w12_variant,
    weight_bytes,
)
from benchmarks.kernels.read_floor import cold_weight_device, weight_copies
from specdec.kernels.cuda.build import library_path
from specdec.kernels.cuda.ops import WIDE_TRACE_FIELDS
from specdec.kernels.launch import pdl_mode

FIELDS = WIDE_TRACE_FIELDS  # what a traced build records a CTA, in order
PHASES = ("loop", "wait_warps", "sums", "partial", "count", "reduce", "store", "exit")
PERSISTENT_PHASES = ("loop", "wait_warps", "epilogue", "between", "finish", "segments", "partial_segments", "issued")
# the 1-16 token persistent kernel's parts of its epilogues: the halves' and escape sums, the partial tiles' stores, the
# rest (the count, or a whole block's rows stored); then within the sums, warp 0's griddep_wait and the sums' loop up to
# the barrier after it of warp 0, of the second half's first warp and of the escape warp (0 where the kind has none)
EPILOGUE_PARTS = ("epi_sums", "epi_store", "epi_rest", "epi_acquire", "epi_sums_warp0", "epi_sums_group1", "epi_sums_escape")
NOT_TIMES = ("meta", "seg_loop", "seg_wait", "seg_epilogue", "segments")  # fields that are not clock readings
# durations in the 1-16 token persistent kernel's records
PERSISTENT_DURATIONS = ("summed", "partial", "counted", "reduced", "escapes", "group1")
LAGS = ("group1_lag", "escape_lag", "producer_lag")
CALL_TIMES = ("span", "skew", "tail")
LINEARS = ("qkv", "o", "gate_up", "down", "lm_head")
WIDE_KINDS = ("w12", "q")  # the wide kernels, 17-128 rows
TENSOR_MAP_KINDS = ("bf16_v3", "w12_v8", "q_v3")  # the 1-16 token persistent kernel, by entry point
ROW_TILE_KINDS = ("bf16_v4", "w12_v9", "q_v4")  # the 1-16 token row tiles (16 rows over the whole of K), by entry point
SMALL_KINDS = TENSOR_MAP_KINDS + ROW_TILE_KINDS  # 1-16 rows


def cta_phases(rec: list[int]) -> dict:
    """The phases (ns) of one CTA from its record (``FIELDS`` order; 0 where it did not reach a point), with
    ``last`` (it summed its row block), ``split``, ``k_splits`` and ``sm`` from its meta field.

    Example (a CTA of a row block split in two that arrived last):
        >>> meta = 7 | 1 << 16 | 1 << 32 | 2 << 40
        >>> p = cta_phases([100, 900, 1000, 1100, 1300, 1500, 2000, 2200, meta, 950, 920, 800])
        >>> p["loop"], p["wait_warps"], p["partial"], p["count"], p["reduce"], p["store"], p["exit"], p["last"]
        (900, 100, 200, 200, 500, 200, None, True)
    """
    r = dict(zip(FIELDS, rec))
    if r.get("segments"):
        return persistent_phases(r)
    meta = r["meta"]
    k_splits = meta >> 40
    last = bool(meta >> 32 & 1)
    out = dict(sm=meta & 0xFFFF, split=meta >> 16 & 0xFFFF, last=last, k_splits=k_splits)
    if not r["start"] or not r["ring_done"] or not r["end"] or k_splits < 1:
        raise ValueError(f"rec: expected a CTA that ran (start, ring_done, end and meta set), got {r}")
    out["loop"] = r["ring_done"] - r["start"]
    out["wait_warps"] = r["ring_done"] - r["consumed"] if r["consumed"] else None
    out["sums"] = r["summed"] - r["ring_done"]
    split = k_splits > 1
    out["partial"] = r["partial"] - r["summed"] if split else None
    out["count"] = r["counted"] - r["partial"] if split else None
    out["reduce"] = r["reduced"] - r["counted"] if split and last else None
    out["store"] = (r["end"] - r["reduced"] if split else r["end"] - r["summed"]) if last else None
    out["exit"] = r["end"] - r["counted"] if split and not last else None
    for lag, field in zip(LAGS, ("group1", "escapes", "producer")):
        out[lag] = r[field] - r["consumed"] if r[field] and r["consumed"] else None
    return out


def persistent_phases(r: dict) -> dict:
    """The phases (ns) of one persistent CTA from its record (field -> value; ``PERSISTENT_PHASES``), with ``sm`` and
    ``persistent``: ``between`` is its run (start to the last segment's end) less its loops, waits and epilogues.

    Example (three segments, one of them partial):
        >>> p = persistent_phases(dict(start=100, ring_done=1100, end=1400, meta=5 | 1 << 40, seg_loop=700,
        ...                            seg_wait=50, seg_epilogue=200, segments=3 | 1 << 16))
        >>> p["loop"], p["wait_warps"], p["epilogue"], p["between"], p["finish"], p["segments"], p["partial_segments"]
        (700, 50, 200, 50, 300, 3, 1)
        >>> p["issued"] is None  # no producer record (the wide kernel's)
        True
    """
    if not r.get("start") or not r.get("ring_done") or not r.get("end"):
        raise ValueError(f"rec: expected a persistent CTA that ran (start, ring_done and end set), got {r}")
    run = r["ring_done"] - r["start"]
    return dict(
        persistent=True,
        sm=r["meta"] & 0xFFFF,
        loop=r["seg_loop"],
        wait_warps=r["seg_wait"],
        epilogue=r["seg_epilogue"],
        between=run - r["seg_loop"] - r["seg_wait"] - r["seg_epilogue"],
        finish=r["end"] - r["ring_done"],
        segments=r["segments"] & 0xFFFF,
        partial_segments=r["segments"] >> 16 & 0xFFFF,
        issued=r["producer"] - r["start"] if r.get("producer") else None,
        **epilogue_parts(r),
    )


def epilogue_parts(r: dict) -> dict:
    """The 1-16 token persistent kernel's epilogue split (``EPILOGUE_PARTS``, ns), known from its producer's record
    (the wide kernel's records have none: every part None).

    Example:
        >>> p = epilogue_parts(dict(producer=900, start=100, seg_epilogue=700, summed=150, partial=450, counted=10,
        ...                         reduced=40, group1=45, escapes=140))
        >>> p["epi_sums"], p["epi_store"], p["epi_rest"], p["epi_acquire"], p["epi_sums_escape"]
        (150, 450, 100, 10, 140)
    """
    if not r.get("producer"):
        return dict.fromkeys(EPILOGUE_PARTS)
    return dict(
        epi_sums=r["summed"],
        epi_store=r["partial"],
        epi_rest=r["seg_epilogue"] - r["summed"] - r["partial"],
        epi_acquire=r["counted"],
        epi_sums_warp0=r["reduced"],
        epi_sums_group1=r["group1"],
        epi_sums_escape=r["escapes"],
    )


def call_times(records: list[list[int]]) -> dict:
    """One call's times (ns) from its CTAs' records: ``span``, ``skew``, ``tail`` (``CALL_TIMES``), each phase's
    median over the CTAs that have it (``median``) and the phases of the CTA that ends last (``critical``).

    Example (two CTAs of one row block, K split in two; the second ends last):
        >>> a = [100, 900, 1000, 1100, 1300, 1500, 0, 1600, 0 | 0 << 16 | 0 << 32 | 2 << 40, 0, 0, 0]
        >>> b = [150, 1200, 1300, 1400, 1600, 1800, 2300, 2500, 1 | 1 << 16 | 1 << 32 | 2 << 40, 0, 0, 0]
        >>> t = call_times([a, b])
        >>> t["span"], t["skew"], t["tail"], t["critical"]["reduce"], t["median"]["loop"]
        (2400, 50, 1200, 500, 1025.0)
    """
    ran = [r for r in records if r[FIELDS.index("start")]]
    if not ran:
        raise ValueError("records: expected at least one CTA that ran, got none")
    ctas = [cta_phases(r) for r in ran]
    persistent = ctas[0].get("persistent", False)
    if any(c.get("persistent", False) != persistent for c in ctas):
        raise ValueError("records: expected the CTAs of one kernel, got persistent and split-K records together")
    names = PERSISTENT_PHASES + EPILOGUE_PARTS if persistent else PHASES + LAGS
    not_times = NOT_TIMES + PERSISTENT_DURATIONS if persistent else NOT_TIMES
    start, end, ring = (FIELDS.index(f) for f in ("start", "end", "ring_done"))
    last = max(range(len(ran)), key=lambda i: ran[i][end])
    median = {}
    for ph in names:
        vals = [c[ph] for c in ctas if c[ph] is not None]
        median[ph] = statistics.median(vals) if vals else None
    return dict(
        ctas=len(ran),
        persistent=persistent,
        k_splits=1 if persistent else ctas[0]["k_splits"],
        span=max(r[end] for r in ran) - min(r[start] for r in ran),
        skew=max(r[start] for r in ran) - min(r[start] for r in ran),
        tail=max(r[end] for r in ran) - max(r[ring] for r in ran),
        median=median,
        critical={ph: ctas[last][ph] for ph in names},
        critical_record={f: (v - ran[last][start] if v and f not in not_times else v) for f, v in zip(FIELDS, ran[last])},
    )


def _fields(**values: int) -> list[int]:
    """A CTA's record (``FIELDS`` order) from named values, 0 for the rest."""
    return [values.get(f, 0) for f in FIELDS]


def sm_loop_ends(records: list[list[int]]) -> dict[int, list[int]]:
    """Each SM's CTAs' K-loop ends (``ring_done``, ns from the call's first start), by SM id, of one call of a kernel
    that is not persistent (the CTAs that did not run left out).

    Example (two CTAs on SM 4, one on SM 9):
        >>> rec = lambda sm, start, done: _fields(start=start, ring_done=done, end=done + 50, meta=sm | 1 << 40)
        >>> sm_loop_ends([rec(4, 100, 900), rec(9, 120, 700), rec(4, 110, 1000), [0] * len(FIELDS)])
        {4: [800, 900], 9: [600]}
    """
    ran = [dict(zip(FIELDS, r)) for r in records if r[FIELDS.index("start")]]
    if not ran:
        raise ValueError("records: expected at least one CTA that ran, got none")
    t0 = min(r["start"] for r in ran)
    out: dict[int, list[int]] = {}
    for r in ran:
        out.setdefault(r["meta"] & 0xFFFF, []).append(r["ring_done"] - t0)
    return {sm: sorted(v) for sm, v in sorted(out.items())}


def sm_effect(calls: list[dict[int, list[int]]]) -> dict:
    """Whether where a CTA runs sets when its K loop ends: over calls (``sm_loop_ends`` results; at least two), each
    SM's mean loop end per call, and

    * ``split_half_r``: the correlation over SMs between those means averaged over the even and over the odd calls (near
      1: the same SMs end late call after call, a property of the SM or of where the hardware puts it; near 0: chance);
    * ``sm_spread``: the latest less the earliest SM's mean over all calls, against ``within_spread``, the median over
      SMs and calls of one SM's own CTAs' spread (its latest less its earliest CTA);
    * ``by_ctas``: the mean loop end of the SMs that ran 1, 2, 3, ... CTAs (the first call's counts);
    * ``sm_mean``: each SM's mean over all calls (ns), for plots and later analysis.

    Example (SM 1 always ends 100 ns after SM 0):
        >>> e = sm_effect([{0: [500], 1: [600]}, {0: [520], 1: [620]}, {0: [480], 1: [580]}])
        >>> e["split_half_r"], e["sm_spread"], e["by_ctas"]
        (1.0, 100.0, {1: 550.0})
    """
    if len(calls) < 2:
        raise ValueError(f"calls: expected at least two traced calls, got {len(calls)}")
    sms = sorted(set.intersection(*(set(c) for c in calls)))
    if len(sms) < 2:
        raise ValueError(f"calls: expected at least two SMs that ran CTAs in every call, got {sms}")
    means = [{sm: statistics.fmean(c[sm]) for sm in sms} for c in calls]
    even = [statistics.fmean(m[sm] for m in means[0::2]) for sm in sms]
    odd = [statistics.fmean(m[sm] for m in means[1::2]) for sm in sms]
    overall = {sm: statistics.fmean(m[sm] for m in means) for sm in sms}
    try:
        r = statistics.correlation(even, odd)
    except statistics.StatisticsError:  # a constant half: no spread to correlate
        r = None
    by_ctas: dict[int, list[float]] = {}
    for sm in sms:
        by_ctas.setdefault(len(calls[0][sm]), []).append(overall[sm])
    return dict(
        split_half_r=None if r is None else round(r, 3),
        sm_spread=max(overall.values()) - min(overall.values()),
        within_spread=statistics.median(max(c[sm]) - min(c[sm]) for c in calls for sm in sms),
        by_ctas={n: statistics.fmean(v) for n, v in sorted(by_ctas.items())},
        sm_mean={str(sm): round(v) for sm, v in overall.items()},
    )


def summarize(calls: list[dict]) -> dict:
    """Medians over calls (``call_times`` results) of the call times, of the per-CTA medians and of the critical CTA's
    phases (None where no call has the phase).

    Example:
        >>> c = lambda s: dict(span=s, skew=1, tail=2, median=dict(loop=s, reduce=None), critical=dict(loop=s, reduce=3))
        >>> s = summarize([c(10), c(30), c(20)])
        >>> s["span"], s["median"]["loop"], s["median"]["reduce"], s["critical"]["reduce"]
        (20, 20, None, 3)
    """
    if not calls:
        raise ValueError("calls: expected at least one traced call")

    def med(vals):
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    out = {t: med([c[t] for c in calls]) for t in CALL_TIMES}
    for part in ("median", "critical"):
        out[part] = {ph: med([c[part].get(ph) for c in calls]) for ph in calls[0][part]}
    return out


def kind_call(ops, kind: str, x: torch.Tensor, w: torch.Tensor, w12, copies: int):
    """``(call(i), reference)`` of ``kind`` (``WIDE_KINDS`` or ``SMALL_KINDS``) over ``copies`` copies of its
    weights: ``call(i)`` multiplies ``x`` by copy ``i``; the reference is the float32 product with the weights the
    kernel reads (bf16, W12 decoded, or the Q view)."""
    if kind.startswith("bf16_"):
        bf16 = [w] + [w.clone() for _ in range(copies - 1)]
        variant = kind.removeprefix("bf16_")
        return (lambda i: bf16_variant(ops, variant, x, bf16[i])), x.float() @ w.float().T
    planes = [w12_planes(w12)] + [tuple(t.clone() for t in w12_planes(w12)) for _ in range(copies - 1)]
    if kind.startswith("w12"):
        if kind == "w12":
            call = lambda i: ops.w12_gemm_wide(x, *planes[i])  # noqa: E731
        else:
            call = lambda i: w12_variant(ops, kind.removeprefix("w12_"), x, *planes[i])  # noqa: E731
        return call, x.float() @ w12.to_bf16().float().T
    if kind == "q":
        call = lambda i: ops.q_gemm_wide(x, planes[i][0], planes[i][2])  # noqa: E731
    else:
        call = lambda i: q_variant(ops, kind.removeprefix("q_"), x, planes[i][0], planes[i][2])  # noqa: E731
    return call, x.float() @ w12.q_view().float().T


BYTES_KIND = {"w12": "cuda_w12_wide", "q": "cuda_q_wide", **{kind: f"cuda_{kind}" for kind in SMALL_KINDS}}


def trace_case(ops, model: str, lname: str, n: int, k: int, m: int, kind: str, args, gen, device) -> dict:
    """``args.reps`` traced calls of ``kind`` (``WIDE_KINDS``: the wide kernel; ``SMALL_KINDS``: that entry point, traced
    where it runs the persistent kernel or the row tiles) at ``m`` rows on cold copies of a Gaussian ``[n, k]`` weight, the
    first call's product checked against float32; the row of the JSON."""
    from specdec.formats import W12Tensor

    w = (torch.randn(n, k, generator=gen, device=device) * 0.02).to(torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    copies = weight_copies(weight_bytes(BYTES_KIND[kind], n, k, w12), args.l2_bytes, args.l2_factor)
    x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
    call, ref = kind_call(ops, kind, x, w, w12, copies)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    if kind in WIDE_KINDS:
        plan = ops.wide_plan(kind, m, n, k, sms)
        ctas = plan["ctas_x"] * plan["k_splits"]
    else:
        plan = ops.launch_plan(kind, m, n, k, sms)
        ctas = plan["ctas_x"]  # a persistent plan's CTAs (its k_splits: the most pieces of a row block), or the row tiles
    row = dict(model=model, linear=lname, kind=kind, N=n, K=k, M=m, ctas=ctas, k_splits=plan["k_splits"], copies=copies)
    if ctas > args.trace_ctas:
        row["error"] = f"{ctas} CTAs: the trace holds {args.trace_ctas}"
        return row
    y = call(0).float()
    # cuBLAS bf16's own error on the same operands sets the scale, as in bench_wide_w12's product checks
    operand = w if kind.startswith("bf16_") else w12.to_bf16() if kind.startswith("w12") else w12.q_view()
    err_ref = (F.linear(x, operand).float() - ref).abs().max().item()
    row["product_ok"] = bool(((y - ref).abs() <= 2 * err_ref + ref.abs() * 2**-7).all())
    for i in range(1, copies):  # every copy once before the traced calls
        call(i)
    calls, by_sm = [], []
    for rep in range(args.reps):
        ops.wide_trace_reset(device)
        call(rep % copies)
        records = ops.wide_trace_read(ctas).tolist()
        if not any(r[FIELDS.index("start")] for r in records):
            row["error"] = (
                "no CTA recorded: the call ran a kernel without the trace (the split-K tensor-map kernel, or a fallback)"
            )
            return row
        calls.append(call_times(records))
        if not calls[-1]["persistent"]:
            by_sm.append(sm_loop_ends(records))
    row["calls"] = calls
    row["persistent"] = calls[0]["persistent"]
    if len(by_sm) >= 2:
        row["sm_effect"] = sm_effect(by_sm)
    # the CTAs that ran: a persistent plan's ctas_x x k_splits counts the records read (its k_splits is the most runs
    # a row block is cut into), not CTAs
    row.update(ctas=calls[0]["ctas"], k_splits=calls[0]["k_splits"])
    row.update(summarize(calls))
    sync(device)
    return row


def smoke_rows() -> list[dict]:
    """A made-up trace (CPU): one row block split in two on two CTAs and one without splits, through the same
    arithmetic as a GPU run."""
    split = [
        [100, 900, 1000, 1100, 1300, 1500, 0, 1600, 0 | 0 << 16 | 0 << 32 | 2 << 40, 0, 0, 0],
        [150, 1200, 1300, 1400, 1600, 1800, 2300, 2500, 1 | 1 << 16 | 1 << 32 | 2 << 40, 0, 0, 0],
    ]
    whole = [[100, 1900, 2000, 2100, 0, 0, 0, 2600, 3 | 0 << 16 | 1 << 32 | 1 << 40, 1500, 1950, 1800]]

    def persistent(start: int, ring_done: int, end: int, loop: int, wait: int, epilogue: int, segments: int) -> list[int]:
        rec = dict(start=start, ring_done=ring_done, end=end, meta=1 << 40, seg_loop=loop, seg_wait=wait)
        rec.update(seg_epilogue=epilogue, segments=segments)
        return _fields(**rec)

    runs = [persistent(100, 2100, 2400, 1500, 100, 300, 3 | 2 << 16), persistent(120, 2000, 2600, 1400, 150, 350, 2 | 2 << 16)]
    rows = []
    for lname, recs in (("split", split), ("whole", whole), ("persistent", runs)):
        calls = [call_times(recs)]
        row = dict(model="made-up", linear=lname, kind="w12", M=32, ctas=len(recs), k_splits=calls[0]["k_splits"], calls=calls)
        rows.append(dict(row, persistent=calls[0]["persistent"], **summarize(calls)))
    # the split case's SMs over two made-up calls, the second one's loops 40 ns longer: the by-SM arithmetic and its plot
    later = [list(r) for r in split]
    for r in later:
        r[FIELDS.index("ring_done")] += 40
    rows[0]["sm_effect"] = sm_effect([sm_loop_ends(split), sm_loop_ends(later)])
    return rows


def summary_lines(result: dict) -> list[str]:
    lines = [f"kernels' phases (us; median over calls; per-CTA median / the CTA that ends last), {result['device']}"]
    lines.append("model linear M kind ctas splits: span tail | " + " ".join(PHASES + LAGS))
    names = PERSISTENT_PHASES + EPILOGUE_PARTS
    lines.append("  persistent: span tail | " + " ".join(names) + " (segments and partial_segments: counts, not us)")
    for r in result["rows"]:
        head = f"{r['model']} {r['linear']} {r['M']} {r['kind']} {r.get('ctas')} {r.get('k_splits', '-')}"
        if "error" in r:
            lines.append(f"{head}: {r['error']}")
            continue

        def us(v, ph=""):
            return "-" if v is None else f"{v:g}" if ph in ("segments", "partial_segments") else f"{v / 1e3:.1f}"

        names = PERSISTENT_PHASES + EPILOGUE_PARTS if r.get("persistent") else PHASES + LAGS
        head += " persistent" if r.get("persistent") else ""
        cells = " ".join(f"{us(r['median'].get(ph), ph)}/{us(r['critical'].get(ph), ph)}" for ph in names)
        ok = "" if r.get("product_ok", True) else " PRODUCT OFF"
        lines.append(f"{head}: {us(r['span'])} {us(r['tail'])} | {cells}{ok}")
        e = r.get("sm_effect")
        if e:
            ctas = " ".join(f"{n}: {us(v)}" for n, v in e["by_ctas"].items())
            lines.append(
                f"  by SM: split-half r {e['split_half_r']}, spread of SM means {us(e['sm_spread'])} against "
                f"{us(e['within_spread'])} within an SM; loop end by CTAs an SM {ctas}"
            )
    return lines


def plot(result: dict, path: Path) -> str | None:
    try:
        plt = agg_pyplot()
    except ImportError:
        return "no matplotlib: no plot"
    rows = [r for r in result["rows"] if "error" not in r]
    if not rows:
        return "no traced calls: no plot"
    by_sm = [r for r in rows if r.get("sm_effect") and r["M"] == min(x["M"] for x in rows)]
    if by_sm:
        fig, (ax, ax_sm) = plt.subplots(
            2, 1, figsize=(10, 0.45 * len(rows) + 5.0), gridspec_kw=dict(height_ratios=[0.45 * len(rows) + 1.5, 3.5])
        )
    else:
        fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.5))
    shown = ("loop", "sums", "partial", "count", "reduce", "store")
    shown_persistent = ("loop", "wait_warps", "epilogue", "between", "finish")
    palette = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")
    colors = dict(zip(dict.fromkeys(shown + shown_persistent), palette))
    labels, labelled = [], set()
    for i, r in enumerate(rows):
        left = 0.0
        for ph in shown_persistent if r.get("persistent") else shown:
            v = r["critical"].get(ph)
            if v is None:
                continue
            ax.barh(i, v / 1e3, left=left, color=colors[ph], label=None if ph in labelled else ph)
            labelled.add(ph)
            left += v / 1e3
        ax.plot([r["span"] / 1e3], [i], marker="|", color="black", ms=12)
        how = "persistent" if r.get("persistent") else f"/ {r['k_splits']}"
        labels.append(f"{r['linear']} {r['M']} {r['kind']} ({r['ctas']} CTAs {how})")
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("us from the CTA's start (bars: the CTA that ends last; tick: the call's span)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"phases of one call, {result['device']} ({result.get('library', '')})", fontsize=9)
    for r in by_sm:
        means = sorted((int(sm), v / 1e3) for sm, v in r["sm_effect"]["sm_mean"].items())
        ax_sm.plot([m[0] for m in means], [m[1] for m in means], marker=".", lw=0.8, label=f"{r['linear']} {r['kind']}")
    if by_sm:
        ax_sm.set_xlabel("SM id")
        ax_sm.set_ylabel("mean K-loop end, us")
        ax_sm.set_title(f"each SM's CTAs' loop end, mean over the calls, at {by_sm[0]['M']} rows", fontsize=9)
        ax_sm.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "wide_trace.json"))
    ap.add_argument("--smoke", action="store_true", help="CPU: the phase arithmetic on a made-up trace")
    ap.add_argument("--models", default="qwen3-8b")
    ap.add_argument("--linears", default=",".join(LINEARS), help=f"comma-separated, of {','.join(LINEARS)}")
    ap.add_argument("--rows", default="32,64", help="comma-separated row counts (17 to 128; 1 to 16 for the 1-16 token kinds)")
    ap.add_argument("--kinds", default="w12,q", help=f"comma-separated, of {','.join(WIDE_KINDS + SMALL_KINDS)}")
    ap.add_argument("--reps", type=int, default=9, help="traced calls a case (median)")
    ap.add_argument("--l2-factor", type=float, default=3.0, help="cold copies span this many times the L2")
    ap.add_argument("--budget-s", type=float, default=40.0, help="no new case starts after this many seconds")
    ap.add_argument("--plot-only", default=None, help="redraw the PNG of an existing JSON and exit")
    args = ap.parse_args(argv)
    if args.plot_only:
        return redraw(plot, args.plot_only)
    linears = [v.strip() for v in args.linears.split(",") if v.strip()]
    kinds = [v.strip() for v in args.kinds.split(",") if v.strip()]
    if not linears or any(v not in LINEARS for v in linears):
        ap.error(f"--linears: expected names of {LINEARS}, got {args.linears!r}")
    if not kinds or any(v not in WIDE_KINDS + SMALL_KINDS for v in kinds):
        ap.error(f"--kinds: expected names of {WIDE_KINDS + SMALL_KINDS}, got {args.kinds!r}")
    if any(v in WIDE_KINDS for v in kinds) and any(v in SMALL_KINDS for v in kinds):
        ap.error(f"--kinds: expected the wide kinds {WIDE_KINDS} or the 1-16 token ones {SMALL_KINDS}, got both")
    try:
        ms = [int(v) for v in args.rows.split(",")]
    except ValueError:
        ap.error(f"--rows: expected comma-separated integers, got {args.rows!r}")
    lo, hi = (17, 128) if kinds[0] in WIDE_KINDS else (1, 16)
    if not ms or any(not lo <= m <= hi for m in ms):
        ap.error(f"--rows: expected row counts from {lo} to {hi} (the range of the kinds {kinds}), got {ms}")
    if args.reps < 1:
        ap.error(f"--reps: expected at least 1, got {args.reps}")
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    t_start = time.time()
    if args.smoke:
        result = dict(device="cpu (a made-up trace: nothing measured)", library="none", rows=smoke_rows(), not_run=[])
    else:
        device = cold_weight_device(args, ap)
        from specdec.kernels.cuda import ops

        if ops.wide_trace_fields() < len(FIELDS):
            ap.error("needs $SPECDEC_CUDA_KERNELS naming a library built with -DSPECDEC_WIDE_TRACE=1")
        args.trace_ctas = ops.wide_trace_ctas()
        gen = torch.Generator(device=device).manual_seed(0)
        rows, not_run = [], []
        for model in args.models.split(","):
            shapes = linear_shapes(model)
            for lname in linears:
                n, k = shapes[lname]
                for m in ms:
                    for kind in kinds:
                        if time.time() - t_start > args.budget_s:
                            not_run.append(f"{model}/{lname}/{m}/{kind}")
                            continue
                        rows.append(trace_case(ops, model, lname, n, k, m, kind, args, gen, device))
                torch.cuda.empty_cache()
        result = dict(
            device=torch.cuda.get_device_name(device),
            library=str(library_path()),
            weights="random Gaussian, std 0.02 (bf16), W12 encoded from them",
            l2_bytes=args.l2_bytes,
            l2_factor=args.l2_factor,
            reps=args.reps,
            programmatic_launch=pdl_mode(),
            rows=rows,
            not_run=not_run,
        )
    result["wall_s"] = time.time() - t_start
    report(args.out, result, prov, plot, summary_lines)
    bad = [r for r in result["rows"] if "error" in r or not r.get("product_ok", True)]
    for r in bad:
        print(f"FAILED {r['linear']} M={r['M']} {r['kind']}: {r.get('error', 'product off the float32 reference')}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
