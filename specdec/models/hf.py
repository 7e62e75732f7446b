"""Any transformers causal LM as a chain-only :class:`~specdec.contracts.Target`, on its own ``DynamicCache``."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.target import TargetOutput
from specdec.models.base import check_token_ids

__all__ = ["HFTarget"]


class HFTarget:
    """The chain path of the :class:`~specdec.contracts.Target` protocol over a transformers ``PreTrainedModel``.

    The model's own ``DynamicCache`` holds the committed tokens; :meth:`forward` appends rows to it,
    :meth:`commit` keeps the first ``n`` of them. Caches that can be cropped (attention) are cropped.
    Caches with recurrent layers (Gated DeltaNet hybrids), which cannot, are restored from a copy taken
    before the last multi-row forward and the kept tokens are run again, so every rollback is exact
    in the sense of "the state of these tokens", at the cost of a replay.

    No trees (``supports_trees`` is ``False``): :meth:`run_plan` takes chain plans only.

    Args:
        model: a transformers causal LM (``model(input_ids, ..., cache, use_cache=True)`` returning
            ``logits``), batch 1.
        max_seq_len: tokens the cache may hold; default ``config.max_position_embeddings`` (else 4096).

    Example:
        >>> from specdec.testing import tiny_hf_model
        >>> target = HFTarget(tiny_hf_model("llama", seed=0))
        >>> out = target.forward(torch.tensor([[1, 2, 3]]), hidden_layers=(2,))
        >>> out.logits.shape, out.hidden[0].shape
        (torch.Size([1, 3, 97]), torch.Size([1, 3, 32]))
        >>> target.commit(2); target.length
        2
    """

    def __init__(self, model: Any, *, max_seq_len: int | None = None):
        config = getattr(model, "config", None)
        if config is None or not callable(model) or not hasattr(model, "parameters"):
            raise TypeError(f"model: expected a transformers PreTrainedModel (causal LM), got {type(model).__name__}")
        if max_seq_len is None:
            max_seq_len = int(getattr(config, "max_position_embeddings", None) or 4096)
        if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 2:
            raise ValueError(f"max_seq_len: expected an int >= 2, got {max_seq_len!r}")
        self.model = model
        self.config = config
        self.max_seq_len = max_seq_len
        self.reset()

    @property
    def vocab_size(self) -> int:
        """``V``, the model config's ``vocab_size`` (int)."""
        return int(self.config.vocab_size)

    @property
    def device(self) -> torch.device:
        """The device of the model's first parameter (:class:`torch.device`)."""
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's first parameter; logits are returned as float32 (:class:`torch.dtype`)."""
        return next(self.model.parameters()).dtype

    @property
    def supports_trees(self) -> bool:
        """``False``: an HF model's attention takes no tree mask here; plans must be chains."""
        return False

    def room(self) -> int:
        """Tokens that still fit: ``max_seq_len - length``.

        Example:
            >>> from specdec.testing import tiny_hf_model
            >>> HFTarget(tiny_hf_model("llama", seed=0), max_seq_len=16).room()
            16
        """
        return self.max_seq_len - self.length

    def reset(self) -> None:
        """An empty cache."""
        from transformers import DynamicCache

        self.length = 0
        self._cache = DynamicCache(config=self.config)
        self._tokens = torch.zeros(0, dtype=torch.long, device=self.device)  # the committed ids, for replays
        self._scratch = self._tokens  # the rows of the last forward, not committed
        self._snapshot: tuple[int, Any] | None = None  # (length, cache copy) of a non-croppable cache

    def truncate(self, length: int) -> None:
        """Roll back to the first ``length`` committed tokens."""
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.length:
            raise ValueError(f"length: expected 0 <= length <= {self.length}, got {length!r}")
        self._rewind(length)
        self._tokens = self._tokens[:length]
        self.length = length

    def discard(self) -> None:
        """Drop the rows of the last forward from the cache."""
        self._rewind(self.length)

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
        """Run ``tokens [1, T]`` as a chain after the committed prefix (the cache keeps them as scratch rows).

        Args:
            tokens: ``[1, T]`` int64.
            positions: ``None`` or the chain's own ``length + arange(T)``.
            mask, tree_parents: must be ``None`` (chains only).
            hidden_layers: HF ``hidden_states`` indices (0 = embeddings, the last one after the final norm).
            view: ``"exact"`` only (an HF model has no 8-bit weight view here).

        Returns:
            :class:`TargetOutput` with float32 logits ``[1, T, V]``.
        """
        if view != "exact":
            raise ValueError(f"view: HFTarget has the weight views {self.weight_views}, got {view!r}; use a lean target")
        if mask is not None or tree_parents is not None:
            raise ValueError("mask: HFTarget runs chains only (supports_trees is False), got a tree mask / tree_parents")
        self._check_tokens(tokens)
        seqlen = tokens.shape[1]
        if positions is not None:
            chain = self.length + torch.arange(seqlen, device=tokens.device)[None]
            if tuple(positions.shape) != (1, seqlen) or not torch.equal(positions.to(chain.device), chain):
                raise ValueError(
                    f"positions: HFTarget runs chains only, expected None or {chain.tolist()}, got {positions.tolist()}"
                )
        layers = tuple(hidden_layers)
        for layer in layers:
            if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= self.config.num_hidden_layers:
                raise ValueError(f"hidden_layers: expected indices in [0, {self.config.num_hidden_layers}], got {layer!r}")
        self.discard()
        if seqlen > 1 and not self._cache.is_croppable:
            self._snapshot = (self.length, copy.deepcopy(self._cache))
        out = self._run(tokens, bool(layers))
        self._scratch = tokens[0]
        hidden = tuple(out.hidden_states[layer] for layer in layers) if layers else ()
        return TargetOutput(logits=out.logits.float(), hidden=hidden)

    __call__ = forward

    @property
    def weight_views(self) -> tuple[str, ...]:
        """``("exact",)``: the HF model's own weights only."""
        return ("exact",)

    def run_plan(self, plan: VerifyPlan, *, hidden_layers: Sequence[int] = (), view: str = "exact") -> TargetOutput:
        """The forward of a chain :class:`~specdec.contracts.VerifyPlan`; a tree plan raises ``ValueError``."""
        if not plan.is_chain:
            raise ValueError(
                f"plan: HFTarget verifies chains only (supports_trees is False), got a tree of {plan.tree.num_nodes} nodes; "
                "use a chain verifier or a lean target"
            )
        plan.check_prefix(self.length)
        return self.forward(plan.tokens, hidden_layers=hidden_layers, view=view)

    def commit(self, accepted: int | torch.Tensor) -> None:
        """Keep the first ``n`` rows of the last forward (the cache is cropped to ``length + n``).

        ``accepted`` may also be the rows ``[0, 1, ..., n - 1]`` as an int64 tensor (a chain's rows).
        """
        rows = self._scratch.numel()
        if isinstance(accepted, torch.Tensor):
            if accepted.ndim != 1 or accepted.dtype != torch.long:
                raise TypeError(f"accepted: expected an int or a 1-D int64 tensor, got {accepted.dtype} {tuple(accepted.shape)}")
            if not torch.equal(accepted.cpu(), torch.arange(accepted.numel())):
                raise ValueError(f"accepted: HFTarget keeps a prefix of the chain's rows, got rows {accepted.tolist()}")
            accepted = accepted.numel()
        if isinstance(accepted, bool) or not isinstance(accepted, int) or not 0 <= accepted <= rows:
            raise ValueError(f"accepted: expected 0 <= n <= {rows} (rows of the last forward), got {accepted!r}")
        kept = self._scratch[:accepted]
        if accepted < rows:
            self._rewind(self.length, keep_scratch=accepted)
        self._tokens = torch.cat([self._tokens, kept.to(self._tokens.device)])
        self.length += accepted
        self._scratch = self._tokens[:0]

    def _check_tokens(self, tokens) -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.dtype != torch.long:
            desc = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise TypeError(f"tokens: expected an int64 tensor [1, T], got {desc}")
        if tokens.shape[0] != 1 or tokens.shape[1] < 1:
            raise ValueError(f"tokens: expected shape [1, T] with T >= 1, got {tuple(tokens.shape)}")
        if tokens.device != self.device:
            raise ValueError(f"tokens: expected device {self.device}, got {tokens.device}")
        check_token_ids(tokens, self.vocab_size, "tokens")
        if self.length + tokens.shape[1] > self.max_seq_len:
            raise ValueError(
                f"tokens: {tokens.shape[1]} new rows do not fit: length {self.length} + {tokens.shape[1]} > max_seq_len {self.max_seq_len}"
            )

    @torch.no_grad()
    def _run(self, tokens: torch.Tensor, hidden: bool):
        # input_ids, attention_mask, position_ids, cache: positional, since the cache keyword was renamed
        # (past_key_values -> cache) across transformers versions while its position stayed
        return self.model(tokens, None, None, self._cache, use_cache=True, output_hidden_states=hidden)

    def _rewind(self, length: int, *, keep_scratch: int = 0) -> None:
        """Leave the cache holding committed tokens ``[0, length)`` plus the first ``keep_scratch`` scratch rows."""
        target_len = length + keep_scratch
        sequence = torch.cat([self._tokens[:length], self._scratch[:keep_scratch].to(self._tokens.device)])
        cached = self.length + self._scratch.numel()
        self._scratch = self._tokens[:0]
        if self._snapshot is not None and self._snapshot[0] > target_len:
            self._snapshot = None  # a state of tokens that are being dropped
        if cached == target_len:
            return
        if self._cache.is_croppable:
            self._cache.crop(target_len - cached)  # a negative count: tokens to remove
            return
        # recurrent layers cannot be cut back: restore the copy, or start over, and run the kept tokens again
        from transformers import DynamicCache

        if self._snapshot is not None and self._snapshot[0] <= target_len:
            start, saved = self._snapshot
            self._cache = copy.deepcopy(saved)
        else:
            start, self._cache, self._snapshot = 0, DynamicCache(config=self.config), None
        if target_len > start:
            self._run(sequence[start:target_len][None], False)
