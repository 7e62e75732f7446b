"""The ``backend`` argument every kernel family takes: ``"auto"`` (Triton on CUDA, the PyTorch reference elsewhere),
``"triton"`` (Triton anywhere: the interpreter on a CPU) or ``"torch"`` (the reference).

Example:
    >>> use_triton("auto", torch.device("cpu")), use_triton("triton", torch.device("cpu"))
    (False, True)
"""

from __future__ import annotations

import torch

__all__ = ["BACKENDS", "use_triton"]

BACKENDS = ("auto", "triton", "torch")


def use_triton(backend: str, device: torch.device) -> bool:
    """Whether ``backend`` runs the Triton kernel for tensors on ``device``; a ``ValueError`` for an unknown one."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    return backend == "triton" or (backend == "auto" and device.type == "cuda")
