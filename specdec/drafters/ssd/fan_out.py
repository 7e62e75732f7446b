"""Fan-out policies: how many bonus-token guesses to cache at each acceptance length.

With ``K`` drafts there are ``K + 1`` positions where a round can end (``k = 0..K`` accepted). A
budget of ``B`` pre-drafted continuations is split into ``F_0..F_K`` (``sum F_k = B``); position ``k``
caches the ``F_k`` likeliest bonus tokens.

* :func:`uniform_fan_out`: the same number everywhere.
* :func:`geometric_fan_out`: the capped geometric allocation that minimises the expected miss rate
  when a round reaches position ``k`` with probability ``~a^k`` and the miss rate at a position falls
  as a power law ``F^-r`` (Kumar, Dao and May, Speculative Speculative Decoding, 2026)::

      F_k ~ a^(k / (1 + r))                         for k < K
      F_K ~ a^(K / (1 + r)) * (1 - a)^(-1 / (1 + r))  (the all-accepted position is boosted)

Both round with the largest-remainder rule under per-position caps, so the total is exactly
``min(B, sum(caps))`` and no position gets more guesses than it has candidates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specdec.drafters.ssd.estimators import AcceptanceRateEstimator, MissPowerEstimator
from specdec.drafters.ssd.outcome import VerificationOutcome

__all__ = ["GeometricFanOut", "UniformFanOut", "apportion", "geometric_fan_out", "uniform_fan_out"]


def _check_budget(budget) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget: expected an int >= 0, got {budget!r}")
    return budget


def _check_caps(caps, positions: int) -> list[int]:
    if caps is None:
        return [1 << 30] * positions
    caps = list(caps)
    if len(caps) != positions or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in caps):
        raise ValueError(f"caps: expected {positions} ints >= 0 (one per position), got {caps!r}")
    return caps


def apportion(weights: Sequence[float], budget: int, caps: Sequence[int] | None = None) -> list[int]:
    """Split ``budget`` units in proportion to ``weights`` under ``caps``: integers, total ``min(budget, sum(caps))``.

    Water-filling first (a position whose share exceeds its cap is fixed at the cap and the rest is
    re-shared), then floors plus the largest remainders. A zero weight gets units only when every
    positive-weight position is full.

    Example:
        >>> apportion([1.0, 1.0, 1.0], 7), apportion([4.0, 1.0], 5, caps=[2, 9])
        ([3, 2, 2], [2, 3])
    """
    budget = _check_budget(budget)
    caps = _check_caps(caps, len(weights))
    if any(not (w >= 0) or math.isinf(w) for w in weights):
        raise ValueError(f"weights: expected finite values >= 0, got {list(weights)!r}")
    total = min(budget, sum(caps))
    alloc = [0.0] * len(weights)
    remaining = total
    for pool in ([i for i, w in enumerate(weights) if w > 0 and caps[i] > 0], [i for i in range(len(weights)) if caps[i] > 0]):
        active = [i for i in pool if alloc[i] < caps[i]]
        uniform = all(weights[i] == 0 for i in active)
        while remaining > 1e-9 and active:
            w = {i: 1.0 if uniform else weights[i] for i in active}
            scale = remaining / sum(w.values())
            full = [i for i in active if alloc[i] + scale * w[i] >= caps[i]]
            if not full:
                for i in active:
                    alloc[i] += scale * w[i]
                remaining = 0.0
                break
            for i in full:
                remaining -= caps[i] - alloc[i]
                alloc[i] = float(caps[i])
            active = [i for i in active if i not in full]
    counts = [min(caps[i], math.floor(a + 1e-9)) for i, a in enumerate(alloc)]
    order = sorted(range(len(alloc)), key=lambda i: (-(alloc[i] - counts[i]), i))
    for i in order:
        if sum(counts) >= total:
            break
        if counts[i] < caps[i]:
            counts[i] += 1
    return counts


def uniform_fan_out(budget: int, num_drafts: int, caps: Sequence[int] | None = None) -> list[int]:
    """``F_0..F_K`` with ``budget`` spread evenly over the ``num_drafts + 1`` positions (extra units to the lowest ``k``).

    Example:
        >>> uniform_fan_out(8, 2), uniform_fan_out(8, 2, caps=[1, 9, 9])
        ([3, 3, 2], [1, 4, 3])
    """
    return apportion([1.0] * (num_drafts + 1), budget, caps)


def geometric_weights(num_drafts: int, acceptance: float, power: float) -> list[float]:
    """Unnormalised capped-geometric shares of the ``num_drafts + 1`` positions (see the module docstring)."""
    if not 0.0 < acceptance < 1.0:
        raise ValueError(f"acceptance: expected a rate in (0, 1), got {acceptance!r}")
    if not power > 0.0 or math.isinf(power):
        raise ValueError(f"power: expected a finite r > 0, got {power!r}")
    exponent = 1.0 / (1.0 + power)
    weights = [acceptance ** (k * exponent) for k in range(num_drafts + 1)]
    weights[-1] *= (1.0 - acceptance) ** (-exponent)
    return weights


def geometric_fan_out(
    budget: int, num_drafts: int, acceptance: float, power: float, caps: Sequence[int] | None = None
) -> list[int]:
    """``F_0..F_K`` by the capped geometric rule for per-token acceptance ``a`` and miss-rate power ``r``.

    Example:
        >>> geometric_fan_out(12, 3, acceptance=0.5, power=1.0)
        [5, 3, 2, 2]
    """
    _check_budget(budget)
    return apportion(geometric_weights(num_drafts, acceptance, power), budget, caps)


class UniformFanOut:
    """A fan-out policy that spreads ``budget`` continuations evenly over the positions.

    Example:
        >>> UniformFanOut(6).allocate(2)
        [2, 2, 2]
    """

    def __init__(self, budget: int):
        self.budget = _check_budget(budget)

    def allocate(self, num_drafts: int, caps: Sequence[int] | None = None) -> list[int]:
        """``F_0..F_K`` (``K = num_drafts``), each at most ``caps[k]``."""
        return uniform_fan_out(self.budget, num_drafts, caps)

    def observe(self, outcome: VerificationOutcome, num_drafts: int, fan_out: Sequence[int], hit: bool) -> None:
        """Nothing to learn: the allocation is fixed."""


class GeometricFanOut:
    """The capped geometric fan-out, with the acceptance rate ``a`` and the power ``r`` fixed or estimated online.

    Args:
        budget: continuations pre-drafted per round (``B``).
        acceptance: per-token acceptance rate ``a`` in ``(0, 1)``; ``None`` estimates it from the outcomes
            (:class:`AcceptanceRateEstimator`).
        power: the miss-rate exponent ``r > 0``; ``None`` estimates it from hits and misses at each fan-out
            (:class:`MissPowerEstimator`).

    Example:
        >>> policy = GeometricFanOut(6)
        >>> for _ in range(20):
        ...     policy.observe(VerificationOutcome(3, 0), 3, [2, 1, 1, 2], hit=True)
        >>> policy.acceptance > 0.8, sum(policy.allocate(3))
        (True, 6)
    """

    def __init__(self, budget: int, *, acceptance: float | None = None, power: float | None = None):
        self.budget = _check_budget(budget)
        if acceptance is not None:
            geometric_weights(1, acceptance, 1.0)
        if power is not None:
            geometric_weights(1, 0.5, power)
        self._acceptance = acceptance
        self._power = power
        self.acceptance_estimator = AcceptanceRateEstimator()
        self.power_estimator = MissPowerEstimator()

    @property
    def acceptance(self) -> float:
        """The ``a`` in use: the fixed one, else the online estimate."""
        return self._acceptance if self._acceptance is not None else self.acceptance_estimator.rate

    @property
    def power(self) -> float:
        """The ``r`` in use: the fixed one, else the online estimate."""
        return self._power if self._power is not None else self.power_estimator.power

    def allocate(self, num_drafts: int, caps: Sequence[int] | None = None) -> list[int]:
        """``F_0..F_K`` (``K = num_drafts``), each at most ``caps[k]``, summing to ``min(budget, sum(caps))``."""
        return geometric_fan_out(self.budget, num_drafts, self.acceptance, self.power, caps)

    def observe(self, outcome: VerificationOutcome, num_drafts: int, fan_out: Sequence[int], hit: bool) -> None:
        """Update the estimates with one round: ``outcome.k`` of ``num_drafts`` accepted; ``hit`` at fan-out ``fan_out[k]``."""
        self.acceptance_estimator.observe(outcome.k, num_drafts)
        if outcome.k < len(fan_out):
            self.power_estimator.observe(fan_out[outcome.k], hit)
