"""Which kernel the dense layers' cached attention runs: the split-KV decode kernel or SDPA.

:func:`specdec.models.dense.attend_cache` runs :func:`specdec.kernels.attention.decode_attention` (Triton) on CUDA
for every call it can take (at most 128 query rows a KV head, a power-of-two head dim from 16 to 256, no gradient, not
under ``torch.compile``) and ``torch.nn.functional.scaled_dot_product_attention`` for the rest and on other devices:
the default ``"auto"``. On the H200 the kernel takes a Qwen3-8B layer's one-token attention from cuDNN's 10.5 to
5.2 us at 256 slots and from 44.9 to 8.3 us at 2048 (``docs/results.md``, "Decode steps").
:func:`attention_kernel` picks one for a block: ``"sdpa"`` everywhere, or ``"split_kv"`` with a ``backend``
(``"auto"``: Triton on CUDA, its float32 reference elsewhere). CUDA graphs captured inside the block keep its kernel
after it exits.

Example:
    >>> attention_choice(torch.ones(1, 2, 4, 16))  # a CPU tensor under "auto"
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

ATTENTION_KERNELS = ("auto", "sdpa", "split_kv")
_CHOICE: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("specdec_attention_kernel", default=("auto", "auto"))


@contextlib.contextmanager
def attention_kernel(kernel: str, *, backend: str = "auto") -> Iterator[None]:
    """Within the block (this thread / context) the dense layers' cached attention runs ``kernel`` (one of
    ``ATTENTION_KERNELS``; ``"auto"``: split-KV on CUDA, SDPA elsewhere); ``backend`` is the split-KV kernel's
    (``"auto"``, ``"triton"``: the interpreter on a CPU, or ``"torch"``: its reference)."""
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
    """``("split_kv", backend)`` where the split-KV kernel is chosen (by :func:`attention_kernel`, or ``"auto"`` and
    ``q`` on CUDA) and takes ``q [B, Hkv, R, D]``, else ``("sdpa", None)``."""
    kernel, backend = _CHOICE.get()
    wanted = kernel == "split_kv" or (kernel == "auto" and q.is_cuda)
    takes = split_kv_takes(rows=q.shape[-2], head_dim=q.shape[-1])
    if not wanted or not takes or torch.compiler.is_compiling() or (torch.is_grad_enabled() and q.requires_grad):
        return "sdpa", None
    return "split_kv", backend
