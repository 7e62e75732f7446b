"""Outcomes of the law tests, each with a one-line summary a reader can act on."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ArgmaxRateResult", "OneSampleResult", "TwoSampleResult"]


@dataclass(frozen=True)
class OneSampleResult:
    """Outcome of :func:`specdec.testing.one_sample_chi2`: samples against an exact law.

    Attributes:
        statistic: Pearson chi-square over the bins (``inf`` when a sample lies outside the law's support).
        dof: bins - 1 (nothing is estimated from the samples).
        p_value: upper-tail p of ``chi2(dof)`` (``0.0`` when a sample is impossible under the law).
        num_samples: ``n``.
        num_bins: cells kept on their own plus the pooled bin, if any.
        num_pooled_cells: law cells merged into the pooled bin because their expected count
            ``n * p`` was below ``min_expected``.
        num_impossible: samples the law gives probability 0 (any one of them refutes the law).
        cohens_w: ``sqrt(statistic / n)``, the observed effect size.
        tv_distance: total variation between the samples' empirical law and the law, over all cells.

    Example:
        >>> OneSampleResult(3.1, 4, 0.54, 1000, 5, 12, 0, 0.056, 0.03).summary()
        'one-sample chi2 = 3.1 (4 dof, 5 bins, 12 rare cells pooled), p = 0.54; n = 1000, w = 0.056, TV = 0.03'
    """

    statistic: float
    dof: int
    p_value: float
    num_samples: int
    num_bins: int
    num_pooled_cells: int
    num_impossible: int
    cohens_w: float
    tv_distance: float

    def summary(self) -> str:
        """One line: statistic, dof, binning, p, sample size and effect size."""
        impossible = f"; {self.num_impossible} samples IMPOSSIBLE under the law" if self.num_impossible else ""
        return (
            f"one-sample chi2 = {self.statistic:.4g} ({self.dof} dof, {self.num_bins} bins, "
            f"{self.num_pooled_cells} rare cells pooled), "
            f"p = {self.p_value:.3g}; n = {self.num_samples}, w = {self.cohens_w:.3g}, TV = {self.tv_distance:.3g}{impossible}"
        )


@dataclass(frozen=True)
class TwoSampleResult:
    """Outcome of :func:`specdec.testing.two_sample_chi2`.

    Attributes:
        statistic: Pearson chi-square of the ``2 x K`` table.
        dof: ``K - 1``.
        p_value: upper-tail p of ``chi2(dof)`` (nominal: assumes independent tokens).
        p_lower: lower-tail p (a fit that is too good).
        p_permutation: p from permuting arm labels per sequence, or ``None`` without permutations.
        cramers_v: ``sqrt(statistic / N)``.
        tv_distance: total variation between the two arms' binned laws.
        num_a, num_b: tokens (cells) per arm.
        categories: the kept cells, most frequent first: token ids (``context=0``) or
            ``(context tokens..., token)`` tuples; the "other" bin, if any, is last and not listed.

    Example:
        >>> TwoSampleResult(210.0, 200, 0.3, 0.7, None, 0.05, 0.02, 9000, 9000, (1, 2)).summary()
        'two-sample chi2 = 210 (200 dof), p = 0.3; V = 0.05, TV = 0.02; 9000 vs 9000 cells'
    """

    statistic: float
    dof: int
    p_value: float
    p_lower: float
    p_permutation: float | None
    cramers_v: float
    tv_distance: float
    num_a: int
    num_b: int
    categories: tuple

    def summary(self) -> str:
        """One line: statistic, dof, p values, effect sizes, sizes."""
        perm = f", permutation p = {self.p_permutation:.3g}" if self.p_permutation is not None else ""
        return (
            f"two-sample chi2 = {self.statistic:.4g} ({self.dof} dof), p = {self.p_value:.3g}{perm}; "
            f"V = {self.cramers_v:.3g}, TV = {self.tv_distance:.3g}; {self.num_a} vs {self.num_b} cells"
        )


@dataclass(frozen=True)
class ArgmaxRateResult:
    """Outcome of :func:`specdec.testing.argmax_rate_test`: rate at which each arm emitted the target's argmax.

    Attributes:
        rate_a, rate_b: the two rates.
        z: two-proportion z statistic (``a - b``).
        p_value: two-sided normal p (nominal).
        p_permutation: two-sided p from sequence-level label permutations, or ``None``.

    Example:
        >>> ArgmaxRateResult(0.55, 0.45, 4.5, 7e-6, None).summary()
        'argmax rate 0.55 vs 0.45, z = 4.5, p = 7e-06'
    """

    rate_a: float
    rate_b: float
    z: float
    p_value: float
    p_permutation: float | None

    def summary(self) -> str:
        """One line: both rates, z and p."""
        perm = f", permutation p = {self.p_permutation:.3g}" if self.p_permutation is not None else ""
        return f"argmax rate {self.rate_a:.3g} vs {self.rate_b:.3g}, z = {self.z:.3g}, p = {self.p_value:.3g}{perm}"
