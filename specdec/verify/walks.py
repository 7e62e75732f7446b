"""Walks of a verified tree: which root path is accepted and which bonus token follows.

Why sample-and-match is exact: at each visited row the emitted token is drawn from the target's law
given exactly the tokens emitted before it, and the next row to visit (the first child carrying that
token) depends only on tokens already emitted. So the emitted sequence is a target sample, for any tree
that was built without looking at the target's draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.contracts.tree import Tree
from specdec.verify.sampling import sample


@dataclass
class TreeWalk:
    """The accepted root path of a tree and the emitted tokens.

    Attributes:
        rows: ``[n + 1]`` int64 ascending verify rows of the accepted path, root row 0 first (what
            ``target.commit`` keeps).
        emitted: ``[n + 1]`` int64: the ``n`` accepted node tokens, then the bonus token.
        num_accepted: ``n`` as a host int.

    Example:
        >>> walk = match_walk(Tree(tokens=[7, 8], parents=[-1, 0]), torch.tensor([7, 3, 5]))   # 7 matches, 3 does not
        >>> walk.rows.tolist(), walk.emitted.tolist(), walk.num_accepted
        ([0, 1], [7, 3], 1)
    """

    rows: torch.Tensor
    emitted: torch.Tensor
    num_accepted: int


def match_walk(tree: Tree, choices: torch.Tensor) -> TreeWalk:
    """Walk from the root, at each row moving to the first child whose token equals ``choices[row]``.

    The walk stops at the first row with no such child; ``choices`` of that row is the bonus token.
    Computed without a host loop: a node is on the path iff it and all its ancestors are the first
    matching child of their parent (one host sync for the path length).

    Args:
        tree: the draft tree (``N`` nodes).
        choices: ``[N + 1]`` int64, the target's token at each verify row (argmax, or a draw).

    Example:
        >>> tree = Tree(tokens=[7, 8, 9], parents=[-1, -1, 1])
        >>> walk = match_walk(tree, torch.tensor([8, 0, 9, 4]))   # root -> 8 -> 9, then bonus 4
        >>> walk.rows.tolist(), walk.emitted.tolist()
        ([0, 2, 3], [8, 9, 4])
    """
    if not isinstance(tree, Tree):
        raise TypeError(f"tree: expected a Tree, got {type(tree).__name__}")
    n = tree.num_nodes
    if not isinstance(choices, torch.Tensor) or choices.dtype != torch.long or tuple(choices.shape) != (n + 1,):
        desc = f"{choices.dtype} {tuple(choices.shape)}" if isinstance(choices, torch.Tensor) else type(choices).__name__
        raise ValueError(f"choices: expected int64 [{n + 1}] (root + {n} nodes), got {desc}")
    if choices.device != tree.device:
        raise ValueError(f"choices: expected the tree's device {tree.device}, got {choices.device}")
    parent_rows = tree.parents + 1  # [N]
    match = tree.tokens == choices[parent_rows]  # [N]
    # Among siblings carrying the chosen token only the first counts: picking a later duplicate by
    # what lies below it would make the path depend on draws that are then emitted (biased).
    earlier = torch.ones(n, n, dtype=torch.bool, device=tree.device).tril(-1)  # [N, N] j < i
    sibling = (parent_rows[:, None] == parent_rows[None, :]) & earlier
    first = match & ~(sibling & match[None, :]).any(-1)  # [N]
    ancestors = tree.ancestor_mask[1:, 1:]  # [N, N] node ancestors-or-self
    on_path = ~(ancestors & ~first[None, :]).any(-1)  # [N]
    path_nodes = on_path.nonzero().view(-1)  # ascending = root to leaf (parents come first)
    rows = torch.cat([torch.zeros(1, dtype=torch.long, device=tree.device), path_nodes + 1])
    emitted = torch.cat([tree.tokens[path_nodes], choices[rows[-1:]]])
    return TreeWalk(rows=rows, emitted=emitted, num_accepted=int(path_nodes.numel()))


def _check_row_law(name: str, law: torch.Tensor, tree: Tree) -> None:
    rows = tree.num_nodes + 1
    if not isinstance(law, torch.Tensor) or not law.is_floating_point():
        raise TypeError(f"{name}: expected a float tensor [{rows}, V], got {getattr(law, 'dtype', type(law).__name__)}")
    if law.ndim != 2 or law.shape[0] != rows:
        raise ValueError(f"{name}: expected shape [{rows}, V] (root + {tree.num_nodes} nodes), got {tuple(law.shape)}")
    if law.device != tree.device:
        raise ValueError(f"{name}: expected the tree's device {tree.device}, got {law.device}")


def greedy_walk(tree: Tree, target_logits: torch.Tensor) -> TreeWalk:
    """Greedy tree acceptance: follow the child equal to the target argmax; bonus at the first miss.

    Args:
        target_logits: ``[N + 1, V]`` target logits of the verify rows.

    Example:
        >>> tree = Tree(tokens=[1, 2], parents=[-1, -1])
        >>> greedy_walk(tree, torch.tensor([[0., 0., 5.], [5., 0., 0.], [0., 5., 0.]])).emitted.tolist()
        [2, 1]
    """
    _check_row_law("target_logits", target_logits, tree)
    return match_walk(tree, target_logits.argmax(-1))


def greedy_walk_tokens(tree: Tree, target_tokens: list[int]) -> TreeWalk:
    """Greedy tree acceptance from host tokens: :func:`greedy_walk` given the argmax already on the host.

    ``target_tokens`` is the target argmax of every verify row read to the host
    (``target_logits.argmax(-1).tolist()``). The walk is :func:`match_walk`'s: from the root, move to
    the first child (lowest node index) whose token equals the row's argmax; the argmax of the first
    row without such a child is the bonus. Given the argmax of the same logits it decides exactly what
    :func:`greedy_walk` decides, ties included: both take the same argmax over the same values, whose
    ties resolve to the first maximal index. The tree's tokens and parents are read with one
    ``tolist`` each (free for a tree on the host); ``rows`` and ``emitted`` are on the tree's device.

    Args:
        tree: the draft tree (``N`` nodes).
        target_tokens: ``N + 1`` ints, the argmax of the rows ``[root, node_0, ..., node_{N-1}]``.

    Example:
        >>> tree = Tree(tokens=[7, 8, 9], parents=[-1, -1, 1])
        >>> walk = greedy_walk_tokens(tree, [8, 0, 9, 4])   # root -> 8 -> 9, then bonus 4
        >>> walk.rows.tolist(), walk.emitted.tolist(), walk.num_accepted
        ([0, 2, 3], [8, 9, 4], 2)
    """
    if not isinstance(tree, Tree):
        raise TypeError(f"tree: expected a Tree, got {type(tree).__name__}")
    n = tree.num_nodes
    if not isinstance(target_tokens, (list, tuple)) or len(target_tokens) != n + 1:
        got = len(target_tokens) if isinstance(target_tokens, (list, tuple)) else type(target_tokens).__name__
        raise ValueError(f"target_tokens: expected a list of {n + 1} ints (root + {n} nodes), got {got}")
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    children: list[list[int]] = [[] for _ in range(n + 1)]  # per row, its child nodes in node order
    for node, parent in enumerate(parents):
        children[parent + 1].append(node)
    rows, emitted, row = [0], [], 0
    while True:
        choice = target_tokens[row]
        node = next((c for c in children[row] if tokens[c] == choice), None)
        if node is None:
            break
        emitted.append(tokens[node])
        row = node + 1
        rows.append(row)
    emitted.append(target_tokens[row])
    device = tree.device
    return TreeWalk(
        rows=torch.tensor(rows, dtype=torch.long, device=device),
        emitted=torch.tensor(emitted, dtype=torch.long, device=device),
        num_accepted=len(rows) - 1,
    )


def sample_and_match(tree: Tree, target_probs: torch.Tensor, *, generator: torch.Generator | None = None) -> TreeWalk:
    """Sampled tree acceptance: draw the target token at every row, follow the matching child.

    Every row gets one draw from its exact target law (one uniform per row from ``generator``, in row
    order); the walk then follows the first child whose token equals the draw. Lossless for any tree
    built without the target's draws (see the module docstring).

    Args:
        target_probs: ``[N + 1, V]`` target law of each verify row (after temperature / top-k / top-p).
        generator: the request's generator.

    Example (one-hot laws make the draw certain):
        >>> tree = Tree(tokens=[1, 2], parents=[-1, -1])
        >>> sample_and_match(tree, torch.eye(3)[[2, 0, 1]]).emitted.tolist()
        [2, 1]
    """
    _check_row_law("target_probs", target_probs, tree)
    return match_walk(tree, sample(target_probs, generator))
