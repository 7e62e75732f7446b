"""Several requests on one dense target: per-request KV slots, one ragged forward over all their rows.

:class:`RaggedDenseTarget` holds ``S`` request slots of KV cache over the modules of a
:class:`~specdec.models.dense.DenseTarget` (the weights are shared, never copied). One call of
:meth:`RaggedDenseTarget.forward` runs the new rows of several requests, each with its own slot,
committed length, positions and ``[T_i, T_i]`` mask over its own rows; each request attends to its own
committed prefix and its own new rows only. Commits, resets and rollbacks are per slot.

Batch invariance. On CPU a float32 GEMM's row results depend on how many rows the call has (the
library picks its blocking from ``M``: a row computed among 16 rows differs in its last bits from the
same row computed among 3), so packing several requests' rows into one matmul changes their logits.
The default layout ``"per_request"`` therefore runs every linear layer (and the attention) on each
request's rows alone, with exactly the shapes of the batch-1 forward: a request's logits are
``torch.equal`` to :class:`~specdec.models.dense.DenseTarget`'s for the same rows, whatever its
companions. The layout ``"packed"`` runs each linear layer once over all rows (what makes batching pay
on an accelerator) and batches RoPE, the cache writes and the attention over all requests (one masked
attention call over the slots, so the launches per forward do not grow with the number of requests); its
logits agree with the batch-1 forward to rounding, not bitwise. Its attention runs as SDPA over the slots
(default) or through FlexAttention over the packed rows (:mod:`specdec.models.packed_attention`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.target import TargetOutput
from specdec.models.base import check_committed_path, check_positions, check_rows_mask, check_token_ids, tree_rows_inputs
from specdec.models.dense import DecoderLayer, DenseTarget, add_norm, compact_kv, prefix_attention_mask
from specdec.models.graphs import StaticGraphs, pick_bucket
from specdec.models.packed_attention import (
    ATTENTIONS,
    attend_one_slot,
    attend_slots,
    flex_over_slots,
    long_kv_view,
    packed_block_mask,
    slot_major_cache,
    slot_mask,
)
from specdec.models.slots import RequestRows, RequestSlots
from specdec.models.weight_views import WEIGHT_VIEWS

__all__ = [
    "ATTENTIONS",
    "LAYOUTS",
    "LONG_REQUEST_PADDING",
    "LONG_REQUEST_ROWS",
    "ROW_BUCKETS",
    "RaggedDenseTarget",
    "RequestRows",
    "SlotTarget",
]

LAYOUTS = ("per_request", "packed")
ROW_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
# A packed SDPA forward's tallest request attends its own slot apart when it has at least LONG_REQUEST_ROWS rows
# (bucketed), four times every other request's, and the padding it would put on the other slots, (slots + 1) x (its
# rows - theirs) x the attended span, reaches LONG_REQUEST_PADDING: the H200's break-even at the 8B shape, where the
# split's ~15 extra launches a layer cost what ~1.2M padded query-key pairs do (1.1-1.3M between 340 and 640
# positions for 192- and 128-row chunks; benchmarks/decode/bench_chunk_forward.py).
LONG_REQUEST_ROWS = 64
LONG_REQUEST_PADDING = 1_200_000


class RaggedDenseTarget(RequestSlots):
    """``slots`` request caches over one :class:`~specdec.models.dense.DenseTarget`'s weights.

    Args:
        target: the dense target whose modules (embedding, layers, norm, head) every slot runs; its own
            batch-1 cache is left alone.
        slots: request slots ``S`` (>= 1).
        max_seq_len: tokens per slot; default ``target.max_seq_len`` (so a slot has the room the batch-1
            target has, and a request's rounds are shaped as they would be alone).
        layout: ``"per_request"`` (batch-invariant: each request's linear layers run on its rows alone)
            or ``"packed"`` (one GEMM per linear layer over all rows); see the module docstring.
        attention: how ``"packed"`` forwards attend (:data:`~specdec.models.packed_attention.ATTENTIONS`):
            ``"sdpa"`` (default; each request's rows scattered into its slot, one masked SDPA over all
            slots) or ``"flex"`` (``flex_attention`` of the packed rows over every slot's cache seen as one
            long KV, under a block mask built each forward from the rows' slots, lengths and tree masks;
            compiled on CUDA, eager on CPU). ``"flex"`` needs ``layout="packed"`` and runs without CUDA
            graphs (its block mask is built by ``create_block_mask``, which a graph cannot capture);
            :meth:`enable_static_path` still buckets its shapes.

    Attributes:
        long_request_rows, long_request_padding: with ``"sdpa"``, a request of at least ``long_request_rows`` rows
            (bucketed) and four times every other request's, whose padding of the other slots' query blocks
            (``(slots + 1) x (its rows - theirs) x span``) reaches ``long_request_padding``, attends its own slot in
            a second SDPA call (see :meth:`enable_static_path`). Defaults :data:`LONG_REQUEST_ROWS` and
            :data:`LONG_REQUEST_PADDING` (the H200's break-even at the 8B shape: the padding's cost grows with the
            span, the second call's launches do not); ``None`` for either turns the split off.

    The KV cache is ``[S, Hkv, max_seq_len, D]`` per layer (``[S + 1, ...]`` for ``"packed"``: one scratch slot
    for padding rows), allocated once (heads-first in memory for ``"flex"``, so the long KV is a view). On a
    GPU, :meth:`enable_cuda_graphs` makes ``packed`` ``"sdpa"`` forwards graph replays bucketed by row counts
    and attended length.

    Example:
        >>> from specdec.testing import tiny_target
        >>> dense = tiny_target(seed=0)
        >>> ragged = RaggedDenseTarget(dense, slots=2)
        >>> outs = ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3]])), RequestRows(1, torch.tensor([[4, 5]]))])
        >>> [o.logits.shape[1] for o in outs]
        [3, 2]
        >>> ragged.commit(0, 3); ragged.commit(1, torch.tensor([0])); ragged.lengths
        [3, 1]
        >>> alone = dense(torch.tensor([[1, 2, 3]])).logits
        >>> torch.equal(outs[0].logits, alone)
        True
    """

    def __init__(
        self,
        target: DenseTarget,
        *,
        slots: int,
        max_seq_len: int | None = None,
        layout: str = "per_request",
        attention: str = "sdpa",
    ):
        if not isinstance(target, DenseTarget):
            raise TypeError(f"target: expected a specdec DenseTarget, got {type(target).__name__}")
        kinds = sorted({type(layer).__name__ for layer in target.layers if not isinstance(layer, DecoderLayer)})
        if kinds:
            raise TypeError(f"target: expected dense DecoderLayer layers only, got {kinds}")
        slots, max_seq_len = self._checked_sizes(slots, max_seq_len, target.max_seq_len)
        if layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
        if attention not in ATTENTIONS:
            raise ValueError(f"attention: expected one of {ATTENTIONS}, got {attention!r}")
        if attention == "flex" and layout != "packed":
            raise ValueError(f"attention: 'flex' runs the packed rows of layout 'packed', got layout {layout!r}")
        self.target = target
        self.slots = slots
        self.max_seq_len = max_seq_len
        self.layout = layout
        self.attention = attention
        cfg = target.config
        # the packed layout keeps one scratch slot (index ``slots``) for the padding rows of bucketed forwards
        shape = (slots + (layout == "packed"), cfg.num_kv_heads, max_seq_len, cfg.head_dim)
        if attention == "flex":
            self.k_caches = [slot_major_cache(*shape, dtype=target.dtype, device=target.device) for _ in target.layers]
            self.v_caches = [slot_major_cache(*shape, dtype=target.dtype, device=target.device) for _ in target.layers]
        else:
            self.k_caches = [torch.zeros(shape, dtype=target.dtype, device=target.device) for _ in target.layers]
            self.v_caches = [torch.zeros(shape, dtype=target.dtype, device=target.device) for _ in target.layers]
        self.lengths = [0] * slots
        self._last_rows = [0] * slots
        self._last_views = ["exact"] * slots
        self._last_positions: list[torch.Tensor | None] = [None] * slots  # for commit's path check
        self._last_masks: list[torch.Tensor | None] = [None] * slots
        self._graphs: StaticGraphs | None = None
        self._buckets: tuple[int, ...] = ()
        self._span_step = 1
        self.long_request_rows: int | None = LONG_REQUEST_ROWS
        self.long_request_padding: int | None = LONG_REQUEST_PADDING

    def length(self, slot: int) -> int:
        """Committed tokens of ``slot``.

        Example:
            >>> from specdec.testing import tiny_target
            >>> RaggedDenseTarget(tiny_target(seed=0), slots=2).length(1)
            0
        """
        return self.lengths[self._check_slot(slot)]

    def reset(self, slot: int) -> None:
        """Empty ``slot`` (its length becomes 0; nothing is reallocated, the other slots are untouched)."""
        self._check_slot(slot)
        self.lengths[slot] = 0
        self._last_rows[slot] = 0
        self._last_views[slot] = "exact"

    def truncate(self, slot: int, length: int) -> None:
        """Roll ``slot`` back to its first ``length`` committed tokens (``0 <= length <= length(slot)``)."""
        self._check_slot(slot)
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.lengths[slot]:
            raise ValueError(f"length: expected 0 <= length <= {self.lengths[slot]}, got {length!r}")
        self.lengths[slot] = length
        self._last_rows[slot] = 0
        self._last_views[slot] = "exact"

    def discard(self, slot: int) -> None:
        """Drop the scratch rows of ``slot``'s last forward (its committed cache is unchanged)."""
        self._check_slot(slot)
        self._last_rows[slot] = 0
        self._last_views[slot] = "exact"

    def commit(self, slot: int, accepted: int | torch.Tensor) -> None:
        """Keep rows of ``slot``'s last forward and advance its length (the other slots are untouched).

        Args:
            slot: the request's slot.
            accepted: ``n`` keeps the first ``n`` rows; an int64 tensor ``[n]`` of ascending row indices
                (a tree's accepted path, root row 0 first) moves those rows' K/V to the slot's
                ``[length, length + n)``.

        Example:
            >>> from specdec.testing import tiny_target
            >>> ragged = RaggedDenseTarget(tiny_target(seed=0), slots=2)
            >>> tree = RequestRows(1, torch.tensor([[1, 2, 3]]), positions=torch.tensor([[0, 1, 1]]),
            ...                    mask=torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool))
            >>> _ = ragged.forward([tree])  # row 0, then two children of it
            >>> ragged.commit(1, torch.tensor([0, 2])); ragged.lengths
            [0, 2]
        """
        self._check_slot(slot)
        if self._last_views[slot] != "exact":
            raise RuntimeError(
                f"commit: slot {slot}'s last forward ran the {self._last_views[slot]!r} weight view; its rows are proposals "
                "and are never committed (discard(slot) them, then run the exact view)"
            )
        last = self._last_rows[slot]
        if isinstance(accepted, int) and not isinstance(accepted, bool):
            if not 0 <= accepted <= last:
                raise ValueError(f"accepted: expected 0 <= n <= {last} (rows of slot {slot}'s last forward), got {accepted}")
            n = accepted
            if self.device.type == "cpu":  # free there; on an accelerator a host read a round (the engine's rows are valid)
                check_committed_path(range(n), self.lengths[slot], self._last_positions[slot], mask=self._last_masks[slot])
        elif isinstance(accepted, torch.Tensor) and accepted.ndim == 1 and accepted.dtype == torch.long:
            n = accepted.numel()
            if n > last:
                raise ValueError(f"accepted: expected at most {last} rows (slot {slot}'s last forward), got {n}")
            if n and not (bool((accepted[1:] > accepted[:-1]).all()) and 0 <= int(accepted[0]) and int(accepted[-1]) < last):
                raise ValueError(f"accepted: expected ascending rows in [0, {last}), got {accepted.tolist()}")
            if self.device.type == "cpu":  # free there; on an accelerator a host read a round (the engine's rows are valid)
                check_committed_path(
                    accepted.tolist(), self.lengths[slot], self._last_positions[slot], mask=self._last_masks[slot]
                )
            keys = [k[slot : slot + 1] for k in self.k_caches]
            values = [v[slot : slot + 1] for v in self.v_caches]
            compact_kv(keys, values, self.lengths[slot], accepted)
        else:
            desc = f"{accepted.dtype} {tuple(accepted.shape)}" if isinstance(accepted, torch.Tensor) else type(accepted).__name__
            raise TypeError(f"accepted: expected an int or a 1-D int64 tensor, got {desc}")
        self.lengths[slot] += n
        self._last_rows[slot] = 0
        self._last_views[slot] = "exact"

    def slot_target(self, slot: int) -> SlotTarget:
        """A batch-1 :class:`~specdec.contracts.Target` over ``slot`` (for prefill, drafters' tests, batch-1 verifiers).

        Example:
            >>> from specdec.testing import tiny_target
            >>> from specdec.contracts import Target
            >>> isinstance(RaggedDenseTarget(tiny_target(seed=0), slots=2).slot_target(1), Target)
            True
        """
        return SlotTarget(self, self._check_slot(slot))

    def _check_rows(self, requests: Sequence[RequestRows], hidden_layers: Sequence[int]) -> None:
        self._check_request_list(requests, hidden_layers)
        for i, req in enumerate(requests):
            slot, tokens = req.slot, req.tokens
            if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.dtype != torch.long or tokens.shape[0] != 1:
                desc = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
                raise TypeError(f"requests[{i}].tokens: expected an int64 tensor [1, T], got {desc}")
            seqlen = tokens.shape[1]
            if seqlen < 1:
                raise ValueError(f"requests[{i}].tokens: expected at least one token, got T = 0")
            if tokens.device != self.device:
                raise ValueError(f"requests[{i}].tokens: expected device {self.device}, got {tokens.device}")
            check_token_ids(tokens, self.config.vocab_size, f"requests[{i}].tokens")
            if self.lengths[slot] + seqlen > self.max_seq_len:
                raise ValueError(
                    f"requests[{i}].tokens: {seqlen} new rows do not fit slot {slot}: length {self.lengths[slot]} + "
                    f"{seqlen} > max_seq_len {self.max_seq_len}"
                )
            check_positions(req.positions, (1, seqlen), self.device, f"requests[{i}].positions")
            check_rows_mask(req.mask, seqlen, self.device, f"requests[{i}].mask")

    @property
    def weight_views(self) -> tuple[str, ...]:
        """``("exact", "q")``: the shared target's exact weights and its 8-bit A+E view (tuple of str)."""
        return WEIGHT_VIEWS

    @torch.no_grad()
    def forward(
        self, requests: Sequence[RequestRows], *, hidden_layers: Sequence[int] = (), view: str = "exact"
    ) -> list[TargetOutput]:
        """Run the new rows of several requests in one call; each request's K/V go to its slot's scratch rows.

        Every argument is checked before any work, so a bad entry leaves every slot as it was.

        Args:
            requests: one :class:`RequestRows` per request (distinct slots), in any order.
            hidden_layers: layer outputs to return per request (HF ``hidden_states`` numbering).
            view: ``"exact"`` or ``"q"`` (the shared target's 8-bit A+E weights, as for
                :meth:`DenseTarget.forward <specdec.models.dense.DenseTarget.forward>`): a ``"q"`` forward
                reads the slots' committed K/V and writes only their scratch rows, which :meth:`commit`
                refuses (:meth:`discard` them).

        Returns:
            one :class:`~specdec.contracts.TargetOutput` per entry of ``requests``, in their order, with
            float32 ``logits [1, T_i, V]`` and ``[1, T_i, hidden_size]`` per tap.

        Example:
            >>> from specdec.testing import tiny_target
            >>> dense = tiny_target(seed=0)
            >>> ragged = RaggedDenseTarget(dense, slots=2)
            >>> q = ragged.forward([RequestRows(1, torch.tensor([[1, 2, 3]]))], view="q")[0]
            >>> torch.equal(q.logits, dense(torch.tensor([[1, 2, 3]]), view="q").logits)
            True
        """
        hidden_layers = tuple(hidden_layers)
        if view not in WEIGHT_VIEWS:
            raise ValueError(f"view: expected one of {WEIGHT_VIEWS} (this target's weight_views), got {view!r}")
        self._check_rows(requests, hidden_layers)
        with self.target._views.use(view):
            if self.layout == "packed":
                outs = self._run_packed(requests, hidden_layers, view)
            else:
                outs = self._run_per_request(requests, hidden_layers)
        for req in requests:
            self._last_rows[req.slot] = req.tokens.shape[1]
            self._last_views[req.slot] = view
            self._last_positions[req.slot] = req.positions
            self._last_masks[req.slot] = req.mask
        return outs

    def _cache(self, layer: int, seg: dict) -> tuple[torch.Tensor, torch.Tensor]:
        slot, kv_len = seg["slot"], seg["kv_len"]
        return self.k_caches[layer][slot : slot + 1, :, :kv_len], self.v_caches[layer][slot : slot + 1, :, :kv_len]

    def _run_per_request(self, requests: Sequence[RequestRows], hidden_layers: tuple[int, ...]) -> list[TargetOutput]:
        """Every op on each request's rows alone: the batch-1 forward's shapes, layer after layer."""
        target, device = self.target, self.device
        segments = []
        for req in requests:
            length, seqlen = self.lengths[req.slot], req.tokens.shape[1]
            new = torch.arange(seqlen, device=device)
            positions = (length + new)[None] if req.positions is None else req.positions
            segments.append(
                {
                    "slot": req.slot,
                    "rope": target._rope(positions),
                    "slots": length + new,
                    "mask": prefix_attention_mask(length, seqlen, req.mask, device),
                    "kv_len": length + seqlen,
                }
            )
        xs = [target.embed(req.tokens) for req in requests]  # each [1, T_i, hidden]
        taps = [{0: x} if 0 in hidden_layers else {} for x in xs]
        for i, layer in enumerate(target.layers):
            for j, seg in enumerate(segments):
                cos, sin = seg["rope"]
                xs[j] = layer(xs[j], cos, sin, *self._cache(i, seg), seg["slots"], seg["mask"])
                if i + 1 in hidden_layers:
                    taps[j][i + 1] = xs[j]
        outs = []
        for j, x in enumerate(xs):
            x = target.norm(x)
            if len(target.layers) in hidden_layers:
                taps[j][len(target.layers)] = x
            outs.append(TargetOutput(logits=target.lm_head(x).float(), hidden=tuple(taps[j][h] for h in hidden_layers)))
        return outs

    def enable_cuda_graphs(self, buckets: Sequence[int] = ROW_BUCKETS, *, span_step: int = 64) -> None:
        """Run ``packed`` forwards as CUDA-graph replays, one graph per bucket (see :meth:`enable_static_path`).

        A graph is captured at the first forward of each key ``(total rows, rows per request, attended
        span, rows of a request that attends apart or 0, hidden_layers)``; a replay needs no host work beyond
        copying the inputs into static buffers.
        Not with ``attention="flex"`` (its block mask is built on each forward, outside any graph): that
        raises ``ValueError``; :meth:`enable_static_path` buckets its shapes without graphs.
        """
        if self.attention == "flex":
            raise ValueError(
                "enable_cuda_graphs: attention 'flex' builds its block mask with create_block_mask on every forward, "
                "which a CUDA graph cannot capture; use attention='sdpa' for graphs, or enable_static_path() for flex"
            )
        if self.device.type != "cuda":
            raise ValueError(f"enable_cuda_graphs: expected a CUDA target, got device {self.device}")
        self._enable_static(buckets, span_step, capture=True)

    def enable_static_path(self, buckets: Sequence[int] = ROW_BUCKETS, *, span_step: int = 64) -> None:
        """Run ``packed`` forwards through the fixed-shape body that CUDA graphs capture, eagerly (any device).

        A forward of ``R`` rows (at most ``Tmax`` per request, longest attended length ``Lmax``) runs in the
        bucket ``(Rb, Tb, Lb, Tl)``: ``Rb`` and ``Tb`` the smallest of ``buckets`` ``>= R`` and ``>= Tmax``, ``Lb``
        ``Lmax`` rounded up to a multiple of ``span_step`` (at most ``max_seq_len``), ``Tl = 0``. A request of at
        least ``long_request_rows`` rows (bucketed) and four times any other's (a prompt chunk among verify rows)
        whose padding of the others' blocks reaches ``long_request_padding`` attends its own slot apart: ``Tl`` is
        its bucket and ``Tb`` the others'. The padding rows run in a scratch slot no request owns, so they never
        touch a request's cache or rows; real rows agree with the unpadded forward to rounding (bitwise when the
        bucket is the forward's own shape). A forward with more rows than the largest bucket (a long prefill)
        runs the unpadded body.

        Args:
            buckets: ascending row counts (>= 1), for the total rows and the rows per request.
            span_step: the attended length's rounding (>= 1).

        Example:
            >>> from specdec.testing import tiny_target
            >>> ragged = RaggedDenseTarget(tiny_target(seed=0), slots=2, layout="packed")
            >>> ragged.enable_static_path((1, 4), span_step=8)
            >>> [o.logits.shape[1] for o in ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))])]
            [3]
            >>> ragged.static_keys
            [(4, 4, 8, 0, ())]
        """
        self._enable_static(buckets, span_step, capture=False)

    def disable_static_path(self) -> None:
        """Back to unpadded eager forwards (drops any graphs)."""
        self._graphs = None
        self._buckets = ()

    @property
    def row_buckets(self) -> tuple[int, ...]:
        """The ``buckets`` of :meth:`enable_static_path` / :meth:`enable_cuda_graphs`, ascending; ``()`` without
        them (tuple of int). A forward of more rows than the last one runs unpadded and eagerly."""
        return self._buckets

    @property
    def uses_cuda_graphs(self) -> bool:
        """Whether ``packed`` forwards replay CUDA graphs (bool)."""
        return self._graphs is not None and self._graphs.capture

    @property
    def static_keys(self) -> list[tuple]:
        """The buckets ``(Rb, Tb, Lb, Tl, hidden_layers)`` static forwards have run in so far (list)."""
        return [] if self._graphs is None else list(self._graphs._buffers)

    def _enable_static(self, buckets: Sequence[int], span_step: int, *, capture: bool) -> None:
        self._set_static(buckets, span_step, capture=capture)

    def _shapes(self, rows: list[int], max_len: int) -> tuple[int | None, tuple[int, int, int, int], bool]:
        """The request that attends apart (or ``None``), the body's shapes ``(Rb, Tb, Lb, Tl)``, and whether they are
        a bucket (else the forward's own shapes, for an unbucketed target or a forward past the largest bucket).

        The longest request attends apart (``Tl`` its rows, bucketed; ``Tb`` then covers the others) when
        :meth:`_attends_apart` says so; otherwise ``Tl = 0`` and ``Tb`` covers every request.
        """
        order = sorted(range(len(rows)), key=lambda j: -rows[j])
        longest, rest, num_rows = rows[order[0]], (rows[order[1]] if len(rows) > 1 else 1), sum(rows)
        if self._graphs is not None:
            rows_b, tl = pick_bucket(self._buckets, num_rows), pick_bucket(self._buckets, longest)
            if rows_b is not None and tl is not None:
                tb = pick_bucket(self._buckets, rest)
                span = min(self.max_seq_len, -(-max_len // self._span_step) * self._span_step)
                if self._attends_apart(len(rows), tl, tb, span):
                    return order[0], (rows_b, tb, span, tl), True
                return None, (rows_b, tl, span, 0), True
        if self._attends_apart(len(rows), longest, rest, max_len):
            return order[0], (num_rows, rest, max_len, longest), False
        return None, (num_rows, longest, max_len, 0), False

    def _attends_apart(self, requests: int, longest: int, rest: int, span: int) -> bool:
        """Whether the longest request (``longest`` rows) attends apart from the others (at most ``rest`` rows
        each) over ``span`` positions: SDPA attention, another request in the forward, ``longest`` at least
        ``long_request_rows`` and four times ``rest``, and the padding ``(slots + 1) (longest - rest) span`` at
        least ``long_request_padding``."""
        rows, padding = self.long_request_rows, self.long_request_padding
        if rows is None or padding is None or self.attention != "sdpa" or requests < 2:
            return False
        return longest >= rows and longest >= 4 * rest and (self.slots + 1) * (longest - rest) * span >= padding

    def _run_packed(
        self, requests: Sequence[RequestRows], hidden_layers: tuple[int, ...], view: str = "exact"
    ) -> list[TargetOutput]:
        """Pack the rows' indices on the host (one copy to the device), run :meth:`_packed_body`, split per request."""
        device, scratch = self.device, self.slots
        lengths = [self.lengths[req.slot] for req in requests]
        rows = [req.tokens.shape[1] for req in requests]
        max_len = max(n + t for n, t in zip(lengths, rows))
        apart, (rows_b, per_request_b, span, long_b), bucketed = self._shapes(rows, max_len)
        # the request that attends apart packs first, so its rows are the first rows of every buffer
        order = list(range(len(requests))) if apart is None else [apart] + [j for j in range(len(requests)) if j != apart]
        # per row: its slot, its index within its request, its request's committed length; padding rows
        # live in the scratch slot at cache position 0
        row_slot, row_index, row_len = [scratch] * rows_b, [0] * rows_b, [0] * rows_b
        start = 0
        for j in order:
            seqlen = rows[j]
            row_slot[start : start + seqlen] = [requests[j].slot] * seqlen
            row_index[start : start + seqlen] = range(seqlen)
            row_len[start : start + seqlen] = [lengths[j]] * seqlen
            start += seqlen
        index = torch.tensor([row_slot, row_index, row_len], dtype=torch.long)
        if not bucketed:
            buf = self._packed_buffers(rows_b, per_request_b, span, long_b)
        else:
            # a captured graph holds the weights it was captured with: one graph per weight view
            bucket = (rows_b, per_request_b, span, long_b)
            key = (*bucket, hidden_layers) if view == "exact" else (*bucket, hidden_layers, view)
            buf = self._graphs.buffers(key, lambda: self._packed_buffers(rows_b, per_request_b, span, long_b))
        buf["index"].copy_(index, non_blocking=True)
        buf["tokens"][:, : sum(rows)].copy_(torch.cat([requests[j].tokens for j in order], dim=1))
        local = buf["local"]  # [Rb, Tb]: row r sees its request's new row c
        torch.le(torch.arange(per_request_b, device=device)[None], buf["index"][1][:, None], out=local)  # causal
        if long_b:  # [Tl, Tl]: the same for the rows of the request that attends apart
            torch.le(torch.arange(long_b, device=device)[None], buf["index"][1][:long_b, None], out=buf["local_long"])
        positions = buf["positions"]
        torch.add(buf["index"][2], buf["index"][1], out=positions[0])
        start = 0
        for j in order:
            req, seqlen = requests[j], rows[j]
            if req.mask is not None:
                (buf["local_long"] if j == apart else local)[start : start + seqlen, :seqlen] = req.mask
            if req.positions is not None:
                positions[:, start : start + seqlen] = req.positions
            start += seqlen
        if not bucketed:
            logits, taps = self._packed_body(buf, hidden_layers)
        else:
            logits, taps = self._graphs.run(key, lambda: self._packed_body(buf, hidden_layers))
            # the graph's outputs are overwritten by its next replay
            num_rows = sum(rows)
            logits, taps = logits[:, :num_rows].clone(), tuple(t[:, :num_rows].clone() for t in taps)
        outs, start = [None] * len(requests), 0
        for j in order:
            a, b = start, start + rows[j]
            outs[j] = TargetOutput(logits=logits[:, a:b], hidden=tuple(t[:, a:b] for t in taps))
            start = b
        return outs

    def _packed_buffers(self, rows: int, per_request: int, span: int, long_rows: int = 0) -> dict[str, torch.Tensor]:
        device = self.device
        buf = {
            "tokens": torch.zeros(1, rows, dtype=torch.long, device=device),
            "index": torch.zeros(3, rows, dtype=torch.long, device=device),  # row -> slot, index in request, length
            "positions": torch.zeros(1, rows, dtype=torch.long, device=device),
            "local": torch.zeros(rows, per_request, dtype=torch.bool, device=device),
            "span": torch.arange(span, device=device),
        }
        if long_rows:  # the first request's own rows when it attends apart
            buf["local_long"] = torch.zeros(long_rows, long_rows, dtype=torch.bool, device=device)
        return buf

    def _packed_body(self, buf: dict[str, torch.Tensor], hidden_layers: tuple[int, ...]):
        """Each linear layer once over all rows ``[1, R, .]``; RoPE, the K/V writes and attention batched too.

        Reads only ``buf`` (fixed shapes), so CUDA graphs can capture it (``"sdpa"``). Attention with
        ``"sdpa"`` runs as one ``scaled_dot_product_attention`` over every slot ``[S + 1, Hkv, G * Tb, Lb]``:
        each request's rows go to its slot (padded to ``Tb`` rows) and attend its own cache under its
        prefix-and-tree mask; slots and rows without a request attend slot position 0 only and their
        outputs are dropped. With ``"flex"`` the packed queries ``[1, H, R, D]`` attend the long KV
        ``[1, Hkv, (S + 1) * max_seq_len, D]`` under one block mask per forward. Either way a forward
        costs the same number of kernel launches whatever the number of requests.
        """
        target, cfg = self.target, self.config
        tokens, (row_slot, row_index, row_len), local = buf["tokens"], buf["index"], buf["local"]
        num_rows = local.shape[0]
        max_len = buf["span"].numel()  # Lb
        row_cache = row_len + row_index  # [R] cache position of each row
        # padding rows (scratch slot, length 0, index 0) see their slot's position 0 only: finite, discarded
        local_long = buf.get("local_long")  # [Tl, Tl] when the first request attends apart
        if self.attention == "flex":
            block_mask = packed_block_mask(row_slot, row_len, local, num_slots=self.slots + 1, max_seq_len=self.max_seq_len)
        else:
            group = cfg.num_heads // cfg.num_kv_heads
            q_slot, q_index = row_slot, row_index
            if local_long is not None:
                long_b = local_long.shape[0]
                # the first request's rows attend its own slot; in the slots' SDPA they stand in for padding
                is_long = row_slot == row_slot[:1]  # [R]: slots are distinct, so these are exactly its rows
                q_slot, q_index = row_slot.masked_fill(is_long, self.slots), row_index.masked_fill(is_long, 0)
                outside = (~is_long[:long_b]).long()  # rows of other requests: a discarded second slot
                long_mask = slot_mask(
                    outside, row_index[:long_b], row_len[:long_b], local_long, max_len, num_slots=2, group=group
                )[:1]
                keep_long = is_long[:long_b, None, None]
            mask = slot_mask(q_slot, q_index, row_len, local, max_len, num_slots=self.slots + 1, group=group)
            # per-slot queries [S + 1, H, Tb, D]: zero where no row maps (finite, discarded), one buffer a forward
            slotted = torch.zeros(
                self.slots + 1, cfg.num_heads, local.shape[1], cfg.head_dim, dtype=target.dtype, device=self.device
            )
        cos, sin = target._rope(buf["positions"])  # [1, 1, R, D]
        x = target.embed(tokens)  # [1, R, hidden]
        taps = {0: x} if 0 in hidden_layers else {}
        h = target.layers[0].attn_norm(x)
        for i, layer in enumerate(target.layers):
            attn = layer.attn
            qkv = attn.wqkv(h)  # [1, R, q + 2 kv]
            q, k, v = qkv.split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
            q = q.view(1, num_rows, cfg.num_heads, cfg.head_dim)
            k = k.view(1, num_rows, cfg.num_kv_heads, cfg.head_dim)
            v = v.view(1, num_rows, cfg.num_kv_heads, cfg.head_dim)
            k_cache, v_cache = self.k_caches[i], self.v_caches[i]  # [S + 1, Hkv, max_seq_len, D]
            if self.attention == "flex":
                q = attn.norm_rope_write(q, k, v, cos, sin, k_cache, v_cache, row_cache, row_slot)  # [1, H, R, D]
                out = flex_over_slots(q, long_kv_view(k_cache), long_kv_view(v_cache), block_mask)  # [R, H, D]
            elif local_long is not None:
                q = attn.norm_rope_write(q, k, v, cos, sin, k_cache, v_cache, row_cache, row_slot)  # [1, H, R, D]
                slotted[q_slot, :, q_index] = q[0].transpose(0, 1)
                keys, values = k_cache[:, :, :max_len], v_cache[:, :, :max_len]
                out = attend_slots(slotted, keys, values, q_slot, q_index, mask)  # [R, H, D]
                apart = attend_one_slot(q[:, :, :long_b], keys, values, row_slot[:1], long_mask)  # [Tl, H, D]
                out = torch.cat([torch.where(keep_long, apart, out[:long_b]), out[long_b:]])
            else:  # the queries go straight to their slot's rows of `slotted`, which every layer overwrites alike
                attn.norm_rope_write(q, k, v, cos, sin, k_cache, v_cache, row_cache, row_slot, slotted, row_index)
                out = attend_slots(slotted, k_cache[:, :, :max_len], v_cache[:, :, :max_len], row_slot, row_index, mask)
            x, h = layer.add_mlp_norm(x, attn.wo(out.reshape(1, num_rows, cfg.num_heads * cfg.head_dim)))
            next_norm = target.layers[i + 1].attn_norm if i + 1 < len(target.layers) else target.norm
            x, h = add_norm(x, layer.mlp(h), next_norm)  # the residual and the next layer's (or the final) norm
            if i + 1 in hidden_layers:
                taps[i + 1] = x
        x = h
        if len(target.layers) in hidden_layers:
            taps[len(target.layers)] = x
        return target.lm_head(x).float(), tuple(taps[t] for t in hidden_layers)


class SlotTarget:
    """One slot of a :class:`RaggedDenseTarget` seen as a batch-1 :class:`~specdec.contracts.Target`.

    Its forward is a ragged forward of this one request, so it runs the batch-1 verifiers and drafters
    unchanged; ``reset`` empties only this slot.

    Example:
        >>> from specdec.testing import tiny_target
        >>> slot = RaggedDenseTarget(tiny_target(seed=0), slots=2).slot_target(0)
        >>> _ = slot.forward(torch.tensor([[1, 2, 3]])); slot.commit(2); slot.length, slot.room()
        (2, 254)
    """

    def __init__(self, ragged: RaggedDenseTarget, slot: int):
        self.ragged = ragged
        self.slot = slot

    @property
    def config(self):
        """The shared target's config."""
        return self.ragged.config

    @property
    def max_seq_len(self) -> int:
        """The slot's capacity (int)."""
        return self.ragged.max_seq_len

    @property
    def length(self) -> int:
        """The slot's committed tokens (int)."""
        return self.ragged.lengths[self.slot]

    @property
    def vocab_size(self) -> int:
        """``V`` (int)."""
        return self.ragged.vocab_size

    @property
    def device(self) -> torch.device:
        """Of the weights and the cache (:class:`torch.device`)."""
        return self.ragged.device

    @property
    def dtype(self) -> torch.dtype:
        """Of the weights and the cache (:class:`torch.dtype`)."""
        return self.ragged.dtype

    @property
    def supports_trees(self) -> bool:
        """Tree plans are verified in one pass (bool)."""
        return True

    @property
    def weight_views(self) -> tuple[str, ...]:
        """Only ``("exact",)``: the shared modules are run as they are."""
        return ("exact",)

    def room(self) -> int:
        """Tokens that still fit in the slot."""
        return self.ragged.room(self.slot)

    def reset(self) -> None:
        """Empty this slot only."""
        self.ragged.reset(self.slot)

    def truncate(self, length: int) -> None:
        """Roll this slot back to ``length`` committed tokens."""
        self.ragged.truncate(self.slot, length)

    def discard(self) -> None:
        """Drop this slot's scratch rows."""
        self.ragged.discard(self.slot)

    def commit(self, accepted: int | torch.Tensor) -> None:
        """Keep rows of this slot's last forward (see :meth:`RaggedDenseTarget.commit`)."""
        self.ragged.commit(self.slot, accepted)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        hidden_layers: Sequence[int] = (),
        tree_parents: torch.Tensor | None = None,
        view: str = "exact",
    ) -> TargetOutput:
        """The batch-1 :meth:`~specdec.contracts.Target.forward` on this slot (``tree_parents`` as for
        :meth:`DenseTarget.forward <specdec.models.dense.DenseTarget.forward>`)."""
        if view != "exact":
            raise ValueError(f"view: expected one of ('exact',) (this target's weight_views), got {view!r}")
        rows = RequestRows(self.slot, tokens, positions, mask)
        if tree_parents is not None:
            self.ragged._check_rows([rows], hidden_layers)
            length = self.ragged.lengths[self.slot]
            mask, positions = tree_rows_inputs(
                tree_parents, mask, positions, seqlen=tokens.shape[1], length=length, device=self.ragged.device
            )
            rows = RequestRows(self.slot, tokens, positions, mask)
        return self.ragged.forward([rows], hidden_layers=hidden_layers)[0]

    __call__ = forward

    def run_plan(self, plan: VerifyPlan, *, hidden_layers: Sequence[int] = (), view: str = "exact") -> TargetOutput:
        """The forward of a :class:`~specdec.contracts.VerifyPlan` on this slot."""
        plan.check_prefix(self.length)
        return self.forward(plan.tokens, plan.positions, plan.mask, hidden_layers=hidden_layers, view=view)
