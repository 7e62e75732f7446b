"""Programmatic dependent launch (Hopper and later): a kernel launched with it may start while the kernel before it
in the stream is still running, and waits (``griddepcontrol.wait``) where it first needs that kernel's results.

A decode step at one token is a chain of short kernels, and each GEMM's first microseconds (launch, prologue, the
first stages of weights in flight) are not covered by any other work. With the launch, a GEMM's CTAs start while the
element-wise kernel before it runs, load the weights of their first stages into shared memory, and wait only before
their first load of ``x``. ``$SPECDEC_PDL`` (read on every launch) says who takes part:

* ``"1"`` (also when unset): while the stream is being captured into a CUDA graph, the CUDA tensor-map GEMMs (W12
  v7 to v10, Q and bf16 v2 to v5; :func:`gemm_launch_programmatic`) and the Triton kernels of a decode step around
  them (the RMSNorms, SwiGLU, the q/k norm + RoPE and the split-KV attention's two launches) over at most
  ``PDL_MAX_ROWS`` rows, which wait for the kernel before them at their start and then signal
  (``griddepcontrol.launch_dependents``) so that the kernel after them starts at once;
* ``"gemm"``: the tensor-map GEMMs alone (captured), the element-wise kernels launched plainly;
* ``"0"``: nobody.

Either instruction does nothing in a kernel launched without the attribute, so an element-wise kernel that takes part
stays correct after any kernel; eager launches (a host-bound path, where nothing overlaps anyway) stay plain. A GEMM
reads its first weights before it waits, which is right only when the kernel just before it does not write those
weights: true inside a captured forward, whose graph writes activations, caches and workspaces but never a linear's
weights; not assured for an eager call made right after the weights were written (a W12 encoding, a load), which is
why eager calls launch plainly. The Triton interpreter has no such
instructions: :func:`triton_launch_options` turns them off for tensors that are not on a CUDA device.

Example:
    >>> import os
    >>> os.environ[PDL_ENV] = "gemm"
    >>> pdl_mode(), triton_launch_options(torch.zeros(1, 8)), gemm_launch_programmatic()
    ('gemm', {'PDL': False}, False)
    >>> del os.environ[PDL_ENV]
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

__all__ = [
    "PDL_ENV",
    "PDL_MAX_ROWS",
    "PDL_MODES",
    "gemm_launch_programmatic",
    "pdl_mode",
    "start_next_kernel",
    "triton_launch_options",
    "wait_for_previous_kernel",
]

PDL_ENV = "SPECDEC_PDL"
PDL_MODES = ("0", "gemm", "1")
PDL_MAX_ROWS = 16  # the most rows the tensor-map GEMMs take (specdec.kernels.cuda.ops.TENSOR_MAP_MAX_TOKENS)


def pdl_mode() -> str:
    """``$SPECDEC_PDL``: ``"0"``, ``"gemm"`` or ``"1"`` (also when unset); a ``ValueError`` naming it otherwise."""
    mode = os.environ.get(PDL_ENV) or "1"
    if mode not in PDL_MODES:
        raise ValueError(f"${PDL_ENV}: expected one of {PDL_MODES}, got {mode!r}")
    return mode


def triton_launch_options(rows: torch.Tensor) -> dict:
    """Keyword arguments for launching a row-wise Triton kernel with a ``PDL: tl.constexpr`` flag over ``rows [R, D]``:
    ``{"PDL": True, "launch_pdl": True}`` where ``$SPECDEC_PDL`` is ``"1"``, ``rows`` is on CUDA, its stream is being
    captured into a graph and ``R <= PDL_MAX_ROWS`` (where the GEMM after it is a tensor-map kernel that launches
    programmatically too; wider GEMMs run cuBLAS, which does not), else ``{"PDL": False}``."""
    if rows.is_cuda and rows.shape[0] <= PDL_MAX_ROWS and pdl_mode() == "1" and torch.cuda.is_current_stream_capturing():
        return {"PDL": True, "launch_pdl": True}
    return {"PDL": False}


def gemm_launch_programmatic() -> bool:
    """Whether a CUDA tensor-map GEMM launched now on the current thread launches programmatically: ``$SPECDEC_PDL``
    is ``"gemm"`` or ``"1"`` and the current CUDA stream is being captured into a graph."""
    return pdl_mode() != "0" and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


@triton.jit
def wait_for_previous_kernel():
    """Block until the kernel before this one in the stream has finished and its writes are visible."""
    tl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def start_next_kernel():
    """Let the kernel after this one start (once every program of this kernel has signalled or exited)."""
    tl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
