"""``silu(gate) * up`` of :mod:`.naive` in one Triton launch over the fused ``w13`` output.

The grid is ``(rows, cdiv(F, BLOCK))``: program ``(r, j)`` reads columns ``[j * BLOCK, (j + 1) * BLOCK)`` of row
``r``'s gate (first half) and up (second half) and writes them to the contiguous ``[rows, F]`` output.

Rounding points are the reference's: ``s = silu(gate)`` in float32, rounded to the dtype, then ``s * up`` in
float32, rounded again (:func:`specdec.kernels.norm.rounding.round_to`). PyTorch's CUDA silu is
``x / (1 + expf(-x))`` with CUDA's accurate ``expf`` and IEEE division; compiled, the kernel calls the same
``expf`` (libdevice's ``exp``; its last step scales by a power of two, exactly, so whether ``1 + e`` is contracted
into an FMA does not matter) and divides with ``div_rn``: it is meant to be bitwise PyTorch's. The Triton interpreter
cannot call libdevice (``extern_elementwise`` is not implemented there): under ``TRITON_INTERPRET=1``
(``ACCURATE_EXP`` off) ``exp`` runs in float64 and rounds to float32, a correctly rounded ``expf``. PyTorch's CPU
silu uses its own vectorised ``exp``, so there a few float32 outputs differ from the reference by a unit or two.
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from specdec.kernels.launch import join_programmatic_launch, triton_launch_options
from specdec.kernels.norm.rounding import round_to

__all__ = ["silu_mul_triton"]

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, F, stride_row, BLOCK: tl.constexpr, ACCURATE_EXP: tl.constexpr, PDL: tl.constexpr):
    join_programmatic_launch(PDL)  # specdec.kernels.launch: the GEMM after this kernel may start now
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < F
    gate = tl.load(gu_ptr + row * stride_row + cols, mask=mask, other=0.0)
    up = tl.load(gu_ptr + row * stride_row + F + cols, mask=mask, other=0.0).to(tl.float32)
    g = gate.to(tl.float32)
    if ACCURATE_EXP:
        e = libdevice.exp(-g)  # CUDA's expf, as PyTorch's silu
    else:
        e = tl.exp((-g).to(tl.float64)).to(tl.float32)  # the interpreter has no libdevice: float64, rounded
    s = round_to(tl.math.div_rn(g, 1.0 + e), gate.dtype)
    out = round_to(s.to(tl.float32) * up, gate.dtype)
    tl.store(out_ptr + row * F + cols, out, mask=mask)


def silu_mul_triton(gate_up: torch.Tensor) -> torch.Tensor:
    """:func:`.naive.silu_mul_torch` in one launch: ``gate_up [..., 2F]`` -> ``[..., F]``, contiguous."""
    f = gate_up.shape[-1] // 2
    rows = gate_up.reshape(math.prod(gate_up.shape[:-1]), 2 * f)
    if rows.shape[0] and rows.stride(1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape[0], f, dtype=gate_up.dtype, device=gate_up.device)
    if rows.shape[0] and f:
        block = min(triton.next_power_of_2(f), 1024)
        _silu_mul_kernel[(rows.shape[0], triton.cdiv(f, block))](
            rows, out, f, rows.stride(0), BLOCK=block, ACCURATE_EXP=not _INTERPRET, num_warps=4 if block >= 512 else 1,
            **triton_launch_options(rows),
        )  # fmt: skip
    return out.view(*gate_up.shape[:-1], f)
