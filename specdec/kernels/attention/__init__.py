"""Masked attention of a few query rows over a KV cache (a decode or verify step): a pure-PyTorch reference and a
split-KV Triton kernel, one signature. ``backend``: ``"auto"`` (Triton on CUDA, the reference elsewhere), ``"triton"``
or ``"torch"``. See ``README.md``.
"""

from __future__ import annotations

import torch

from ..backend import use_triton
from .mask import MAX_ROWS, additive_mask, split_kv_takes
from .naive import decode_attention_torch
from .split_kv import decode_attention_triton

__all__ = ["MAX_ROWS", "additive_mask", "decode_attention", "decode_attention_token_major", "split_kv_takes"]


def decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    mask: torch.Tensor,
    *,
    splits: int | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """``softmax(q k^T / sqrt(D) + mask) v`` for ``q [B, Hkv, R, D]`` over ``k_cache, v_cache [B, Hkv, S, D]``.

    ``R`` rows a KV head (the query heads that share it, times the new tokens: :func:`specdec.models.dense.attend_cache`'s
    layout), at most 128; ``D`` a power of two from 16 to 256; ``mask [1 or B, 1, R, S]`` additive (``0`` where a
    row may attend a slot, ``-inf`` elsewhere; :func:`additive_mask`) or boolean (``True`` where
    it may). Softmax and sums in float32; returns ``[B, Hkv, R, D]`` in ``q.dtype``. ``splits``: pieces of the cache
    each batch-head's slots are cut into (Triton only; ``None`` picks enough for two programs a multiprocessor at batch
    1, from the slots and KV heads alone, so a batch item's output equals its output alone).

    Example:
        >>> q, k, v = torch.ones(1, 1, 2, 16), torch.ones(1, 1, 3, 16), torch.arange(3.0).view(1, 1, 3, 1).expand(1, 1, 3, 16)
        >>> mask = torch.tensor([[[[True, True, False], [True, True, True]]]])
        >>> decode_attention(q, k, v, mask, backend="triton")[0, 0, :, 0]
        tensor([0.5000, 1.0000])
    """
    mask = _checked(q, k_cache, v_cache, mask, splits)
    if use_triton(backend, q.device) and q.dtype != torch.float64:  # the kernel's dots take 32- and 16-bit inputs
        return decode_attention_triton(q, k_cache, v_cache, mask, splits=splits)
    return decode_attention_torch(q, k_cache, v_cache, mask)


def decode_attention_token_major(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    mask: torch.Tensor,
    tokens: int,
    *,
    splits: int | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """:func:`decode_attention` laid out as the output projection reads it: ``[B, T, Hkv * G * D]``.

    ``q [B, Hkv, R, D]`` with ``R = G * tokens``: row ``g * T + t`` is query head ``g`` of its KV head at token ``t``
    (:func:`specdec.models.dense.attend_cache`'s layout), and lands at ``[b, t, (h * G + g) * D : (h * G + g + 1) *
    D]``. The split-KV kernel writes it there, so no transposing copy sits between the attention and the projection
    at ``T > 1``; the reference transposes its :func:`decode_attention` output. The same values as
    ``decode_attention(...).reshape(B, Hkv * G, T, D).transpose(1, 2).reshape(B, T, -1)``, bit for bit.

    Example:
        >>> q, k, v = torch.ones(1, 1, 4, 16), torch.ones(1, 1, 3, 16), torch.arange(3.0).view(1, 1, 3, 1).expand(1, 1, 3, 16)
        >>> mask = torch.tensor([[[[True, False, False], [True, True, False]] * 2]])  # 2 heads x 2 tokens
        >>> decode_attention_token_major(q, k, v, mask, 2, backend="triton")[0, :, ::16]
        tensor([[0.0000, 0.0000],
                [0.5000, 0.5000]])
    """
    mask = _checked(q, k_cache, v_cache, mask, splits)
    bsz, hkv, r, d = q.shape
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1 or r % tokens:
        raise ValueError(f"tokens: expected a positive int that divides q's {r} rows a KV head, got {tokens!r}")
    if use_triton(backend, q.device) and q.dtype != torch.float64:
        return decode_attention_triton(q, k_cache, v_cache, mask, splits=splits, tokens=tokens)
    out = decode_attention_torch(q, k_cache, v_cache, mask)  # [B, Hkv, G*T, D]
    return out.reshape(bsz, hkv * (r // tokens), tokens, d).transpose(1, 2).reshape(bsz, tokens, -1)


def _checked(q, k_cache, v_cache, mask, splits) -> torch.Tensor:
    """The arguments checked (see :func:`decode_attention`); returns the mask, additive."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("mask", mask)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-D tensor, got {getattr(t, 'shape', type(t).__name__)}")
        if t.device != q.device:
            raise ValueError(f"{name}: expected device {q.device} (q's), got {t.device}")
    if k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"k_cache, v_cache: expected q's dtype {q.dtype}, got {k_cache.dtype} and {v_cache.dtype}")
    bsz, hkv, r, d = q.shape
    if k_cache.shape[:2] != (bsz, hkv) or k_cache.shape[3] != d or v_cache.shape != k_cache.shape:
        raise ValueError(
            f"k_cache, v_cache: expected [B={bsz}, Hkv={hkv}, S, D={d}] each, got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    s = k_cache.shape[2]
    if mask.shape[0] not in (1, bsz) or mask.shape[1] != 1 or mask.shape[2:] != (r, s):
        raise ValueError(f"mask: expected [1 or {bsz}, 1, R={r}, S={s}], got {tuple(mask.shape)}")
    if not 1 <= r <= MAX_ROWS:
        raise ValueError(f"q: expected 1 to {MAX_ROWS} rows a KV head, got {r}")
    if not split_kv_takes(rows=r, head_dim=d):
        raise ValueError(f"q: expected a head dim that is a power of two from 16 to 256, got {d}")
    if splits is not None and (isinstance(splits, bool) or not isinstance(splits, int) or splits < 1):
        raise ValueError(f"splits: expected a positive int or None, got {splits!r}")
    if mask.dtype == torch.bool:
        mask = additive_mask(mask, q.dtype)
    elif not mask.is_floating_point():
        raise ValueError(f"mask: expected a boolean or floating (additive) mask, got {mask.dtype}")
    return mask
