"""Tree verification primitives against brute-force oracles (no target model needed).

Sample-and-match's output law is in test_tree_law.py, best_first_tree in test_best_first_tree.py.

* mask + positions: a float64 toy attention LM runs the whole tree in one pass; every root-to-leaf
  path is then run on its own, causally; every row must agree.
* greedy walk: the emitted tokens must equal the toy LM's own greedy continuation.
* each oracle gets a mutation test: a deliberately broken implementation must be caught.
"""

from __future__ import annotations

import pytest
import torch
from tree_shapes import SHAPES, hostile_tree, shape_id

from specdec.verify.tree import (
    Tree,
    greedy_walk,
    match_walk,
    sample_and_match,
    tree_attention_mask,
    tree_positions,
)


# a float64 toy attention LM with RoPE: tokens [T], positions [T], mask [T, T] -> logits [T, V]
class ToyLM:
    def __init__(self, vocab: int = 7, dim: int = 16, heads: int = 2, layers: int = 2, seed: int = 0):
        g = torch.Generator().manual_seed(seed)

        def rand(*shape):
            return torch.randn(*shape, generator=g, dtype=torch.float64)

        self.vocab, self.dim, self.heads = vocab, dim, heads
        self.emb = rand(vocab, dim)
        self.layers = [(rand(dim, 3 * dim) / dim**0.5, rand(dim, dim) / dim**0.5) for _ in range(layers)]
        self.head = rand(dim, vocab) * 2.0
        half = dim // heads // 2
        # a small base so that a wrong position changes the logits visibly
        self.inv_freq = 1.0 / (3.0 ** (torch.arange(half, dtype=torch.float64) / half))

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """tokens, positions [..., T], mask [T, T] -> logits [..., T, V] (leading dims are independent runs)."""
        hd = self.dim // self.heads
        x = self.emb[tokens]  # [..., T, dim]
        ang = positions.double()[..., None] * self.inv_freq  # [..., T, hd/2]
        cos = torch.cat([ang.cos()] * 2, -1)[..., None, :]  # [..., T, 1, hd]
        sin = torch.cat([ang.sin()] * 2, -1)[..., None, :]

        def rope(z):
            z1, z2 = z.chunk(2, -1)
            return z * cos + torch.cat([-z2, z1], -1) * sin

        for wqkv, wo in self.layers:
            q, k, v = (x @ wqkv).split(self.dim, -1)
            q, k, v = (z.unflatten(-1, (self.heads, hd)) for z in (q, k, v))  # [..., T, H, hd]
            q, k = rope(q), rope(k)
            att = torch.einsum("...thd,...shd->...hts", q, k) / hd**0.5  # [..., H, T, T]
            att = att.masked_fill(~mask, float("-inf")).softmax(-1)
            x = x + torch.einsum("...hts,...shd->...thd", att, v).flatten(-2) @ wo
        return x @ self.head  # [..., T, V]

    def causal(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[-1]
        positions = torch.arange(t).expand(tokens.shape)
        return self(tokens, positions, torch.ones(t, t, dtype=torch.bool).tril())

    def greedy(self, tokens: torch.Tensor, steps: int) -> torch.Tensor:
        out = tokens
        for _ in range(steps):
            out = torch.cat([out, self.causal(out)[-1].argmax().view(1)])
        return out[tokens.numel() :]


def tree_forward(lm: ToyLM, prefix: torch.Tensor, root: int, tree: Tree, mask_fn=tree_attention_mask, pos_fn=tree_positions):
    """One pass over prefix + [root] + nodes, the way a target with a KV cache sees it."""
    p, rows = prefix.numel(), tree.num_nodes + 1
    total = p + rows
    mask = torch.zeros(total, total, dtype=torch.bool)
    mask[:p, :p] = torch.ones(p, p, dtype=torch.bool).tril()
    mask[p:, :p] = True  # the committed prefix is visible to every tree row
    mask[p:, p:] = mask_fn(tree)
    positions = torch.cat([torch.arange(p), pos_fn(tree, p)])
    tokens = torch.cat([prefix, torch.tensor([root]), tree.tokens])
    return lm(tokens, positions, mask)[p:]  # [N + 1, V]


def per_path_logits(lm: ToyLM, prefix: torch.Tensor, root: int, tree: Tree) -> torch.Tensor:
    """Oracle: run every root-to-leaf path on its own (causal) and read each row off its path."""
    n = tree.num_nodes
    out = torch.full((n + 1, lm.vocab), float("nan"), dtype=torch.float64)
    parents = tree.parents.tolist()
    is_parent = set(parents)
    leaves = [i for i in range(n) if i not in is_parent] or [None]
    paths = [[] if leaf is None else tree.path(leaf) for leaf in leaves]
    # one independent causal run per leaf path; padding after a path cannot reach it under causality
    width = max(len(p) for p in paths)
    seqs = torch.zeros(len(paths), prefix.numel() + 1 + width, dtype=torch.long)
    for b, path in enumerate(paths):
        seqs[b, : prefix.numel() + 1 + len(path)] = torch.cat([prefix, torch.tensor([root]), tree.tokens[path]])
    logits = lm.causal(seqs)[:, prefix.numel() :]  # [leaves, 1 + width, V]
    for b, path in enumerate(paths):
        out[0] = logits[b, 0]
        for j, node in enumerate(path):
            out[node + 1] = logits[b, j + 1]
    return out


def reference_walk(tree: Tree, next_token) -> tuple[list[int], list[int]]:
    """Sequential walk: at each row follow the first child carrying next_token(row, emitted)."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(tree.parents.tolist()):
        children.setdefault(p, []).append(i)
    toks = tree.tokens.tolist()
    node, rows, emitted = -1, [0], []
    while True:
        tok = next_token(node + 1, emitted)
        emitted.append(tok)
        nxt = next((c for c in children.get(node, []) if toks[c] == tok), None)
        if nxt is None:
            return rows, emitted
        node = nxt
        rows.append(node + 1)


@pytest.mark.parametrize(
    "tokens, parents, err, match",
    [
        ([1, 2, 3], [-1, 2, 0], ValueError, r"parents\[1\] = 2: a parent must come before its child"),
        ([1, 2], [-1, 1], ValueError, r"parents\[1\] = 1: a parent must come before"),
        ([1, 2], [-1, 5], ValueError, r"parents\[1\] = 5 is out of range"),
        ([1, 2], [-2, -1], ValueError, r"parents\[0\] = -2 is out of range"),
        ([1, 2, 3], [-1, 0], ValueError, r"parents: expected the same length as tokens \(3\), got 2"),
        ([1, -4], [-1, 0], ValueError, r"tokens: expected token ids >= 0, got tokens\[1\] = -4"),
        (torch.tensor([1.0, 2.0]), [-1, 0], TypeError, r"tokens: expected an integer dtype, got torch.float32"),
        (torch.tensor([[1, 2]]), [-1, 0], ValueError, r"tokens: expected a 1-D tensor \[N\], got shape \(1, 2\)"),
        ([1, 2], torch.tensor([True, False]), TypeError, r"parents: expected an integer dtype"),
        ([1.7, 2.9], [-1, 0], TypeError, r"tokens: expected an integer dtype, got torch.float32"),
        ([1, 2], [-1, 0.5], TypeError, r"parents: expected an integer dtype, got torch.float32"),
    ],
    ids=[
        "parent-after-child",
        "self-parent",
        "parent-out-of-range",
        "below-minus-one",
        "length-mismatch",
        "negative-token",
        "float-tokens",
        "2d-tokens",
        "bool-parents",
        "float-list-tokens",
        "float-list-parents",
    ],
)
def test_tree_rejects_malformed_input(tokens, parents, err, match):
    with pytest.raises(err, match=match):
        Tree(tokens=tokens, parents=parents)


def test_tree_rejects_bad_scores():
    with pytest.raises(ValueError, match=r"scores: expected shape \(2,\), got \(3,\)"):
        Tree(tokens=[1, 2], parents=[-1, 0], scores=torch.zeros(3))
    with pytest.raises(TypeError, match="scores: expected a float tensor"):
        Tree(tokens=[1, 2], parents=[-1, 0], scores=torch.zeros(2, dtype=torch.long))


def test_tree_check_fits_names_rows_and_depth():
    tree = Tree.chain([1, 2, 3, 4])
    tree.check_fits(5)
    with pytest.raises(ValueError, match=r"4 nodes \(depth 4\) need 5 cache rows with the root, but only 4 are left"):
        tree.check_fits(4)


def test_tree_basic_properties():
    tree = Tree.from_paths([[5, 6, 7], [5, 8], [9]])
    assert tree.tokens.tolist() == [5, 6, 7, 8, 9]
    assert tree.parents.tolist() == [-1, 0, 1, 0, -1]
    assert tree.depth.tolist() == [1, 2, 3, 2, 1] and tree.max_depth == 3
    assert tree.path(2) == [0, 1, 2] and not tree.is_chain
    assert Tree.chain([3, 3, 3]).is_chain
    assert Tree.chain([]).num_nodes == 0 and Tree.chain([]).max_depth == 0
    assert tree.truncate(2).tokens.tolist() == [5, 6]
    empty = Tree.chain(torch.zeros(0, dtype=torch.long))
    assert tree_attention_mask(empty).tolist() == [[True]]
    assert tree_positions(empty, 4).tolist() == [4]


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_mask_and_positions_match_paths(shape):
    tree = hostile_tree(*shape, seed=1, vocab=50)
    mask = tree_attention_mask(tree)
    pos = tree_positions(tree, 17)
    expected = torch.zeros_like(mask)
    expected[0, 0] = True
    for i in range(tree.num_nodes):
        expected[i + 1, 0] = True
        expected[i + 1, [j + 1 for j in tree.path(i)]] = True
        assert int(pos[i + 1]) == 17 + len(tree.path(i))
    assert torch.equal(mask, expected)
    assert int(pos[0]) == 17


PREFIX = torch.tensor([3, 1, 4, 1, 0])


def forward_error(tree: Tree, lm: ToyLM, mask_fn=tree_attention_mask, pos_fn=tree_positions) -> float:
    got = tree_forward(lm, PREFIX, 2, tree, mask_fn, pos_fn)
    want = per_path_logits(lm, PREFIX, 2, tree)
    return float((got - want).abs().max())


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_tree_forward_matches_each_path_run_alone(shape):
    lm = ToyLM()
    tree = hostile_tree(*shape, seed=2, vocab=lm.vocab)
    assert forward_error(tree, lm) < 1e-10


def _mask_without_root(tree):
    mask = tree_attention_mask(tree).clone()
    mask[1:, 0] = False
    return mask


def _mask_parent_only(tree):
    mask = torch.eye(tree.num_nodes + 1, dtype=torch.bool)
    mask[torch.arange(1, tree.num_nodes + 1), tree.parents + 1] = True
    return mask


def _positions_flat(tree, prefix_len):
    return prefix_len + torch.arange(tree.num_nodes + 1)


@pytest.mark.parametrize(
    "mask_fn, pos_fn",
    [
        (_mask_without_root, tree_positions),
        (_mask_parent_only, tree_positions),
        (lambda t: torch.ones(t.num_nodes + 1, t.num_nodes + 1, dtype=torch.bool).tril(), tree_positions),
        (tree_attention_mask, _positions_flat),
        (tree_attention_mask, lambda t, p: tree_positions(t, p + 1)),
    ],
    ids=[
        "mutant-mask-no-root",
        "mutant-mask-parent-only",
        "mutant-mask-causal",
        "mutant-positions-flat-index",
        "mutant-positions-off-by-one",
    ],
)
def test_mutation_tree_forward_oracle_catches(mask_fn, pos_fn):
    lm = ToyLM()
    tree = hostile_tree("random", 16, seed=2, vocab=lm.vocab)
    assert tree.max_depth >= 3
    # RoPE only sees relative positions, so a uniform shift hides under it unless the prefix is
    # shifted too; the off-by-one mutant shifts only the tree rows and must be caught.
    assert forward_error(tree, lm, mask_fn, pos_fn) > 1e-6


def plant(tree: Tree, continuation: list[int], seed: int) -> Tree:
    """Write the model's own continuation along one random root-to-node path (deep acceptances)."""
    if tree.num_nodes == 0:
        return tree
    g = torch.Generator().manual_seed(seed)
    node = int(torch.randint(0, tree.num_nodes, (1,), generator=g))
    path = tree.path(node)
    cut = int(torch.randint(1, len(path) + 1, (1,), generator=g))
    tokens = tree.tokens.clone()
    for j, i in enumerate(path[:cut]):
        if j < len(continuation):
            tokens[i] = continuation[j]
    return Tree(tokens=tokens, parents=tree.parents)


@pytest.mark.parametrize("shape", [s for s in SHAPES if s[1] <= 33], ids=shape_id)
def test_greedy_walk_emits_the_greedy_continuation(shape):
    lm = ToyLM(vocab=5)
    base = hostile_tree(*shape, seed=3, vocab=lm.vocab)
    continuation = lm.greedy(torch.cat([PREFIX, torch.tensor([2])]), base.max_depth + 1).tolist()
    tree = plant(base, continuation, seed=4)
    walk = greedy_walk(tree, tree_forward(lm, PREFIX, 2, tree))
    rows, emitted = reference_walk(tree, lambda row, em: continuation[len(em)])
    assert walk.emitted.tolist() == continuation[: walk.num_accepted + 1]
    assert walk.emitted.tolist() == emitted and walk.rows.tolist() == rows
    assert walk.num_accepted == len(rows) - 1


def test_greedy_walk_reaches_the_deepest_planted_node():
    lm = ToyLM(vocab=5)
    tree = hostile_tree("deep", 64, seed=5, vocab=lm.vocab)
    continuation = lm.greedy(torch.cat([PREFIX, torch.tensor([2])]), tree.max_depth + 1).tolist()
    tokens = tree.tokens.clone()
    spine = tree.path(int(tree.depth.argmax()))
    tokens[spine] = torch.tensor(continuation[: len(spine)])
    tree = Tree(tokens=tokens, parents=tree.parents)
    walk = greedy_walk(tree, tree_forward(lm, PREFIX, 2, tree))
    assert walk.num_accepted == tree.max_depth
    assert walk.emitted.tolist() == continuation[: tree.max_depth + 1]


def test_walk_follows_the_first_duplicate_sibling():
    # root -> 4 (node 0, leaf) and root -> 4 (node 1) -> 6 (node 2): the first 4 wins even though the
    # second would match deeper
    tree = Tree(tokens=[4, 4, 6], parents=[-1, -1, 1])
    walk = match_walk(tree, torch.tensor([4, 9, 6, 0]))
    assert walk.rows.tolist() == [0, 1] and walk.emitted.tolist() == [4, 9]


def test_walk_input_errors():
    tree = Tree.chain([1, 2])
    with pytest.raises(ValueError, match=r"choices: expected int64 \[3\]"):
        match_walk(tree, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"target_logits: expected shape \[3, V\]"):
        greedy_walk(tree, torch.zeros(2, 5))
    with pytest.raises(TypeError, match="target_probs: expected a float tensor"):
        sample_and_match(tree, torch.zeros(3, 5, dtype=torch.long))


def test_a_draft_law_a_rounding_above_one_still_builds_its_tree():
    from specdec.contracts import DraftProposal
    from specdec.verify.tree import TreeVerifier

    probs = torch.tensor([[1.0000001, 0.0, 0.0], [0.2, 0.3, 0.5]])  # a renormalised one-hot row, rounded up
    tree = TreeVerifier(budget=4).build_tree(DraftProposal(torch.tensor([0, 2]), probs), room=8)
    assert tree.num_nodes >= 2 and tree.tokens[0].item() == 0


def _topological_shuffle(tree: Tree, seed: int) -> list[int]:
    """A random order of the nodes with every parent before its children."""
    g = torch.Generator().manual_seed(seed)
    parents = tree.parents.tolist()
    placed, order = {-1}, []
    while len(order) < tree.num_nodes:
        ready = [i for i, p in enumerate(parents) if i not in placed and p in placed]
        pick = ready[int(torch.randint(0, len(ready), (1,), generator=g))]
        placed.add(pick)
        order.append(pick)
    return order


@pytest.mark.parametrize("shape", [s for s in SHAPES if s[1] <= 33], ids=shape_id)
def test_reorder_moves_each_node_with_its_root_path_and_score(shape):
    tree = hostile_tree(*shape, seed=3, vocab=50)
    tree = Tree(
        tokens=tree.tokens, parents=tree.parents, scores=torch.rand(tree.num_nodes, generator=torch.Generator().manual_seed(4))
    )
    order = _topological_shuffle(tree, seed=5)
    moved = tree.reorder(order)
    for new, old in enumerate(order):
        assert tree.tokens[tree.path(old)].tolist() == moved.tokens[moved.path(new)].tolist()
        assert float(moved.scores[new]) == float(tree.scores[old])
    assert moved.depth.tolist() == [tree.depth.tolist()[old] for old in order]


def test_reorder_refuses_orders_that_are_not_permutations_or_put_a_child_first():
    tree = Tree.from_paths([[5, 6, 7], [9]])
    for bad in ([0, 1, 2], [0, 1, 2, 2], [0, 1, 2, 4]):
        with pytest.raises(ValueError, match=r"order: expected a permutation of range\(4\)"):
            tree.reorder(bad)
    with pytest.raises(ValueError, match="order: node 2 would come before its parent 1"):
        tree.reorder([0, 3, 2, 1])
