"""Draft with any small causal LM that shares the target's vocabulary."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from specdec.contracts.drafter import check_propose_arguments
from specdec.contracts.target import Target
from specdec.drafters.base import DraftProposal
from specdec.models.hf import HFTarget
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample


class ModelDrafter:
    """Autoregressive drafting with a small LM, keeping its own cache across rounds.

    ``model`` is a specdec :class:`~specdec.contracts.Target` (a lean target: rollback is a change of
    its committed length) or a transformers causal LM, which is wrapped in
    :class:`~specdec.models.HFTarget` (attention caches are cropped; recurrent layers such as Gated
    DeltaNet are restored from a copy and replayed). Either way the drafter only uses the protocol:
    ``forward``, ``commit``, ``truncate``, ``reset``.

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
        self.target: Target = model if isinstance(model, Target) else HFTarget(model)
        if vocab_size is not None and vocab_size != self.target.vocab_size:
            raise ValueError(
                f"vocab_size: expected the draft model's own ({self.target.vocab_size}), got {vocab_size!r}: its logits "
                "cover that many ids (a drafter must share the target's vocabulary)"
            )
        self.vocab_size = self.target.vocab_size
        self._cached = torch.zeros(0, dtype=torch.long)  # token ids whose state is in the target's cache
        self._warned_full = False
        self._warned_rollback = False

    @property
    def device(self) -> torch.device:
        """The draft model's device (:class:`torch.device`)."""
        return self.target.device

    def reset(self) -> None:
        """Start a request: empty the draft model's cache.

        Example:
            >>> from specdec.testing import tiny_target
            >>> drafter = ModelDrafter(tiny_target(seed=1))
            >>> drafter.reset(); drafter.target.length
            0
        """
        self._cached = torch.zeros(0, dtype=torch.long, device=self.device)
        self.target.reset()

    def batched(self, *, slots: int, layout: str = "packed"):
        """A :class:`~specdec.drafters.batched_model.BatchedModelDrafter` over this drafter's model: one forward per draft step for ``slots`` requests.

        Each request gets its own KV slot over the same weights; per request, tokens are drawn as
        :meth:`propose` draws them. Needs a specdec :class:`~specdec.models.DenseTarget` model.

        Example:
            >>> from specdec.testing import tiny_target
            >>> ModelDrafter(tiny_target(seed=1)).batched(slots=4).slots
            4
        """
        from specdec.drafters.batched_model import BatchedModelDrafter

        return BatchedModelDrafter(self.target, slots=slots, layout=layout, vocab_size=self.vocab_size)

    def _common_prefix(self, context: torch.Tensor) -> int:
        n = min(self._cached.numel(), context.numel() - 1)  # always feed at least the newest token
        if n <= 0:
            return 0
        same = (self._cached[:n] == context[:n]).long()
        return int(same.cumprod(0).sum())

    def _warn_full(self, context_len: int, max_tokens: int) -> None:
        if not self._warned_full:
            self._warned_full = True
            warnings.warn(
                f"ModelDrafter: a context of {context_len} tokens and {max_tokens} draft tokens overflow the draft model's "
                f"max_seq_len {self.target.max_seq_len}: it drafts fewer tokens from here on (none past a full cache); "
                "give the draft model the target's max_seq_len to keep drafting",
                stacklevel=3,
            )

    def _warn_rollback(self, keep: int, err: ValueError) -> None:
        if not self._warned_rollback:
            self._warned_rollback = True
            warnings.warn(
                f"ModelDrafter: the draft model cannot roll back to {keep} tokens ({err}); it reads the context again "
                "from the start in such rounds, which is slow. Draft fewer tokens a round than the draft model keeps "
                "states for (a hybrid model's state_slots), or give it more.",
                stacklevel=3,
            )

    def _feed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Run and commit ``tokens [n]``; returns the last row's logits ``[V]``."""
        logits = self.target.forward(tokens[None]).logits[0, -1]
        self.target.commit(tokens.numel())
        return logits

    @torch.no_grad()
    def propose(self, context, max_tokens, *, sampling: SamplingConfig, generator) -> DraftProposal:
        """Draft ``max_tokens`` tokens after ``context``, one draft-model step each.

        The draft cache keeps its longest common prefix with ``context`` (the rest is truncated) and the
        new context rows are run, so rollback after a rejection is implicit.

        Args:
            context: ``[n]`` int64, the request so far (prompt then emitted tokens), on :attr:`device`.
            max_tokens: tokens to draft: exactly this many (0 gives an empty proposal), or as many as the draft
                model's ``max_seq_len`` still holds (``max_seq_len - n + 1``; none once the context fills it),
                with a warning the first time: the request then decodes with shorter drafts, still losslessly.
            sampling: greedy takes the argmax; otherwise each token is drawn from the processed law
                (temperature / top-k / top-p).
            generator: the RNG of the draws (``None``: torch's global one).

        Returns:
            :class:`DraftProposal` with ``tokens [k]``, ``draft_probs [k, V]`` (``None`` when greedy) and
            ``tree_logprobs [k, V]`` (the draft model's log-softmax at each step).

        Example:
            >>> from specdec.testing import tiny_target
            >>> drafter = ModelDrafter(tiny_target(seed=1))
            >>> drafter.reset()
            >>> p = drafter.propose(torch.tensor([1, 2, 3]), 3, sampling=SamplingConfig(temperature=1.0),
            ...                     generator=torch.Generator().manual_seed(0))
            >>> p.tokens.shape, p.draft_probs.shape, p.tree_logprobs.shape
            (torch.Size([3]), torch.Size([3, 97]), torch.Size([3, 97]))
        """
        check_propose_arguments(context, max_tokens)
        if context.device.type == "cpu":  # free there; on an accelerator a host read a round (the loops pass checked ids)
            bad = ((context < 0) | (context >= self.vocab_size)).nonzero()
            if bad.numel():
                i = int(bad[0, 0])
                raise ValueError(f"context: expected token ids in [0, {self.vocab_size}), got context[{i}] = {int(context[i])}")
        fits = self.target.max_seq_len - context.numel() + 1  # the draft tokens whose inputs the draft cache holds
        if fits < max_tokens:
            self._warn_full(context.numel(), max_tokens)
            max_tokens = max(fits, 0)
        if fits < 1:  # not even the context fits (a round of 0 drafts too): no draft, the cache stays as it is
            return DraftProposal(tokens=context.new_zeros(0))
        keep = self._common_prefix(context)
        try:
            self.target.truncate(keep)
        except ValueError as err:  # a recurrent draft model keeps states for its last few commits only
            self._warn_rollback(keep, err)
            self.target.reset()
            keep = 0
        self._cached = self._cached[:keep]  # what the draft cache holds now, should feeding fail below
        logits = self._feed(context[keep:])
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
