"""What every ragged target shares: request slots over one target's weights, and the checks of a ragged call.

:class:`RequestRows` is one request's new rows in a ragged forward; :class:`RequestSlots` holds the slot
count and the shared target, answers the target-level properties and checks slots and request lists the same
way for :class:`~specdec.models.ragged.RaggedDenseTarget` and
:class:`~specdec.models.ragged_hybrid.RaggedHybridTarget`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.models.graphs import StaticGraphs

__all__ = ["RequestRows", "RequestSlots"]


@dataclass(eq=False)
class RequestRows:
    """The new rows of one request in a ragged forward.

    Attributes:
        slot: the request's KV slot (``0 <= slot < slots``).
        tokens: ``[1, T]`` int64.
        positions: ``[1, T]`` int64 RoPE positions; ``None`` = ``length + arange(T)`` (a chain).
        mask: ``[T, T]`` bool over the request's own new rows (its committed prefix is always visible);
            ``None`` = causal.

    Example:
        >>> plan = VerifyPlan.chain(torch.tensor([3]), torch.tensor([4, 5]), prefix_len=0)
        >>> RequestRows.from_plan(1, plan).tokens.tolist()
        [[3, 4, 5]]
    """

    slot: int
    tokens: torch.Tensor
    positions: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    @classmethod
    def from_plan(cls, slot: int, plan: VerifyPlan) -> RequestRows:
        """The rows of a :class:`~specdec.contracts.VerifyPlan` (its tokens, positions and mask) in ``slot``."""
        return cls(slot=slot, tokens=plan.tokens, positions=plan.positions, mask=plan.mask)


class RequestSlots:
    """Base of the ragged targets: ``slots`` request slots over the modules of ``target``.

    Subclasses set ``target``, ``slots`` and ``max_seq_len`` and define :meth:`length`.

    Example:
        >>> from specdec.models.ragged import RaggedDenseTarget
        >>> from specdec.testing import tiny_target
        >>> ragged = RaggedDenseTarget(tiny_target(seed=0), slots=2)
        >>> isinstance(ragged, RequestSlots), ragged.room(1) == ragged.max_seq_len
        (True, True)
    """

    target: object
    slots: int
    max_seq_len: int

    @staticmethod
    def _checked_sizes(slots: object, max_seq_len: object, default_max_seq_len: int) -> tuple[int, int]:
        """``(slots, max_seq_len)`` checked (``max_seq_len=None`` takes ``default_max_seq_len``)."""
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots: expected an int >= 1, got {slots!r}")
        if max_seq_len is None:
            max_seq_len = default_max_seq_len
        if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 2:
            raise ValueError(f"max_seq_len: expected an int >= 2, got {max_seq_len!r}")
        return slots, max_seq_len

    @property
    def config(self):
        """The shared target's config."""
        return self.target.config

    @property
    def vocab_size(self) -> int:
        """``V``, the size of the logits' last dimension (int)."""
        return self.target.vocab_size

    @property
    def device(self) -> torch.device:
        """The device of the weights and the caches (:class:`torch.device`)."""
        return self.target.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the weights and KV caches; logits are float32 (:class:`torch.dtype`)."""
        return self.target.dtype

    @property
    def row_buckets(self) -> tuple[int, ...]:
        """Ascending total row counts whose forwards run a fixed-shape body (a CUDA graph replay, or its eager
        static path); ``()`` when every forward runs at its own shape. A forward of more rows than the last
        bucket runs unpadded and eagerly, outside any graph (tuple of int).

        Example:
            >>> from specdec.models.ragged import RaggedDenseTarget
            >>> from specdec.testing import tiny_target
            >>> ragged = RaggedDenseTarget(tiny_target(seed=0), slots=2, layout="packed")
            >>> before = ragged.row_buckets
            >>> ragged.enable_static_path((1, 4, 16))
            >>> before, ragged.row_buckets
            ((), (1, 4, 16))
        """
        return ()

    @property
    def static_request_rows(self) -> int | None:
        """The most rows one request may have for a forward to stay on the fixed-shape body (a graph replay);
        ``None`` when only the total rows (:attr:`row_buckets`) decide. A chunked prefill keeps its chunks
        within it (int or None).

        Example:
            >>> from specdec.models.ragged import RaggedDenseTarget
            >>> from specdec.testing import tiny_target
            >>> RaggedDenseTarget(tiny_target(seed=0), slots=2, layout="packed").static_request_rows is None
            True
        """
        return None

    def length(self, slot: int) -> int:
        """Committed tokens of ``slot``."""
        raise NotImplementedError

    def room(self, slot: int) -> int:
        """Tokens that still fit in ``slot``: ``max_seq_len - length(slot)``."""
        return self.max_seq_len - self.length(slot)

    def _set_static(self, buckets: Sequence[int], span_step: int, *, capture: bool) -> None:
        """Check the arguments of ``enable_static_path`` / ``enable_cuda_graphs`` and keep them (packed layouts)."""
        if self.layout != "packed":
            raise ValueError(f"layout: static forwards and CUDA graphs need layout 'packed', this target runs {self.layout!r}")
        buckets = tuple(buckets)
        if not buckets or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in buckets):
            raise ValueError(f"buckets: expected positive int row counts, got {buckets}")
        if isinstance(span_step, bool) or not isinstance(span_step, int) or span_step < 1:
            raise ValueError(f"span_step: expected an int >= 1, got {span_step!r}")
        self._buckets = tuple(sorted(set(buckets)))
        self._span_step = span_step
        self._graphs = StaticGraphs(self.device, capture=capture)

    def _check_slot(self, slot: int, name: str = "slot") -> int:
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.slots:
            raise ValueError(f"{name}: expected an int in [0, {self.slots}), got {slot!r}")
        return slot

    def _check_request_list(self, requests: Sequence[RequestRows], hidden_layers: Sequence[int]) -> None:
        """A non-empty list of :class:`RequestRows` on distinct valid slots, and taps within the layers."""
        if not isinstance(requests, (list, tuple)) or not requests:
            raise ValueError(f"requests: expected a non-empty list of RequestRows, got {requests!r}")
        for layer in hidden_layers:
            if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= self.config.num_layers:
                raise ValueError(f"hidden_layers: expected indices in [0, {self.config.num_layers}], got {layer!r}")
        seen: set[int] = set()
        for i, req in enumerate(requests):
            if not isinstance(req, RequestRows):
                raise TypeError(f"requests[{i}]: expected RequestRows, got {type(req).__name__}")
            slot = self._check_slot(req.slot, f"requests[{i}].slot")
            if slot in seen:
                raise ValueError(f"requests[{i}].slot: slot {slot} appears twice in one forward (one entry per request)")
            seen.add(slot)
