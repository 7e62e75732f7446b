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

    def __post_init__(self):
        emitted = self.emitted
        if not isinstance(emitted, torch.Tensor) or emitted.ndim != 1:
            desc = f"shape {tuple(emitted.shape)}" if isinstance(emitted, torch.Tensor) else type(emitted).__name__
            raise TypeError(f"emitted: expected a 1-D int64 tensor [n + 1], got {desc}")
        if emitted.dtype == torch.bool or emitted.is_floating_point() or emitted.is_complex():
            raise TypeError(f"emitted: expected integer token ids, got {emitted.dtype}")
        if emitted.numel() < 1:
            raise ValueError("emitted: expected at least the bonus token (a round emits n + 1 >= 1 tokens), got none")
        n = self.num_accepted
        if isinstance(n, bool) or not isinstance(n, int) or n != emitted.numel() - 1:
            raise ValueError(
                f"num_accepted: expected the accepted drafts before the bonus token, emitted.numel() - 1 = "
                f"{emitted.numel() - 1} (a round emits at least the bonus token), got {n!r}"
            )
        hidden = self.hidden
        if hidden is not None:
            if not isinstance(hidden, torch.Tensor) or hidden.ndim != 3 or hidden.shape[0] != emitted.numel():
                desc = f"shape {tuple(hidden.shape)}" if isinstance(hidden, torch.Tensor) else type(hidden).__name__
                raise ValueError(
                    f"hidden: expected [n + 1, taps, H] = [{emitted.numel()}, taps, H] (one row a committed token), got {desc}"
                )
