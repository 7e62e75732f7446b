"""The ``backend`` argument every kernel family takes: ``"auto"`` (Triton on CUDA, the PyTorch reference elsewhere),
``"triton"`` (Triton anywhere: the interpreter on a CPU) or ``"torch"`` (the reference).

Example:
    >>> use_triton("auto", torch.device("cpu")), use_triton("triton", torch.device("cpu"))
    (False, True)
"""

from __future__ import annotations

import os

import torch

__all__ = ["BACKENDS", "use_triton"]

BACKENDS = ("auto", "triton", "torch")


def use_triton(backend: str, device: torch.device) -> bool:
    """Whether ``backend`` runs the Triton kernel for tensors on ``device``; a ``ValueError`` for an unknown one, and
    for ``"triton"`` off CUDA without the interpreter (``TRITON_INTERPRET=1``, set before Triton is imported)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if backend == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET", "0") != "1":
        raise ValueError(f"backend: 'triton' needs a CUDA tensor (or TRITON_INTERPRET=1), got device {device}")
    return backend == "triton" or (backend == "auto" and device.type == "cuda")
