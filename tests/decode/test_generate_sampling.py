"""generate() at T > 0: seeded runs reproduce, and sampled runs follow the target's exact law (chi-square)."""

import functools

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats
from test_generate import _target

import specdec as sd
from specdec.drafters.model import ModelDrafter
from specdec.testing import tiny_target
from specdec.verify.sampling import logits_to_probs


def test_seeded_sampling_is_reproducible():
    target = _target("llama", 0, 97)
    ids = torch.tensor([[3, 4, 5]])
    kw = dict(temperature=0.9, top_k=20, drafter=ModelDrafter(tiny_target(seed=9, max_seq_len=64)))
    a = sd.generate(target, ids, 20, seed=7, **kw)
    b = sd.generate(target, ids, 20, seed=7, **kw)
    c = sd.generate(target, ids, 20, seed=8, **kw)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)


V_SMALL = 6


@functools.cache
def _small_target():
    return tiny_target(seed=11, vocab_size=V_SMALL, hidden_size=16, intermediate_size=32, max_seq_len=32)


def _exact_law_3(target, prompt, sampling):
    """Exact law of the first 3 generated tokens, by enumeration over the target's laws."""
    from specdec.verify.sampling import logits_to_probs

    law = np.zeros((V_SMALL,) * 3)
    for a in range(V_SMALL):
        for b in range(V_SMALL):
            seq = torch.tensor([prompt + [a, b]])
            target.reset()
            probs = logits_to_probs(target(seq).logits[0, -3:], sampling).double()
            law[a, b] = probs[0, a].item() * probs[1, b].item() * probs[2].numpy()
    target.reset()
    return law


class GreedyDrafterClaimingSoftmax(ModelDrafter):
    """Bug: drafts the argmax path but reports the softmax along it as the law it drew from."""

    def propose(self, context, max_tokens, *, sampling, generator):
        tokens = super().propose(context, max_tokens, sampling=sd.SamplingConfig(), generator=None).tokens
        scorer = self.scorer
        scorer.reset()
        n = context.numel()
        logits = scorer(torch.cat([context, tokens])[None]).logits[0, n - 1 : n - 1 + tokens.numel()]
        return sd.DraftProposal(tokens=tokens, draft_probs=logits_to_probs(logits, sampling))


def _small_drafter_model():
    return tiny_target(seed=12, vocab_size=V_SMALL, hidden_size=16, intermediate_size=32, max_seq_len=32)


def _chi_square_p(drafter, runs=1500):
    """Chi-square of the joint law of generated tokens 2 and 3 (the ones speculation decides)."""
    target = _small_target()
    prompt = [1, 2, 3]
    sampling = sd.SamplingConfig(temperature=1.0)
    law = _exact_law_3(target, prompt, sampling).sum(0).ravel()  # [V * V] over (token 2, token 3)
    counts = np.zeros_like(law)
    out = sd.generate(
        target, torch.tensor([prompt]).repeat(runs, 1), 3, drafter=drafter, temperature=1.0, seed=0, num_draft_tokens=2
    )
    for row in out.tokens:
        _, b, c = row.tolist()
        counts[b * V_SMALL + c] += 1
    expected = law * runs
    small = expected < 5  # pool sparse cells into one bin
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    exp = exp * (obs.sum() / exp.sum())  # float32 laws: renormalise the rounding away
    return scipy_stats.chisquare(obs, exp).pvalue


@pytest.mark.parametrize("kind", ["model-drafter", "ngram-deterministic"])
def test_chi_square_sampled_runs_match_target_law(kind):
    drafter = ModelDrafter(_small_drafter_model()) if kind == "model-drafter" else sd.NGramDrafter(max_ngram=2)
    assert _chi_square_p(drafter) > 1e-3


def test_chi_square_catches_greedy_drafting_with_sampled_law():
    drafter = GreedyDrafterClaimingSoftmax(_small_drafter_model())
    drafter.scorer = _small_drafter_model()
    assert _chi_square_p(drafter) < 1e-6
