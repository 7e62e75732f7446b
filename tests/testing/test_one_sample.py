"""one_sample_chi2 against exact laws, and chi2_power / chi2_sample_size against simulation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specdec.testing import (
    MarkovDrafter,
    MarkovLaw,
    MarkovTarget,
    autoregressive_law,
    chi2_power,
    chi2_sample_size,
    one_sample_chi2,
    sample_continuations,
)
from specdec.verify import SamplingConfig
from specdec.verify import chain as chain_module

ALPHA = 0.05


def _zipf(num_cells: int) -> torch.Tensor:
    weights = 1.0 / torch.arange(1, num_cells + 1, dtype=torch.float64) ** 1.5
    return weights / weights.sum()


def _tilted(law: torch.Tensor, cells: int, cohens_w: float) -> torch.Tensor:
    """A law at Cohen's w from ``law`` that differs only on its ``cells`` most probable cells
    (alternating up and down), so no pooled rare cell hides the difference."""
    sign = torch.zeros_like(law)
    sign[:cells] = torch.tensor([1.0, -1.0]).repeat(cells // 2)
    shift = sign * law
    shift = shift - shift.sum() * law * (sign != 0) / law[sign != 0].sum()
    scale = cohens_w / float((shift**2 / law).sum().sqrt())
    return law + scale * shift


def test_statistic_matches_scipy_when_no_cell_is_pooled():
    from scipy.stats import chisquare

    law = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    samples = torch.multinomial(law, 500, replacement=True, generator=torch.Generator().manual_seed(0))
    result = one_sample_chi2(samples, law)
    ref = chisquare(torch.bincount(samples, minlength=4).numpy(), 500 * law.numpy())
    assert result.statistic == pytest.approx(ref.statistic, rel=1e-9) and result.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    assert result.dof == 3 and result.num_pooled_cells == 0


def test_rare_cells_are_pooled_by_expected_count():
    from scipy.stats import chisquare

    law = torch.tensor([0.5, 0.3, 0.1, 0.05, 0.03, 0.02], dtype=torch.float64)  # n = 100 expects 50, 30, 10, 5, 3, 2
    samples = torch.tensor([0] * 40 + [1] * 30 + [2] * 15 + [3] * 5 + [4] * 10)  # cell 4 observed 10 times, expects 3
    result = one_sample_chi2(samples, law)
    ref = chisquare([40, 30, 15, 5, 10 + 0], [50, 30, 10, 5, 3 + 2])
    assert (result.num_bins, result.num_pooled_cells, result.dof) == (5, 2, 4)
    assert result.statistic == pytest.approx(ref.statistic, rel=1e-9)


def test_a_pooled_bin_below_min_expected_takes_in_the_rarest_kept_cells():
    law = torch.tensor([0.9, 0.06, 0.04], dtype=torch.float64)  # n = 100 expects 90, 6, 4: the pool of 4 takes in the 6
    result = one_sample_chi2(torch.tensor([0] * 88 + [1] * 7 + [2] * 5), law)
    assert (result.num_bins, result.num_pooled_cells, result.dof) == (2, 2, 1)
    assert result.statistic == pytest.approx((88 - 90) ** 2 / 90 + (12 - 10) ** 2 / 10, rel=1e-12)


def test_a_sample_outside_the_support_refutes_the_law():
    law = {(0, 1): 0.5, (1, 0): 0.5, (1, 1): 0.0}
    result = one_sample_chi2(torch.tensor([[0, 1]] * 50 + [[1, 0]] * 49 + [[1, 1]]), law)
    assert result.p_value == 0.0 and result.num_impossible == 1 and "IMPOSSIBLE" in result.summary()


def test_exact_sampler_accepted_and_biased_sampler_rejected_at_the_stated_rates():
    # 40 cells of a Zipf law: most expect fewer than 5 samples, so pooling decides the false-alarm rate
    law = _zipf(40)
    biased = _tilted(law, 6, cohens_w=0.3)
    n = chi2_sample_size(num_cells=8, cohens_w=0.3, alpha=ALPHA, power=0.9)
    g = torch.Generator().manual_seed(0)
    seeds = 300
    exact_alarms = sum(
        one_sample_chi2(torch.multinomial(law, n, replacement=True, generator=g), law).p_value < ALPHA for _ in range(seeds)
    )
    caught = sum(
        one_sample_chi2(torch.multinomial(biased, n, replacement=True, generator=g), law).p_value < ALPHA for _ in range(seeds)
    )
    bins = one_sample_chi2(torch.multinomial(law, n, replacement=True, generator=g), law).num_bins
    # 300 draws: a 5% false-alarm rate stays within [2%, 9%] with probability > 0.99
    assert 0.02 * seeds <= exact_alarms <= 0.09 * seeds, (exact_alarms, n, bins)
    # sized for 90% power with 8 cells; the test has at most that many bins, so power is at least that
    assert bins <= 8 and caught >= 0.84 * seeds, (caught, n, bins)


def test_pooling_keeps_the_level_where_unpooled_cells_would_not():
    # mutation check of the pooling: with tiny expected counts kept on their own, the chi-square
    # reference no longer holds and the false-alarm rate of an exact sampler rises well above alpha
    law = _zipf(200)
    g = torch.Generator().manual_seed(1)
    samples = [torch.multinomial(law, 150, replacement=True, generator=g) for _ in range(300)]
    pooled = sum(one_sample_chi2(s, law).p_value < ALPHA for s in samples)
    unpooled = sum(one_sample_chi2(s, law, min_expected=0).p_value < ALPHA for s in samples)
    assert pooled <= 0.09 * 300 and unpooled >= 0.12 * 300, (pooled, unpooled)


def _dropped_sampling_params(logits, sampling):
    return torch.softmax(logits.float(), -1)


def test_speculative_decoding_against_its_exact_law(monkeypatch):
    target_law, draft_law = MarkovLaw(4, seed=0, scale=1.5), MarkovLaw(4, seed=1, scale=2.0)
    target = MarkovTarget(target_law, max_seq_len=16)
    sampling = SamplingConfig(temperature=0.7, top_k=3)
    exact = autoregressive_law(target_law, (1, 2), 3, sampling=sampling)

    def draw(seed):
        return sample_continuations(
            target, (1, 2), 400, 3, drafter=MarkovDrafter(draft_law), num_draft_tokens=2, temperature=0.7, top_k=3, seed=seed
        )

    lossless = one_sample_chi2(draw(0), exact)
    assert lossless.p_value > 1e-3 and lossless.num_impossible == 0, lossless.summary()
    monkeypatch.setattr(chain_module, "logits_to_probs", _dropped_sampling_params)
    buggy = one_sample_chi2(draw(0), exact)
    assert buggy.p_value < 1e-6, buggy.summary()


def test_plain_sampling_from_a_markov_target_against_its_exact_law():
    target_law = MarkovLaw(5, seed=3, scale=1.5)
    target = MarkovTarget(target_law, max_seq_len=16)
    exact = autoregressive_law(target_law, (0,), 2, sampling=SamplingConfig(temperature=1.0))
    result = one_sample_chi2(sample_continuations(target, (0,), 500, 2, seed=7), exact)
    assert result.p_value > 1e-3, result.summary()
    # the same samples judged against another target's law are rejected
    other = autoregressive_law(MarkovLaw(5, seed=4, scale=1.5), (0,), 2, sampling=SamplingConfig(temperature=1.0))
    assert one_sample_chi2(sample_continuations(target, (0,), 500, 2, seed=7), other).p_value < 1e-6


def _pearson_one_sample(counts: np.ndarray, law: np.ndarray) -> np.ndarray:
    expected = counts.sum(-1, keepdims=True) * law
    return ((counts - expected) ** 2 / expected).sum(-1)


def _pearson_two_sample(counts_a: np.ndarray, counts_b: np.ndarray) -> np.ndarray:
    table = np.stack([counts_a, counts_b], 1).astype(np.float64)  # [trials, 2, K]
    expected = table.sum(2, keepdims=True) * table.sum(1, keepdims=True) / table.sum((1, 2), keepdims=True)
    return ((table - expected) ** 2 / np.where(expected > 0, expected, 1.0)).sum((1, 2))


@pytest.mark.parametrize("num_samples", [150, 360, 700])
def test_power_agrees_with_simulation_one_sample(num_samples):
    from scipy.stats import chi2

    law = torch.full((8,), 1 / 8, dtype=torch.float64)
    alternative = _tilted(law, 8, cohens_w=0.2)
    rng = np.random.default_rng(num_samples)
    counts = rng.multinomial(num_samples, alternative.numpy(), size=4000)
    simulated = float((_pearson_one_sample(counts, law.numpy()) > chi2.isf(ALPHA, 7)).mean())
    assert chi2_power(num_samples, num_cells=8, cohens_w=0.2, alpha=ALPHA) == pytest.approx(simulated, abs=0.03)


@pytest.mark.parametrize("num_samples", [300, 700])
def test_power_agrees_with_simulation_two_sample(num_samples):
    from scipy.stats import chi2

    law = torch.full((8,), 1 / 8, dtype=torch.float64)
    alternative = _tilted(law, 8, cohens_w=0.2)
    rng = np.random.default_rng(num_samples)
    stat = _pearson_two_sample(
        rng.multinomial(num_samples, law.numpy(), size=4000), rng.multinomial(num_samples, alternative.numpy(), size=4000)
    )
    simulated = float((stat > chi2.isf(ALPHA, 7)).mean())
    assert chi2_power(num_samples, num_cells=8, cohens_w=0.2, alpha=ALPHA, two_sample=True) == pytest.approx(simulated, abs=0.04)


def test_sample_size_is_the_smallest_that_reaches_the_power():
    n = chi2_sample_size(num_cells=8, cohens_w=0.2, power=0.8)
    assert chi2_power(n, num_cells=8, cohens_w=0.2) >= 0.8 > chi2_power(n - 1, num_cells=8, cohens_w=0.2)
    assert chi2_sample_size(num_cells=8, total_variation=0.1) == n  # w = 2 * TV
    assert chi2_sample_size(vocab_size=2, context=2, cohens_w=0.2) == n  # 2 ** 3 cells
    assert chi2_sample_size(vocab_size=50, context=1, max_categories=8, cohens_w=0.2) == n
    assert chi2_sample_size(num_cells=8, cohens_w=0.2, two_sample=True) > 1.9 * n


def test_total_variation_bounds_cohens_w_from_below():
    # the sizing by total variation relies on 2 * TV <= w for every pair of laws
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        p = torch.rand(6, generator=g, dtype=torch.float64) + 1e-3
        q = torch.rand(6, generator=g, dtype=torch.float64) * (torch.rand(6, generator=g) < 0.7)
        p, q = p / p.sum(), q / q.sum()
        assert 2 * 0.5 * float((p - q).abs().sum()) <= float(((q - p) ** 2 / p).sum().sqrt()) + 1e-12


@pytest.mark.parametrize("bad_cell", [float("nan"), -0.2, float("inf")])
def test_a_law_with_a_nan_negative_or_infinite_cell_is_refused_not_cut_to_its_support(bad_cell):
    """Samples landing in such a cell would be dropped with it, and the rest could still pass."""
    samples = torch.tensor([0] * 50 + [1] * 50 + [2] * 30)
    with pytest.raises(ValueError, match=r"law: expected finite probabilities >= 0 summing to 1, got cells \["):
        one_sample_chi2(samples, torch.tensor([0.5, 0.5, bad_cell]))
    zero = one_sample_chi2(samples, torch.tensor([0.5, 0.5, 0.0]))  # a zero cell: its samples refute the law
    assert zero.p_value == 0.0


def test_bad_input_is_named():
    law = torch.tensor([0.5, 0.5])
    with pytest.raises(ValueError, match="law: expected finite probabilities >= 0 summing to 1"):
        one_sample_chi2(torch.tensor([0, 1]), torch.tensor([0.5, 0.6]))
    with pytest.raises(ValueError, match=r"samples: expected an integer tensor \[S, 2\]"):
        one_sample_chi2(torch.tensor([[0, 1, 1]]), {(0, 1): 1.0})
    with pytest.raises(ValueError, match="samples: expected a 1-D integer tensor of ids"):
        one_sample_chi2(torch.tensor([0.0, 1.0]), law)
    with pytest.raises(ValueError, match="samples: 3 samples are too few for min_expected=5"):
        one_sample_chi2(torch.tensor([0, 1, 1]), law)
    with pytest.raises(ValueError, match="cohens_w/total_variation: expected exactly one"):
        chi2_sample_size(num_cells=8)
    with pytest.raises(ValueError, match="context: counts cells with vocab_size"):
        chi2_sample_size(num_cells=8, cohens_w=0.2, context=3)
    with pytest.raises(ValueError, match="num_cells/vocab_size: expected exactly one"):
        chi2_sample_size(cohens_w=0.1, num_cells=8, vocab_size=4)
    with pytest.raises(ValueError, match=r"power: expected a float in \(0.05, 1\), got 0.01"):
        chi2_sample_size(num_cells=8, cohens_w=0.1, power=0.01)
    with pytest.raises(ValueError, match="num_cells: expected an int >= 2, got 1"):
        chi2_power(10, num_cells=1, cohens_w=0.1)


def test_the_sample_size_within_max_samples_is_found():
    """The doubling search stopped at the first power of two past max_samples, though max_samples itself was enough."""
    n = chi2_sample_size(num_cells=8, cohens_w=0.2)
    assert (
        n
        == chi2_sample_size(num_cells=8, cohens_w=0.2, max_samples=n + 41)
        == chi2_sample_size(num_cells=8, cohens_w=0.2, max_samples=n)
    )
    assert chi2_power(n - 1, num_cells=8, cohens_w=0.2) < 0.8 <= chi2_power(n, num_cells=8, cohens_w=0.2)
    with pytest.raises(ValueError, match=rf"max_samples: {n - 1} samples do not reach power 0.8"):
        chi2_sample_size(num_cells=8, cohens_w=0.2, max_samples=n - 1)
    with pytest.raises(ValueError, match="max_samples: expected an int >= 1, got 0"):
        chi2_sample_size(num_cells=8, cohens_w=0.2, max_samples=0)
