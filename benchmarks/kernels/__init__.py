"""Kernel benchmarks: W12 GEMM and GDN tree kernels."""
