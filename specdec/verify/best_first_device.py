"""Best-first draft trees from per-depth log-probs, built with fixed-shape tensor ops on the device.

:func:`best_first_tree_device` returns the same tree as :func:`~specdec.verify.best_first.best_first_tree`
for a ``[D, V]`` tensor (same tokens, parents, float64 scores and node order), without a host sync and
with output shapes that depend only on ``budget``, so it can run inside a captured CUDA graph.

Method (``B = budget``, ``K = min(B, V, top_k)`` ranked children per depth):

1. Rank each depth's children by (log-prob desc, token id asc) with one ``topk`` over unique int64 keys
   (the float's order-preserving bits above, ``V - 1 - id`` below), so ties never depend on ``topk``.
2. Beam per depth: ``C_1`` = the ``K`` depth-1 prefixes (padded to ``B`` with ``-inf``); ``C_{d+1}`` = the
   best ``B`` of the ``B * K`` extensions of ``C_d`` by (score desc, rank tuple asc). ``C_d`` is kept in
   rank-tuple (lexicographic) order, so the extension ``(C_d[i], r)`` sits at flat index ``i * K + r`` and
   that index *is* its lexicographic position: a stable descending sort on the scores then breaks ties
   exactly by the rank tuple.
3. Union of all ``C_d`` laid out ``[D, B]`` (flat index = (depth, lexicographic position)), one stable
   descending sort on the scores: the global order (score desc, depth asc, rank tuple asc). The first
   ``B`` entries with a finite score are the nodes.

Why it is exact, ties and rounding included. Let ``G`` be the first ``B`` finite prefixes in the global
order ``<`` (score desc, depth asc, rank tuple asc): the host heap's output. Scores are float64 sums
``s(q, r) = fl(s(q) + lp(r))`` with ``lp <= 0``; rounding is monotone, so ``s(q, r) <= s(q)``, and a parent
``q`` precedes its child ``(q, r)`` in ``<`` (score not lower; if equal, depth smaller). Hence ``G`` is
ancestor-closed. Claim: ``G_d`` (the depth-``d`` prefixes of ``G``) is a subset of ``C_d`` for every ``d``.
``d = 1``: ``C_1`` holds every depth-1 prefix (``K <= B``). ``d -> d + 1``: take ``p = (q, r)`` in
``G_{d+1}``. Its parent ``q`` is in ``G_d`` (ancestor-closed), so in ``C_d`` by induction, so ``p`` is one
of the ``B * K`` extensions. Every extension ranked before ``p`` by (score desc, rank tuple asc) has
``p``'s depth, so it also precedes ``p`` in ``<``; as ``p`` is among the first ``B`` in ``<``, at most
``B - 1`` prefixes precede it, and the per-depth selection keeps ``p``. So every prefix of ``G`` lies in
the union, the union holds only true prefixes (distinct, with the exact scores), and the first ``B``
entries of the union in ``<`` are ``G``, followed by ``-inf`` entries when fewer than ``B`` prefixes are
finite. Nothing here compares two floats beyond ``>=`` and equality of the same float64 sums the heap
forms, so ties come out identically.
"""

from __future__ import annotations

import torch

from specdec.verify.best_first import _check_budget, _check_logprobs

__all__ = ["best_first_tree_device"]

_INT32_MAGNITUDE = 0x7FFFFFFF


def _ranked_children(lp: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` of ``lp [D, V]``: float64 values and int64 ids ``[D, k]``, ties by smaller id."""
    lp = lp + 0.0  # -0.0 -> +0.0: equal log-probs must get equal keys
    vocab = lp.shape[-1]
    if lp.dtype == torch.float64:
        values, ids = torch.sort(lp, dim=-1, descending=True, stable=True)
        return values[:, :k], ids[:, :k]
    bits = lp.float().view(torch.int32)
    # signed-int order of these keys = float order (negative floats: magnitude bits flipped)
    ordered = torch.where(bits < 0, bits ^ _INT32_MAGNITUDE, bits).long()
    reversed_ids = torch.arange(vocab - 1, -1, -1, device=lp.device)  # [V]: larger for a smaller id
    keys = ordered * (1 << 32) + reversed_ids  # [D, V], unique per row
    top = torch.topk(keys, k, dim=-1).values  # [D, k], descending
    ids = vocab - 1 - (top & 0xFFFFFFFF)
    return lp.gather(-1, ids).double(), ids


def _first_by_score(scores: torch.Tensor, count: int) -> torch.Tensor:
    """Indices of the ``count`` highest of ``scores [N]``, equal scores by smaller index."""
    return torch.sort(scores, descending=True, stable=True).indices[:count]


def best_first_tree_device(
    draft_logprobs: torch.Tensor, budget: int, *, top_k: int | None = None, check_values: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`~specdec.verify.best_first.best_first_tree` for a ``[D, V]`` tensor, as padded device tensors.

    The ``budget`` draft prefixes of highest summed log-prob (float64, summed left to right), ordered by
    (higher score, smaller depth, lexicographically smaller rank tuple), children ranked by log-prob then
    smaller token id, ``-inf`` prefixes left out, at most ``top_k`` children per node: the same nodes in
    the same order as ``best_first_tree(draft_logprobs, budget, top_k=top_k)``. Only tensor ops of fixed
    shapes on ``draft_logprobs.device``: no host sync, so it can be captured in a CUDA graph. The module
    docstring proves that the per-depth beam it uses is exact.

    Args:
        draft_logprobs: ``[D, V]`` float log-probs (``<= 0``, no NaN) of the draft token at each depth.
        budget: number of output slots, ``>= 1``.
        top_k: at most this many children per node (default: no limit beyond ``budget``).
        check_values: raise on NaN or positive entries as ``best_first_tree`` does; this reads a flag back
            to the host, so leave it off inside a CUDA graph (the values are then trusted).

    Returns:
        ``(tokens [budget] int64, parents [budget] int64, scores [budget] float64, num_nodes [] int64)``, on
        the device of ``draft_logprobs``. Slots ``>= num_nodes`` are padding: token ``0``, parent ``-1``,
        score ``-inf``. ``Tree(tokens[:n], parents[:n], scores[:n])`` with ``n = int(num_nodes)`` is the
        host function's tree.

    Example:
        >>> lp = torch.tensor([[0.6, 0.3, 0.1], [0.7, 0.2, 0.1]]).log()
        >>> tokens, parents, scores, num_nodes = best_first_tree_device(lp, 4)
        >>> tokens.tolist(), parents.tolist(), int(num_nodes)
        ([0, 0, 1, 0], [-1, 0, -1, 2], 4)
        >>> one_hot = torch.tensor([[0.0, float("-inf")], [float("-inf"), 0.0]])
        >>> tokens, parents, scores, num_nodes = best_first_tree_device(one_hot, 3)
        >>> tokens.tolist(), parents.tolist(), scores.tolist(), int(num_nodes)
        ([0, 1, 0], [-1, 0, -1], [0.0, 0.0, -inf], 2)
    """
    budget = _check_budget(budget)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k: expected an int >= 1 or None, got {top_k!r}")
    if not isinstance(draft_logprobs, torch.Tensor) or not draft_logprobs.is_floating_point():
        got = getattr(draft_logprobs, "dtype", type(draft_logprobs).__name__)
        raise TypeError(f"draft_logprobs: expected a float tensor of log-probs [D, V], got {got}")
    if draft_logprobs.ndim != 2 or 0 in draft_logprobs.shape:
        raise ValueError(f"draft_logprobs: expected shape [D, V] with D, V >= 1, got {tuple(draft_logprobs.shape)}")
    if check_values:
        _check_logprobs("draft_logprobs", draft_logprobs, ndim=2)
    depths, vocab = draft_logprobs.shape
    device = draft_logprobs.device
    k = min(budget, vocab, budget if top_k is None else top_k)
    values, ids = _ranked_children(draft_logprobs, k)  # [D, k] float64, [D, k] int64
    pad = budget - k

    # C_1 in rank order (its lexicographic order), padded with -inf slots
    score = torch.cat([values[0], values.new_full((pad,), float("-inf"))])  # [B]
    rank = torch.cat([torch.arange(k, device=device), torch.zeros(pad, dtype=torch.long, device=device)])  # [B]
    parent = torch.full((budget,), -1, dtype=torch.long, device=device)  # [B] lexicographic position in C_{d-1}
    level_scores, level_ranks, level_parents = [score], [rank], [parent]
    for depth in range(1, depths):
        extensions = (score[:, None] + values[depth][None, :]).reshape(-1)  # [B * k], index = lexicographic position
        kept = _first_by_score(extensions, budget).sort().values  # [B], back in lexicographic order
        score = extensions[kept]
        level_scores.append(score)
        level_ranks.append(kept % k)
        level_parents.append(kept // k)
    all_scores = torch.stack(level_scores).reshape(-1)  # [D * B], index = depth * B + lexicographic position
    all_ranks = torch.stack(level_ranks).reshape(-1)
    all_parents = torch.stack(level_parents).reshape(-1)

    order = _first_by_score(all_scores, budget)  # [B] union entries in node order
    node_of_entry = torch.full((depths * budget,), -1, dtype=torch.long, device=device)
    node_of_entry.scatter_(0, order, torch.arange(budget, device=device))  # [D * B]: node of each entry, or -1
    scores = all_scores[order]  # [B] float64
    is_node = scores > float("-inf")
    depth_index = order // budget  # [B], 0 for children of the root
    tokens = ids[depth_index, all_ranks[order]]
    parent_entry = ((depth_index - 1) * budget + all_parents[order]).clamp(min=0)
    parents = torch.where(depth_index > 0, node_of_entry[parent_entry], -1)
    tokens = torch.where(is_node, tokens, 0)
    parents = torch.where(is_node, parents, -1)
    return tokens, parents, scores, is_node.sum()
