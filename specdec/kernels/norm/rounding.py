"""Round float32 to a kernel's storage dtype to nearest-even, bitwise as PyTorch, in compiled Triton and its interpreter.

PyTorch rounds a float32 result to bfloat16 or float16 to nearest, ties to even, as the GPU's ``cvt.rn`` does. The
Triton interpreter (the CPU tests' runtime) casts float32 to bfloat16 by truncation, so a plain ``.to(tl.bfloat16)``
is bitwise on the GPU only. :func:`round_to` rounds bfloat16 by hand on the float32 bits: add ``0x7FFF`` plus the
lowest kept bit and keep the high 16 bits, which is round to nearest even for normal and subnormal numbers, carries
into infinity past the largest bfloat16, and keeps infinities; a NaN stays a (quiet) NaN. The same code runs on both,
so what the interpreter tests bitwise is what the GPU runs; the integer ops cost nothing next to the loads.
float16 casts round to nearest even in both already; float32 is left as it is.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["round_to"]


@triton.jit
def round_to(x, dtype: tl.constexpr):
    """``x`` (float32) rounded to ``dtype`` (float32, float16 or bfloat16), nearest-even; a ``dtype`` tensor."""
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        rounded = tl.where(x != x, (bits >> 16) | 0x40, rounded)  # NaN: keep it a quiet NaN
        return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return x.to(dtype)
