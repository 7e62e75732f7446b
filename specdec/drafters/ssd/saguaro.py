"""Saguaro sampling: draw drafts from a law with the top tokens scaled down, so rejections land on them."""

from __future__ import annotations

import math

import torch

__all__ = ["SaguaroTransform"]


class SaguaroTransform:
    """The proposal-law transform ``q -> sigma(q)``: the ``top`` most likely tokens of ``q`` get their mass
    multiplied by ``scale`` (``C``), then the law is renormalised.

    On a rejection the bonus token is drawn from ``max(p - sigma(q), 0)``: lowering ``sigma(q)`` on
    ``q``'s top tokens moves residual mass onto exactly the tokens the speculation cache guesses (the
    top-``F`` of ``q``), which raises the cache hit rate at some cost in acceptance. It is exact only
    when the drafts are drawn from ``sigma(q)`` *and* ``sigma(q)`` is what the verifier divides by: the
    drafter reports the transformed law as ``draft_probs``.

    Args:
        top: how many tokens are scaled (``F >= 1``).
        scale: the factor ``C`` in ``(0, 1]`` (1 leaves ``q`` unchanged).

    Example:
        >>> SaguaroTransform(top=1, scale=0.5)(torch.tensor([0.5, 0.25, 0.25]))
        tensor([0.3333, 0.3333, 0.3333])
    """

    def __init__(self, top: int, scale: float):
        if isinstance(top, bool) or not isinstance(top, int) or top < 1:
            raise ValueError(f"top: expected an int >= 1, got {top!r}")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (0.0 < scale <= 1.0) or math.isnan(scale):
            raise ValueError(f"scale: expected a float in (0, 1], got {scale!r}")
        self.top = top
        self.scale = float(scale)

    def __repr__(self) -> str:
        return f"SaguaroTransform(top={self.top}, scale={self.scale})"

    def __call__(self, probs: torch.Tensor) -> torch.Tensor:
        """``sigma(probs)``: ``[..., V]`` laws -> ``[..., V]`` laws of the same dtype.

        Ties at the ``top``-th place are broken by ``torch.topk``; whichever set is chosen, the returned
        tensor is the law the drafter samples from and reports, so both sides agree.
        """
        if not isinstance(probs, torch.Tensor) or not probs.is_floating_point():
            raise TypeError(f"probs: expected a floating tensor [..., V], got {getattr(probs, 'dtype', type(probs).__name__)}")
        top = min(self.top, probs.shape[-1])
        index = torch.topk(probs, top, dim=-1).indices
        weights = torch.ones_like(probs).scatter(-1, index, self.scale)
        out = probs * weights
        return out / out.sum(-1, keepdim=True)
