"""Drafting history partitioned by (agent, query, block), with a global view across every partition."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

Partition = tuple[Hashable, Hashable, "str | None"]


@dataclass
class Stream:
    """One request's tokens and, for each position, the partition a token there is drafted in.

    ``partitions[p]`` is the (agent, query, block) in force after tokens ``[0, p)``: the block the
    token at ``p`` is generated in. Positions before ``searchable_from`` are never offered as
    continuations (a finished request's prompt, which the next turn's prompt repeats anyway).
    """

    tokens: list[int] = field(default_factory=list)
    partitions: list[Partition] = field(default_factory=list)
    searchable_from: int = 0


class PartitionedSuffixIndex:
    """Every n-gram (``min_ngram <= n <= max_ngram``) of the streams, by partition and globally.

    An entry ``(stream, p)`` under the key ``(partition, tokens[p - n : p])`` says "after these
    ``n`` tokens, in this partition, the stream went on with ``tokens[p:]``". Appending a token costs
    ``2 * (max_ngram - min_ngram + 1)`` dictionary appends; a lookup reads the most recent entries.

    Args:
        max_ngram, min_ngram: the suffix lengths indexed.

    Example:
        >>> index = PartitionedSuffixIndex(max_ngram=2, min_ngram=1)
        >>> s = index.new_stream(("a", 0, None))
        >>> for token, part in zip([5, 6, 7, 5, 6], [("a", 0, None)] * 5):
        ...     index.append(s, token, part)
        >>> index.continuations([5, 6], ("a", 0, None), depth=3, max_candidates=4)
        [[7, 5, 6]]
        >>> index.continuations([5, 6], ("a", 1, None), depth=3, max_candidates=4)
        []
        >>> index.continuations([5, 6], None, depth=3, max_candidates=4)
        [[7, 5, 6]]
    """

    def __init__(self, *, max_ngram: int = 8, min_ngram: int = 2):
        for name, value in (("min_ngram", min_ngram), ("max_ngram", max_ngram)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name}: expected an int, got {value!r}")
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"min_ngram/max_ngram: expected 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.streams: list[Stream] = []
        self._entries: dict[tuple, list[tuple[int, int]]] = {}

    def new_stream(self, partition: Partition) -> int:
        """Open an empty stream whose first token is drafted in ``partition``; returns its id.

        Example:
            >>> PartitionedSuffixIndex().new_stream(("agent", 0, None))
            0
        """
        self.streams.append(Stream(partitions=[partition]))
        return len(self.streams) - 1

    def append(self, stream_id: int, token: int, partition: Partition) -> None:
        """Add ``token`` to the end of a stream; ``partition`` is the one in force *after* it.

        Example:
            >>> index = PartitionedSuffixIndex(max_ngram=2, min_ngram=1)
            >>> s = index.new_stream("text")
            >>> index.append(s, 4, "code"); index.streams[s].partitions
            ['text', 'code']
        """
        stream = self.streams[stream_id]
        stream.tokens.append(int(token))
        stream.partitions.append(partition)
        self._index_position(stream_id, len(stream.tokens))

    def _index_position(self, stream_id: int, p: int) -> None:
        stream = self.streams[stream_id]
        tokens, partition = stream.tokens, stream.partitions[p]
        for n in range(self.min_ngram, min(self.max_ngram, p) + 1):
            gram = tuple(tokens[p - n : p])
            self._entries.setdefault((partition, gram), []).append((stream_id, p))
            self._entries.setdefault((None, gram), []).append((stream_id, p))

    def truncate(self, stream_id: int, length: int) -> None:
        """Drop the stream's tokens from ``length`` on, and every entry that points past it.

        Example:
            >>> index = PartitionedSuffixIndex(max_ngram=1, min_ngram=1)
            >>> s = index.new_stream("p")
            >>> for token in [1, 2, 1, 3]:
            ...     index.append(s, token, "p")
            >>> index.truncate(s, 2); index.streams[s].tokens, index.continuations([1], "p", depth=2, max_candidates=2)
            ([1, 2], [[2]])
        """
        stream = self.streams[stream_id]
        if not 0 <= length <= len(stream.tokens):
            raise ValueError(f"length: expected 0 <= length <= {len(stream.tokens)}, got {length}")
        for p in range(len(stream.tokens), length, -1):
            partition = stream.partitions[p]
            for n in range(self.min_ngram, min(self.max_ngram, p) + 1):
                gram = tuple(stream.tokens[p - n : p])
                for scope in (partition, None):
                    entries = self._entries[(scope, gram)]
                    entries.remove((stream_id, p))
                    if not entries:
                        del self._entries[(scope, gram)]
        del stream.tokens[length:]
        del stream.partitions[length + 1 :]

    def continuations(
        self, suffix: list[int], partition: Partition | None, *, depth: int, max_candidates: int, cut_at_block_end: bool = False
    ) -> list[list[int]]:
        """What followed ``suffix`` in ``partition`` (``None``: anywhere), most recent first.

        The longest indexed tail of ``suffix`` that has a non-empty continuation wins; continuations
        are at most ``depth`` tokens and at most ``max_candidates`` of them are returned. With
        ``cut_at_block_end`` a continuation stops at the first token drafted in another partition
        (it keeps the token that closes the block).

        Returns:
            a list of token lists (empty when nothing matched).
        """
        if depth <= 0 or max_candidates <= 0:
            return []
        for n in range(min(self.max_ngram, len(suffix)), self.min_ngram - 1, -1):
            entries = self._entries.get((partition, tuple(suffix[len(suffix) - n :])))
            if not entries:
                continue
            found: list[list[int]] = []
            for stream_id, p in reversed(entries):
                stream = self.streams[stream_id]
                if p < stream.searchable_from or p >= len(stream.tokens):
                    continue
                end = min(p + depth, len(stream.tokens))
                if cut_at_block_end:
                    own = stream.partitions[p]
                    for q in range(p + 1, end):
                        if stream.partitions[q] != own:
                            end = q
                            break
                found.append(stream.tokens[p:end])
                if len(found) == max_candidates:
                    break
            if found:
                return found
        return []
