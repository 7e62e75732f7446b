"""The SSD parts on their own: outcomes, cache, fan-out rounding, estimators, predictor, Saguaro law identity."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from ssd_helpers import LawDrafter

from specdec.contracts.sampling import SamplingConfig
from specdec.drafters.ssd import (
    AcceptanceRateEstimator,
    CachedSpeculation,
    MissPowerEstimator,
    OutcomePredictor,
    RandomBackup,
    SaguaroTransform,
    SequentialTransport,
    SpeculationCache,
    SpeculativeSpeculationDrafter,
    VerificationOutcome,
    apportion,
    draft_chain,
    geometric_fan_out,
    read_outcome,
)
from specdec.drafters.ssd.fan_out import geometric_weights
from specdec.testing.laws import MarkovLaw, probability_vectors
from specdec.verify.sampling import sample


def test_read_outcome_every_k():
    prev, drafts = torch.tensor([7, 8]), torch.tensor([1, 2, 3])
    for k in range(4):
        ctx = torch.cat([prev, drafts[:k], torch.tensor([0])])
        assert read_outcome(prev, drafts, ctx) == VerificationOutcome(k, 0)
    assert read_outcome(prev, drafts, torch.tensor([7, 8, 1, 2])) is None  # bonus equal to the rejected draft
    assert read_outcome(prev, drafts, torch.tensor([7, 9, 1])) is None  # another context
    assert read_outcome(prev, drafts, torch.tensor([7, 8])) is None  # nothing emitted


def test_cache_counts_and_replaces():
    cache = SpeculationCache()
    entry = CachedSpeculation(
        proposal=RandomBackup(3).propose(torch.tensor([0]), 2, sampling=SamplingConfig(temperature=1.0), generator=None)
    )
    cache.replace({VerificationOutcome(1, 2): entry})
    assert cache.lookup(VerificationOutcome(1, 2)) is entry and cache.lookup(None) is None
    assert (cache.hits, cache.misses) == (1, 1)
    cache.replace({})
    assert cache.lookup(VerificationOutcome(1, 2)) is None and len(cache) == 0
    with pytest.raises(TypeError, match="entries"):
        cache.replace({(1, 2): entry})


@given(
    weights=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=8),
    budget=st.integers(0, 40),
    data=st.data(),
)
def test_apportion_keeps_budget_and_caps(weights, budget, data):
    caps = data.draw(st.lists(st.integers(0, 10), min_size=len(weights), max_size=len(weights)))
    alloc = apportion(weights, budget, caps)
    assert sum(alloc) == min(budget, sum(caps))
    assert all(0 <= a <= c for a, c in zip(alloc, caps))


@given(acceptance=st.floats(0.05, 0.95), power=st.floats(0.1, 5.0), budget=st.integers(8, 64), k=st.integers(1, 7))
def test_geometric_fan_out_decreases_with_depth_and_keeps_budget(acceptance, power, budget, k):
    alloc = geometric_fan_out(budget, k, acceptance, power)
    assert sum(alloc) == budget
    assert all(a >= b for a, b in zip(alloc[:-1], alloc[1:k]))  # positions 0..K-1 non-increasing
    w = geometric_weights(k, acceptance, power)
    assert all(abs(a - budget * wi / sum(w)) < 1.0 + 1e-9 for a, wi in zip(alloc, w))  # within one unit of the real share


def test_estimators_recover_their_parameters():
    est = AcceptanceRateEstimator(prior_weight=0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(4000):
        k = 0
        while k < 5 and float(torch.rand((), generator=gen)) < 0.7:
            k += 1
        est.observe(k, 5)
    assert abs(est.rate - 0.7) < 0.02
    power = MissPowerEstimator(prior_weight=0)
    for f in (2, 4, 8):
        for i in range(1000):
            power.observe(f, hit=(i % 1000) >= 1000 * f**-1.5)
    assert abs(power.power - 1.5) < 0.05


def test_predictor_matches_a_direct_count():
    glue = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8], [0.4, 0.4, 0.2]])
    drafts = torch.tensor([0, 2])
    joint = OutcomePredictor().probabilities(glue, drafts, acceptance=0.6)
    assert torch.allclose(joint.sum(), torch.tensor(1.0))
    assert joint[0, 0] == 0 and joint[1, 2] == 0  # a rejected draft is never the bonus
    assert torch.allclose(joint[0, 1], torch.tensor(0.4 * 0.3 / 0.5))
    assert torch.allclose(joint[2, 0], torch.tensor(0.36 * 0.4))


@given(probs=st.integers(2, 9).flatmap(probability_vectors), top=st.integers(1, 4), scale=st.floats(0.01, 1.0))
def test_saguaro_transform_scales_top_tokens(probs, top, scale):
    out = SaguaroTransform(top, scale)(probs)
    assert torch.allclose(out.sum(), torch.tensor(1.0, dtype=out.dtype), atol=1e-5)
    chosen = torch.topk(probs, min(top, probs.numel())).indices
    mask = torch.zeros_like(probs, dtype=torch.bool)
    mask[chosen] = True
    ratio = out / probs.clamp_min(1e-30)
    pos = probs > 0
    if (pos & ~mask).any() and (pos & mask).any():
        assert torch.allclose(ratio[pos & mask] / ratio[pos & ~mask][0], torch.tensor(scale, dtype=out.dtype), rtol=1e-4)


@given(seed=st.integers(0, 2**31), scale=st.floats(0.05, 1.0), top=st.integers(1, 3), num_tokens=st.integers(1, 4))
def test_saguaro_draws_and_reports_the_same_law(seed, scale, top, num_tokens):
    """Replaying the draws against the reported ``draft_probs`` reproduces every token: one law on both sides."""
    law = MarkovLaw(6, seed=seed % 1000)
    sampling = SamplingConfig(temperature=0.9, top_k=5)
    chain = draft_chain(
        lambda ctx: law(ctx.tolist()),
        torch.tensor([1, 2]),
        num_tokens,
        sampling=sampling,
        generator=torch.Generator().manual_seed(seed),
        sampler=sample,
        transform=SaguaroTransform(top, scale),
    )
    replay = torch.Generator().manual_seed(seed)
    p = chain.proposal
    assert torch.equal(torch.stack([sample(row, replay) for row in p.draft_probs]), p.tokens)
    assert torch.equal(p.draft_probs, SaguaroTransform(top, scale)(chain.ranking))


def test_drafter_argument_errors_name_the_argument():
    base = LawDrafter(MarkovLaw(4, seed=0))
    with pytest.raises(TypeError, match="base"):
        SpeculativeSpeculationDrafter(object())
    with pytest.raises(TypeError, match="fan_out"):
        SpeculativeSpeculationDrafter(base, fan_out="wide")
    with pytest.raises(ValueError, match="backup"):
        SpeculativeSpeculationDrafter(base, backup="oracle")
    with pytest.raises(ValueError, match="transport"):
        SpeculativeSpeculationDrafter(base, transport="gpu")
    with pytest.raises(ValueError, match="scale"):
        SaguaroTransform(1, 0.0)
    with pytest.raises(ValueError, match="max_tokens"):
        SpeculativeSpeculationDrafter(base).propose(torch.tensor([1]), -1, sampling=SamplingConfig(), generator=None)
    assert math.isclose(sum(geometric_fan_out(10, 3, 0.9, 1.0)), 10)


def test_default_transport_is_inline_and_the_side_stream_needs_cuda():
    # the side stream is opt-in: with a graph-replaying base drafter it hung on the H200 (CudaStreamTransport)
    base = LawDrafter(MarkovLaw(4, seed=0))
    assert isinstance(SpeculativeSpeculationDrafter(base).transport, SequentialTransport)
    stream = SpeculativeSpeculationDrafter(base, transport="stream")
    stream.reset()
    with pytest.raises(ValueError, match="transport: 'stream' needs a CUDA context"):
        stream.propose(torch.tensor([1, 2]), 2, sampling=SamplingConfig(), generator=None)


def test_a_seeded_request_gives_the_same_tokens_whatever_ran_before_it():
    """The fan-out policy learns within a request; reset() starts each request from the policy as given."""
    import specdec as sd
    from specdec.drafters import ModelDrafter, SpeculativeSpeculationDrafter
    from specdec.drafters.ssd import GeometricFanOut
    from specdec.testing import tiny_target

    target = tiny_target(seed=0, max_seq_len=256)
    prompt, other = torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[9, 8, 7, 9, 8, 7, 9, 8]])
    kw = dict(temperature=1.0, seed=123, num_draft_tokens=4)

    def fresh():
        return SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0, max_seq_len=256)), fan_out=GeometricFanOut(4))

    alone = sd.generate(target, prompt, 48, drafter=fresh(), **kw).tokens
    drafter = fresh()
    for _ in range(3):
        sd.generate(target, other, 48, drafter=drafter, **kw)
    assert drafter.fan_out.acceptance_estimator.accepted > 0  # it learned within those requests
    assert torch.equal(sd.generate(target, prompt, 48, drafter=drafter, **kw).tokens, alone)
