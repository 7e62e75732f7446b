"""Which outcomes to pre-draft for: the drafter's own law at each draft position ("glue" law) ranks them."""

from __future__ import annotations

import torch

from specdec.drafters.ssd.outcome import VerificationOutcome

__all__ = ["OutcomePredictor"]


class OutcomePredictor:
    """Predicts the outcome ``(k, bonus)`` of verifying a chain from the drafter's own laws.

    ``glue [K + 1, V]`` holds the drafter's law of the token after ``context + d_1..d_j`` for ``j = 0..K``.
    Taking the drafter as a stand-in for the target and a per-token acceptance rate ``a``:

    * ``P(k accepted) = a^k (1 - a)`` for ``k < K`` and ``a^K`` for ``k = K``;
    * the bonus after a rejection at ``k < K`` cannot be ``d_{k+1}`` (its residual mass is zero), so
      ``P(bonus = t | k) = glue[k]`` with ``d_{k+1}`` removed, renormalised; after a full acceptance it
      is ``glue[K]``.

    :meth:`predict` keeps the ``F_k`` likeliest bonus tokens at each position, with ``F_0..F_K`` from a
    fan-out policy whose caps are the candidates of positive mass.

    Example:
        >>> glue = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
        >>> OutcomePredictor().predict(glue, torch.tensor([0]), [1, 2])
        [VerificationOutcome(k=0, bonus=1), VerificationOutcome(k=1, bonus=2), VerificationOutcome(k=1, bonus=0)]
        >>> OutcomePredictor().probabilities(glue, torch.tensor([0]), acceptance=0.5)[0].tolist()
        [0.0, 0.375, 0.125]
    """

    @staticmethod
    def bonus_laws(glue: torch.Tensor, draft_tokens: torch.Tensor) -> torch.Tensor:
        """``[K + 1, V]`` law of the bonus token given the round ended at position ``k``."""
        k = draft_tokens.numel()
        if glue.ndim != 2 or glue.shape[0] != k + 1:
            raise ValueError(
                f"glue: expected shape ({k + 1}, V) (one law per draft position and one after), got {tuple(glue.shape)}"
            )
        laws = glue.float().clone()
        if k:
            laws[torch.arange(k, device=laws.device), draft_tokens.to(laws.device)] = 0.0
        mass = laws.sum(-1, keepdim=True)
        return torch.where(mass > 0, laws / mass.clamp_min(torch.finfo(laws.dtype).tiny), laws)

    def probabilities(self, glue: torch.Tensor, draft_tokens: torch.Tensor, *, acceptance: float) -> torch.Tensor:
        """``[K + 1, V]``: ``P(k accepted, bonus = t)`` under the drafter's law and acceptance rate ``a``."""
        if not 0.0 <= acceptance <= 1.0:
            raise ValueError(f"acceptance: expected a rate in [0, 1], got {acceptance!r}")
        k = draft_tokens.numel()
        reach = torch.tensor([acceptance**j for j in range(k + 1)], dtype=torch.float32, device=glue.device)
        stop = torch.cat([reach[:-1] * (1.0 - acceptance), reach[-1:]])  # [K + 1]
        return stop[:, None] * self.bonus_laws(glue, draft_tokens)

    def candidates(self, glue: torch.Tensor, draft_tokens: torch.Tensor) -> list[int]:
        """Bonus tokens of positive mass at each position: the caps of a fan-out."""
        return (self.bonus_laws(glue, draft_tokens) > 0).sum(-1).tolist()

    def predict(self, glue: torch.Tensor, draft_tokens: torch.Tensor, fan_out: list[int]) -> list[VerificationOutcome]:
        """The ``fan_out[k]`` likeliest outcomes at each position ``k`` (ties by token id), position by position."""
        k = draft_tokens.numel()
        if len(fan_out) != k + 1:
            raise ValueError(f"fan_out: expected {k + 1} counts (positions 0..{k}), got {list(fan_out)!r}")
        laws = self.bonus_laws(glue, draft_tokens)
        width = max(fan_out) if fan_out else 0
        if width == 0:
            return []
        values, index = torch.sort(laws, dim=-1, descending=True, stable=True)
        values, index = values[:, :width].tolist(), index[:, :width].tolist()
        out = []
        for pos, count in enumerate(fan_out):
            out.extend(VerificationOutcome(pos, int(t)) for t, v in zip(index[pos][:count], values[pos][:count]) if v > 0)
        return out
