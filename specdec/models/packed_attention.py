"""Attention of packed rows from several requests, each over its own KV slot: SDPA over padded slots, or FlexAttention.

The packed forward of :class:`~specdec.models.ragged.RaggedDenseTarget` holds ``R`` rows of several
requests in one tensor. Row ``r`` belongs to the slot ``row_slot[r]``, is its request's new row
``row_index[r]``, and its request has ``row_len[r]`` committed tokens; ``local [R, Tb]`` says which new rows
of its own request row ``r`` sees (causal, or its tree ancestors). Row ``r`` attends cache positions
``[0, row_len[r])`` of its slot and the new rows ``c`` with ``local[r, c]`` (at positions ``row_len[r] + c``),
nothing else.

Two ways to run that:

- ``"sdpa"``: :func:`slot_mask` and :func:`sdpa_over_slots` scatter each request's rows into its slot
  (``Tb`` rows per slot, ``G`` query heads folded into the rows) and run ONE
  ``scaled_dot_product_attention`` over ``[S, Hkv, G * Tb, Lb]`` with a boolean mask; fixed shapes, so CUDA
  graphs capture it. Every slot's block is ``Tb`` rows, so one request with many more rows than the others (a
  prompt chunk among verify rows) would pad all ``S`` blocks to its length: that request attends apart instead,
  by :func:`attend_one_slot` over its own slot, and ``Tb`` covers the others.
- ``"flex"``: :func:`packed_block_mask` and :func:`flex_over_slots` run
  ``torch.nn.attention.flex_attention`` on the packed queries ``[1, H, R, D]`` against every slot's cache
  seen as one long KV ``[1, Hkv, S * max_seq_len, D]`` (:func:`long_kv_view`: a view, no copy, of a cache
  allocated by :func:`slot_major_cache`); a ``mask_mod`` reads the index buffers, and the block mask built by
  ``create_block_mask`` keeps for each block of rows only the blocks of their own slots' spans. On CUDA
  ``flex_attention`` runs compiled (compiled once per process, on first use); on other devices eagerly.

Worked example, two requests in slots 0 and 1 of ``max_seq_len = 4``: slot 0 has 2 committed tokens and
2 new rows (a chain), slot 1 has 1 committed token and 1 new row. The long KV has 8 positions; ``x`` is
attended::

    kv position   0 1 2 3 | 4 5 6 7
    row 0 (s0)    x x x . | . . . .
    row 1 (s0)    x x x x | . . . .
    row 2 (s1)    . . . . | x x . .
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

__all__ = [
    "ATTENTIONS",
    "attend_one_slot",
    "attend_slots",
    "flex_over_slots",
    "long_kv_view",
    "packed_block_mask",
    "packed_mask_mod",
    "sdpa_over_slots",
    "slot_major_cache",
    "slot_mask",
]

ATTENTIONS = ("sdpa", "flex")


def slot_major_cache(
    num_slots: int, num_kv_heads: int, max_seq_len: int, head_dim: int, *, dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """A zero KV cache ``[num_slots, Hkv, max_seq_len, D]`` stored heads-first, so :func:`long_kv_view` needs no copy.

    Indexing, slicing and writes work as on a contiguous cache; only the memory order differs
    (``[Hkv, num_slots, max_seq_len, D]``).

    Example:
        >>> cache = slot_major_cache(3, 2, 4, 8, dtype=torch.float32, device="cpu")
        >>> cache.shape, long_kv_view(cache).shape
        (torch.Size([3, 2, 4, 8]), torch.Size([1, 2, 12, 8]))
    """
    return torch.zeros(num_kv_heads, num_slots, max_seq_len, head_dim, dtype=dtype, device=device).transpose(0, 1)


def long_kv_view(cache: torch.Tensor) -> torch.Tensor:
    """The slots of ``cache [S, Hkv, L, D]`` one after another: ``[1, Hkv, S * L, D]``, a view of the same memory.

    Slot ``s``'s position ``p`` is long position ``s * L + p``. ``cache`` must come from
    :func:`slot_major_cache` (heads-first memory); a slot-first cache raises ``ValueError`` rather than
    being copied.

    Example:
        >>> cache = slot_major_cache(2, 1, 3, 4, dtype=torch.float32, device="cpu")
        >>> cache[1, 0, 2] = 1.0
        >>> int(long_kv_view(cache)[0, 0].sum(-1).nonzero())
        5
    """
    if cache.ndim != 4:
        raise ValueError(f"cache: expected a 4-D tensor [S, Hkv, L, D], got shape {tuple(cache.shape)}")
    num_slots, num_kv_heads, max_seq_len, head_dim = cache.shape
    heads_first = cache.transpose(0, 1)
    if not heads_first.is_contiguous():
        raise ValueError(
            f"cache: expected heads-first memory (from slot_major_cache), got strides {cache.stride()} for shape {tuple(cache.shape)}"
        )
    return heads_first.view(1, num_kv_heads, num_slots * max_seq_len, head_dim)


def slot_mask(
    row_slot: torch.Tensor,
    row_index: torch.Tensor,
    row_len: torch.Tensor,
    local: torch.Tensor,
    span: int,
    *,
    num_slots: int,
    group: int,
) -> torch.Tensor:
    """The boolean mask ``[num_slots, 1, group * Tb, span]`` of :func:`sdpa_over_slots`.

    Slot ``s``'s row ``g * Tb + i`` (query head ``g`` of its group, new row ``i``) sees the cache positions
    its request's row ``i`` sees; rows of slots without a request see position 0 only (finite, discarded).

    Args:
        row_slot, row_index, row_len: int64 ``[R]``: each row's slot, index within its request, and its
            request's committed length.
        local: bool ``[R, Tb]``: row ``r`` sees its request's new row ``c``.
        span: cache positions attended (``>= max(row_len + row_index) + 1``).
        num_slots: slots of the cache (the scratch slot included).
        group: query heads per KV head.

    Example:
        >>> m = slot_mask(torch.tensor([1, 1]), torch.tensor([0, 1]), torch.tensor([2, 2]),
        ...               torch.tensor([[True, False], [True, True]]), 4, num_slots=2, group=1)
        >>> m[1, 0].int().tolist()
        [[1, 1, 1, 0], [1, 1, 1, 1]]
    """
    per_request = local.shape[1]
    positions = torch.arange(span, device=local.device)  # [Lb]
    rel = positions[None] - row_len[:, None]  # [R, Lb] column relative to the row's first new row
    own = local.gather(1, rel.clamp(0, per_request - 1)) & (rel >= 0) & (rel < per_request)
    visible = (rel < 0) | own  # [R, Lb]
    mask = torch.zeros(num_slots, per_request, span, dtype=torch.bool, device=local.device)
    mask[:, :, 0] = True
    mask[row_slot, row_index] = visible
    return mask[:, None].repeat(1, 1, group, 1) if group > 1 else mask[:, None]  # [S, 1, G * Tb, Lb]


def sdpa_over_slots(
    queries: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    row_slot: torch.Tensor,
    row_index: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """Packed rows' attention as one ``scaled_dot_product_attention`` over every slot; returns ``[R, H, D]``.

    Args:
        queries: ``[1, H, R, D]`` (RoPE applied).
        k_cache, v_cache: ``[S, Hkv, Lb, D]``: the first ``Lb`` positions of every slot, the rows' own K/V
            already written.
        row_slot, row_index: int64 ``[R]`` (see :func:`slot_mask`).
        mask: :func:`slot_mask`'s ``[S, 1, G * Tb, Lb]``.

    Example:
        >>> q, k = torch.randn(1, 2, 3, 4), torch.randn(2, 1, 5, 4)
        >>> slot, index, length = torch.tensor([0, 0, 1]), torch.tensor([0, 1, 0]), torch.tensor([2, 2, 4])
        >>> local = torch.tensor([[True, False], [True, True], [True, False]])
        >>> mask = slot_mask(slot, index, length, local, 5, num_slots=2, group=2)
        >>> sdpa_over_slots(q, k, k, slot, index, mask).shape
        torch.Size([3, 2, 4])
    """
    _, num_heads, num_rows, head_dim = queries.shape
    num_slots, num_kv_heads = k_cache.shape[:2]
    per_request = mask.shape[2] // (num_heads // num_kv_heads)
    slotted = queries.new_zeros(num_slots, num_heads, per_request, head_dim)
    slotted[row_slot, :, row_index] = queries[0].transpose(0, 1)  # [R, H, D]
    return attend_slots(slotted, k_cache, v_cache, row_slot, row_index, mask)


def attend_slots(
    slotted: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    row_slot: torch.Tensor,
    row_index: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """:func:`sdpa_over_slots` on queries already in the per-slot layout: ``slotted [S, H, Tb, D]`` holds row ``r``'s
    query at ``[row_slot[r], :, row_index[r]]`` and finite values (zeros) elsewhere; returns ``[R, H, D]``.

    A runtime that writes its queries there directly (``qk_norm_rope_cached(..., q_out=slotted, q_index=...)``)
    zeroes one such buffer a forward and lets every layer overwrite the same entries.

    Example:
        >>> k = torch.randn(2, 1, 5, 4)
        >>> slot, index, length = torch.tensor([0, 0, 1]), torch.tensor([0, 1, 0]), torch.tensor([2, 2, 4])
        >>> local = torch.tensor([[True, False], [True, True], [True, False]])
        >>> mask = slot_mask(slot, index, length, local, 5, num_slots=2, group=2)
        >>> attend_slots(torch.zeros(2, 2, 2, 4), k, k, slot, index, mask).shape
        torch.Size([3, 2, 4])
    """
    num_slots, num_heads, per_request, head_dim = slotted.shape
    group = num_heads // k_cache.shape[1]
    queries = slotted.reshape(num_slots, k_cache.shape[1], group * per_request, head_dim)
    out = torch.nn.functional.scaled_dot_product_attention(queries, k_cache, v_cache, attn_mask=mask)  # [S, Hkv, G * Tb, D]
    return out.reshape(num_slots, num_heads, per_request, head_dim)[row_slot, :, row_index]  # [R, H, D]


def attend_one_slot(
    queries: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slot: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """One request's rows attending its own slot: ``queries [1, H, Tl, D]`` (a view is fine) against
    ``k_cache[slot]``, ``v_cache[slot]`` (``[S, Hkv, Lb, D]``, the rows' own K/V written) under ``mask [1, 1, G * Tl,
    Lb]`` (:func:`slot_mask` with ``num_slots=1``'s layout); ``slot`` is an int64 ``[1]`` tensor, so a captured graph
    reads it from memory. Returns ``[Tl, H, D]``.

    Example:
        >>> k = torch.randn(3, 1, 5, 4)
        >>> local = torch.tensor([[True, False], [True, True]])
        >>> mask = slot_mask(torch.tensor([0, 0]), torch.tensor([0, 1]), torch.tensor([2, 2]), local, 5, num_slots=1, group=2)
        >>> attend_one_slot(torch.randn(1, 2, 2, 4), k, k, torch.tensor([2]), mask).shape
        torch.Size([2, 2, 4])
    """
    _, num_heads, rows, head_dim = queries.shape
    num_kv_heads = k_cache.shape[1]
    q = queries.reshape(1, num_kv_heads, (num_heads // num_kv_heads) * rows, head_dim)  # head h = kv * G + g
    k, v = k_cache.index_select(0, slot), v_cache.index_select(0, slot)  # [1, Hkv, Lb, D]
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [1, Hkv, G * Tl, D]
    return out.reshape(num_heads, rows, head_dim).transpose(0, 1)  # [Tl, H, D]


def packed_mask_mod(row_slot: torch.Tensor, row_len: torch.Tensor, local: torch.Tensor, max_seq_len: int):
    """The FlexAttention ``mask_mod(b, h, q_idx, kv_idx)`` of packed rows over :func:`long_kv_view` positions.

    Row ``q_idx`` sees long position ``kv_idx`` when it lies in the row's own slot and is either a
    committed token of its request or one of the request's new rows that ``local`` lets it see.

    Example:
        >>> mod = packed_mask_mod(torch.tensor([1]), torch.tensor([2]), torch.tensor([[True]]), 4)
        >>> [bool(mod(0, 0, torch.tensor(0), torch.tensor(kv))) for kv in range(8)]
        [False, False, False, False, True, True, True, False]
    """
    per_request = local.shape[1]

    def mask_mod(b, h, q_idx, kv_idx):
        rel = kv_idx % max_seq_len - row_len[q_idx]
        own = (rel >= 0) & (rel < per_request) & local[q_idx, rel.clamp(0, per_request - 1)]
        return (kv_idx // max_seq_len == row_slot[q_idx]) & ((rel < 0) | own)

    return mask_mod


def packed_block_mask(
    row_slot: torch.Tensor,
    row_len: torch.Tensor,
    local: torch.Tensor,
    *,
    num_slots: int,
    max_seq_len: int,
    block_size: int | tuple[int, int] = 128,
) -> BlockMask:
    """The ``BlockMask`` of :func:`packed_mask_mod` for ``R`` rows over ``num_slots * max_seq_len`` long positions.

    Built with ``create_block_mask`` (one batch, shared by every head): a block of rows visits only the
    KV blocks of its rows' own slots up to their last visible position. Not capturable by a CUDA graph.

    Args:
        row_slot, row_len: int64 ``[R]``: each row's slot and its request's committed length.
        local: bool ``[R, Tb]``: row ``r`` sees its request's new row ``c``.
        num_slots, max_seq_len: the cache's slots and positions per slot.
        block_size: rows and KV positions per block (an int for both, or ``(rows, kv)``).

    Example:
        >>> bm = packed_block_mask(torch.tensor([0, 1]), torch.tensor([3, 0]), torch.tensor([[True], [True]]),
        ...                        num_slots=2, max_seq_len=8, block_size=4)
        >>> bm.to_dense()[0, 0].tolist()
        [[1, 0, 1, 0]]
    """
    if row_slot.ndim != 1 or row_len.shape != row_slot.shape or local.ndim != 2 or local.shape[0] != row_slot.shape[0]:
        raise ValueError(
            f"row_slot, row_len, local: expected [R], [R], [R, Tb], got {tuple(row_slot.shape)}, {tuple(row_len.shape)}, "
            f"{tuple(local.shape)}"
        )
    mask_mod = packed_mask_mod(row_slot, row_len, local, max_seq_len)
    return create_block_mask(
        mask_mod, 1, None, row_slot.shape[0], num_slots * max_seq_len, device=row_slot.device, BLOCK_SIZE=block_size
    )


@functools.cache
def _compiled_flex_attention():
    return torch.compile(flex_attention)


def flex_over_slots(
    queries: torch.Tensor,
    k_long: torch.Tensor,
    v_long: torch.Tensor,
    block_mask: BlockMask,
    *,
    kernel_options: dict | None = None,
) -> torch.Tensor:
    """Packed rows' attention through ``flex_attention`` over the long KV; returns ``[R, H, D]``.

    Compiled on CUDA (once per process; the first call per shape compiles), eager elsewhere (the
    reference path, which materialises the scores).

    Args:
        queries: ``[1, H, R, D]`` (RoPE applied).
        k_long, v_long: ``[1, Hkv, S * L, D]`` (:func:`long_kv_view`), the rows' own K/V already written.
        block_mask: :func:`packed_block_mask` of the same rows.
        kernel_options: passed to ``flex_attention`` (e.g. ``{"BLOCK_M": 32}`` with a 32-row block mask).

    Example:
        >>> cache = slot_major_cache(2, 1, 4, 8, dtype=torch.float32, device="cpu")
        >>> _ = cache.normal_()
        >>> slot, length, local = torch.tensor([0, 1]), torch.tensor([2, 3]), torch.tensor([[True], [True]])
        >>> bm = packed_block_mask(slot, length, local, num_slots=2, max_seq_len=4, block_size=4)
        >>> flex_over_slots(torch.randn(1, 2, 2, 8), long_kv_view(cache), long_kv_view(cache), bm).shape
        torch.Size([2, 2, 8])
    """
    if queries.device.type == "cuda":
        out = _compiled_flex_attention()(
            queries, k_long, v_long, block_mask=block_mask, enable_gqa=True, kernel_options=kernel_options
        )
    else:
        with warnings.catch_warnings():
            # eager flex_attention is the intended path off CUDA; its advice to compile does not apply
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            out = flex_attention(queries, k_long, v_long, block_mask=block_mask, enable_gqa=True, kernel_options=kernel_options)
    return out[0].transpose(0, 1)  # [R, H, D]
