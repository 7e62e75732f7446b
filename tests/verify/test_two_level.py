"""TwoLevelVerifier: the Q pass picks the rows, the exact pass alone decides, so decoding stays lossless.

* greedy, fp32: ``sd.generate`` with the two-level verifier equals autoregressive decoding token for
  token (``torch.equal``) on dense and hybrid targets, with every kind of drafter (n-gram, model,
  oracle, block drafters with feature taps, a drafter whose second draft disagrees with the first),
  and with a deliberately bad Q view (output unchanged, agreement down);
* sampled: the exact law of a round by enumeration of every draw of the exact pass (the real verifier
  builds the tree; :func:`tree_round_law` enumerates its walk), composed into the law of the next
  tokens; and a chi-square test of many seeded runs against the autoregressive law;
* mutants (commit a Q row, accept from the Q logits, reuse the uniforms of an earlier round) are each
  rejected by one of those checks;
* every error path, ``join_chain_and_subtree`` shapes and the stats counters.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specdec as sd
import specdec.models.weight_views as views_mod
import specdec.verify.two_level as two_level_mod
from specdec.drafters.base import DraftProposal
from specdec.drafters.block import DFlashDrafter, DSparkDrafter, fixture_config, random_block_model
from specdec.drafters.model import ModelDrafter
from specdec.drafters.oracle import OracleDrafter
from specdec.testing import tiny_target
from specdec.testing.laws import (
    MarkovDrafter,
    MarkovLaw,
    MarkovTarget,
    autoregressive_law,
    one_sample_chi2,
    sample_continuations,
    speculative_law,
    total_variation,
    tree_round_law,
)
from specdec.verify.sampling import SamplingConfig
from specdec.verify.tree import Tree, TreeVerifier, match_walk
from specdec.verify.two_level import TwoLevelGate, TwoLevelVerifier, join_chain_and_subtree

_TARGETS: dict = {}
_AR: dict = {}


def target_for(model_type: str, max_seq_len: int = 96):
    key = (model_type, max_seq_len)
    if key not in _TARGETS:
        _TARGETS[key] = tiny_target(model_type, seed=0, max_seq_len=max_seq_len)
    return _TARGETS[key]


def autoregressive(model_type: str, prompt: tuple[int, ...], max_new: int) -> torch.Tensor:
    key = (model_type, prompt, max_new)
    if key not in _AR:
        _AR[key] = sd.generate(target_for(model_type), torch.tensor([prompt]), max_new).tokens
    return _AR[key]


class DisagreeingDrafter:
    """A deterministic drafter whose every call proposes tokens its previous call did not: the second
    draft of a round never repeats the first (a stress case for the rows the exact pass checks)."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        self.calls += 1
        last = int(context[-1])
        tokens = [(last * 7 + self.calls * 13 + 5 * i) % self.vocab_size for i in range(max_tokens)]
        return DraftProposal(tokens=torch.tensor(tokens, dtype=torch.long, device=context.device))


def make_drafter(kind: str, model_type: str, prompt: tuple[int, ...], max_new: int):
    target = target_for(model_type)
    if kind == "ngram":
        return sd.NGramDrafter()
    if kind == "model":
        return ModelDrafter(tiny_target(model_type, seed=1, max_seq_len=256))
    if kind == "oracle":
        ref = torch.cat([torch.tensor(prompt), autoregressive(model_type, prompt, max_new + 12)[0]])
        return OracleDrafter("dspark-qwen3-8b-gsm8k", references=[ref], vocab_size=target.vocab_size, seed=1)
    if kind == "dflash":
        cfg = fixture_config("DFlashDraftModel", target, num_layers=1, block_size=5, target_layer_ids=[0, 1])
        return DFlashDrafter(random_block_model(cfg, target, seed=3), target)
    if kind == "dspark":
        cfg = fixture_config("Qwen3DSparkModel", target, num_layers=1, block_size=4, target_layer_ids=[0, 1])
        return DSparkDrafter(random_block_model(cfg, target, seed=3), target)
    if kind == "disagree":
        return DisagreeingDrafter(target.vocab_size)
    raise AssertionError(kind)


DRAFTERS = ["ngram", "model", "oracle", "dflash", "dspark", "disagree"]


@pytest.mark.parametrize("kind", DRAFTERS)
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    model_type=st.sampled_from(["llama", "qwen3_5_text"]),
    prompt=st.lists(st.integers(0, 96), min_size=1, max_size=6).map(tuple),
    budget=st.integers(1, 12),
    q_budget=st.integers(1, 12),
    gate=st.sampled_from(["always", "auto"]),
    k=st.integers(1, 6),
)
def test_greedy_two_level_equals_autoregressive(kind, model_type, prompt, budget, q_budget, gate, k):
    max_new = 14
    target = target_for(model_type)
    drafter = make_drafter(kind, model_type, prompt, max_new)
    v = TwoLevelVerifier(budget=budget, q_budget=q_budget, gate=gate if gate == "always" else TwoLevelGate(warmup=1))
    out = sd.generate(target, torch.tensor([prompt]), max_new, drafter=drafter, verifier=v, num_draft_tokens=k)
    assert torch.equal(out.tokens, autoregressive(model_type, prompt, max_new))
    assert v.stats.q_passes == v.stats.two_level_rounds > 0


@pytest.mark.parametrize("model_type", ["llama", "qwen3_5_text"])
def test_every_round_emits_what_autoregressive_decoding_emits(model_type):
    """Round by round: the exact pass's tree joins the Q chain and T2, and each round's tokens are the AR ones."""
    prompt, max_new = (3, 1, 4, 1, 5), 16
    v = TwoLevelVerifier(budget=10, q_budget=8, gate="always")
    target = target_for(model_type)
    ar = autoregressive(model_type, prompt, max_new)[0]
    rounds = []
    verify = v.verify

    def recording(*args, **kwargs):
        result = verify(*args, **kwargs)
        rnd = v.last_round
        rounds.append((rnd, result.emitted.clone()))
        return result

    v.verify = recording
    out = sd.generate(target, torch.tensor([prompt]), max_new, drafter=sd.NGramDrafter(), verifier=v, num_draft_tokens=6)
    assert torch.equal(out.tokens[0], ar)
    pos = 1
    for rnd, emitted in rounds:
        assert rnd.two_level
        m1, n2 = rnd.chain.numel(), rnd.subtree.num_nodes
        assert rnd.tree.num_nodes == m1 + n2 <= v.budget and rnd.draft_tree.num_nodes <= v.q_budget
        assert torch.equal(rnd.tree.tokens[:m1], rnd.chain)
        n = min(emitted.numel(), max_new - pos)
        assert torch.equal(emitted[:n], ar[pos : pos + n])
        pos += emitted.numel()


@pytest.mark.parametrize("max_new_tokens", [2, 3, 5, 9])
def test_generate_counts_only_the_accepted_tokens_it_returns(max_new_tokens):
    """A two-level round drafts its subtree to its own budget and may emit past max_new_tokens: those are not counted."""
    target = tiny_target(seed=0)
    out = sd.generate(
        target,
        torch.tensor([[1, 2, 3, 1, 2]]),
        max_new_tokens,
        drafter=sd.NGramDrafter(),
        verifier=TwoLevelVerifier(16, 16, gate="always"),
    )
    hist = out.stats.accepted_histogram
    assert out.stats.new_tokens == max_new_tokens
    assert sum((n + 1) * c for n, c in enumerate(hist)) == max_new_tokens - 1  # every round's tokens but the prefill's


def test_bad_q_view_keeps_the_output_and_lowers_agreement(monkeypatch):
    """Q weights replaced by noise: the output is still the AR output; the Q chain is accepted less often."""
    prompt, max_new = (5, 9, 2, 7, 5, 9, 2), 20
    ar = autoregressive("llama", prompt, max_new)
    agreement = {}
    for name in ("q", "noise"):
        target = tiny_target("llama", seed=0, max_seq_len=96)
        if name == "noise":
            gen = torch.Generator().manual_seed(0)
            monkeypatch.setattr(views_mod, "q_view_weight", lambda w, **_: torch.randn(w.shape, generator=gen, dtype=w.dtype))
        v = TwoLevelVerifier(budget=12, q_budget=12, gate="always")
        out = sd.generate(target, torch.tensor([prompt]), max_new, drafter=sd.NGramDrafter(), verifier=v, num_draft_tokens=6)
        assert torch.equal(out.tokens, ar), name
        agreement[name] = v.stats.agreement
    assert agreement["noise"] < agreement["q"]
    assert agreement["q"] > 0.5


def markov_case(vocab: int = 4, q_seed: int | None = 1, draft_seed: int = 2, max_seq_len: int = 64):
    law = MarkovLaw(vocab, order=2, seed=0)
    q_law = law if q_seed is None else MarkovLaw(vocab, order=2, seed=q_seed)
    return law, MarkovTarget(law, max_seq_len=max_seq_len, q_law=q_law), MarkovDrafter(MarkovLaw(vocab, order=2, seed=draft_seed))


@pytest.mark.parametrize("q_seed", [None, 1])
def test_greedy_markov_target_equals_autoregressive_with_a_good_or_unrelated_q_law(q_seed):
    law, target, drafter = markov_case(vocab=6, q_seed=q_seed, draft_seed=0, max_seq_len=96)
    v = TwoLevelVerifier(budget=8, q_budget=8, gate="always")
    for prompt in ([1, 2], [0, 5, 3], [4]):
        spec = sd.generate(target, torch.tensor([prompt]), 30, drafter=drafter, verifier=v, num_draft_tokens=5)
        assert torch.equal(spec.tokens, sd.generate(target, torch.tensor([prompt]), 30).tokens)
    # the Q law is the law itself: its chain is always accepted in full
    assert (v.stats.agreement == 1.0) == (q_seed is None)


class GreedyMarkovDrafter:
    """The argmax chain of a Markov law: a drafter whose proposal is a function of the context alone."""

    def __init__(self, law: MarkovLaw):
        self.law = law
        self.vocab_size = law.vocab_size

    def reset(self) -> None:
        pass

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        return MarkovDrafter(self.law).propose(context, max_tokens, sampling=SamplingConfig(), generator=None)


def exact_round_law(verifier, target, sampling, drafter, *, num_draft: int):
    """``context -> law`` of one real two-level round: the verifier runs for real on ``context``; the
    exact pass's draw is replaced by an enumeration of every draw of every row (``tree_round_law`` on
    the tree and the row laws the verifier handed to ``sample_and_match``)."""

    def round_law(context):
        target.reset()
        target.forward(torch.tensor([context[:-1]]))
        target.commit(len(context) - 1)
        seen = []

        def capture(tree, probs, *, generator=None):
            seen.append((tree, probs))
            return match_walk(tree, probs.argmax(-1))

        proposal = drafter.propose(torch.tensor(context), num_draft, sampling=sampling, generator=None)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(two_level_mod, "sample_and_match", capture)
            verifier.verify(
                target, torch.tensor(context[-1:]), proposal, sampling=sampling, context=torch.tensor(context), drafter=drafter
            )
        assert len(seen) == 1 and verifier.last_round.two_level
        tree, probs = seen[0]
        return tree_round_law(tree, probs, walk=match_walk)

    return round_law


SAMPLINGS = [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_k=3)]


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["t1", "t07-top3"])
@pytest.mark.parametrize("q_seed", [None, 1])
def test_sampled_round_law_by_enumeration_is_the_autoregressive_law(sampling, q_seed):
    law, target, _ = markov_case(vocab=4, q_seed=q_seed)
    drafter = GreedyMarkovDrafter(MarkovLaw(4, order=2, seed=2))
    v = TwoLevelVerifier(budget=4, q_budget=3, gate="always")
    context = (1, 3)
    spec = speculative_law(exact_round_law(v, target, sampling, drafter, num_draft=3), context, 4)
    ar = autoregressive_law(law, context, 4, sampling=sampling)
    # the verifier's row laws are float32: equal supports, masses equal to float32 rounding
    assert set(spec) == set(ar)
    assert total_variation(spec, ar) < 1e-6


def test_mutant_accepting_from_q_logits_fails_the_enumeration_and_greedy_checks(monkeypatch):
    """(b) the exact pass runs (so commit is allowed) but the walk reads the Q logits of the same rows."""
    law, target, _ = markov_case(vocab=4, q_seed=1)
    forward = target.forward

    def q_logits_in_exact_rows(tokens, positions=None, mask=None, *, view="exact", **kw):
        if view == "exact" and target.length > 0:
            q = forward(tokens, positions, mask, view="q", **kw)
            target.discard()
            out = forward(tokens, positions, mask, view="exact", **kw)
            return type(out)(logits=q.logits, hidden=out.hidden)
        return forward(tokens, positions, mask, view=view, **kw)

    monkeypatch.setattr(target, "forward", q_logits_in_exact_rows)
    sampling = SamplingConfig(temperature=1.0)
    drafter = GreedyMarkovDrafter(MarkovLaw(4, order=2, seed=2))
    v = TwoLevelVerifier(budget=4, q_budget=3, gate="always")
    spec = speculative_law(exact_round_law(v, target, sampling, drafter, num_draft=3), (1, 3), 3)
    assert total_variation(spec, autoregressive_law(law, (1, 3), 3, sampling=sampling)) > 0.05
    prompt = torch.tensor([[1, 3]])
    greedy = sd.generate(target, prompt, 20, drafter=GreedyMarkovDrafter(law), verifier=TwoLevelVerifier(4, 4, gate="always"))
    ar = sd.generate(markov_case(vocab=4, q_seed=1)[1], prompt, 20)
    assert not torch.equal(greedy.tokens, ar.tokens)


class CommitsTheQWalk(TwoLevelVerifier):
    """(a) accepts the Q pass's greedy walk and commits its rows."""

    def verify(self, target, root, proposal, *, sampling, generator=None, hidden_layers=(), context=None, drafter=None):
        tree = self._q_level.build_tree(proposal, room=target.room())
        plan = sd.VerifyPlan.for_tree(root, tree, prefix_len=target.length)
        out = self._run_q(target, plan)
        walk = two_level_mod.greedy_walk(tree, out.logits[0])
        target.commit(plan.accepted_rows(walk.num_accepted, walk.rows))
        return sd.VerifyResult(emitted=walk.emitted, num_accepted=walk.num_accepted, hidden=None)

    def _run_q(self, target, plan):
        return target.run_plan(plan, view="q")


class CommitsTheQWalkPastTheGuard(CommitsTheQWalk):
    """(a) the same, with the Q weights swapped in by hand so the target believes it ran the exact view."""

    def _run_q(self, target, plan):
        with target._views.use("q"):
            return target.run_plan(plan)


def test_mutant_committing_q_rows_is_refused_by_the_target():
    target = target_for("llama")
    with pytest.raises(RuntimeError, match="never committed"):
        sd.generate(target, torch.tensor([[5, 9, 2]]), 8, drafter=sd.NGramDrafter(), verifier=CommitsTheQWalk())


def test_mutant_committing_q_rows_past_the_guard_fails_the_greedy_check(monkeypatch):
    target = tiny_target("llama", seed=0, max_seq_len=96)
    gen = torch.Generator().manual_seed(0)
    monkeypatch.setattr(views_mod, "q_view_weight", lambda w, **_: w + 0.05 * torch.randn(w.shape, generator=gen, dtype=w.dtype))
    prompt = torch.tensor([[5, 9, 2, 7, 5, 9, 2]])
    out = sd.generate(target, prompt, 16, drafter=sd.NGramDrafter(), verifier=CommitsTheQWalkPastTheGuard())
    assert not torch.equal(out.tokens, autoregressive("llama", (5, 9, 2, 7, 5, 9, 2), 16))


def chi2_of(verifier, *, samples: int = 600, num_tokens: int = 3, context=(1, 2)):
    law, target, drafter = markov_case(vocab=3, q_seed=1)
    out = sample_continuations(
        target, context, samples, num_tokens, drafter=drafter, verifier=verifier, num_draft_tokens=3, seed=0
    )
    return one_sample_chi2(out, autoregressive_law(law, context, num_tokens, sampling=SamplingConfig(temperature=1.0)))


def test_sampled_runs_pass_the_chi_square_test():
    result = chi2_of(TwoLevelVerifier(budget=5, q_budget=4, gate="always"))
    assert result.p_value > 1e-3, result


def test_mutant_reusing_uniforms_fails_the_chi_square_test(monkeypatch):
    """(c) every round's exact walk draws the uniforms of the request's first round again."""
    real = two_level_mod.sample_and_match
    saved: dict = {}

    def replaying(tree, probs, *, generator=None):
        if id(generator) not in saved:
            saved[id(generator)] = (generator, generator.get_state())  # the generator is kept: its id stays unique
        replay = torch.Generator().set_state(saved[id(generator)][1])
        return real(tree, probs, generator=replay)

    monkeypatch.setattr(two_level_mod, "sample_and_match", replaying)
    result = chi2_of(TwoLevelVerifier(budget=5, q_budget=4, gate="always"))
    assert result.p_value < 1e-6, result


def test_verify_rejects_missing_drafter_context_and_view():
    target = target_for("llama")
    target.reset()
    target(torch.tensor([[1, 2]]))
    target.commit(2)
    proposal = DraftProposal(tokens=torch.tensor([4, 5]))
    v = TwoLevelVerifier(gate="always")
    greedy = SamplingConfig()
    with pytest.raises(ValueError, match="drafter: expected"):
        v.verify(target, torch.tensor([2]), proposal, sampling=greedy, context=torch.tensor([1, 2, 2]))
    with pytest.raises(ValueError, match="context: expected"):
        v.verify(target, torch.tensor([2]), proposal, sampling=greedy, drafter=sd.NGramDrafter())
    markov = MarkovTarget(MarkovLaw(5, seed=0), max_seq_len=16)
    with pytest.raises(ValueError, match=r"weight views \('exact',\); the Q pass needs 'q'"):
        v.verify(markov, torch.tensor([2]), proposal, sampling=greedy, context=torch.tensor([2]), drafter=sd.NGramDrafter())
    bad = DraftProposal(tokens=torch.tensor([4, 500]))
    with pytest.raises(ValueError, match=r"proposal.tokens: expected token ids in \[0, 97\), got tokens\[1\] = 500"):
        v.verify(target, torch.tensor([2]), bad, sampling=greedy, context=torch.tensor([1, 2, 2]), drafter=sd.NGramDrafter())
    assert target.length == 2 and v.stats.rounds == 0


def test_verify_rejects_a_chain_only_target():
    law = MarkovLaw(5, seed=0)

    class ChainOnly(MarkovTarget):
        supports_trees = False

    target = ChainOnly(law, max_seq_len=16, q_law=law)
    target.forward(torch.tensor([[1, 2]]))
    target.commit(2)
    v = TwoLevelVerifier(gate="always")
    with pytest.raises(ValueError, match="supports_trees is False"):
        v.verify(
            target,
            torch.tensor([2]),
            DraftProposal(tokens=torch.tensor([3])),
            sampling=SamplingConfig(),
            context=torch.tensor([1, 2, 2]),
            drafter=sd.NGramDrafter(),
        )


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(budget=0), ValueError, "budget"),
        (dict(budget=True), TypeError, "budget"),
        (dict(q_budget=0), ValueError, "q_budget"),
        (dict(q_budget=2.5), TypeError, "q_budget"),
        (dict(gate="sometimes"), ValueError, "gate: expected one of"),
        (dict(gate=3), TypeError, "gate: expected"),
        (dict(view="exact"), ValueError, "view: expected a non-exact"),
        (dict(view=None), ValueError, "view: expected a non-exact"),
        (dict(validate_proposals=1), TypeError, "validate_proposals"),
        (dict(sync_stages="yes"), TypeError, "sync_stages"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, err, match):
    with pytest.raises(err, match=match):
        TwoLevelVerifier(**kwargs)


def test_gate_never_runs_one_level_rounds_identical_to_the_tree_verifier():
    prompt = torch.tensor([[5, 9, 2, 7, 5, 9, 2]])
    target = target_for("llama")
    v = TwoLevelVerifier(budget=8, q_budget=8, gate="never")
    out = sd.generate(target, prompt, 16, drafter=sd.NGramDrafter(), verifier=v, num_draft_tokens=6)
    tree = sd.generate(target, prompt, 16, drafter=sd.NGramDrafter(), verifier=TreeVerifier(8), num_draft_tokens=6)
    assert torch.equal(out.tokens, tree.tokens)
    assert out.stats.accepted_histogram == tree.stats.accepted_histogram
    assert v.stats.q_passes == v.stats.two_level_rounds == 0 and v.stats.rounds == v.stats.exact_passes > 0
    assert not v.last_round.two_level and v.last_round.chain is None


def test_a_full_cache_falls_back_to_one_level_and_stays_exact():
    """With room for fewer than two rows the round cannot hold the Q next token: it is one-level."""
    target = tiny_target("llama", seed=0, max_seq_len=20)
    prompt = torch.tensor([[5, 9, 2, 7, 5, 9, 2]])
    v = TwoLevelVerifier(budget=30, q_budget=30, gate="always")
    out = sd.generate(target, prompt, 13, drafter=sd.NGramDrafter(), verifier=v, num_draft_tokens=8)
    assert torch.equal(out.tokens, autoregressive("llama", (5, 9, 2, 7, 5, 9, 2), 13))
    assert target.length <= 20


@pytest.mark.parametrize("model_type", ["llama", "qwen3_5_text"])
def test_stats_counters_are_consistent(model_type):
    prompt, max_new = (5, 9, 2, 7, 5, 9, 2), 18
    v = TwoLevelVerifier(budget=8, q_budget=6, gate=TwoLevelGate(warmup=2, probe_every=3))
    emitted = []
    verify = v.verify
    v.verify = lambda *a, **kw: emitted.append(verify(*a, **kw)) or emitted[-1]
    out = sd.generate(target_for(model_type), torch.tensor([prompt]), max_new, drafter=sd.NGramDrafter(), verifier=v)
    s = v.stats
    assert s.rounds == s.exact_passes == len(emitted) == out.stats.target_passes - 1
    assert s.q_passes == s.two_level_rounds and 0 < s.two_level_rounds < s.rounds
    assert s.emitted == sum(r.emitted.numel() for r in emitted) == sum(r.num_accepted + 1 for r in emitted)
    assert s.emitted >= max_new - 1  # the prefill gives the first token; the last round may overshoot
    assert 0.0 <= s.agreement <= 1.0 and s.chain_agreed <= s.chain_tokens and s.chain_full <= s.two_level_rounds
    assert s.tokens_per_exact_pass == s.emitted / s.exact_passes
    d = s.as_dict()
    assert d["q_passes"] == s.q_passes and set(d["seconds"]) == set(two_level_mod.STAGES)
    assert all(t >= 0 for t in d["seconds"].values())
    v.reset()
    assert v.stats.rounds == 0 and v.stats.agreement == 0.0 and v.stats.tokens_per_exact_pass == 0.0


def test_join_chain_and_subtree_shapes():
    t = join_chain_and_subtree(torch.tensor([4]), Tree.chain(torch.zeros(0, dtype=torch.long)))
    assert t.tokens.tolist() == [4] and t.parents.tolist() == [-1]
    t = join_chain_and_subtree(torch.tensor([4, 5, 6]), Tree(tokens=[1, 2, 3, 4], parents=[-1, 0, -1, 2]))
    assert t.tokens.tolist() == [4, 5, 6, 1, 2, 3, 4]
    assert t.parents.tolist() == [-1, 0, 1, 2, 3, 2, 5]
    assert t.num_nodes == 7


@settings(max_examples=40, deadline=None)
@given(m1=st.integers(1, 5), parents=st.lists(st.integers(-1, 6), max_size=7), seed=st.integers(0, 99))
def test_joined_tree_equals_the_checked_construction(m1, parents, seed):
    """The join skips Tree's validation walk; every derived field must still be what the walk computes."""
    parents = [min(p, i - 1) for i, p in enumerate(parents)]  # parents before children
    gen = torch.Generator().manual_seed(seed)
    sub = Tree(tokens=torch.randint(0, 50, (len(parents),), generator=gen), parents=parents)
    chain = torch.randint(0, 50, (m1,), generator=gen)
    joined = join_chain_and_subtree(chain, sub)
    checked = Tree(tokens=joined.tokens, parents=joined.parents)
    assert torch.equal(joined.depth, checked.depth)
    assert (joined.max_depth, joined.is_chain) == (checked.max_depth, checked.is_chain)
    assert torch.equal(joined.ancestor_mask, checked.ancestor_mask)


@pytest.mark.parametrize(
    "chain, subtree, err",
    [
        (torch.tensor([], dtype=torch.long), Tree(tokens=[1], parents=[-1]), ValueError),
        (torch.tensor([[1, 2]]), Tree(tokens=[1], parents=[-1]), ValueError),
        (torch.tensor([1.0]), Tree(tokens=[1], parents=[-1]), ValueError),
        ([1, 2], Tree(tokens=[1], parents=[-1]), ValueError),
        (torch.tensor([1]), ([1], [-1]), TypeError),
    ],
)
def test_join_chain_and_subtree_rejects_bad_input(chain, subtree, err):
    with pytest.raises(err, match="chain|subtree"):
        join_chain_and_subtree(chain, subtree)


def test_sampled_generate_is_seeded():
    law, target, drafter = markov_case(vocab=5, q_seed=1)
    prompt = torch.tensor([[1, 2]])
    outs = [
        sd.generate(target, prompt, 12, drafter=drafter, verifier=TwoLevelVerifier(4, 4, gate="always"), temperature=1.0, seed=s)
        for s in (3, 3, 4)
    ]
    assert torch.equal(outs[0].tokens, outs[1].tokens)
    assert not torch.equal(outs[0].tokens, outs[2].tokens)


class BadSecondDraft:
    """A valid first draft each round; the second (``kind``): an id past the vocabulary, or one token too many."""

    def __init__(self, vocab_size: int, kind: str):
        self.vocab_size, self.kind, self.calls = vocab_size, kind, 0

    def reset(self) -> None:
        self.calls = 0

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        self.calls += 1
        if self.calls % 2 == 1:
            return DraftProposal(tokens=torch.tensor([int(context[-1])] * max_tokens, dtype=torch.long))
        if self.kind == "id":
            return DraftProposal(tokens=torch.full((max_tokens,), self.vocab_size, dtype=torch.long))
        return DraftProposal(tokens=torch.zeros(max_tokens + 1, dtype=torch.long))


@pytest.mark.parametrize(
    "kind, message",
    [("id", r"proposal.tokens: expected token ids in \[0, 97\)"), ("size", "drafter: proposed .* expected at most")],
)
def test_a_bad_second_draft_is_refused_before_the_exact_pass(kind, message):
    from specdec.engine import Engine, RequestFailed

    target = tiny_target("llama", seed=0, max_seq_len=64)
    prompt = torch.tensor([[5, 9, 2, 7]])
    verifier = TwoLevelVerifier(budget=8, q_budget=2, gate="always")
    with pytest.raises(ValueError, match=message):
        sd.generate(target, prompt, 8, drafter=BadSecondDraft(97, kind), verifier=verifier, num_draft_tokens=2)
    target.reset()
    engine = Engine(
        target,
        lambda: BadSecondDraft(97, kind),
        TwoLevelVerifier(budget=8, q_budget=2, gate="always"),
        max_batch=1,
        num_draft_tokens=2,
    )
    request = engine.add_request(prompt[0], max_new_tokens=8)
    with pytest.raises(RequestFailed) as failed:
        engine.run()
    assert engine.status(request) == "failed"
    assert isinstance(failed.value.__cause__, ValueError) and __import__("re").search(message, str(failed.value.__cause__))


@pytest.mark.parametrize("room", [1, 2, 3, 4])
def test_a_round_with_little_room_left_fits_its_rows_and_emits_what_autoregressive_decoding_emits(room):
    # a custom loop may verify with any room left: a Q chain the Q pass accepts whole must still fit beside the root
    max_seq_len = 12
    target = tiny_target("llama", seed=0, max_seq_len=max_seq_len)
    prompt = torch.tensor([5, 9, 2, 7] * 4)[: max_seq_len - room + 1]
    continuation = sd.generate(tiny_target("llama", seed=0, max_seq_len=32), prompt[None], room).tokens[0]  # AR's tokens
    target.forward(prompt[None, :-1])
    target.commit(prompt.numel() - 1)
    assert target.room() == room
    drafts = continuation[: room - 1]  # what the target itself would say: the Q pass accepts them all
    verifier = TwoLevelVerifier(budget=8, q_budget=8, gate="always")
    result = verifier.verify(
        target, prompt[-1:], DraftProposal(drafts), sampling=SamplingConfig(), context=prompt, drafter=sd.NGramDrafter()
    )
    assert torch.equal(result.emitted, continuation[: result.emitted.numel()])
    assert target.length <= max_seq_len


def test_a_seeded_sampled_request_is_the_same_alone_or_after_others():
    """The gate's choice changes how many draws a sampled round takes; generate() starts every request with the gate
    as given (RequestScopedVerifier), so what an earlier request taught the gate cannot change a later one's tokens
    (without that reset the second request below decodes other tokens). The gate here stays in its warm-up, where
    "auto" alternates by its round counts alone: past it, choices follow measured wall-clock rates, which no seed
    repeats."""
    from specdec.contracts import RequestScopedVerifier
    from specdec.drafters.model import ModelDrafter
    from specdec.testing import tiny_target
    from specdec.verify.two_level_gate import TwoLevelGate

    target = tiny_target("llama", seed=0, max_seq_len=128)
    drafter = ModelDrafter(tiny_target("llama", seed=3, max_seq_len=128))
    p, q = torch.tensor([5, 17, 42, 8, 3, 60]), torch.tensor([9, 1, 4])
    kw = dict(drafter=drafter, temperature=1.0, num_draft_tokens=4)
    verifier = TwoLevelVerifier(budget=8, q_budget=8, gate=TwoLevelGate(warmup=1000))
    assert isinstance(verifier, RequestScopedVerifier)
    fresh = TwoLevelVerifier(budget=8, q_budget=8, gate=TwoLevelGate(warmup=1000))
    alone = sd.generate(target, [p], 40, verifier=fresh, seed=[0], **kw).tokens[0]
    after = sd.generate(target, [q, p], 40, verifier=verifier, seed=[1, 0], **kw).tokens[1]
    assert torch.equal(alone, after)
    assert verifier.stats.rounds > 0 and verifier.gate.decisions < verifier.stats.rounds  # the gate restarted, stats add up
