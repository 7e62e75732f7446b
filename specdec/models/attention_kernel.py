"""Which kernel the dense layers' cached attention runs: SDPA (the default) or the split-KV decode kernel.

:func:`specdec.models.dense.attend_cache` calls ``torch.nn.functional.scaled_dot_product_attention`` (cuDNN on the
H200) unless :func:`attention_kernel` says ``"split_kv"``: then :func:`specdec.kernels.attention.decode_attention`
(``backend`` as set, ``"auto"``: Triton on CUDA, its float32 reference elsewhere) for every call it can take (at most
128 query rows a KV head, a power-of-two head dim from 16 to 256, no gradient, not under ``torch.compile``), SDPA for
the rest. The default stays SDPA until the kernel is measured on the H200 (``benchmarks/NOTES.md``, "Split-KV decode
attention"). CUDA graphs captured inside the block keep its kernel after it exits.

Example:
    >>> attention_choice(torch.ones(1, 2, 4, 16))
    ('sdpa', None)
    >>> with attention_kernel("split_kv"):
    ...     attention_choice(torch.ones(1, 2, 4, 16)), attention_choice(torch.ones(1, 2, 200, 16))
    (('split_kv', 'auto'), ('sdpa', None))
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

from specdec.kernels.attention import split_kv_takes
from specdec.kernels.backend import BACKENDS

__all__ = ["ATTENTION_KERNELS", "attention_choice", "attention_kernel"]

ATTENTION_KERNELS = ("sdpa", "split_kv")
_CHOICE: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("specdec_attention_kernel", default=("sdpa", "auto"))


@contextlib.contextmanager
def attention_kernel(kernel: str, *, backend: str = "auto") -> Iterator[None]:
    """Within the block (this thread / context) the dense layers' cached attention runs ``kernel`` (one of
    ``ATTENTION_KERNELS``); ``backend`` is the split-KV kernel's (``"auto"``, ``"triton"``: the interpreter on a CPU,
    or ``"torch"``: its reference)."""
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"kernel: expected one of {ATTENTION_KERNELS}, got {kernel!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    token = _CHOICE.set((kernel, backend))
    try:
        yield
    finally:
        _CHOICE.reset(token)


def attention_choice(q: torch.Tensor) -> tuple[str, str | None]:
    """``("split_kv", backend)`` where the split-KV kernel is chosen and takes ``q [B, Hkv, R, D]``, else
    ``("sdpa", None)``."""
    kernel, backend = _CHOICE.get()
    takes = split_kv_takes(rows=q.shape[-2], head_dim=q.shape[-1])
    if kernel != "split_kv" or not takes or torch.compiler.is_compiling() or (torch.is_grad_enabled() and q.requires_grad):
        return "sdpa", None
    return "split_kv", backend
