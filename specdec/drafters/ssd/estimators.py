"""Online estimates of the two parameters of the geometric fan-out: acceptance rate ``a`` and miss power ``r``."""

from __future__ import annotations

import math

__all__ = ["AcceptanceRateEstimator", "MissPowerEstimator"]


class AcceptanceRateEstimator:
    """Per-token acceptance rate from round outcomes, as the maximum-likelihood rate of a truncated geometric law.

    A round with ``k`` of ``K`` drafts accepted contributes ``k`` successes and, when ``k < K``, one
    failure; ``a = successes / (successes + failures)``, shrunk towards ``prior`` by ``prior_weight``
    pseudo-tokens and kept inside ``[0.01, 0.99]``.

    Example:
        >>> est = AcceptanceRateEstimator(prior=0.5, prior_weight=0)
        >>> est.observe(3, 4); est.observe(4, 4); est.rate
        0.875
    """

    def __init__(self, prior: float = 0.6, prior_weight: float = 4.0):
        if not 0.0 < prior < 1.0:
            raise ValueError(f"prior: expected a rate in (0, 1), got {prior!r}")
        if not prior_weight >= 0:
            raise ValueError(f"prior_weight: expected >= 0, got {prior_weight!r}")
        self.prior, self.prior_weight = prior, prior_weight
        self.accepted = 0
        self.rejected = 0

    def observe(self, num_accepted: int, num_drafts: int) -> None:
        """One round: ``num_accepted`` of ``num_drafts`` drafts accepted (``0 <= num_accepted <= num_drafts``)."""
        if not 0 <= num_accepted <= num_drafts:
            raise ValueError(f"num_accepted: expected 0 <= num_accepted <= num_drafts = {num_drafts}, got {num_accepted}")
        self.accepted += num_accepted
        self.rejected += int(num_accepted < num_drafts)

    @property
    def rate(self) -> float:
        """The current estimate of ``a``."""
        total = self.accepted + self.rejected + self.prior_weight
        if total == 0:
            return self.prior
        return min(0.99, max(0.01, (self.accepted + self.prior * self.prior_weight) / total))


class MissPowerEstimator:
    """The exponent ``r`` of the power law ``P(miss | F guesses) ~ F^-r``, fitted online.

    Keeps hit/miss counts per fan-out ``F >= 2`` (``F = 1`` carries no information: ``1^-r = 1``) and
    fits ``log miss_F = -r log F`` by least squares weighted by the trials at each ``F``, with a prior
    of ``prior_weight`` trials at ``F = 2`` with the miss rate ``2^-prior``; kept inside ``[0.05, 10]``.

    Example:
        >>> est = MissPowerEstimator(prior_weight=0)
        >>> for hit in [True, True, True, False]:
        ...     est.observe(4, hit)
        >>> round(est.power, 6)      # miss rate 1/4 at F = 4
        1.0
    """

    def __init__(self, prior: float = 1.0, prior_weight: float = 4.0):
        if not prior > 0:
            raise ValueError(f"prior: expected r > 0, got {prior!r}")
        if not prior_weight >= 0:
            raise ValueError(f"prior_weight: expected >= 0, got {prior_weight!r}")
        self.prior, self.prior_weight = prior, prior_weight
        self.trials: dict[int, int] = {}
        self.misses: dict[int, int] = {}

    def observe(self, fan_out: int, hit: bool) -> None:
        """One round whose outcome fell at a position with ``fan_out`` guesses; ``hit`` = one of them was right."""
        if fan_out < 2:
            return
        self.trials[fan_out] = self.trials.get(fan_out, 0) + 1
        self.misses[fan_out] = self.misses.get(fan_out, 0) + int(not hit)

    @property
    def power(self) -> float:
        """The current estimate of ``r``."""
        num = self.prior_weight * self.prior * math.log(2) ** 2
        den = self.prior_weight * math.log(2) ** 2
        for f, n in self.trials.items():
            # half a pseudo-miss keeps log(miss) finite when every trial hit
            miss = self.misses[f] / n if self.misses[f] else 0.5 / (n + 1.0)
            num += n * -math.log(miss) * math.log(f)
            den += n * math.log(f) ** 2
        if den == 0:
            return self.prior
        return min(10.0, max(0.05, num / den))
