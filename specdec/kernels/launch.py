"""Programmatic dependent launch (Hopper and later): a kernel launched with it may start while the kernel before it
in the stream is still running, and waits (``griddepcontrol.wait``) where it first needs that kernel's results.

A decode step at one token is a chain of short kernels, and each GEMM's first microseconds (launch, prologue, the
first stages of weights in flight) are not covered by any other work. With the launch, a GEMM's CTAs start while the
kernels before it run, load the weights of their first stages into shared memory, and wait only before their first
load of ``x``. A kernel lets the next one start with ``griddepcontrol.launch_dependents``; where it does so sets how
far ahead the chain runs. ``$SPECDEC_PDL`` (read on every launch) says who takes part:

* ``"1"`` (also when unset): while the stream is being captured into a CUDA graph, the CUDA tensor-map GEMMs (W12
  v7 to v10, Q and bf16 v2 to v5; :func:`gemm_launch_code`) and the Triton kernels of a decode step around them (the
  RMSNorms, SwiGLU, the q/k norm + RoPE and the split-KV attention's two launches) over at most ``PDL_MAX_ROWS`` rows,
  each signalling once it is past its wait: the Triton kernels wait for the kernel before them, then signal
  (:func:`join_programmatic_launch`); a GEMM signals after its K loop (the persistent kernel's producer once it has
  issued its last copy);
* ``"gemm"``: the tensor-map GEMMs alone (captured, signalling as in ``"1"``), the element-wise kernels launched plainly;
* ``"elementwise"``: the Triton kernels alone (as in ``"1"``), the GEMMs launched plainly: with ``"gemm"``, which of
  the two early starts a step's time owes to what;
* ``"0"``: nobody.

Signalling earlier (the element-wise kernels before their wait, every GEMM's producer at its last copy) and a one-wave
GEMM prefetching its later stages into the L2 before its wait were measured slower on the H200's captured AR step
(W12 3.90 -> 4.33 ms, 4.80-4.88 with the prefetch; ``benchmarks/NOTES.md``, "Where a kernel lets the next one start,
and the L2 prefetch: measured"), so neither is built.

Where a kernel signals never changes what it computes: a kernel launched after it waits, before touching anything
this one writes, for this one to finish, and this one finishes only after its own wait, so the chain of waits
orders every kernel after all those before it. Either instruction does nothing in a kernel launched without the
attribute, so an element-wise kernel that takes part stays correct after any kernel; eager launches (a host-bound
path, where nothing overlaps anyway) stay plain. A GEMM reads its first weights before it waits, which is right only
when the kernels running before it do not write those weights: true inside a captured forward, whose graph writes
activations, caches and workspaces but never a linear's weights; not assured for an eager call made right after the
weights were written (a W12 encoding, a load), which is why eager calls launch plainly. The Triton interpreter has
no such instructions: :func:`triton_launch_options` turns them off for tensors that are not on a CUDA device.

Example:
    >>> import os
    >>> os.environ[PDL_ENV] = "gemm"
    >>> pdl_mode(), triton_launch_options(torch.zeros(1, 8)), gemm_launch_programmatic(), gemm_launch_code()
    ('gemm', {'PDL': 0}, False, 0)
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
    "gemm_launch_code",
    "gemm_launch_programmatic",
    "join_programmatic_launch",
    "pdl_mode",
    "start_next_kernel",
    "triton_launch_options",
    "wait_for_previous_kernel",
]

PDL_ENV = "SPECDEC_PDL"
PDL_MODES = ("0", "gemm", "elementwise", "1")
PDL_MAX_ROWS = 16  # the most rows the tensor-map GEMMs take (specdec.kernels.cuda.ops.TENSOR_MAP_MAX_TOKENS)


def pdl_mode() -> str:
    """``$SPECDEC_PDL``: ``"0"``, ``"gemm"``, ``"elementwise"`` or ``"1"`` (also when unset); a ``ValueError`` naming it
    otherwise."""
    mode = os.environ.get(PDL_ENV) or "1"
    if mode not in PDL_MODES:
        raise ValueError(f"${PDL_ENV}: expected one of {PDL_MODES}, got {mode!r}")
    return mode


def triton_launch_options(rows: torch.Tensor) -> dict:
    """Keyword arguments for launching a row-wise Triton kernel with a ``PDL: tl.constexpr`` over ``rows [R, D]``:
    ``{"PDL": 1, "launch_pdl": True}`` where ``$SPECDEC_PDL`` is ``"1"`` or ``"elementwise"``, ``rows`` is on CUDA, its stream is being
    captured into a graph and ``R <= PDL_MAX_ROWS`` (where the GEMM after it is a tensor-map kernel that launches
    programmatically too; wider GEMMs run cuBLAS, which does not), else ``{"PDL": 0}``. The kernel starts with
    :func:`join_programmatic_launch`."""
    taking_part = pdl_mode() in ("1", "elementwise")
    if rows.is_cuda and rows.shape[0] <= PDL_MAX_ROWS and taking_part and torch.cuda.is_current_stream_capturing():
        return {"PDL": 1, "launch_pdl": True}
    return {"PDL": 0}


def gemm_launch_programmatic() -> bool:
    """Whether a CUDA tensor-map GEMM launched now on the current thread launches programmatically: ``$SPECDEC_PDL``
    is ``"gemm"`` or ``"1"`` and the current CUDA stream is being captured into a graph."""
    return gemm_launch_code() != 0


def gemm_launch_code() -> int:
    """What the CUDA library is told before it launches a tensor-map GEMM (``specdec_set_programmatic_launch``): 0
    plain; 1 programmatic, each CTA signalling after its K loop (the persistent kernel's producer at its last copy)."""
    if pdl_mode() in ("0", "elementwise") or not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
        return 0
    return 1


@triton.jit
def wait_for_previous_kernel():
    """Block until the kernel before this one in the stream has finished and its writes are visible."""
    tl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def start_next_kernel():
    """Let the kernel after this one start (once every program of this kernel has signalled or exited)."""
    tl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def join_programmatic_launch(PDL: tl.constexpr):
    """The first statement of a kernel launched with :func:`triton_launch_options`: with ``PDL == 1`` wait for the
    kernel before, then let the next one start; with 0 nothing."""
    if PDL == 1:
        wait_for_previous_kernel()
        start_next_kernel()
