"""Reference q/k RMSNorm and RoPE in plain PyTorch: the dense attention's own arithmetic, the definition the kernel
follows.

``q [B, T, H, D]``, ``k [B, T, Hkv, D]``: each optionally normalised by the scaled RMSNorm (Qwen3's ``q_norm`` /
``k_norm``; Llama has none), moved to ``[B, H, T, D]``, then rotated: ``x * cos + rotate_half(x) * sin`` with
``rotate_half(x) = cat(-x2, x1)`` over the halves of ``D``. Each product and the sum round to the inputs' dtype, as
PyTorch's element-wise ops do.
"""

from __future__ import annotations

import torch

from specdec.kernels.norm.naive import scaled_rms_norm_torch

__all__ = ["qk_norm_rope_cached_torch", "qk_norm_rope_torch", "rotate_half"]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``x [..., D]`` -> ``cat(-x2, x1)`` of its halves ``x1``, ``x2``, ``[..., D]``.

    Example:
        >>> rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0])).tolist()
        [-3.0, -4.0, 1.0, 2.0]
    """
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def qk_norm_rope_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``q [B, T, H, D]``, ``k [B, T, Hkv, D]``, ``cos``, ``sin [1, 1, T, D]`` -> ``(q_out [B, H, T, D],
    k_out [B, Hkv, T, D])``: the scaled RMSNorm by ``q_weight`` / ``k_weight [D]`` (skipped where they are
    ``None``), then RoPE, in the layout the model's code leaves them (not necessarily contiguous).

    Example:
        >>> q, k = torch.tensor([[[[1.0, 2.0]]]]), torch.tensor([[[[3.0, 4.0]]]])   # B = T = H = Hkv = 1, D = 2
        >>> cos, sin = torch.zeros(1, 1, 1, 2), torch.ones(1, 1, 1, 2)               # a quarter turn
        >>> [t.tolist() for t in qk_norm_rope_torch(q, k, cos, sin, None, None, 1e-6)]
        [[[[[-2.0, 1.0]]]], [[[[-4.0, 3.0]]]]]
    """
    if q_weight is not None:
        q, k = scaled_rms_norm_torch(q, q_weight, eps), scaled_rms_norm_torch(k, k_weight, eps)
    q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, H, T, D]
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def qk_norm_rope_cached_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_pos: torch.Tensor,
    cache_slot: torch.Tensor | None = None,
    q_out: torch.Tensor | None = None,
    q_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`qk_norm_rope_torch`, then the rotated ``k`` and ``v [B, T, Hkv, D]`` written into ``k_cache``,
    ``v_cache [N, Hkv, L, D]`` as the runtimes write them; returns ``q_out [B, H, T, D]``.

    Row ``(b, t)`` goes to entry ``[b, :, cache_pos[t]]`` (``cache_slot`` ``None``: one cache per batch row, as
    ``index_copy_``), or, for ``B = 1``, to ``[cache_slot[t], :, cache_pos[t]]`` (the packed rows of many requests).
    With a buffer ``q_out [N, H, Lq, D]`` (and ``cache_slot``), row ``t``'s q goes to ``q_out[cache_slot[t], :,
    q_index[t]]`` instead, and ``q_out`` is returned.

    Example:
        >>> q, k, v = torch.ones(1, 1, 1, 2), torch.ones(1, 1, 1, 2), torch.full((1, 1, 1, 2), 7.0)
        >>> cos, sin = torch.ones(1, 1, 1, 2), torch.zeros(1, 1, 1, 2)                # position 0
        >>> k_cache, v_cache = torch.zeros(2, 1, 3, 2), torch.zeros(2, 1, 3, 2)
        >>> _ = qk_norm_rope_cached_torch(q, k, v, cos, sin, None, None, 0.0, k_cache, v_cache, torch.tensor([2]),
        ...                               torch.tensor([1]))
        >>> v_cache[1, 0, 2].tolist(), bool(k_cache[0].any())
        ([7.0, 7.0], False)
    """
    q_rot, k_out = qk_norm_rope_torch(q, k, cos, sin, q_weight, k_weight, eps)
    if cache_slot is None:
        k_cache.index_copy_(2, cache_pos, k_out)  # [B, Hkv, T, D] into [B, Hkv, L, D]
        v_cache.index_copy_(2, cache_pos, v.transpose(1, 2))
    else:
        k_cache[cache_slot, :, cache_pos] = k_out[0].transpose(0, 1)  # [T, Hkv, D]
        v_cache[cache_slot, :, cache_pos] = v[0]
    if q_out is None:
        return q_rot
    q_out[cache_slot, :, q_index] = q_rot[0].transpose(0, 1)  # [T, H, D]
    return q_out
