"""Attention masks as the kernels apply them, and the query shapes the split-KV kernel takes.

Example:
    >>> additive_mask(torch.tensor([[True, False]]), torch.float32)
    tensor([[0., -inf]])
    >>> split_kv_takes(rows=64, head_dim=128), split_kv_takes(rows=200, head_dim=128), split_kv_takes(rows=4, head_dim=24)
    (True, False, False)
"""

from __future__ import annotations

import torch

__all__ = ["MAX_ROWS", "additive_mask", "split_kv_takes"]

MAX_ROWS = 128  # query rows a KV head: the kernel pads them to one power-of-two tile


def additive_mask(attn_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask (``True`` where a row may attend a slot) as SDPA applies it: ``0`` there, ``-inf`` elsewhere, in
    ``dtype``. SDPA builds this from a boolean mask on every call; a runtime builds it once a forward instead (one
    launch fewer a layer), with the same bits out."""
    return torch.zeros(attn_mask.shape, dtype=dtype, device=attn_mask.device).masked_fill_(~attn_mask, float("-inf"))


def split_kv_takes(*, rows: int, head_dim: int) -> bool:
    """Whether :func:`specdec.kernels.attention.decode_attention` takes ``rows`` query rows a KV head (1 to
    ``MAX_ROWS``) of ``head_dim`` (a power of two from 16 to 256)."""
    return 1 <= rows <= MAX_ROWS and 16 <= head_dim <= 256 and head_dim & (head_dim - 1) == 0
