"""OracleDrafter: looks its references up, hits its acceptance profile, never changes the output, wraps a real drafter."""

from __future__ import annotations

import math

import pytest
import torch

import specdec as sd
from specdec.drafters import load_drafter, save_fixture
from specdec.drafters.oracle import PRESETS, AcceptanceProfile, OracleDrafter
from specdec.testing import tiny_target
from specdec.testing.laws import autoregressive_law, chain_round, speculative_law, total_variation
from specdec.verify.sampling import SamplingConfig
from specdec.verify.tree import TreeVerifier


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, max_seq_len=1024)


def test_presets_reproduce_published_means():
    published = {
        "dspark-qwen3-8b-gsm8k": 6.17,
        "dflash-qwen3-8b-gsm8k": 5.33,
        "dflash-qwen3-8b-gsm8k-b16": 6.36,
        "dflash2-qwen3.8-27b-gsm8k": 5.46,
        "specpilot-one-level": 4.8,
    }
    assert set(published) == set(PRESETS)
    for name, tau in published.items():
        assert abs(PRESETS[name].tokens_per_round - tau) < 1e-9
        assert any(cite in PRESETS[name].source for cite in ("arXiv", "z-lab", "SpecPilot"))
    assert abs(PRESETS["dspark-qwen3-8b-gsm8k"].conditional[0] - 0.93) < 0.01
    assert abs(sum(PRESETS["dflash-qwen3-8b-gsm8k"].accepted_law()) - 1) < 1e-12
    with pytest.raises(ValueError, match="conditional"):
        AcceptanceProfile(conditional=(1.2,), source="x")
    with pytest.raises(ValueError, match="profile"):
        OracleDrafter("nope", vocab_size=5)
    with pytest.raises(ValueError, match="vocab_size"):
        OracleDrafter("dspark-qwen3-8b-gsm8k")


@pytest.mark.parametrize("verifier", ["chain", "tree"])
def test_hits_profile_and_stays_exact(target, verifier):
    profile = AcceptanceProfile(conditional=(0.9, 0.8, 0.7, 0.6, 0.5), source="test", name="test")
    prompt = torch.tensor([[1, 2, 3, 4]])
    ar = sd.generate(target, prompt, 600)
    drafter = OracleDrafter(profile, references=[torch.cat([prompt[0], ar.tokens[0]])], vocab_size=target.vocab_size, seed=1)
    ver = TreeVerifier(budget=8) if verifier == "tree" else sd.ChainVerifier()
    out = sd.generate(target, prompt, 600, drafter=drafter, verifier=ver, num_draft_tokens=5)
    assert torch.equal(out.tokens, ar.tokens)
    assert drafter.label == "simulated acceptance" and "simulated acceptance" in repr(drafter)
    # every round accepted exactly what the oracle planned
    planned = [0] * len(out.stats.accepted_histogram)
    for m in drafter.planned:
        planned[m] += 1
    assert planned == out.stats.accepted_histogram
    # ... and the plans follow the profile: mean within 4 standard errors
    law = profile.accepted_law()
    mean = sum(n * p for n, p in enumerate(law))
    sd_one = math.sqrt(sum((n - mean) ** 2 * p for n, p in enumerate(law)))
    full = drafter.planned[:-3]  # the last rounds may be cut by max_new_tokens
    assert abs(sum(full) / len(full) - mean) < 4 * sd_one / math.sqrt(len(full))
    assert len(full) > 100


def test_wrong_reference_never_changes_output(target):
    prompt = torch.tensor([[5, 6, 7]])
    ar = sd.generate(target, prompt, 60)
    wrong = torch.cat([prompt[0], (ar.tokens[0] + 3) % target.vocab_size])
    drafter = OracleDrafter(AcceptanceProfile((1.0,) * 4, source="test"), references=[wrong], vocab_size=target.vocab_size)
    out = sd.generate(target, prompt, 60, drafter=drafter, num_draft_tokens=4)
    assert torch.equal(out.tokens, ar.tokens)
    assert drafter.unmatched_rounds > 0


def test_sampled_rounds_keep_the_target_law():
    """Exact enumeration: a round that proposes the oracle's tokens (deterministic rule) emits the target's law."""

    def logits(ctx):
        return torch.tensor([[1.0, 0.2, -0.5], [0.0, 0.8, 0.1], [-0.3, 0.0, 0.9]], dtype=torch.float64)[ctx[-1]]

    sampling = SamplingConfig(temperature=1.0)
    reference = torch.tensor([0, 1, 2, 2, 0, 1, 1])
    oracle = OracleDrafter(AcceptanceProfile((0.7, 0.7), source="test"), references=[reference], vocab_size=3, seed=4)

    def tokens(ctx):
        return oracle.propose(torch.tensor(ctx), 2, sampling=sampling, generator=None).tokens.tolist()

    spec = speculative_law(chain_round(logits, num_draft=2, sampling=sampling, draft_tokens=tokens), (0,), 4)
    assert total_variation(spec, autoregressive_law(logits, (0,), 4, sampling=sampling)) < 1e-6


def test_wraps_a_real_drafter(tmp_path):
    target = tiny_target(seed=0, vocab_size=6, max_seq_len=256)
    real = load_drafter(save_fixture(tmp_path / "d", "DFlashDraftModel", target, block_size=6), target)
    prompt = torch.tensor([[1, 2, 3, 4, 0]])
    ar = sd.generate(target, prompt, 40)
    oracle = OracleDrafter("dspark-qwen3-8b-gsm8k", references=[torch.cat([prompt[0], ar.tokens[0]])], wrap=real)
    assert oracle.target_layer_ids == real.target_layer_ids and oracle.vocab_size == 6
    out = sd.generate(target, prompt, 40, drafter=oracle, num_draft_tokens=5)
    assert torch.equal(out.tokens, ar.tokens)
    assert oracle.wrapped_seconds > 0 and real.cache.length > 0
    assert out.stats.mean_accepted > 2


def test_proposals_follow_the_first_reference_the_context_is_a_proper_prefix_of():
    references = [torch.tensor([1, 2, 3, 4, 5]), torch.tensor([1, 2, 9, 9, 9, 9]), torch.tensor([7, 9])]

    def oracle(conditional):
        return OracleDrafter(AcceptanceProfile(conditional, source="test"), references=references, vocab_size=10)

    def propose(drafter, context, k=3):
        return drafter.propose(torch.tensor(context), k, sampling=SamplingConfig(), generator=None).tokens

    hits = oracle((1.0, 1.0, 1.0))
    assert propose(hits, [1, 2]).tolist() == [3, 4, 5]  # the first reference wins
    assert propose(hits, [1, 2, 9]).tolist() == [9, 9, 9]
    assert propose(hits, [7]).tolist() == [9]  # as many drafts as the reference has left
    assert propose(hits, [1, 2], k=1).tolist() == [3]
    proposal = propose(hits, [1, 2])
    assert proposal.dtype == torch.long
    proposal.fill_(0)  # the proposal is the drafter's own tensor: the reference is untouched
    assert propose(hits, [1, 2]).tolist() == [3, 4, 5] and references[0].tolist() == [1, 2, 3, 4, 5]
    for unmatched in ([7, 9], [1, 3], [2]):  # a whole reference, a wrong token, no reference
        assert propose(hits, unmatched).numel() == 0
    assert hits.unmatched_rounds == 3
    misses = oracle((0.0, 0.0, 0.0))  # the miss is the truth + 1, wrapping around the vocabulary
    assert propose(misses, [1, 2]).tolist() == [4, 4, 5] and propose(misses, [7]).tolist() == [0]
    assert misses.planned == [0, 0]


def test_miss_draws_are_those_of_one_rand_call_per_round():
    """The drafter hands out its uniforms from blocks; each round's are still those of ``torch.rand(k)`` of its own."""
    profile = AcceptanceProfile((0.99,) * 300, source="test")
    reference = torch.arange(2000) % 97
    oracle = OracleDrafter(profile, references=[reference], vocab_size=97, seed=3)
    sizes = [0, 5, 300, 17, 256, 1, 299, 40, 255, 2]  # rounds within a block, across blocks, past a whole block
    plain, generator, position = [], torch.Generator().manual_seed(3), 10
    for k in sizes:
        drafts = oracle.propose(reference[:position], k, sampling=SamplingConfig(), generator=None).tokens
        uniforms = torch.rand(k, generator=generator, dtype=torch.float64).tolist()
        m = next((j for j, u in enumerate(uniforms) if u >= 0.99), k)
        plain.append(m)
        truth = reference[position : position + k].clone()
        if m < k:
            truth[m] = (truth[m] + 1) % 97
        assert torch.equal(drafts, truth)
        position += 1
    assert oracle.planned == plain and 0 < min(p for p in plain if p) < max(plain)
