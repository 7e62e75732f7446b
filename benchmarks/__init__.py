"""Benchmarks of specdec; run each as a module from the repository root (``python -m benchmarks.decode.bench_ar``)."""
