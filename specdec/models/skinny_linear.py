"""bf16 linears of a few rows through the CUDA weight-streaming GEMM instead of cuBLAS.

:func:`use_skinny_linears` swaps the weight of every bf16 ``nn.Linear`` of a module for a
:class:`SkinnyLinearWeight`: the same bf16 tensor (no copy), whose ``F.linear`` runs
:func:`specdec.kernels.cuda.skinny_gemm_bf16` (the tensor-map kernel; in persistent CTAs where that measured faster)
when the input is on CUDA with at most ``SKINNY_MAX_ROWS`` (8) rows, and ``F.linear`` on the plain
weight otherwise (CPU, wider inputs, gradients, ``torch.compile``). The kernel sums in another order than cuBLAS, so a
layer's output may differ from cuBLAS's in the last bits; on CPU the path is ``F.linear`` itself. Inside a captured CUDA
graph the kernel takes part in programmatic dependent launch (:mod:`specdec.kernels.launch`), which cuBLAS does not: its
launch and first weight loads overlap the norm or SwiGLU before it. The layers stay ``nn.Linear``, as with
:func:`specdec.formats.convert`.

Example:
    >>> from torch import nn
    >>> layer = nn.Linear(32, 8, bias=False).to(torch.bfloat16)
    >>> x = torch.randn(2, 32).to(torch.bfloat16)
    >>> want = layer(x)
    >>> use_skinny_linears(layer)
    1
    >>> type(layer.weight.data).__name__, torch.equal(layer(x), want)  # CPU: F.linear on the same weight
    ('SkinnyLinearWeight', True)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specdec.formats.w12 import linear_arguments
from specdec.kernels.cuda import ops

__all__ = ["SKINNY_MAX_ROWS", "SkinnyLinearWeight", "use_skinny_linears"]

# One MMA n-tile of tokens. On the H200 the Qwen3-8B one-token step ran 4.80 -> 4.68 ms with every linear through the
# kernel, and its 16-row verify step 5.13 -> 5.76 ms (the two-tile kernels run 0.62-1.00x cuBLAS at 16 tokens):
# benchmarks/NOTES.md, "bf16 linears through the CUDA skinny GEMM".
SKINNY_MAX_ROWS = 8


class SkinnyLinearWeight(torch.Tensor):
    """A bf16 weight ``[N, K]`` whose ``F.linear`` runs the CUDA skinny GEMM for inputs of a few rows (module docstring).

    ``plain`` is the bf16 tensor itself; any operation other than ``F.linear`` runs on it.

    Example:
        >>> w = torch.randn(8, 32).to(torch.bfloat16)
        >>> torch.equal(F.linear(torch.ones(1, 32, dtype=torch.bfloat16), SkinnyLinearWeight(w)), F.linear(torch.ones(1, 32, dtype=torch.bfloat16), w))
        True
    """

    plain: torch.Tensor

    @staticmethod
    def __new__(cls, plain: torch.Tensor):
        if not isinstance(plain, torch.Tensor) or plain.dtype != torch.bfloat16 or plain.dim() != 2:
            desc = f"{plain.dtype} {tuple(plain.shape)}" if isinstance(plain, torch.Tensor) else type(plain).__name__
            raise TypeError(f"plain: expected a 2-D bf16 tensor [N, K], got {desc}")
        return torch.Tensor._make_wrapper_subclass(
            cls, tuple(plain.shape), dtype=plain.dtype, device=plain.device, requires_grad=False
        )

    def __init__(self, plain: torch.Tensor):
        self.plain = plain.contiguous()

    def __repr__(self) -> str:
        return f"SkinnyLinearWeight({tuple(self.shape)}, device={self.device})"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, weight, bias = linear_arguments(args, kwargs)
            if isinstance(weight, SkinnyLinearWeight) and not isinstance(x, SkinnyLinearWeight):
                return skinny_linear(x, weight.plain, bias)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        aten = torch.ops.aten
        if func in (aten.detach.default, aten.alias.default):
            return SkinnyLinearWeight(args[0].plain)
        if func is aten._to_copy.default and kwargs.get("dtype") in (None, torch.bfloat16):
            return SkinnyLinearWeight(args[0].plain.to(kwargs.get("device") or args[0].device))

        def unwrap(a):
            return a.plain if isinstance(a, SkinnyLinearWeight) else a

        args = torch.utils._pytree.tree_map(unwrap, args)
        kwargs = torch.utils._pytree.tree_map(unwrap, kwargs)
        return func(*args, **kwargs)


def skinny_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for a bf16 ``weight [N, K]``: the CUDA skinny GEMM where it takes ``x`` (CUDA, bf16,
    at most ``SKINNY_MAX_ROWS`` rows, no gradient, not compiling: :func:`skinny_takes`), else ``F.linear``.

    Example:
        >>> w = torch.randn(8, 32).to(torch.bfloat16)
        >>> skinny_linear(torch.ones(3, 32, dtype=torch.bfloat16), w).shape
        torch.Size([3, 8])
    """
    k = weight.shape[1]
    if not skinny_takes(x, k):
        return F.linear(x, weight, bias)
    rows = x.numel() // k
    y = ops.skinny_gemm_bf16(x.reshape(rows, k).contiguous(), weight).view(*x.shape[:-1], weight.shape[0])
    return y if bias is None else y + bias


def skinny_takes(x, k: int) -> bool:
    """Whether :func:`skinny_linear` runs the CUDA kernel for input ``x [..., K]`` and weights of width ``k``: ``x`` on
    CUDA, bf16, ``K == k`` (a positive multiple of 8), at most ``SKINNY_MAX_ROWS`` rows, no gradient wanted and not
    under ``torch.compile``.

    Example:
        >>> skinny_takes(torch.ones(2, 64, dtype=torch.bfloat16), 64)  # a CPU tensor
        False
    """
    rows = x.numel() // k if k > 0 else 0
    return (
        x.is_cuda
        and x.dtype == torch.bfloat16
        and x.shape[-1] == k
        and k % 8 == 0
        and 1 <= rows <= SKINNY_MAX_ROWS
        and not (torch.is_grad_enabled() and x.requires_grad)
        and not torch.compiler.is_compiling()
    )


def use_skinny_linears(module: nn.Module) -> int:
    """Swap the weight of every ``nn.Linear`` of ``module`` with a bf16 weight for a :class:`SkinnyLinearWeight` of the
    same tensor (no copy; one already swapped, or not bf16, is left as it is); returns how many were swapped.

    Example (see also the module docstring):
        >>> model = nn.Sequential(nn.Linear(8, 8).to(torch.bfloat16), nn.Linear(8, 4))   # the float32 one stays
        >>> use_skinny_linears(model), use_skinny_linears(model)                          # the second finds none left
        (1, 0)
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module: expected an nn.Module, got {type(module).__name__}")
    swapped = 0
    for sub in module.modules():
        if isinstance(sub, nn.Linear) and sub.weight.dtype == torch.bfloat16 and type(sub.weight.data) is torch.Tensor:
            sub.weight = nn.Parameter(SkinnyLinearWeight(sub.weight.data), requires_grad=False)
            swapped += 1
    return swapped
