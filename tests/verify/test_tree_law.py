"""sample_and_match: the exact output law (enumerate every draw at every row) equals the target's sequence law; the chain
ratio rule min(1, p/q) on a deterministic top-k tree does not. Each oracle has a mutation test."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from tree_shapes import hostile_tree

from specdec.verify.sampling import sample
from specdec.verify.tree import (
    Tree,
    best_first_tree,
    match_walk,
    sample_and_match,
    tree_attention_mask,
)


def target_law(context: tuple[int, ...], vocab: int) -> torch.Tensor:
    """A fixed, context-dependent target law with some exact zeros (float64)."""
    seed = 1 + sum((t + 1) * 7**i for i, t in enumerate(context))
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(vocab, generator=g, dtype=torch.float64)
    w[torch.rand(vocab, generator=g) < 0.2] = 0.0
    if w.sum() == 0:
        w[0] = 1.0
    return w / w.sum()


def row_laws(tree: Tree, vocab: int, law=target_law) -> torch.Tensor:
    rows = [law((), vocab)] + [law(tuple(tree.tokens[tree.path(i)].tolist()), vocab) for i in range(tree.num_nodes)]
    return torch.stack(rows)  # [N + 1, V]


def enumerated_output_law(tree: Tree, probs: torch.Tensor, walk=match_walk) -> dict[tuple[int, ...], float]:
    """Law of the emitted tokens: every combination of draws at every row, weighted exactly."""
    rows, vocab = probs.shape
    law: dict[tuple[int, ...], float] = {}
    for draws in itertools.product(range(vocab), repeat=rows):
        weight = math.prod(float(probs[r, d]) for r, d in enumerate(draws))
        if weight == 0.0:
            continue
        out = tuple(walk(tree, torch.tensor(draws)).emitted.tolist())
        law[out] = law.get(out, 0.0) + weight
    return law


def sequence_law(tree: Tree, vocab: int, law=target_law) -> dict[tuple[int, ...], float]:
    """What the target would emit: draw tokens one by one until the draw leaves the tree."""
    children: dict[int, dict[int, int]] = {}
    for i, (p, t) in enumerate(zip(tree.parents.tolist(), tree.tokens.tolist())):
        children.setdefault(p, {}).setdefault(t, i)  # first child with a token wins
    out: dict[tuple[int, ...], float] = {}

    def rec(node: int, context: tuple[int, ...], mass: float) -> None:
        probs = law(context, vocab)
        for tok in range(vocab):
            m = mass * float(probs[tok])
            if m == 0.0:
                continue
            child = children.get(node, {}).get(tok)
            if child is None:
                out[context + (tok,)] = out.get(context + (tok,), 0.0) + m
            else:
                rec(child, context + (tok,), m)

    rec(-1, (), 1.0)
    return out


def total_variation(a: dict, b: dict) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


# (kind, nodes, vocab): vocab ** (nodes + 1) draw combinations are enumerated
LAW_CASES = [
    ("single", 1, 4),
    ("chain", 4, 3),
    ("star", 3, 3),
    ("forest", 4, 3),
    ("deep", 6, 2),
    ("random", 4, 3),
    ("duplicates", 6, 2),
]


@pytest.mark.parametrize("case", LAW_CASES, ids=lambda c: f"{c[0]}-{c[1]}-V{c[2]}")
def test_sample_and_match_output_law_is_the_target_law(case):
    kind, n, vocab = case
    tree = hostile_tree(kind, n, seed=6, vocab=vocab)
    probs = row_laws(tree, vocab)
    got = enumerated_output_law(tree, probs)
    want = sequence_law(tree, vocab)
    assert set(got) == set(want)
    assert max(abs(got[k] - want[k]) for k in want) < 1e-12
    assert abs(sum(got.values()) - 1.0) < 1e-12


def _walk_deepest_duplicate(tree: Tree, choices: torch.Tensor):
    """Mutant: among duplicate siblings follow the one that matches deepest (peeks at later draws)."""
    parent_rows = tree.parents + 1
    match = tree.tokens == choices[parent_rows]
    anc = tree_attention_mask(tree)[1:, 1:]
    ok = ~(anc & ~match[None, :]).any(-1)
    depth = torch.where(ok, tree.depth, torch.zeros_like(tree.depth))
    if int(depth.max()) == 0:
        node = -1
    else:
        node = int(torch.nonzero(depth == depth.max())[0, 0])
    path = [] if node < 0 else tree.path(node)
    rows = torch.tensor([0] + [i + 1 for i in path])
    emitted = torch.cat([tree.tokens[path], choices[rows[-1:]]])
    return type("W", (), {"emitted": emitted})()


def _walk_root_draw_everywhere(tree: Tree, choices: torch.Tensor):
    """Mutant: compares every node with the root's draw (one draw reused down the tree)."""
    return match_walk(tree, choices[:1].expand(choices.shape[0]).clone())


@pytest.mark.parametrize(
    "walk", [_walk_deepest_duplicate, _walk_root_draw_everywhere], ids=["mutant-deepest-duplicate", "mutant-reused-draw"]
)
def test_mutation_output_law_oracle_catches(walk):
    vocab = 3
    tree = Tree(tokens=[1, 1, 2, 0], parents=[-1, -1, 1, 2])  # duplicate siblings, depth 3
    probs = row_laws(tree, vocab)
    got = enumerated_output_law(tree, probs, walk)
    assert total_variation(got, sequence_law(tree, vocab)) > 1e-3


def test_sample_and_match_draws_each_row_from_its_own_law():
    tree = Tree(tokens=[1, 2, 0, 2], parents=[-1, -1, 0, 1])
    # one-hot laws: root -> 2, node 1 (token 2) -> 2, so the walk is root, node 1, node 3, then 1
    probs = torch.eye(3)[[2, 0, 2, 0, 1]]
    walk = sample_and_match(tree, probs, generator=torch.Generator().manual_seed(0))
    assert walk.rows.tolist() == [0, 2, 4] and walk.emitted.tolist() == [2, 2, 1]


def test_sample_and_match_is_a_walk_over_one_draw_per_row():
    tree = hostile_tree("random", 33, seed=7, vocab=4)
    probs = torch.softmax(torch.randn(34, 4, generator=torch.Generator().manual_seed(1)), -1)
    for seed in range(5):
        walk = sample_and_match(tree, probs, generator=torch.Generator().manual_seed(seed))
        draws = sample(probs, torch.Generator().manual_seed(seed))
        assert torch.equal(walk.emitted, match_walk(tree, draws).emitted)
        assert walk.emitted.tolist()[-1] == int(draws[walk.rows[-1]])


# the chain ratio rule min(1, p/q) on a deterministic top-k tree is biased
def naive_ratio_tree_law(tree: Tree, draft_probs: torch.Tensor, vocab: int, law=target_law):
    """Exact law of the tempting but wrong rule: at each node try the children in order, accept a
    child c with min(1, p(c) / q(c)); if all are rejected draw from norm(max(p - q, 0))."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(tree.parents.tolist()):
        children.setdefault(p, []).append(i)
    toks = tree.tokens.tolist()
    out: dict[tuple[int, ...], float] = {}

    def rec(node: int, context: tuple[int, ...], depth: int, mass: float) -> None:
        p = law(context, vocab)
        q = draft_probs[depth] if depth < draft_probs.shape[0] else None
        rejected = mass
        for c in children.get(node, []):
            accept = min(1.0, float(p[toks[c]]) / float(q[toks[c]]))
            rec(c, context + (toks[c],), depth + 1, rejected * accept)
            rejected *= 1.0 - accept
        residual = p if q is None or not children.get(node) else (p - q).clamp_min(0.0)
        residual = residual / residual.sum() if residual.sum() > 0 else p
        for tok in range(vocab):
            if rejected * float(residual[tok]) > 0:
                key = context + (tok,)
                out[key] = out.get(key, 0.0) + rejected * float(residual[tok])

    rec(-1, (), 0, 1.0)
    return out


def test_ratio_rule_on_top_k_tree_is_biased_but_sample_and_match_is_not():
    vocab = 3
    # the drafter's marginals at depth 1 and 2; the tree is their deterministic top-2 expansion
    draft_probs = torch.tensor([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]], dtype=torch.float64)
    tree = best_first_tree(draft_probs.log(), budget=4, top_k=2)
    assert tree.num_nodes == 4
    want = sequence_law(tree, vocab)
    biased = naive_ratio_tree_law(tree, draft_probs, vocab)
    assert abs(sum(biased.values()) - 1.0) < 1e-12
    assert total_variation(biased, want) > 0.05
    exact = enumerated_output_law(tree, row_laws(tree, vocab))
    assert total_variation(exact, want) < 1e-12


def test_ratio_rule_bias_in_the_smallest_case():
    # one depth, top-2 children {0, 1}, q = [.5, .3, .2], p = [.2, .2, .6]:
    # the ratio rule emits 0 w.p. .4, 1 w.p. .6 * 2/3 = .4, 2 w.p. .2 -- the target says .2/.2/.6
    p = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    tree = Tree(tokens=[0, 1], parents=[-1, -1])
    biased = naive_ratio_tree_law(tree, torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64), 3, law=lambda c, v: p)
    exact = enumerated_output_law(tree, torch.stack([p, p, p]))

    def first_token(law):
        return [round(sum(m for seq, m in law.items() if seq[0] == t), 12) for t in range(3)]

    assert first_token(biased) == [0.4, 0.4, 0.2]
    assert first_token(exact) == [0.2, 0.2, 0.6]
