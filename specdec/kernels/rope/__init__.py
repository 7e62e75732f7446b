"""The dense attention's q/k RMSNorm and RoPE: a pure-PyTorch reference and a one-launch Triton kernel, one signature.

``backend``: ``"auto"`` (Triton on CUDA, the reference elsewhere), ``"triton"`` or ``"torch"``. See ``README.md``.
"""

from __future__ import annotations

import torch

from ..backend import use_triton
from .naive import qk_norm_rope_cached_torch, qk_norm_rope_torch
from .rotary import qk_norm_rope_triton

__all__ = ["qk_norm_rope", "qk_norm_rope_cached"]


def _check(q, k, cos, sin, q_weight, k_weight) -> None:
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    if q.ndim != 4:
        raise ValueError(f"q: expected 4 dims [B, T, H, D], got shape {tuple(q.shape)}")
    bsz, seqlen, _, head_dim = q.shape
    if head_dim % 2:
        raise ValueError(f"q: expected an even head dim D (RoPE rotates its halves), got D = {head_dim}")
    if k.ndim != 4 or (k.shape[0], k.shape[1], k.shape[3]) != (bsz, seqlen, head_dim):
        raise ValueError(f"k: expected shape ({bsz}, {seqlen}, Hkv, {head_dim}) (q's B, T and D), got {tuple(k.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        if tuple(t.shape) != (1, 1, seqlen, head_dim):
            raise ValueError(f"{name}: expected shape (1, 1, {seqlen}, {head_dim}) (q's T and D), got {tuple(t.shape)}")
    if (q_weight is None) != (k_weight is None):
        raise ValueError(
            f"q_weight, k_weight: expected both tensors or both None, got {type(q_weight).__name__} and {type(k_weight).__name__}"
        )
    weights = () if q_weight is None else (("q_weight", q_weight), ("k_weight", k_weight))
    for name, t in weights:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a tensor or None, got {type(t).__name__}")
        if tuple(t.shape) != (head_dim,):
            raise ValueError(f"{name}: expected shape ({head_dim},) (q's head dim D), got {tuple(t.shape)}")
    for name, t in (("k", k), ("cos", cos), ("sin", sin), *weights):
        if t.device != q.device:
            raise ValueError(f"{name}: expected device {q.device} (q's), got {t.device}")


def qk_norm_rope(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    eps: float,
    *,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The dense attention's q/k RMSNorm (Qwen3; none where the weights are ``None``, as in Llama) and RoPE.

    Args:
        q: ``[B, T, H, D]`` queries; k: ``[B, T, Hkv, D]`` keys, ``D`` even. Any strides: the views of the fused
            qkv projection (``split``, then ``view``) are read in place.
        cos, sin: ``[1, 1, T, D]`` RoPE tables of the rows' positions.
        q_weight, k_weight: ``[D]`` scaled-RMSNorm weights, or both ``None``.
        eps: the norm's epsilon.
        backend: ``"auto"`` (Triton on CUDA, else the reference), ``"triton"`` or ``"torch"``.

    Returns:
        ``(q_out [B, H, T, D], k_out [B, Hkv, T, D])``, contiguous: ``x * cos + rotate_half(x) * sin`` of the
        (normed) heads, each product and the sum rounded to the inputs' dtype. The Triton kernel (one launch for
        q and k) runs where ``k``, ``cos``, ``sin`` and the weights have ``q``'s dtype; mixed dtypes promote as
        PyTorch does, and the reference runs.

    Example:
        >>> q, k = torch.tensor([[[[1.0, 2.0]]]]), torch.tensor([[[[3.0, 4.0]]]])   # B = T = H = Hkv = 1, D = 2
        >>> cos, sin = torch.zeros(1, 1, 1, 2), torch.ones(1, 1, 1, 2)               # a quarter turn
        >>> q_out, k_out = qk_norm_rope(q, k, cos, sin, None, None, 1e-6)
        >>> q_out.tolist(), k_out.tolist()
        ([[[[-2.0, 1.0]]]], [[[[-4.0, 3.0]]]])
    """
    _check(q, k, cos, sin, q_weight, k_weight)
    dtypes = {t.dtype for t in (q, k, cos, sin, q_weight, k_weight) if t is not None}
    if use_triton(backend, q.device) and dtypes == {q.dtype} and q.dtype != torch.float64:  # the kernel computes in float32
        return qk_norm_rope_triton(q, k, cos, sin, q_weight, k_weight, eps)
    q_out, k_out = qk_norm_rope_torch(q, k, cos, sin, q_weight, k_weight, eps)
    return q_out.contiguous(), k_out.contiguous()


def _check_q_scatter(q, q_out, q_index, cache_slot) -> None:
    if q_out is None and q_index is None:
        return
    if q_out is None or q_index is None or cache_slot is None:
        raise ValueError(
            "q_out, q_index: expected both with a cache_slot (q's rows go to q_out[cache_slot, :, q_index]), or neither"
        )
    bsz, seqlen, num_heads, head_dim = q.shape
    if not isinstance(q_out, torch.Tensor) or q_out.ndim != 4 or (q_out.shape[1], q_out.shape[3]) != (num_heads, head_dim):
        desc = tuple(q_out.shape) if isinstance(q_out, torch.Tensor) else type(q_out).__name__
        raise ValueError(f"q_out: expected a tensor of shape (N, {num_heads}, L, {head_dim}) (q's H and D), got {desc}")
    if q_out.dtype != q.dtype or q_out.device != q.device:
        raise ValueError(f"q_out: expected q's dtype and device ({q.dtype}, {q.device}), got {q_out.dtype}, {q_out.device}")
    if not isinstance(q_index, torch.Tensor) or q_index.dtype != torch.long or tuple(q_index.shape) != (seqlen,):
        desc = f"{q_index.dtype} {tuple(q_index.shape)}" if isinstance(q_index, torch.Tensor) else type(q_index).__name__
        raise ValueError(f"q_index: expected an int64 tensor of shape ({seqlen},) (one entry a row), got {desc}")
    if q_index.device != q.device:
        raise ValueError(f"q_index: expected device {q.device} (q's), got {q_index.device}")


def _check_cache(q, k, v, k_cache, v_cache, cache_pos, cache_slot) -> None:
    bsz, seqlen, num_kv_heads, head_dim = k.shape
    for name, t in (("v", v), ("k_cache", k_cache), ("v_cache", v_cache), ("cache_pos", cache_pos)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a tensor, got {type(t).__name__}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"v: expected k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if k_cache.ndim != 4 or (k_cache.shape[1], k_cache.shape[3]) != (num_kv_heads, head_dim):
        raise ValueError(
            f"k_cache: expected shape (N, {num_kv_heads}, L, {head_dim}) (k's Hkv and D), got {tuple(k_cache.shape)}"
        )
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache: expected k_cache's shape {tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
    for name, t in (("v", v), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name}: expected q's dtype {q.dtype}, got {t.dtype}")
    indices = (("cache_pos", cache_pos),) if cache_slot is None else (("cache_pos", cache_pos), ("cache_slot", cache_slot))
    for name, t in indices:
        if not isinstance(t, torch.Tensor) or t.dtype != torch.long or tuple(t.shape) != (seqlen,):
            desc = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name}: expected an int64 tensor of shape ({seqlen},) (one entry a row), got {desc}")
    if cache_slot is None and k_cache.shape[0] != bsz:
        raise ValueError(f"k_cache: expected one cache a batch row ({bsz}) without cache_slot, got {k_cache.shape[0]}")
    if cache_slot is not None and bsz != 1:
        raise ValueError(f"cache_slot: expected batch 1 (rows of several requests packed into T), got batch {bsz}")
    for name, t in (("v", v), ("k_cache", k_cache), ("v_cache", v_cache), *indices):
        if t.device != q.device:
            raise ValueError(f"{name}: expected device {q.device} (q's), got {t.device}")


def qk_norm_rope_cached(
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
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """:func:`qk_norm_rope` with the K/V cache write of the same rows in the same launch; returns ``q_out``.

    Args:
        q, k, cos, sin, q_weight, k_weight, eps: as for :func:`qk_norm_rope`.
        v: ``[B, T, Hkv, D]`` values (any strides), written as they are.
        k_cache, v_cache: ``[N, Hkv, L, D]`` of ``q``'s dtype, any strides (the same for both on the Triton path).
        cache_pos: int64 ``[T]``: the cache position of row ``t``.
        cache_slot: ``None`` (row ``(b, t)`` goes to cache ``b``; ``N = B``) or int64 ``[T]``, the cache of row ``t``
            (``B = 1``: the packed rows of several requests).
        q_out, q_index: a buffer ``[N, H, Lq, D]`` of ``q``'s dtype and int64 ``[T]`` (with ``cache_slot``): row
            ``t``'s q goes to ``q_out[cache_slot[t], :, q_index[t]]`` (the packed rows' per-slot attention layout),
            the rest of the buffer untouched; or both ``None``.
        backend: ``"auto"`` (Triton on CUDA, else the reference), ``"triton"`` or ``"torch"``.

    Returns:
        ``q_out [B, H, T, D]``, contiguous (or the given buffer); the rotated ``k`` and ``v`` are in the caches. Positions and slots must
        lie inside the cache (the runtimes check their capacity before a forward): the reference raises on one
        that does not, the kernel skips its write rather than write outside the cache. Two rows of one entry
        leave either row's values (the packed runtimes' discarded padding rows share one).

    Example:
        >>> q, k, v = torch.ones(1, 2, 1, 2), torch.ones(1, 2, 1, 2), torch.ones(1, 2, 1, 2)
        >>> cos, sin = torch.zeros(1, 1, 2, 2), torch.ones(1, 1, 2, 2)              # a quarter turn
        >>> k_cache, v_cache = torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2)
        >>> q_out = qk_norm_rope_cached(q, k, v, cos, sin, None, None, 0.0, k_cache, v_cache, torch.tensor([1, 3]))
        >>> q_out[0, 0].tolist(), k_cache[0, 0, 3].tolist()
        ([[-1.0, 1.0], [-1.0, 1.0]], [-1.0, 1.0])
    """
    _check(q, k, cos, sin, q_weight, k_weight)
    _check_cache(q, k, v, k_cache, v_cache, cache_pos, cache_slot)
    _check_q_scatter(q, q_out, q_index, cache_slot)
    for name, t in (("k", k), ("cos", cos), ("sin", sin), ("q_weight", q_weight), ("k_weight", k_weight)):
        if t is not None and t.dtype != q.dtype:  # a promoted K could not be written into the caches
            raise ValueError(f"{name}: expected q's dtype {q.dtype} (the caches hold it), got {t.dtype}")
    dtypes = {t.dtype for t in (q, k, cos, sin, q_weight, k_weight) if t is not None}
    if (
        use_triton(backend, q.device)
        and dtypes == {q.dtype}
        and q.dtype != torch.float64
        and k_cache.stride() == v_cache.stride()
    ):
        cache = (v, k_cache, v_cache, cache_slot, cache_pos)
        q_scatter = None if q_out is None else (q_out, q_index)
        return qk_norm_rope_triton(q, k, cos, sin, q_weight, k_weight, eps, cache, q_scatter)[0]
    out = qk_norm_rope_cached_torch(
        q, k, v, cos, sin, q_weight, k_weight, eps, k_cache, v_cache, cache_pos, cache_slot, q_out, q_index
    )
    return out if q_out is not None else out.contiguous()
