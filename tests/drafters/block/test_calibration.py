"""Sequential Temperature Scaling, ECE and reliability plots on synthetic confidences with known temperatures."""

from __future__ import annotations

import pytest
import torch

from specdec.drafters.block import calibration as cal
from specdec.drafters.block.calibration import (
    analytic_acceptance,
    calibrated_survival,
    expected_calibration_error,
    load_calibration,
    plot_reliability,
    position_ece,
    reliability_curve,
    save_calibration,
    sequential_temperature_scaling,
    survival_labels,
)

TRUE_T = torch.tensor([2.0, 0.5, 3.0, 1.0, 1.5])  # per position: reported logit = T * true logit


def synthetic(n: int = 20000, seed: int = 0):
    """Blocks whose position k survives (given the earlier ones did) with prob sigmoid(z_k); the head reports T_k z_k."""
    g = torch.Generator().manual_seed(seed)
    z = 1.0 + 1.5 * torch.randn(n, TRUE_T.numel(), generator=g, dtype=torch.float64)  # [n, gamma] true logits
    survives = torch.bernoulli(torch.sigmoid(z), generator=g)  # conditional outcomes
    labels = survives.cumprod(1)  # did the first k drafts all survive
    return z * TRUE_T, labels, z


def test_sts_recovers_the_true_temperatures_and_lowers_ece():
    logits, labels, z = synthetic()
    temps = sequential_temperature_scaling(logits, labels)
    assert temps.shape == TRUE_T.shape and temps.dtype == torch.float32
    # the ECE objective flattens as the survival shrinks: deep positions are found less tightly
    error = (temps - TRUE_T).abs() / TRUE_T
    assert float(error[:3].max()) < 0.1 and float(error[3:].max()) < 0.25, temps
    held_logits, held_labels, held_z = synthetic(seed=1)
    raw = position_ece(calibrated_survival(held_logits), held_labels)
    fixed = position_ece(calibrated_survival(held_logits, temps), held_labels)
    oracle = position_ece(calibrated_survival(held_z), held_labels)
    # position 4 has T = 1 and a calibrated prefix only after STS; every other position starts off
    assert bool((fixed < 0.02).all()), fixed
    assert bool((fixed <= oracle + 0.01).all()), (fixed, oracle)
    assert float(raw.mean()) > 3 * float(fixed.mean()), (raw, fixed)
    assert expected_calibration_error(calibrated_survival(held_logits, temps), held_labels) < expected_calibration_error(
        calibrated_survival(held_logits), held_labels
    )


def test_earlier_positions_are_held_fixed():
    logits, labels, _ = synthetic(n=4000)
    temps = sequential_temperature_scaling(logits, labels)
    # later labels never move earlier temperatures
    changed = labels.clone()
    changed[:, 3:] = 1 - changed[:, 3:]
    again = sequential_temperature_scaling(logits, changed)
    assert torch.equal(again[:3], temps[:3]) and not torch.equal(again[3:], temps[3:])
    # a positive temperature keeps the order of the confidences of every position
    scaled = torch.sigmoid(logits / temps.double())
    for k in range(logits.shape[1]):
        order = torch.argsort(logits[:, k])
        assert bool((scaled[order, k].diff() >= 0).all())


def test_mutation_prefix_left_uncalibrated_is_caught(monkeypatch):
    """An STS that multiplies the later positions onto the *raw* earlier confidences recovers wrong temperatures."""
    logits, labels, _ = synthetic()
    real = cal._position_factor

    def raw_prefix(values, temperature):
        # the grid search passes [G, 1] temperatures; the prefix update passes a scalar
        if torch.as_tensor(temperature).ndim == 0:
            return torch.sigmoid(values)
        return real(values, temperature)

    monkeypatch.setattr(cal, "_position_factor", raw_prefix)
    bad = sequential_temperature_scaling(logits, labels)
    assert float(((bad - TRUE_T).abs() / TRUE_T)[1:].max()) > 0.3, bad


def test_mask_and_all_zero_positions():
    logits, labels, _ = synthetic(n=3000)
    mask = torch.ones_like(labels, dtype=torch.bool)
    mask[:1500, 2] = False
    t_masked = sequential_temperature_scaling(logits, labels, mask=mask)
    assert t_masked.shape == (5,)
    # a position with nothing to count keeps T = 1; so does one where every temperature ties
    mask[:, 3] = False
    flat = logits.clone()
    flat[:, 1] = 0.0
    t = sequential_temperature_scaling(flat, labels, mask=mask)
    assert float(t[1]) == 1.0 and float(t[3]) == 1.0 and float(t[0]) != 1.0
    grid = sequential_temperature_scaling(logits, labels, grid=[0.5, 1.0, 2.0])
    assert set(grid.tolist()) <= {0.5, 1.0, 2.0}
    probs = sequential_temperature_scaling(torch.sigmoid(logits), labels, from_probs=True)
    assert float((probs - sequential_temperature_scaling(logits, labels)).abs().max()) < 0.05


def test_ece_by_hand_and_reliability_curve():
    pred = torch.tensor([0.05, 0.15, 0.15, 0.95])
    lab = torch.tensor([0.0, 1.0, 0.0, 1.0])
    # bins: [0, .1): |.05 - 0| * 1/4; [.1, .2): |.15 - .5| * 2/4; [.9, 1]: |.95 - 1| * 1/4
    assert abs(expected_calibration_error(pred, lab) - (0.05 / 4 + 0.35 / 2 + 0.05 / 4)) < 1e-7
    assert expected_calibration_error(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0])) == 0.0
    mean_p, mean_y, count = reliability_curve(pred, lab, num_bins=10)
    assert count.tolist() == [1, 2, 0, 0, 0, 0, 0, 0, 0, 1]
    assert torch.isnan(mean_p[2]) and abs(float(mean_y[1]) - 0.5) < 1e-12
    assert survival_labels(torch.tensor([0, 3, 1]), 3).tolist() == [[0, 0, 0], [1, 1, 1], [1, 0, 0]]
    torch.testing.assert_close(
        analytic_acceptance(torch.tensor([[1.0, 0.0], [0.5, 0.5]]), torch.tensor([[0.0, 1.0], [0.5, 0.5]])),
        torch.tensor([0.0, 1.0]),
    )


def test_files_and_plot(tmp_path):
    logits, labels, _ = synthetic(n=2000)
    temps = sequential_temperature_scaling(logits, labels)
    save_calibration(tmp_path, temps, held_out_blocks=2000)
    assert torch.equal(load_calibration(tmp_path), temps)
    assert load_calibration(tmp_path / "missing") is None
    path = plot_reliability(
        labels, tmp_path / "rel.png", curves={"raw": calibrated_survival(logits), "STS": calibrated_survival(logits, temps)}
    )
    assert path.is_file() and path.stat().st_size > 5000


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sequential_temperature_scaling(torch.zeros(4), torch.zeros(4)), "confidence_logits"),
        (lambda: sequential_temperature_scaling(torch.zeros(4, 2), torch.zeros(4, 3)), "labels"),
        (lambda: sequential_temperature_scaling(torch.full((4, 2), float("nan")), torch.zeros(4, 2)), "confidence_logits"),
        (lambda: sequential_temperature_scaling(torch.zeros(4, 2), torch.full((4, 2), 2.0)), "labels"),
        (lambda: sequential_temperature_scaling(torch.zeros(4, 2), torch.zeros(4, 2), grid=[1.0, -1.0]), "grid"),
        (lambda: sequential_temperature_scaling(torch.zeros(4, 2), torch.zeros(4, 2), grid=[]), "grid"),
        (lambda: sequential_temperature_scaling(torch.zeros(4, 2), torch.zeros(4, 2), num_bins=0), "num_bins"),
        (lambda: sequential_temperature_scaling(torch.zeros(4, 2, dtype=torch.long), torch.zeros(4, 2)), "confidence_logits"),
        (lambda: sequential_temperature_scaling(torch.ones(4, 2), torch.zeros(4, 2), from_probs=True), "from_probs"),
        (lambda: sequential_temperature_scaling(torch.zeros(4, 2), torch.zeros(4, 2), mask=torch.ones(4, 2)), "mask"),
        (lambda: expected_calibration_error(torch.tensor([0.5]), torch.tensor([0.5]), mask=torch.tensor([False])), "mask"),
        (lambda: expected_calibration_error(torch.zeros(0), torch.zeros(0)), "predictions"),
        (lambda: calibrated_survival(torch.zeros(3, 2), torch.tensor([1.0, 0.0])), "temperatures"),
        (lambda: survival_labels(torch.tensor([4]), 3), "accepted"),
        (lambda: survival_labels(torch.tensor([1.0]), 3), "accepted"),
        (lambda: save_calibration("/nonexistent", torch.tensor([0.0])), "temperatures"),
        (lambda: analytic_acceptance(torch.zeros(2, 3), torch.zeros(2, 4)), "target_probs"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
