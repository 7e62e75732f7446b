"""Distribution harness: exact laws by enumeration, two-sample tests, strategies, Markov targets."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import specdec as sd
from specdec.forcing import teacher_force
from specdec.testing.laws import (
    MarkovDrafter,
    MarkovLaw,
    MarkovTarget,
    argmax_rate_test,
    autoregressive_law,
    chain_round,
    chain_round_law,
    distribution_pairs,
    probability_vectors,
    speculative_law,
    total_variation,
    tree_round,
    tree_round_law,
    trees,
    two_sample_chi2,
)
from specdec.verify import SamplingConfig
from specdec.verify.tree import Tree, TreeVerifier, best_first_tree

EXACT = 1e-12  # laws composed in float64 from the same float32 logits: lossless rounds agree to ~1e-16
T1 = SamplingConfig(temperature=1.0)


def _log(p: torch.Tensor) -> torch.Tensor:
    return p.float().log()  # zeros become -inf: softmax at temperature 1 gives the law back


def test_autoregressive_law_sums_to_one_and_matches_hand_computation():
    law = MarkovLaw(3, order=1, seed=0)
    ar = autoregressive_law(law, (1,), 2, sampling=T1)
    assert sum(ar.values()) == pytest.approx(1.0, abs=1e-12)
    p1 = torch.softmax(law((1,)), -1)
    assert ar[(2, 0)] == pytest.approx(float(p1[2] * torch.softmax(law((2,)), -1)[0]), rel=1e-6)


@given(pair=distribution_pairs(4), p2=probability_vectors(4), k=st.integers(0, 3))
def test_chain_rejection_sampling_is_exact(pair, p2, k):
    target_p, draft_q = pair
    # a context-dependent target: law p after even tokens, p2 after odd ones
    target = lambda ctx: _log(target_p if ctx[-1] % 2 == 0 else p2)  # noqa: E731
    spec = speculative_law(chain_round(target, num_draft=k, sampling=T1, draft_logits=lambda ctx: _log(draft_q)), (0,), k + 1)
    assert total_variation(spec, autoregressive_law(target, (0,), k + 1, sampling=T1)) < EXACT


@given(p=probability_vectors(4), p2=probability_vectors(4), drafts=st.lists(st.integers(0, 3), max_size=3))
def test_deterministic_proposal_rule_is_exact(p, p2, drafts):
    target = lambda ctx: _log(p if len(ctx) % 2 else p2)  # noqa: E731
    rnd = chain_round(target, num_draft=len(drafts), sampling=T1, draft_tokens=lambda ctx: drafts)
    spec = speculative_law(rnd, (0,), len(drafts) + 1)
    assert total_variation(spec, autoregressive_law(target, (0,), len(drafts) + 1, sampling=T1)) < EXACT


@given(tree=trees(5, 3), seed=st.integers(0, 2**16))
def test_sample_and_match_is_exact_on_any_tree(tree, seed):
    law = MarkovLaw(3, order=2, seed=seed, scale=1.5)
    spec = speculative_law(tree_round(law, lambda ctx: tree, sampling=T1), (1, 2), tree.max_depth + 1)
    assert total_variation(spec, autoregressive_law(law, (1, 2), tree.max_depth + 1, sampling=T1)) < EXACT


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingConfig(),
        SamplingConfig(temperature=1.0),
        SamplingConfig(temperature=0.6, top_k=3),
        SamplingConfig(temperature=1.3, top_p=0.7),
    ],
    ids=["greedy", "t1", "t0.6-topk3", "t1.3-topp0.7"],
)
def test_multi_round_speculative_law_equals_target_law(sampling):
    target, draft = MarkovLaw(4, seed=0, scale=1.5), MarkovLaw(4, seed=1, scale=1.5)
    ar = autoregressive_law(target, (1, 2), 4, sampling=sampling)
    chain = speculative_law(chain_round(target, num_draft=2, sampling=sampling, draft_logits=draft), (1, 2), 4)
    assert total_variation(chain, ar) < EXACT
    top2 = lambda ctx: Tree(tokens=torch.topk(draft(ctx), 2).indices, parents=[-1, -1])  # noqa: E731
    tree = speculative_law(tree_round(target, top2, sampling=sampling), (1, 2), 4)
    assert total_variation(tree, ar) < EXACT
    if sampling.greedy:
        assert len(ar) == 1 and chain == ar


def test_chain_round_law_detects_a_biased_rule():
    # Greedy-style acceptance at temperature 1 (accept iff the draft is the target argmax) is not the
    # target law; the enumeration must see it.
    from specdec.verify.chain import ChainLaws

    def argmax_matching(logits, drafts, draft_probs, sampling):
        probs = torch.softmax(logits.double(), -1)
        accept = (drafts == logits[: drafts.numel()].argmax(-1)).double()
        return ChainLaws(accept_probs=accept, residual_probs=probs[: drafts.numel()], bonus_probs=probs[-1])

    target, draft = MarkovLaw(4, seed=0), MarkovLaw(4, seed=1)
    ar = autoregressive_law(target, (1,), 3, sampling=T1)
    biased = speculative_law(chain_round(target, num_draft=2, sampling=T1, draft_logits=draft, decide=argmax_matching), (1,), 3)
    assert total_variation(biased, ar) > 1e-2


def test_tree_round_law_hand_example():
    tree = Tree(tokens=[0, 1, 0], parents=[-1, -1, 0])
    probs = torch.tensor([[0.5, 0.25, 0.25], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.2, 0.8, 0.0]])
    law = tree_round_law(tree, probs)
    assert law == pytest.approx({(0, 2): 0.5, (1, 0): 0.25, (2,): 0.25})


def test_round_law_of_single_chain_matches_chain_laws():
    logits = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]])
    law = chain_round_law(logits, torch.tensor([2]), torch.tensor([[0.1, 0.1, 0.8]]), sampling=T1)
    p = torch.softmax(logits.double(), -1)
    accept = min(1.0, float(p[0, 2]) / 0.8)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-9)
    assert law[(2, 0)] == pytest.approx(accept * float(p[1, 0]), rel=1e-6)


def test_markov_target_logits_follow_tree_ancestors():
    law = MarkovLaw(6, order=2, seed=0)
    target = MarkovTarget(law, max_seq_len=64)
    target(torch.tensor([[1, 2]]))
    target.commit(2)
    tree = Tree(tokens=[3, 4, 5, 0], parents=[-1, -1, 0, 2])
    logits = target(torch.tensor([[2, 3, 4, 5, 0]]), None, tree.ancestor_mask).logits[0]
    for row, ctx in enumerate([(1, 2, 2), (2, 2, 3), (2, 2, 4), (2, 3, 5), (3, 5, 0)]):
        assert torch.equal(logits[row], law(ctx))
    target.commit(torch.tensor([0, 1, 3]))
    assert target.length == 5 and target._tokens == [1, 2, 2, 3, 5]


@pytest.mark.parametrize("verifier", ["chain", "tree"])
def test_markov_target_greedy_speculative_equals_ar(verifier):
    target = MarkovTarget(MarkovLaw(8, seed=0), max_seq_len=128)
    prompts = torch.tensor([[1, 2], [3, 4], [5, 6]])
    ar = sd.generate(target, prompts, 24).tokens
    v = sd.ChainVerifier() if verifier == "chain" else TreeVerifier(budget=6)
    spec = sd.generate(target, prompts, 24, drafter=MarkovDrafter(MarkovLaw(8, seed=1)), verifier=v, temperature=0.0).tokens
    assert torch.equal(ar, spec)


def test_chi2_statistic_matches_scipy_reference():
    from scipy.stats import chi2_contingency

    g = torch.Generator().manual_seed(0)
    a = torch.multinomial(torch.tensor([0.5, 0.2, 0.2, 0.1]), 600, replacement=True, generator=g).view(60, 10)
    b = torch.multinomial(torch.tensor([0.4, 0.3, 0.2, 0.1]), 600, replacement=True, generator=g).view(60, 10)
    result = two_sample_chi2(a, b)
    table = torch.stack([torch.bincount(a.flatten(), minlength=4), torch.bincount(b.flatten(), minlength=4)])
    ref = chi2_contingency(table.numpy(), correction=False)
    assert result.statistic == pytest.approx(ref.statistic, rel=1e-9)
    assert result.dof == ref.dof == 3 and result.p_value == pytest.approx(ref.pvalue, rel=1e-6)


def test_chi2_binning_gives_200_degrees_of_freedom():
    # a Zipf-like law over 2000 ids: the 200 most frequent are kept, the rest go to "other"
    g = torch.Generator().manual_seed(0)
    zipf = 1.0 / torch.arange(1, 2001, dtype=torch.float64)
    a = torch.multinomial(zipf, 9200, replacement=True, generator=g).view(92, 100)
    b = torch.multinomial(zipf, 9200, replacement=True, generator=g).view(92, 100)
    result = two_sample_chi2(a, b, permutations=200, generator=g)
    assert result.dof == 200 and len(result.categories) == 200
    assert result.p_value > 0.01 and result.p_permutation > 0.01


def test_chi2_min_expected_limits_the_categories():
    a = torch.tensor([[0] * 50 + [1] * 40 + [2] * 9 + [3]])
    b = torch.tensor([[0] * 50 + [1] * 40 + [2] * 9 + [4]])
    result = two_sample_chi2(a, b, min_expected=5)
    assert result.categories == (0, 1, 2) and result.dof == 2  # ids 3 and 4 merged into the rarest kept


def test_chi2_permutation_calibration_under_the_null():
    # sequences with strong within-sequence correlation: each sequence repeats one token
    g = torch.Generator().manual_seed(0)
    p_values = []
    for _ in range(20):
        a = torch.randint(0, 5, (40, 1), generator=g).expand(40, 20)
        b = torch.randint(0, 5, (40, 1), generator=g).expand(40, 20)
        r = two_sample_chi2(a, b, permutations=99, generator=g)
        p_values.append((r.p_value, r.p_permutation))
    nominal_alarms = sum(p < 0.05 for p, _ in p_values)
    permuted_alarms = sum(p < 0.05 for _, p in p_values)
    # tokens inside a sequence are copies, so the nominal test is badly anti-conservative
    assert nominal_alarms >= 10 and permuted_alarms <= 3


def test_chi2_and_argmax_tests_on_real_speculative_runs():
    target_law, draft_law = MarkovLaw(6, seed=0, scale=1.5), MarkovLaw(6, seed=1, scale=1.5)
    target = MarkovTarget(target_law, max_seq_len=64)
    prompts = torch.tensor([[1, 2]] * 400)
    ar = sd.generate(target, prompts, 8, temperature=1.0, seed=0).tokens
    spec = sd.generate(
        target, prompts, 8, temperature=1.0, seed=10**6, drafter=MarkovDrafter(draft_law), num_draft_tokens=3
    ).tokens
    g = torch.Generator().manual_seed(0)
    chi = two_sample_chi2(ar, spec, permutations=200, generator=g)
    assert chi.p_permutation > 0.01 and chi.p_value > 0.01
    hits = lambda outs: [~teacher_force(target, p, o).mismatch for p, o in zip(prompts, outs)]  # noqa: E731
    rate = argmax_rate_test(hits(ar), hits(spec), permutations=200, generator=g)
    assert rate.p_permutation > 0.01 and abs(rate.rate_a - rate.rate_b) < 0.05


def test_argmax_rate_test_detects_an_argmax_bias():
    g = torch.Generator().manual_seed(0)
    a = [torch.rand(10, generator=g) < 0.55 for _ in range(300)]
    b = [torch.rand(10, generator=g) < 0.45 for _ in range(300)]
    r = argmax_rate_test(a, b, permutations=200, generator=g)
    assert r.p_value < 1e-4 and r.p_permutation < 0.01 and r.z > 0


def test_argmax_rate_test_bad_input_is_named():
    with pytest.raises(ValueError, match="permutations: expected an int >= 0, got -1"):
        argmax_rate_test([torch.tensor([True])], [torch.tensor([False])], permutations=-1)
    with pytest.raises(ValueError, match=r"hits_a\[0\]: expected boolean \(or 0/1\) hits, got torch.float32"):
        argmax_rate_test([torch.tensor([0.2, 0.3])], [torch.tensor([0.0, 0.0])])
    with pytest.raises(ValueError, match="hits_a: expected a list of per-sequence hit tensors"):
        argmax_rate_test(torch.tensor([True, False]), [torch.tensor([True])])  # one sequence, not two of one token
    assert argmax_rate_test([torch.tensor([1, 0])], [torch.tensor([0, 0])]).rate_a == 0.5  # 0/1 integers are hits


def test_two_sample_bad_input():
    with pytest.raises(ValueError, match=r"tokens_a\[0\]: token ids must be >= 0"):
        two_sample_chi2(torch.tensor([[-1, 2]]), torch.tensor([[1, 2]]))
    with pytest.raises(TypeError, match=r"tokens_b\[0\]: expected a 1-D integer tensor"):
        two_sample_chi2(torch.tensor([[1, 2]]), torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="tokens_a: expected a non-empty list"):
        two_sample_chi2([], torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="single token category"):
        two_sample_chi2(torch.tensor([[1, 1]]), torch.tensor([[1, 1]]))
    with pytest.raises(ValueError, match="max_categories"):
        two_sample_chi2(torch.tensor([[1, 2]]), torch.tensor([[1, 2]]), max_categories=1)


@given(p=probability_vectors(5))
def test_probability_vectors_are_laws(p):
    assert p.dtype == torch.float64 and (p >= 0).all() and abs(float(p.sum()) - 1) < 1e-12


@given(pq=distribution_pairs(5, disjoint=True))
def test_disjoint_pairs_are_disjoint(pq):
    p, q = pq
    assert float((p * q).sum()) == 0 and abs(float(p.sum()) - 1) < 1e-12 and abs(float(q.sum()) - 1) < 1e-12


@given(tree=trees(8, 4, min_nodes=1))
def test_trees_are_valid_and_best_first_trees_exact(tree):
    parents = tree.parents.tolist()
    assert all(p < i for i, p in enumerate(parents)) and tree.num_nodes >= 1
    # a best-first tree from any per-depth law keeps sample-and-match exact
    lp = torch.log_softmax(torch.randn(2, 3, generator=torch.Generator().manual_seed(tree.num_nodes)), -1)
    bf = best_first_tree(lp, min(tree.num_nodes, 4))
    law = MarkovLaw(3, seed=tree.num_nodes)
    spec = speculative_law(tree_round(law, lambda ctx: bf, sampling=T1), (0,), bf.max_depth + 1)
    assert total_variation(spec, autoregressive_law(law, (0,), bf.max_depth + 1, sampling=T1)) < EXACT


def test_strategy_settings_are_checked():
    with pytest.raises(ValueError, match="kinds"):
        probability_vectors(3, kinds=("gaussian",))
    with pytest.raises(ValueError, match="vocab_size"):
        distribution_pairs(1)
    with pytest.raises(ValueError, match="vocab_size"):
        MarkovLaw(1)
    assert math.isclose(sum(autoregressive_law(MarkovLaw(2), (0,), 3, sampling=T1).values()), 1.0)


def _lookahead_walk(tree, choices):
    """A biased walk: with a token duplicated under the root it takes the duplicate whose child the row below drew."""
    from specdec.verify.tree import match_walk
    from specdec.verify.walks import TreeWalk

    if int(choices[0]) == 1 and int(choices[2]) == 2:
        return TreeWalk(rows=torch.tensor([0, 2, 3]), emitted=torch.tensor([1, 2, int(choices[3])]), num_accepted=2)
    return match_walk(tree, choices)


def test_tree_enumeration_draws_every_duplicate_sibling_and_catches_a_walk_that_chooses_among_them():
    tree = Tree(tokens=[1, 1, 2], parents=[-1, -1, 1])  # root -> 1 (node 0), root -> 1 (node 1) -> 2 (node 2)
    law = MarkovLaw(3, order=2, seed=0, scale=1.0)
    ar = autoregressive_law(law, (0, 0), 3, sampling=T1)
    fair = speculative_law(tree_round(law, lambda ctx: tree, sampling=T1), (0, 0), 3)
    biased = speculative_law(tree_round(law, lambda ctx: tree, sampling=T1, walk=_lookahead_walk), (0, 0), 3)
    assert total_variation(fair, ar) < EXACT
    assert total_variation(biased, ar) > 0.05


def test_tree_enumeration_refuses_a_walk_that_reads_a_row_no_match_reaches():
    from specdec.verify.walks import TreeWalk

    tree = Tree(tokens=[0], parents=[-1])
    peeking = lambda tree, choices: TreeWalk(rows=torch.tensor([0]), emitted=choices[1:2].clone(), num_accepted=0)  # noqa: E731
    probs = torch.tensor([[0.0, 1.0], [0.5, 0.5]])  # the root never draws 0, so row 1 is never matched into
    with pytest.raises(ValueError, match="walk: its output depends on the draw of a row no matching path reaches"):
        tree_round_law(tree, probs, walk=peeking)


def test_tree_enumeration_refuses_a_walk_that_looks_for_one_token_at_a_row_no_match_reaches():
    """Two fillers (0 and V - 1) at the unreached row miss a walk that reacts to one other token there: its law was
    enumerated as if that row always held 0 (TV 0 against AR for a lossy walk)."""
    from specdec.verify.walks import TreeWalk, match_walk

    tree = Tree(tokens=[1], parents=[-1])

    def lookahead(tree, choices):  # on a root miss, "recovers" when the child's own row drew the child's token
        walk = match_walk(tree, choices)
        if walk.num_accepted == 0 and int(choices[1]) == 1:
            return TreeWalk(rows=torch.tensor([0, 1]), emitted=torch.tensor([1, 1]), num_accepted=1)
        return walk

    probs = torch.softmax(torch.tensor([[0.0, 1.0, -1.0], [0.5, -0.5, 1.5]]), -1)
    with pytest.raises(ValueError, match=r"walk: its output depends on the draw of a row no matching path reaches \(row 1"):
        tree_round_law(tree, probs, walk=lookahead)
    assert sum(tree_round_law(tree, probs).values()) == pytest.approx(1.0)


def test_tree_and_autoregressive_enumerations_refuse_rows_that_are_not_laws():
    tree = Tree(tokens=[0, 1], parents=[-1, 0])
    with pytest.raises(ValueError, match=r"target_probs: expected shape \[3, V\]"):
        tree_round_law(tree, torch.full((2, 2), 0.5))  # not an IndexError
    with pytest.raises(ValueError, match=r"target_probs: expected a law .* in every row"):
        tree_round_law(tree, torch.tensor([[0.9, 0.9], [0.5, 0.5], [0.5, 0.5]]))  # not a law of mass 1.8
    nan_after_1 = lambda ctx: torch.tensor([0.0, 0.0]) if ctx[-1] == 0 else torch.tensor([float("nan"), 0.0])  # noqa: E731
    with pytest.raises(ValueError, match=r"target_logits: expected a law .* after context \(0, 1\)"):
        autoregressive_law(nan_after_1, (0,), 2, sampling=T1)  # not half the mass dropped
    with pytest.raises(ValueError, match=r"target_logits: expected shape \[k \+ 1, V\] = \[2, V\]"):
        chain_round_law(torch.zeros(3, 4), torch.tensor([0]), None, sampling=T1)  # not named target_probs


def test_exact_laws_apply_the_repetition_penalty_and_processors_as_transformers_does():
    from transformers import RepetitionPenaltyLogitsProcessor

    law, draft = MarkovLaw(4, seed=0, scale=1.5), MarkovLaw(4, seed=1, scale=1.5)
    penalised = SamplingConfig(temperature=1.0, repetition_penalty=3.0)
    hf = RepetitionPenaltyLogitsProcessor(3.0)
    by_transformers = lambda ctx: hf(torch.tensor([ctx]), law(ctx)[None].float())[0]  # noqa: E731
    want = autoregressive_law(by_transformers, (1, 2), 3, sampling=T1)
    assert total_variation(want, autoregressive_law(law, (1, 2), 3, sampling=T1)) > 0.05  # the penalty matters
    assert total_variation(autoregressive_law(law, (1, 2), 3, sampling=penalised), want) < EXACT
    chain = speculative_law(chain_round(law, num_draft=2, sampling=penalised, draft_logits=draft), (1, 2), 3)
    assert total_variation(chain, want) < EXACT
    top2 = lambda ctx: Tree(tokens=torch.topk(draft(ctx), 2).indices, parents=[-1, -1])  # noqa: E731
    assert total_variation(speculative_law(tree_round(law, top2, sampling=penalised), (1, 2), 3), want) < EXACT


def test_harness_arguments_are_checked():
    law = MarkovLaw(3, seed=0)
    one = lambda ctx: {(0,): 0.5, (1,): 0.5}  # noqa: E731
    for call in (
        lambda: autoregressive_law(law, (0,), -2, sampling=T1),
        lambda: speculative_law(one, (0,), -1),
        lambda: speculative_law(one, (0,), True),
    ):
        with pytest.raises(ValueError, match="num_tokens: expected an int >= 0"):
            call()
    with pytest.raises(TypeError, match="context: expected int token ids, got 1.5 at index 1"):
        autoregressive_law(law, (0, 1.5), 1, sampling=T1)
    with pytest.raises(ValueError, match="draft_tokens: expected at most num_draft = 1 tokens, got 2"):
        speculative_law(chain_round(law, num_draft=1, sampling=T1, draft_tokens=lambda ctx: [0, 1]), (0,), 2)
    with pytest.raises(ValueError, match="round_law: expected probabilities summing to 1"):
        speculative_law(lambda ctx: {(0,): 0.5}, (0,), 1)  # a round that lost half its mass (a NaN branch dropped)
    with pytest.raises(ValueError, match="round_law: expected probabilities in"):
        speculative_law(lambda ctx: {(0,): float("nan"), (1,): 1.0}, (0,), 1)
    assert speculative_law(one, (0,), 0) == {(): 1.0}


def test_markov_target_refuses_what_a_runtime_target_refuses():
    target = MarkovTarget(MarkovLaw(5, order=1, seed=0), max_seq_len=16)
    for rows in ([-1, 0], [2, 0], [1, 1, 1], [0, 3]):
        target.reset()
        target.forward(torch.tensor([[1, 2, 3]]))
        with pytest.raises(ValueError, match=r"accepted: expected ascending row indices in \[0, 3\)"):
            target.commit(torch.tensor(rows))
    target.reset()
    target.forward(torch.tensor([[1, 2, 3]]))
    with pytest.raises(TypeError, match="accepted: expected an int or a 1-D int64 tensor"):
        target.commit(True)
    with pytest.raises(ValueError, match=r"tokens: expected token ids in \[0, 5\), got ids in \[-1, 2\]"):
        target.forward(torch.tensor([[2, -1]]))
    with pytest.raises(ValueError, match="tokens: expected at least one token"):
        target.forward(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"mask: expected bool \[2, 2\]"):
        target.forward(torch.tensor([[1, 2]]), mask=torch.ones(2, 2))


def test_chi2_inputs_keep_their_ids_and_shapes():
    from specdec.testing.laws import one_sample_chi2

    with pytest.raises(ValueError, match=r"samples\[0\]: expected an outcome of integer token ids"):
        one_sample_chi2([[0.9]] * 10 + [[1.2]] * 10, {(0,): 0.5, (1,): 0.5}, min_expected=0)
    hits = torch.ones(3, 2, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"hits_a\[0\]: expected a 1-D tensor of one sequence's hits, got shape \(2, 5\)"):
        argmax_rate_test(hits, hits)


def test_sample_continuations_refuses_a_context_that_is_not_integer_ids():
    from specdec.testing.laws import sample_continuations

    with pytest.raises(ValueError, match="context: expected a non-empty sequence of integer token ids"):
        sample_continuations(MarkovTarget(MarkovLaw(3, seed=0), max_seq_len=16), (1.9, 2.7), 2, 2)
    assert sample_continuations(MarkovTarget(MarkovLaw(3, seed=0), max_seq_len=16), torch.tensor([1, 2]), 2, 2).shape == (2, 2)
