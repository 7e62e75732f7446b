"""``AgentSpecDrafter``: structure-isolated retrieval drafting with redundancy-aware draft lengths."""

from __future__ import annotations

from collections.abc import Hashable

import torch

from specdec.contracts.proposal import DraftProposal
from specdec.drafters.agentspec.budget import BudgetAllocator
from specdec.drafters.agentspec.redundancy import Redundancy, RedundancyScorer
from specdec.drafters.agentspec.structure import StructureSpec
from specdec.drafters.agentspec.suffix_index import PartitionedSuffixIndex
from specdec.drafters.agentspec.token_pieces import TokenPieces
from specdec.drafters.agentspec.tracker import BlockTracker, TrackerState


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
        self.isolate = bool(isolate)
        self.fallback = bool(fallback)
        self.agent: Hashable = None
        self.query: Hashable = None
        self.spec = spec
        self.last: Redundancy | None = None
        self.rounds = 0
        self.fallback_rounds = 0
        self._stream: int | None = None
        self._tracker: BlockTracker | None = None
        self._states: list[TrackerState] = []
        self._first_length = 0

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
        for name, value in (("agent", agent), ("query", query)):
            try:
                hash(value)
            except TypeError:
                raise TypeError(f"{name}: expected a hashable id, got {type(value).__name__}") from None
        if spec is not None and not isinstance(spec, StructureSpec):
            raise TypeError(f"spec: expected a StructureSpec or None, got {type(spec).__name__}")
        self.agent, self.query = agent, query
        self.spec = self.default_spec if spec is None else spec

    def reset(self) -> None:
        """Close the current request: its generated tokens become history; the next one starts fresh.

        Example:
            >>> from specdec.testing.tokenizers import tiny_tokenizer
            >>> AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer())).reset()
        """
        if self._stream is not None:
            # the first context is the prompt plus the first generated token
            self.index.streams[self._stream].searchable_from = max(0, self._first_length - 1)
        self._stream = None
        self._tracker = None
        self._states = []
        self._first_length = 0

    def _partition(self) -> tuple:
        return (self.agent, self.query, self._tracker.block)

    def _ids(self, name: str, tokens) -> list[int]:
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 1 or tokens.is_floating_point() or tokens.dtype == torch.bool:
            got = f"shape {tuple(tokens.shape)} {tokens.dtype}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise TypeError(f"{name}: expected a 1-D integer tensor, got {got}")
        ids = tokens.tolist()
        if ids and not (0 <= min(ids) and max(ids) < len(self.pieces)):
            bad = next(t for t in ids if not 0 <= t < len(self.pieces))
            raise ValueError(f"{name}: expected token ids in [0, {len(self.pieces)}) (the pieces table), got {bad}")
        return ids

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
        ids = self._ids("context", context)
        self._ingest(ids)

    def _ingest(self, ids: list[int]) -> None:
        if self._stream is None:
            self._tracker = BlockTracker(self.spec)
            self._states = [self._tracker.state]
            self._stream = self.index.new_stream(self._partition())
            self._first_length = len(ids)
        stream = self.index.streams[self._stream]
        have = stream.tokens
        common = 0
        limit = min(len(have), len(ids))
        if have[:limit] == ids[:limit]:
            common = limit
        else:
            while have[common] == ids[common]:
                common += 1
        if common < len(have):
            self.index.truncate(self._stream, common)
            self._tracker.restore(self._states[common])
            del self._states[common + 1 :]
        for token in ids[common:]:
            self._tracker.feed(self.pieces.pieces[token])
            self._states.append(self._tracker.state)
            self.index.append(self._stream, token, self._partition())

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
        ids = self._ids("tokens", tokens)
        saved = (self.agent, self.query, self.spec, self._stream, self._tracker, self._states, self._first_length)
        try:
            self.begin_request(agent=agent, query=query, spec=spec)
            self._stream = None
            self._ingest(ids)
        finally:
            self.agent, self.query, self.spec, self._stream, self._tracker, self._states, self._first_length = saved

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
        ids = self._ids("context", context)
        self._ingest(ids)
        self.rounds += 1
        empty = DraftProposal(tokens=context.new_zeros(0))
        if max_tokens <= 0:
            self.last = None
            return empty
        suffix = ids[-self.index.max_ngram :]
        if self.isolate:
            found = self.index.continuations(
                suffix, self._partition(), depth=max_tokens, max_candidates=self.max_candidates, cut_at_block_end=True
            )
            if not found and self.fallback:
                found = self.index.continuations(suffix, None, depth=max_tokens, max_candidates=self.max_candidates)
                self.fallback_rounds += bool(found)
        else:
            found = self.index.continuations(suffix, None, depth=max_tokens, max_candidates=self.max_candidates)
        self.last = redundancy = self.scorer.score(found)
        (length,) = self.allocator.allocate([redundancy.score], [redundancy.confident_length])
        length = min(length, max_tokens, len(redundancy.path))
        if length == 0:
            return empty
        return DraftProposal(tokens=torch.tensor(redundancy.path[:length], dtype=context.dtype, device=context.device))
