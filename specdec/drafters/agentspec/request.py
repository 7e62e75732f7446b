"""One request's place in AgentSpec's shared history: its structure, block tracker and stream."""

from __future__ import annotations

from collections.abc import Hashable

import torch

from specdec.drafters.agentspec.structure import StructureSpec
from specdec.drafters.agentspec.suffix_index import PartitionedSuffixIndex
from specdec.drafters.agentspec.token_pieces import TokenPieces
from specdec.drafters.agentspec.tracker import BlockTracker, TrackerState


def token_ids(name: str, tokens: object, pieces: TokenPieces) -> list[int]:
    """``tokens [n]`` (a 1-D integer tensor of ids in the pieces table) as a list; ``TypeError``/``ValueError`` naming ``name``.

    Example:
        >>> from specdec.testing.tokenizers import tiny_tokenizer
        >>> token_ids("context", torch.tensor([3, 4]), TokenPieces.from_tokenizer(tiny_tokenizer()))
        [3, 4]
    """
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 1 or tokens.is_floating_point() or tokens.dtype == torch.bool:
        got = f"shape {tuple(tokens.shape)} {tokens.dtype}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise TypeError(f"{name}: expected a 1-D integer tensor, got {got}")
    ids = tokens.tolist()
    if ids and not (0 <= min(ids) and max(ids) < len(pieces)):
        bad = next(t for t in ids if not 0 <= t < len(pieces))
        raise ValueError(f"{name}: expected token ids in [0, {len(pieces)}) (the pieces table), got {bad}")
    return ids


def check_structure(*, agent: object, query: object, spec: object) -> None:
    """Raise ``TypeError`` unless ``agent`` and ``query`` are hashable ids and ``spec`` is a :class:`StructureSpec` or ``None``.

    Example:
        >>> check_structure(agent="coder", query=[1], spec=None)
        Traceback (most recent call last):
        ...
        TypeError: query: expected a hashable id, got list
    """
    for name, value in (("agent", agent), ("query", query)):
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"{name}: expected a hashable id, got {type(value).__name__}") from None
    if spec is not None and not isinstance(spec, StructureSpec):
        raise TypeError(f"spec: expected a StructureSpec or None, got {type(spec).__name__}")


class RequestStream:
    """One request's place in a shared :class:`PartitionedSuffixIndex`: its structure, block tracker and stream.

    :class:`~specdec.drafters.agentspec.AgentSpecDrafter` keeps one (the current request), :class:`~specdec.drafters.agentspec.batched.AgentSpecBatchDrafter`
    one per slot; both feed it the request's context with :meth:`ingest` and retire it with :meth:`close`.

    Args:
        agent, query: hashable ids of the request's agent and user query.
        spec: the request's :class:`StructureSpec`.

    Example:
        >>> from specdec.testing.tokenizers import tiny_tokenizer
        >>> index, pieces = PartitionedSuffixIndex(), TokenPieces.from_tokenizer(tiny_tokenizer())
        >>> request = RequestStream("coder", 0, StructureSpec.agent_default())
        >>> request.ingest(index, pieces, [5, 6, 7]); index.streams[request.stream_id].tokens
        [5, 6, 7]
    """

    def __init__(self, agent: Hashable, query: Hashable, spec: StructureSpec):
        self.agent, self.query, self.spec = agent, query, spec
        self.stream_id: int | None = None
        self.tracker: BlockTracker | None = None
        self.states: list[TrackerState] = []
        self.first_length = 0

    def partition(self) -> tuple:
        """``(agent, query, block)`` in force after the tokens ingested so far."""
        return (self.agent, self.query, self.tracker.block)

    def ingest(self, index: PartitionedSuffixIndex, pieces: TokenPieces, ids: list[int]) -> None:
        """Bring the stream to ``ids`` (token ids of the request so far): keep the common prefix, roll back the rest."""
        if self.stream_id is None:
            self.tracker = BlockTracker(self.spec)
            self.states = [self.tracker.state]
            self.stream_id = index.new_stream(self.partition())
            self.first_length = len(ids)
        have = index.streams[self.stream_id].tokens
        common = 0
        limit = min(len(have), len(ids))
        if have[:limit] == ids[:limit]:
            common = limit
        else:
            while have[common] == ids[common]:
                common += 1
        if common < len(have):
            index.truncate(self.stream_id, common)
            self.tracker.restore(self.states[common])
            del self.states[common + 1 :]
        for token in ids[common:]:
            self.tracker.feed(pieces.pieces[token])
            self.states.append(self.tracker.state)
            index.append(self.stream_id, token, self.partition())

    def close(self, index: PartitionedSuffixIndex) -> None:
        """Retire the request: its stream stays as history, searchable from its first generated token on."""
        if self.stream_id is not None:
            # the first context is the prompt plus the first generated token
            index.streams[self.stream_id].searchable_from = max(0, self.first_length - 1)
