"""Engine output law at T > 0: each request's tokens follow the target's autoregressive law.

* exact, by enumeration: every branch of one request's draws (its first token, the model drafter's drafts,
  the chain rule's accept/reject and residual or bonus token) is run through a real engine with companions
  of other prompts, seeds and drafters; the enumerated law of the request's output equals
  :func:`~specdec.testing.laws.exact.autoregressive_law` of the target (total variation < 1e-9), also when
  the request's prompt is prefilled in chunks under a row cap; a drafter that drafts greedily but reports a
  softmax law is far from it;
* exact, by enumeration, with a :class:`~specdec.verify.TreeVerifier`: every draw of every verify row of the
  tree walk is a branch; a request whose drafter's best-first trees have sibling nodes follows the target's
  law (total variation < 1e-12), and two biased walks patched into the engine's round are far from it; so does a
  request under a verify budget whose trees the engine puts in gain order before keeping their first nodes;
* exact, by enumeration, with a :class:`~specdec.verify.TwoLevelVerifier` (gate "always", in a vocabulary of
  two to keep the branches few): the Q pass picks the chain, and when it is shorter than the exact budget the
  drafter drafts again below the Q next token; every draw of the exact pass's sample-and-match is a branch.
  The request follows the target's law (total variation < 1e-12) and a biased exact walk is far from it;
* sampled: many seeded requests of one prompt through the engine, chi-square of the speculated tokens
  against the exact law (the helpers of ``tests/decode/test_generate_sampling.py``); the greedy drafter
  claiming a softmax law and an engine whose requests share one generator are caught.
"""

from __future__ import annotations

import functools
import itertools
import sys
from pathlib import Path

import pytest
import torch
from engine_law_helpers import enumerate_request_law

from specdec.contracts import DraftProposal, SamplingConfig, Tree
from specdec.drafters import ModelDrafter, NGramDrafter
from specdec.engine import Engine
from specdec.engine import rounds as rounds_module
from specdec.testing import tiny_target
from specdec.testing.laws import autoregressive_law, one_sample_chi2, total_variation
from specdec.verify import ChainVerifier, TreeVerifier, TwoLevelVerifier
from specdec.verify import two_level as two_level_module
from specdec.verify import walks as walks_module
from specdec.verify.walks import match_walk, sample_and_match

DECODE_TESTS = str(Path(__file__).resolve().parents[1] / "decode")
if DECODE_TESTS not in sys.path:
    sys.path.insert(0, DECODE_TESTS)
from test_generate_sampling import V_SMALL, GreedyDrafterClaimingSoftmax, _exact_law_3, _small_drafter_model, _small_target  # noqa: E402

VOCAB = 4
NEW_TOKENS = 3
SAMPLING = SamplingConfig(temperature=1.0)
PROMPTS = ([1, 2, 3], [3, 3], [0, 2, 1, 1])


@functools.cache
def law_target():
    return tiny_target(seed=21, vocab_size=VOCAB, hidden_size=16, intermediate_size=32, max_seq_len=16, dtype=torch.float64)


@functools.cache
def law_draft_model():
    return tiny_target(seed=22, vocab_size=VOCAB, hidden_size=16, intermediate_size=32, max_seq_len=16, dtype=torch.float64)


def next_logits(target, context: tuple[int, ...]) -> torch.Tensor:
    """``target``'s logits of the token after ``context`` (its cache left empty)."""
    target.reset()
    logits = target(torch.tensor([context])).logits[0, -1]
    target.reset()
    return logits


def target_logits(context: tuple[int, ...]) -> torch.Tensor:
    return next_logits(law_target(), context)


def build_engine(drafters, **engine_kwargs):
    """The same engine every call: one request per prompt, request i drafted by ``drafters[i]()``, seed 10 + i."""
    queue = iter(drafters)
    engine = Engine(
        law_target(), lambda: next(queue)(), ChainVerifier(), max_batch=len(PROMPTS), num_draft_tokens=2, **engine_kwargs
    )
    ids = [engine.add_request(p, max_new_tokens=NEW_TOKENS, sampling=SAMPLING, seed=10 + i) for i, p in enumerate(PROMPTS)]
    return engine, ids


def ngram():
    return NGramDrafter(max_ngram=2)


def model():
    return ModelDrafter(law_draft_model())


class GreedyLawDrafter(ModelDrafter):
    """Bug: drafts the argmax but reports the draft model's softmax as the law it drew from."""

    def propose(self, context, max_tokens, *, sampling, generator):
        proposal = super().propose(context, max_tokens, sampling=sampling, generator=generator)
        tokens = proposal.tokens if proposal.tree_logprobs is None else proposal.tree_logprobs.argmax(-1)
        return type(proposal)(tokens=tokens, draft_probs=proposal.draft_probs, tree_logprobs=proposal.tree_logprobs)


@pytest.mark.parametrize("which", [0, 1])
def test_enumerated_engine_law_equals_autoregressive_law(monkeypatch, which):
    # requests 0 and 2 draft deterministically (n-gram), request 1 samples its drafts (model drafter);
    # request 2 is a companion only: it drafts as request 0 does
    law = enumerate_request_law(monkeypatch, lambda: build_engine([ngram, model, ngram]), which)
    expected = autoregressive_law(target_logits, PROMPTS[which], NEW_TOKENS, sampling=SAMPLING)
    assert abs(sum(law.values()) - 1.0) < 1e-9
    assert total_variation(law, expected) < 1e-9


def test_enumerated_engine_law_with_chunked_prefill_equals_autoregressive_law(monkeypatch):
    # 4 rows a forward, a budget of 2 nodes: request 2's prompt goes in two chunks beside the others' rows, its first
    # token is drawn from the last chunk's last row, and its drafts are verified in the rows the prefills leave
    chunked = functools.partial(build_engine, [ngram, model, ngram], max_pass_rows=4, verify_budget=2)
    engine, ids = chunked()
    engine.step()
    engine.step()
    assert engine.request(ids[2]).prefilled == 2 and engine.output(ids[2]).numel() == 0  # half its prompt, no token yet
    law = enumerate_request_law(monkeypatch, chunked, 2)
    expected = autoregressive_law(target_logits, PROMPTS[2], NEW_TOKENS, sampling=SAMPLING)
    assert abs(sum(law.values()) - 1.0) < 1e-9
    assert total_variation(law, expected) < 1e-9


def test_enumeration_sees_a_drafter_that_misreports_its_law(monkeypatch):
    law = enumerate_request_law(monkeypatch, lambda: build_engine([ngram, lambda: GreedyLawDrafter(law_draft_model()), ngram]), 1)
    expected = autoregressive_law(target_logits, PROMPTS[1], NEW_TOKENS, sampling=SAMPLING)
    assert abs(sum(law.values()) - 1.0) < 1e-9
    assert total_variation(law, expected) > 1e-3


def chi_square_p(drafters, *, runs=640, wave=16):
    """Chi-square of the joint law of generated tokens 2 and 3 (the ones speculation decides) of ``runs``
    requests of one prompt with seeds 0..runs-1, ``wave`` at a time through one engine; the request at
    position i of a wave is drafted by ``drafters[i]()``."""
    target = _small_target()
    prompt = [1, 2, 3]
    sampling = SamplingConfig(temperature=1.0)
    exact = _exact_law_3(target, prompt, sampling).sum(0)  # [V, V] over (token 2, token 3)
    law = {(b, c): float(exact[b, c]) for b, c in itertools.product(range(V_SMALL), repeat=2)}
    queue = itertools.cycle(drafters)
    engine = Engine(target, lambda: next(queue)(), ChainVerifier(), max_batch=wave, num_draft_tokens=2)
    samples = []
    for first in range(0, runs, wave):
        ids = [engine.add_request(prompt, max_new_tokens=3, sampling=sampling, seed=seed) for seed in range(first, first + wave)]
        outputs = engine.run()
        samples += [outputs[i][1:] for i in ids]
    return one_sample_chi2(torch.stack(samples), law).p_value


@functools.cache
def small_draft_models(count: int = 16) -> list:
    return [_small_drafter_model() for _ in range(count)]


@pytest.mark.parametrize("kind", ["model-drafter", "ngram-deterministic"])
def test_chi_square_sampled_engine_runs_match_target_law(kind):
    if kind == "model-drafter":
        drafters = [functools.partial(ModelDrafter, m) for m in small_draft_models()]
    else:
        drafters = [functools.partial(NGramDrafter, max_ngram=2)]
    assert chi_square_p(drafters) > 1e-3


def greedy_claiming_softmax(model, scorer):
    drafter = GreedyDrafterClaimingSoftmax(model)
    drafter.scorer = scorer
    return drafter


def test_chi_square_catches_greedy_drafting_with_sampled_law():
    scorer = _small_drafter_model()  # reset before each use, so one serves every drafter
    drafters = [functools.partial(greedy_claiming_softmax, m, scorer) for m in small_draft_models()]
    assert chi_square_p(drafters) < 1e-6


TREE_VOCAB = 3
TREE_NEW_TOKENS = 3
TREE_PROMPTS = ([1, 2, 0], [2, 2], [0, 1, 1, 2])


@functools.cache
def tree_law_target():
    return tiny_target(seed=31, vocab_size=TREE_VOCAB, hidden_size=16, intermediate_size=32, max_seq_len=24, dtype=torch.float64)


@functools.cache
def tree_law_draft_model(copy: int):
    """The same draft model, one copy per drafter of an engine (a drafter keeps its context in the model's cache)."""
    return tiny_target(seed=32, vocab_size=TREE_VOCAB, hidden_size=16, intermediate_size=32, max_seq_len=24, dtype=torch.float64)


def tree_target_logits(context: tuple[int, ...]) -> torch.Tensor:
    return next_logits(tree_law_target(), context)


class GreedyTreeDrafter(ModelDrafter):
    """The draft model's greedy chain with its per-depth log-probs: a TreeVerifier grows a best-first tree from
    them (several children per node), and the drafter draws nothing from the request's generator."""

    def propose(self, context, max_tokens, *, sampling, generator):
        return super().propose(context, max_tokens, sampling=SamplingConfig(), generator=None)


def build_tree_engine(drafters):
    """One request per tree prompt, request i drafted by ``drafters[i]()``, seed 20 + i. After the first token a
    round may draft one token, so a tree is the draft model's two likeliest next tokens, siblings of the root."""
    queue = iter(drafters)
    engine = Engine(
        tree_law_target(), lambda: next(queue)(), TreeVerifier(budget=2, top_k=2), max_batch=len(TREE_PROMPTS), num_draft_tokens=2
    )
    ids = [
        engine.add_request(p, max_new_tokens=TREE_NEW_TOKENS, sampling=SAMPLING, seed=20 + i) for i, p in enumerate(TREE_PROMPTS)
    ]
    return engine, ids


def greedy_tree(copy: int):
    return functools.partial(GreedyTreeDrafter, tree_law_draft_model(copy))


def tree_drafters():
    """Requests 0 and 2 propose trees, request 1 (a companion) an n-gram chain."""
    return [greedy_tree(0), ngram, greedy_tree(2)]


def test_enumerated_tree_engine_law_equals_autoregressive_law(monkeypatch):
    # request 2 verifies trees in the same passes as request 0, from its own prompt and generator
    sibling_counts = []

    def recording_walk(tree, target_probs, *, generator=None):
        sibling_counts.append(int((tree.parents == -1).sum()))
        return sample_and_match(tree, target_probs, generator=generator)

    monkeypatch.setattr(rounds_module, "sample_and_match", recording_walk)
    law = enumerate_request_law(monkeypatch, lambda: build_tree_engine(tree_drafters()), 0)
    assert max(sibling_counts) == 2  # the walks had two root children to choose from
    expected = autoregressive_law(tree_target_logits, TREE_PROMPTS[0], TREE_NEW_TOKENS, sampling=SAMPLING)
    assert abs(sum(law.values()) - 1.0) < 1e-12
    assert total_variation(law, expected) < 1e-12


def walk_reusing_the_root_draw(tree, target_probs, *, generator=None):
    """Bug: one draw per row, but every row is matched against the root's draw."""
    draws = walks_module.sample(target_probs, generator)
    return match_walk(tree, draws[:1].expand(draws.shape[0]).clone())


def walk_drawing_every_row_from_the_root_law(tree, target_probs, *, generator=None):
    """Bug: a node's row is drawn from the root row's law, not its own (the law of the token after the node)."""
    return match_walk(tree, walks_module.sample(target_probs[:1].expand_as(target_probs).contiguous(), generator))


@pytest.mark.parametrize(
    "walk", [walk_reusing_the_root_draw, walk_drawing_every_row_from_the_root_law], ids=["reused-draw", "root-law"]
)
def test_enumeration_sees_a_biased_tree_walk_in_the_engine(monkeypatch, walk):
    monkeypatch.setattr(rounds_module, "sample_and_match", walk)
    law = enumerate_request_law(monkeypatch, lambda: build_tree_engine(tree_drafters()), 0)
    expected = autoregressive_law(tree_target_logits, TREE_PROMPTS[0], TREE_NEW_TOKENS, sampling=SAMPLING)
    assert abs(sum(law.values()) - 1.0) < 1e-12
    assert total_variation(law, expected) > 1e-3


class OutOfOrderTreeDrafter:
    """A scored tree whose node order is not its gain order: the root's child a (0.5), a's child b (0.1), the root's
    child c (0.4); a verify budget of two nodes checks a and c once the engine has put c before b. Deterministic: it
    draws nothing."""

    vocab_size = TREE_VOCAB

    def reset(self):
        pass

    def propose(self, context, max_tokens, *, sampling, generator):
        last = int(context[-1])
        a, b, c = last, (last + 2) % TREE_VOCAB, (last + 1) % TREE_VOCAB
        if max_tokens < 3:  # the last tokens: none drafted (fewer branches to enumerate)
            return DraftProposal(torch.tensor([], dtype=torch.long))
        tree = Tree(tokens=[a, b, c], parents=[-1, 0, -1], scores=torch.tensor([0.5, 0.1, 0.4]).log())
        return DraftProposal(torch.tensor([a, b]), tree=tree)


def test_enumerated_engine_law_of_a_budget_that_reorders_a_tree_equals_autoregressive_law(monkeypatch):
    walked = []

    def recording_walk(tree, target_probs, *, generator=None):
        walked.append(tree.tokens.tolist() + tree.parents.tolist())
        return sample_and_match(tree, target_probs, generator=generator)

    def build():
        engine = Engine(
            tree_law_target(), OutOfOrderTreeDrafter, TreeVerifier(budget=3), max_batch=1, num_draft_tokens=3, verify_budget=2
        )
        return engine, [engine.add_request(TREE_PROMPTS[0], max_new_tokens=5, sampling=SAMPLING, seed=20)]

    monkeypatch.setattr(rounds_module, "sample_and_match", recording_walk)
    law = enumerate_request_law(monkeypatch, build, 0)
    # the budget's two nodes: a and c, the two root children (node order would have given a and its child b)
    assert walked and all(w[2:] == [-1, -1] and w[1] == (w[0] + 1) % TREE_VOCAB for w in walked if len(w) == 4), walked
    assert any(len(w) == 4 for w in walked)
    expected = autoregressive_law(tree_target_logits, TREE_PROMPTS[0], 5, sampling=SAMPLING)
    assert abs(sum(law.values()) - 1.0) < 1e-12
    assert total_variation(law, expected) < 1e-12


TWO_LEVEL_VOCAB = 2


@functools.cache
def two_level_law_target():
    return tiny_target(
        seed=41, vocab_size=TWO_LEVEL_VOCAB, hidden_size=16, intermediate_size=32, max_seq_len=24, dtype=torch.float64
    )


@functools.cache
def two_level_draft_model(copy: int):
    return tiny_target(
        seed=42, vocab_size=TWO_LEVEL_VOCAB, hidden_size=16, intermediate_size=32, max_seq_len=24, dtype=torch.float64
    )


def two_level_target_logits(context: tuple[int, ...]) -> torch.Tensor:
    return next_logits(two_level_law_target(), context)


def build_two_level_engine():
    """The tree prompts (in a vocabulary of two) through a two-level engine: exact budget 2, Q budget 1, two
    children a node. When the Q pass rejects T1's one node, the chain is the Q next token alone and the drafter
    drafts one more token below it; otherwise the chain fills the exact budget. Requests 0 and 2 draft the draft
    model's greedy trees, request 1 n-gram chains."""
    drafters = iter(
        [GreedyTreeDrafter(two_level_draft_model(0)), NGramDrafter(max_ngram=2), GreedyTreeDrafter(two_level_draft_model(2))]
    )
    verifier = TwoLevelVerifier(budget=2, q_budget=1, top_k=2, gate="always")
    engine = Engine(two_level_law_target(), lambda: next(drafters), verifier, max_batch=len(TREE_PROMPTS), num_draft_tokens=2)
    prompts = [[t % TWO_LEVEL_VOCAB for t in p] for p in TREE_PROMPTS]
    ids = [engine.add_request(p, max_new_tokens=TREE_NEW_TOKENS, sampling=SAMPLING, seed=20 + i) for i, p in enumerate(prompts)]
    return engine, ids


def two_level_expected_law():
    prompt = [t % TWO_LEVEL_VOCAB for t in TREE_PROMPTS[0]]
    return autoregressive_law(two_level_target_logits, prompt, TREE_NEW_TOKENS, sampling=SAMPLING)


def test_enumerated_two_level_engine_law_equals_autoregressive_law(monkeypatch):
    real = TwoLevelVerifier.exact_plan
    second_drafts = []

    def recording_plan(self, chain, second, k2, root, **kwargs):
        subtree, plan = real(self, chain, second, k2, root, **kwargs)
        second_drafts.append(subtree.num_nodes > 0)
        return subtree, plan

    monkeypatch.setattr(TwoLevelVerifier, "exact_plan", recording_plan)
    law = enumerate_request_law(monkeypatch, build_two_level_engine, 0)
    assert any(second_drafts) and not all(second_drafts)  # rounds with and without a second draft below c*
    assert abs(sum(law.values()) - 1.0) < 1e-12
    assert total_variation(law, two_level_expected_law()) < 1e-12


def test_enumeration_sees_a_biased_exact_walk_of_the_two_level_engine(monkeypatch):
    monkeypatch.setattr(two_level_module, "sample_and_match", walk_reusing_the_root_draw)
    law = enumerate_request_law(monkeypatch, build_two_level_engine, 0)
    assert abs(sum(law.values()) - 1.0) < 1e-12
    assert total_variation(law, two_level_expected_law()) > 1e-3


def test_enumerated_engine_law_under_a_verify_budget_equals_autoregressive_law(monkeypatch):
    # a sampled chain's length must not follow its own drawn tokens: the budget's gains for it are the depth
    # posteriors, not the draft law at the drawn tokens (scored that way, this table verifies request 1's second
    # draft when both drafts are token 3, which the draft model finds likely, and cuts it otherwise: a bias)
    from specdec.engine.budget import StepTimeTable

    rows = tuple(range(1, 12))
    table = StepTimeTable(rows=rows, ms=tuple(1.0 + 0.1 * (r - 1) for r in rows))

    def budgeted():
        queue = iter([ngram, model, ngram])
        engine = Engine(
            law_target(),
            lambda: next(queue)(),
            ChainVerifier(),
            max_batch=3,
            num_draft_tokens=2,
            verify_budget="auto",
            step_time=table,
        )
        ids = [engine.add_request(p, max_new_tokens=4, sampling=SAMPLING, seed=10 + i) for i, p in enumerate(PROMPTS)]
        return engine, ids

    law = enumerate_request_law(monkeypatch, budgeted, 1)
    expected = autoregressive_law(target_logits, PROMPTS[1], 4, sampling=SAMPLING)
    assert abs(sum(law.values()) - 1.0) < 1e-9
    assert total_variation(law, expected) < 1e-9
