"""The reference of :func:`specdec.kernels.attention.decode_attention`: masked attention of a few query rows over a
KV cache, in float32, as one softmax.

Example:
    >>> q, k, v = torch.ones(1, 1, 2, 4), torch.ones(1, 1, 3, 4), torch.arange(3.0).view(1, 1, 3, 1).expand(1, 1, 3, 4)
    >>> mask = torch.tensor([[[[0.0, 0.0, float("-inf")], [0.0, 0.0, 0.0]]]])
    >>> decode_attention_torch(q, k, v, mask)[0, 0, :, 0]
    tensor([0.5000, 1.0000])
"""

from __future__ import annotations

import math

import torch

__all__ = ["decode_attention_torch"]


def decode_attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``softmax(q k^T / sqrt(D) + mask) v`` per batch and KV head, in float32, returned in ``q.dtype``.

    ``q [B, Hkv, R, D]`` (the query heads that share a KV head stacked as rows), ``k_cache, v_cache [B, Hkv, S, D]``,
    ``mask [1 or B, 1, R, S]`` additive (``0`` where a row may attend a slot, ``-inf`` elsewhere). A row with no
    allowed slot gives zeros, as SDPA does (a NaN there would reach every row of the next layer through the cache).
    """
    scores = q.float() @ k_cache.float().transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask.float()
    weights = torch.softmax(scores, dim=-1)
    weights = weights.masked_fill((scores == float("-inf")).all(dim=-1, keepdim=True), 0.0)
    return (weights @ v_cache.float()).to(q.dtype)
