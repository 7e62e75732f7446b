"""What a verifier returns for one round."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class VerifyResult:
    """Outcome of one verification round.

    Attributes:
        emitted: ``[n + 1]`` int64: the ``n`` accepted draft tokens, then the bonus token.
        num_accepted: ``n`` as a host int.
        hidden: ``[n + 1, taps, H]`` target hidden states of the committed rows (the root, then the
            accepted drafts) at the requested ``hidden_layers``; ``None`` when none were requested.

    Example:
        >>> VerifyResult(emitted=torch.tensor([4, 9]), num_accepted=1).emitted.tolist()
        [4, 9]
    """

    emitted: torch.Tensor
    num_accepted: int
    hidden: torch.Tensor | None = None
