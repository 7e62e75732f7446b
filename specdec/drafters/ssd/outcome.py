"""What a verification round did to a chain proposal: ``k`` drafts accepted, then the bonus token."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["VerificationOutcome", "read_outcome"]


@dataclass(frozen=True)
class VerificationOutcome:
    """The outcome of verifying a chain ``d_1..d_K``: the first ``k`` drafts accepted, then ``bonus``.

    ``bonus`` is the residual sample at position ``k`` (``k < K``) or the target's next token after a
    full acceptance (``k = K``). A chain verifier never emits ``d_{k+1}`` as the bonus (its residual
    gives it no mass), so ``(k, bonus)`` and the emitted tuple ``d_1..d_k, bonus`` identify each other.

    Example:
        >>> VerificationOutcome(1, 7).emitted(torch.tensor([4, 5]))
        (4, 7)
    """

    k: int
    bonus: int

    def __post_init__(self):
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise ValueError(f"k: expected an int >= 0, got {self.k!r}")
        if isinstance(self.bonus, bool) or not isinstance(self.bonus, int) or self.bonus < 0:
            raise ValueError(f"bonus: expected a token id >= 0, got {self.bonus!r}")

    def emitted(self, draft_tokens: torch.Tensor) -> tuple[int, ...]:
        """The tokens the round emitted: ``draft_tokens[:k]`` (``[K]`` int64, ``K >= k``) then ``bonus``."""
        if draft_tokens.numel() < self.k:
            raise ValueError(f"draft_tokens: expected at least k = {self.k} tokens, got {draft_tokens.numel()}")
        return tuple(int(t) for t in draft_tokens[: self.k].tolist()) + (self.bonus,)


def read_outcome(previous_context: torch.Tensor, draft_tokens: torch.Tensor, context: torch.Tensor) -> VerificationOutcome | None:
    """The outcome of verifying ``draft_tokens`` after ``previous_context``, read from the next ``context``.

    Args:
        previous_context: ``[n]`` the context the drafts were proposed after.
        draft_tokens: ``[K]`` the proposed chain.
        context: ``[m]`` the context of the next round.

    Returns:
        the :class:`VerificationOutcome`, or ``None`` when ``context`` is not ``previous_context`` followed
        by an accepted prefix of the drafts and one more token (another request, a tree verifier that
        accepted a sibling branch, or a loop that emitted something else).

    Example:
        >>> read_outcome(torch.tensor([1, 2]), torch.tensor([4, 5]), torch.tensor([1, 2, 4, 9]))
        VerificationOutcome(k=1, bonus=9)
        >>> read_outcome(torch.tensor([1, 2]), torch.tensor([4, 5]), torch.tensor([1, 2, 6, 9])) is None
        True
    """
    n, m, big_k = previous_context.numel(), context.numel(), draft_tokens.numel()
    k = m - n - 1
    if not 0 <= k <= big_k:
        return None
    expected = torch.cat([previous_context, draft_tokens[:k].to(previous_context.device)])
    if not torch.equal(context[: n + k], expected.to(context.device)):
        return None
    bonus = int(context[-1])
    if k < big_k and bonus == int(draft_tokens[k]):
        return None
    return VerificationOutcome(k, bonus)
