"""One Triton program per row for the RMSNorms of :mod:`.naive` (centred, gated, scaled).

The float32 statistics and the rounding points are the reference's; only the order of the sum of squares differs
(a tree reduction), so results agree with the reference to float32 rounding of ``mean(x^2)``. One launch replaces
the reference's six to eight element-wise kernels, which is what the hybrid's decode step, bound by its kernel count,
gains.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["rms_norm_triton"]


@triton.jit
def _rms_norm_kernel(x_ptr, gate_ptr, w_ptr, out_ptr, D, eps, BLOCK: tl.constexpr, GATED: tl.constexpr, SCALED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < D
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0)
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
            rows, rows if gates is None else gates, weight.contiguous(), out, d, float(eps),
            BLOCK=triton.next_power_of_2(d), GATED=gate is not None, SCALED=scaled, num_warps=4 if d <= 1024 else 8,
        )  # fmt: skip
    return out.view(x.shape)
