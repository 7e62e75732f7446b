"""The dense 8B linears at verify widths (16-256 rows): which cuBLAS formulation reads the weights fastest.

A batched speculative pass runs the target's linears over 64-256 packed rows, where cuBLAS picks compute-shaped
tiles (192x192 at 128 rows in the engine's profile) and reads the weights at ~1.3x their time at 16 rows. This
times, on cold weights (copies spanning 3x the L2, as ``bench_fixed_cost.py``), each linear of the Qwen3-8B
layer and the head at R rows, three ways that compute the same product:

* ``linear``: ``F.linear(x, w)`` (what the targets run);
* ``swap``: ``(w @ x.T).T``, the product with the operands' roles exchanged (cuBLAS sees M = N, N = R);
* ``lt``: ``F.linear`` with ``torch.backends.cuda.preferred_blas_library("cublaslt")``.

Each variant's output is checked against ``linear``'s (bf16, relative 2^-7) before it is timed. Prints, per R, a
decode pass's GEMM time (36 layers x (qkv + o + gate_up + down) + head) for each variant against the weights'
read floor at the copy bandwidth, and writes JSON. Random weights, labelled so.

Usage (repository root, GPU): ``python3 -m benchmarks.kernels.bench_wide_linear --out $OUT/wide_linear.json`` (~40 s).
CPU smoke: ``--smoke`` (tiny shapes; times mean nothing there).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.common import copy_bandwidth, provenance, provenance_line, write_json
from benchmarks.kernels.bench_roofline import linear_shapes, time_per_call
from benchmarks.kernels.read_floor import DEFAULT_L2_BYTES, Cycle, weight_copies

ROWS = (16, 32, 64, 96, 128, 192, 256)
LAYERS = 36
VARIANTS = ("linear", "swap", "lt")


def variant_call(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``(x [R, K], w [N, K]) -> [R, N]`` for a name of ``VARIANTS``.

    Example:
        >>> x, w = torch.randn(3, 4), torch.randn(5, 4)
        >>> all(torch.allclose(variant_call(v)(x, w), x @ w.T, atol=1e-5) for v in VARIANTS)
        True
    """
    if name == "linear":
        return F.linear
    if name == "swap":
        return lambda x, w: (w @ x.T).T
    if name == "lt":

        def lt(x, w):
            before = torch.backends.cuda.preferred_blas_library()
            torch.backends.cuda.preferred_blas_library("cublaslt")
            try:
                return F.linear(x, w)
            finally:
                torch.backends.cuda.preferred_blas_library(before)

        return lt
    raise ValueError(f"variant: expected one of {VARIANTS}, got {name!r}")


def pass_ms(rows: list[dict], r: int, variant: str, shapes: dict) -> float:
    """A pass's GEMM milliseconds at ``r`` rows: LAYERS x the layer's linears + the head (``lm_head`` once)."""
    t = {row["linear"]: row[f"{variant}_s"] for row in rows if row["R"] == r and f"{variant}_s" in row}
    if set(t) != set(shapes):
        return float("nan")
    return 1e3 * (LAYERS * sum(v for k, v in t.items() if k != "lm_head") + t.get("lm_head", 0.0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "wide_linear.json"))
    ap.add_argument("--smoke", action="store_true", help="CPU: tiny shapes")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=60.0, help="no new shape starts after this many seconds")
    args = ap.parse_args(argv)
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    if args.smoke:
        device, shapes, rows_list = torch.device("cpu"), {"a": (40, 64), "lm_head": (24, 64)}, (4, 8)
        args.calls, args.reps = 2, 2
        variants = ("linear", "swap")  # the cuBLASLt switch is a CUDA setting
        dtype = torch.float32
    else:
        if not torch.cuda.is_available():
            ap.error("needs CUDA; use --smoke on a CPU")
        device, shapes, rows_list, variants, dtype = (
            torch.device("cuda"),
            linear_shapes("qwen3-8b"),
            ROWS,
            VARIANTS,
            torch.bfloat16,
        )
    l2 = torch.cuda.get_device_properties(device).L2_cache_size if device.type == "cuda" else DEFAULT_L2_BYTES
    gen = torch.Generator(device=device).manual_seed(0)
    copy_bw = copy_bandwidth(device)
    t0 = time.time()
    rows, failed, not_run = [], [], []
    for name, (n, k) in shapes.items():
        if time.time() - t0 > args.budget_s:
            not_run.append(name)
            continue
        w = (torch.randn(n, k, generator=gen, device=device) * 0.02).to(dtype)
        copies = weight_copies(2 * n * k, l2)
        ws = [w] + [w.clone() for _ in range(copies - 1)]
        for r in rows_list:
            x = torch.randn(r, k, generator=gen, device=device).to(dtype)
            ref = F.linear(x, w).float()
            row = dict(linear=name, N=n, K=k, R=r, copies=copies, weight_bytes=2 * n * k)
            for v in variants:
                call = variant_call(v)
                err = (call(x, w).float() - ref).abs()
                if not bool((err <= ref.abs() * 2**-7 + 1e-2).all()):
                    row[f"{v}_error"] = f"off linear's output by {err.max().item():.3g}"
                    failed.append((name, r, v))
                    continue
                row[f"{v}_s"] = time_per_call(
                    Cycle(lambda i, call=call, x=x, ws=ws: call(x, ws[i]), copies),
                    device,
                    calls=max(args.calls, copies),
                    reps=args.reps,
                )
            rows.append(row)
        del ws
        print(f"{name}: done ({time.time() - t0:.0f} s)", flush=True)
    floor_ms = (
        1e3
        * (
            LAYERS * sum(2 * n * k for m, (n, k) in shapes.items() if m != "lm_head")
            + 2 * shapes["lm_head"][0] * shapes["lm_head"][1]
        )
        / copy_bw
    )
    passes = {str(r): {v: pass_ms(rows, r, v, shapes) for v in variants} for r in rows_list}
    result = dict(
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        weights="random Gaussian, std 0.02, cold (copies spanning 3x the L2)",
        copy_bandwidth_bytes_per_s=copy_bw,
        layers=LAYERS,
        floor_ms=floor_ms,
        rows=rows,
        pass_gemm_ms=passes,
        not_run=not_run,
        errors=len(failed),
    )
    write_json(args.out, result, prov, indent=1)
    print(provenance_line(prov))
    print(f"GEMM time of a pass (ms; weights' read floor {floor_ms:.2f} ms at {copy_bw / 1e12:.2f} TB/s)")
    print("rows  " + "  ".join(f"{v:>8s}" for v in variants) + "   best x floor")
    for r in rows_list:
        ms = passes[str(r)]
        best = min(ms.values())
        print(f"{r:4d}  " + "  ".join(f"{ms[v]:8.2f}" for v in variants) + f"   {best / floor_ms:5.2f}")
    for f in failed:
        print(f"FAILED {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
