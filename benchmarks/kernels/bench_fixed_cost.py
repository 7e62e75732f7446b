"""What a weight-streaming GEMM costs beyond its bytes: cold against warm L2, and time = fixed + bytes / rate.

Two questions the roofline (``bench_roofline.py``) cannot answer:

1. **Warm or cold weights.** The roofline replays one weight matrix call after call. A matrix smaller than the L2
   (50 MB on the H200) is then partly read from the L2, a kernel that caches weights by default (cuBLAS) gains from
   it, and one that marks them evict-first (the tensor-map kernels) gains less. In a decode step every linear reads
   different weights. Here each kernel is timed both ways on the Qwen3-8B and Qwen3-32B shapes: *warm* (one
   matrix, as the roofline) and *cold* (the graph cycles through enough identical copies that they span at least
   ``--l2-factor`` times the L2, so no call finds its weights there).
2. **Fixed cost and streaming rate.** On cold weights at ``N`` rows and widths ``K`` of 1k-16k, each kernel's time
   is fitted as ``a + bytes / b`` (least squares): ``a`` is what a call costs whatever its bytes (launch, pipeline
   fill, split-K reduction, tail), ``b`` the rate it streams at, quoted against the copy bandwidth of the same run.
   An empty kernel's time in the same kind of graph is the launch floor. Bytes are counted as the roofline counts
   them (``bench_roofline.weight_bytes``: bf16 2 N K; W12 every plane, bases and escapes included; the Q view its
   ``ae`` plane and bases).
3. **The read floor.** The fastest kernel that only reads the same bytes, cold, in the same kind of graph
   (``read_floor.py``: the best of a few plain read kernels, each checked to have read every byte once), at every
   byte count a model shape's kernels read and over the sweep (fitted as the kernels are): what the hardware leaves
   to one call of those bytes (launch, the first loads' latency, the ramp, the tail). Each kernel's cold time over
   the floor of its own bytes (``x_read_floor``) is what a better kernel of that format could still remove; the
   floor over ``bytes / copy bandwidth`` is what no kernel can.

Kernels (``--kernels`` picks some): cuBLAS bf16 (``F.linear``), and the tensor-map CUDA kernels of
``specdec.kernels.cuda``: bf16 v2, W12 exact v7, Q view v2, the same three in persistent CTAs (bf16 v3, W12 v8,
Q v3), in CTAs of one 16-row tile over the whole of K (bf16 v4, W12 v9, Q v4) and the defaults that take the row tiles
where they pay (``rows_pay``: bf16 v5, W12 v10, Q v5); v7, bf16 v2 and Q v3 only when ``--kernels`` names them. Every kernel's output on the first copy is checked against the float32 product (the roofline's
tolerance) before it is timed; the decode itself is checked bit for bit by the roofline. A library built with
``-DSPECDEC_WIDE_ABLATE`` (parts left out for timing, ``bench_wide_w12.ABLATED_PARTS``; ``ablation`` in the JSON)
has the kernels its bits reach (``ABLATED_KINDS``: the row tiles' x box, the tensor-map kernels' x box, both kernels'
consumers' bank conflicts or their loads and math) timed
unchecked (``unchecked`` rows).
Weights are random (Gaussian, std 0.02), labelled so.

Usage (repository root, GPU): ``python3 -m benchmarks.kernels.bench_fixed_cost --out $OUT/fixed_cost.json``
(~70 s after torch start on one H200; writes JSON and a PNG; no new case starts past ``--budget-s``).
CPU smoke: ``--smoke`` (reference paths, tiny shapes; times mean nothing there).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import agg_pyplot, copy_bandwidth, provenance, provenance_line, redraw, report
from benchmarks.kernels.bench_roofline import (
    bf16_variant,
    linear_shapes,
    q_variant,
    sync,
    time_per_call,
    w12_planes,
    w12_v7,
    w12_v8,
    w12_v9,
    w12_variant,
    weight_bytes,
)
from benchmarks.kernels.bench_wide_w12 import ablation_name, library_ablation
from benchmarks.kernels.read_floor import Cycle, attach_read_floors, cold_weight_device, fit_line, weight_copies

KERNELS = (  # cuBLAS first, then the CUDA kinds
    "cublas_bf16",
    "cuda_bf16_v2",
    "cuda_w12_v7",
    "cuda_q_v2",
    "cuda_bf16_v3",
    "cuda_w12_v8",
    "cuda_q_v3",
    "cuda_bf16_v4",
    "cuda_w12_v9",
    "cuda_q_v4",
    "cuda_bf16_v5",
    "cuda_w12_v10",
    "cuda_q_v5",
)
# Timed unless --kernels names others: cuBLAS, the row tiles, the kernels the defaults fall back to and the defaults.
DEFAULT_KERNELS = (
    "cublas_bf16",
    "cuda_q_v2",
    "cuda_bf16_v3",
    "cuda_w12_v8",
    "cuda_bf16_v4",
    "cuda_w12_v9",
    "cuda_q_v4",
    "cuda_bf16_v5",
    "cuda_w12_v10",
    "cuda_q_v5",
)
# The kinds that run the row-tile kernels (always, or where rows_pay takes them).
ROW_TILE_KINDS = ("cuda_bf16_v4", "cuda_w12_v9", "cuda_q_v4", "cuda_bf16_v5", "cuda_w12_v10", "cuda_q_v5")
# SPECDEC_WIDE_ABLATE's bits that reach a kernel timed here (bench_wide_w12.ABLATED_PARTS) -> the kinds they reach: 64
# the row tiles' x box; 128 the 64-row tensor-map kernels' x box, which every CUDA kind here runs or falls back to (the
# row-tile kinds where K % 32 != 0); 256 the bank conflicts of both kernels' consumers and 1024 their loads and math
# (the ring alone), every CUDA kind here. No other bit reaches a kernel timed here.
ABLATED_KINDS = {64: ROW_TILE_KINDS, 128: KERNELS[1:], 256: KERNELS[1:], 1024: KERNELS[1:]}


def ablated(ablation: int, kind: str) -> bool:
    """Whether a library built with ``-DSPECDEC_WIDE_ABLATE=ablation`` leaves a part out of ``kind``'s kernels.

    Example:
        >>> ablated(64, "cuda_q_v5"), ablated(64, "cuda_q_v2"), ablated(128, "cuda_q_v2"), ablated(1, "cuda_q_v5")
        (True, False, True, False)
        >>> ablated(1024, "cuda_w12_v10"), ablated(1024, "cublas_bf16")
        (True, False)
    """
    return any(ablation & bit and kind in kinds for bit, kinds in ABLATED_KINDS.items())


MS = (1, 8, 16)
SWEEP_MS = (1, 8)
SWEEP_NS = (4096, 16384)
SWEEP_KS = (1024, 2048, 4096, 8192, 16384)
SMOKE_SHAPES = {"smoke": {"a": (40, 64), "b": (24, 128)}}
SMOKE_SWEEP_NS = (24,)
SMOKE_SWEEP_KS = (64, 128, 256)


def kernel_calls(
    ops, w: torch.Tensor, w12, copies: int, kinds: Sequence[str] = KERNELS
) -> dict[str, tuple[Callable[[torch.Tensor, int], torch.Tensor], bool]]:
    """kind -> (``call(x, copy)``, compares with the Q view's product) over ``copies`` identical copies of ``w``
    (and of ``w12``, its W12 encoding), for the kernels ``kinds`` (names of ``KERNELS``) in their order: each shape's
    kernels are timed in it, so a later-timed column can be checked for order effects by reversing it."""
    bf16 = [w] + [w.clone() for _ in range(copies - 1)]
    planes = [w12_planes(w12)] + [tuple(t.clone() for t in w12_planes(w12)) for _ in range(copies - 1)]
    q = [(p[0], p[2]) for p in planes]  # the Q view reads the ae plane and the bases only
    calls = {
        "cublas_bf16": (lambda x, i: F.linear(x, bf16[i]), False),
        "cuda_bf16_v2": (lambda x, i: bf16_variant(ops, "v2", x, bf16[i]), False),
        "cuda_w12_v7": (lambda x, i: w12_v7(ops, x, *planes[i]), False),
        "cuda_q_v2": (lambda x, i: q_variant(ops, "v2", x, *q[i]), True),
        "cuda_bf16_v3": (lambda x, i: bf16_variant(ops, "v3", x, bf16[i]), False),
        "cuda_w12_v8": (lambda x, i: w12_v8(ops, x, *planes[i]), False),
        "cuda_q_v3": (lambda x, i: q_variant(ops, "v3", x, *q[i]), True),
        "cuda_bf16_v4": (lambda x, i: bf16_variant(ops, "v4", x, bf16[i]), False),
        "cuda_w12_v9": (lambda x, i: w12_v9(ops, x, *planes[i]), False),
        "cuda_q_v4": (lambda x, i: q_variant(ops, "v4", x, *q[i]), True),
        "cuda_bf16_v5": (lambda x, i: bf16_variant(ops, "v5", x, bf16[i]), False),
        "cuda_w12_v10": (lambda x, i: w12_variant(ops, "v10", x, *planes[i]), False),
        "cuda_q_v5": (lambda x, i: q_variant(ops, "v5", x, *q[i]), True),
    }
    return {kind: calls[kind] for kind in kinds}


def checked(call, x: torch.Tensor, ref: torch.Tensor, err_ref: float) -> float:
    """Max |error| of ``call(x, 0)`` against ``ref``; raises when it is past the roofline's tolerance."""
    err = (call(x, 0).float() - ref).abs()
    tol = 2 * err_ref + ref.abs() * 2**-7
    if not bool((err <= tol).all()):
        raise AssertionError(f"output off the float32 product by {err.max().item():.3g} (tolerance {tol.min().item():.3g}+)")
    return err.max().item()


def time_shape(n: int, k: int, ms: Sequence[int], args, gen, device, ops, *, warm: bool) -> list[dict]:
    """One (N, K): every kernel at every M on cold weights (and warm ones too when ``warm``), then the read floor
    of every byte count those kernels read (kind ``read_floor``, ``M = 0``); each kernel row gets the floor of its
    own bytes (``read_floor_s``) and its cold time over it (``x_read_floor``). ``args.ablation``: the library's
    ``SPECDEC_WIDE_ABLATE`` (the kinds it reaches, ``ablated``, timed unchecked)."""
    from specdec.formats.w12 import W12Tensor

    w = (torch.randn(n, k, generator=gen, device=device) * 0.02).to(torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    w_q = w12.q_view()
    # sized by the fewest bytes a kernel reads, so every kernel's copies span at least l2_factor x the L2
    copies = weight_copies(min(weight_bytes(kind, n, k, w12) for kind in args.kernels), args.l2_bytes, args.l2_factor)
    calls = kernel_calls(ops, w, w12, copies, args.kernels)
    rows = []
    for m in ms:
        x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
        refs = {False: x.float() @ w.float().T, True: x.float() @ w_q.float().T}
        errs = {q: (F.linear(x, w if not q else w_q).float() - refs[q]).abs().max().item() for q in refs}
        for kind, (call, q_view) in calls.items():
            row = dict(kind=kind, N=n, K=k, M=m, weight_bytes=weight_bytes(kind, n, k, w12), copies=copies)
            try:
                if ablated(args.ablation, kind):  # wrong products by design: timed only
                    row["unchecked"] = True
                else:
                    row["err"] = checked(call, x, refs[q_view], errs[q_view])
                cold = Cycle(lambda i, call=call, x=x: call(x, i), copies)
                row["cold_s"] = time_per_call(cold, device, calls=max(args.calls, copies), reps=args.reps)
                if warm:
                    row["warm_s"] = time_per_call(lambda call=call, x=x: call(x, 0), device, calls=args.calls, reps=args.reps)
            except Exception as exc:  # one failing kernel must not hide the others' numbers
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
    del calls
    if device.type == "cuda":
        torch.cuda.empty_cache()
    floors = attach_read_floors(rows, args, gen, device, N=n, K=k) if args.read_floor else []
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows + floors


def kernel_list(text: str) -> tuple[str, ...]:
    """``--kernels``: comma-separated names of ``KERNELS``.

    Example:
        >>> kernel_list("cuda_w12_v8, cublas_bf16")
        ('cuda_w12_v8', 'cublas_bf16')
    """
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KERNELS]
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(f"--kernels: expected names of {KERNELS}, got {text!r}")
    return kinds


def empty_launch_s(device: torch.device, args) -> float:
    """Seconds per launch of a one-element kernel in a CUDA graph of ``args.calls`` launches (the launch floor)."""
    t = torch.zeros(1, device=device)
    return time_per_call(lambda: t.add_(1), device, calls=args.calls, reps=args.reps)


def fits(rows: list[dict], copy_bw: float) -> list[dict]:
    """Per (kind, N, M) of the sweep: ``cold_s = a + weight_bytes / b``, ``b`` also as a fraction of the copy bandwidth."""
    out = []
    for key in sorted({(r["kind"], r["N"], r["M"]) for r in rows if "cold_s" in r}):
        pts = [(r["weight_bytes"], r["cold_s"]) for r in rows if (r["kind"], r["N"], r["M"]) == key and "cold_s" in r]
        if len({p[0] for p in pts}) < 2:
            continue
        a, b = fit_line(*zip(*pts))
        resid = max(abs(s - (a + nb / b)) / s for nb, s in pts)
        out.append(
            dict(
                kind=key[0],
                N=key[1],
                M=key[2],
                fixed_s=a,
                rate_bytes_per_s=b,
                rate_frac_of_copy=b / copy_bw,
                max_rel_residual=resid,
            )
        )
    return out


def plot(result: dict, path: Path) -> str | None:
    """Cold time against weight bytes per kernel (points) with the fitted line, one panel per M; the copy floor dashed."""
    ms = sorted({f["M"] for f in result["fits"] if f["M"] > 0})  # M = 0: the read floor, drawn in every panel
    if not ms:
        return "no plot: no fits"
    try:
        plt = agg_pyplot()
    except ImportError as exc:
        return f"no plot: {exc}"
    fig, axes = plt.subplots(1, len(ms), figsize=(6 * len(ms), 4.5), squeeze=False)
    bw = result["copy_bandwidth_bytes_per_s"]
    for ax, m in zip(axes[0], ms):
        top = 0.0
        for i, kind in enumerate(dict.fromkeys(f["kind"] for f in result["fits"])):  # the kernels the run timed
            at = 0 if kind == "read_floor" else m
            color = "k" if kind == "read_floor" else f"C{i}"
            for n, marker in zip(sorted({r["N"] for r in result["sweep"]}), "os^"):
                pts = sorted(
                    (r["weight_bytes"], r["cold_s"])
                    for r in result["sweep"]
                    if (r["kind"], r["N"], r["M"]) == (kind, n, at) and "cold_s" in r
                )
                if not pts:
                    continue
                xs = [p[0] / 1e6 for p in pts]
                ax.plot(xs, [p[1] * 1e6 for p in pts], marker, color=color, label=f"{kind} N={n}")
                fit = next((f for f in result["fits"] if (f["kind"], f["N"], f["M"]) == (kind, n, at)), None)
                if fit:
                    ax.plot(
                        [0, xs[-1]],
                        [fit["fixed_s"] * 1e6, (fit["fixed_s"] + pts[-1][0] / fit["rate_bytes_per_s"]) * 1e6],
                        "-",
                        color=color,
                        alpha=0.5,
                    )
                top = max(top, xs[-1])
        if bw == bw:  # MB over the copy bandwidth, in us
            ax.plot([0, top], [0, top * 1e12 / bw], "k--", label=f"copy floor, {bw / 1e12:.2f} TB/s")
        empty = result.get("empty_launch_s")
        if empty:
            ax.axhline(empty * 1e6, color="grey", ls=":", label=f"empty kernel {empty * 1e6:.1f} us")
        ax.set_xlabel("weight MB read (cold)")
        ax.set_ylabel("us per call")
        ax.set_title(f"M = {m}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"fixed cost + bytes / rate, {result.get('device', '?')} (random weights)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def summary_lines(result: dict) -> list[str]:
    """The fits, then the warm/cold ratios of the model shapes, as a short table."""
    bw = result["copy_bandwidth_bytes_per_s"]
    lines = [f"copy {bw / 1e12:.2f} TB/s, empty kernel {result['empty_launch_s'] * 1e6:.2f} us a launch in a graph"]
    lines.append("kernel          N      M   fixed us   rate TB/s  of copy  max resid")
    for f in result["fits"]:
        lines.append(
            f"{f['kind']:14s} {f['N']:6d} {f['M']:3d}   {f['fixed_s'] * 1e6:7.2f}   {f['rate_bytes_per_s'] / 1e12:8.2f}   {f['rate_frac_of_copy']:6.2f}   {f['max_rel_residual']:6.1%}"
        )
    floors = [r for r in result["shapes"] if r["kind"] == "read_floor" and "cold_s" in r]
    if floors and bw == bw:
        lines.append("read floor        MB    cold us   bytes/copy us   floor / (bytes/copy)   fastest form")
        for r in floors:
            ideal = r["weight_bytes"] / bw
            lines.append(
                f"{r['model'] + ' ' + r['linear']:16s} {r['weight_bytes'] / 1e6:5.1f}   {r['cold_s'] * 1e6:7.2f}   {ideal * 1e6:12.2f}   {r['cold_s'] / ideal:19.2f}   {r['form']}"
            )
    lines.append("shape             M   kernel         warm us   cold us  cold/warm  cold x cuBLAS cold  x read floor")
    for r in result["shapes"]:
        if "cold_s" not in r or "warm_s" not in r:
            continue
        base = next(
            (
                b
                for b in result["shapes"]
                if (b["model"], b["linear"], b["M"], b["kind"]) == (r["model"], r["linear"], r["M"], "cublas_bf16")
            ),
            None,
        )
        vs = base["cold_s"] / r["cold_s"] if base and "cold_s" in base else float("nan")
        lines.append(
            f"{r['model'] + ' ' + r['linear']:17s} {r['M']:2d}   {r['kind']:13s} {r['warm_s'] * 1e6:8.1f}  {r['cold_s'] * 1e6:8.1f}   {r['cold_s'] / r['warm_s']:6.2f}   {vs:6.2f}x"
            f"   {r.get('x_read_floor', float('nan')):11.2f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "fixed_cost.json"))
    ap.add_argument("--smoke", action="store_true", help="CPU: reference paths, tiny shapes")
    ap.add_argument("--models", default="qwen3-8b,qwen3-32b")
    ap.add_argument(
        "--kernels",
        type=kernel_list,
        default=DEFAULT_KERNELS,
        help=f"comma-separated kernels to time, of {','.join(KERNELS)} (default: {','.join(DEFAULT_KERNELS)})",
    )
    ap.add_argument("--calls", type=int, default=20, help="calls per CUDA graph (at least the copies)")
    ap.add_argument("--reps", type=int, default=10, help="graph replays (median)")
    ap.add_argument("--l2-factor", type=float, default=3.0, help="cold copies span this many times the L2")
    ap.add_argument("--budget-s", type=float, default=120.0, help="no new case starts after this many seconds")
    ap.add_argument("--no-read-floor", dest="read_floor", action="store_false", help="skip the read floor (read_floor.py)")
    ap.add_argument("--plot-only", default=None, help="redraw the PNG of an existing JSON and exit")
    args = ap.parse_args(argv)
    if args.plot_only:
        return redraw(plot, args.plot_only)
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    device = cold_weight_device(args, ap)
    from specdec.kernels.cuda import ops

    args.ablation = library_ablation(ops, device)
    if args.ablation:
        print(
            f"a library built with SPECDEC_WIDE_ABLATE={args.ablation}: {ablation_name(args.ablation)}; "
            f"products of the kernels it reaches not checked",
            flush=True,
        )
    gen = torch.Generator(device=device).manual_seed(0)
    t_start = time.time()
    copy_bw = copy_bandwidth(device)
    over = lambda: time.time() - t_start > args.budget_s  # noqa: E731
    shapes_rows, sweep_rows, not_run = [], [], []
    shapes = SMOKE_SHAPES if args.smoke else {m: linear_shapes(m) for m in args.models.split(",")}
    for model, lins in shapes.items():
        for lname, (n, k) in lins.items():
            if over():
                not_run.append(f"{model}/{lname}")
                continue
            for r in time_shape(n, k, (1, 8, 16) if not args.smoke else (1, 8), args, gen, device, ops, warm=True):
                shapes_rows.append(dict(model=model, linear=lname, **r))
            print(f"{model} {lname}: done ({time.time() - t_start:.0f} s)", flush=True)
    for n in SMOKE_SWEEP_NS if args.smoke else SWEEP_NS:
        for k in SMOKE_SWEEP_KS if args.smoke else SWEEP_KS:
            if over():
                not_run.append(f"sweep N={n} K={k}")
                continue
            sweep_rows.extend(time_shape(n, k, SWEEP_MS, args, gen, device, ops, warm=False))
        print(f"sweep N={n}: done ({time.time() - t_start:.0f} s)", flush=True)
    sync(device)
    failed = [r for r in shapes_rows + sweep_rows if "error" in r]
    result = dict(
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (reference paths)",
        ablation=args.ablation,
        weights="random Gaussian, std 0.02 (bf16), W12 encoded from them",
        copy_bandwidth_bytes_per_s=copy_bw,
        l2_bytes=args.l2_bytes,
        l2_factor=args.l2_factor,
        calls_per_graph=args.calls,
        reps=args.reps,
        empty_launch_s=empty_launch_s(device, args),
        shapes=shapes_rows,
        sweep=sweep_rows,
        fits=fits(sweep_rows, copy_bw),  # fractions of copy are NaN off CUDA, where there is no copy bandwidth
        not_run=not_run,
        errors=len(failed),
        wall_s=time.time() - t_start,
    )
    report(args.out, result, prov, plot, summary_lines)
    for r in failed:
        print(f"FAILED {r['kind']} N={r['N']} K={r['K']} M={r['M']}: {r['error']}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
