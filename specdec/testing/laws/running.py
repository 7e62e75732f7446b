"""Drawing independent samples from a decode system, for the law tests."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

__all__ = ["sample_continuations"]


@torch.no_grad()
def sample_continuations(
    target,
    context: Sequence[int],
    num_samples: int,
    num_tokens: int,
    *,
    drafter=None,
    verifier=None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    num_draft_tokens: int = 4,
    seed: int = 0,
) -> torch.Tensor:
    """``num_samples`` independent continuations of ``context`` by :func:`specdec.generate`.

    Each sample is its own request with seed ``seed + i``, so samples are independent draws of the
    law of the next ``num_tokens`` tokens: one row is one outcome for :func:`one_sample_chi2` against
    ``autoregressive_law(target_logits, context, num_tokens, ...)``.

    Args:
        target: the :class:`specdec.models.Target` (e.g. a :class:`MarkovTarget`).
        context: the prompt tokens.
        drafter, verifier, num_draft_tokens: as in :func:`specdec.generate` (``drafter=None``: plain decoding).
        temperature, top_p, top_k: the sampling law.

    Returns:
        ``[num_samples, num_tokens]`` int64 on the CPU.

    Example:
        >>> from specdec.testing.laws import MarkovLaw, MarkovTarget
        >>> target = MarkovTarget(MarkovLaw(4, seed=0), max_seq_len=16)
        >>> sample_continuations(target, (1, 2), 5, 3).shape
        torch.Size([5, 3])
    """
    from specdec.decode import generate

    for name, value, minimum in (("num_samples", num_samples, 1), ("num_tokens", num_tokens, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    ids = list(context)
    try:
        if not ids or any(isinstance(t, bool) for t in ids):
            raise TypeError
        ids = [operator.index(t) for t in ids]
    except TypeError:
        raise ValueError(f"context: expected a non-empty sequence of integer token ids, got {ids!r}") from None
    prompt = torch.tensor(ids, dtype=torch.long, device=target.device)
    out = generate(
        target,
        prompt.expand(num_samples, -1),
        num_tokens,
        drafter=drafter,
        verifier=verifier,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        seed=seed,
        num_draft_tokens=num_draft_tokens,
    )
    tokens = out.tokens.cpu()
    if tokens.shape != (num_samples, num_tokens):
        raise ValueError(f"target: expected {num_samples} continuations of {num_tokens} tokens, got shape {tuple(tokens.shape)}")
    return tokens
