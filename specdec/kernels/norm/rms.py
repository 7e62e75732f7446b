"""One Triton program per row for the RMSNorms of :mod:`.naive` (centred, gated, scaled, and the residual add
before the scaled one).

The float32 statistics and the rounding points are the reference's; only the order of the sum of squares differs
(a tree reduction), so results agree with the reference to float32 rounding of ``mean(x^2)``. One launch replaces
the reference's six to eight element-wise kernels, which is what the hybrid's decode step, bound by its kernel count,
gains. With ``ADD`` the program first forms ``x + delta``, rounded to ``x``'s dtype by :func:`.rounding.round_to`
(bitwise as PyTorch's add, in the interpreter too), writes it as the residual and normalises it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specdec.kernels.launch import join_programmatic_launch, triton_launch_options

from .rounding import round_to

__all__ = ["add_rms_norm_triton", "rms_norm_triton"]


@triton.jit
def _rms_norm_kernel(
    x_ptr,
    gate_ptr,
    w_ptr,
    out_ptr,
    delta_ptr,
    res_ptr,
    D,
    eps,
    BLOCK: tl.constexpr,
    GATED: tl.constexpr,
    SCALED: tl.constexpr,
    ADD: tl.constexpr,
    PDL: tl.constexpr,
):
    join_programmatic_launch(PDL)  # specdec.kernels.launch: the GEMM after this kernel may start now
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < D
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0)
    if ADD:  # the residual stream: x + delta, rounded once to x's dtype, then normalised
        delta = tl.load(delta_ptr + row * D + cols, mask=mask, other=0.0)
        x = round_to(x.to(tl.float32) + delta.to(tl.float32), x.dtype)
        tl.store(res_ptr + row * D + cols, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / D + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    normed = xf * rstd
    if GATED:
        g = tl.load(gate_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
        scaled = (w.to(tl.float32) * normed.to(x.dtype).to(tl.float32)).to(x.dtype)
        y = scaled.to(tl.float32) * (g * tl.sigmoid(g))
    elif SCALED:
        y = w.to(tl.float32) * normed.to(x.dtype).to(tl.float32)
    else:
        y = normed * (1.0 + w.to(tl.float32))
    tl.store(out_ptr + row * D + cols, y.to(x.dtype), mask=mask)


def rms_norm_triton(
    x: torch.Tensor, weight: torch.Tensor, eps: float, gate: torch.Tensor | None = None, *, scaled: bool = False
) -> torch.Tensor:
    """Centred (``gate`` is ``None``), gated, or scaled (``scaled=True``; ``weight`` in ``x``'s dtype) RMSNorm of
    ``x [..., D]`` over its last dim; ``[..., D]`` in ``x.dtype``."""
    d = x.shape[-1]
    rows = x.reshape(-1, d).contiguous()
    gates = None if gate is None else gate.reshape(-1, d).contiguous()
    out = torch.empty_like(rows)
    if rows.shape[0]:
        _rms_norm_kernel[(rows.shape[0],)](
            rows, rows if gates is None else gates, weight.contiguous(), out, rows, out, d, float(eps),
            BLOCK=triton.next_power_of_2(d), GATED=gate is not None, SCALED=scaled, ADD=False,
            num_warps=4 if d <= 1024 else 8, **triton_launch_options(rows),
        )  # fmt: skip
    return out.view(x.shape)


def add_rms_norm_triton(
    x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x + delta, scaled RMSNorm of it)`` for ``x``, ``delta [..., D]`` of one dtype and ``weight [D]`` in it;
    both ``[..., D]`` in ``x.dtype``, contiguous, written by one launch."""
    d = x.shape[-1]
    rows = x.reshape(-1, d).contiguous()
    deltas = delta.reshape(-1, d).contiguous()
    residual, out = torch.empty_like(rows), torch.empty_like(rows)
    if rows.shape[0]:
        _rms_norm_kernel[(rows.shape[0],)](
            rows, rows, weight.contiguous(), out, deltas, residual, d, float(eps),
            BLOCK=triton.next_power_of_2(d), GATED=False, SCALED=True, ADD=True, num_warps=4 if d <= 1024 else 8,
            **triton_launch_options(rows),
        )  # fmt: skip
    return residual.view(x.shape), out.view(x.shape)
