"""The drafter's K/V of committed context rows: a growing cache (the reference path) and a
preallocated one of fixed shape (the static and CUDA-graph path)."""

from __future__ import annotations

import torch

__all__ = ["DraftKVCache", "SlotDraftKVCache", "StaticDraftKVCache"]


def _positions(max_context: int, block_size: int) -> int:
    """Positions a request's fixed-shape cache holds: ``max_context + block_size`` rounded up to a multiple of 16."""
    if isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1:
        raise ValueError(f"max_context: expected an int >= 1, got {max_context!r}")
    return -(-(max_context + block_size) // 16) * 16


class DraftKVCache:
    """The drafter's K/V of committed context rows, per layer ``[Hkv, S, D]``, with crop.

    Storage doubles when full, so appends are amortised O(rows). Block rows are never stored.

    Example:
        >>> cache = DraftKVCache(num_layers=1)
        >>> cache.append(0, torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)); cache.length
        3
        >>> cache.crop(1); cache.keys(0).shape
        torch.Size([2, 1, 4])
    """

    def __init__(self, num_layers: int):
        self._k: list[torch.Tensor | None] = [None] * num_layers
        self._v: list[torch.Tensor | None] = [None] * num_layers
        self._len = [0] * num_layers

    @property
    def length(self) -> int:
        """Context rows held, those of the last layer (int)."""
        return self._len[-1] if self._len else 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append ``k``, ``v`` ``[Hkv, r, D]`` (``r`` new context rows) to ``layer``'s cache."""
        n, add = self._len[layer], k.shape[1]
        buf = self._k[layer]
        if buf is None or n + add > buf.shape[1]:
            cap = max(64, 2 * (n + add))
            new_k = k.new_zeros(k.shape[0], cap, k.shape[2])
            new_v = v.new_zeros(v.shape[0], cap, v.shape[2])
            if buf is not None:
                new_k[:, :n] = buf[:, :n]
                new_v[:, :n] = self._v[layer][:, :n]
            self._k[layer], self._v[layer] = new_k, new_v
        self._k[layer][:, n : n + add] = k
        self._v[layer][:, n : n + add] = v
        self._len[layer] = n + add

    def keys(self, layer: int) -> torch.Tensor:
        """``[Hkv, length, D]`` keys of ``layer`` (a view of the storage), ``None`` before its first append."""
        buf = self._k[layer]
        return buf[:, : self._len[layer]] if buf is not None else None

    def values(self, layer: int) -> torch.Tensor:
        """``[Hkv, length, D]`` values of ``layer`` (a view of the storage), ``None`` before its first append."""
        buf = self._v[layer]
        return buf[:, : self._len[layer]] if buf is not None else None

    def crop(self, length: int) -> None:
        """Keep the first ``length`` context rows."""
        if not 0 <= length <= self.length:
            raise ValueError(f"length: expected 0 <= length <= {self.length}, got {length}")
        self._len = [length] * len(self._len)


class StaticDraftKVCache:
    """A preallocated draft cache for fixed-shape (CUDA-graph) draft steps, per layer ``[Hkv, slots, D]``.

    Slot ``j`` holds the K/V of context row ``j`` (its RoPE position is ``j``), so a step needs only
    the device-side row count to build its masks. ``slots = max_context + block_size`` rounded up to a
    multiple of 16: the block's own K/V are written after the context rows (scratch, overwritten by
    the next step) and attention always spans every slot under a mask. ``length`` is host
    bookkeeping only (it follows from the context length the caller passes), so no step reads it
    back from the device.

    Args:
        num_layers, num_kv_heads, head_dim: the drafter's attention shape.
        max_context: the most committed context rows it can hold.
        block_size: rows of one draft block.

    Example:
        >>> cache = StaticDraftKVCache(1, 2, 4, max_context=10, block_size=4, dtype=torch.float32, device="cpu")
        >>> cache.k[0].shape, cache.length
        (torch.Size([2, 16, 4]), 0)
        >>> cache.reserve(11)
        Traceback (most recent call last):
        ...
        ValueError: max_context: the draft cache holds at most 10 context rows (set by enable_static_cache / enable_cuda_graphs), got 11
    """

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, *, max_context: int, block_size: int, dtype, device):
        self.max_context = max_context
        slots = _positions(max_context, block_size)
        # zeros, not empty: masked slots still enter the softmax-weighted sum as 0 * value, so they must be finite
        self.k = [torch.zeros(num_kv_heads, slots, head_dim, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(num_kv_heads, slots, head_dim, dtype=dtype, device=device) for _ in range(num_layers)]
        self.length = 0

    @property
    def slots(self) -> int:
        """Slots per layer, ``max_context + block_size`` rounded up to a multiple of 16 (int)."""
        return self.k[0].shape[1] if self.k else 0

    def reserve(self, length: int) -> None:
        """Raise ``ValueError`` unless ``length`` context rows fit."""
        if length > self.max_context:
            raise ValueError(
                f"max_context: the draft cache holds at most {self.max_context} context rows "
                f"(set by enable_static_cache / enable_cuda_graphs), got {length}"
            )

    def crop(self, length: int) -> None:
        """Keep the first ``length`` context rows (the rest become scratch)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"length: expected 0 <= length <= {self.length}, got {length}")
        self.length = length


class SlotDraftKVCache:
    """Preallocated draft caches of several requests, per layer ``[slots, Hkv, positions, D]``.

    Slot ``s`` is laid out as one :class:`StaticDraftKVCache`: position ``p`` of its request sits at
    index ``p``, a block's K/V are scratch after the context rows, and ``positions = max_context +
    block_size`` rounded up to a multiple of 16. ``lengths[s]`` (context rows held by slot ``s``) is host
    bookkeeping, so no round reads it back from the device.

    Args:
        num_layers, num_kv_heads, head_dim: the drafter's attention shape.
        slots: requests it holds.
        max_context: the most committed context rows one request may have.
        block_size: rows of one draft block.

    Example:
        >>> cache = SlotDraftKVCache(1, 2, 4, slots=3, max_context=10, block_size=4, dtype=torch.float32, device="cpu")
        >>> cache.k[0].shape, cache.lengths
        (torch.Size([3, 2, 16, 4]), [0, 0, 0])
    """

    def __init__(
        self, num_layers: int, num_kv_heads: int, head_dim: int, *, slots: int, max_context: int, block_size: int, dtype, device
    ):
        self.max_context = max_context
        positions = _positions(max_context, block_size)
        # zeros, not empty: masked positions still enter the softmax-weighted sum as 0 * value, so they must be finite
        shape = (slots, num_kv_heads, positions, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.lengths = [0] * slots

    @property
    def positions(self) -> int:
        """Positions per slot, ``max_context + block_size`` rounded up to a multiple of 16 (int)."""
        return self.k[0].shape[2] if self.k else 0

    def reserve(self, length: int, *, name: str = "max_context") -> None:
        """Raise ``ValueError`` (naming ``name``) unless ``length`` context rows fit in a slot."""
        if length > self.max_context:
            raise ValueError(
                f"{name}: the batched draft cache holds at most {self.max_context} context rows a request "
                f"(the max_context of batched()), got {length}"
            )
