"""How much the retrieved continuations agree: AgentSpec's redundancy score g(c, n) and the agreed prefix CT*."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Redundancy:
    """What :meth:`RedundancyScorer.score` reads off a set of candidate continuations.

    Attributes:
        path: the majority continuation: at each depth the most frequent next token among the
            candidates that agree with the path so far (ties: the most recent candidate's token).
        support: ``support[d]`` = candidates that agree with ``path[: d + 1]``.
        num_candidates: ``n``, the candidates retrieved.
        agreeing: ``c``, the candidates that agree on the path's first token.
        confident_length: ``|CT*|``, the length of the prefix on which all ``c`` agreeing candidates
            agree, when at least two agree (one candidate never corroborates itself); else 0.
        score: ``g(c, n)``.
    """

    path: tuple[int, ...]
    support: tuple[int, ...]
    num_candidates: int
    agreeing: int
    confident_length: int
    score: float


class RedundancyScorer:
    """``g(c, n) = (c / n) * p(n)``, ``p(n) = g_min + (1 - g_min) * (1 - exp(1 - n))``, ``g = 0`` when ``n = 0``.

    The paper prints ``p(n)`` twice, differently: Eq. 1 with ``exp(1 - n)`` and Algorithm 2 with
    ``exp(-n)``. This follows Eq. 1: with it a single retrieved continuation (``n = 1``) scores
    exactly the floor ``g_min``, which is what ``g_min`` is described as (the confidence given at the
    lowest support); with Algorithm 2's form ``p(1) = g_min + (1 - g_min)(1 - 1/e) ≈ 0.63`` for any
    ``g_min``, so the floor is never reached and ``g_min`` barely matters. Both agree that support
    saturates: ``p(n) -> 1`` as ``n`` grows.

    Args:
        g_min: the floor in ``[0, 1]``.

    Example:
        >>> scorer = RedundancyScorer(g_min=0.2)
        >>> scorer.support_weight(1), round(scorer.support_weight(3), 4)
        (0.2, 0.8917)
        >>> r = scorer.score([[4, 5, 6], [4, 5, 9], [7]])
        >>> r.path, r.support, r.agreeing, r.confident_length, round(r.score, 4)
        ((4, 5, 6), (2, 2, 1), 2, 2, 0.5945)
    """

    def __init__(self, g_min: float = 0.2):
        if not isinstance(g_min, (int, float)) or isinstance(g_min, bool) or not 0.0 <= g_min <= 1.0:
            raise ValueError(f"g_min: expected a number in [0, 1], got {g_min!r}")
        self.g_min = float(g_min)

    def support_weight(self, num_candidates: int) -> float:
        """``p(n)`` (Eq. 1); ``0`` for ``n = 0``."""
        if num_candidates < 0:
            raise ValueError(f"num_candidates: expected >= 0, got {num_candidates}")
        if num_candidates == 0:
            return 0.0
        return self.g_min + (1.0 - self.g_min) * (1.0 - math.exp(1 - num_candidates))

    def score(self, candidates: Sequence[Sequence[int]]) -> Redundancy:
        """Score candidate continuations (most recent first; empty ones are not candidates).

        Example:
            >>> RedundancyScorer().score([]).score
            0.0
        """
        alive = [list(c) for c in candidates if len(c)]
        n = len(alive)
        path: list[int] = []
        support: list[int] = []
        depth = 0
        while alive:
            counts: dict[int, int] = {}
            for cand in alive:
                if len(cand) > depth:
                    counts[cand[depth]] = counts.get(cand[depth], 0) + 1
            if not counts:
                break
            # dicts keep insertion order, so among equal counts the most recent candidate's token wins
            token = max(counts, key=counts.__getitem__)
            path.append(token)
            support.append(counts[token])
            alive = [cand for cand in alive if len(cand) > depth and cand[depth] == token]
            depth += 1
        agreeing = support[0] if support else 0
        confident = 0
        if agreeing >= 2:
            while confident < len(support) and support[confident] == agreeing:
                confident += 1
        score = (agreeing / n) * self.support_weight(n) if n else 0.0
        return Redundancy(tuple(path), tuple(support), n, agreeing, confident, score)
