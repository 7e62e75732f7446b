"""Statistics of the token-forcing rule: Wilson bounds, the rate rule, the large-margin threshold
calibrated from the null, and the power of the rate rule."""

from __future__ import annotations

import math

import torch

__all__ = [
    "Z95",
    "interval_label",
    "large_margin_threshold",
    "rate_rule_fails",
    "simulate_power",
    "tokens_needed",
    "wilson_interval",
]

# two-sided 95%: the 0.975 quantile of the standard normal
Z95 = 1.959963984540054


def interval_label(z: float = Z95) -> str:
    """The two-sided confidence level of the normal quantile ``z`` as a label, e.g. ``"95%"``.

    Example:
        >>> interval_label(), interval_label(1.0), interval_label(2.5758)
        ('95%', '68.3%', '99%')
    """
    level = 100 * math.erf(z / math.sqrt(2))
    return f"{level:.3g}%"


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion.

    Unlike the normal interval it stays inside ``[0, 1]`` and is not degenerate at 0 successes,
    which is the usual case for a lossless system.

    Example:
        >>> tuple(round(b, 4) for b in wilson_interval(0, 10))
        (0.0, 0.2775)
        >>> wilson_interval(0, 0)
        (0.0, 1.0)
    """
    if trials < 0 or not 0 <= successes <= max(trials, 0):
        raise ValueError(f"successes/trials: expected 0 <= successes <= trials, got {successes}/{trials}")
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    z2 = z * z
    denom = 1.0 + z2 / trials
    centre = (p + z2 / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / denom
    # exact end points at 0 and n successes (the formula gives them up to rounding)
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == trials else min(1.0, centre + half)
    return lo, hi


def rate_rule_fails(cand_mismatches: int, cand_tokens: int, null_mismatches: int, null_tokens: int, z: float = Z95) -> bool:
    """The rate rule: ``lower95(candidate rate) > upper95(null rate)``.

    Equivalent to a conservative one-sided two-proportion test. An empty stratum never fails.

    Example:
        >>> rate_rule_fails(30, 1000, 0, 1000), rate_rule_fails(2, 1000, 1, 1000)
        (True, False)
    """
    if cand_tokens == 0 or null_tokens == 0:
        return False
    return wilson_interval(cand_mismatches, cand_tokens, z)[0] > wilson_interval(null_mismatches, null_tokens, z)[1]


def large_margin_threshold(null_margins: torch.Tensor, *, tau_floor: float, tau_scale: float) -> tuple[float, float]:
    """``tau = max(tau_floor, tau_scale * largest null mismatch margin)``, and that largest margin.

    Rounding flips near-ties only, so the null's mismatch margins bound what rounding can do; the
    factor ``tau_scale`` leaves room for the candidate seeing more tokens than the null.

    Args:
        null_margins: ``[N]`` margins of the null run's positions (``0`` where the null matches).

    Example:
        >>> large_margin_threshold(torch.tensor([0.0, 0.125, 0.0625]), tau_floor=0.1, tau_scale=2.0)
        (0.25, 0.125)
        >>> large_margin_threshold(torch.zeros(4), tau_floor=0.5, tau_scale=2.0)
        (0.5, 0.0)
    """
    mismatched = null_margins[null_margins > 0]
    max_margin = float(mismatched.max()) if mismatched.numel() else 0.0
    return max(tau_floor, tau_scale * max_margin), max_margin


def simulate_power(
    null_rate: float,
    candidate_rate: float,
    num_tokens: int,
    *,
    null_tokens: int | None = None,
    trials: int = 2000,
    z: float = Z95,
    generator: torch.Generator | None = None,
) -> float:
    """Probability that :func:`rate_rule_fails` fires, by simulation.

    Mismatches are drawn as independent Bernoulli events (teacher forcing scores each position on its
    own, so a flip does not cascade); the candidate sees ``num_tokens`` positions, the null
    ``null_tokens`` (default the same). With ``candidate_rate == null_rate`` this is the false-alarm
    rate of the rule.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> simulate_power(1e-3, 3e-3, 20_000, trials=500, generator=g) > 0.8
        True
    """
    for name, rate in (("null_rate", null_rate), ("candidate_rate", candidate_rate)):
        if not 0 <= rate <= 1:
            raise ValueError(f"{name}: expected a probability in [0, 1], got {rate!r}")
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
        raise ValueError(f"num_tokens: expected an int >= 1, got {num_tokens!r}")
    null_tokens = num_tokens if null_tokens is None else null_tokens
    if isinstance(null_tokens, bool) or not isinstance(null_tokens, int) or null_tokens < 1:
        raise ValueError(f"null_tokens: expected an int >= 1 (or None: num_tokens), got {null_tokens!r}")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials: expected an int >= 1, got {trials!r}")
    cand = torch.binomial(
        torch.full((trials,), float(num_tokens), dtype=torch.float64),
        torch.full((trials,), float(candidate_rate), dtype=torch.float64),
        generator=generator,
    )
    ref = torch.binomial(
        torch.full((trials,), float(null_tokens), dtype=torch.float64),
        torch.full((trials,), float(null_rate), dtype=torch.float64),
        generator=generator,
    )
    fired = sum(rate_rule_fails(int(c), num_tokens, int(r), null_tokens, z) for c, r in zip(cand.tolist(), ref.tolist()))
    return fired / trials


def tokens_needed(
    null_rate: float,
    rise: float,
    *,
    power: float = 0.8,
    trials: int = 1000,
    z: float = Z95,
    seed: int = 0,
    max_tokens: int = 1 << 28,
) -> int:
    """Smallest number of scored tokens (candidate and null each) at which the rate rule detects a
    rise of the mismatch rate from ``null_rate`` to ``null_rate + rise`` with probability ``power``.

    Found by doubling and then bisection on :func:`simulate_power` with a fixed seed per
    evaluation (common random numbers keep the search monotone in practice), never past
    ``max_tokens``: returns ``max_tokens`` when even that is not enough (or exactly enough).

    Example:
        >>> 5_000 < tokens_needed(1e-3, 2e-3, trials=300) < 50_000
        True
    """
    if not 0 < power < 1:
        raise ValueError(f"power: expected a probability in (0, 1), got {power!r}")
    if not 0 < rise <= 1 - null_rate:
        raise ValueError(f"rise: expected 0 < rise <= 1 - null_rate, got {rise!r}")

    def detects(n: int) -> bool:
        g = torch.Generator().manual_seed(seed)
        return simulate_power(null_rate, null_rate + rise, n, trials=trials, z=z, generator=g) >= power

    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens: expected a positive int, got {max_tokens!r}")
    lo, hi = 0, min(64, max_tokens)
    while not detects(hi):
        if hi == max_tokens:
            return max_tokens
        lo, hi = hi, min(2 * hi, max_tokens)
    while hi - lo > max(1, lo // 50):
        mid = (lo + hi) // 2
        if detects(mid):
            hi = mid
        else:
            lo = mid
    return hi
