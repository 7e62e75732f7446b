"""One W12 and one Q wide call on a Qwen3-8B linear (``--shape``: the o projection, 4096 x 4096, or gate_up, 24576 x
4096; random weights) at each row count of ``--rows``, between cudaProfilerStart / Stop, for ncu's source page (`run_h200_wide_mma.sh`); three untimed calls of
each first. Writes the calls it profiled (JSON with provenance) to ``--out``.

Usage (GPU): ncu --profile-from-start off ... python3 -m benchmarks.kernels.probe_wide --rows 32,128
"""

from __future__ import annotations

import argparse
import os

import torch

from benchmarks.common import provenance, provenance_line, write_json
from benchmarks.kernels.bench_roofline import w12_planes

SHAPES = {"o": (4096, 4096), "gate_up": (24576, 4096)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="32,128", help="comma-separated row counts, each at most 128")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="o", help="the 8B linear: o (one wave) or gate_up (several)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "probe_wide.json"))
    args = ap.parse_args(argv)
    rows = [int(a) for a in args.rows.split(",")]
    if not rows or any(not 1 <= m <= 128 for m in rows):
        raise SystemExit(f"--rows: expected row counts of 1-128, got {args.rows!r}")
    if not torch.cuda.is_available():
        raise SystemExit("probe_wide: needs a CUDA device (the wide kernels have no CPU form)")
    from specdec.formats import W12Tensor
    from specdec.kernels.cuda import ops

    prov = provenance(seed=0)
    print(provenance_line(prov))
    gen = torch.Generator(device="cuda").manual_seed(0)
    n, k = SHAPES[args.shape]
    w = (torch.randn(n, k, generator=gen, device="cuda") * 0.02).to(torch.bfloat16)
    planes = w12_planes(W12Tensor.from_bf16(w))
    calls = []
    for m in rows:
        x = torch.randn(m, k, generator=gen, device="cuda").to(torch.bfloat16)
        for _ in range(3):
            ops.w12_gemm_wide(x, *planes)
            ops.q_gemm_wide(x, planes[0], planes[2])
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        ops.w12_gemm_wide(x, *planes)
        ops.q_gemm_wide(x, planes[0], planes[2])
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        calls += [dict(kernel="w12_gemm_wide", N=n, K=k, M=m), dict(kernel="q_gemm_wide", N=n, K=k, M=m)]
    write_json(args.out, dict(calls=calls), prov)
    print(f"profiled {len(calls)} calls; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
