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
        >>> [p.tokens.shape[0] for p in props], batch.cache.lengths
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
        self.cache = SlotDraftKVCache(
            cfg.num_layers,
            cfg.num_kv_heads,
            cfg.head_dim,
            slots=slots,
            max_context=max_context,
            block_size=cfg.block_size,
            dtype=weight.dtype,
            device=weight.device,
        )
        self._mask_ids = torch.full((cfg.block_size - 1,), cfg.mask_token_id, dtype=torch.long, device=weight.device)

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
        requests = range(len(slots))
        groups = [list(requests)] if self.layout == "packed" else [[i] for i in requests]
        proposals: list[DraftProposal | None] = [None] * len(slots)
        try:
            for group in groups:
                self._ingest([(slots[i], kept[i], rows[i], target_hiddens[i]) for i in group])
                drafting = [i for i in group if sizes[i] > 0]
                if drafting:
                    self._draft_group(drafting, slots, contexts, sizes, samplings, generators, proposals)
        finally:
            drafter._graph_out = None
        for i in requests:
            if proposals[i] is None:
                proposals[i] = DraftProposal(tokens=contexts[i].new_zeros(0))
        return proposals

    def _ingest(self, entries) -> None:
        """The new feature rows of ``entries`` ``(slot, kept rows, new rows, features)`` into their slots, in one projection."""
        cache, model = self.cache, self.drafter.model
        feats, slot_ids, positions = [], [], []
        for slot, keep, r, hidden in entries:
            cache.lengths[slot] = keep
            if r:
                feats.append(hidden.reshape(r, -1))
                slot_ids.append(torch.full((r,), slot, dtype=torch.long))
                positions.append(torch.arange(keep, keep + r))
                cache.lengths[slot] = keep + r
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

    def _draft_group(self, group, slots, contexts, sizes, samplings, generators, proposals) -> None:
        """One block forward over the requests of ``group``, then each one's head and draft."""
        drafter, cache = self.drafter, self.cache
        model, cfg = drafter.model, drafter.cfg
        device = cache.k[0].device
        anchors = torch.cat([contexts[i][-1:].to(device) for i in group])  # [m]
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
            proposals[i] = drafter._draft(contexts[i], rows, k, samplings[i], generators[i])
