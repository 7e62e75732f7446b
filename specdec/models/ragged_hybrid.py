"""Several requests on one hybrid target: per-request GDN states and KV slots over shared weights.

:class:`RaggedHybridTarget` is :class:`~specdec.models.ragged.RaggedDenseTarget`'s counterpart for a
:class:`~specdec.models.hybrid.HybridTarget` (Gated DeltaNet layers with a recurrent state and a conv
state, gated attention layers with a KV cache). Each of its ``S`` slots owns everything a batch-1
hybrid target keeps per request: the KV cache of every attention layer, a ring of committed GDN
recurrent and conv states of every GDN layer, its committed length, and what its last forward left for
the commit (the rows' pre-conv activations, keys, values, gates and the tree's parents).

Layouts (:data:`HYBRID_LAYOUTS`):

* ``"per_request"`` (default): a forward runs each request's rows through the batch-1 hybrid code path
  with that request's slot bound to the shared modules, so every request's logits are ``torch.equal`` to
  the batch-1 :class:`~specdec.models.hybrid.HybridTarget`'s for the same history, whatever its companions
  and their order. Every weight matrix is read once per request per forward.
* ``"packed"``: every linear layer, norm, MLP and the lm_head run once over all requests' rows; the GDN
  conv and recurrence (one batched kernel call per layer from the requests' own committed states) and the
  attention over each request's own KV slot stay per request
  (:func:`~specdec.models.ragged_hybrid_packed.packed_hybrid_forward`). Logits agree with the batch-1
  forward to float32 rounding, not bitwise. Its commits are booked per request and written together
  (:mod:`~specdec.models.ragged_hybrid_commit`); :meth:`RaggedHybridTarget.enable_cuda_graphs` replays the
  forwards of requests of up to 64 rows, and their commits, as CUDA graphs by bucket
  (:mod:`~specdec.models.ragged_hybrid_static`).

In both, a commit replays the accepted tree path into the slot's GDN state exactly as the batch-1 target
does (the same code: a forward leaves each slot what the batch-1 forward leaves for its commit). The hybrid
target's own batch-1 state is restored after every call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.target import TargetOutput
from specdec.models.graphs import StaticGraphs
from specdec.models.hybrid import _WY_MAX_ROWS, HybridTarget
from specdec.models.ragged import ROW_BUCKETS, SlotTarget
from specdec.models.ragged_hybrid_commit import PendingCommit, flush_commits
from specdec.models.ragged_hybrid_packed import packed_hybrid_forward
from specdec.models.slots import RequestRows, RequestSlots
from specdec.models.weight_views import WEIGHT_VIEWS

__all__ = ["HYBRID_LAYOUTS", "HybridSlotTarget", "RaggedHybridTarget"]

HYBRID_LAYOUTS = ("per_request", "packed")

# the attributes of a HybridTarget that hold one request's cache and the bookkeeping of its last forward
_STATE = (
    "k_caches",
    "v_caches",
    "_rec",
    "_conv",
    "_state_slots",
    "max_seq_len",
    "length",
    "_last_rows",
    "_last_view",
    "_slot",
    "_slot_len",
    "_stash",
    "_last_parents",
    "_last_positions",
    "_last_static",
)


class RaggedHybridTarget(RequestSlots):
    """``slots`` request caches (KV + GDN states) over one :class:`~specdec.models.hybrid.HybridTarget`'s weights.

    Args:
        target: the hybrid target whose modules every slot runs; its own batch-1 cache is left as it was.
        slots: request slots ``S`` (>= 1).
        max_seq_len: tokens per slot; default ``target.max_seq_len``.
        state_slots: GDN states kept per request slot (a ring, >= 2): :meth:`truncate` can go back to the
            lengths of the slot's last ``state_slots - 1`` commits, as on the batch-1 target.
        layout: ``"per_request"`` (batch-invariant: each request runs the batch-1 code path) or ``"packed"``
            (one GEMM per linear layer over all requests' rows); see the module docstring.

    Memory per slot: ``num_attention_layers x 2 x [Hkv, max_seq_len, D]`` of KV and ``state_slots x``
    the GDN states (``[num_gdn_layers, Hv, dk, dv]`` fp32 and ``[num_gdn_layers, conv_dim, W - 1]``).

    Example:
        >>> from specdec.testing import tiny_target
        >>> hybrid = tiny_target("qwen3_5_text", seed=0)
        >>> ragged = RaggedHybridTarget(hybrid, slots=2)
        >>> outs = ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3]])), RequestRows(1, torch.tensor([[4, 5]]))])
        >>> [o.logits.shape[1] for o in outs]
        [3, 2]
        >>> ragged.commit(0, 3); ragged.commit(1, torch.tensor([0])); ragged.lengths
        [3, 1]
        >>> torch.equal(outs[0].logits, hybrid(torch.tensor([[1, 2, 3]])).logits)
        True
    """

    def __init__(
        self,
        target: HybridTarget,
        *,
        slots: int,
        max_seq_len: int | None = None,
        state_slots: int = 2,
        layout: str = "per_request",
    ):
        if not isinstance(target, HybridTarget):
            raise TypeError(f"target: expected a specdec HybridTarget, got {type(target).__name__}")
        slots, max_seq_len = self._checked_sizes(slots, max_seq_len, target.max_seq_len)
        if isinstance(state_slots, bool) or not isinstance(state_slots, int) or state_slots < 2:
            raise ValueError(f"state_slots: expected an int >= 2, got {state_slots!r}")
        if layout not in HYBRID_LAYOUTS:
            raise ValueError(f"layout: expected one of {HYBRID_LAYOUTS}, got {layout!r}")
        self.target = target
        self.slots = slots
        self.max_seq_len = max_seq_len
        self.state_slots = state_slots
        self.layout = layout
        cfg = target.config
        n_attn, n_gdn = len(cfg.attention_layers), len(cfg.gdn_layers)
        hv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
        dtype, device = target.dtype, target.device
        # [S, ...] buffers ([S + 1, ...] packed: a scratch slot for the padding rows of fixed-shape forwards);
        # slot s owns index s (a contiguous view with the batch-1 cache's shape and strides)
        cache_slots = slots + (layout == "packed")
        kv_shape = (cache_slots, cfg.num_kv_heads, max_seq_len, cfg.head_dim)
        self.k_caches = [torch.zeros(kv_shape, dtype=dtype, device=device) for _ in range(n_attn)]
        self.v_caches = [torch.zeros(kv_shape, dtype=dtype, device=device) for _ in range(n_attn)]
        self.recurrent = torch.zeros(cache_slots, state_slots, n_gdn, hv, dk, dv, dtype=torch.float32, device=device)
        self.conv = torch.zeros(
            cache_slots, state_slots, n_gdn, cfg.conv_dim, cfg.linear_conv_kernel_dim - 1, dtype=dtype, device=device
        )
        self._graphs: StaticGraphs | None = None
        self._buckets: tuple[int, ...] = ()
        self._span_step = 64
        self._forwards = 0  # packed forwards so far
        self._states = [self._empty_state(s) for s in range(slots)]
        self._pending: list[PendingCommit] = []

    def _empty_state(self, slot: int) -> dict:
        return {
            "k_caches": [k[slot : slot + 1] for k in self.k_caches],
            "v_caches": [v[slot : slot + 1] for v in self.v_caches],
            "_rec": self.recurrent[slot],
            "_conv": self.conv[slot],
            "_state_slots": self.state_slots,
            "max_seq_len": self.max_seq_len,
            "length": 0,
            "_last_rows": 0,
            "_last_view": "exact",
            "_slot": 0,
            "_slot_len": [0] + [-1] * (self.state_slots - 1),
            "_stash": None,
            "_last_parents": None,
            "_last_positions": None,
            "_last_static": None,
            # (the last packed forward's GDN rows, its K/V rows or None, the slot's first row there, the forward count
            # until which a graph replay's rows stay valid or None, the forward's static key or None), until it commits
            "_packed": None,
        }

    @contextmanager
    def _bound(self, slot: int, *, flush: bool = True, checks_only: bool = False) -> Iterator[HybridTarget]:
        """The shared target holding ``slot``'s cache and bookkeeping (eager path); its own are put back after.

        With ``flush`` (every caller but the packed commit) the pending commits are written first, and once the
        batch-1 operation on the slot has succeeded (and was not ``checks_only``) the slot's last packed forward is
        forgotten; an operation that raises leaves the slot's uncommitted rows as they were.
        """
        if flush:
            self._flush()
        target, state = self.target, self._states[slot]
        # plain attributes (none is a parameter, buffer or submodule): set in the instance dict, without
        # nn.Module.__setattr__'s checks, which cost more than the rest of a decode step's host work here
        attrs = vars(target)
        own = {name: attrs[name] for name in (*_STATE, "_graphs", "_buckets")}
        attrs.update({name: state[name] for name in _STATE})
        attrs["_graphs"], attrs["_buckets"] = None, ()  # graphs hold the target's own buffers
        try:
            yield target
        finally:
            for name in _STATE:
                state[name] = attrs[name]
            attrs.update(own)
        if flush and not checks_only:
            state["_packed"] = None

    def _flush(self) -> None:
        """Write the pending commits of the last packed forward (:mod:`~specdec.models.ragged_hybrid_commit`)."""
        if self._pending:
            pending, self._pending = self._pending, []
            flush_commits(self, pending)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the weights and KV caches; GDN recurrent states and logits are float32 (:class:`torch.dtype`)."""
        return self.target.dtype

    @property
    def lengths(self) -> list[int]:
        """Committed tokens of every slot (a new list)."""
        return [state["length"] for state in self._states]

    def length(self, slot: int) -> int:
        """Committed tokens of ``slot``.

        Example:
            >>> from specdec.testing import tiny_target
            >>> RaggedHybridTarget(tiny_target("qwen3_5_text", seed=0), slots=2).length(1)
            0
        """
        return self._states[self._check_slot(slot)]["length"]

    def recurrent_states(self, slot: int) -> torch.Tensor:
        """``[num_gdn_layers, Hv, dk, dv]`` fp32 committed recurrent states of ``slot`` (a view).

        Example:
            >>> from specdec.testing import tiny_target
            >>> RaggedHybridTarget(tiny_target("qwen3_5_text", seed=0), slots=2).recurrent_states(1).shape
            torch.Size([1, 4, 8, 8])
        """
        state = self._states[self._check_slot(slot)]
        self._flush()
        return state["_rec"][state["_slot"]]

    def conv_states(self, slot: int) -> torch.Tensor:
        """``[num_gdn_layers, conv_dim, W - 1]`` committed conv states of ``slot``, oldest column first (a view)."""
        state = self._states[self._check_slot(slot)]
        self._flush()
        return state["_conv"][state["_slot"]]

    def reset(self, slot: int) -> None:
        """Empty ``slot``: length 0, zero GDN states (nothing is reallocated; the other slots are untouched)."""
        with self._bound(self._check_slot(slot)) as target:
            target.reset()

    def truncate(self, slot: int, length: int) -> None:
        """Roll ``slot`` back to ``length`` committed tokens: 0, its length, or a length its state ring still holds.

        Any other length raises ``ValueError`` (a recurrent state cannot be cut back), as on the batch-1 target.
        """
        with self._bound(self._check_slot(slot)) as target:
            target.truncate(length)

    def discard(self, slot: int) -> None:
        """Drop the scratch rows of ``slot``'s last forward (its committed cache and states are unchanged)."""
        with self._bound(self._check_slot(slot)) as target:
            target.discard()

    def commit(self, slot: int, accepted: int | torch.Tensor) -> None:
        """Keep rows of ``slot``'s last forward: replay their path into its GDN states, compact its K/V.

        Args:
            slot: the request's slot.
            accepted: ``n`` keeps the first ``n`` rows (a path: a chain forward); an int64 tensor ``[n]`` of
                rows forming a root-to-node path of the last forward's tree (ascending, each row a child of
                the previous), as for :meth:`HybridTarget.commit`.

        Example:
            >>> from specdec.testing import tiny_target
            >>> ragged = RaggedHybridTarget(tiny_target("qwen3_5_text", seed=0), slots=2)
            >>> mask = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)  # rows 1, 2 siblings
            >>> _ = ragged.forward([RequestRows(1, torch.tensor([[1, 2, 3]]), mask=mask)])
            >>> ragged.commit(1, torch.tensor([0, 2])); ragged.lengths
            [0, 2]
        """
        slot = self._check_slot(slot)
        state = self._states[slot]
        if state["_packed"] is None:
            with self._bound(slot) as target:
                target.commit(accepted)
            return
        # after a packed forward: checked and booked now, written with the other requests' commits
        with self._bound(slot, flush=False) as target:
            rows, _ = target._accepted_path(accepted)
            if rows:
                nxt = target._free_slot()
                stash, kv, start, until, bucket = state["_packed"]
                if until is not None and until != self._forwards:
                    raise RuntimeError(
                        f"commit: slot {slot}'s last forward was a CUDA-graph replay, and a later forward's replay has "
                        "overwritten its rows; with graphs on, commit or discard every request of a forward before the next"
                    )
                pending = PendingCommit(slot, target._slot, nxt, stash, kv, start, bucket, tuple(rows), target.length)
                self._pending.append(pending)
                target._slot = nxt
                target._slot_len[nxt] = target.length + len(rows)
            target._advance(len(rows))
            target._forget_last()
        state["_packed"] = None

    def enable_static_path(self, buckets: Sequence[int] = ROW_BUCKETS, *, span_step: int = 64) -> None:
        """Run ``packed`` forwards of short requests through the fixed-shape body CUDA graphs capture, eagerly.

        A forward of ``R`` rows from ``B`` requests of at most ``Tmax <= 64`` rows each (longest attended length
        ``Lmax``) runs in the bucket ``(Rb, Bb, Tb, Lb)``: ``Rb``, ``Bb``, ``Tb`` the smallest of ``buckets``
        ``>= R``, ``>= B``, ``>= Tmax``; ``Lb`` is ``Lmax`` rounded up to a multiple of ``span_step`` (at most
        ``max_seq_len``). Padding rows and requests run in a scratch slot no request owns. A forward with a request
        of more than 64 rows (a prefill) or more rows than the largest bucket runs the eager packed forward.
        Logits agree with the eager packed forward to rounding (:mod:`~specdec.models.ragged_hybrid_static`).

        Example:
            >>> from specdec.testing import tiny_target
            >>> ragged = RaggedHybridTarget(tiny_target("qwen3_5_text", seed=0), slots=2, layout="packed")
            >>> ragged.enable_static_path((1, 4), span_step=8)
            >>> [o.logits.shape[1] for o in ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))])]
            [3]
            >>> ragged.static_keys
            [(4, 1, 4, 8, (), 'exact')]
        """
        self._enable_static(buckets, span_step, capture=False)

    def enable_cuda_graphs(self, buckets: Sequence[int] = ROW_BUCKETS, *, span_step: int = 64) -> None:
        """Run the forwards :meth:`enable_static_path` buckets as CUDA-graph replays, one graph per bucket.

        A graph is captured at the first forward of each key ``(Rb, Bb, Tb, Lb, hidden_layers, view)``. Needs a
        CUDA target with the Triton GDN kernels and dense MLPs (a sparse-MoE layer reads its routing on the host).
        """
        if self.device.type != "cuda":
            raise ValueError(f"enable_cuda_graphs: expected a CUDA target, got device {self.device}")
        if self.target.backend == "torch":
            raise ValueError("backend: CUDA graphs need the Triton GDN kernels ('auto' or 'triton'), got 'torch'")
        moe = [i for i in range(self.config.num_layers) if self.config.is_moe(i)]
        if moe:
            raise ValueError(
                f"enable_cuda_graphs: layers {moe} are sparse MoE, whose expert loop reads the routing on the host; "
                "a CUDA graph cannot capture it (use enable_static_path)"
            )
        self._enable_static(buckets, span_step, capture=True)

    def disable_static_path(self) -> None:
        """Back to the eager packed forward for every shape (drops any graphs)."""
        self._graphs, self._buckets = None, ()

    @property
    def row_buckets(self) -> tuple[int, ...]:
        """The ``buckets`` of :meth:`enable_static_path` / :meth:`enable_cuda_graphs`, ascending; ``()`` without
        them (tuple of int)."""
        return self._buckets

    @property
    def static_request_rows(self) -> int | None:
        """64 with the static path or graphs on (a request of more rows, a prefill, sends its forward to the eager
        packed path: the batched GDN call takes trees of at most 64 rows), else ``None`` (int or None).

        Example:
            >>> from specdec.testing import tiny_target
            >>> ragged = RaggedHybridTarget(tiny_target("qwen3_5_text", seed=0), slots=2, layout="packed")
            >>> before = ragged.static_request_rows
            >>> ragged.enable_static_path()
            >>> before, ragged.static_request_rows
            (None, 64)
        """
        return _WY_MAX_ROWS if self._buckets else None

    @property
    def uses_cuda_graphs(self) -> bool:
        """Whether bucketed ``packed`` forwards replay CUDA graphs (bool)."""
        return self._graphs is not None and self._graphs.capture

    @property
    def static_keys(self) -> list[tuple]:
        """The keys ``(Rb, Bb, Tb, Lb, hidden_layers, view)`` static forwards have run in so far (list); their
        commits run in keys ``("commit", forward key, Bb, Lb)``, not listed here."""
        return [] if self._graphs is None else [key for key in self._graphs._buffers if key[0] != "commit"]

    def _enable_static(self, buckets: Sequence[int], span_step: int, *, capture: bool) -> None:
        self._flush()  # pending commits read the stash of the graphs dropped here
        self._set_static(buckets, span_step, capture=capture)

    def slot_target(self, slot: int) -> HybridSlotTarget:
        """A batch-1 :class:`~specdec.contracts.Target` over ``slot`` (prefill, drafters' tests, batch-1 verifiers).

        Example:
            >>> from specdec.testing import tiny_target
            >>> from specdec.contracts import Target
            >>> isinstance(RaggedHybridTarget(tiny_target("qwen3_5_text", seed=0), slots=2).slot_target(1), Target)
            True
        """
        return HybridSlotTarget(self, self._check_slot(slot))

    def _check_rows(self, requests: Sequence[RequestRows], hidden_layers: tuple[int, ...]) -> list[torch.Tensor | None]:
        """Every entry checked (the batch-1 target's checks on its slot); returns each request's tree parents."""
        self._check_request_list(requests, hidden_layers)
        parents = []
        for i, req in enumerate(requests):
            slot = req.slot
            with self._bound(slot, checks_only=True) as target:
                try:
                    target._check_inputs(req.tokens, req.positions, req.mask, ())
                    parents.append(target._checked_parents(req.tokens.shape[1], req.mask, None))
                except (TypeError, ValueError) as err:
                    raise type(err)(f"requests[{i}] (slot {slot}): {err}") from err
        return parents

    @property
    def weight_views(self) -> tuple[str, ...]:
        """``("exact", "q")``: the shared target's exact weights and its 8-bit A+E view (tuple of str)."""
        return WEIGHT_VIEWS

    @torch.no_grad()
    def forward(
        self, requests: Sequence[RequestRows], *, hidden_layers: Sequence[int] = (), view: str = "exact"
    ) -> list[TargetOutput]:
        """Run the new rows of several requests; each request's rows read only its own slot's cache and states.

        Every entry is checked before any work, so a bad entry leaves every slot as it was. A request's
        ``mask`` must be the ancestor-or-self mask of its rows' tree (parent = nearest earlier row it sees).

        Args:
            requests: one :class:`~specdec.models.ragged.RequestRows` per request (distinct slots), any order.
            hidden_layers: layer outputs to return per request (HF ``hidden_states`` numbering).
            view: ``"exact"`` or ``"q"`` (the 8-bit A+E weights, as for :meth:`HybridTarget.forward
                <specdec.models.hybrid.HybridTarget.forward>`): a ``"q"`` forward only reads the slots' committed
                K/V and GDN states, and :meth:`commit` refuses its rows (:meth:`discard` them).

        Returns:
            one :class:`~specdec.contracts.TargetOutput` per entry of ``requests``, in their order, with
            float32 ``logits [1, T_i, V]`` and ``[1, T_i, hidden_size]`` per tap.

        Example:
            >>> from specdec.testing import tiny_target
            >>> hybrid = tiny_target("qwen3_5_text", seed=0)
            >>> q = RaggedHybridTarget(hybrid, slots=2).forward([RequestRows(1, torch.tensor([[1, 2]]))], view="q")[0]
            >>> torch.equal(q.logits, hybrid(torch.tensor([[1, 2]]), view="q").logits)
            True
        """
        hidden_layers = tuple(hidden_layers)
        if view not in WEIGHT_VIEWS:
            raise ValueError(f"view: expected one of {WEIGHT_VIEWS} (this target's weight_views), got {view!r}")
        self._flush()
        parents = self._check_rows(requests, hidden_layers)
        if self.layout == "packed":
            return packed_hybrid_forward(self, requests, parents, hidden_layers, view)
        return [self._forward_checked(req, tree, hidden_layers, view) for req, tree in zip(requests, parents)]

    def _forward_checked(
        self, req: RequestRows, parents: torch.Tensor | None, hidden_layers: tuple[int, ...], view: str = "exact"
    ) -> TargetOutput:
        with self._bound(req.slot) as target:
            return target._forward_rows(req.tokens, req.positions, req.mask, parents, hidden_layers, view)


class HybridSlotTarget(SlotTarget):
    """One slot of a :class:`RaggedHybridTarget` seen as a batch-1 :class:`~specdec.contracts.Target`.

    Its forward honours ``tree_parents`` (the rows' tree, which the GDN states follow) like
    :meth:`HybridTarget.forward`.

    Example:
        >>> from specdec.testing import tiny_target
        >>> slot = RaggedHybridTarget(tiny_target("qwen3_5_text", seed=0), slots=2).slot_target(0)
        >>> _ = slot.forward(torch.tensor([[1, 2, 3]]), tree_parents=torch.tensor([-1, 0, 0])); slot.commit(torch.tensor([0, 2]))
        >>> slot.length, slot.room()
        (2, 254)
    """

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
        """The batch-1 :meth:`HybridTarget.forward` on this slot (``view`` ``"exact"`` only)."""
        if view != "exact":
            raise ValueError(f"view: expected one of ('exact',) (this target's weight_views), got {view!r}")
        ragged = self.ragged
        with torch.no_grad(), ragged._bound(self.slot) as target:
            return target.forward(tokens, positions, mask, hidden_layers=hidden_layers, tree_parents=tree_parents)

    __call__ = forward

    def run_plan(self, plan: VerifyPlan, *, hidden_layers: Sequence[int] = (), view: str = "exact") -> TargetOutput:
        """The forward of a :class:`~specdec.contracts.VerifyPlan` on this slot (its tree's parents)."""
        plan.check_prefix(self.length)
        return self.forward(
            plan.tokens, plan.positions, plan.mask, hidden_layers=hidden_layers, tree_parents=plan.row_parents, view=view
        )
