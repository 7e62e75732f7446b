"""Weight formats: W12 lossless 12-bit weights with an 8-bit sub-view.

``W12Tensor`` holds the planes; ``w12_linear`` and ``q_linear`` unpack them for the raw-plane kernels
of ``specdec.kernels.w12_gemm`` (the kernels never see a ``W12Tensor``).
"""

from specdec.formats.w12 import (
    ConversionReport,
    TensorReport,
    W12KernelConfig,
    W12Tensor,
    convert,
    load_file,
    load_into,
    q_linear,
    save_file,
    w12_linear,
)

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
