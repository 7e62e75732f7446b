"""The greedy acceptance rule, the sampled acceptance step, and the sampling helpers it draws with."""

import pytest
import torch

from specdec.verify import chain as chain_mod
from specdec.verify.chain import chain_accept, chain_laws
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample


def test_greedy_accepts_longest_matching_prefix_then_bonus():
    argmax = torch.tensor([3, 1, 2, 0])  # target argmax at rows root, d1, d2, d3
    logits = torch.nn.functional.one_hot(argmax, 5).float() * 4.0
    cases = {(3, 1, 2): (3, 0), (3, 1, 4): (2, 2), (0, 1, 2): (0, 3), (3, 4, 2): (1, 1)}
    for drafts, (n, bonus) in cases.items():
        got_n, got_bonus = chain_accept(logits, torch.tensor(drafts), None, sampling=SamplingConfig())
        assert (got_n, int(got_bonus)) == (n, bonus)


def test_empty_chain_is_an_ar_step():
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    n, bonus = chain_accept(logits, torch.zeros(0, dtype=torch.long), None, sampling=SamplingConfig())
    assert (n, int(bonus)) == (0, 1)


def test_sampled_chain_accept_follows_its_laws():
    """Monte-Carlo check that chain_accept samples what chain_laws describes (one draft, V = 3)."""
    target_logits = torch.tensor([[0.0, 1.0, -1.0], [0.5, 0.0, 0.0]])
    draft_probs = torch.tensor([[0.2, 0.1, 0.7]])
    sampling = SamplingConfig(temperature=1.0)
    laws = chain_laws(logits_to_probs(target_logits, sampling), torch.tensor([2]), draft_probs)
    gen = torch.Generator().manual_seed(0)
    trials = 5000
    accepted = sum(
        chain_accept(target_logits, torch.tensor([2]), draft_probs, sampling=sampling, generator=gen)[0] for _ in range(trials)
    )
    expected = float(laws.accept_probs[0])
    assert abs(accepted / trials - expected) < 4 * (expected * (1 - expected) / trials) ** 0.5


def test_sample_is_reproducible_and_respects_zeros():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5]] * 4000)
    a = sample(probs, torch.Generator().manual_seed(3))
    b = sample(probs, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    assert set(a.tolist()) == {1, 3}


def test_top_p_keeps_smallest_set_reaching_mass():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = logits_to_probs(logits, SamplingConfig(temperature=1.0, top_p=0.8))
    torch.testing.assert_close(probs, torch.tensor([0.625, 0.375, 0.0, 0.0]))


def test_sampling_config_rejects_bad_values():
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(temperature=1, top_p=0)
    with pytest.raises(ValueError, match="top_k"):
        SamplingConfig(top_k=-2)
    with pytest.raises(ValueError, match="temperature: expected a finite float >= 0, got inf"):
        SamplingConfig(temperature=float("inf"))
    with pytest.raises(ValueError, match="repetition_penalty: expected a finite float > 0"):
        SamplingConfig(repetition_penalty=float("inf"))


def test_module_exports_the_laws_used_by_verify():
    assert chain_mod.chain_accept is chain_accept
