"""Programmatic dependent launch (Hopper and later): a kernel launched with it may start while the kernel before it
in the stream is still running, and waits (``griddepcontrol.wait``) where it first needs that kernel's results.

A decode step at one token is a chain of short kernels, and each GEMM's first microseconds (launch, prologue, the
first stages of weights in flight) are not covered by any other work. With the launch, a GEMM's CTAs start while the
element-wise kernel before it runs, put the weights of their first stages in flight (weights do not depend on that
kernel), and wait only before their first load of ``x``. ``$SPECDEC_PDL`` (read on every launch) says who takes part:

* ``"gemm"``: the CUDA tensor-map GEMMs (W12 v7, Q v2, bf16 v2) launch with it. A kernel before them that does not
  signal still lets them start only as its last CTAs exit;
* ``"1"``: those, and the element-wise Triton kernels that come before GEMMs in a decode step (the RMSNorms, SwiGLU):
  each waits for the kernel before it at its start, then signals (``griddepcontrol.launch_dependents``), so the
  GEMM after it starts at once;
* ``"0"`` or unset: nobody.

Either instruction does nothing in a kernel launched without the attribute, so a kernel that takes part stays correct
after any kernel. The Triton interpreter has no such instructions: :func:`triton_launch_options` turns them off for
tensors that are not on a CUDA device.

Example:
    >>> import os
    >>> os.environ[PDL_ENV] = "gemm"
    >>> pdl_mode(), triton_launch_options(torch.zeros(1))
    ('gemm', {'PDL': False})
    >>> del os.environ[PDL_ENV]
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

__all__ = ["PDL_ENV", "PDL_MODES", "pdl_mode", "start_next_kernel", "triton_launch_options", "wait_for_previous_kernel"]

PDL_ENV = "SPECDEC_PDL"
PDL_MODES = ("0", "gemm", "1")


def pdl_mode() -> str:
    """``$SPECDEC_PDL``: ``"0"`` (also when unset), ``"gemm"`` or ``"1"``; a ``ValueError`` naming it otherwise."""
    mode = os.environ.get(PDL_ENV) or "0"
    if mode not in PDL_MODES:
        raise ValueError(f"${PDL_ENV}: expected one of {PDL_MODES}, got {mode!r}")
    return mode


def triton_launch_options(x: torch.Tensor) -> dict:
    """Keyword arguments for launching a Triton kernel with a ``PDL: tl.constexpr`` flag on ``x``'s device:
    ``{"PDL": True, "launch_pdl": True}`` where ``$SPECDEC_PDL`` is ``"1"`` and ``x`` is on CUDA, else
    ``{"PDL": False}``."""
    if x.is_cuda and pdl_mode() == "1":
        return {"PDL": True, "launch_pdl": True}
    return {"PDL": False}


@triton.jit
def wait_for_previous_kernel():
    """Block until the kernel before this one in the stream has finished and its writes are visible."""
    tl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def start_next_kernel():
    """Let the kernel after this one start (once every program of this kernel has signalled or exited)."""
    tl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
