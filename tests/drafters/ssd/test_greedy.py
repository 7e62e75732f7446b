"""Greedy SSD decoding emits exactly the autoregressive tokens (``torch.equal``, float32), for every
cache state, hit pattern, fan-out, backup, transport and verifier."""

from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import specdec
from specdec.drafters import ModelDrafter
from specdec.drafters.ssd import BatchAwareBackup, GeometricFanOut, SaguaroTransform, SpeculativeSpeculationDrafter
from specdec.testing import HeldJobTransport, tiny_target
from specdec.verify import ChainVerifier, SamplingConfig, TreeVerifier


@functools.cache
def target():
    return tiny_target(seed=0, max_seq_len=128)


@functools.cache
def draft_model(seed: int, noise: float = 0.0):
    """Seed 0 has the target's own weights (every outcome predicted); ``noise`` perturbs them (some misses)."""
    model = tiny_target(seed=seed, max_seq_len=128)
    if noise:
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(noise * torch.randn(p.shape, generator=gen))
    return model


@functools.cache
def autoregressive(prompt: tuple[int, ...], max_new: int) -> torch.Tensor:
    return specdec.generate(target(), torch.tensor([prompt]), max_new_tokens=max_new).tokens


def fan_out_policy(kind: str, budget: int):
    return budget if kind == "uniform" else GeometricFanOut(budget)


@given(
    draft=st.sampled_from([(0, 0.0), (0, 0.05), (1, 0.0)]),
    budget=st.integers(0, 6),
    fan_out=st.sampled_from(["uniform", "geometric"]),
    backup=st.sampled_from(["neural", "ngram", "random", "batch-aware"]),
    num_draft=st.integers(1, 4),
    verifier=st.sampled_from(["chain", "tree"]),
    prompt=st.lists(st.integers(0, 96), min_size=1, max_size=6).map(tuple),
)
def test_greedy_equals_autoregressive(draft, budget, fan_out, backup, num_draft, verifier, prompt):
    if backup == "batch-aware":
        backup = BatchAwareBackup(batch_threshold=1, fast="ngram")
    drafter = SpeculativeSpeculationDrafter(
        ModelDrafter(draft_model(*draft)), fan_out=fan_out_policy(fan_out, budget), backup=backup
    )
    verify = ChainVerifier() if verifier == "chain" else TreeVerifier(budget=8)
    out = specdec.generate(
        target(), torch.tensor([prompt]), max_new_tokens=12, drafter=drafter, verifier=verify, num_draft_tokens=num_draft
    )
    assert torch.equal(out.tokens, autoregressive(prompt, 12))


@pytest.mark.parametrize("noise, expect", [(0.0, "hits"), (0.05, "both")])
def test_hit_patterns_are_exercised(noise, expect):
    # 4 continuations over 4 positions: one guess per position, the all-accepted one included
    drafter = SpeculativeSpeculationDrafter(ModelDrafter(draft_model(0, noise)), fan_out=4)
    prompt = (5, 17, 3)
    out = specdec.generate(target(), torch.tensor([prompt]), max_new_tokens=16, drafter=drafter, num_draft_tokens=3)
    assert torch.equal(out.tokens, autoregressive(prompt, 16))
    s = drafter.stats
    assert s.cold_starts == 1 and s.hits > 0 and s.predrafts > 0 and s.predraft_s > 0
    if expect == "hits":
        assert s.misses == 0
    else:
        assert s.misses > 0


def test_zero_budget_always_misses_and_stays_exact():
    drafter = SpeculativeSpeculationDrafter(ModelDrafter(draft_model(0)), fan_out=0, backup="random")
    prompt = (4, 4, 9)
    out = specdec.generate(target(), torch.tensor([prompt]), max_new_tokens=10, drafter=drafter, num_draft_tokens=2)
    assert torch.equal(out.tokens, autoregressive(prompt, 10))
    assert drafter.stats.hits == 0 and drafter.stats.misses > 0 and drafter.stats.predrafts == 0
    assert set(drafter.stats.backups) == {"random"}


def test_saguaro_transform_is_inert_when_greedy():
    prompt = (8, 1)
    plain = SpeculativeSpeculationDrafter(ModelDrafter(draft_model(1)), fan_out=3)
    saguaro = SpeculativeSpeculationDrafter(ModelDrafter(draft_model(1)), fan_out=3, transform=SaguaroTransform(2, 0.1))
    for drafter in (plain, saguaro):
        out = specdec.generate(target(), torch.tensor([prompt]), max_new_tokens=10, drafter=drafter, num_draft_tokens=3)
        assert torch.equal(out.tokens, autoregressive(prompt, 10))
    assert (plain.stats.hits, plain.stats.misses) == (saguaro.stats.hits, saguaro.stats.misses)


def test_thread_transport_gives_the_sequential_tokens_when_sampling():
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    runs = []
    for transport in ("sequential", "thread"):
        drafter = SpeculativeSpeculationDrafter(ModelDrafter(draft_model(0)), fan_out=8, transport=transport)
        out = specdec.generate(target(), prompt, max_new_tokens=12, drafter=drafter, num_draft_tokens=3, temperature=0.8, seed=7)
        runs.append((out.tokens, drafter.stats.hits))
        drafter.transport.close()
    assert torch.equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1] > 0


def test_several_requests_reset_the_cache():
    drafter = SpeculativeSpeculationDrafter(ModelDrafter(draft_model(0)), fan_out=2)
    prompts = [torch.tensor([1, 2, 3]), torch.tensor([9])]
    out = specdec.generate(target(), prompts, max_new_tokens=8, drafter=drafter, num_draft_tokens=2)
    for prompt, tokens in zip(prompts, out.tokens):
        assert torch.equal(tokens, autoregressive(tuple(prompt.tolist()), 8)[0])
    assert drafter.stats.cold_starts == 2


def test_a_round_after_a_round_of_no_drafts_is_a_miss_not_a_cold_start():
    drafter = SpeculativeSpeculationDrafter(ModelDrafter(draft_model(0)), fan_out=2)
    drafter.reset()
    greedy = SamplingConfig()
    context = torch.tensor([1, 2, 3])
    first = drafter.propose(context, 3, sampling=greedy, generator=None)
    context = torch.cat([context, first.tokens[:1], torch.tensor([5])])
    drafter.propose(context, 0, sampling=greedy, generator=None)  # the cache was full, say: nothing pre-drafted after
    drafter.propose(torch.cat([context, torch.tensor([7])]), 3, sampling=greedy, generator=None)
    assert (drafter.stats.cold_starts, drafter.stats.hits + drafter.stats.misses) == (1, 2)


def test_generate_leaves_no_predraft_in_flight():
    # a job left running after generate returns keeps using the base drafter (and any model it shares)
    # while the caller moves on: the next request, another drafter over the same model, a timer
    transport = HeldJobTransport()
    drafter = SpeculativeSpeculationDrafter(ModelDrafter(draft_model(0)), fan_out=8, transport=transport)
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    out = specdec.generate(target(), prompt, max_new_tokens=10, drafter=drafter, num_draft_tokens=3)
    assert transport.held is None
    assert drafter.stats.hits > 0 and torch.equal(out.tokens, autoregressive((3, 1, 4, 1, 5), 10))


def test_generate_finishes_the_drafter_when_the_round_fails():
    transport = HeldJobTransport()
    drafter = SpeculativeSpeculationDrafter(ModelDrafter(draft_model(0)), fan_out=2, transport=transport)

    class FailingVerifier(ChainVerifier):
        def verify(self, *args, **kwargs):
            raise RuntimeError("planted")

    with pytest.raises(RuntimeError, match="planted"):
        specdec.generate(target(), torch.tensor([[3, 1, 4]]), max_new_tokens=6, drafter=drafter, verifier=FailingVerifier())
    assert transport.held is None


def test_a_failing_predraft_surfaces_its_own_error_through_generate():
    class FailingSecondStep(ModelDrafter):
        calls = 0

        def propose(self, *args, **kwargs):
            FailingSecondStep.calls += 1
            if FailingSecondStep.calls > 6:
                raise RuntimeError("planted pre-draft failure")
            return super().propose(*args, **kwargs)

    drafter = SpeculativeSpeculationDrafter(FailingSecondStep(draft_model(0)), fan_out=2, transport="thread")
    with pytest.raises(RuntimeError, match="planted pre-draft failure"):
        specdec.generate(target(), torch.tensor([[3, 1, 4, 1, 5]]), max_new_tokens=12, drafter=drafter, num_draft_tokens=3)
    drafter.transport.close()


def test_a_draft_model_as_long_as_the_target_predrafts_what_fits_and_stays_exact():
    # the last rounds' pre-drafts reach past the draft model's cache: they stop where it is full
    short = tiny_target(seed=0, max_seq_len=32)
    drafter = SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0, max_seq_len=32)))
    prompt = torch.tensor([[1, 2, 3, 4]])
    with pytest.warns(UserWarning, match="overflow the draft model's max_seq_len 32"):
        spec = specdec.generate(short, prompt, 28, drafter=drafter, num_draft_tokens=4)
    short.reset()
    assert torch.equal(spec.tokens, specdec.generate(short, prompt, 28).tokens)
