"""best_first_tree against brute-force enumeration of every prefix, ties and -inf included; each oracle has a mutation test."""

from __future__ import annotations

import math

import pytest
import torch

from specdec.verify.tree import (
    Tree,
    best_first_tree,
)


def brute_force_best_first(lp_of, vocab: int, max_depth: int, budget: int, top_k: int | None = None):
    """Every prefix, sorted by (higher score, shallower, smaller rank tuple); the first `budget`."""
    entries = []

    def rec(path: tuple[int, ...], ranks: tuple[int, ...], score: float) -> None:
        if len(path) == max_depth:
            return
        lp = lp_of(path)
        order = sorted(range(vocab), key=lambda t: (-lp[t], t))
        if top_k is not None:
            order = order[:top_k]
        for r, t in enumerate(order):
            s = score + lp[t]
            if s == -math.inf:
                continue
            entries.append(((-s, len(path) + 1, ranks + (r,)), path + (t,), s))
            rec(path + (t,), ranks + (r,), s)

    rec((), (), 0.0)
    entries.sort(key=lambda e: e[0])
    return [(path, s) for _, path, s in entries[:budget]]


def tree_paths(tree: Tree) -> list[tuple[tuple[int, ...], float]]:
    return [(tuple(tree.tokens[tree.path(i)].tolist()), float(tree.scores[i])) for i in range(tree.num_nodes)]


def tied_logprobs(shape, seed: int) -> torch.Tensor:
    """Log-probs with many exact ties (logits on a coarse grid) and some -inf entries."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randint(-2, 2, shape, generator=g).float()
    logits[torch.rand(shape, generator=g) < 0.15] = float("-inf")
    logits[..., 0] = torch.where(torch.isinf(logits[..., 1:]).all(-1), 0.0, logits[..., 0])
    return torch.log_softmax(logits, -1)


@pytest.mark.parametrize("budget", [1, 2, 3, 5, 8, 13, 40, 128])
@pytest.mark.parametrize("kind", ["random", "tied", "uniform"])
def test_best_first_tree_matches_brute_force(kind, budget):
    vocab, depth = 4, 4
    g = torch.Generator().manual_seed(budget)
    if kind == "random":
        lp = torch.log_softmax(torch.randn(depth, vocab, generator=g), -1)
    elif kind == "tied":
        lp = tied_logprobs((depth, vocab), seed=budget)
    else:
        lp = torch.full((depth, vocab), -math.log(vocab))
    tree = best_first_tree(lp, budget)
    table = lp.double().tolist()
    want = brute_force_best_first(lambda path: table[len(path)], vocab, depth, budget)
    assert tree_paths(tree) == want
    # ancestor-closed and topological come with Tree's validation; scores are non-increasing
    assert torch.all(tree.scores[1:] <= tree.scores[:-1])


@pytest.mark.parametrize("top_k", [1, 2, 3])
@pytest.mark.parametrize("max_depth", [1, 2, 5])
def test_path_dependent_best_first_tree_matches_brute_force(top_k, max_depth):
    vocab, budget = 3, 30
    calls = []

    def table(path: tuple[int, ...]) -> list[float]:
        seed = 11 + sum((t + 1) * 5**i for i, t in enumerate(path))
        return tied_logprobs((vocab,), seed).double().tolist()

    def child_logprobs(path: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(path.tolist()))
        return torch.tensor(table(tuple(path.tolist())), dtype=torch.float32)

    tree = best_first_tree(child_logprobs, budget, max_depth=max_depth, top_k=top_k)
    assert tree_paths(tree) == brute_force_best_first(table, vocab, max_depth, budget, top_k)
    # the callable is asked once per expanded node, never more
    assert len(calls) == len(set(calls)) <= tree.num_nodes + 1


def test_best_first_tree_truncation_is_the_smaller_budget():
    lp = tied_logprobs((5, 6), seed=3)
    big = best_first_tree(lp, 60)
    for n in (1, 7, 33):
        small = best_first_tree(lp, n)
        assert torch.equal(big.truncate(n).tokens, small.tokens) and torch.equal(big.truncate(n).parents, small.parents)


def test_best_first_tree_one_hot_draft_is_its_chain():
    lp = torch.full((4, 5), float("-inf"))
    lp[torch.arange(4), torch.tensor([3, 1, 4, 1])] = 0.0
    tree = best_first_tree(lp, 64)
    assert tree.is_chain and tree.tokens.tolist() == [3, 1, 4, 1]


def test_best_first_tree_large_vocab_budget():
    lp = torch.log_softmax(torch.randn(16, 1000, generator=torch.Generator().manual_seed(0)), -1)
    tree = best_first_tree(lp, 128)
    assert tree.num_nodes == 128
    # the rank-0 prefix of every depth that made it in lies on the spine
    spine = lp.argmax(-1)
    assert tree.tokens[0] == spine[0]


@pytest.mark.parametrize(
    "args, kwargs, err, match",
    [
        ((torch.zeros(2, 3), 0), {}, ValueError, r"budget: expected an int >= 1 \(number of tree nodes\), got 0"),
        ((torch.zeros(2, 3), 2.0), {}, TypeError, r"budget: expected an int >= 1, got float"),
        ((torch.zeros(2, 3), True), {}, TypeError, r"budget: expected an int >= 1, got bool"),
        ((torch.zeros(3), 4), {}, ValueError, r"draft_logprobs: expected shape \[D, V\]"),
        ((torch.zeros(0, 3), 4), {}, ValueError, r"draft_logprobs: expected shape \[D, V\]"),
        ((torch.tensor([[0.5, -1.0]]), 4), {}, ValueError, r"expected log-probabilities \(<= 0\), got a maximum of 0.5"),
        ((torch.tensor([[float("nan"), 0.0]]), 4), {}, ValueError, "draft_logprobs: contains NaN"),
        ((torch.zeros(2, 3, dtype=torch.long), 4), {}, TypeError, "draft_logprobs: expected a float tensor"),
        ((torch.zeros(2, 3), 4), {"max_depth": 3}, ValueError, r"max_depth: expected an int in \[1, 2\]"),
        ((lambda path: torch.zeros(3), 4), {}, ValueError, r"max_depth: expected an int >= 1 \(required with a callable"),
        ((lambda path: torch.ones(3), 4), {"max_depth": 2}, ValueError, r"draft_logprobs\(path of length 0\): expected log-prob"),
        (("nope", 4), {}, TypeError, "draft_logprobs: expected a float tensor"),
        ((torch.zeros(2, 3), 4), {"top_k": 0}, ValueError, r"top_k: expected an int >= 1 or None"),
    ],
    ids=[
        "budget-0",
        "budget-float",
        "budget-bool",
        "1d",
        "no-depth",
        "positive",
        "nan",
        "int-dtype",
        "max-depth",
        "callable-no-depth",
        "callable-bad-output",
        "not-a-tensor",
        "top-k-0",
    ],
)
def test_best_first_tree_rejects_bad_input(args, kwargs, err, match):
    with pytest.raises(err, match=match):
        best_first_tree(*args, **kwargs)


def _best_first_no_sibling(lp, budget):
    """Mutant: a heap that never pushes siblings (a beam of width 1 with late branching)."""
    tree = best_first_tree(lp, budget, top_k=1)
    return tree


def _best_first_ties_by_larger_id(lp, budget):
    """Mutant: ranks equal log-probs by larger token id."""
    flipped = best_first_tree(lp.flip(-1), budget)
    vocab = lp.shape[-1]
    return Tree(tokens=vocab - 1 - flipped.tokens, parents=flipped.parents, scores=flipped.scores)


def _best_first_depth_major(lp, budget):
    """Mutant: best per depth (EAGLE-1 style static expansion), not best overall."""
    return best_first_tree(lp, budget, max_depth=1)


@pytest.mark.parametrize(
    "mutant",
    [_best_first_no_sibling, _best_first_ties_by_larger_id, _best_first_depth_major],
    ids=["mutant-no-sibling", "mutant-ties-larger-id", "mutant-one-depth"],
)
def test_mutation_best_first_oracle_catches(mutant):
    lp = tied_logprobs((4, 4), seed=8)
    table = lp.double().tolist()
    want = brute_force_best_first(lambda path: table[len(path)], 4, 4, 13)
    assert tree_paths(mutant(lp, 13)) != want


def _plain_topk(lp: torch.Tensor, k: int):
    """Mutant of the child ranking: topk as is (its order and set among ties are unspecified)."""
    values, ids = torch.topk(lp, k, dim=-1)
    return values.double().cpu().tolist(), ids.cpu().tolist()


def boundary_tie_mismatches() -> int:
    """best_first_tree vs brute force where ties straddle the top-k cut (budget < vocab)."""
    bad = 0
    for seed in range(40):
        lp = tied_logprobs((2, 9), seed=100 + seed)
        table = lp.double().tolist()
        for budget in (1, 2, 3, 5):
            want = brute_force_best_first(lambda path: table[len(path)], 9, 2, budget)
            bad += tree_paths(best_first_tree(lp, budget)) != want
    return bad


def test_best_first_tree_ties_at_the_top_k_cut():
    assert boundary_tie_mismatches() == 0


def test_mutation_top_k_cut_oracle_catches(monkeypatch):
    import specdec.verify.best_first as tree_mod

    monkeypatch.setattr(tree_mod, "_ranked", _plain_topk)
    assert boundary_tie_mismatches() > 0
