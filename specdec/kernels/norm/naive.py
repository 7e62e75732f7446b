"""Reference RMSNorms in plain PyTorch: the definition the kernels follow.

All normalise in float32 and round where the checkpoints' own code rounds:

* centred (Qwen3.5 / Qwen3-Next): ``(x_hat * (1 + w)).to(x.dtype)``, ``x_hat = x * rsqrt(mean(x^2) + eps)`` in float32;
* gated (their GDN output norm): ``(w * x_hat.to(x.dtype)) * silu(gate)``, the product with the float32
  ``silu(gate)`` rounded to ``x.dtype`` last;
* scaled (Llama / Qwen3): ``w * x_hat.to(x.dtype)``, in ``w``'s and ``x``'s common dtype;
* residual add, then scaled (the dense layers' ``x = x + attn(...)`` before ``mlp_norm(x)``): ``r = x + delta``
  as PyTorch adds (float32 sum rounded once to the common dtype), then the scaled norm of ``r``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["add_scaled_rms_norm_torch", "centered_rms_norm_torch", "gated_rms_norm_torch", "scaled_rms_norm_torch"]


def centered_rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x [..., D]``, ``weight [D]`` -> ``[..., D]`` in ``x.dtype``: ``x_hat * (1 + weight)``.

    Example:
        >>> centered_rms_norm_torch(torch.tensor([[3.0, 4.0]]), torch.zeros(2), 0.0).mul(100).round().tolist()
        [[85.0, 113.0]]
    """
    out = x.float()
    out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + eps)
    return (out * (1.0 + weight.float())).type_as(x)


def gated_rms_norm_torch(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x``, ``gate`` ``[..., D]``, ``weight [D]`` -> ``weight * x_hat * silu(gate)`` in ``x.dtype``.

    Example:
        >>> gated_rms_norm_torch(torch.tensor([[3.0, 4.0]]), torch.zeros(1, 2), torch.ones(2), 0.0).tolist()
        [[0.0, 0.0]]
    """
    dtype = x.dtype
    out = x.float()
    out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + eps)
    out = weight * out.to(dtype)
    return (out * F.silu(gate.float())).to(dtype)


def scaled_rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x [..., D]``, ``weight [D]`` -> ``weight * x_hat.to(x.dtype)``, ``[..., D]`` (Llama / Qwen3 RMSNorm).

    Example:
        >>> scaled_rms_norm_torch(torch.tensor([[2.0, -2.0]]), torch.tensor([1.0, 0.5]), 0.0).tolist()
        [[1.0, -0.5]]
    """
    dtype = x.dtype
    out = x.float()
    out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + eps)
    return weight * out.to(dtype)


def add_scaled_rms_norm_torch(
    x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x``, ``delta`` ``[..., D]``, ``weight [D]`` -> ``(residual, normed)``: ``residual = x + delta`` and
    ``normed = scaled_rms_norm_torch(residual, weight, eps)``, both ``[..., D]``.

    Example:
        >>> r, n = add_scaled_rms_norm_torch(torch.tensor([[1.0, -3.0]]), torch.tensor([[1.0, 1.0]]), torch.ones(2), 0.0)
        >>> r.tolist(), n.tolist()
        ([[2.0, -2.0]], [[1.0, -1.0]])
    """
    residual = x + delta
    return residual, scaled_rms_norm_torch(residual, weight, eps)
