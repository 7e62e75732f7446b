"""Draft with any small causal LM that shares the target's vocabulary."""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from specdec.drafters.base import DraftProposal
from specdec.contracts.target import Target
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample


class ModelDrafter:
    """Autoregressive drafting with a small LM, keeping its own cache across rounds.

    ``model`` is either a specdec :class:`~specdec.models.Target` (the lean runtime: rollback is a
    change of its committed length) or an HF causal LM (``DynamicCache``: attention layers are
    cropped; recurrent layers such as Gated DeltaNet, which cannot be cropped, are restored from a
    snapshot taken at the end of the previous context and replayed forward).

    At ``temperature > 0`` each draft token is drawn from the draft law (after the same
    temperature / top-k / top-p as the target) and that law is returned as ``draft_probs``, which is
    what makes rejection sampling exact. Greedy drafting returns ``draft_probs=None``.

    Args:
        model: the draft LM.
        vocab_size: defaults to the model's own.

    Example:
        >>> from specdec.testing import tiny_target
        >>> drafter = ModelDrafter(tiny_target(seed=1, max_seq_len=64))
        >>> drafter.reset()
        >>> drafter.propose(torch.tensor([1, 2, 3]), 4, sampling=SamplingConfig(), generator=None).tokens.shape
        torch.Size([4])
    """

    def __init__(self, model: Any, *, vocab_size: int | None = None):
        self.model = model
        self.is_target = isinstance(model, Target)
        if vocab_size is None:
            vocab_size = model.vocab_size if self.is_target else model.config.vocab_size
        self.vocab_size = vocab_size
        if not self.is_target:
            params = inspect.signature(model.forward).parameters
            # transformers >= 5.20 renamed past_key_values to cache
            self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._cached = torch.zeros(0, dtype=torch.long)  # token ids whose state is in the cache
        self._cache = None
        self._snapshot: tuple[int, Any] | None = None

    @property
    def device(self) -> torch.device:
        return self.model.device if self.is_target else next(self.model.parameters()).device

    def reset(self) -> None:
        self._cached = torch.zeros(0, dtype=torch.long, device=self.device)
        self._snapshot = None
        if self.is_target:
            self.model.reset()
        else:
            from transformers import DynamicCache

            self._cache = DynamicCache(config=self.model.config)

    # ----------------------------------------------------------------------------------------------
    def _common_prefix(self, context: torch.Tensor) -> int:
        n = min(self._cached.numel(), context.numel() - 1)  # always feed at least the newest token
        if n <= 0:
            return 0
        same = (self._cached[:n] == context[:n]).long()
        return int(same.cumprod(0).sum())

    def _rollback(self, keep: int) -> int:
        """Drop cached state beyond ``keep`` tokens; returns how many tokens remain cached."""
        cached = self._cached.numel()
        if keep == cached:
            return keep
        if self.is_target:
            self.model.truncate(keep)
            return keep
        if self._cache.is_croppable:
            self._cache.crop(keep - cached)  # negative: number of tokens to remove
            return keep
        if self._snapshot is not None and self._snapshot[0] <= keep:
            length, state = self._snapshot
            self._cache = copy.deepcopy(state)
            return length
        from transformers import DynamicCache

        self._cache = DynamicCache(config=self.model.config)
        return 0

    def _feed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Run ``tokens [n]`` through the draft model; returns the last row's logits ``[V]``."""
        if self.is_target:
            logits = self.model(tokens[None]).logits[0, -1]
            self.model.commit(tokens.numel())
            return logits
        out = self.model(input_ids=tokens[None], use_cache=True, **{self._cache_kwarg: self._cache})
        return out.logits[0, -1].float()

    @torch.no_grad()
    def propose(self, context, max_tokens, *, sampling: SamplingConfig, generator) -> DraftProposal:
        keep = self._rollback(self._common_prefix(context))
        logits = self._feed(context[keep:])
        if not self.is_target and not self._cache.is_croppable:
            self._snapshot = (context.numel(), copy.deepcopy(self._cache))
        tokens, laws, scores = [], [], []
        for i in range(max_tokens):
            scores.append(torch.log_softmax(logits.float(), dim=-1))
            if sampling.greedy:
                token = logits.argmax(-1, keepdim=True)
            else:
                law = logits_to_probs(logits, sampling)
                token = sample(law, generator).view(1)
                laws.append(law)
            tokens.append(token)
            if i + 1 < max_tokens:
                logits = self._feed(token)
        drafted = torch.cat(tokens) if tokens else context.new_zeros(0)
        self._cached = torch.cat([context, drafted[:-1]]) if tokens else context.clone()
        return DraftProposal(
            tokens=drafted,
            draft_probs=torch.stack(laws) if laws else None,
            tree_logprobs=torch.stack(scores) if scores else None,
        )
