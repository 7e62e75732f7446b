"""best_first_tree_device: the host heap's tree from fixed-shape tensor ops.

* equal to ``best_first_tree`` (tokens, parents, float64 scores, node order) on hypothesis-drawn inputs,
  hostile ones included: quantised log-probs (heavy ties), equal rows, ``-inf`` entries, one-hot rows,
  budgets past the number of finite prefixes, budget 1, D = 1, V < budget, top_k, three dtypes;
* equal to a brute-force enumeration of every token tuple on tiny cases;
* output shapes depend on ``budget`` only, never on the values;
* mutation tests: ranking equal log-probs by larger id, keeping ``topk``'s own pick among log-probs tied
  at the k-th value, or ordering equal prefix scores by larger rank tuple makes the equality fail;
* ``TreeVerifier(device_tree=True)`` builds the same trees as the default.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specdec.verify.best_first_device as device_mod
from specdec.drafters.base import DraftProposal
from specdec.verify.best_first import best_first_tree
from specdec.verify.best_first_device import best_first_tree_device
from specdec.verify.tree import Tree, TreeVerifier

KINDS = ["random", "quantised", "equal-rows", "one-hot", "sparse-inf", "uniform"]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def make_logprobs(kind: str, depth: int, vocab: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``[depth, vocab]`` log-probs of one hostile kind, every row with at least one finite entry."""
    g = torch.Generator().manual_seed(seed)
    if kind == "random":
        logits = torch.randn(depth, vocab, generator=g) * 2
    elif kind == "quantised":
        logits = torch.randint(-2, 2, (depth, vocab), generator=g).float()
    elif kind == "equal-rows":
        logits = torch.randint(-1, 2, (1, vocab), generator=g).float().expand(depth, vocab).clone()
    elif kind == "one-hot":
        logits = torch.full((depth, vocab), -math.inf)
        logits[torch.arange(depth), torch.randint(0, vocab, (depth,), generator=g)] = 0.0
    elif kind == "sparse-inf":
        logits = torch.randint(-1, 2, (depth, vocab), generator=g).float()
        logits[torch.rand(depth, vocab, generator=g) < 0.5] = -math.inf
        logits[:, 0] = torch.where(torch.isinf(logits).all(-1), 0.0, logits[:, 0])
    else:
        logits = torch.zeros(depth, vocab)
    return torch.log_softmax(logits, -1).to(dtype)


def device_paths(draft_logprobs: torch.Tensor, budget: int, top_k: int | None = None):
    """Nodes of the device tree as (token path, score), checking the padding past num_nodes."""
    tokens, parents, scores, num_nodes = best_first_tree_device(draft_logprobs, budget, top_k=top_k)
    n = int(num_nodes)
    assert torch.equal(tokens[n:], torch.zeros(budget - n, dtype=torch.long))
    assert torch.equal(parents[n:], torch.full((budget - n,), -1))
    assert bool(torch.isneginf(scores[n:]).all())
    tree = Tree(tokens=tokens[:n], parents=parents[:n], scores=scores[:n])
    return [(tuple(tree.tokens[tree.path(i)].tolist()), float(tree.scores[i])) for i in range(n)]


def equals_host(draft_logprobs: torch.Tensor, budget: int, top_k: int | None = None) -> bool:
    want = best_first_tree(draft_logprobs, budget, top_k=top_k)
    tokens, parents, scores, num_nodes = best_first_tree_device(draft_logprobs, budget, top_k=top_k)
    n = int(num_nodes)
    return (
        n == want.num_nodes
        and torch.equal(tokens[:n], want.tokens)
        and torch.equal(parents[:n], want.parents)
        and torch.equal(scores[:n], want.scores)
    )


def brute_force(draft_logprobs: torch.Tensor, budget: int, top_k: int | None = None):
    """Every token tuple of length 1..D with its rank tuple and float64 score, sorted, the first ``budget``."""
    table = draft_logprobs.double().tolist()
    depth, vocab = len(table), len(table[0])
    ranks = []
    for row in table:
        order = sorted(range(vocab), key=lambda t: (-row[t], t))
        ranks.append({t: r for r, t in enumerate(order)})
    width = vocab if top_k is None else top_k
    entries = []
    for d in range(1, depth + 1):
        for path in itertools.product(range(vocab), repeat=d):
            rank_tuple = tuple(ranks[j][t] for j, t in enumerate(path))
            if max(rank_tuple) >= width:
                continue
            score = 0.0
            for j, t in enumerate(path):
                score += table[j][t]
            if score != -math.inf:
                entries.append(((-score, d, rank_tuple), path, score))
    entries.sort(key=lambda e: e[0])
    return [(path, score) for _, path, score in entries[:budget]]


@settings(max_examples=60)
@given(
    kind=st.sampled_from(KINDS),
    depth=st.integers(1, 5),
    vocab=st.integers(1, 9),
    budget=st.integers(1, 48),
    top_k=st.sampled_from([None, 1, 2, 3, 5]),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
)
def test_equals_the_host_heap(kind, depth, vocab, budget, top_k, dtype, seed):
    lp = make_logprobs(kind, depth, vocab, seed, dtype)
    assert equals_host(lp, budget, top_k)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "depth, vocab, budget, top_k",
    [(1, 4, 3, None), (1, 3, 10, None), (3, 3, 1, None), (3, 3, 7, None), (3, 4, 60, None), (3, 4, 20, 2), (2, 5, 200, 3)],
    ids=["d1", "d1-v<budget", "budget1", "small", "budget>finite", "top-k", "all-prefixes-top-k"],
)
def test_equals_brute_force(kind, depth, vocab, budget, top_k):
    for seed in range(3):
        lp = make_logprobs(kind, depth, vocab, seed)
        assert device_paths(lp, budget, top_k) == brute_force(lp, budget, top_k)


def test_large_vocab_equals_the_host_heap():
    """V far above the budget: the top-k cut goes through ties (quantised) or not (random)."""
    for kind in ("random", "quantised"):
        lp = make_logprobs(kind, 6, 5000, seed=1)
        assert equals_host(lp, 64) and equals_host(lp, 16, top_k=4)


def test_negative_zero_ties_with_zero():
    lp = torch.tensor([[-0.0, 0.0, -math.inf], [0.0, -0.0, -math.inf]])
    for dtype in DTYPES:
        assert equals_host(lp.to(dtype), 5)
    assert device_paths(lp, 5) == [((0,), 0.0), ((1,), 0.0), ((0, 0), 0.0), ((0, 1), 0.0), ((1, 0), 0.0)]


def test_output_shapes_do_not_depend_on_the_values():
    budget = 12
    signatures, nodes = set(), []
    for kind in ("one-hot", "sparse-inf", "random"):
        outputs = best_first_tree_device(make_logprobs(kind, 3, 4, seed=0), budget)
        signatures.add(tuple((tuple(t.shape), t.dtype) for t in outputs))
        nodes.append(int(outputs[3]))
    assert signatures == {(((budget,), torch.long), ((budget,), torch.long), ((budget,), torch.float64), ((), torch.long))}
    # the inputs really have different numbers of finite prefixes: a chain of 3, some, more than the budget
    assert nodes[0] == 3 and nodes[2] == budget and len(set(nodes)) == 3


@pytest.mark.parametrize(
    "args, kwargs, err, match",
    [
        ((torch.zeros(2, 3), 0), {}, ValueError, r"budget: expected an int >= 1 \(number of tree nodes\), got 0"),
        ((torch.zeros(2, 3), 2.0), {}, TypeError, r"budget: expected an int >= 1, got float"),
        ((torch.zeros(3), 4), {}, ValueError, r"draft_logprobs: expected shape \[D, V\] with D, V >= 1, got \(3,\)"),
        ((torch.zeros(0, 3), 4), {}, ValueError, r"draft_logprobs: expected shape \[D, V\] with D, V >= 1, got \(0, 3\)"),
        ((torch.zeros(2, 3, dtype=torch.long), 4), {}, TypeError, "draft_logprobs: expected a float tensor"),
        ((lambda path: torch.zeros(3), 4), {}, TypeError, "draft_logprobs: expected a float tensor of log-probs"),
        ((torch.zeros(2, 3), 4), {"top_k": 0}, ValueError, r"top_k: expected an int >= 1 or None, got 0"),
        ((torch.tensor([[0.5, -1.0]]), 4), {"check_values": True}, ValueError, r"expected log-probabilities \(<= 0\)"),
        ((torch.tensor([[math.nan, 0.0]]), 4), {"check_values": True}, ValueError, "draft_logprobs: contains NaN"),
    ],
    ids=["budget-0", "budget-float", "1d", "no-depth", "int-dtype", "callable", "top-k-0", "positive", "nan"],
)
def test_rejects_bad_input(args, kwargs, err, match):
    with pytest.raises(err, match=match):
        best_first_tree_device(*args, **kwargs)


def tie_mismatches() -> int:
    """Inputs full of ties at every level (children and prefix scores) that disagree with the host heap."""
    bad = 0
    for seed in range(6):
        for kind in ("quantised", "equal-rows", "uniform"):
            lp = make_logprobs(kind, 3, 9, seed)
            bad += sum(not equals_host(lp, budget) for budget in (3, 8, 20))
    return bad


def test_ties_everywhere_equal_the_host_heap():
    assert tie_mismatches() == 0


def _ranked_children_ties_by_larger_id(lp, k):
    """Mutant: equal log-probs ranked by larger token id."""
    values, ids = torch.sort(lp.flip(-1).double(), dim=-1, descending=True, stable=True)
    return values[:, :k], lp.shape[-1] - 1 - ids[:, :k]


def _ranked_children_topk_choice_among_ties(lp, k):
    """Mutant: among log-probs equal to the k-th largest, keep whichever entries ``topk`` happened to return."""
    top = torch.topk(lp.float() + 0.0, k, dim=-1)
    values, order = torch.sort(top.values, dim=-1, descending=True, stable=True)
    return values.double(), top.indices.gather(-1, order)


def _first_by_score_ties_by_larger_index(scores, count):
    """Mutant: equal prefix scores ordered by larger rank tuple (and deeper first across depths)."""
    n = scores.shape[0]
    return n - 1 - torch.sort(scores.flip(0), descending=True, stable=True).indices[:count]


@pytest.mark.parametrize(
    "name, mutant",
    [
        ("_ranked_children", _ranked_children_ties_by_larger_id),
        ("_ranked_children", _ranked_children_topk_choice_among_ties),
        ("_first_by_score", _first_by_score_ties_by_larger_index),
    ],
    ids=[
        "mutant-children-ties-larger-id",
        "mutant-children-topk-choice-among-ties",
        "mutant-prefix-ties-larger-rank-tuple",
    ],
)
def test_mutation_tie_rules_are_caught(monkeypatch, name, mutant):
    monkeypatch.setattr(device_mod, name, mutant)
    assert tie_mismatches() > 0


def test_tree_verifier_device_tree_builds_the_same_tree():
    g = torch.Generator().manual_seed(0)
    for kind in ("random", "quantised", "one-hot"):
        probs = make_logprobs(kind, 5, 11, seed=3).exp()
        proposal = DraftProposal(probs.argmax(-1), probs)
        for room, top_k in ((64, None), (9, None), (64, 2)):
            want = TreeVerifier(budget=32, top_k=top_k).build_tree(proposal, room=room)
            got = TreeVerifier(budget=32, top_k=top_k, device_tree=True).build_tree(proposal, room=room)
            assert torch.equal(got.tokens, want.tokens) and torch.equal(got.parents, want.parents)
            assert torch.equal(got.scores, want.scores)
    lp = torch.log_softmax(torch.randn(3, 11, generator=g), -1)
    proposal = DraftProposal(lp.argmax(-1), None, tree_logprobs=lp)
    assert torch.equal(TreeVerifier(8, device_tree=True).build_tree(proposal, room=64).tokens, best_first_tree(lp, 8).tokens)
    with pytest.raises(TypeError, match="device_tree: expected a bool, got int 1"):
        TreeVerifier(8, device_tree=1)
