"""``logits_to_probs`` keeps the tokens transformers' own warpers keep, and ``sample`` refuses laws it cannot draw from."""

from __future__ import annotations

import pytest
import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample


def _transformers_law(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    scores = TemperatureLogitsWarper(temperature)(None, logits[None].clone())
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return torch.softmax(scores, dim=-1)[0]


@pytest.mark.parametrize("top_k, top_p", [(0, 0.9), (3, 1.0), (5, 0.6), (1, 1.0), (0, 0.3)])
def test_the_law_keeps_the_tokens_transformers_warpers_keep(top_k, top_p):
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        logits = torch.randn(11, generator=gen) * 2
        ours = logits_to_probs(logits, SamplingConfig(temperature=0.8, top_k=top_k, top_p=top_p))
        want = _transformers_law(logits, 0.8, top_k, top_p)
        assert torch.equal(ours > 0, want > 0)
        torch.testing.assert_close(ours, want, rtol=1e-6, atol=1e-7)


def test_top_p_and_top_k_at_their_boundaries_keep_what_transformers_keeps():
    # a mass of exactly top_p before a token: the token is dropped; a tie at the k-th logit: both kept
    exact = torch.tensor([0.5, 0.25, 0.25]).log()
    ours = logits_to_probs(exact, SamplingConfig(temperature=1.0, top_p=0.5))
    assert ours.tolist() == [1.0, 0.0, 0.0]
    assert torch.equal(ours > 0, _transformers_law(exact, 1.0, 0, 0.5) > 0)
    tied = torch.tensor([3.0, 1.0, 1.0, 0.0])
    ours = logits_to_probs(tied, SamplingConfig(temperature=1.0, top_k=2))
    assert (ours > 0).tolist() == [True, True, True, False]
    assert torch.equal(ours > 0, _transformers_law(tied, 1.0, 2, 1.0) > 0)


@pytest.mark.parametrize(
    "probs", [torch.zeros(4), torch.tensor([0.5, float("nan"), 0.5, 0.0]), torch.tensor([float("inf"), 0.0, 0.0, 0.0])]
)
def test_sample_refuses_a_law_without_finite_positive_mass(probs):
    with pytest.raises(ValueError, match="probs"):
        sample(probs, torch.Generator().manual_seed(0))
