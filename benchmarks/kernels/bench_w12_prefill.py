"""W12 linears past the skinny kernels' rows (prefills): the fused Triton kernel against decode-then-cuBLAS.

Up to 128 rows a W12 linear runs the CUDA kernels that decode in registers (bound by the weights' bytes). Past that
the library runs the fused Triton kernel (``w12_linear``'s ``"triton"`` path), which decodes every weight tile again
for each tile of rows; ``"dequant"`` decodes the weight once a call into bf16 (``specdec.kernels.w12_dequant``, in
chunks of ``DEQUANT_CHUNK_BYTES``) and multiplies it with cuBLAS. This times, for each Qwen3 layer linear at M rows
(warm: at these widths the GEMMs are bound by their FLOPs, not by the weights' first read):

* ``cublas_bf16``: ``F.linear`` on the bf16 weight (what a bf16 model runs; the compute reference);
* ``triton``: ``w12_linear(..., backend="triton")``;
* ``dequant``: ``w12_linear(..., backend="dequant")``;
* ``torch``: ``w12_linear(..., backend="torch")`` (``to_bf16()`` in PyTorch ops, then ``F.linear``);
* ``decode_only``: ``w12_dequant`` of the whole weight (what ``dequant`` adds to ``cublas_bf16``).

Checks before timing, per linear: ``w12_dequant`` gives the weight bit for bit (``torch.equal`` on the bits), and every
variant's product is within bf16's rounding of the fp32 product (``dequant`` equals ``cublas_bf16`` exactly where the
weight is one chunk). Prints, per M, a prefill's GEMM time (36 layers x the four linears) for each variant and the
fewest rows from which ``dequant`` beats ``triton`` on every linear; writes JSON and a plot. Random weights with the
format's special values planted (``bench_roofline.planted_weight``), labelled so. The head is left out: at a prefill
its rows are the generated positions', not the prompt's (pass ``--linears`` to add ``lm_head``).

Usage (repository root, GPU): ``python3 -m benchmarks.kernels.bench_w12_prefill --out $OUT/w12_prefill.json`` (~60 s
on one H200). CPU smoke: ``--smoke`` (tiny shapes under ``TRITON_INTERPRET=1``; times mean nothing there).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import agg_pyplot, median_time_ms, provenance, provenance_line, redraw, report
from benchmarks.kernels.bench_roofline import linear_shapes, planted_weight
from specdec.formats import w12 as w12_format
from specdec.formats.w12 import W12Tensor, w12_linear
from specdec.kernels.w12_dequant import w12_dequant

ROWS = (128, 256, 512, 1024, 2048, 4096)
LINEARS = ("qkv", "o", "gate_up", "down")
LAYERS = 36
VARIANTS = ("cublas_bf16", "triton", "dequant", "torch", "decode_only")


def parse_ints(text: str, name: str) -> tuple[int, ...]:
    """Comma-separated positive ints; ValueError naming the argument otherwise.

    Example:
        >>> parse_ints("128,256", "--rows")
        (128, 256)
    """
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{name}: expected comma-separated positive ints, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{name}: expected comma-separated positive ints, got {text!r}")
    return values


def variant_calls(w: torch.Tensor, w12: W12Tensor) -> dict:
    """name -> ``x -> y`` for the product variants of :data:`VARIANTS` (``decode_only`` takes no ``x``)."""
    planes = (w12.ae, w12.nib, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits)
    k = w.shape[1]
    return {
        "cublas_bf16": lambda x: F.linear(x, w),
        "triton": lambda x: w12_linear(x, w12, backend="triton"),
        "dequant": lambda x: w12_linear(x, w12, backend="dequant"),
        "torch": lambda x: w12_linear(x, w12, backend="torch"),
        "decode_only": lambda x: w12_dequant(*planes, k=k),
    }


def check_product(got: torch.Tensor, ref32: torch.Tensor) -> str | None:
    """None when ``got`` is within bf16 rounding of the fp32 product ``ref32`` (relative 2^-7 plus a small absolute
    slack for sums that cancel), else what is wrong."""
    err = (got.float() - ref32).abs()
    bound = ref32.abs() * 2**-7 + 1e-2 * ref32.abs().mean().clamp_min(1e-6)
    if not bool(torch.isfinite(got).all()):
        return "non-finite output"
    if not bool((err <= bound).all()):
        return f"off the fp32 product by {err.max().item():.3g} (bound {bound.max().item():.3g})"
    return None


def crossover(rows: list[dict], linears: tuple[str, ...], rows_list: tuple[int, ...]) -> int | None:
    """The fewest measured rows from which ``dequant`` is faster than ``triton`` on every linear at every larger M."""
    best = None
    for m in sorted(rows_list, reverse=True):
        at = [r for r in rows if r["M"] == m and r["linear"] in linears]
        if len(at) != len(linears) or not all(
            "dequant_ms" in r and "triton_ms" in r and r["dequant_ms"] < r["triton_ms"] for r in at
        ):
            break
        best = m
    return best


def prefill_ms(rows: list[dict], m: int, variant: str, linears: tuple[str, ...]) -> float:
    """A prefill's GEMM milliseconds at ``m`` rows: LAYERS x the layer linears (the head once where measured)."""
    t = {r["linear"]: r.get(f"{variant}_ms") for r in rows if r["M"] == m}
    if any(t.get(name) is None for name in linears):
        return float("nan")
    return sum((1 if name == "lm_head" else LAYERS) * t[name] for name in linears)


def plot(result: dict, path: Path) -> str | None:
    rows = result["rows"]
    if not rows:
        return "no plot: no rows"
    plt = agg_pyplot()
    linears = result["linears"]
    fig, axes = plt.subplots(1, len(linears), figsize=(4 * len(linears), 3.6), squeeze=False)
    for ax, name in zip(axes[0], linears):
        at = sorted((r for r in rows if r["linear"] == name), key=lambda r: r["M"])
        for v in ("cublas_bf16", "triton", "dequant", "torch"):
            pts = [(r["M"], r[f"{v}_ms"] / r["cublas_bf16_ms"]) for r in at if f"{v}_ms" in r and "cublas_bf16_ms" in r]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=v)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{result['model']} {name}")
        ax.set_xlabel("rows M")
        ax.set_ylabel("time / cuBLAS bf16")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"W12 past 128 rows ({result['device']}; {result['weights']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def summary(result: dict) -> list[str]:
    linears = tuple(result["linears"])
    lines = [f"prefill GEMM time, ms ({LAYERS} layers x {', '.join(linears)}), {result['device']}"]
    lines.append("    M  " + "  ".join(f"{v:>11s}" for v in VARIANTS[:4]) + "   dequant / triton")
    for m in result["rows_measured"]:
        ms = {v: prefill_ms(result["rows"], m, v, linears) for v in VARIANTS[:4]}
        lines.append(f"{m:5d}  " + "  ".join(f"{ms[v]:11.2f}" for v in VARIANTS[:4]) + f"   {ms['dequant'] / ms['triton']:.2f}")
    lines.append(f"dequant faster than triton on every linear from M = {result['dequant_from_rows']} on (None: at no M measured)")
    lines += [f"FAILED {f}" for f in result["failed"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "w12_prefill.json"))
    ap.add_argument("--model", default="qwen3-8b", help="a key of specdec.models.shapes.SHAPES")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated row counts M")
    ap.add_argument("--linears", default=",".join(LINEARS), help="of qkv, o, gate_up, down, lm_head")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=120.0, help="no new linear starts after this many seconds")
    ap.add_argument("--smoke", action="store_true", help="CPU: tiny shapes under TRITON_INTERPRET=1")
    ap.add_argument("--plot-only", metavar="JSON", help="redraw the plot of a result file and exit")
    args = ap.parse_args(argv)
    if args.plot_only:
        return redraw(plot, args.plot_only)
    try:
        rows_list = parse_ints(args.rows, "--rows")
        linears = tuple(args.linears.split(","))
    except ValueError as err:
        ap.error(str(err))
    if args.reps < 1:
        ap.error(f"--reps: expected >= 1, got {args.reps}")
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    if args.smoke:
        device, shapes = torch.device("cpu"), {"o": (40, 96), "gate_up": (72, 96)}
        linears, rows_list, args.reps = tuple(shapes), (4, 8), 1
    else:
        if not torch.cuda.is_available():
            ap.error("needs CUDA; use --smoke on a CPU")
        device = torch.device("cuda")
        known = linear_shapes(args.model)
        unknown = [name for name in linears if name not in known]
        if unknown:
            ap.error(f"--linears: expected names of {tuple(known)}, got {unknown}")
        shapes = {name: known[name] for name in linears}
    gen = torch.Generator(device=device).manual_seed(0)
    t0 = time.time()
    rows, failed, not_run = [], [], []
    for name, (n, k) in shapes.items():
        if time.time() - t0 > args.budget_s:
            not_run.append(name)
            continue
        w = planted_weight(n, k, gen, device)
        w12 = W12Tensor.from_bf16(w)
        calls = variant_calls(w, w12)
        decoded = calls["decode_only"](None)
        if not torch.equal(decoded.view(torch.int16), w.view(torch.int16)):
            failed.append((name, "decode", "w12_dequant is not the weight bit for bit"))
            continue
        del decoded
        one_chunk = 2 * n * k <= w12_format.DEQUANT_CHUNK_BYTES
        for m in rows_list:
            x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
            ref32 = F.linear(x.float(), w.float())
            row = dict(
                linear=name, N=n, K=k, M=m, escapes=w12.num_escapes, chunks=-(-2 * n * k // w12_format.DEQUANT_CHUNK_BYTES)
            )
            outs = {}
            for v in VARIANTS:
                if v == "decode_only":
                    continue
                outs[v] = calls[v](x)
                wrong = check_product(outs[v], ref32)
                if wrong:
                    row[f"{v}_error"] = wrong
                    failed.append((name, m, v, wrong))
            if one_chunk and not torch.equal(outs["dequant"], outs["cublas_bf16"]):
                row["dequant_error"] = "not cuBLAS's product on the same weight, bit for bit"
                failed.append((name, m, "dequant", row["dequant_error"]))
            del outs, ref32
            for v in VARIANTS:
                if f"{v}_error" not in row:
                    row[f"{v}_ms"] = median_time_ms(lambda v=v, x=x, calls=calls: calls[v](x), args.reps, device=device)
            row["tflops_cublas_bf16"] = 2e-9 * m * n * k / row["cublas_bf16_ms"] if "cublas_bf16_ms" in row else None
            rows.append(row)
        print(f"{name}: done ({time.time() - t0:.0f} s)", flush=True)
        del w, w12, calls
    measured = tuple(m for m in rows_list if any(r["M"] == m for r in rows))
    result = dict(
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        model=args.model if not args.smoke else "smoke",
        weights="random Gaussian (std 0.02) with zeros, subnormals and outliers planted, warm",
        dequant_chunk_bytes=w12_format.DEQUANT_CHUNK_BYTES,
        layers=LAYERS,
        linears=list(linears),
        rows_measured=list(measured),
        rows=rows,
        dequant_from_rows=crossover(rows, linears, measured),
        not_run=not_run,
        failed=[" ".join(map(str, f)) for f in failed],
    )
    report(args.out, result, prov, plot, summary)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
