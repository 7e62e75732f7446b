"""Calibrating DSpark's confidence head: Sequential Temperature Scaling, ECE, reliability plots.

DSpark's confidence head gives, per draft position ``k`` (``1 .. gamma``), a logit ``l_k`` whose
sigmoid ``c_k`` estimates the *conditional* probability that draft token ``k`` survives verification
given that tokens ``1 .. k-1`` did. The prefix scheduler uses the *survival*
``a_k = c_1 * ... * c_k``, the probability that the first ``k`` draft tokens all survive, by its
magnitude (it is an expected accepted length), so the products must be calibrated, not only ranked.

**Labels.** ``labels [n, gamma]`` are survival labels, one row per drafted block:

* *observed*: ``labels[i, k-1] = 1`` when the first ``k`` draft tokens of block ``i`` were all
  accepted by the verifier, else ``0``; :func:`survival_labels` builds them from the accepted counts.
  This is the event the scheduler bets on and the default for calibration.
* *analytic*: ``labels[i, k-1] = prod_{j <= k} (1 - 0.5 * ||p_d,j - p_t,j||_1)``
  (:func:`analytic_acceptance`), the survival of the prefix when each draft token is sampled from
  ``p_d,j`` and verified by rejection sampling against ``p_t,j`` at temperature 1, given the drafted
  prefix. Soft labels in ``[0, 1]``; ECE is defined the same way for them.

**Sequential Temperature Scaling** (DSpark, Sec. 3.2.1): for ``k = 1 .. gamma`` in order, a 1-D grid
search picks the ``T_k`` that minimises the ECE of ``a_k(T) = a_{k-1} * sigmoid(l_k / T)`` against
``labels[:, k-1]``, with ``a_{k-1}`` built from the already chosen ``T_1 .. T_{k-1}`` and held fixed.
A positive temperature is monotone in ``l_k``, so the ranking of the confidences is preserved.

**ECE** (Naeini et al., 2015): ``n_b`` equal-width bins over ``[0, 1]``;
``ECE = sum_b (|B_b| / N) * |mean(pred in B_b) - mean(label in B_b)|``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

__all__ = [
    "CALIBRATION_FILE",
    "analytic_acceptance",
    "calibrated_survival",
    "expected_calibration_error",
    "load_calibration",
    "plot_reliability",
    "position_ece",
    "reliability_curve",
    "save_calibration",
    "sequential_temperature_scaling",
    "survival_labels",
]

# written beside config.json; published loaders ignore it, DSparkDrafter.from_pretrained reads it
CALIBRATION_FILE = "confidence_calibration.json"


def survival_labels(accepted: torch.Tensor, gamma: int) -> torch.Tensor:
    """Observed survival labels ``[n, gamma]`` float32 from accepted draft counts ``accepted [n]``.

    ``labels[i, k-1] = 1`` iff ``accepted[i] >= k``: the first ``k`` drafts of block ``i`` survived.

    Example:
        >>> survival_labels(torch.tensor([0, 2, 3]), 3)
        tensor([[0., 0., 0.],
                [1., 1., 0.],
                [1., 1., 1.]])
    """
    accepted = torch.as_tensor(accepted)
    if accepted.ndim != 1 or accepted.dtype.is_floating_point or accepted.dtype == torch.bool:
        raise ValueError(
            f"accepted: expected a 1-D integer tensor of accepted counts, got {accepted.dtype} shape {tuple(accepted.shape)}"
        )
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma: expected an int >= 1, got {gamma!r}")
    if accepted.numel() and (int(accepted.min()) < 0 or int(accepted.max()) > gamma):
        raise ValueError(
            f"accepted: expected counts in [0, {gamma}], got values in [{int(accepted.min())}, {int(accepted.max())}]"
        )
    return (accepted[:, None] > torch.arange(gamma, device=accepted.device)).float()


def analytic_acceptance(draft_probs: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Per-position acceptance of rejection sampling, ``1 - 0.5 * ||p_d - p_t||_1``: ``[..., V]`` -> ``[...]``.

    Its cumulative product over positions is the analytic survival label.

    Example:
        >>> analytic_acceptance(torch.tensor([0.5, 0.5]), torch.tensor([0.7, 0.3]))
        tensor(0.8000)
    """
    if draft_probs.shape != target_probs.shape:
        raise ValueError(
            f"target_probs: expected the shape of draft_probs {tuple(draft_probs.shape)}, got {tuple(target_probs.shape)}"
        )
    tv = 0.5 * (draft_probs.float() - target_probs.float()).abs().sum(-1)
    return (1.0 - tv).clamp(0.0, 1.0)


def _check_pair(predictions: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None, name: str = "predictions"):
    predictions = torch.as_tensor(predictions)
    labels = torch.as_tensor(labels)
    if predictions.shape != labels.shape:
        raise ValueError(f"labels: expected the shape of {name} {tuple(predictions.shape)}, got {tuple(labels.shape)}")
    if predictions.numel() == 0:
        raise ValueError(f"{name}: expected at least one value, got an empty tensor")
    for arg, t in ((name, predictions), ("labels", labels)):
        t = t.double()
        if not bool(torch.isfinite(t).all()) or float(t.min()) < 0 or float(t.max()) > 1:
            raise ValueError(f"{arg}: expected finite values in [0, 1], got values in [{float(t.min())}, {float(t.max())}]")
    if mask is None:
        mask = torch.ones_like(predictions, dtype=torch.bool)
    else:
        mask = torch.as_tensor(mask, device=predictions.device)
        if mask.shape != predictions.shape or mask.dtype != torch.bool:
            raise ValueError(
                f"mask: expected a bool tensor of shape {tuple(predictions.shape)}, got {mask.dtype} shape {tuple(mask.shape)}"
            )
    return predictions.double(), labels.double().to(predictions.device), mask


def _check_bins(num_bins) -> int:
    if isinstance(num_bins, bool) or not isinstance(num_bins, int) or num_bins < 1:
        raise ValueError(f"num_bins: expected an int >= 1, got {num_bins!r}")
    return num_bins


def _binned_ece(predictions: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, num_bins: int) -> torch.Tensor:
    """ECE of each row: ``predictions [G, n]``, ``labels [n]``, ``weights [n]`` -> ``[G]`` float64."""
    bins = (predictions * num_bins).long().clamp(0, num_bins - 1)  # [G, n]
    g = predictions.shape[0]
    gap = torch.zeros(g, num_bins, dtype=torch.float64, device=predictions.device)
    gap.scatter_add_(1, bins, (predictions - labels[None]) * weights[None])
    total = weights.sum()
    return gap.abs().sum(1) / total.clamp(min=1e-300)


def expected_calibration_error(
    predictions: torch.Tensor, labels: torch.Tensor, *, num_bins: int = 10, mask: torch.Tensor | None = None
) -> float:
    """Binned ECE of ``predictions`` against ``labels`` (same shape, any, values in ``[0, 1]``).

    Args:
        predictions: predicted probabilities (e.g. survival ``a_k``).
        labels: 0/1 outcomes or soft labels.
        num_bins: equal-width bins over ``[0, 1]``.
        mask: bool, same shape: entries to count (``None`` = all).

    Example:
        >>> ece = expected_calibration_error(torch.tensor([0.9, 0.9, 0.2, 0.2]), torch.tensor([1.0, 1.0, 0.0, 1.0]))
        >>> round(ece, 6)      # bin 9: |0.9 - 1| * 2/4; bin 2: |0.2 - 0.5| * 2/4
        0.2
    """
    predictions, labels, mask = _check_pair(predictions, labels, mask)
    num_bins = _check_bins(num_bins)
    w = mask.flatten().double()
    if float(w.sum()) == 0:
        raise ValueError("mask: expected at least one entry to count, got none")
    return float(_binned_ece(predictions.flatten()[None], labels.flatten(), w, num_bins)[0])


def position_ece(
    survival: torch.Tensor, labels: torch.Tensor, *, num_bins: int = 10, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """ECE per draft position: ``survival [n, gamma]``, ``labels [n, gamma]`` -> ``[gamma]`` float64 (NaN if none counted).

    ``mask`` (bool ``[n, gamma]``, ``None`` = all) picks the entries counted at each position.

    Example:
        >>> survival = torch.tensor([[0.9, 0.5], [0.9, 0.5]])
        >>> labels = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
        >>> position_ece(survival, labels)     # position 1: |0.9 - 1|; position 2: |0.5 - 0.5|
        tensor([0.1000, 0.0000], dtype=torch.float64)
        >>> position_ece(survival, labels, mask=torch.tensor([[True, False], [True, False]]))
        tensor([0.1000,    nan], dtype=torch.float64)
    """
    survival, labels, mask = _check_pair(survival, labels, mask, "survival")
    if survival.ndim != 2:
        raise ValueError(f"survival: expected [n, gamma], got shape {tuple(survival.shape)}")
    num_bins = _check_bins(num_bins)
    out = torch.full((survival.shape[1],), float("nan"), dtype=torch.float64)
    for k in range(survival.shape[1]):
        w = mask[:, k].double()
        if float(w.sum()) > 0:
            out[k] = _binned_ece(survival[None, :, k], labels[:, k], w, num_bins)[0]
    return out


def reliability_curve(
    predictions: torch.Tensor, labels: torch.Tensor, *, num_bins: int = 10, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(mean prediction, mean label, count)`` per bin, each ``[num_bins]`` float64 (NaN means for empty bins).

    ``predictions`` and ``labels`` have the same shape (any; flattened), values in ``[0, 1]``; ``mask``
    (bool, same shape, ``None`` = all) picks the entries counted.

    Example:
        >>> mean_p, mean_y, count = reliability_curve(torch.tensor([0.1, 0.3, 0.8]), torch.tensor([0.0, 1.0, 1.0]), num_bins=4)
        >>> mean_p
        tensor([0.1000, 0.3000,    nan, 0.8000], dtype=torch.float64)
        >>> mean_y, count
        (tensor([0., 1., nan, 1.], dtype=torch.float64), tensor([1., 1., 0., 1.], dtype=torch.float64))
    """
    predictions, labels, mask = _check_pair(predictions, labels, mask)
    num_bins = _check_bins(num_bins)
    p, y, w = predictions.flatten(), labels.flatten(), mask.flatten().double()
    bins = (p * num_bins).long().clamp(0, num_bins - 1)
    count = torch.zeros(num_bins, dtype=torch.float64).scatter_add_(0, bins, w)
    mean_p = torch.zeros(num_bins, dtype=torch.float64).scatter_add_(0, bins, p * w) / count
    mean_y = torch.zeros(num_bins, dtype=torch.float64).scatter_add_(0, bins, y * w) / count
    return mean_p, mean_y, count


def default_grid() -> torch.Tensor:
    """Temperatures ``10^-1.5 .. 10^1.5``, 301 log-spaced points, ``1.0`` exactly among them."""
    return torch.logspace(-1.5, 1.5, 301, dtype=torch.float64)


def _position_factor(logits: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    # the calibrated conditional confidence of one position; earlier positions enter the product through it
    return torch.sigmoid(logits / temperature)


def calibrated_survival(confidence_logits: torch.Tensor, temperatures: torch.Tensor | None = None) -> torch.Tensor:
    """Survival ``a_k = prod_{j <= k} sigmoid(l_j / T_j)``: ``[n, gamma]`` logits, ``[gamma]`` temperatures -> ``[n, gamma]``.

    Example:
        >>> calibrated_survival(torch.tensor([[0.0, 0.0]]), torch.tensor([1.0, 2.0]))
        tensor([[0.5000, 0.2500]])
    """
    logits = torch.as_tensor(confidence_logits).float()
    if logits.ndim != 2:
        raise ValueError(f"confidence_logits: expected [n, gamma], got shape {tuple(logits.shape)}")
    if temperatures is None:
        return torch.sigmoid(logits).cumprod(1)
    t = torch.as_tensor(temperatures, dtype=torch.float32, device=logits.device)
    if t.shape != (logits.shape[1],) or not bool(torch.isfinite(t).all()) or not bool((t > 0).all()):
        raise ValueError(f"temperatures: expected {logits.shape[1]} finite values > 0, got {t.tolist()}")
    return torch.sigmoid(logits / t).cumprod(1)


def sequential_temperature_scaling(
    confidence_logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    grid: Sequence[float] | torch.Tensor | None = None,
    num_bins: int = 10,
    mask: torch.Tensor | None = None,
    from_probs: bool = False,
) -> torch.Tensor:
    """Per-position temperatures of the confidence logits that calibrate the survival products, left to right.

    Args:
        confidence_logits: ``[n, gamma]`` raw confidence-head logits ``l_k`` of ``n`` held-out blocks
            (``from_probs=True``: confidences ``c_k`` in ``(0, 1)``, turned into logits).
        labels: ``[n, gamma]`` survival labels (observed 0/1 or analytic, see the module docstring).
        grid: candidate temperatures (> 0); ``None`` = :func:`default_grid`.
        num_bins: ECE bins.
        mask: ``[n, gamma]`` bool, entries to count (e.g. positions a block never drafted).

    Returns:
        ``temperatures [gamma]`` float32. Ties in ECE go to the temperature closest to 1.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> true = torch.randn(4000, 1, generator=g) * 2
        >>> labels = torch.bernoulli(torch.sigmoid(true), generator=g)
        >>> t = sequential_temperature_scaling(3 * true, labels)          # logits 3x too sharp
        >>> bool(2.4 < t[0] < 3.6)
        True
    """
    values = torch.as_tensor(confidence_logits)
    if values.ndim != 2:
        raise ValueError(f"confidence_logits: expected [n, gamma], got shape {tuple(values.shape)}")
    if not values.dtype.is_floating_point:
        raise ValueError(f"confidence_logits: expected a floating tensor, got {values.dtype}")
    values = values.double()
    if from_probs:
        if not bool(((values > 0) & (values < 1)).all()):
            raise ValueError(
                f"confidence_logits: with from_probs=True expected confidences in (0, 1), got values in [{float(values.min())}, {float(values.max())}]"
            )
        values = torch.logit(values)
    elif not bool(torch.isfinite(values).all()):
        raise ValueError("confidence_logits: expected finite logits, got NaN or inf")
    _, labels, mask = _check_pair(torch.sigmoid(values), labels, mask, "confidence_logits")
    num_bins = _check_bins(num_bins)
    grid_t = default_grid() if grid is None else torch.as_tensor(grid, dtype=torch.float64).flatten()
    if grid_t.numel() == 0 or not bool(torch.isfinite(grid_t).all()) or not bool((grid_t > 0).all()):
        raise ValueError(f"grid: expected a non-empty list of finite temperatures > 0, got {grid_t.tolist()}")
    n, gamma = values.shape
    temps = torch.ones(gamma, dtype=torch.float64)
    prefix = torch.ones(n, dtype=torch.float64)  # a_{k-1} under the temperatures already chosen
    # prefer the least change among equal-ECE temperatures (e.g. a position whose labels are all 0)
    closeness = grid_t.log().abs()
    for k in range(gamma):
        w = mask[:, k].double()
        if float(w.sum()) > 0:
            cand = prefix[None] * _position_factor(values[None, :, k], grid_t[:, None])  # [G, n]
            ece = _binned_ece(cand, labels[:, k], w, num_bins)
            best = ece.min()
            tied = ece <= best + 1e-12
            temps[k] = grid_t[torch.where(tied, closeness, torch.full_like(closeness, math.inf)).argmin()]
        prefix = prefix * _position_factor(values[:, k], temps[k])
    return temps.float()


def save_calibration(folder, temperatures: torch.Tensor, **info) -> Path:
    """Write ``confidence_calibration.json`` (the temperatures + ``info``) into a checkpoint folder.

    Args:
        folder: an existing checkpoint folder.
        temperatures: ``[gamma]`` per-position temperatures (finite, > 0), e.g. from
            :func:`sequential_temperature_scaling`.
        info: extra JSON-serialisable fields stored beside them.

    Returns:
        the path of the written file.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> save_calibration(folder, torch.tensor([1.0, 2.0]), num_blocks=100).name
        'confidence_calibration.json'
        >>> load_calibration(folder)
        tensor([1., 2.])
    """
    t = torch.as_tensor(temperatures, dtype=torch.float64).flatten()
    if t.numel() == 0 or not bool(torch.isfinite(t).all()) or not bool((t > 0).all()):
        raise ValueError(f"temperatures: expected finite values > 0, got {t.tolist()}")
    path = Path(folder) / CALIBRATION_FILE
    path.write_text(json.dumps({"method": "sequential_temperature_scaling", "temperatures": t.tolist(), **info}, indent=2))
    return path


def load_calibration(folder) -> torch.Tensor | None:
    """The temperatures ``[gamma]`` float32 in ``folder/confidence_calibration.json``, or ``None`` when there is no such file.

    Example:
        >>> import tempfile
        >>> load_calibration(tempfile.mkdtemp()) is None
        True
        >>> folder = tempfile.mkdtemp()
        >>> _ = save_calibration(folder, torch.tensor([0.5, 1.0, 4.0]))
        >>> load_calibration(folder)
        tensor([0.5000, 1.0000, 4.0000])
    """
    path = Path(folder) / CALIBRATION_FILE
    if not path.is_file():
        return None
    raw = json.loads(path.read_text())
    if not isinstance(raw.get("temperatures"), list):
        raise ValueError(f"{CALIBRATION_FILE}: expected a 'temperatures' list, got {raw.get('temperatures')!r}")
    return torch.tensor(raw["temperatures"], dtype=torch.float32)


def plot_reliability(
    labels: torch.Tensor,
    path,
    *,
    curves: Mapping[str, torch.Tensor],
    mask: torch.Tensor | None = None,
    num_bins: int = 10,
    positions: Sequence[int] | None = None,
) -> Path:
    """Reliability diagrams of survival predictions, one panel per draft position, several curves per panel.

    Args:
        labels: ``[n, gamma]`` survival labels.
        path: image file to write.
        curves: name -> ``[n, gamma]`` survival predictions of the same ``n`` blocks ``labels``
            describes (e.g. ``{"raw": a, "STS": a_cal}``); the legend shows each curve's ECE.
        mask: ``[n, gamma]`` bool, entries to count (``None`` = all).
        num_bins: equal-width bins over ``[0, 1]``.
        positions: 0-based positions to draw (``None`` = all).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> import os, tempfile
        >>> g = torch.Generator().manual_seed(0)
        >>> survival = torch.rand(200, 2, generator=g).cumprod(1)      # [n, gamma]
        >>> labels = torch.bernoulli(survival, generator=g)             # [n, gamma]
        >>> path = plot_reliability(labels, os.path.join(tempfile.mkdtemp(), "reliability.png"),
        ...                         curves={"raw": survival, "squared": survival ** 2})
        >>> path.name, path.stat().st_size > 0
        ('reliability.png', True)
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not curves:
        raise ValueError("curves: expected at least one name -> survival tensor, got none")
    labels = torch.as_tensor(labels)
    if labels.ndim != 2:
        raise ValueError(f"labels: expected [n, gamma], got shape {tuple(labels.shape)}")
    gamma = labels.shape[1]
    positions = list(range(gamma)) if positions is None else list(positions)
    if not positions or any(not 0 <= k < gamma for k in positions):
        raise ValueError(f"positions: expected indices in [0, {gamma}), got {positions}")
    cols = min(4, len(positions))
    rows = (len(positions) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for i, k in enumerate(positions):
        ax = axes[i // cols][i % cols]
        ax.plot([0, 1], [0, 1], "--", color="0.6", linewidth=1)
        for name, surv in curves.items():
            m = None if mask is None else mask[:, k]
            mean_p, mean_y, count = reliability_curve(surv[:, k], labels[:, k], num_bins=num_bins, mask=m)
            keep = count > 0
            ece = expected_calibration_error(surv[:, k], labels[:, k], num_bins=num_bins, mask=m)
            ax.plot(mean_p[keep].numpy(), mean_y[keep].numpy(), "o-", markersize=3, label=f"{name} ECE={ece:.3f}")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_title(f"position {k + 1}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.25)
    for j in range(len(positions), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.supxlabel("predicted survival")
    fig.supylabel("observed survival")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
