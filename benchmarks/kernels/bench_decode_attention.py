"""The decode step's attention alone: the dense target's cached attention by kernel, backend and mask form.

A one-token step of the lean Qwen3-8B target attends 1-16 new rows over a cache of ``max_seq_len`` slots under a mask
built from the committed length. This times :func:`specdec.models.dense.attend_cache` through SDPA with a boolean mask
(SDPA makes it additive on every call) and with the mask made additive once
(:func:`~specdec.kernels.attention.additive_mask`, what the dense runtime passes), under SDPA's own pick and each
backend that takes a mask: cuDNN, memory-efficient, math; and the split-KV Triton kernel
:func:`specdec.kernels.attention.decode_attention` (the dense runtime's default on CUDA; the interpreter on a CPU),
also with 8 warps a split program (at 64 query rows the default 4 spill).
Shapes: Qwen3-8B's heads (32 query heads, 8 KV heads, head_dim 128), 1 and 16 rows (the one-token and 16-row verify
steps), spans of 256 and 2048 slots, half of them committed. Each variant is checked against SDPA with the boolean
mask (max |diff|) before it is timed in a CUDA graph of ``--calls`` calls (median of ``--reps`` replays). Tensors are
random (labelled so).

Usage (repository root, GPU): ``python3 -m benchmarks.kernels.bench_decode_attention --out $OUT/decode_attention.json``
(~15 s after torch start on one H200). CPU: ``TRITON_INTERPRET=1 python3 -m benchmarks.kernels.bench_decode_attention
--smoke`` (tiny heads, the math backend and the Triton kernel in the interpreter; times mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from pathlib import Path

import torch

from benchmarks.common import agg_pyplot, provenance, report
from specdec.kernels.attention import additive_mask, decode_attention
from specdec.kernels.attention.split_kv import decode_attention_triton
from specdec.models.attention_kernel import attention_kernel
from specdec.models.dense import attend_cache, grouped_mask, prefix_attention_mask

HEADS = dict(num_heads=32, num_kv_heads=8, head_dim=128)
SMOKE_HEADS = dict(num_heads=4, num_kv_heads=2, head_dim=16)
ROWS = (1, 16)
SPANS = (256, 2048)
SMOKE_SPANS = (32,)
BACKENDS = ("cudnn", "efficient", "math")


def sdpa_backend(name: str):
    """The ``torch.nn.attention.sdpa_kernel`` context that allows only backend ``name`` (``None``: SDPA's own pick).

    Example:
        >>> with sdpa_backend(None):
        ...     pass
    """
    if name is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        {"cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]
    )


def case_tensors(rows: int, span: int, heads: dict, dtype, device, gen) -> dict:
    """Queries ``[1, H, rows, D]``, caches ``[1, Hkv, span, D]`` and the grouped boolean mask of a step whose committed
    prefix is half the span (the new rows causal after it)."""
    h, hkv, d = heads["num_heads"], heads["num_kv_heads"], heads["head_dim"]
    q = torch.randn(1, h, rows, d, generator=gen, device=device).to(dtype)
    k_cache, v_cache = (torch.randn(1, hkv, span, d, generator=gen, device=device).to(dtype) for _ in range(2))
    length = span // 2
    mask = prefix_attention_mask(length, rows, None, device)  # [1, 1, rows, length + rows]
    full = torch.zeros(1, 1, rows, span, dtype=torch.bool, device=device)
    full[..., : length + rows] = mask
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, mask=grouped_mask(full, h // hkv), length=length)


def variants(t: dict, backends) -> dict:
    """name -> call: ``attend_cache`` through SDPA with a boolean mask (the reference of the checks), then with the
    additive mask under SDPA's pick and each backend, then the split-KV kernel (the dense runtime's default on CUDA)."""
    add = additive_mask(t["mask"], t["q"].dtype)

    def sdpa(mask):
        with attention_kernel("sdpa"):
            return attend_cache(t["q"], t["k_cache"], t["v_cache"], mask)

    out = {"SDPA (bool mask)": lambda: sdpa(t["mask"]), "SDPA (additive mask)": lambda: sdpa(add)}
    for name in backends:

        def call(name=name):
            with sdpa_backend(name):
                return sdpa(add)

        out[f"{name} (additive mask)"] = call
    out["split-KV Triton (additive mask)"] = lambda: attend_cache_split_kv(t, add)
    out["split-KV Triton, 8 warps a split"] = lambda: attend_cache_split_kv(t, add, num_warps=8)
    return out


def attend_cache_split_kv(t: dict, add: torch.Tensor, num_warps: int | None = None) -> torch.Tensor:
    """:func:`specdec.kernels.attention.decode_attention` over the case, the queries laid out as ``attend_cache`` lays
    them out (the query heads that share a KV head as extra rows); ``[1, rows, H * D]`` as ``attend_cache`` returns.
    ``num_warps``: the split launch's warps (:func:`~specdec.kernels.attention.split_kv.decode_attention_triton`),
    ``None`` the library's choice."""
    q = t["q"]
    bsz, heads, rows, dim = q.shape
    kv_heads = t["k_cache"].shape[1]
    grouped = q.reshape(bsz, kv_heads, heads // kv_heads * rows, dim)
    if num_warps is None:
        out = decode_attention(grouped, t["k_cache"], t["v_cache"], add, backend="triton")
    else:
        out = decode_attention_triton(grouped, t["k_cache"], t["v_cache"], add, num_warps=num_warps)
    return out.reshape(bsz, heads, rows, dim).transpose(1, 2).reshape(bsz, rows, heads * dim)


def plot(result: dict, path: Path) -> str | None:
    plt = agg_pyplot()
    timed = [r for r in result["rows"] if "us" in r]
    if not timed:
        return "nothing timed: no plot"
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = [f"{r['variant']}\nT={r['rows']} S={r['span']}" for r in timed]
    ax.barh(range(len(timed)), [r["us"] for r in timed])
    ax.set_yticks(range(len(timed)), labels, fontsize=6)
    ax.set_xlabel("us a call (CUDA graph)")
    ax.set_title("Decode attention, Qwen3-8B heads (random tensors)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def summary_lines(result: dict) -> list[str]:
    lines = ["rows  span  variant                          us    max|diff|"]
    for r in result["rows"]:
        us = f"{r['us']:8.2f}" if "us" in r else r.get("error", "-")[:40]
        lines.append(f"{r['rows']:4d} {r['span']:5d}  {r['variant']:30s} {us}  {r.get('max_abs_diff', float('nan')):.3g}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "decode_attention.json"))
    ap.add_argument("--smoke", action="store_true", help="CPU: tiny heads, the math backend, times mean nothing")
    ap.add_argument("--calls", type=int, default=36, help="calls per CUDA graph (a step's layers)")
    ap.add_argument("--reps", type=int, default=20, help="graph replays (median)")
    args = ap.parse_args(argv)
    from benchmarks.kernels.bench_roofline import time_per_call

    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    heads, spans = (SMOKE_HEADS, SMOKE_SPANS) if args.smoke else (HEADS, SPANS)
    backends = ("math",) if device.type == "cpu" else BACKENDS
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(0)
    prov = provenance(seed=0)
    t0 = time.time()
    rows = []
    for n_rows in ROWS:
        for span in spans:
            t = case_tensors(n_rows, span, heads, dtype, device, gen)
            calls = variants(t, backends)
            want = next(iter(calls.values()))().float()
            for name, call in calls.items():
                row = dict(rows=n_rows, span=span, length=t["length"], variant=name)
                try:
                    row["max_abs_diff"] = (call().float() - want).abs().max().item()
                    row["us"] = time_per_call(call, device, calls=args.calls, reps=args.reps) * 1e6
                except Exception as exc:  # a backend that refuses the case is recorded, the others still run
                    row["error"] = f"{type(exc).__name__}: {exc}"[:200]
                rows.append(row)
    result = dict(
        device=str(device),
        dtype=str(dtype),
        heads=heads,
        tensors="random",
        calls=args.calls,
        reps=args.reps,
        rows=rows,
        wall_s=time.time() - t0,
    )
    report(args.out, result, prov, plot, summary_lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
