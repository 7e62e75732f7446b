"""Hypothesis strategies for awkward cases: laws with zeros, one-hot laws, disjoint supports, random
trees (hypothesis is a test dependency, imported on use)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec.verify.tree import Tree

__all__ = ["distribution_pairs", "probability_vectors", "trees"]


def probability_vectors(vocab_size: int, *, kinds: Sequence[str] = ("dense", "sparse", "one_hot", "uniform")):
    """Strategy for laws ``[V]`` float64 summing to 1: dense, with zeros, one-hot or uniform.

    Example:
        >>> from hypothesis import given
        >>> @given(probability_vectors(4))
        ... def test(p): assert abs(float(p.sum()) - 1) < 1e-12
    """
    from hypothesis import strategies as st

    allowed = {"dense", "sparse", "one_hot", "uniform"}
    if not set(kinds) <= allowed or not kinds:
        raise ValueError(f"kinds: expected a non-empty subset of {sorted(allowed)}, got {kinds!r}")

    @st.composite
    def build(draw):
        kind = draw(st.sampled_from(list(kinds)))
        if kind == "one_hot":
            return torch.nn.functional.one_hot(torch.tensor(draw(st.integers(0, vocab_size - 1))), vocab_size).double()
        if kind == "uniform":
            return torch.full((vocab_size,), 1.0 / vocab_size, dtype=torch.float64)
        weights = draw(st.lists(st.floats(0.01, 10.0), min_size=vocab_size, max_size=vocab_size))
        w = torch.tensor(weights, dtype=torch.float64)
        if kind == "sparse":
            keep = draw(st.lists(st.booleans(), min_size=vocab_size, max_size=vocab_size))
            mask = torch.tensor(keep)
            if not mask.any():
                mask[draw(st.integers(0, vocab_size - 1))] = True
            w = w * mask
        return w / w.sum()

    return build()


def distribution_pairs(vocab_size: int, *, disjoint: bool | None = None):
    """Strategy for ``(target_probs, draft_probs)`` pairs of laws ``[V]``, including pairs with
    disjoint supports (``disjoint=None`` mixes both kinds; ``True`` only disjoint ones).

    Example:
        >>> from hypothesis import given
        >>> @given(distribution_pairs(4, disjoint=True))
        ... def test(pq): assert float((pq[0] * pq[1]).sum()) == 0
    """
    from hypothesis import strategies as st

    if vocab_size < 2:
        raise ValueError(f"vocab_size: expected >= 2 for disjoint supports, got {vocab_size}")

    @st.composite
    def build(draw):
        want_disjoint = draw(st.booleans()) if disjoint is None else disjoint
        if not want_disjoint:
            return draw(probability_vectors(vocab_size)), draw(probability_vectors(vocab_size))
        split = draw(st.integers(1, vocab_size - 1))
        perm = torch.tensor(draw(st.permutations(list(range(vocab_size)))))
        side = torch.zeros(vocab_size, dtype=torch.bool)
        side[perm[:split]] = True
        out = []
        for support in (side, ~side):
            w = torch.tensor(draw(st.lists(st.floats(0.01, 10.0), min_size=vocab_size, max_size=vocab_size)), dtype=torch.float64)
            w = w * support
            out.append(w / w.sum())
        return tuple(out)

    return build()


def trees(max_nodes: int, vocab_size: int, *, min_nodes: int = 0):
    """Strategy for :class:`specdec.verify.tree.Tree`: random parents (``parents[i] < i``), random
    tokens, duplicate sibling tokens allowed, chains and stars included.

    Example:
        >>> from hypothesis import given
        >>> @given(trees(6, 3))
        ... def test(tree): assert all(p < i for i, p in enumerate(tree.parents.tolist()))
    """
    from hypothesis import strategies as st

    @st.composite
    def build(draw):
        n = draw(st.integers(min_nodes, max_nodes))
        shape = draw(st.sampled_from(["random", "chain", "star"]))
        if shape == "chain":
            parents = list(range(-1, n - 1))
        elif shape == "star":
            parents = [-1] * n
        else:
            parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
        tokens = [draw(st.integers(0, vocab_size - 1)) for _ in range(n)]
        return Tree(tokens=torch.tensor(tokens, dtype=torch.long), parents=torch.tensor(parents, dtype=torch.long))

    return build()
