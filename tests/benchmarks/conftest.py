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


class GraphKeys:
    """The graph keys (``StaticGraphs.run``) each phase of a benchmark used: ``timed(module, name)`` makes every call of
    ``module.name`` a timed phase; ``first_used_while_timed()`` lists the keys a timed phase used before any untimed
    code had (on a GPU, a CUDA-graph capture inside the timed region)."""

    def __init__(self, monkeypatch):
        from specdec.models.graphs import StaticGraphs

        self.monkeypatch, self.timing, self.untimed, self.late = monkeypatch, False, set(), []
        self.timed_keys = set()
        run = StaticGraphs.run

        def recording(graphs, key, body):
            tagged = (id(graphs), key)
            if self.timing:
                self.timed_keys.add(key)
                if tagged not in self.untimed:
                    self.late.append(key)
            else:
                self.untimed.add(tagged)
            return run(graphs, key, body)

        monkeypatch.setattr(StaticGraphs, "run", recording)

    def timed(self, module, name: str) -> None:
        inner = getattr(module, name)

        def timed_call(*args, **kwargs):
            self.timing = True
            try:
                return inner(*args, **kwargs)
            finally:
                self.timing = False

        self.monkeypatch.setattr(module, name, timed_call)

    def first_used_while_timed(self) -> list:
        return self.late


@pytest.fixture
def graph_keys(monkeypatch):
    """A :class:`GraphKeys` recording every graph key used during the test, by phase."""
    return GraphKeys(monkeypatch)
