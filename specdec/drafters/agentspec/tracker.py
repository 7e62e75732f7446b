"""Which block the output is in: a pushdown automaton fed one detokenised piece at a time."""

from __future__ import annotations

from typing import NamedTuple

from specdec.drafters.agentspec.structure import StructureSpec


class TrackerState(NamedTuple):
    """An immutable snapshot of a :class:`BlockTracker`: the open blocks (outermost first) and the
    bytes after the last delimiter that could still start one (a delimiter split across tokens)."""

    stack: tuple[str, ...]
    tail: bytes


class BlockTracker:
    """Follow the open blocks of a :class:`StructureSpec` over a stream of decoded bytes.

    Bytes are read one at a time. A reset string (``spec.resets``) closes every open block. Inside a
    block its closing string is looked for next; otherwise
    any delimiter may open (only if the innermost open block ``nests``). A matched delimiter
    consumes its bytes: they never count towards a second match. The automaton keeps at most the
    last ``longest delimiter - 1`` unmatched bytes, so each byte costs ``O(#delimiters)``.

    Args:
        spec: the block kinds to follow.

    Example:
        >>> from specdec.drafters.agentspec.structure import StructureSpec
        >>> tracker = BlockTracker(StructureSpec.agent_default())
        >>> for piece in [b"Run: <tool", b"_call>{", b'"code": "``', b"`py"]:
        ...     tracker.feed(piece)
        >>> tracker.stack
        ('tool_call', 'code')
        >>> tracker.feed(b"```</tool_call>"); tracker.block
        >>> tracker.stack
        ()
    """

    def __init__(self, spec: StructureSpec):
        if not isinstance(spec, StructureSpec):
            raise TypeError(f"spec: expected a StructureSpec, got {type(spec).__name__}")
        self.spec = spec
        self._opens = [(d.name, d.open.encode()) for d in spec.delimiters]
        self._closes = {d.name: d.close.encode() for d in spec.delimiters}
        self._nests = {d.name: d.nests for d in spec.delimiters}
        self._resets = [r.encode() for r in spec.resets]
        longest = max(
            [len(b) for _, b in self._opens] + [len(b) for b in self._closes.values()] + [len(b) for b in self._resets], default=1
        )
        self._keep = longest - 1
        self._stack: list[str] = []
        self._tail = b""

    @property
    def stack(self) -> tuple[str, ...]:
        """The open blocks, outermost first."""
        return tuple(self._stack)

    @property
    def block(self) -> str | None:
        """The innermost open block, ``None`` outside every block."""
        return self._stack[-1] if self._stack else None

    @property
    def state(self) -> TrackerState:
        """A snapshot to hand back to :meth:`restore`."""
        return TrackerState(tuple(self._stack), self._tail)

    def restore(self, state: TrackerState) -> None:
        """Return to a snapshot taken with :attr:`state`.

        Example:
            >>> from specdec.drafters.agentspec.structure import StructureSpec
            >>> tracker = BlockTracker(StructureSpec.agent_default())
            >>> before = tracker.state
            >>> tracker.feed(b"```"); tracker.block
            'code'
            >>> tracker.restore(before); tracker.block is None
            True
        """
        if not isinstance(state, TrackerState):
            raise TypeError(f"state: expected a TrackerState, got {type(state).__name__}")
        unknown = [name for name in state.stack if name not in self._closes]
        if unknown:
            raise ValueError(f"state: expected blocks of this spec {list(self._closes)}, got {unknown}")
        self._stack = list(state.stack)
        self._tail = state.tail

    def feed(self, piece: bytes) -> None:
        """Read the next decoded piece (the bytes of one token, or any run of them).

        Example:
            >>> from specdec.drafters.agentspec.structure import StructureSpec
            >>> tracker = BlockTracker(StructureSpec.agent_default())
            >>> tracker.feed(b"<tool_c"); tracker.block is None
            True
            >>> tracker.feed(b"all>"); tracker.block
            'tool_call'
        """
        if not isinstance(piece, bytes):
            raise TypeError(f"piece: expected bytes, got {type(piece).__name__}")
        stack, tail, keep = self._stack, self._tail, self._keep
        for byte in piece:
            tail += bytes((byte,))
            if any(tail.endswith(r) for r in self._resets):
                stack.clear()
                tail = b""
                continue
            if stack and tail.endswith(self._closes[stack[-1]]):
                stack.pop()
                tail = b""
                continue
            if stack and not self._nests[stack[-1]]:
                tail = tail[-keep:] if keep else b""
                continue
            for name, opening in self._opens:
                if tail.endswith(opening):
                    stack.append(name)
                    tail = b""
                    break
            else:
                tail = tail[-keep:] if keep else b""
        self._tail = tail
