"""The exact output law of SSD decoding at temperature > 0, by enumeration of every draw.

For each backup kind, with and without the Saguaro transform, the law of the next tokens equals the
target's autoregressive law (total variation at float32 rounding, ~1e-8). Three deliberately wrong
variants show the test can fail: the ratio test replaced by argmax matching (the sync-mode bug of the
reference SSD engine), argmax matching on random-backup rounds only, and a Saguaro drafter that draws
from the transformed law but reports the untransformed one.
"""

from __future__ import annotations

import pytest
import torch
from ssd_helpers import LawDrafter, ssd_law

from specdec.contracts.sampling import SamplingConfig
from specdec.drafters.ssd import GeometricFanOut, SaguaroTransform, SpeculativeSpeculationDrafter
from specdec.drafters.ssd import backups as backups_module
from specdec.drafters.ssd import drafter as drafter_module
from specdec.testing.laws import MarkovLaw, autoregressive_law, total_variation
from specdec.testing.laws.exact import reference_chain_decide
from specdec.verify.chain import ChainLaws
from specdec.verify.sampling import logits_to_probs

VOCAB = 3
PROMPT = (0, 1, 2, 0, 1)  # repeats, so the n-gram backup finds matches
SAMPLING = SamplingConfig(temperature=1.0)
TARGET = MarkovLaw(VOCAB, order=2, seed=3, scale=1.5)
DRAFT = MarkovLaw(VOCAB, order=2, seed=4, scale=1.5)
LOSSLESS_TV = 1e-6  # float32 draft laws; a biased round is > 1e-3
BIASED_TV = 1e-3


def make_drafter(backup: str, transform: SaguaroTransform | None = None, fan_out=2) -> SpeculativeSpeculationDrafter:
    return SpeculativeSpeculationDrafter(
        LawDrafter(DRAFT), fan_out=fan_out, backup=backup, transform=transform, transport="sequential"
    )


def reference(num_tokens: int) -> dict:
    return autoregressive_law(TARGET, PROMPT, num_tokens, sampling=SAMPLING)


def argmax_matching_decide(target_logits, draft_tokens, draft_probs, sampling) -> ChainLaws:
    """Accept a draft iff it is the target's argmax, else emit a draw from ``p`` (no ratio, no residual)."""
    probs = logits_to_probs(target_logits, sampling).double()
    probs = probs / probs.sum(-1, keepdim=True)
    k = draft_tokens.numel()
    accept = (draft_tokens == probs[:k].argmax(-1)).double()
    return ChainLaws(accept_probs=accept, residual_probs=probs[:k], bonus_probs=probs[k])


def argmax_matching_on_random_rounds(target_logits, draft_tokens, draft_probs, sampling) -> ChainLaws:
    """The library's rule, except rounds proposed with a uniform law (the random backup) are argmax-matched."""
    uniform = draft_probs is not None and draft_probs.numel() and bool(torch.all(draft_probs == draft_probs[0, 0]))
    if uniform:
        return argmax_matching_decide(target_logits, draft_tokens, draft_probs, sampling)
    return reference_chain_decide(target_logits, draft_tokens, draft_probs, sampling)


@pytest.mark.parametrize("backup", ["neural", "ngram", "random"])
@pytest.mark.parametrize("saguaro", [False, True])
def test_output_law_is_the_target_law(backup, saguaro):
    transform = SaguaroTransform(top=1, scale=0.3) if saguaro else None
    # one draft per round, four tokens: up to three rounds, so hits after hits and after misses
    law, served = ssd_law(make_drafter(backup, transform), TARGET, PROMPT, 4, 1, SAMPLING)
    assert served["hit"] > 0 and served["backup"] > 0  # both paths are part of the law
    assert total_variation(law, reference(4)) < LOSSLESS_TV


def test_output_law_with_two_drafts_and_saguaro():
    """Cached chains of two drafts, cut to one at the last round (a prefix keeps its law)."""
    law, served = ssd_law(make_drafter("neural", SaguaroTransform(top=1, scale=0.3)), TARGET, PROMPT, 3, 2, SAMPLING)
    assert served["hit"] > 0
    assert total_variation(law, reference(3)) < LOSSLESS_TV


def test_output_law_with_geometric_fan_out_and_a_larger_budget():
    fan_out = GeometricFanOut(4, acceptance=0.6, power=1.0)
    law, served = ssd_law(make_drafter("neural", fan_out=fan_out), TARGET, PROMPT, 3, 1, SAMPLING)
    assert served["hit"] > 0
    assert total_variation(law, reference(3)) < LOSSLESS_TV


def test_output_law_when_a_verify_budget_cuts_each_round_after_one_draft():
    """Three drafts a round, one verified: a round that accepts it and emits the second as its bonus proposes the
    third again (its "tail"), which was drawn after the second from the (transformed) law it reports."""
    drafter = make_drafter("neural", SaguaroTransform(top=1, scale=0.3), fan_out=1)
    law, served = ssd_law(drafter, TARGET, PROMPT, 4, 3, SAMPLING, verify_first=1)
    assert served["tail"] > 0 and served["hit"] > 0 and served["backup"] > 0
    assert total_variation(law, reference(4)) < LOSSLESS_TV


def test_argmax_matching_at_positive_temperature_is_caught():
    law, _ = ssd_law(make_drafter("neural"), TARGET, PROMPT, 3, 1, SAMPLING, decide=argmax_matching_decide)
    assert total_variation(law, reference(3)) > BIASED_TV


def test_argmax_matched_random_backup_is_caught():
    law, _ = ssd_law(make_drafter("random"), TARGET, PROMPT, 3, 1, SAMPLING, decide=argmax_matching_on_random_rounds)
    assert total_variation(law, reference(3)) > BIASED_TV


def test_saguaro_law_misreported_is_caught(monkeypatch):
    real = drafter_module.draft_chain

    def reports_untransformed(*args, **kwargs):
        chain = real(*args, **kwargs)
        if chain.proposal.draft_probs is not None:
            chain.proposal.draft_probs = chain.ranking  # drawn from sigma(q), reported as q
        return chain

    monkeypatch.setattr(drafter_module, "draft_chain", reports_untransformed)
    monkeypatch.setattr(backups_module, "draft_chain", reports_untransformed)
    drafter = make_drafter("neural", SaguaroTransform(top=1, scale=0.3))
    law, _ = ssd_law(drafter, TARGET, PROMPT, 3, 1, SAMPLING)
    assert total_variation(law, reference(3)) > BIASED_TV


def test_each_rounds_predraft_draws_from_its_own_generator(monkeypatch):
    # the exact-law tests replace the sampler; this checks what they cannot: rounds never share a pre-draft stream
    import specdec as sd
    from specdec.drafters import ModelDrafter
    from specdec.testing import tiny_target

    seeds = []
    real = SpeculativeSpeculationDrafter._child_generator

    def recording(self, generator, device):
        child = real(self, generator, device)
        seeds.append(child.initial_seed())
        return child

    monkeypatch.setattr(SpeculativeSpeculationDrafter, "_child_generator", recording)
    drafter = SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=1)), transport="sequential")
    sd.generate(tiny_target(seed=0), torch.tensor([[1, 2, 3]]), 12, drafter=drafter, temperature=1.0, seed=0, num_draft_tokens=3)
    assert len(seeds) >= 3 and len(set(seeds)) == len(seeds)
