"""Weight formats: W12 lossless 12-bit weights with an 8-bit sub-view.

``w12_linear``, ``q_linear`` and ``W12KernelConfig`` live in ``specdec.kernels.w12_gemm`` and are
re-exported here on first access (the kernel module imports this package, so an eager import
would be circular).
"""

from specdec.formats.w12 import (
    ConversionReport,
    TensorReport,
    W12Tensor,
    convert,
    load_file,
    load_into,
    save_file,
)

_KERNEL_NAMES = ("w12_linear", "q_linear", "W12KernelConfig")

__all__ = [
    "W12Tensor",
    "W12KernelConfig",
    "ConversionReport",
    "TensorReport",
    "convert",
    "w12_linear",
    "q_linear",
    "save_file",
    "load_file",
    "load_into",
]


def __getattr__(name: str):
    if name in _KERNEL_NAMES:
        from specdec.kernels import w12_gemm

        return getattr(w12_gemm, name)
    raise AttributeError(f"module 'specdec.formats' has no attribute {name!r}")
