"""CUDA C++ weight-streaming GEMMs for few tokens (``skinny_gemm.cu``), loaded with ctypes and registered as torch custom ops.

``ops`` holds the ops (``specdec::skinny_gemm_bf16``, ``specdec::w12_gemm_small_m``, ``specdec::q_gemm_small_m``;
CPU tensors run the pure-PyTorch references); ``build`` finds, builds and loads the library (``skinny_gemm.cu`` and
the headers it includes: ``build.source_files``); ``README.md`` has the math, the byte floor, a map of the files and
the predictions. Importing this package registers the ops; the library
itself is loaded on the first CUDA call.

Example::

    >>> import torch
    >>> from specdec.kernels.cuda import skinny_gemm_bf16
    >>> skinny_gemm_bf16(torch.ones(2, 8, dtype=torch.bfloat16), torch.ones(3, 8, dtype=torch.bfloat16)).shape
    torch.Size([2, 3])
"""

from specdec.kernels.cuda.build import KernelLibraryError, build_kernels, library_path, load_library
from specdec.kernels.cuda.ops import launch_plan, q_gemm_small_m, skinny_gemm_bf16, w12_gemm_small_m

__all__ = [
    "skinny_gemm_bf16",
    "w12_gemm_small_m",
    "q_gemm_small_m",
    "launch_plan",
    "build_kernels",
    "load_library",
    "library_path",
    "KernelLibraryError",
]
