"""Tree verification: one target forward over a tree of candidate continuations.

A chain proposal ends the round at its first miss; a tree keeps several candidates at each depth, so a
miss on one branch can still be covered by a sibling. The pieces, each usable on its own:

* :class:`Tree` -- tokens and parent pointers (parents before children), validated on construction.
* :func:`best_first_tree` -- the ``budget`` most likely draft prefixes (the DDTree heap), from per-depth
  draft log-probs ``[D, V]`` or from a callable that gives path-dependent child log-probs.
* :func:`tree_attention_mask` / :func:`tree_positions` -- the mask and RoPE positions of the verify rows
  ``[root, node_0, ..., node_{N-1}]``.
* :func:`greedy_walk` / :func:`sample_and_match` -- decide which root path is accepted and the bonus
  token, from the target's logits / law at every verify row.
* :class:`TreeVerifier` -- all of the above against a :class:`specdec.models.Target`, plus the KV commit.

Row convention: verify row 0 is the root (the newest emitted token, not yet in the cache); node ``i``
is row ``i + 1``; ``parents[i] == -1`` means "child of the root".

Why sample-and-match is exact: at each visited row the emitted token is drawn from the target's law
given exactly the tokens emitted before it, and the next row to visit (the first child carrying that
token) depends only on tokens already emitted. So the emitted sequence is a target sample, for any tree
that was built without looking at the target's draws. Accepting deterministic top-k children with the
chain ratio ``min(1, p/q)`` is *not* exact (``tests/test_tree.py`` measures the bias).
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Sequence

import torch

from specdec.verify.chain import VerifyResult
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample

__all__ = [
    "Tree",
    "TreeWalk",
    "TreeVerifier",
    "best_first_tree",
    "greedy_walk",
    "match_walk",
    "sample_and_match",
    "tree_attention_mask",
    "tree_positions",
]


def _as_long_vector(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value, dtype=torch.long)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{name}: expected a 1-D integer tensor or a list of ints, got {type(value).__name__}") from err
        if value.ndim == 0:
            value = value.view(1)
    if value.dtype == torch.bool or value.is_floating_point() or value.is_complex():
        raise TypeError(f"{name}: expected an integer dtype, got {value.dtype}")
    if value.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D tensor [N], got shape {tuple(value.shape)}")
    return value.long()


@dataclass(frozen=True, eq=False)
class Tree:
    """A tree of draft tokens hanging under the root row, nodes in topological order.

    Attributes:
        tokens: ``[N]`` int64 token of each node.
        parents: ``[N]`` int64 parent node of each node, ``-1`` for a child of the root (the committed
            prefix's newest token); ``parents[i] < i``, so every parent comes before its children.
        scores: ``[N]`` optional float score of each node (:func:`best_first_tree` stores the summed
            draft log-prob of the node's path).
        depth: ``[N]`` int64, computed: 1 for children of the root, ``depth[parent] + 1`` below.
        max_depth: host int, the largest depth (0 for an empty tree).
        is_chain: host bool, every node's parent is the node before it (a single path).

    Siblings may repeat a token (wasteful but legal): the walks always follow the first such child.

    Example:
        >>> tree = Tree(tokens=[7, 8, 9], parents=[-1, -1, 0])   # root -> 7 -> 9, root -> 8
        >>> tree.depth.tolist(), tree.max_depth
        ([1, 1, 2], 2)
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    scores: torch.Tensor | None = None
    depth: torch.Tensor = field(init=False)
    max_depth: int = field(init=False)
    is_chain: bool = field(init=False)

    def __post_init__(self) -> None:
        tokens = _as_long_vector("tokens", self.tokens)
        parents = _as_long_vector("parents", self.parents)
        n = tokens.numel()
        if parents.numel() != n:
            raise ValueError(f"parents: expected the same length as tokens ({n}), got {parents.numel()}")
        if parents.device != tokens.device:
            raise ValueError(f"parents: expected the device of tokens ({tokens.device}), got {parents.device}")
        if n and int(tokens.min()) < 0:
            bad = int((tokens < 0).nonzero()[0, 0])
            raise ValueError(f"tokens: expected token ids >= 0, got tokens[{bad}] = {int(tokens[bad])}")
        if self.scores is not None:
            scores = self.scores
            if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
                got = getattr(scores, "dtype", type(scores).__name__)
                raise TypeError(f"scores: expected a float tensor [N] or None, got {got}")
            if tuple(scores.shape) != (n,):
                raise ValueError(f"scores: expected shape ({n},), got {tuple(scores.shape)}")
        # Parents are read on the host once: depth needs a walk in topological order anyway.
        depth: list[int] = []
        for i, p in enumerate(parents.tolist()):
            if not -1 <= p < n:
                raise ValueError(
                    f"parents[{i}] = {p} is out of range: expected -1 (child of the root) or a node index in [0, {n})"
                )
            if p >= i:
                raise ValueError(
                    f"parents[{i}] = {p}: a parent must come before its child (expected parents[i] < i, "
                    f"node {p} comes at or after node {i})"
                )
            depth.append(1 if p < 0 else depth[p] + 1)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "depth", torch.tensor(depth, dtype=torch.long, device=tokens.device))
        object.__setattr__(self, "max_depth", max(depth, default=0))
        object.__setattr__(self, "is_chain", max(depth, default=0) == n)

    # ----------------------------------------------------------------------------------------------
    @classmethod
    def chain(cls, tokens) -> Tree:
        """The tree of a single chain ``d_1, ..., d_k`` (``parents = [-1, 0, 1, ..., k-2]``).

        Example:
            >>> Tree.chain([4, 5, 6]).parents.tolist()
            [-1, 0, 1]
        """
        tokens = _as_long_vector("tokens", tokens)
        parents = torch.arange(-1, tokens.numel() - 1, device=tokens.device)
        return cls(tokens=tokens, parents=parents)

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]], *, device: torch.device | str | None = None) -> Tree:
        """Merge several continuations into a trie (shared prefixes share nodes).

        Nodes are numbered in first-seen order, so the first path is the spine ``0, 1, ...``.

        Example:
            >>> t = Tree.from_paths([[5, 6, 7], [5, 8], [9]])
            >>> t.tokens.tolist(), t.parents.tolist()
            ([5, 6, 7, 8, 9], [-1, 0, 1, 0, -1])
        """
        tokens: list[int] = []
        parents: list[int] = []
        index: dict[tuple[int, int], int] = {}
        for path in paths:
            node = -1
            for tok in path:
                tok = int(tok)
                child = index.get((node, tok))
                if child is None:
                    child = len(tokens)
                    index[(node, tok)] = child
                    tokens.append(tok)
                    parents.append(node)
                node = child
        return cls(
            tokens=torch.tensor(tokens, dtype=torch.long, device=device),
            parents=torch.tensor(parents, dtype=torch.long, device=device),
        )

    # ----------------------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return int(self.tokens.numel())

    def __len__(self) -> int:
        return self.num_nodes

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    @cached_property
    def ancestor_mask(self) -> torch.Tensor:
        """``[N + 1, N + 1]`` bool, cached: :func:`tree_attention_mask` of this tree."""
        return _ancestor_mask(self)

    def path(self, node: int) -> list[int]:
        """Node indices from the root's child down to ``node`` (inclusive).

        Example:
            >>> Tree(tokens=[7, 8, 9], parents=[-1, -1, 1]).path(2)
            [1, 2]
        """
        if not 0 <= node < self.num_nodes:
            raise ValueError(f"node: expected an index in [0, {self.num_nodes}), got {node}")
        parents = self.parents.tolist()
        out = []
        while node >= 0:
            out.append(node)
            node = parents[node]
        return out[::-1]

    def truncate(self, num_nodes: int) -> Tree:
        """The first ``num_nodes`` nodes (still a tree: parents come first).

        For a tree from :func:`best_first_tree` this is exactly the best ``num_nodes`` prefixes.
        """
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 0:
            raise ValueError(f"num_nodes: expected an int >= 0, got {num_nodes!r}")
        if num_nodes >= self.num_nodes:
            return self
        scores = None if self.scores is None else self.scores[:num_nodes]
        return Tree(tokens=self.tokens[:num_nodes], parents=self.parents[:num_nodes], scores=scores)

    def to(self, device: torch.device | str) -> Tree:
        if torch.device(device) == self.device:
            return self
        scores = None if self.scores is None else self.scores.to(device)
        return Tree(tokens=self.tokens.to(device), parents=self.parents.to(device), scores=scores)

    def check_fits(self, room: int, *, name: str = "tree") -> None:
        """Raise ``ValueError`` unless the verify rows ``[root] + nodes`` fit in ``room`` cache slots.

        A verify forward writes all ``N + 1`` rows (and reaches position ``prefix + max_depth``), so
        the binding limit is the row count; the message names both.
        """
        rows = self.num_nodes + 1
        if rows > room:
            raise ValueError(
                f"{name}: {self.num_nodes} nodes (depth {self.max_depth}) need {rows} cache rows with the root, "
                f"but only {room} are left; use a smaller budget or a longer max_seq_len"
            )

    def __repr__(self) -> str:
        return (
            f"Tree(num_nodes={self.num_nodes}, max_depth={self.max_depth}, "
            f"tokens={self.tokens.tolist()}, parents={self.parents.tolist()})"
        )


# --------------------------------------------------------------------------------------------------
# Tree construction: best-first (DDTree heap)
# --------------------------------------------------------------------------------------------------
def _check_budget(budget) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise TypeError(f"budget: expected an int >= 1, got {type(budget).__name__} {budget!r}")
    if budget < 1:
        raise ValueError(f"budget: expected an int >= 1 (number of tree nodes), got {budget}")
    return budget


def _check_logprobs(name: str, lp: torch.Tensor, ndim: int) -> None:
    if not isinstance(lp, torch.Tensor) or not lp.is_floating_point():
        raise TypeError(f"{name}: expected a float tensor of log-probs, got {getattr(lp, 'dtype', type(lp).__name__)}")
    if lp.ndim != ndim or lp.shape[-1] < 1 or (ndim == 2 and lp.shape[0] < 1):
        want = "[D, V] with D, V >= 1" if ndim == 2 else "[V] with V >= 1"
        raise ValueError(f"{name}: expected shape {want}, got {tuple(lp.shape)}")
    has_nan, has_positive = torch.stack([torch.isnan(lp).any(), (lp > 0).any()]).tolist()  # one host sync
    if has_nan:
        raise ValueError(f"{name}: contains NaN")
    if has_positive:
        raise ValueError(
            f"{name}: expected log-probabilities (<= 0), got a maximum of {float(lp.max())}; pass log_softmax(logits)"
        )


def _ranked(lp: torch.Tensor, k: int) -> tuple[list[float], list[int]]:
    """Top-``k`` of ``lp [..., V]`` as host lists (float64 values, token ids), ties by smaller id."""
    values, ids = torch.topk(lp, k, dim=-1)  # [..., k]
    kth = values[..., -1:]
    # topk's set is the true top-k unless ties straddle the k-th value; -inf ties never become nodes.
    exact = ((lp >= kth).sum(-1) == k) | torch.isneginf(kth[..., 0])  # [...]
    # topk does not promise an order among equal values: re-sort by id, then stably by value.
    ids = torch.sort(ids, dim=-1).values
    values, order = torch.sort(lp.gather(-1, ids), dim=-1, descending=True, stable=True)
    ids = ids.gather(-1, order)
    if not bool(exact.all()):
        full_values, full_ids = torch.sort(lp, dim=-1, descending=True, stable=True)
        values = torch.where(exact[..., None], values, full_values[..., :k])
        ids = torch.where(exact[..., None], ids, full_ids[..., :k])
    return values.double().cpu().tolist(), ids.cpu().tolist()


def best_first_tree(
    draft_logprobs: torch.Tensor | Callable[[torch.Tensor], torch.Tensor],
    budget: int,
    *,
    max_depth: int | None = None,
    top_k: int | None = None,
    device: torch.device | str | None = None,
) -> Tree:
    """The ``budget`` draft prefixes with the highest summed log-prob, as a :class:`Tree`.

    Every prefix ``(t_1, ..., t_d)`` of length ``1 <= d <= max_depth`` has the score
    ``lp_1(t_1) + ... + lp_d(t_d)`` (summed left to right in float64), where ``lp_j`` is row ``j - 1``
    of ``draft_logprobs`` (marginal per depth, DDTree) or, for a callable,
    ``draft_logprobs(tokens [j - 1])``: the child log-probs given the path so far (DFlash2's selector,
    DSpark's Markov head). Because log-probs are ``<= 0`` a prefix never outscores its parent, so the
    best ``budget`` prefixes are ancestor-closed. A heap finds them with ``budget`` pops: pop the best
    prefix, make it a node, push its next sibling (same parent, next rank) and its first child.

    Ties and order (deterministic): children of a node are ranked by log-prob, equal log-probs by
    smaller token id; prefixes are ordered by (higher score, smaller depth, lexicographically smaller
    rank tuple). Nodes come out in that order, which puts parents before children, so
    ``tree.truncate(n)`` is the best-``n`` tree. Prefixes of score ``-inf`` (impossible under the
    draft) are never added, so the tree can have fewer than ``budget`` nodes: a one-hot draft gives its
    chain.

    Args:
        draft_logprobs: ``[D, V]`` float log-probs per depth, or a callable ``path [d] int64 -> [V]``
            log-probs of the next token (called once per expanded node, ``path`` on the CPU).
        budget: number of nodes, ``>= 1``.
        max_depth: deepest node; default ``D`` (required for a callable).
        top_k: at most this many children per node (default: no limit beyond ``budget``).
        device: device of the returned tree; default the device of ``draft_logprobs`` (CPU for a
            callable).

    Returns:
        :class:`Tree` with ``scores`` = summed log-prob of each node's path (float64).

    Example:
        >>> lp = torch.tensor([[0.6, 0.3, 0.1], [0.7, 0.2, 0.1]]).log()
        >>> t = best_first_tree(lp, budget=4)       # paths 0 (.6), 0 0 (.42), 1 (.3), 1 0 (.21)
        >>> t.tokens.tolist(), t.parents.tolist()
        ([0, 0, 1, 0], [-1, 0, -1, 2])
    """
    budget = _check_budget(budget)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k: expected an int >= 1 or None, got {top_k!r}")
    width = budget if top_k is None else min(budget, top_k)

    if isinstance(draft_logprobs, torch.Tensor):
        _check_logprobs("draft_logprobs", draft_logprobs, ndim=2)
        rows = draft_logprobs.shape[0]
        if max_depth is None:
            max_depth = rows
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or not 1 <= max_depth <= rows:
            raise ValueError(f"max_depth: expected an int in [1, {rows}] (rows of draft_logprobs), got {max_depth!r}")
        # [max_depth, K] on the host: one transfer for the whole heap
        depth_values, depth_ids = _ranked(draft_logprobs[:max_depth], min(width, draft_logprobs.shape[1]))
        device = draft_logprobs.device if device is None else device

        def children(node: int, depth: int, path: list[int]) -> tuple[list[float], list[int]]:
            return depth_values[depth], depth_ids[depth]

    elif callable(draft_logprobs):
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
            raise ValueError(f"max_depth: expected an int >= 1 (required with a callable draft_logprobs), got {max_depth!r}")
        fn = draft_logprobs
        device = "cpu" if device is None else device

        def children(node: int, depth: int, path: list[int]) -> tuple[list[float], list[int]]:
            lp = fn(torch.tensor(path, dtype=torch.long))
            _check_logprobs(f"draft_logprobs(path of length {len(path)})", lp, ndim=1)
            return _ranked(lp, min(width, lp.shape[0]))

    else:
        raise TypeError(f"draft_logprobs: expected a float tensor [D, V] or a callable, got {type(draft_logprobs).__name__}")

    tokens: list[int] = []
    parents: list[int] = []
    scores: list[float] = []
    paths: list[list[int]] = []
    # table[u] = ranked children of node u (u = -1: the root), filled when u is expanded
    table: dict[int, tuple[list[float], list[int]]] = {-1: children(-1, 0, [])}
    # heap entry: (-score, depth, rank tuple, parent node, parent score); the first three are unique
    values, _ = table[-1]
    heap = [(-(0.0 + values[0]), 1, (0,), -1, 0.0)]
    while heap and len(tokens) < budget:
        neg_score, depth, ranks, parent, parent_score = heapq.heappop(heap)
        score = -neg_score
        if score == -math.inf:
            break
        values, ids = table[parent]
        rank = ranks[-1]
        node = len(tokens)
        path = (paths[parent] if parent >= 0 else []) + [ids[rank]]
        tokens.append(ids[rank])
        parents.append(parent)
        scores.append(score)
        paths.append(path)
        if rank + 1 < len(values):
            heapq.heappush(heap, (-(parent_score + values[rank + 1]), depth, ranks[:-1] + (rank + 1,), parent, parent_score))
        if depth < max_depth and len(tokens) < budget:
            table[node] = children(node, depth, path)
            child_values, _ = table[node]
            heapq.heappush(heap, (-(score + child_values[0]), depth + 1, ranks + (0,), node, score))
    return Tree(
        tokens=torch.tensor(tokens, dtype=torch.long, device=device),
        parents=torch.tensor(parents, dtype=torch.long, device=device),
        scores=torch.tensor(scores, dtype=torch.float64, device=device),
    )


# --------------------------------------------------------------------------------------------------
# Mask, positions, walks
# --------------------------------------------------------------------------------------------------
def _ancestor_mask(tree: Tree) -> torch.Tensor:
    rows = tree.num_nodes + 1
    device = tree.device
    # parent row of every row; the root row points at itself so repeated jumps stay put
    jump = torch.cat([torch.zeros(1, dtype=torch.long, device=device), tree.parents + 1])  # [N + 1]
    mask = torch.eye(rows, dtype=torch.bool, device=device)  # [N + 1, N + 1]
    # Pointer doubling: after r rounds every row holds its ancestors up to 2^r - 1 hops away.
    reach = 0
    while reach < tree.max_depth:
        mask = mask | mask[jump]
        jump = jump[jump]
        reach = 2 * reach + 1
    return mask


def tree_attention_mask(tree: Tree) -> torch.Tensor:
    """``[N + 1, N + 1]`` bool over the verify rows ``[root, node_0, ...]``: ancestors-or-self.

    Row ``r`` may attend row ``c`` iff ``c`` is ``r`` or one of its ancestors (the root row 0 is an
    ancestor of every node). The committed prefix is not part of this matrix: it is visible to every
    row (the target adds it). See :class:`TreeVerifier` for a drawing.

    Example:
        >>> tree_attention_mask(Tree(tokens=[7, 8, 9], parents=[-1, -1, 0])).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [1, 0, 1, 0],
                [1, 1, 0, 1]], dtype=torch.int32)
    """
    if not isinstance(tree, Tree):
        raise TypeError(f"tree: expected a Tree, got {type(tree).__name__}")
    return _ancestor_mask(tree)


def tree_positions(tree: Tree, prefix_len: int) -> torch.Tensor:
    """``[N + 1]`` int64 RoPE positions of the verify rows: ``prefix_len + depth`` (root depth 0).

    Positions follow depth, not the flattened row index: siblings share a position.

    Example:
        >>> tree_positions(Tree(tokens=[7, 8, 9], parents=[-1, -1, 0]), prefix_len=10).tolist()
        [10, 11, 11, 12]
    """
    if not isinstance(tree, Tree):
        raise TypeError(f"tree: expected a Tree, got {type(tree).__name__}")
    if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 0:
        raise ValueError(f"prefix_len: expected an int >= 0, got {prefix_len!r}")
    zero = torch.zeros(1, dtype=torch.long, device=tree.device)
    return prefix_len + torch.cat([zero, tree.depth])


@dataclass
class TreeWalk:
    """The accepted root path of a tree and the emitted tokens.

    Attributes:
        rows: ``[n + 1]`` int64 ascending verify rows of the accepted path, root row 0 first (what
            ``target.commit`` keeps).
        emitted: ``[n + 1]`` int64: the ``n`` accepted node tokens, then the bonus token.
        num_accepted: ``n`` as a host int.
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


# --------------------------------------------------------------------------------------------------
# The verifier
# --------------------------------------------------------------------------------------------------
def _takes_tree_parents(target) -> bool:
    """Whether ``target.forward`` accepts ``tree_parents=`` (hybrid targets with recurrent state do)."""
    return _class_takes_tree_parents(type(target))


@functools.lru_cache(maxsize=None)
def _class_takes_tree_parents(cls: type) -> bool:
    # once per target class, not per verify step
    import inspect

    try:
        return "tree_parents" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return False


class TreeVerifier:
    """Verify a tree of draft continuations with one target forward.

    The verify rows are ``[root, node_0, ..., node_{N-1}]`` (node ``i`` = row ``i + 1``). Example tree
    (tokens a..e, ``parents = [-1, -1, 0, 1, 1]``) after a committed prefix ``p0..p{L-1}``::

        p0 .. p{L-1} ── r ─┬─ a ── c                 row:   r  a  b  c  d  e
                           └─ b ─┬─ d                depth: 0  1  1  2  2  2
                                 └─ e                position = L + depth

        attention mask (1 = may attend; the committed prefix is visible to every row):

                  p0 .. p{L-1} │ r  a  b  c  d  e
              r    1  ..  1    │ 1  .  .  .  .  .
              a    1  ..  1    │ 1  1  .  .  .  .
              b    1  ..  1    │ 1  .  1  .  .  .
              c    1  ..  1    │ 1  1  .  1  .  .
              d    1  ..  1    │ 1  .  1  .  1  .
              e    1  ..  1    │ 1  .  1  .  .  1

    Row ``x``'s logits predict the token after the path ``r .. x``. Greedy: follow the child equal to
    the argmax of the current row, and emit the argmax of the last matched row as the bonus token.
    Sampling: :func:`sample_and_match`. The accepted rows' K/V are compacted to the front of the
    verify window (``target.commit(rows)``); the bonus token becomes the next root.

    Where the tree comes from, in this order:

    1. ``proposal.tree`` (a :class:`Tree`), if the proposal carries one;
    2. ``proposal.tree_logprobs [k, V]`` (per-depth draft log-probs, if the proposal carries them) or
       else ``log(proposal.draft_probs)``: ``best_first_tree(..., min(budget, room - 1))``;
    3. otherwise the chain of ``proposal.tokens``.

    A chain-shaped tree runs exactly the chain verify forward, so with a chain the greedy output is
    identical to :class:`~specdec.verify.chain.ChainVerifier`'s and the sampled output has the same law.

    Args:
        budget: most nodes in a tree built here (capped by the cache room).
        top_k: at most this many children per node in a tree built here.

    Example:
        >>> from specdec.testing import tiny_target
        >>> from specdec.drafters.base import DraftProposal
        >>> target = tiny_target(seed=0)
        >>> _ = target(torch.tensor([[1, 2]])); target.commit(2)      # prefill all but the root
        >>> probs = torch.softmax(torch.randn(3, target.vocab_size, generator=torch.Generator().manual_seed(0)), -1)
        >>> result = TreeVerifier(budget=8).verify(target, torch.tensor([3]), DraftProposal(probs.argmax(-1), probs),
        ...                                        sampling=SamplingConfig(), generator=None)
        >>> result.emitted.shape[0] == result.num_accepted + 1
        True
    """

    def __init__(self, budget: int = 64, *, top_k: int | None = None):
        self.budget = _check_budget(budget)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k: expected an int >= 1 or None, got {top_k!r}")
        self.top_k = top_k
        self.last_tree: Tree | None = None

    def build_tree(self, proposal, *, room: int) -> Tree:
        """The tree this verifier checks for ``proposal``, with at most ``room - 1`` nodes."""
        given = getattr(proposal, "tree", None)
        if given is not None:
            if not isinstance(given, Tree):
                raise TypeError(f"proposal.tree: expected a Tree, got {type(given).__name__}")
            given.check_fits(room, name="proposal.tree")
            return given
        tokens = proposal.tokens
        scores = getattr(proposal, "tree_logprobs", None)
        if scores is None and proposal.draft_probs is not None:
            # probabilities are <= 1; clamp the rounding of renormalised laws so their logs stay <= 0
            scores = proposal.draft_probs.float().clamp(max=1.0).log()
        if scores is None or tokens.numel() == 0:
            tree = Tree.chain(tokens)
            tree.check_fits(room, name="proposal.tokens")
            return tree
        budget = min(self.budget, room - 1)
        if budget < 1:
            return Tree.chain(tokens[:0])
        return best_first_tree(scores, budget, top_k=self.top_k)

    def verify(
        self,
        target,
        root: torch.Tensor,
        proposal,
        *,
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
        hidden_layers: Sequence[int] = (),
    ):
        device = target.device
        tree = self.build_tree(proposal, room=target.room()).to(device)
        self.last_tree = tree
        vocab = target.vocab_size
        if tree.num_nodes and int(tree.tokens.max()) >= vocab:
            raise ValueError(f"tree tokens: expected ids < vocab_size {vocab}, got {int(tree.tokens.max())}")
        rows = torch.cat([root.view(1).to(device), tree.tokens])[None]  # [1, N + 1]
        if tree.is_chain:
            # Default positions and causal mask: the same forward as ChainVerifier, bit for bit.
            out = target(rows, hidden_layers=hidden_layers)
        else:
            positions = tree_positions(tree, target.length)[None]  # [1, N + 1]
            extra = {}
            if _takes_tree_parents(target):
                # recurrent (GDN) layers follow each row's path: parent row of every verify row,
                # the root row hanging below the committed prefix (-1), node i at row i + 1
                extra["tree_parents"] = torch.cat([tree.parents.new_full((1,), -1), tree.parents + 1])
            out = target(rows, positions, tree.ancestor_mask, hidden_layers=hidden_layers, **extra)
        logits = out.logits[0]  # [N + 1, V]
        if sampling.greedy:
            walk = greedy_walk(tree, logits)
        else:
            walk = sample_and_match(tree, logits_to_probs(logits, sampling), generator=generator)
        if tree.is_chain:
            target.commit(walk.num_accepted + 1)
        else:
            target.commit(walk.rows)
        hidden = None
        if hidden_layers:
            kept = torch.arange(walk.num_accepted + 1, device=device) if tree.is_chain else walk.rows.to(device)
            hidden = torch.stack([h[0] for h in out.hidden], dim=1)[kept]  # [n + 1, taps, H]
        return VerifyResult(emitted=walk.emitted, num_accepted=walk.num_accepted, hidden=hidden)
