"""The fixed-shape draft step: a :class:`StaticDraftKVCache`, and feature ingestion + block forward +
the drafter's per-round head as one body per count of new context rows, run eagerly or replayed as a
CUDA graph by :class:`~specdec.models.graphs.StaticGraphs` with the row count held on the device (no
host sync)."""

from __future__ import annotations

import torch

from specdec.drafters.block.cache import DraftKVCache, StaticDraftKVCache
from specdec.models.graphs import StaticGraphs

__all__ = ["StaticDraftPath"]


class StaticDraftPath:
    """The static (CUDA-graph) path of :class:`~specdec.drafters.block.drafter.BlockDrafter`.

    Reads the drafter's ``model``, ``cfg``, ``embed`` and ``max_draft_tokens``; owns ``_static`` (the
    cache), ``_max_new_rows``, ``_graphs`` (the :class:`StaticGraphs` keyed by new-row count; its
    ``length`` is the cached row count the body reads), ``_pending`` (features not yet in the cache)
    and ``_graph_out`` (the body's outputs of the current round).
    """

    def enable_static_cache(self, max_context: int, *, max_new_rows: int | None = None) -> None:
        """Switch to the static path, run eagerly: a preallocated cache of ``max_context`` context rows.

        Rounds that bring at most ``max_new_rows`` new feature rows (default ``max_draft_tokens + 1``:
        the accepted drafts and the previous root) ingest them inside the fixed-shape body; larger
        ingestions (the prompt) are projected into the cache eagerly first. Empties the cache.
        A context longer than ``max_context + 1`` tokens raises ``ValueError`` before any launch.

        Example:
            >>> import specdec as sd
            >>> from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model
            >>> from specdec.testing import tiny_target
            >>> target, prompt = tiny_target(seed=0), torch.tensor([[1, 2, 3]])
            >>> drafter = DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target)
            >>> drafter.enable_static_cache(64)         # eager; enable_cuda_graphs captures the same body
            >>> out = sd.generate(target, prompt, 16, drafter=drafter, num_draft_tokens=drafter.max_draft_tokens)
            >>> torch.equal(out.tokens, sd.generate(target, prompt, 16).tokens)
            True
        """
        self._enable_static(max_context, max_new_rows, capture=False)

    @torch.no_grad()
    def enable_cuda_graphs(self, max_context: int, *, max_new_rows: int | None = None) -> None:
        """:meth:`enable_static_cache`, then capture the body as one CUDA graph per new-row count
        ``0 .. max_new_rows`` (captured here, on an empty cache). A round then copies its features,
        the anchor and the cached row count into static buffers and replays: no host sync.

        Raises:
            ValueError: the drafter is not on a CUDA device.
        """
        device = self.model.fc.weight.device
        if device.type != "cuda":
            raise ValueError(f"enable_cuda_graphs: expected a drafter on a CUDA device, got {device}")
        self._enable_static(max_context, max_new_rows, capture=True)
        # on the empty cache of enable time the warm-ups, the capture and its replay only write scratch slots
        for rows in range(self._max_new_rows + 1):
            self._graphs.run(rows, self._round_body(rows))

    def _enable_static(self, max_context: int, max_new_rows: int | None, *, capture: bool) -> None:
        if max_new_rows is None:
            max_new_rows = self.max_draft_tokens + 1
        if isinstance(max_new_rows, bool) or not isinstance(max_new_rows, int) or max_new_rows < 0:
            raise ValueError(f"max_new_rows: expected an int >= 0, got {max_new_rows!r}")
        weight = self.model.fc.weight
        cfg = self.cfg
        self._static = StaticDraftKVCache(
            cfg.num_layers,
            cfg.num_kv_heads,
            cfg.head_dim,
            max_context=max_context,
            block_size=cfg.block_size,
            dtype=weight.dtype,
            device=weight.device,
        )
        self.cache = self._static
        self._max_new_rows = max_new_rows
        self._graphs = StaticGraphs(weight.device, capture=capture)
        self._pending = None
        self._graph_out = None
        # the masked rows of every block, embedded at the anchor's side in the body
        self._mask_ids = torch.full((cfg.block_size - 1,), cfg.mask_token_id, dtype=torch.long, device=weight.device)

    def disable_static_cache(self) -> None:
        """Back to the dynamic (reference) path with an empty cache; drops the graphs."""
        self._static = None
        self._graphs = None
        self._pending = None
        self._graph_out = None
        self.cache = DraftKVCache(self.cfg.num_layers)

    def _static_body(self, feats: torch.Tensor | None, start: torch.Tensor, anchor: torch.Tensor) -> dict[str, torch.Tensor]:
        """Ingest ``feats [r, taps * H]`` at rows ``start + [0, r)``, then the block after them.

        ``start``: 0-d int64 device tensor; ``anchor``: ``[1]`` int64. Returns ``hidden [B, H]`` and the
        outputs of :meth:`_graph_head`. Fixed shapes for a given ``r``: what a graph captures.
        """
        model = self.model
        if feats is not None and feats.shape[0]:
            model.append_context_static(self._static, model.project_context(feats), start)
            start = start + feats.shape[0]
        ids = torch.cat([anchor, self._mask_ids])  # [B]
        noise = self.embed(ids) * self.cfg.input_embedding_scale  # [B, H]
        hidden = model.block_forward_static(noise.to(model.fc.weight.dtype), start, self._static)  # [B, H]
        out = {"hidden": hidden}
        out.update(self._graph_head(hidden, anchor))
        return out

    def _graph_head(self, hidden: torch.Tensor, anchor: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-round work on the block's hidden rows ``[B, H]`` that the static body (and graph) also
        runs: fixed-shape, no host sync, no randomness. Default: nothing."""
        return {}

    def _graph_heads(self, hidden: torch.Tensor, anchors: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        """:meth:`_graph_head` of each of ``n`` requests' blocks: ``hidden [n, B, H]``, ``anchors [n]``
        int64 -> one dict a request. Default: one call per request (a subclass may batch them)."""
        return [self._graph_head(hidden[j], anchors[j : j + 1]) for j in range(hidden.shape[0])]

    def _round_buffers(self, rows: int) -> dict[str, torch.Tensor]:
        """The static inputs of the ``rows``-row body: ``feats [rows, taps * H]`` and ``anchor [1]``."""
        taps = len(self.target_layer_ids)
        dtype = self.model.fc.weight.dtype
        return self._graphs.buffers(
            rows,
            lambda: {
                "feats": torch.zeros(rows, taps * self.cfg.hidden_size, dtype=dtype),
                "anchor": torch.zeros(1, dtype=torch.long),
            },
        )

    def _round_body(self, rows: int):
        """The body of a round with ``rows`` new feature rows, on its static buffers; the cached row
        count is ``self._graphs.length``."""
        static, graphs = self._round_buffers(rows), self._graphs
        return lambda: self._static_body(static["feats"] if rows else None, graphs.length, static["anchor"])

    def _run_static(self, context: torch.Tensor) -> dict[str, torch.Tensor]:
        """Ingest the pending rows and run the block on the static path (a replay, or the body eagerly)."""
        cache = self._static
        feats, self._pending = self._pending, None
        rows = 0 if feats is None else feats.shape[0]
        start = cache.length
        device = cache.k[0].device
        if rows > self._max_new_rows:
            # the prompt (or a long catch-up): eager projection, then the block alone
            self.model.append_context_static(
                cache, self.model.project_context(feats), torch.full((), start, dtype=torch.long, device=device)
            )
            start, feats, rows = start + rows, None, 0
        cache.length = start + rows
        static = self._round_buffers(rows)
        if rows:
            static["feats"].copy_(feats)
        static["anchor"].copy_(context[-1:])
        self._graphs.set_length(start)
        return self._graphs.run(rows, self._round_body(rows))

    def _flush_pending(self) -> None:
        """Project pending feature rows into the static cache without running a block (k = 0 rounds)."""
        feats, self._pending = self._pending, None
        if feats is not None and feats.shape[0]:
            cache = self._static
            start = torch.full((), cache.length, dtype=torch.long, device=cache.k[0].device)
            self.model.append_context_static(cache, self.model.project_context(feats), start)
            cache.length += feats.shape[0]
