"""Reference SwiGLU activation in plain PyTorch: the dense MLP's own arithmetic, the definition the kernel follows.

``gate_up [..., 2F]`` is the fused ``w13`` projection's output, the gate in its first half and up in its second:
``silu(gate) * up``, where ``silu(gate) = gate / (1 + exp(-gate))`` is computed in float32 and rounded to the dtype,
and the product is rounded to it again, as PyTorch's two element-wise ops do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["silu_mul_torch"]


def silu_mul_torch(gate_up: torch.Tensor) -> torch.Tensor:
    """``gate_up [..., 2F]`` -> ``silu(gate) * up``, ``[..., F]`` in ``gate_up.dtype``.

    Example:
        >>> silu_mul_torch(torch.tensor([[0.0, 20.0, 3.0, 0.5]])).tolist()
        [[0.0, 10.0]]
    """
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up
