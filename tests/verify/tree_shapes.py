"""Hostile tree shapes shared by the tree verification tests: single nodes, chains, stars, forests, deep spines, duplicates."""

from __future__ import annotations

import torch

from specdec.verify.tree import (
    Tree,
)

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
