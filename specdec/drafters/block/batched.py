"""A block drafter (DFlash, DFlash2, DSpark) drafting for several requests at once.

:class:`BatchedBlockDrafter` holds every request's draft cache in one :class:`SlotDraftKVCache` and
runs a round for all of them as ONE feature ingestion (``fc`` and every layer's K/V projections over
all requests' new rows) and ONE block forward (the requests' blocks as a batch, each attending to its
own slot under a mask built on the device), then the drafter's head over every block. Each slot keeps
its longest prefix that the request's new feature rows continue (per-request rollback), as the
unbatched drafter's cache does.

Per request the head draws tokens with the request's own generator in the order the unbatched
drafter's :meth:`~specdec.drafters.block.BlockDrafter.propose` draws them. With the layout
``"per_request"`` each request's rows go through the model alone, exactly as the unbatched drafter's
static path (:meth:`~specdec.drafters.block.BlockDrafter.enable_static_cache`, same ``max_context``)
runs them: hidden states, drafts, laws and scores are ``torch.equal`` to it. With ``"packed"`` (one
GEMM per layer over all requests' rows) they agree to rounding, so a draft can differ from the
unbatched one; verification keeps the target's law either way.
"""

from __future__ import annotations

import torch

from specdec.contracts.proposal import DraftProposal
from specdec.drafters.batched_model import check_batch_arguments
from specdec.drafters.block.cache import SlotDraftKVCache
from specdec.drafters.block.ingest import check_features, kept_rows
from specdec.models.graphs import StaticGraphs, pick_bucket
from specdec.models.ragged import LAYOUTS

__all__ = ["BatchedBlockDrafter"]


class BatchedBlockDrafter:
    """One ingestion and one block forward per round for every request of a block drafter.

    Build it with :meth:`BlockDrafter.batched <specdec.drafters.block.BlockDrafter.batched>` (what
    :class:`~specdec.engine.Engine` does with ``batched_drafting=True``). The drafter given is the head:
    its weights, its ``_draft`` (greedy, sampled, tree) and its per-round head run on each request's rows;
    its own cache is not used.

    Args:
        drafter: a :class:`~specdec.drafters.block.BlockDrafter` (DFlash, DFlash2 or DSpark without a
            batch-1 ``PrefixScheduler``).
        slots: requests it can hold (an engine's ``max_batch``).
        layout: ``"packed"`` (default: one forward over all requests) or ``"per_request"`` (each request
            alone: proposals ``torch.equal`` to the unbatched drafter's static path).
        max_context: the most committed context rows a request may have (the slot size).

    Attributes:
        cache: the :class:`~specdec.drafters.block.SlotDraftKVCache` of ``slots + 1`` slots; the last one is
            spare (the static path's padding rows and idle blocks write there).
        host_context: ``True``: contexts may be host tensors (a round reads only each one's length and last
            token), so :class:`~specdec.engine.Engine` passes its host copy instead of copying every context
            to the device each round.

    Example:
        >>> from specdec.contracts.sampling import SamplingConfig
        >>> from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> drafter = DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target)
        >>> batch = drafter.batched(slots=2, max_context=64)
        >>> batch.reset(0); batch.reset(1)
        >>> contexts = [torch.tensor([5, 6, 7, 8]), torch.tensor([9, 3])]
        >>> feats = [target.forward(c[None, :-1], hidden_layers=drafter.target_layer_ids).hidden for c in contexts]
        >>> hiddens = [torch.stack(h, dim=2)[0] for h in feats]            # [rows, taps, H] each
        >>> props = batch.propose_batch([0, 1], contexts, [3, 2], samplings=[SamplingConfig()] * 2,
        ...                             generators=[None, None], target_hiddens=hiddens)
        >>> [p.tokens.shape[0] for p in props], batch.cache.lengths[:2]     # context rows per slot
        ([3, 2], [3, 1])
    """

    def __init__(self, drafter, *, slots: int, layout: str = "packed", max_context: int):
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots: expected an int >= 1, got {slots!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {list(LAYOUTS)}, got {layout!r}")
        self.drafter = drafter
        self.slots = slots
        self.layout = layout
        self.vocab_size = drafter.vocab_size
        self.target_layer_ids = tuple(drafter.target_layer_ids)
        cfg = drafter.cfg
        weight = drafter.model.fc.weight
        # one slot more than requests: the static path's padding rows and idle blocks write there
        self.cache = SlotDraftKVCache(
            cfg.num_layers,
            cfg.num_kv_heads,
            cfg.head_dim,
            slots=slots + 1,
            max_context=max_context,
            block_size=cfg.block_size,
            dtype=weight.dtype,
            device=weight.device,
        )
        self._mask_ids = torch.full((cfg.block_size - 1,), cfg.mask_token_id, dtype=torch.long, device=weight.device)
        self._graphs: StaticGraphs | None = None
        self.row_buckets: tuple[int, ...] = ()

    # contexts may stay on the host (an engine then copies none): a round reads each one's length and last token
    host_context = True

    @property
    def uses_static_path(self) -> bool:
        """Whether rounds run the fixed-shape body (:meth:`enable_static_path`, :meth:`enable_cuda_graphs`) (bool)."""
        return self._graphs is not None

    @property
    def uses_cuda_graphs(self) -> bool:
        """Whether rounds replay CUDA graphs (after :meth:`enable_cuda_graphs`) (bool)."""
        return self._graphs is not None and self._graphs.capture

    def enable_static_path(self, row_buckets: tuple[int, ...] | None = None) -> None:
        """Run each round as one fixed-shape body, eagerly: what :meth:`enable_cuda_graphs` captures.

        The body ingests the round's new feature rows padded to the smallest of ``row_buckets`` that holds
        them (padding rows go to a spare slot), then runs the block of EVERY slot (idle slots write only
        their scratch positions) and the drafter's head over all of them, with each slot's cached row
        count and anchor held on the device: shapes depend only on the bucket. A round with more new rows
        than the largest bucket (a prompt) projects them eagerly first. Default buckets: 0, then powers of
        two from 8 up to ``slots x (max_draft_tokens + 1)`` (every request's accepted drafts and root).
        Layout ``"packed"`` only; drafts agree with the eager packed path to rounding.

        Example:
            >>> from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> drafter = DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target)
            >>> batch = drafter.batched(slots=3, max_context=64)
            >>> batch.enable_static_path(); batch.row_buckets
            (0, 8, 16, 32)
        """
        self._enable_static(row_buckets, capture=False)

    def enable_cuda_graphs(self, row_buckets: tuple[int, ...] | None = None) -> None:
        """:meth:`enable_static_path` with each bucket's body captured as a CUDA graph at its first round and
        replayed after: a round is a few small host-to-device copies and one replay.

        Raises:
            ValueError: the drafter is not on a CUDA device, or the layout is not ``"packed"``.
        """
        device = self.cache.k[0].device
        if device.type != "cuda":
            raise ValueError(f"enable_cuda_graphs: expected a drafter on a CUDA device, got {device}")
        self._enable_static(row_buckets, capture=True)

    def _enable_static(self, row_buckets, *, capture: bool) -> None:
        if self.layout != "packed":
            raise ValueError(
                f"layout: the static path runs every slot's block in one body (layout 'packed'), got {self.layout!r}"
            )
        if row_buckets is None:
            most, bucket, buckets = self.slots * (self.max_draft_tokens + 1), 8, [0]
            while buckets[-1] < most:
                buckets.append(bucket)
                bucket *= 2
            row_buckets = tuple(buckets)
        row_buckets = tuple(row_buckets)
        if (
            not row_buckets
            or any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in row_buckets)
            or list(row_buckets) != sorted(set(row_buckets))
            or row_buckets[0] != 0
        ):
            raise ValueError(f"row_buckets: expected ascending distinct ints >= 0 starting at 0, got {row_buckets!r}")
        self.row_buckets = row_buckets
        self._graphs = StaticGraphs(self.cache.k[0].device, capture=capture)

    def _no_tokens(self) -> torch.Tensor:
        return torch.zeros(0, dtype=torch.long, device=self.cache.k[0].device)

    @property
    def max_draft_tokens(self) -> int:
        """The most tokens one request's round proposes (the drafter's, int)."""
        return self.drafter.max_draft_tokens

    def _check_slot(self, slot) -> None:
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.slots:
            raise ValueError(f"slot: expected an int in [0, {self.slots}), got {slot!r}")

    def reset(self, slot: int) -> None:
        """Start a request in ``slot``: its draft cache is empty (its buffers are kept)."""
        self._check_slot(slot)
        self.cache.lengths[slot] = 0

    @torch.no_grad()
    def propose_batch(self, slots, contexts, max_tokens, *, samplings, generators, target_hiddens) -> list[DraftProposal]:
        """One proposal per request, each as the drafter's ``propose`` makes it alone.

        Args:
            slots: the requests' slots (distinct).
            contexts: ``[n_i]`` int64, each request so far; its newest token is its block's anchor.
            max_tokens: the most tokens (tree nodes with a ``tree_budget``) request ``i`` may get.
            samplings, generators: each request's law and RNG.
            target_hiddens: ``[r_i, taps, H]``, the target's features of the rows request ``i`` committed
                since its previous call (``None``: none).

        Every request's arguments are checked (shapes, rows, capacity) before any cache changes.
        """
        check_batch_arguments(self, slots, contexts, max_tokens, samplings, generators, target_hiddens)
        drafter, cache = self.drafter, self.cache
        taps, hidden_size = len(self.target_layer_ids), drafter.cfg.hidden_size
        kept, rows = [], []
        for i, (slot, context, hidden) in enumerate(zip(slots, contexts, target_hiddens)):
            r = check_features(hidden, taps, hidden_size, name=f"target_hiddens[{i}]")
            kept.append(kept_rows(cache.lengths[slot], r, context.numel(), name=f"target_hiddens[{i}]"))
            rows.append(r)
            cache.reserve(context.numel() - 1, name=f"contexts[{i}]")
        sizes = [max(0, min(int(k), drafter.max_draft_tokens)) for k in max_tokens]
        if self._graphs is not None:
            return self._propose_static(slots, contexts, sizes, max_tokens, samplings, generators, target_hiddens, kept, rows)
        requests = range(len(slots))
        groups = [list(requests)] if self.layout == "packed" else [[i] for i in requests]
        proposals: list[DraftProposal | None] = [None] * len(slots)
        try:
            for group in groups:
                self._ingest([(slots[i], kept[i], rows[i], target_hiddens[i]) for i in group])
                drafting = [i for i in group if sizes[i] > 0]
                if drafting:
                    self._draft_group(drafting, slots, contexts, sizes, max_tokens, samplings, generators, proposals)
        finally:
            drafter._graph_out = None
        for i in requests:
            if proposals[i] is None:
                proposals[i] = DraftProposal(tokens=self._no_tokens())
        return proposals

    def _new_rows(self, entries) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """``(features, slots, positions)`` of the new rows of ``entries`` ``(slot, kept rows, new rows, features)``,
        per request with rows (host slot and position ids); each slot's length becomes its kept plus new rows."""
        feats, slot_ids, positions = [], [], []
        for slot, keep, r, hidden in entries:
            self.cache.lengths[slot] = keep + r
            if r:
                feats.append(hidden.reshape(r, -1))
                slot_ids.append(torch.full((r,), slot, dtype=torch.long))
                positions.append(torch.arange(keep, keep + r))
        return feats, slot_ids, positions

    def _ingest(self, entries) -> None:
        """The new feature rows of ``entries`` ``(slot, kept rows, new rows, features)`` into their slots, in one projection."""
        cache, model = self.cache, self.drafter.model
        feats, slot_ids, positions = self._new_rows(entries)
        if not feats:
            return
        device = cache.k[0].device
        context = model.project_context(torch.cat(feats).to(model.fc.weight.dtype))  # [R, H]
        model.append_context_slots(
            cache.k,
            cache.v,
            context,
            torch.cat(slot_ids).to(device, non_blocking=True),
            torch.cat(positions).to(device, non_blocking=True),
        )

    def _draft_group(self, group, slots, contexts, sizes, max_nodes, samplings, generators, proposals) -> None:
        """One block forward over the requests of ``group``, then each one's head and draft."""
        drafter, cache = self.drafter, self.cache
        model, cfg = drafter.model, drafter.cfg
        device = cache.k[0].device
        anchors = torch.cat([contexts[i][-1:] for i in group]).to(device, non_blocking=True)  # [m]
        ids = torch.cat([anchors[:, None], self._mask_ids.expand(len(group), -1)], dim=1)  # [m, B]
        noise = drafter.embed(ids) * cfg.input_embedding_scale  # [m, B, H]
        starts = torch.tensor([cache.lengths[slots[i]] for i in group], dtype=torch.long).to(device, non_blocking=True)
        index = torch.tensor([slots[i] for i in group], dtype=torch.long).to(device, non_blocking=True)
        hidden = model.block_forward_slots(noise.to(model.fc.weight.dtype), starts, cache.k, cache.v, slots=index)  # [m, B, H]
        heads = drafter._graph_heads(hidden, anchors)
        first = drafter.first_predicting_row
        for j, i in enumerate(group):
            k = sizes[i]
            drafter._graph_out = heads[j]
            rows = hidden[j, first : first + k]  # [k, H]
            # the head reads only the context's last token (the anchor): its device copy
            proposals[i] = drafter._draft(anchors[j : j + 1], rows, k, samplings[i], generators[i], max_nodes=max_nodes[i])

    def _propose_static(
        self, slots, contexts, sizes, max_nodes, samplings, generators, target_hiddens, kept, rows
    ) -> list[DraftProposal]:
        """A round on the static path: the bucket's body (a replay under CUDA graphs), then each request's draft."""
        drafter, cache = self.drafter, self.cache
        total = sum(rows)
        bucket = pick_bucket(self.row_buckets, total)
        entries = [(slot, keep, r, hidden) for slot, keep, r, hidden in zip(slots, kept, rows, target_hiddens)]
        if bucket is None:
            # a prompt: projected eagerly, then the block of every slot alone
            self._ingest(entries)
            entries, bucket = [], 0
        static = self._static_buffers(bucket)
        feats, slot_ids, positions = self._new_rows(entries)
        if bucket:
            pad = bucket - total
            if pad:
                feats.append(feats[0].new_zeros(pad, feats[0].shape[1]))
                slot_ids.append(torch.full((pad,), self.slots, dtype=torch.long))  # the spare slot
                positions.append(torch.arange(pad) % cache.positions)
            static["feats"].copy_(torch.cat(feats), non_blocking=True)
            static["row_slots"].copy_(torch.cat(slot_ids), non_blocking=True)
            static["row_positions"].copy_(torch.cat(positions), non_blocking=True)
        drafting = [i for i, k in enumerate(sizes) if k]
        if drafting:
            where = torch.tensor([slots[i] for i in drafting], dtype=torch.long).to(cache.k[0].device, non_blocking=True)
            anchors = torch.cat([contexts[i][-1:] for i in drafting]).to(where.device, non_blocking=True)
            static["anchors"].index_copy_(0, where, anchors)
        # every slot's block starts after its context rows (idle slots: scratch only)
        static["starts"].copy_(torch.tensor([*cache.lengths[: self.slots], 0], dtype=torch.long), non_blocking=True)
        hidden, heads = self._graphs.run(bucket, self._static_body(bucket))
        first = drafter.first_predicting_row
        proposals = []
        try:
            for slot, k, nodes, sampling, generator in zip(slots, sizes, max_nodes, samplings, generators):
                if not k:
                    proposals.append(DraftProposal(tokens=self._no_tokens()))
                    continue
                drafter._graph_out = heads[slot]
                # the head reads only the context's last token: the anchor the body used
                anchor = static["anchors"][slot : slot + 1]
                proposals.append(drafter._draft(anchor, hidden[slot, first : first + k], k, sampling, generator, max_nodes=nodes))
        finally:
            drafter._graph_out = None
        return proposals

    def _static_buffers(self, bucket: int) -> dict[str, torch.Tensor]:
        taps, cfg = len(self.target_layer_ids), self.drafter.cfg
        dtype = self.drafter.model.fc.weight.dtype
        n = self.slots + 1
        return self._graphs.buffers(
            bucket,
            lambda: {
                "feats": torch.zeros(bucket, taps * cfg.hidden_size, dtype=dtype),
                "row_slots": torch.full((bucket,), self.slots, dtype=torch.long),
                "row_positions": torch.zeros(bucket, dtype=torch.long),
                "anchors": torch.full((n,), cfg.mask_token_id, dtype=torch.long),
                "starts": torch.zeros(n, dtype=torch.long),
            },
        )

    def _static_body(self, bucket: int):
        """The fixed-shape round of ``bucket`` new rows: ingestion, every slot's block, the head of every block."""
        static, drafter, cache = self._static_buffers(bucket), self.drafter, self.cache
        model, cfg = drafter.model, drafter.cfg

        def body():
            if bucket:
                context = model.project_context(static["feats"])  # [bucket, H]
                model.append_context_slots(cache.k, cache.v, context, static["row_slots"], static["row_positions"])
            anchors = static["anchors"]
            ids = torch.cat([anchors[:, None], self._mask_ids.expand(anchors.shape[0], -1)], dim=1)  # [S + 1, B]
            noise = drafter.embed(ids) * cfg.input_embedding_scale
            hidden = model.block_forward_slots(noise.to(model.fc.weight.dtype), static["starts"], cache.k, cache.v)
            return hidden, drafter._graph_heads(hidden, anchors)

        return body
