"""A small causal LM drafting for several requests at once: one forward per draft step for all of them.

:class:`BatchedModelDrafter` holds one KV slot per request over the draft model's weights (a
:class:`~specdec.models.ragged.RaggedDenseTarget`); each draft step is ONE forward over the requests still
drafting (the first step carries each request's new context rows), and each slot is rolled back to its
longest common prefix with the request's new context (the accepted length). It is the batched form of
:class:`~specdec.drafters.ModelDrafter` (:meth:`ModelDrafter.batched <specdec.drafters.ModelDrafter.batched>`)
and what :class:`~specdec.engine.Engine` uses with ``batched_drafting=True``.

Per request, tokens are drawn with the request's own generator in the order ``ModelDrafter.propose``
draws them alone, from the same processed law. With the ragged layout ``"per_request"`` the logits are
``torch.equal`` to the batch-1 drafter's, so the proposals are too; with ``"packed"`` (one GEMM per layer
over all requests' rows) they agree to rounding, so a draft can differ from the unbatched one.
Verification keeps the target's law either way.
"""

from __future__ import annotations

import warnings

import torch

from specdec.contracts.drafter import check_propose_arguments
from specdec.contracts.proposal import DraftProposal
from specdec.models.dense import DenseTarget
from specdec.models.ragged import LAYOUTS, RaggedDenseTarget, RequestRows
from specdec.verify.sampling import logits_to_probs, sample

__all__ = ["BatchedModelDrafter", "check_batch_arguments"]


def check_batch_arguments(drafter, slots, contexts, max_tokens, samplings, generators, target_hiddens) -> None:
    """The checks every batched drafter applies to ``propose_batch``'s arguments (one entry per slot, distinct slots)."""
    n = len(slots)
    for name, seq in (
        ("contexts", contexts),
        ("max_tokens", max_tokens),
        ("samplings", samplings),
        ("generators", generators),
        ("target_hiddens", target_hiddens),
    ):
        if len(seq) != n:
            raise ValueError(f"{name}: expected one entry per slot ({n}), got {len(seq)}")
    if len(set(slots)) != n:
        raise ValueError(f"slots: expected distinct slots, got {list(slots)}")
    for i, slot in enumerate(slots):
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < drafter.slots:
            raise ValueError(f"slots[{i}]: expected an int in [0, {drafter.slots}), got {slot!r}")
        check_propose_arguments(contexts[i], max_tokens[i], context_name=f"contexts[{i}]", max_name=f"max_tokens[{i}]")


class BatchedModelDrafter:
    """A small causal LM drafting for several requests: one draft-model forward per draft step for all of them.

    Each request has its own KV slot in a :class:`~specdec.models.ragged.RaggedDenseTarget` over the draft
    model's weights (shared, not copied). A call rolls each slot back to its longest common prefix with
    the request's context, runs every request's new context rows in one forward, then runs one forward
    per draft step over the requests that still draft (``k`` steps for ``max(max_tokens) = k``, instead of
    one forward per request per step). Each request's tokens are drawn as
    :meth:`ModelDrafter.propose <specdec.drafters.ModelDrafter.propose>` draws them: the argmax when greedy,
    else from the processed law with the request's generator, in the same order.

    Args:
        model: the draft model, a :class:`~specdec.models.DenseTarget` (dense decoder layers).
        slots: requests it can hold (an engine's ``max_batch``).
        layout: the ragged forward's layout: ``"packed"`` (default: one GEMM per layer over all requests'
            rows; drafts agree with the unbatched drafter's to rounding) or ``"per_request"`` (each
            request's rows alone: drafts ``torch.equal`` to :class:`~specdec.drafters.ModelDrafter`'s).
        vocab_size: defaults to the model's own.

    Example:
        >>> from specdec.contracts.sampling import SamplingConfig
        >>> from specdec.testing import tiny_target
        >>> drafter = BatchedModelDrafter(tiny_target(seed=1, max_seq_len=64), slots=2)
        >>> drafter.reset(0); drafter.reset(1)
        >>> props = drafter.propose_batch([0, 1], [torch.tensor([1, 2, 3]), torch.tensor([7])], [3, 2],
        ...                               samplings=[SamplingConfig()] * 2, generators=[None, None],
        ...                               target_hiddens=[None, None])
        >>> [p.tokens.shape[0] for p in props], drafter.forwards
        ([3, 2], 3)
    """

    target_layer_ids: tuple[int, ...] = ()

    def __init__(self, model: DenseTarget, *, slots: int, layout: str = "packed", vocab_size: int | None = None):
        if not isinstance(model, DenseTarget):
            raise TypeError(f"model: expected a specdec DenseTarget for batched drafting, got {type(model).__name__}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
        self.model = model
        self.ragged = RaggedDenseTarget(model, slots=slots, layout=layout)
        self.slots = slots
        self.layout = layout
        if vocab_size is not None and vocab_size != model.vocab_size:
            raise ValueError(
                f"vocab_size: expected the draft model's own ({model.vocab_size}), got {vocab_size!r}: its logits "
                "and draft laws have the model's width"
            )
        self.vocab_size = model.vocab_size
        self._warned_full = False
        self._cached = [torch.zeros(0, dtype=torch.long, device=model.device) for _ in range(slots)]
        self.forwards = 0

    @property
    def device(self) -> torch.device:
        """The draft model's device (:class:`torch.device`)."""
        return self.model.device

    def reset(self, slot: int) -> None:
        """Start a request in ``slot``: empty its cache (the other slots are untouched)."""
        self.ragged.reset(slot)
        self._cached[slot] = torch.zeros(0, dtype=torch.long, device=self.device)

    def _warn_full(self, context_len: int, max_tokens: int) -> None:
        if not self._warned_full:
            self._warned_full = True
            warnings.warn(
                f"BatchedModelDrafter: a context of {context_len} tokens and {max_tokens} draft tokens overflow a draft slot "
                f"of {self.ragged.max_seq_len}: such requests get fewer draft tokens (none past a full slot)",
                stacklevel=3,
            )

    def _common_prefix(self, slot: int, context: torch.Tensor) -> int:
        cached = self._cached[slot]
        n = min(cached.numel(), context.numel() - 1)  # always feed at least the newest token
        if n <= 0:
            return 0
        return int((cached[:n] == context[:n]).long().cumprod(0).sum())

    def _run(self, rows: list[RequestRows]) -> list[torch.Tensor]:
        """One forward of ``rows``, all committed; each request's last-row logits ``[V]``."""
        outs = self.ragged.forward(rows)
        self.forwards += 1
        for req in rows:
            self.ragged.commit(req.slot, req.tokens.shape[1])
        return [out.logits[0, -1] for out in outs]

    @torch.no_grad()
    def propose_batch(self, slots, contexts, max_tokens, *, samplings, generators, target_hiddens) -> list[DraftProposal]:
        """Draft ``max_tokens[i]`` tokens after ``contexts[i]`` for each request ``i`` (in ``slots[i]``).

        Args:
            slots: ``[c]`` distinct slot ids (each :meth:`reset` when its request started).
            contexts: ``c`` tensors ``[n_i]`` int64, each request so far, on :attr:`device`.
            max_tokens: ``c`` ints ``k_i >= 0``: exactly this many tokens are drafted, or as many as the slot still
                holds (``max_seq_len - n_i + 1``; none once the context fills it), with a warning the first time, as
                :meth:`ModelDrafter.propose <specdec.drafters.ModelDrafter.propose>` does; the other requests are
                unaffected.
            samplings, generators: each request's law and RNG (``None``: torch's global one, which the
                requests then share, drawing step by step across requests).
            target_hiddens: ignored entries (this drafter reads no target features); one per request.

        Returns:
            ``c`` :class:`~specdec.contracts.DraftProposal`, each with ``tokens [k_i]``, ``draft_probs
            [k_i, V]`` (``None`` when greedy) and ``tree_logprobs [k_i, V]``, as ``ModelDrafter.propose``.
        """
        check_batch_arguments(self, slots, contexts, max_tokens, samplings, generators, target_hiddens)
        rows, capped = [], []
        for slot, context, k in zip(slots, contexts, max_tokens):
            fits = self.ragged.max_seq_len - context.numel() + 1  # the draft tokens whose inputs the slot holds
            if fits < k:
                self._warn_full(context.numel(), k)
            capped.append(max(0, min(k, fits)))
            if fits < 1:  # not even the context fits: no draft for this request, its slot stays as it is
                continue
            keep = self._common_prefix(slot, context)
            self.ragged.truncate(slot, keep)
            rows.append(RequestRows(slot, context[keep:][None]))
        max_tokens = capped
        logits = dict(zip((r.slot for r in rows), self._run(rows))) if rows else {}
        drafted: dict[int, list] = {slot: [] for slot in slots}
        laws: dict[int, list] = {slot: [] for slot in slots}
        scores: dict[int, list] = {slot: [] for slot in slots}
        for i in range(max(max_tokens, default=0)):
            step_rows = []
            for slot, k, sampling, generator in zip(slots, max_tokens, samplings, generators):
                if i >= k:
                    continue
                row = logits[slot]
                scores[slot].append(torch.log_softmax(row.float(), dim=-1))
                if sampling.greedy:
                    token = row.argmax(-1, keepdim=True)
                else:
                    law = logits_to_probs(row, sampling)
                    token = sample(law, generator).view(1)
                    laws[slot].append(law)
                drafted[slot].append(token)
                if i + 1 < k:
                    step_rows.append(RequestRows(slot, token[None]))
            if step_rows:
                logits.update(zip((r.slot for r in step_rows), self._run(step_rows)))
        proposals = []
        for slot, context in zip(slots, contexts):
            tokens = torch.cat(drafted[slot]) if drafted[slot] else context.new_zeros(0)
            if slot in logits:  # its context ran
                self._cached[slot] = torch.cat([context, tokens[:-1]]) if drafted[slot] else context.clone()
            proposals.append(
                DraftProposal(
                    tokens=tokens,
                    draft_probs=torch.stack(laws[slot]) if laws[slot] else None,
                    tree_logprobs=torch.stack(scores[slot]) if scores[slot] else None,
                )
            )
        return proposals
