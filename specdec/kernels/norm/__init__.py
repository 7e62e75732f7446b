"""RMSNorms (the hybrid layers' centred and gated forms, the dense layers' scaled form, alone or after the residual
add): a pure-PyTorch reference and a one-launch Triton kernel, one signature.

``backend``: ``"auto"`` (Triton on CUDA, the reference elsewhere), ``"triton"`` or ``"torch"``. See ``README.md``.
"""

from __future__ import annotations

import torch

from ..backend import use_triton
from .naive import add_scaled_rms_norm_torch, centered_rms_norm_torch, gated_rms_norm_torch, scaled_rms_norm_torch
from .rms import add_rms_norm_triton, rms_norm_triton

__all__ = ["add_scaled_rms_norm", "centered_rms_norm", "gated_rms_norm", "scaled_rms_norm"]


def _checked(name: str, t: torch.Tensor, d: int, x: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    if t.device != x.device:
        raise ValueError(f"{name}: expected device {x.device} (x's), got {t.device}")
    if name == "weight" and tuple(t.shape) != (d,):
        raise ValueError(f"weight: expected shape ({d},) (x's last dim), got {tuple(t.shape)}")
    if name in ("gate", "delta") and t.shape != x.shape:
        raise ValueError(f"{name}: expected x's shape {tuple(x.shape)}, got {tuple(t.shape)}")


def centered_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, *, backend: str = "auto") -> torch.Tensor:
    """``x [..., D]`` -> ``x_hat * (1 + weight)`` in ``x.dtype``, ``x_hat`` normalised in float32.

    Example:
        >>> centered_rms_norm(torch.tensor([[3.0, 4.0]]), torch.zeros(2), 0.0).mul(100).round().tolist()
        [[85.0, 113.0]]
    """
    _checked("weight", weight, x.shape[-1], x)
    if use_triton(backend, x.device) and x.dtype != torch.float64:  # the kernel computes in float32
        return rms_norm_triton(x, weight, eps)
    return centered_rms_norm_torch(x, weight, eps)


def gated_rms_norm(
    x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float, *, backend: str = "auto"
) -> torch.Tensor:
    """``x``, ``gate`` ``[..., D]`` -> ``(weight * x_hat) * silu(gate)`` in ``x.dtype`` (the GDN output norm).

    The Triton kernel runs where ``weight`` has ``x``'s dtype (it rounds ``weight * x_hat`` to it, as the reference
    does then); a weight of another dtype promotes the product, and the reference runs.

    Example:
        >>> gated_rms_norm(torch.tensor([[3.0, 4.0]]), torch.zeros(1, 2), torch.ones(2), 0.0).tolist()
        [[0.0, 0.0]]
    """
    _checked("weight", weight, x.shape[-1], x)
    _checked("gate", gate, x.shape[-1], x)
    if use_triton(backend, x.device) and weight.dtype == x.dtype != torch.float64:
        return rms_norm_triton(x, weight, eps, gate)
    return gated_rms_norm_torch(x, gate, weight, eps)


def scaled_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, *, backend: str = "auto") -> torch.Tensor:
    """``x [..., D]`` -> ``weight * x_hat.to(x.dtype)`` (Llama / Qwen3), ``x_hat`` normalised in float32.

    The Triton kernel runs where ``weight`` has ``x``'s dtype (the product then rounds once to it, as the
    reference's); a weight of another dtype promotes the product, and the reference runs.

    Example:
        >>> scaled_rms_norm(torch.tensor([[2.0, -2.0]]), torch.tensor([1.0, 0.5]), 0.0).tolist()
        [[1.0, -0.5]]
    """
    _checked("weight", weight, x.shape[-1], x)
    if use_triton(backend, x.device) and weight.dtype == x.dtype != torch.float64:
        return rms_norm_triton(x, weight, eps, scaled=True)
    return scaled_rms_norm_torch(x, weight, eps)


def add_scaled_rms_norm(
    x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float, *, backend: str = "auto"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x``, ``delta`` ``[..., D]`` -> ``(residual, normed)``: ``residual = x + delta`` (as PyTorch adds) and
    ``normed = scaled_rms_norm(residual, weight, eps)``, both ``[..., D]`` (the dense layers' residual add, then
    ``mlp_norm`` or the next layer's ``attn_norm``).

    The Triton kernel writes both in one launch where ``delta`` and ``weight`` have ``x``'s dtype (the residual is
    then bitwise ``x + delta``); other dtypes promote, and the reference runs.

    Example:
        >>> r, n = add_scaled_rms_norm(torch.tensor([[1.0, -3.0]]), torch.tensor([[1.0, 1.0]]), torch.ones(2), 0.0)
        >>> r.tolist(), n.tolist()
        ([[2.0, -2.0]], [[1.0, -1.0]])
    """
    _checked("delta", delta, x.shape[-1], x)
    _checked("weight", weight, x.shape[-1], x)
    if use_triton(backend, x.device) and delta.dtype == weight.dtype == x.dtype != torch.float64:
        return add_rms_norm_triton(x, delta, weight, eps)
    return add_scaled_rms_norm_torch(x, delta, weight, eps)
