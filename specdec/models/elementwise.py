"""Which form of the dense layers' element-wise work runs: the one-launch Triton kernels or their PyTorch references.

The dense layers (:mod:`specdec.models.dense`) route their RMSNorms, q/k norm + RoPE, SwiGLU product and residual
add + norm through :mod:`specdec.kernels` with the backend this module picks:

* ``"torch"`` (the reference, bit for bit the plain PyTorch code) where a gradient is wanted (the kernels have no
  backward) and under ``torch.compile`` (whose inductor fuses the reference itself);
* otherwise the backend set by :func:`elementwise_kernels`, ``"auto"`` by default: the Triton kernels on CUDA, the
  reference elsewhere.

:func:`elementwise_kernels` is the switch an A/B measurement needs (``"torch"``) and the one the CPU tests use to run
the kernels inside a model under the Triton interpreter (``"triton"``). CUDA graphs captured inside it keep its
kernels after it exits.

Example:
    >>> x = torch.ones(2, 4)
    >>> elementwise_backend(x), elementwise_backend(x.requires_grad_())
    ('auto', 'torch')
    >>> with elementwise_kernels("torch"):
    ...     elementwise_backend(torch.ones(2, 4))
    'torch'
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

from specdec.kernels.backend import BACKENDS

__all__ = ["elementwise_backend", "elementwise_kernels"]

_BACKEND: contextvars.ContextVar[str] = contextvars.ContextVar("specdec_elementwise_backend", default="auto")


@contextlib.contextmanager
def elementwise_kernels(backend: str) -> Iterator[None]:
    """Within the block (this thread / context) the dense layers' element-wise work runs on ``backend``:
    ``"auto"`` (Triton on CUDA), ``"triton"`` or ``"torch"`` (the references)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    token = _BACKEND.set(backend)
    try:
        yield
    finally:
        _BACKEND.reset(token)


def elementwise_backend(x: torch.Tensor, *params: torch.Tensor | None) -> str:
    """The backend for the element-wise kernels applied to ``x`` with weights ``params`` (see the module)."""
    if torch.compiler.is_compiling():
        return "torch"
    if torch.is_grad_enabled() and (x.requires_grad or any(p is not None and p.requires_grad for p in params)):
        return "torch"
    return _BACKEND.get()
