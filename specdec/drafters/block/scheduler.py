"""DSpark's hardware-aware prefix scheduler: how many drafts each request verifies."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["PrefixScheduler"]


class PrefixScheduler:
    """DSpark's hardware-aware prefix scheduler (Algorithm 1), exact (early stop) or 2-step lagged.

    Args:
        steps_per_second: ``SPS(B)`` for ``B = 1, 2, ...`` verify tokens in the batch: entry ``B - 1``
            is the profiled engine steps per second at ``B`` tokens. Batches beyond the table are not
            considered.
        early_stop: stop at the first admission that does not improve ``tau * SPS(B)`` (lossless).
            ``False`` is the retrospective global search, biased unless ``lag`` is used.
        lag: ``0`` (Algorithm 1) or ``2``: the number of admitted drafts is the global-search optimum
            computed on the confidences of two calls earlier; the current call admits that many
            candidates in decreasing order of the current survival. The first two calls fall back to
            the early-stop rule.

    Example:
        >>> sched = PrefixScheduler([1.0, 0.95, 0.9, 0.5])
        >>> sched.schedule(torch.tensor([[0.9, 0.9, 0.9]])).tolist()      # admits 2: (1+.9+.81)*.9 > (1+.9)*.95
        [2]
    """

    def __init__(self, steps_per_second: Sequence[float], *, early_stop: bool = True, lag: int = 0):
        sps = torch.as_tensor(steps_per_second, dtype=torch.float64)
        if sps.ndim != 1 or sps.numel() < 1 or not bool(((sps > 0) & torch.isfinite(sps)).all()):
            raise ValueError(f"steps_per_second: expected a non-empty 1-D table of finite positive values, got {sps.tolist()}")
        if not isinstance(early_stop, bool):
            raise TypeError(f"early_stop: expected a bool, got {early_stop!r}")
        if lag not in (0, 2):
            raise ValueError(f"lag: expected 0 (Algorithm 1) or 2 (the lagged production mode), got {lag!r}")
        self.sps = sps.tolist()
        self.early_stop = bool(early_stop)
        self.lag = lag
        self._history: list[torch.Tensor] = []

    def reset(self) -> None:
        """Start a request: forget the confidences of earlier calls (the lagged mode's history).

        Example:
            >>> sched = PrefixScheduler([1.0, 0.95, 0.9, 0.5], lag=2)
            >>> sched.schedule(torch.tensor([[0.9, 0.9, 0.9]])).tolist()   # first calls: the early-stop rule
            [2]
            >>> sched.reset()                                               # the next call is a first call again
        """
        self._history = []

    def _candidates(self, confidences: torch.Tensor) -> tuple[list[tuple[float, int, int]], int]:
        if confidences.ndim != 2:
            raise ValueError(f"confidences: expected [requests, gamma], got shape {tuple(confidences.shape)}")
        surv = torch.cumprod(confidences.double().clamp(0, 1), dim=1)  # [R, gamma]
        cands = [(float(surv[r, j]), r, j) for r in range(surv.shape[0]) for j in range(surv.shape[1]) if surv[r, j] > 0]
        # decreasing survival; ties by request then position, so prefixes are admitted in order
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        return cands, surv.shape[0]

    def _search(self, confidences: torch.Tensor, early_stop: bool) -> torch.Tensor:
        cands, requests = self._candidates(confidences)
        lengths = [0] * requests
        best_lengths = list(lengths)
        if requests > len(self.sps):
            raise ValueError(f"confidences: {requests} requests exceed the steps_per_second table ({len(self.sps)} entries)")
        tokens, tau = requests, float(requests)
        best = tau * self.sps[tokens - 1]
        for surv, r, j in cands:
            if tokens + 1 > len(self.sps):
                break
            lengths[r] = j + 1
            tokens += 1
            tau += surv
            value = tau * self.sps[tokens - 1]
            if value > best:
                best, best_lengths = value, list(lengths)
            elif early_stop:
                break
        return torch.tensor(best_lengths, dtype=torch.long)

    def schedule(self, confidences: torch.Tensor) -> torch.Tensor:
        """Draft tokens to verify per request: ``confidences [R, gamma]`` -> ``lengths [R]`` int64.

        Positions with confidence 0 are never admitted; ``lengths[r] <= gamma``.
        """
        confidences = torch.as_tensor(confidences).detach().cpu()
        if confidences.ndim == 1:
            confidences = confidences[None]
        if confidences.numel() and not bool(((confidences >= 0) & (confidences <= 1)).all()):  # NaN fails both
            bad = confidences[~((confidences >= 0) & (confidences <= 1))]
            raise ValueError(f"confidences: expected probabilities in [0, 1], got {bad[:3].tolist()}")
        if self.lag == 0:
            return self._search(confidences, self.early_stop)
        self._history.append(confidences)
        if len(self._history) <= self.lag:
            return self._search(confidences, True)
        old = self._history[-1 - self.lag]
        self._history = self._history[-self.lag - 1 :]
        capacity = int(self._search(old, False).sum())
        cands, requests = self._candidates(confidences)
        lengths = [0] * requests
        for _, r, j in cands[:capacity]:
            lengths[r] = max(lengths[r], j + 1)
        return torch.tensor(lengths, dtype=torch.long)
