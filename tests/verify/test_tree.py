"""Tree verification primitives against brute-force oracles (no target model needed).

* mask + positions: a float64 toy attention LM runs the whole tree in one pass; every root-to-leaf
  path is then run on its own, causally; every row must agree.
* greedy walk: the emitted tokens must equal the toy LM's own greedy continuation.
* sample-and-match: the exact output law (enumerate every draw at every row) equals the target's
  sequence law; the chain ratio rule on a deterministic top-k tree does not.
* best_first_tree: against an enumeration of every prefix, ties and -inf included.
* each oracle gets a mutation test: a deliberately broken implementation must be caught.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from specdec.verify.sampling import sample
from specdec.verify.tree import (
    Tree,
    best_first_tree,
    greedy_walk,
    match_walk,
    sample_and_match,
    tree_attention_mask,
    tree_positions,
)

# --------------------------------------------------------------------------------------------------
# hostile tree shapes
# --------------------------------------------------------------------------------------------------
KINDS = ["single", "chain", "star", "forest", "deep", "random", "duplicates"]


def hostile_tree(kind: str, n: int, seed: int, vocab: int) -> Tree:
    g = torch.Generator().manual_seed(seed)

    def randint(lo: int, hi: int) -> int:  # inclusive
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    if kind == "single":
        n = 1
        parents = [-1]
    elif kind == "chain":
        parents = list(range(-1, n - 1))
    elif kind == "star":
        parents = [-1] * n
    elif kind == "forest":
        # several subtrees hanging directly under the root
        roots = max(2, n // 4) if n > 1 else 1
        parents = [-1] * min(roots, n) + [randint(0, i - 1) for i in range(min(roots, n), n)]
    elif kind == "deep":
        # a long spine with short twigs: deep and unbalanced
        spine = max(1, (3 * n) // 4)
        parents = list(range(-1, spine - 1)) + [randint(0, spine - 1) for _ in range(n - spine)]
    elif kind in ("random", "duplicates"):
        parents = [randint(-1, i - 1) for i in range(n)]
    else:
        raise AssertionError(kind)
    n = len(parents)
    # duplicate siblings appear often when the token alphabet is tiny
    hi = 2 if kind == "duplicates" else vocab
    tokens = torch.randint(0, hi, (n,), generator=g)
    return Tree(tokens=tokens, parents=torch.tensor(parents))


SHAPES = [(kind, n) for kind in KINDS for n in (1, 2, 3, 7, 16, 33, 64, 128) if not (kind == "single" and n > 1)]


def shape_id(shape) -> str:
    return f"{shape[0]}-{shape[1]}"


# --------------------------------------------------------------------------------------------------
# a float64 toy attention LM with RoPE: tokens [T], positions [T], mask [T, T] -> logits [T, V]
# --------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------
# Tree: validation
# --------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------
# mask and positions
# --------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------
# greedy walk
# --------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------
# sample-and-match: exact output law by enumeration
# --------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------
# the chain ratio rule min(1, p/q) on a deterministic top-k tree is biased
# --------------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------------
# best_first_tree against brute-force enumeration of every prefix
# --------------------------------------------------------------------------------------------------
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
