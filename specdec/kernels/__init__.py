"""Triton kernels, each beside its pure-PyTorch reference.

Submodules are imported on use (``specdec.kernels.w12_gemm``) so that importing the package does
not compile or import Triton.
"""
