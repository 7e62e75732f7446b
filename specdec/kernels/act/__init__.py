"""The dense MLP's SwiGLU activation ``silu(gate) * up``: a pure-PyTorch reference and a one-launch Triton kernel,
one signature.

``backend``: ``"auto"`` (Triton on CUDA, the reference elsewhere), ``"triton"`` or ``"torch"``. See ``README.md``.
"""

from __future__ import annotations

import torch

from ..backend import use_triton
from .naive import silu_mul_torch
from .swiglu import silu_mul_triton

__all__ = ["silu_mul"]


def silu_mul(gate_up: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """``gate_up [..., 2F]`` (the fused ``w13`` output: gate, then up) -> ``silu(gate) * up``, ``[..., F]``.

    ``silu(gate)`` is computed in float32 and rounded to ``gate_up.dtype``, the product rounded again, as the MLP's
    ``F.silu(gate) * up``; the output is contiguous. The Triton kernel runs where ``gate_up`` is floating point (of
    any strides; a last dim of stride 1 is read in place).

    Example:
        >>> silu_mul(torch.tensor([[0.0, 20.0, 3.0, 0.5]])).tolist()
        [[0.0, 10.0]]
    """
    if not isinstance(gate_up, torch.Tensor):
        raise TypeError(f"gate_up: expected a tensor, got {type(gate_up).__name__}")
    if gate_up.ndim == 0 or gate_up.shape[-1] % 2:
        raise ValueError(f"gate_up: expected a last dim of even size 2F (gate, then up), got shape {tuple(gate_up.shape)}")
    if not gate_up.dtype.is_floating_point:
        raise ValueError(f"gate_up: expected a floating dtype, got {gate_up.dtype}")
    if use_triton(backend, gate_up.device) and gate_up.dtype != torch.float64:  # the kernel computes in float32
        return silu_mul_triton(gate_up)
    return silu_mul_torch(gate_up).contiguous()
