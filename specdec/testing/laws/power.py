"""How many samples a chi-square law test needs: power from the noncentral chi-square.

Under an alternative at Cohen's effect size ``w`` (``w**2 = sum_i (q_i - p_i)**2 / p_i`` for a
sampler of law ``q`` judged against the law ``p``), Pearson's statistic over ``K`` cells is
approximately noncentral chi-square with ``K - 1`` degrees of freedom and noncentrality
``lambda = n * w**2`` (one sample of ``n``), or ``n * w**2 / 2`` (two arms of ``n`` each, small
effects). The test rejects at level ``alpha`` above the ``1 - alpha`` quantile of the central law, so
its power is ``ncx2.sf(chi2.ppf(1 - alpha, K - 1), K - 1, lambda)``.

Total variation ``d`` does not fix ``w``, but bounds it: ``2 d <= w`` (Cauchy-Schwarz:
``(sum |q - p|)**2 <= sum (q - p)**2 / p * sum p``). Sizing for ``w = 2 d`` therefore suffices for
every alternative at distance ``d``, as long as the binning keeps the cells where the laws differ
apart (pooled cells can hide a difference).
"""

from __future__ import annotations

__all__ = ["chi2_power", "chi2_sample_size"]


def _check_probability(name: str, value, *, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value < 1:
        raise ValueError(f"{name}: expected a float in ({low:g}, 1), got {value!r}")
    return float(value)


def _check_positive_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return value


def chi2_power(num_samples: int, *, num_cells: int, cohens_w: float, alpha: float = 0.05, two_sample: bool = False) -> float:
    """Power of a Pearson chi-square test over ``num_cells`` cells at effect size ``cohens_w``.

    Args:
        num_samples: ``n`` (per arm with ``two_sample=True``).
        num_cells: bins of the test (``dof = num_cells - 1``), after pooling.
        cohens_w: effect size (``> 0``).
        alpha: level of the test.
        two_sample: two arms of ``n`` each (:func:`two_sample_chi2`) instead of one sample against an
            exact law (:func:`one_sample_chi2`).

    Example:
        >>> round(chi2_power(400, num_cells=8, cohens_w=0.2), 3)
        0.849
        >>> round(chi2_power(400, num_cells=8, cohens_w=0.2, two_sample=True), 3)
        0.502
    """
    from scipy.stats import chi2, ncx2

    _check_positive_int("num_samples", num_samples, 1)
    _check_positive_int("num_cells", num_cells, 2)
    if isinstance(cohens_w, bool) or not isinstance(cohens_w, (int, float)) or not 0 < cohens_w < float("inf"):
        raise ValueError(f"cohens_w: expected a finite float > 0, got {cohens_w!r}")
    alpha = _check_probability("alpha", alpha)
    dof = num_cells - 1
    noncentrality = num_samples * cohens_w**2 / (2.0 if two_sample else 1.0)
    return float(ncx2.sf(chi2.isf(alpha, dof), dof, noncentrality))


def chi2_sample_size(
    *,
    cohens_w: float | None = None,
    total_variation: float | None = None,
    num_cells: int | None = None,
    vocab_size: int | None = None,
    context: int = 0,
    max_categories: int | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    two_sample: bool = False,
    max_samples: int = 1 << 40,
) -> int:
    """Smallest ``n`` at which the chi-square law test reaches ``power`` (per arm with ``two_sample``).

    Give the effect as ``cohens_w`` or as ``total_variation`` (then ``w = 2 * total_variation``, the
    least favourable ``w`` at that distance), and the cells as ``num_cells`` or as ``vocab_size`` and
    ``context`` (``vocab_size ** (context + 1)`` cells: tokens with their ``context`` predecessors, or
    outcomes of ``context + 1`` tokens), capped at ``max_categories`` (:func:`two_sample_chi2` keeps at
    most 201 bins).

    Example:
        >>> chi2_sample_size(num_cells=8, cohens_w=0.2)                   # one sample vs an exact law
        359
        >>> chi2_sample_size(vocab_size=6, context=1, total_variation=0.1, two_sample=True)
        1306
    """
    if (cohens_w is None) == (total_variation is None):
        raise ValueError(
            f"cohens_w/total_variation: expected exactly one, got cohens_w={cohens_w!r}, total_variation={total_variation!r}"
        )
    if total_variation is not None:
        if isinstance(total_variation, bool) or not isinstance(total_variation, (int, float)) or not 0 < total_variation <= 1:
            raise ValueError(f"total_variation: expected a float in (0, 1], got {total_variation!r}")
        cohens_w = 2.0 * total_variation
    if (num_cells is None) == (vocab_size is None):
        raise ValueError(f"num_cells/vocab_size: expected exactly one, got num_cells={num_cells!r}, vocab_size={vocab_size!r}")
    if vocab_size is not None:
        _check_positive_int("vocab_size", vocab_size, 2)
        _check_positive_int("context", context, 0)
        num_cells = vocab_size ** (context + 1)
    elif context != 0:
        raise ValueError(
            f"context: counts cells with vocab_size (vocab_size ** (context + 1)); with num_cells give none, got {context!r}"
        )
    if max_categories is not None:
        num_cells = min(num_cells, _check_positive_int("max_categories", max_categories, 2))
    alpha = _check_probability("alpha", alpha)
    power = _check_probability("power", power, low=alpha)

    def enough(n: int) -> bool:
        return chi2_power(n, num_cells=num_cells, cohens_w=cohens_w, alpha=alpha, two_sample=two_sample) >= power

    _check_positive_int("max_samples", max_samples, 1)
    if not enough(max_samples):
        raise ValueError(
            f"max_samples: {max_samples} samples do not reach power {power} at w = {cohens_w:g} over {num_cells} cells"
        )
    lo, hi = 0, 1
    while not enough(hi):  # ends by max_samples at the latest
        lo, hi = hi, min(hi * 2, max_samples)
    # power grows with n: bisect for the first n that is enough
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if enough(mid):
            hi = mid
        else:
            lo = mid
    return hi
