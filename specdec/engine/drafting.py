"""Drafting for every running request of an :class:`~specdec.engine.Engine` in one call per round.

A :class:`BatchDrafter` holds one drafting state per engine slot and proposes for several requests at
once. :class:`BatchedModelDrafter` runs a small causal LM for all of them: each draft step is ONE forward
of a :class:`~specdec.models.ragged.RaggedDenseTarget` over the draft model's weights, one row per
request still drafting (the first step carries each request's new context rows), with a persistent KV
slot per request that is rolled back to its longest common prefix with the request's new context (the
accepted length). :class:`LoopDrafter` adapts drafters without a forward of their own (n-gram, oracle,
or any :class:`~specdec.contracts.Drafter`) by calling each request's drafter in turn.

Per request, :class:`BatchedModelDrafter` draws its tokens with the request's own generator in the
order :meth:`ModelDrafter.propose <specdec.drafters.ModelDrafter.propose>` draws them alone, from the
same processed law. With the ragged layout ``"per_request"`` its logits are ``torch.equal`` to the
batch-1 drafter's, so its proposals are too; with ``"packed"`` (one GEMM per layer over all requests'
rows) they agree to rounding (a float32 GEMM's rows depend on the row count on CPU), so a draft can
differ from the unbatched one. Verification keeps the target's law either way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import torch

from specdec.contracts.drafter import Drafter
from specdec.contracts.proposal import DraftProposal
from specdec.contracts.sampling import SamplingConfig
from specdec.drafters.batched_model import BatchedModelDrafter, check_batch_arguments

__all__ = ["BatchDrafter", "BatchableDrafter", "BatchedModelDrafter", "LoopDrafter", "RequestAwareDrafter"]


@runtime_checkable
class BatchableDrafter(Protocol):
    """A per-request drafter that has a batched form (:class:`~specdec.drafters.ModelDrafter` has).

    Example:
        >>> from specdec.drafters import ModelDrafter, NGramDrafter
        >>> from specdec.testing import tiny_target
        >>> isinstance(ModelDrafter(tiny_target(seed=1)), BatchableDrafter), isinstance(NGramDrafter(), BatchableDrafter)
        (True, False)
    """

    def batched(self, *, slots: int, layout: str = "packed") -> BatchDrafter:
        """The :class:`BatchDrafter` drafting for ``slots`` requests at once."""


@runtime_checkable
class BatchDrafter(Protocol):
    """Drafts for several requests per call, one state per slot.

    Attributes:
        vocab_size: the drafter's vocabulary (``None`` for drafters that copy tokens from the context).
        slots: how many requests it can hold (slot ids ``0 .. slots - 1``).
        target_layer_ids: the target layers whose features it reads (empty: none).

    ``reset(slot)`` starts a request in ``slot``. ``propose_batch`` returns one
    :class:`~specdec.contracts.DraftProposal` per request, in the order given; rollback is implicit, as for
    a :class:`~specdec.contracts.Drafter` (each slot keeps its longest common prefix with its new context).

    Example:
        >>> from specdec.drafters import NGramDrafter
        >>> isinstance(LoopDrafter(NGramDrafter(), slots=2), BatchDrafter)
        True
    """

    vocab_size: int | None
    slots: int
    target_layer_ids: tuple[int, ...]

    def reset(self, slot: int) -> None:
        """Start a new request in ``slot``."""

    def propose_batch(
        self,
        slots: Sequence[int],
        contexts: Sequence[torch.Tensor],
        max_tokens: Sequence[int],
        *,
        samplings: Sequence[SamplingConfig],
        generators: Sequence[torch.Generator | None],
        target_hiddens: Sequence[torch.Tensor | None],
    ) -> list[DraftProposal]:
        """One proposal per request: request ``i`` is in ``slots[i]`` with ``contexts[i] [n_i]`` and may get ``max_tokens[i]``."""


@runtime_checkable
class RequestAwareDrafter(Protocol):
    """A :class:`BatchDrafter` that takes per-request arguments and hears when a request ends.

    :meth:`Engine.add_request <specdec.engine.Engine.add_request>` hands its ``drafter_request`` mapping to
    ``check_request(**drafter_request)`` at once (bad arguments raise there, before the request is stored),
    then, when the request joins, to ``begin_request(slot, **drafter_request)`` right after ``reset(slot)``.
    The engine calls ``end_request(slot, tokens, prompt_len=P)`` when the request finishes, is cancelled or fails,
    with ``tokens [n]`` int64: its ``P`` prompt tokens then every token it emitted (stops applied; none for a
    request cancelled before its first token).
    :class:`~specdec.drafters.agentspec.AgentSpecBatchDrafter` is one (``agent``, ``query``, ``spec``).

    Example:
        >>> from specdec.drafters import AgentSpecDrafter, NGramDrafter
        >>> from specdec.drafters.agentspec import TokenPieces
        >>> from specdec.testing.tokenizers import tiny_tokenizer
        >>> agentspec = AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer())).batched(slots=2)
        >>> isinstance(agentspec, RequestAwareDrafter), isinstance(LoopDrafter(NGramDrafter(), slots=2), RequestAwareDrafter)
        (True, False)
    """

    def check_request(self, **request: object) -> None:
        """Raise ``TypeError`` / ``ValueError`` for arguments :meth:`begin_request` would refuse; store nothing."""

    def begin_request(self, slot: int, **request: object) -> None:
        """Give the request just started in ``slot`` (by ``reset(slot)``) its arguments."""

    def end_request(self, slot: int, tokens: torch.Tensor, *, prompt_len: int) -> None:
        """The request in ``slot`` is over; ``tokens [n]`` is its ``prompt_len`` prompt tokens and its output."""


class LoopDrafter:
    """A :class:`BatchDrafter` over per-request :class:`~specdec.contracts.Drafter` objects, called one after another.

    For drafters without a forward of their own to batch (:class:`~specdec.drafters.NGramDrafter`,
    :class:`~specdec.drafters.OracleDrafter`): each request's proposal is its drafter's ``propose``.

    Args:
        drafter: one drafter shared by every slot (it must keep no state its proposals depend on), or a
            zero-argument callable returning a fresh drafter, called at each :meth:`reset`.
        slots: requests it can hold.

    Example:
        >>> from specdec.drafters import NGramDrafter
        >>> loop = LoopDrafter(NGramDrafter(max_ngram=2), slots=1)
        >>> loop.reset(0)
        >>> loop.propose_batch([0], [torch.tensor([7, 8, 9, 7, 8])], [2], samplings=[SamplingConfig()],
        ...                    generators=[None], target_hiddens=[None])[0].tokens.tolist()
        [9, 7]
    """

    def __init__(self, drafter: Drafter | Callable[[], Drafter], *, slots: int, check: Callable[[object], Drafter] | None = None):
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots: expected an int >= 1, got {slots!r}")
        shared = isinstance(drafter, Drafter) and not isinstance(drafter, type)
        if not shared and not callable(drafter):
            raise TypeError(f"drafter: expected a Drafter or a callable returning one, got {type(drafter).__name__}")
        self._check = check if check is not None else (lambda d: d)
        self._shared = self._check(drafter) if shared else None
        self._factory = None if shared else drafter
        self.slots = slots
        # a factory's first drafter tells the vocabulary and the feature taps every later one must share
        probe = self._shared if shared else self._check(drafter())
        self.vocab_size = probe.vocab_size
        self.target_layer_ids = self._taps(probe)
        self.drafters: list[Drafter | None] = [None] * slots

    @staticmethod
    def _taps(drafter: Drafter) -> tuple[int, ...]:
        return tuple(getattr(drafter, "target_layer_ids", ()) or ())

    def reset(self, slot: int) -> None:
        """Start a request in ``slot``: a fresh drafter from the factory (or the shared one), reset.

        Raises:
            ValueError: the factory's drafter has another vocabulary or other feature taps than its first one.
        """
        drafter = self._shared if self._factory is None else self._check(self._factory())
        if (drafter.vocab_size, self._taps(drafter)) != (self.vocab_size, self.target_layer_ids):
            raise ValueError(
                f"drafter: the factory's drafters must agree on vocab_size and target_layer_ids; the first had "
                f"{self.vocab_size} and {self.target_layer_ids}, this one {drafter.vocab_size} and {self._taps(drafter)}"
            )
        drafter.reset()
        self.drafters[slot] = drafter

    def propose_batch(self, slots, contexts, max_tokens, *, samplings, generators, target_hiddens) -> list[DraftProposal]:
        """Each request's drafter's ``propose`` (with its ``target_hidden`` when it has feature taps), in order."""
        check_batch_arguments(self, slots, contexts, max_tokens, samplings, generators, target_hiddens)
        proposals = []
        for slot, context, k, sampling, generator, hidden in zip(
            slots, contexts, max_tokens, samplings, generators, target_hiddens
        ):
            drafter = self.drafters[slot]
            if drafter is None:
                raise ValueError(f"slots: slot {slot} has no request (reset(slot) starts one)")
            extra = {"target_hidden": hidden} if getattr(drafter, "target_layer_ids", None) else {}
            proposals.append(drafter.propose(context, k, sampling=sampling, generator=generator, **extra))
        return proposals
