"""The cost model: ``speedup = tau * t_AR / t_round`` and each stage's gap to its ceiling as lost speedup.

Single request: ``t_round = t_draft + t_verify + t_commit + t_other``; a stage's gap is the speedup gained
if that stage alone ran at its ceiling, the acceptance gap the speedup gained if ``tau`` reached its
ceiling. Batched: the verify time comes from a step-time table ``T(n)`` of the target's forward over ``n``
total verify tokens, so ``throughput = sum_r tau_r / (t_draft + T(sum_r (k_r + 1)))`` against AR's
``B / T(B)``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from specdec.pilot.profile import STAGES, RoundProfile

__all__ = ["Gap", "StepTimeTable", "batched_speedup", "gaps", "speedup"]

ACCEPTANCE = "acceptance"
"""The gap name of ``tau``'s distance to its ceiling."""


def speedup(tau: float, t_ar: float, t_round: float) -> float:
    """``tau * t_ar / t_round``: tokens per second over AR's.

    Example:
        >>> speedup(3.0, 2.0, 4.0)
        1.5
    """
    if not t_round > 0:
        raise ValueError(f"t_round: expected seconds > 0, got {t_round!r}")
    return tau * t_ar / t_round


@dataclass(frozen=True)
class Gap:
    """One stage's distance to its ceiling.

    Attributes:
        stage: a stage of :data:`specdec.pilot.profile.STAGES`, or ``"acceptance"``.
        measured, ceiling: seconds per round (tokens per round for ``acceptance``).
        lost_speedup: speedup at the ceiling (this stage alone) minus the current speedup.
    """

    stage: str
    measured: float
    ceiling: float
    lost_speedup: float


def gaps(profile: RoundProfile) -> list[Gap]:
    """Every stage's gap and the acceptance gap, largest lost speedup first.

    Example:
        >>> from specdec.pilot.profile import Ceilings
        >>> p = RoundProfile(stages={"draft": 1.0, "verify": 2.0, "commit": 0.0, "other": 1.0}, tau=2.0, t_ar=2.0,
        ...                  ceilings=Ceilings(stages={"draft": 0.0, "verify": 1.0, "commit": 0.0, "other": 0.0}, tau=4.0, bandwidth=1.0))
        >>> [(g.stage, round(g.lost_speedup, 3)) for g in gaps(p)]
        [('acceptance', 1.0), ('draft', 0.333), ('verify', 0.333), ('other', 0.333), ('commit', 0.0)]
    """
    if profile.ceilings is None:
        raise ValueError("profile: expected measured ceilings (profile.ceilings), got None")
    ceil = profile.ceilings
    now = speedup(profile.tau, profile.t_ar, profile.t_round)
    out = []
    for stage in STAGES:
        measured, floor = profile.stages[stage], min(ceil.stages[stage], profile.stages[stage])
        better = profile.t_round - measured + floor
        lost = speedup(profile.tau, profile.t_ar, better) - now if better > 0 else float("inf")
        out.append(Gap(stage, measured, ceil.stages[stage], lost))
    tau_ceiling = max(ceil.tau, profile.tau)
    out.append(Gap(ACCEPTANCE, profile.tau, ceil.tau, speedup(tau_ceiling, profile.t_ar, profile.t_round) - now))
    order = {name: i for i, name in enumerate((ACCEPTANCE, *STAGES))}
    return sorted(out, key=lambda g: (-round(g.lost_speedup, 12), order[g.stage]))


class StepTimeTable:
    """``T(n)``: seconds of one target step over ``n`` total verify tokens, linear between measured points.

    Args:
        tokens: strictly increasing token counts ``>= 1``.
        seconds: the step time at each count (``> 0``).

    Example:
        >>> table = StepTimeTable([1, 8, 64], [1.0, 1.2, 4.0])
        >>> table(1), table(4), table(64)
        (1.0, 1.0857142857142856, 4.0)
    """

    def __init__(self, tokens: Sequence[int], seconds: Sequence[float]):
        tokens, seconds = list(tokens), [float(s) for s in seconds]
        if not tokens or len(tokens) != len(seconds):
            raise ValueError(f"tokens, seconds: expected equal non-empty lengths, got {len(tokens)} and {len(seconds)}")
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in tokens) or tokens != sorted(set(tokens)):
            raise ValueError(f"tokens: expected strictly increasing ints >= 1, got {tokens}")
        if any(not s > 0 for s in seconds):
            raise ValueError(f"seconds: expected step times > 0, got {seconds}")
        self.tokens, self.seconds = tokens, seconds

    def __call__(self, n: int) -> float:
        if n < self.tokens[0] or n > self.tokens[-1]:
            raise ValueError(f"n: expected {self.tokens[0]} <= n <= {self.tokens[-1]} (the measured range), got {n}")
        i = bisect.bisect_left(self.tokens, n)
        if self.tokens[i] == n:
            return self.seconds[i]
        n0, n1, s0, s1 = self.tokens[i - 1], self.tokens[i], self.seconds[i - 1], self.seconds[i]
        return s0 + (s1 - s0) * (n - n0) / (n1 - n0)


def batched_speedup(taus: Sequence[float], proposal_lengths: Sequence[int], table: StepTimeTable, t_draft: float = 0.0) -> float:
    """Batched throughput over AR's: ``(sum tau_r / (t_draft + T(sum (k_r + 1)))) / (B / T(B))``.

    Args:
        taus: tokens per round of each request.
        proposal_lengths: drafts ``k_r`` each request verifies per round.
        table: the :class:`StepTimeTable` of the target.
        t_draft: seconds of the batched drafter per round.

    Example:
        >>> table = StepTimeTable([1, 2, 4, 8], [1.0, 1.0, 1.0, 2.0])
        >>> batched_speedup([3.0, 3.0], [3, 3], table)  # 6 tokens per 2.0 s step vs AR's 2 per 1.0 s
        1.5
    """
    taus, lengths = list(taus), list(proposal_lengths)
    if not taus or len(taus) != len(lengths):
        raise ValueError(f"taus, proposal_lengths: expected equal non-empty lengths, got {len(taus)} and {len(lengths)}")
    if any(not t >= 1 for t in taus):
        raise ValueError(f"taus: expected tokens per round >= 1, got {taus}")
    if any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in lengths):
        raise ValueError(f"proposal_lengths: expected ints >= 0, got {lengths}")
    if not t_draft >= 0:
        raise ValueError(f"t_draft: expected seconds >= 0, got {t_draft!r}")
    batch = len(taus)
    spec_throughput = sum(taus) / (t_draft + table(sum(k + 1 for k in lengths)))
    ar_throughput = batch / table(batch)
    return spec_throughput / ar_throughput
