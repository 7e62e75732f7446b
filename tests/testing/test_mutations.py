"""Mutation suite: each known bug class of speculative decoding, planted in a copy of a verifier,
must be caught by a named test of the harness (table in docs/forcing.md).

The real verifiers are never edited: a bug goes in through ``monkeypatch`` of the module function the
verifier calls, or through a subclass. Each test first shows the unmutated system passing the same
check, so the check can both pass and fail.
"""

from __future__ import annotations

import pytest
import torch

import specdec as sd
from specdec.forcing import TokenForcingChecker, teacher_force
from specdec.testing import tiny_target
from specdec.testing.faults import TargetFault
from specdec.testing.laws import (
    MarkovDrafter,
    MarkovLaw,
    MarkovTarget,
    argmax_rate_test,
    autoregressive_law,
    chain_round,
    speculative_law,
    total_variation,
    tree_round,
    two_sample_chi2,
)
from specdec.testing.laws.exact import _support
from specdec.verify import SamplingConfig
from specdec.verify import chain as chain_module
from specdec.verify import tree as tree_module
from specdec.verify.sampling import sample
from specdec.verify.tree import Tree, TreeVerifier, TreeWalk, best_first_tree

T1 = SamplingConfig(temperature=1.0)
EXACT = 1e-12  # lossless rounds agree to ~1e-16 (float64 from the same float32 logits)
VOCAB = 6
TARGET_LAW = MarkovLaw(VOCAB, seed=0, scale=1.5)
DRAFT_LAW = MarkovLaw(VOCAB, seed=1, scale=2.5)  # more peaked than the target: drafts are often wrong
CONTEXT = (1, 2)


_real_chain_laws = chain_module.chain_laws
_real_chain_accept = chain_module.chain_accept
_real_sample_and_match = tree_module.sample_and_match


def wrong_draft_law(target_probs, draft_tokens, draft_probs):
    """Bug class 1: the ratio uses another law than the one the drafts were drawn from (here a
    flattened one, as when the drafter samples at one temperature and reports another)."""
    if draft_probs is not None:
        draft_probs = draft_probs.sqrt()
        draft_probs = draft_probs / draft_probs.sum(-1, keepdim=True)
    return _real_chain_laws(target_probs, draft_tokens, draft_probs)


def dropped_sampling_params(logits, sampling):
    """Bug class 2: verification uses the raw softmax, ignoring temperature / top-k / top-p."""
    return torch.softmax(logits.float(), -1)


def misaligned_accept(target_logits, draft_tokens, draft_probs, *, sampling, generator=None):
    """Bug class 3: verify rows offset by one against the draft positions (a ragged-batch packing
    error; with one request per cache it is injected as a shift of the logits rows)."""
    shifted = torch.cat([target_logits[1:], target_logits[-1:]])  # [k + 1, V]
    return _real_chain_accept(shifted, draft_tokens, draft_probs, sampling=sampling, generator=generator)


def _node_draft_probs(tree: Tree) -> torch.Tensor:
    """q(node | parent) from a best-first tree's summed log-prob scores."""
    scores = tree.scores.double()
    parent_scores = torch.where(tree.parents >= 0, scores[tree.parents.clamp_min(0)], torch.zeros_like(scores))
    return (scores - parent_scores).exp()


def _children(tree: Tree, row: int) -> list[int]:
    return [c for c, p in enumerate(tree.parents.tolist()) if p + 1 == row]


def ratio_walk(tree, target_probs, *, generator=None):
    """Bug class 4: min(1, p/q) acceptance of deterministic top-k children (SpecInfer's rule for
    *sampled* candidates applied to a top-k tree), residual max(p - q, 0) after each rejection."""
    if tree.scores is None or tree.num_nodes == 0:
        return _real_sample_and_match(tree, target_probs, generator=generator)
    q = _node_draft_probs(tree).tolist()
    tokens = tree.tokens.tolist()
    row, path = 0, []
    law = target_probs[0].double()
    while True:
        for child in _children(tree, row):
            x = tokens[child]
            u = float(torch.rand((), generator=generator, dtype=torch.float64, device=target_probs.device))
            if u < min(1.0, float(law[x]) / q[child]):
                path.append(child)
                row, law = child + 1, target_probs[child + 1].double()
                break
            law = law.clone()
            law[x] = max(float(law[x]) - q[child], 0.0)
            law = law / law.sum()
        else:
            bonus = sample(law, generator)
            rows = torch.tensor([0] + [c + 1 for c in path], device=target_probs.device)
            return TreeWalk(rows=rows, emitted=torch.cat([tree.tokens[path], bonus.view(1)]), num_accepted=len(path))


def ratio_walk_law(tree: Tree, target_probs: torch.Tensor) -> dict:
    """Exact law of :func:`ratio_walk` (enumerating its accept/reject branches)."""
    q = _node_draft_probs(tree).tolist()
    tokens = tree.tokens.tolist()
    probs = target_probs.double()
    law: dict = {}

    def visit(row, p, emitted, mass):
        for child in _children(tree, row):
            x = tokens[child]
            a = min(1.0, float(p[x]) / q[child])
            if a > 0:
                visit(child + 1, probs[child + 1], emitted + (x,), mass * a)
            mass *= 1.0 - a
            if mass <= 0:
                return
            p = p.clone()
            p[x] = max(float(p[x]) - q[child], 0.0)
            p = p / p.sum()
        for token, pt in _support(p):
            law[emitted + (token,)] = law.get(emitted + (token,), 0.0) + mass * pt

    visit(0, probs[0], (), 1.0)
    return law


class _KeepAllRows(TargetFault):
    """The target as a verifier with a stale state sees it: commit keeps every verify row."""

    def __init__(self, target, rows: int):
        super().__init__(target)
        self._keep = rows

    def commit(self, accepted):
        self.target.commit(self._keep)


class StaleStateVerifier(sd.ChainVerifier):
    """Bug class 5: after a rejection the state is not rolled back (the rejected drafts stay in it),
    as when a recurrent layer's state is not restored to the accepted prefix."""

    def verify(self, target, root, proposal, *, sampling, generator=None, **_):
        return super().verify(
            _KeepAllRows(target, proposal.num_tokens + 1), root, proposal, sampling=sampling, generator=generator
        )


def _chain_tv(sampling: SamplingConfig) -> float:
    ar = autoregressive_law(TARGET_LAW, CONTEXT, 3, sampling=sampling)
    spec = speculative_law(chain_round(TARGET_LAW, num_draft=3, sampling=sampling, draft_logits=DRAFT_LAW), CONTEXT, 3)
    return total_variation(spec, ar)


def _top2_tree(context) -> Tree:
    """A deterministic top-2 tree of depth 2 from the draft's marginals along its greedy path."""
    rows, ctx = [], tuple(context)
    for _ in range(2):
        logits = DRAFT_LAW(ctx)
        rows.append(torch.log_softmax(logits, -1))
        ctx = ctx + (int(logits.argmax()),)
    return best_first_tree(torch.stack(rows), 4, top_k=2)


def _target_rows(tree: Tree, context) -> torch.Tensor:
    rows = [TARGET_LAW(context)] + [
        TARGET_LAW(tuple(context) + tuple(tree.tokens[tree.path(n)].tolist())) for n in range(tree.num_nodes)
    ]
    return torch.softmax(torch.stack(rows).double(), -1)  # [N + 1, V]


def _sample_runs(n: int, sampling: SamplingConfig, verifier=None, num_draft: int = 3):
    target = MarkovTarget(TARGET_LAW, max_seq_len=64)
    prompts = torch.tensor([list(CONTEXT)] * n)
    kw = dict(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p)
    spec = sd.generate(
        target, prompts, 8, seed=10**6, drafter=MarkovDrafter(DRAFT_LAW), num_draft_tokens=num_draft, verifier=verifier, **kw
    ).tokens
    return target, prompts, spec


def _argmax_hits(target, prompts, outputs):
    return [~teacher_force(target, p, o).mismatch for p, o in zip(prompts, outputs)]


@pytest.fixture(scope="module")
def ar_t1():
    """300 autoregressive samples at temperature 1 (the reference arm of the statistical tests)."""
    target = MarkovTarget(TARGET_LAW, max_seq_len=64)
    prompts = torch.tensor([list(CONTEXT)] * 300)
    return sd.generate(target, prompts, 8, temperature=1.0, seed=0).tokens


@pytest.fixture(scope="module")
def tiny():
    return tiny_target(seed=0, max_seq_len=512, vocab_size=128, hidden_size=64, intermediate_size=96, num_kv_heads=4)


@pytest.fixture(scope="module")
def tiny_prompts(tiny):
    return torch.randint(0, tiny.vocab_size, (3, 8), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def tiny_ar(tiny, tiny_prompts):
    return sd.generate(tiny, tiny_prompts, 96).tokens


def test_wrong_draft_law_caught_by_exact_enumeration(monkeypatch):
    assert _chain_tv(T1) < EXACT
    monkeypatch.setattr(chain_module, "chain_laws", wrong_draft_law)
    assert _chain_tv(T1) > 0.05


def test_wrong_draft_law_caught_by_argmax_rate_test(monkeypatch, ar_t1):
    g = torch.Generator().manual_seed(0)
    target, prompts, clean = _sample_runs(300, T1)
    ref_hits = _argmax_hits(target, prompts, ar_t1)
    assert argmax_rate_test(ref_hits, _argmax_hits(target, prompts, clean), permutations=100, generator=g).p_permutation > 0.05
    monkeypatch.setattr(chain_module, "chain_laws", wrong_draft_law)
    _, _, biased = _sample_runs(300, T1)
    result = argmax_rate_test(ref_hits, _argmax_hits(target, prompts, biased), permutations=100, generator=g)
    assert result.p_permutation < 0.02 and result.p_value < 1e-3


SHARP = SamplingConfig(temperature=0.5, top_k=2)


def test_dropped_sampling_params_caught_by_exact_enumeration(monkeypatch):
    assert _chain_tv(SHARP) < EXACT
    monkeypatch.setattr(chain_module, "logits_to_probs", dropped_sampling_params)
    assert _chain_tv(SHARP) > 0.1


def test_dropped_sampling_params_caught_by_chi2(monkeypatch):
    g = torch.Generator().manual_seed(0)
    target = MarkovTarget(TARGET_LAW, max_seq_len=64)
    prompts = torch.tensor([list(CONTEXT)] * 200)
    ar = sd.generate(target, prompts, 8, temperature=SHARP.temperature, top_k=SHARP.top_k, seed=0).tokens
    _, _, clean = _sample_runs(200, SHARP)
    # categories = (previous token, token): the dropped top-k emits pairs plain decoding never does
    assert two_sample_chi2(ar, clean, context=1, permutations=100, generator=g).p_permutation > 0.05
    monkeypatch.setattr(chain_module, "logits_to_probs", dropped_sampling_params)
    _, _, biased = _sample_runs(200, SHARP)
    result = two_sample_chi2(ar, biased, context=1, permutations=100, generator=g)
    assert result.p_permutation < 0.02 and result.p_value < 1e-3


def test_misalignment_caught_by_greedy_equality(monkeypatch, tiny, tiny_prompts, tiny_ar):
    spec = sd.generate(tiny, tiny_prompts, 96, drafter=sd.NGramDrafter()).tokens
    assert torch.equal(spec, tiny_ar)
    monkeypatch.setattr(chain_module, "chain_accept", misaligned_accept)
    spec = sd.generate(tiny, tiny_prompts, 96, drafter=sd.NGramDrafter()).tokens
    assert not torch.equal(spec, tiny_ar)


def test_misalignment_caught_by_forcing_checker(monkeypatch, tiny, tiny_prompts, tiny_ar):
    checker = TokenForcingChecker(tiny, bucket_edges=(48,))
    monkeypatch.setattr(chain_module, "chain_accept", misaligned_accept)
    spec = sd.generate(tiny, tiny_prompts, 96, drafter=sd.NGramDrafter()).tokens
    report = checker.check(tiny_prompts, spec, null=tiny_ar)
    assert not report.passed and len(report.large_margin_events) > 0


def test_topk_tree_ratio_walk_caught_by_exact_enumeration():
    ar = autoregressive_law(TARGET_LAW, CONTEXT, 3, sampling=T1)
    exact = speculative_law(tree_round(TARGET_LAW, _top2_tree, sampling=T1), CONTEXT, 3)
    assert total_variation(exact, ar) < EXACT  # the library's sample-and-match on the same trees

    def biased_round(context):
        tree = _top2_tree(context)
        return ratio_walk_law(tree, _target_rows(tree, context))

    assert total_variation(speculative_law(biased_round, CONTEXT, 3), ar) > 0.05
    # the bias is already in the first token: min(1, p/q) over deterministic children
    first = lambda law: {k[:1]: 0.0 for k in law}  # noqa: E731
    tree = _top2_tree(CONTEXT)
    law1 = first(ratio_walk_law(tree, _target_rows(tree, CONTEXT)))
    for k, v in ratio_walk_law(tree, _target_rows(tree, CONTEXT)).items():
        law1[k[:1]] += v
    target1 = {(i,): float(p) for i, p in enumerate(torch.softmax(TARGET_LAW(CONTEXT).double(), -1))}
    assert total_variation(law1, target1) > 0.01


def test_topk_tree_ratio_walk_caught_by_argmax_rate_test(monkeypatch, ar_t1):
    g = torch.Generator().manual_seed(0)
    verifier = TreeVerifier(budget=4, top_k=2)
    target, prompts, clean = _sample_runs(300, T1, verifier=verifier, num_draft=2)
    ref_hits = _argmax_hits(target, prompts, ar_t1)
    assert argmax_rate_test(ref_hits, _argmax_hits(target, prompts, clean), permutations=100, generator=g).p_permutation > 0.05
    monkeypatch.setattr(tree_module, "sample_and_match", ratio_walk)
    _, _, biased = _sample_runs(300, T1, verifier=verifier, num_draft=2)
    result = argmax_rate_test(ref_hits, _argmax_hits(target, prompts, biased), permutations=100, generator=g)
    assert result.p_permutation < 0.02 and result.p_value < 1e-3


def test_stale_state_caught_by_greedy_equality(tiny, tiny_prompts, tiny_ar):
    assert torch.equal(
        sd.generate(tiny, tiny_prompts, 96, drafter=sd.NGramDrafter(), verifier=sd.ChainVerifier()).tokens, tiny_ar
    )
    stale = sd.generate(tiny, tiny_prompts, 96, drafter=sd.NGramDrafter(), verifier=StaleStateVerifier()).tokens
    assert not torch.equal(stale, tiny_ar)


def test_stale_state_caught_by_forcing_checker(tiny, tiny_prompts, tiny_ar):
    checker = TokenForcingChecker(tiny, bucket_edges=(48,))
    stale = sd.generate(tiny, tiny_prompts, 96, drafter=sd.NGramDrafter(), verifier=StaleStateVerifier()).tokens
    report = checker.check(tiny_prompts, stale, null=tiny_ar)
    assert not report.passed and len(report.large_margin_events) > 0
    assert any(bucket.rate_failed for bucket in report.by_bucket.values())
