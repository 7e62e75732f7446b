"""The round of every block drafter: feature ingestion into the draft cache and the block forward;
subclasses turn the block's hidden rows into drafts."""

from __future__ import annotations

import torch

from specdec.contracts.drafter import check_propose_arguments
from specdec.drafters.base import DraftProposal
from specdec.drafters.block.backbone import BlockDraftModel
from specdec.drafters.block.batched import BatchedBlockDrafter
from specdec.drafters.block.cache import DraftKVCache, StaticDraftKVCache
from specdec.drafters.block.checkpoint import load_block_model
from specdec.drafters.block.config import ARCHITECTURES, check_fits_target
from specdec.drafters.block.graphs import StaticDraftPath
from specdec.drafters.block.ingest import check_features, kept_rows
from specdec.models.graphs import StaticGraphs
from specdec.verify.sampling import SamplingConfig
from specdec.verify.tree import best_first_tree

__all__ = ["BlockDrafter"]


def _check_budget(tree_budget) -> int | None:
    if tree_budget is not None and (isinstance(tree_budget, bool) or not isinstance(tree_budget, int) or tree_budget < 1):
        raise ValueError(f"tree_budget: expected an int >= 1 or None, got {tree_budget!r}")
    return tree_budget


class BlockDrafter(StaticDraftPath):
    """Feature ingestion, the draft cache and the block forward; subclasses turn hidden rows into drafts.

    Two ways to run a round, giving the same proposals:

    * dynamic (the default and the reference): a :class:`DraftKVCache` that grows, eager PyTorch;
    * static (:meth:`enable_static_cache`, :meth:`enable_cuda_graphs`): a preallocated
      :class:`StaticDraftKVCache`, and feature ingestion + block forward + the subclass's
      :meth:`_graph_head` as one fixed-shape body per count of new context rows, with the row count
      held on the device. With CUDA graphs each round is one replay of that body and needs no host
      sync; without them the same body runs eagerly (how the CPU tests check it).

    Hooks for subclasses: :meth:`_draft` turns the predicting rows into a proposal; :meth:`_graph_head`
    adds per-round outputs computed inside the graph (``self._graph_out`` during :meth:`_draft`, or
    ``None`` on the dynamic path).
    """

    architectures: tuple[str, ...] = ()
    # rows of the block that predict tokens: DFlash drops the anchor row, DSpark keeps it
    first_predicting_row = 1

    def __init__(self, model: BlockDraftModel, target, *, tree_budget: int | None = None):
        if not isinstance(model, BlockDraftModel):
            raise TypeError(f"model: expected a BlockDraftModel, got {type(model).__name__}")
        if model.cfg.architecture not in self.architectures:
            raise ValueError(
                f"architectures: {type(self).__name__} reads {list(self.architectures)}, got {model.cfg.architecture!r}"
                + (" (use load_drafter to pick the class)" if model.cfg.architecture in ARCHITECTURES else "")
            )
        check_fits_target(model.cfg, target)
        self.model = model
        self.cfg = model.cfg
        # shared, not copied: the target's tables are the drafter's tables
        self.embed = target.embed
        self.lm_head = target.lm_head
        self.vocab_size = target.config.vocab_size
        self.target_layer_ids = model.cfg.hf_layer_ids
        self.tree_budget = _check_budget(tree_budget)
        # the default slot size of the batched form: a request never holds more rows than the target
        self._target_max_seq_len = target.max_seq_len
        self.cache: DraftKVCache | StaticDraftKVCache = DraftKVCache(model.cfg.num_layers)
        self.last_hidden: torch.Tensor | None = None
        # static path state (None / empty on the dynamic path)
        self._static: StaticDraftKVCache | None = None
        self._max_new_rows = 0
        self._graphs: StaticGraphs | None = None  # keyed by the round's count of new feature rows
        self._pending: torch.Tensor | None = None  # [r, taps * H] features not yet in the static cache
        self._graph_out: dict[str, torch.Tensor] | None = None

    @classmethod
    def from_pretrained(cls, folder, target, *, dtype: torch.dtype | None = None, tree_budget: int | None = None):
        """Load a published checkpoint folder for ``target`` (whose embedding and lm_head it shares)."""
        return cls(load_block_model(folder, target, dtype=dtype), target, tree_budget=tree_budget)

    @property
    def block_size(self) -> int:
        """Rows of one draft block, the anchor included (int)."""
        return self.cfg.block_size

    @property
    def max_draft_tokens(self) -> int:
        """The most tokens one round proposes: the block's predicting rows, ``block_size - first_predicting_row`` (int)."""
        return self.cfg.block_size - self.first_predicting_row

    @property
    def uses_cuda_graphs(self) -> bool:
        """Whether rounds replay CUDA graphs (after :meth:`enable_cuda_graphs`) (bool)."""
        return self._graphs is not None and self._graphs.capture

    def batched(self, *, slots: int, layout: str = "packed", max_context: int | None = None) -> BatchedBlockDrafter:
        """The :class:`~specdec.drafters.block.BatchedBlockDrafter` drafting for ``slots`` requests at once.

        One feature ingestion and one block forward per round for all of them, each request in its own
        slot of a preallocated cache of ``max_context`` context rows (default: the target's
        ``max_seq_len``). This drafter is the head (shared weights); its own cache is not used.
        ``layout="per_request"`` gives proposals ``torch.equal`` to this drafter's static path
        (:meth:`enable_static_cache` with the same ``max_context``), ``"packed"`` agrees to rounding.

        Example:
            >>> from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0, max_seq_len=64)
            >>> drafter = DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target)
            >>> batch = drafter.batched(slots=4)
            >>> batch.slots, batch.cache.max_context
            (4, 64)
        """
        return BatchedBlockDrafter(
            self, slots=slots, layout=layout, max_context=self._target_max_seq_len if max_context is None else max_context
        )

    def reset(self) -> None:
        """Start a request: empty the draft cache (the static cache keeps its buffers) and drop pending features.

        Example:
            >>> from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> drafter = DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target)
            >>> drafter.reset(); drafter.cache.length
            0
        """
        self._pending = None
        self._graph_out = None
        if self._static is not None:
            self._static.crop(0)
        else:
            self.cache = DraftKVCache(self.cfg.num_layers)

    def _ingest(self, context: torch.Tensor, target_hidden: torch.Tensor | None) -> None:
        self._graph_out = None
        n = context.numel()
        rows = check_features(target_hidden, len(self.target_layer_ids), self.cfg.hidden_size)
        if self._pending is not None:
            # a previous _ingest whose block never ran: its rows go in first
            self._flush_pending()
        cached = self.cache.length
        keep = kept_rows(cached, rows, n)
        if keep < cached:
            self.cache.crop(keep)
        cached = keep
        if not rows:
            return
        feats = target_hidden.reshape(rows, -1).to(self.model.fc.weight.dtype)  # [r, taps * H]
        if self._static is not None:
            self._static.reserve(n - 1)
            # ingested inside the next block's body (one graph for both)
            self._pending = feats
            return
        positions = torch.arange(cached, cached + rows, device=feats.device)
        self.model.append_context(self.cache, self.model.project_context(feats), positions)

    def _block_hidden(self, context: torch.Tensor) -> torch.Tensor:
        if self._static is not None:
            out = self._run_static(context)
            self._graph_out = out
            # a view of the graph's output buffer: valid until the next round
            self.last_hidden = out["hidden"]
            return out["hidden"]
        n = context.numel()
        b = self.cfg.block_size
        ids = torch.full((b,), self.cfg.mask_token_id, dtype=torch.long, device=context.device)
        ids[0] = context[-1]
        noise = self.embed(ids) * self.cfg.input_embedding_scale  # [B, H]
        positions = torch.arange(n - 1, n - 1 + b, device=context.device)
        hidden = self.model.block_forward(noise.to(self.model.fc.weight.dtype), positions, self.cache)  # [B, H]
        self.last_hidden = hidden
        return hidden

    @torch.no_grad()
    def propose(self, context, max_tokens, *, sampling: SamplingConfig, generator, target_hidden=None) -> DraftProposal:
        """Draft up to ``min(max_tokens, max_draft_tokens)`` tokens after ``context`` from one block forward.

        Args:
            context: ``[n]`` int64, the request so far; its newest token is the block's anchor.
            max_tokens: the most tokens (tree nodes with ``tree_budget``) to propose.
            sampling, generator: the request's law and RNG; greedy takes the argmax of each row.
            target_hidden: ``[r, taps, H]``, the target's hidden states at ``target_layer_ids`` for the
                ``r`` context rows committed since the previous call (features of ``context[:-1]`` in
                total); ``None`` when there are none.

        Returns:
            :class:`DraftProposal` with ``tokens [k]``; a chain carries ``draft_probs [k, V]`` when sampling
            (DFlash also ``tree_logprobs [k, V]``, its per-position log-softmaxes, from which a
            :class:`~specdec.TreeVerifier` builds its tree); a drafter built with ``tree_budget`` (DFlash2,
            DSpark) proposes a ``tree`` instead, whose tokens are not drawn (no ``draft_probs``: sample-and-match
            needs none).

        Example:
            >>> from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> drafter = DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target)
            >>> drafter.reset()
            >>> context = torch.tensor([5, 6, 7, 8])
            >>> out = target.forward(context[None, :-1], hidden_layers=drafter.target_layer_ids)
            >>> target_hidden = torch.stack(out.hidden, dim=2)[0]   # [3, taps, H]
            >>> drafter.propose(context, 4, sampling=SamplingConfig(), generator=None, target_hidden=target_hidden).tokens.shape
            torch.Size([4])
        """
        check_propose_arguments(context, max_tokens)
        self._ingest(context, target_hidden)
        k = max(0, min(int(max_tokens), self.max_draft_tokens))
        if k == 0:
            if self._pending is not None:
                self._flush_pending()
            return DraftProposal(tokens=context.new_zeros(0))
        hidden = self._block_hidden(context)[self.first_predicting_row : self.first_predicting_row + k]  # [k, H]
        return self._draft(context, hidden, k, sampling, generator, max_nodes=max_tokens)

    def _draft(self, context, hidden, k, sampling, generator, *, max_nodes: int) -> DraftProposal:
        """The proposal from the predicting rows ``hidden [k, H]``; reads only ``context[-1]`` (the anchor).

        ``k`` drafts in a chain; a tree (``tree_budget``) of at most ``min(tree_budget, max_nodes)`` nodes and depth ``k``.
        """
        raise NotImplementedError

    def _tree_from(self, child_logprobs, depth: int, budget: int, device) -> DraftProposal:
        tree = best_first_tree(child_logprobs, budget, max_depth=depth, device=device)
        # tokens: the first root-to-leaf path (each node's first child in node order)
        path, node = [], -1
        parents = tree.parents.tolist()
        while True:
            kids = [i for i, p in enumerate(parents) if p == node]
            if not kids:
                break
            node = kids[0]
            path.append(node)
        return DraftProposal(tokens=tree.tokens[path], tree=tree)
