"""Fixtures of the benchmark script tests."""

import pytest


@pytest.fixture
def w12_variants_called(monkeypatch):
    """The W12 kernel variant (``ops.w12_variant(K)``) of every ``ops.w12_gemm_small_m`` call made during the test."""
    from specdec.kernels.cuda import ops

    exact = ops.w12_gemm_small_m
    variants = []

    def recording(x, *planes):
        variants.append(ops.w12_variant(x.shape[1]))
        return exact(x, *planes)

    monkeypatch.setattr(ops, "w12_gemm_small_m", recording)
    monkeypatch.delenv(ops.W12_VARIANT_ENV, raising=False)
    return variants


@pytest.fixture
def q_variants_called(monkeypatch):
    """``(ops.q_variant(K), M, K)`` of every ``ops.q_gemm_small_m`` call made during the test (``x`` is ``[M, K]``)."""
    from specdec.kernels.cuda import ops

    exact = ops.q_gemm_small_m
    calls = []

    def recording(x, ae, base):
        calls.append((ops.q_variant(x.shape[1]), *x.shape))
        return exact(x, ae, base)

    monkeypatch.setattr(ops, "q_gemm_small_m", recording)
    monkeypatch.delenv(ops.Q_VARIANT_ENV, raising=False)
    return calls


@pytest.fixture
def bf16_variants_called(monkeypatch):
    """``(ops.bf16_variant(K), M, K)`` of every ``ops.skinny_gemm_bf16`` call made during the test (``x`` is ``[M, K]``)."""
    from specdec.kernels.cuda import ops

    exact = ops.skinny_gemm_bf16
    calls = []

    def recording(x, weight):
        calls.append((ops.bf16_variant(x.shape[1]), *x.shape))
        return exact(x, weight)

    monkeypatch.setattr(ops, "skinny_gemm_bf16", recording)
    monkeypatch.delenv(ops.BF16_VARIANT_ENV, raising=False)
    return calls
