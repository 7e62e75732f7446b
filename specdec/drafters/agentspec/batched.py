"""``AgentSpecBatchDrafter``: AgentSpec for a continuous-batching engine, one shared history and a batch budget."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from specdec.contracts.proposal import DraftProposal
from specdec.contracts.sampling import SamplingConfig
from specdec.drafters.agentspec.redundancy import Redundancy
from specdec.drafters.agentspec.request import RequestStream, check_structure, token_ids
from specdec.drafters.agentspec.structure import StructureSpec
from specdec.drafters.batched_model import check_batch_arguments

REQUEST_ARGUMENTS = ("agent", "query", "spec")


class AgentSpecBatchDrafter:
    """Drafts for every running request of a batch from ONE shared history, with draft lengths sized over the batch.

    Built by :meth:`AgentSpecDrafter.batched <specdec.drafters.agentspec.AgentSpecDrafter.batched>` (the
    constructor's ``drafter`` is that :class:`~specdec.drafters.agentspec.AgentSpecDrafter`); it shares that drafter's index (its history, including
    anything given to :meth:`AgentSpecDrafter.add_history`), token pieces, scorer, allocator and settings.
    Each slot holds one request's structure (agent, query, :class:`StructureSpec`) and its block tracker
    (a :class:`~.drafter.RequestStream`). A request's tokens are indexed as it decodes, so requests
    running together draft from each other too; when it ends (:meth:`end_request`) its stream stays in
    the index as history for later requests (its prompt is not searchable: the next turn's prompt repeats it).

    Draft lengths: each round :meth:`propose_batch` scores every request's candidates (redundancy
    ``g_i`` and agreed prefix ``|CT*_i|``) and sizes the drafts together with
    :class:`~.budget.BudgetAllocator` for a batch of ``bz = len(slots)``:
    ``L_i = max(|CT*_i|, floor(floor(alpha / bz) * g_i / sum_j g_j))``, then cuts each to its cap
    ``max_tokens[i]`` (an upper bound from the engine, never exceeded) and to its majority path.
    Proposals are deterministic (``draft_probs=None``), so verification keeps the target's law.

    It is a :class:`~specdec.engine.drafting.BatchDrafter` and a
    :class:`~specdec.engine.drafting.RequestAwareDrafter`: an :class:`~specdec.Engine` passes each request's
    ``drafter_request=dict(agent=..., query=..., spec=...)`` to :meth:`begin_request` and calls
    :meth:`end_request` when the request finishes, is cancelled or fails.

    Attributes:
        drafter: the :class:`AgentSpecDrafter` it came from.
        slots: requests it can hold.
        rounds, fallback_rounds: requests' proposal rounds, and those drafted from the global fallback.
        last: ``{slot: Redundancy}`` of the last :meth:`propose_batch` call.
        last_lengths: ``{slot: draft length}`` of the last call.

    Example:
        >>> from specdec.testing.tokenizers import tiny_tokenizer
        >>> from specdec.drafters.agentspec import AgentSpecDrafter, TokenPieces
        >>> batch = AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer()), min_ngram=1).batched(slots=2)
        >>> def propose(slot, context, cap):
        ...     return batch.propose_batch([slot], [torch.tensor(context)], [cap], samplings=[SamplingConfig()],
        ...                                generators=[None], target_hiddens=[None])[0].tokens
        >>> batch.reset(0); batch.begin_request(0, agent="coder", query=1)
        >>> propose(0, [1, 5], 3)                                     # prompt [1], first token 5: no history yet
        tensor([], dtype=torch.int64)
        >>> batch.end_request(0, torch.tensor([1, 5, 6, 7, 8]))       # finished: its output is history now
        >>> batch.reset(1); batch.begin_request(1, agent="coder", query=1)
        >>> propose(1, [2, 5, 6], 3)
        tensor([7, 8])
    """

    vocab_size = None
    target_layer_ids: tuple[int, ...] = ()

    def __init__(self, drafter, *, slots: int):
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots: expected an int >= 1, got {slots!r}")
        self.drafter = drafter
        self.slots = slots
        self.rounds = 0
        self.fallback_rounds = 0
        self.last: dict[int, Redundancy] = {}
        self.last_lengths: dict[int, int] = {}
        self._requests: list[RequestStream | None] = [None] * slots

    def _slot(self, slot: object) -> int:
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.slots:
            raise ValueError(f"slot: expected an int in [0, {self.slots}), got {slot!r}")
        return slot

    def check_request(self, **request: object) -> None:
        """Raise ``TypeError`` for per-request arguments :meth:`begin_request` would refuse (nothing is stored).

        Takes ``agent`` and ``query`` (hashable ids) and ``spec`` (a :class:`StructureSpec` or ``None``),
        each optional.

        Example:
            >>> from specdec.testing.tokenizers import tiny_tokenizer
            >>> from specdec.drafters.agentspec import AgentSpecDrafter, TokenPieces
            >>> batch = AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer())).batched(slots=1)
            >>> batch.check_request(agent=0, querry=1)
            Traceback (most recent call last):
            ...
            TypeError: drafter_request: unknown argument 'querry'; expected some of ('agent', 'query', 'spec')
        """
        unknown = [name for name in request if name not in REQUEST_ARGUMENTS]
        if unknown:
            raise TypeError(f"drafter_request: unknown argument {unknown[0]!r}; expected some of {REQUEST_ARGUMENTS}")
        check_structure(agent=request.get("agent"), query=request.get("query"), spec=request.get("spec"))

    def reset(self, slot: int) -> None:
        """Start a request in ``slot`` with no structure (agent and query ``None``, the drafter's default spec).

        A request still in the slot is ended first (its tokens so far stay as history).
        """
        slot = self._slot(slot)
        if self._requests[slot] is not None:
            self._requests[slot].close(self.drafter.index)
        self._requests[slot] = RequestStream(None, None, self.drafter.default_spec)

    def begin_request(
        self, slot: int, *, agent: Hashable = None, query: Hashable = None, spec: StructureSpec | None = None
    ) -> None:
        """Set the structure of the request in ``slot`` (after :meth:`reset`, before its first proposal).

        ``spec=None`` keeps the drafter's default spec.
        """
        slot = self._slot(slot)
        check_structure(agent=agent, query=query, spec=spec)
        request = self._requests[slot]
        if request is None:
            raise ValueError(f"slot: slot {slot} has no request (reset(slot) starts one)")
        if request.stream_id is not None:
            raise ValueError(f"slot: the request in slot {slot} has already drafted; its structure is fixed")
        self._requests[slot] = RequestStream(agent, query, self.drafter.default_spec if spec is None else spec)

    def end_request(self, slot: int, tokens: torch.Tensor, *, prompt_len: int | None = None) -> None:
        """The request in ``slot`` is over: index ``tokens [n]`` (its prompt and every emitted token) and keep it as history.

        Searchable from its first generated token on: the first proposal's context is the prompt and one
        token. A request that never drafted (it ended at its first token) is indexed the same way: its one generated token
        is searchable. With ``prompt_len`` (what the engine passes), a request that emitted nothing (cancelled before
        its first token) leaves nothing searchable; without it, ``tokens`` are taken to hold at least one emitted token.
        The slot is then empty until the next :meth:`reset`.
        """
        slot = self._slot(slot)
        request = self._requests[slot]
        if request is None:
            raise ValueError(f"slot: slot {slot} has no request to end")
        ids = token_ids("tokens", tokens, self.drafter.pieces)
        if prompt_len is not None and (
            isinstance(prompt_len, bool) or not isinstance(prompt_len, int) or not 1 <= prompt_len <= len(ids)
        ):
            raise ValueError(f"prompt_len: expected an int in [1, {len(ids)}] (the prompt leads tokens), got {prompt_len!r}")
        request.ingest(self.drafter.index, self.drafter.pieces, ids)
        request.close(self.drafter.index)
        if prompt_len == len(ids):  # nothing emitted: the prompt is not history
            self.drafter.index.streams[request.stream_id].searchable_from = len(ids)
        self._requests[slot] = None

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
        """One proposal per request, sized together within the batch budget.

        Args:
            slots: ``[bz]`` the requests' slots.
            contexts: ``[bz]`` each ``[n_i]`` int64, the request so far.
            max_tokens: ``[bz]`` caps: request ``i`` gets at most ``max_tokens[i]`` drafts.
            samplings, generators, target_hiddens: unused (proposals are deterministic, no features read).

        Returns:
            ``[bz]`` :class:`DraftProposal`, ``tokens [L_i]`` with ``L_i <= max_tokens[i]``, no draft law.
        """
        check_batch_arguments(self, slots, contexts, max_tokens, samplings, generators, target_hiddens)
        drafter = self.drafter
        scored: list[tuple[int, torch.Tensor, Redundancy | None]] = []
        for slot, context, cap in zip(slots, contexts, max_tokens):
            request = self._requests[slot]
            if request is None:
                raise ValueError(f"slots: slot {slot} has no request (reset(slot) starts one)")
            ids = token_ids("context", context, drafter.pieces)
            request.ingest(drafter.index, drafter.pieces, ids)
            self.rounds += 1
            redundancy = None
            if cap > 0:
                redundancy, fell_back = drafter.retrieve(request, ids, cap)
                self.fallback_rounds += fell_back
            scored.append((cap, context, redundancy))
        # requests with a cap of 0 draft nothing and take no share of the budget
        live = [r for _, _, r in scored if r is not None]
        lengths = iter(drafter.allocator.allocate([r.score for r in live], [r.confident_length for r in live]))
        self.last, self.last_lengths = {}, {}
        proposals = []
        for slot, (cap, context, redundancy) in zip(slots, scored):
            length = 0 if redundancy is None else min(next(lengths), cap, len(redundancy.path))
            if redundancy is not None:
                self.last[slot] = redundancy
            self.last_lengths[slot] = length
            path = () if redundancy is None else redundancy.path[:length]
            proposals.append(DraftProposal(tokens=torch.tensor(path, dtype=context.dtype, device=context.device)))
        return proposals
