"""Best-first draft trees (the DDTree heap): the ``budget`` most likely draft prefixes."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import torch

from specdec.contracts.tree import Tree


def _check_budget(budget, *, name: str = "budget") -> int:
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise TypeError(f"{name}: expected an int >= 1, got {type(budget).__name__} {budget!r}")
    if budget < 1:
        raise ValueError(f"{name}: expected an int >= 1 (number of tree nodes), got {budget}")
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
