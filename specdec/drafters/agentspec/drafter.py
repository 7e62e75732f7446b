"""``AgentSpecDrafter``: structure-isolated retrieval drafting with redundancy-aware draft lengths."""

from __future__ import annotations

from collections.abc import Hashable

import torch

from specdec.contracts.drafter import check_propose_arguments
from specdec.contracts.proposal import DraftProposal
from specdec.drafters.agentspec.batched import AgentSpecBatchDrafter
from specdec.drafters.agentspec.budget import BudgetAllocator
from specdec.drafters.agentspec.redundancy import Redundancy, RedundancyScorer
from specdec.drafters.agentspec.request import RequestStream, check_structure, token_ids
from specdec.drafters.agentspec.structure import StructureSpec
from specdec.drafters.agentspec.suffix_index import PartitionedSuffixIndex
from specdec.drafters.agentspec.token_pieces import TokenPieces


class AgentSpecDrafter:
    """Draft what followed the context's tail earlier in the same (agent, query, block) partition.

    Each request carries its structure: which agent produced it, which user query it serves and the
    :class:`StructureSpec` of its blocks (tool calls, code fences). Set it with
    :meth:`begin_request` before :func:`specdec.generate`; it holds for every request that follows
    until the next call. The drafter follows the open block of the context with a
    :class:`BlockTracker` fed from a :class:`TokenPieces` table, indexes every token under its
    partition in a :class:`PartitionedSuffixIndex`, and drafts from the matching partition only;
    when that partition has no match it falls back to the global index (``fallback=True``).
    History outlives the request: later turns of the same query draft from earlier ones (their
    generated tokens; a finished request's prompt is not searchable, the next prompt repeats it).

    The draft is the candidates' majority path (:class:`RedundancyScorer`); its length is
    :class:`BudgetAllocator`'s ``L = max(|CT*|, floor(B_t * g / sum g))`` for a batch of one request,
    cut to ``max_tokens``. Proposals are deterministic (``draft_probs=None``), so the chain
    verifier's deterministic-proposal rule keeps the target's law exactly.

    In a continuous-batching :class:`~specdec.Engine`, use its batched form (:meth:`batched`, which
    ``Engine(..., batched_drafting=True)`` builds): one history shared by every slot, per-request
    structure from ``add_request(..., drafter_request=...)``, draft lengths sized over the batch.

    ``isolate=False`` is the ablation without structure: one global index for every agent, query
    and block (still shared across requests).

    Args:
        pieces: the token id -> bytes table of the target's tokenizer.
        spec: the default :class:`StructureSpec` (``StructureSpec.agent_default()`` if ``None``).
        alpha: :class:`BudgetAllocator` budget.
        g_min: :class:`RedundancyScorer` floor.
        max_ngram, min_ngram: suffix lengths matched (longest first).
        max_candidates: most recent matches read per round (``n <= max_candidates``).
        isolate: draft from the request's own partition (``False``: from everything).
        fallback: with ``isolate``, use the global index when the partition has no match.

    Example:
        >>> import specdec as sd
        >>> from specdec.testing import tiny_target
        >>> from specdec.testing.tokenizers import tiny_tokenizer
        >>> tok, target = tiny_tokenizer(), tiny_target(seed=0)
        >>> spec = StructureSpec.of([("quote", "qq", "qq")])
        >>> drafter = AgentSpecDrafter(TokenPieces.from_tokenizer(tok), spec)
        >>> drafter.begin_request(agent="coder", query=7)
        >>> prompt = torch.tensor([tok("qq the cat qq the cat").input_ids])
        >>> out = sd.generate(target, prompt, 16, drafter=drafter)
        >>> torch.equal(out.tokens, sd.generate(target, prompt, 16).tokens)
        True
    """

    vocab_size = None

    def __init__(
        self,
        pieces: TokenPieces,
        spec: StructureSpec | None = None,
        *,
        alpha: int = 32,
        g_min: float = 0.2,
        max_ngram: int = 8,
        min_ngram: int = 2,
        max_candidates: int = 16,
        isolate: bool = True,
        fallback: bool = True,
    ):
        if not isinstance(pieces, TokenPieces):
            raise TypeError(f"pieces: expected a TokenPieces table, got {type(pieces).__name__}")
        spec = StructureSpec.agent_default() if spec is None else spec
        if not isinstance(spec, StructureSpec):
            raise TypeError(f"spec: expected a StructureSpec, got {type(spec).__name__}")
        if isinstance(max_candidates, bool) or not isinstance(max_candidates, int) or max_candidates < 1:
            raise ValueError(f"max_candidates: expected an int >= 1, got {max_candidates!r}")
        self.pieces = pieces
        self.default_spec = spec
        self.allocator = BudgetAllocator(alpha)
        self.scorer = RedundancyScorer(g_min)
        self.index = PartitionedSuffixIndex(max_ngram=max_ngram, min_ngram=min_ngram)
        self.max_candidates = max_candidates
        for name, value in (("isolate", isolate), ("fallback", fallback)):
            if not isinstance(value, bool):  # bool("no") is True
                raise TypeError(f"{name}: expected a bool, got {value!r}")
        self.isolate = isolate
        self.fallback = fallback
        self.agent: Hashable = None
        self.query: Hashable = None
        self.spec = spec
        self.last: Redundancy | None = None
        self.rounds = 0
        self.fallback_rounds = 0
        self._request: RequestStream | None = None
        # the ids of the request's last two propose calls: a verifier that drafts again (TwoLevelVerifier) proposes
        # after tokens it has not verified, and the common prefix of two calls in a row is always emitted
        self._proposed: list[list[int]] = []

    def begin_request(self, *, agent: Hashable, query: Hashable, spec: StructureSpec | None = None) -> None:
        """Set the structure of the requests that follow: agent id, query id and block spec.

        ``spec=None`` keeps the constructor's spec. Takes effect at the next :meth:`reset` (which
        :func:`specdec.generate` calls before each request's first proposal).

        Example:
            >>> from specdec.testing.tokenizers import tiny_tokenizer
            >>> d = AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer()))
            >>> d.begin_request(agent=0, query=3); (d.agent, d.query)
            (0, 3)
        """
        check_structure(agent=agent, query=query, spec=spec)
        self.agent, self.query = agent, query
        self.spec = self.default_spec if spec is None else spec

    def batched(self, *, slots: int, layout: str = "packed") -> AgentSpecBatchDrafter:
        """This drafter for ``slots`` requests at once, sharing its history: an :class:`AgentSpecBatchDrafter`.

        What an :class:`~specdec.Engine` with ``batched_drafting=True`` builds from it; per-request
        structure then goes through ``Engine.add_request(..., drafter_request=dict(agent=..., query=..., spec=...))``.
        ``layout`` is accepted for the batched-drafter protocol and must be ``"packed"`` or
        ``"per_request"``: it has no effect here (retrieval runs no forward).

        Example:
            >>> import specdec as sd
            >>> from specdec.testing import tiny_target
            >>> from specdec.testing.tokenizers import tiny_tokenizer
            >>> tok, target = tiny_tokenizer(), tiny_target(seed=0)
            >>> drafter = AgentSpecDrafter(TokenPieces.from_tokenizer(tok))
            >>> engine = sd.Engine(target, drafter, max_batch=2, batched_drafting=True)
            >>> prompt = torch.tensor(tok("qq the cat qq the cat").input_ids)
            >>> a = engine.add_request(prompt, max_new_tokens=8, drafter_request=dict(agent="coder", query=0))
            >>> torch.equal(engine.run()[a], sd.generate(target, prompt[None], 8).tokens[0])
            True
        """
        if layout not in ("packed", "per_request"):
            raise ValueError(f"layout: expected 'packed' or 'per_request', got {layout!r}")
        return AgentSpecBatchDrafter(self, slots=slots)

    def reset(self) -> None:
        """Close the current request: its generated tokens become history; the next one starts fresh.

        When the request's stream was last brought there by :meth:`propose`, it is first cut to the longest prefix
        its last two contexts share: a verifier that drafts again proposes after tokens it has not verified (the
        two-level verifier's Q chain), and those must not become history. That may leave out the last round's
        tokens; :meth:`observe` with the prompt and the output before the next request keeps them all.

        Example:
            >>> from specdec.testing.tokenizers import tiny_tokenizer
            >>> AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer())).reset()
        """
        if self._request is not None:
            if len(self._proposed) == 2:
                last, before = self._proposed
                common = next((i for i, (a, b) in enumerate(zip(last, before)) if a != b), min(len(last), len(before)))
                self._request.ingest(self.index, self.pieces, last[:common])  # cuts the stream back to it
            self._request.close(self.index)
        self._request = None
        self._proposed = []

    def observe(self, context: torch.Tensor) -> None:
        """Bring the current request's stream to ``context [n]`` without proposing.

        Use it after :func:`specdec.generate` with the prompt and the output, so the last round's
        tokens (which no proposal saw) join the history too.

        Example:
            >>> from specdec.testing.tokenizers import tiny_tokenizer
            >>> d = AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer()))
            >>> d.observe(torch.tensor([5, 6, 7])); len(d.index.streams[0].tokens)
            3
        """
        ids = token_ids("context", context, self.pieces)
        self._ingest(ids)
        self._proposed = []  # the stream is the caller's context: kept whole at reset

    def _ingest(self, ids: list[int]) -> None:
        if self._request is None:
            self._request = RequestStream(self.agent, self.query, self.spec)
        self._request.ingest(self.index, self.pieces, ids)

    def retrieve(self, request: RequestStream, ids: list[int], depth: int) -> tuple[Redundancy, bool]:
        """The scored candidates (at most ``depth`` tokens each) after ``ids``, the request's ingested context.

        From the request's partition, else (``fallback``) the global index; from the global index only
        with ``isolate=False``. Returns the :class:`Redundancy` and whether the fallback found the candidates.

        Example:
            >>> from specdec.testing.tokenizers import tiny_tokenizer
            >>> d = AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer()), min_ngram=1)
            >>> d.add_history(torch.tensor([4, 5, 6, 7]), agent="other", query=0)
            >>> request = RequestStream("coder", 0, d.default_spec)
            >>> request.ingest(d.index, d.pieces, [9, 5])
            >>> redundancy, fell_back = d.retrieve(request, [9, 5], 2)
            >>> redundancy.path, fell_back                    # nothing in ("coder", 0, ...): the global index
            ((6, 7), True)
        """
        suffix = ids[-self.index.max_ngram :]
        if self.isolate:
            found = self.index.continuations(
                suffix, request.partition(), depth=depth, max_candidates=self.max_candidates, cut_at_block_end=True
            )
            if not found and self.fallback:
                found = self.index.continuations(suffix, None, depth=depth, max_candidates=self.max_candidates)
                return self.scorer.score(found), bool(found)
        else:
            found = self.index.continuations(suffix, None, depth=depth, max_candidates=self.max_candidates)
        return self.scorer.score(found), False

    def add_history(self, tokens: torch.Tensor, *, agent: Hashable, query: Hashable, spec: StructureSpec | None = None) -> None:
        """Index a finished sequence ``tokens [n]`` (every position searchable) under ``agent``/``query``.

        The current request, if any, is left as it is.

        Example:
            >>> from specdec.contracts import SamplingConfig
            >>> from specdec.testing.tokenizers import tiny_tokenizer
            >>> d = AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer()), min_ngram=1)
            >>> d.add_history(torch.tensor([5, 6, 7, 8]), agent=0, query=0)
            >>> d.begin_request(agent=0, query=0); d.reset()
            >>> d.propose(torch.tensor([1, 5, 6]), 4, sampling=SamplingConfig(), generator=None).tokens
            tensor([7, 8])
        """
        ids = token_ids("tokens", tokens, self.pieces)
        check_structure(agent=agent, query=query, spec=spec)
        RequestStream(agent, query, self.default_spec if spec is None else spec).ingest(self.index, self.pieces, ids)

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        """Up to ``max_tokens`` drafts after ``context [n]`` from the request's partition.

        Args:
            context: ``[n]`` int64, the request so far (prompt then emitted tokens).
            max_tokens: the most drafts.
            sampling, generator: unused: proposals are deterministic.

        Returns:
            :class:`DraftProposal` with ``tokens [k]`` (``k <= max_tokens``; empty when nothing
            matched) and no draft law. :attr:`last` holds the round's :class:`Redundancy`.

        Example:
            >>> from specdec.contracts import SamplingConfig
            >>> from specdec.testing.tokenizers import tiny_tokenizer
            >>> d = AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer()))
            >>> d.propose(torch.tensor([4, 5, 9, 4, 5]), 3, sampling=SamplingConfig(), generator=None).tokens
            tensor([9, 4, 5])
        """
        check_propose_arguments(context, max_tokens)
        ids = token_ids("context", context, self.pieces)
        self._ingest(ids)
        self._proposed = [ids, *self._proposed[:1]]
        self.rounds += 1
        empty = DraftProposal(tokens=context.new_zeros(0))
        if max_tokens <= 0:
            self.last = None
            return empty
        redundancy, fell_back = self.retrieve(self._request, ids, max_tokens)
        self.last = redundancy
        self.fallback_rounds += fell_back
        (length,) = self.allocator.allocate([redundancy.score], [redundancy.confident_length])
        length = min(length, max_tokens, len(redundancy.path))
        if length == 0:
            return empty
        return DraftProposal(tokens=torch.tensor(redundancy.path[:length], dtype=context.dtype, device=context.device))
