"""Per-request draft lengths within a batch's budget, shared in proportion to redundancy."""

from __future__ import annotations

import math
from collections.abc import Sequence


class BudgetAllocator:
    """AgentSpec's allocation: ``B_t = floor(alpha / bz)``, ``L_i = max(|CT*_i|, floor(B_t * g_i / sum_j g_j))``.

    ``B_t`` is read as printed: the budget of the whole batch of ``bz`` requests, which shrinks as the
    batch grows (the verifier's spare compute ``M(b) = AI - b`` shrinks with it). Every request may
    draft at least its agreed prefix ``CT*``; the rest of the budget goes in proportion to the
    redundancy scores ``g``. Shares are floored, so the proportional part never exceeds ``B_t``
    (the ``CT*`` floors may). All scores zero: each request drafts its ``|CT*|``.

    A request decoded alone (as :func:`specdec.generate` decodes) is a batch of one: its share is
    the whole ``alpha`` whenever its score is positive.

    Args:
        alpha: the global budget knob (tokens), ``>= 0``.

    Example:
        >>> allocator = BudgetAllocator(alpha=24)
        >>> allocator.allocate([0.9, 0.3, 0.0], [2, 5, 0])   # B_t = 8: shares 6, 2, 0
        [6, 5, 0]
        >>> allocator.allocate([0.5], [1])
        [24]
    """

    def __init__(self, alpha: int = 32):
        if isinstance(alpha, bool) or not isinstance(alpha, int) or alpha < 0:
            raise ValueError(f"alpha: expected an int >= 0, got {alpha!r}")
        self.alpha = alpha

    def batch_budget(self, batch_size: int) -> int:
        """``B_t = floor(alpha / bz)``.

        Example:
            >>> BudgetAllocator(alpha=10).batch_budget(3)
            3
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r}")
        return self.alpha // batch_size

    def allocate(self, scores: Sequence[float], confident_lengths: Sequence[int]) -> list[int]:
        """Draft lengths ``L_i`` for a batch with redundancy ``scores`` ``[bz]`` and ``|CT*|`` ``[bz]``.

        Example:
            >>> BudgetAllocator(alpha=8).allocate([0.0, 0.0], [3, 0])
            [3, 0]
        """
        if len(scores) != len(confident_lengths):
            raise ValueError(f"confident_lengths: expected one per score ({len(scores)}), got {len(confident_lengths)}")
        if not scores:
            return []
        for i, g in enumerate(scores):
            if isinstance(g, bool) or not (isinstance(g, (int, float)) and math.isfinite(g) and g >= 0):
                raise ValueError(f"scores[{i}]: expected a finite number >= 0, got {g!r}")
        for i, ct in enumerate(confident_lengths):
            if isinstance(ct, bool) or not isinstance(ct, int) or ct < 0:
                raise ValueError(f"confident_lengths[{i}]: expected an int >= 0, got {ct!r}")
        budget = self.batch_budget(len(scores))
        total = float(sum(scores))
        if total == 0.0:
            return list(confident_lengths)
        return [max(ct, math.floor(budget * g / total)) for g, ct in zip(scores, confident_lengths)]
