"""What an agent application declares about its output: named blocks opened and closed by delimiter strings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Delimiter:
    """One kind of semantic block: the text that opens it and the text that closes it.

    Attributes:
        name: the block's name (``"tool_call"``, ``"code"``); drafting history is partitioned by it.
        open: the opening text, e.g. ``"<tool_call>"`` or ``"```"``.
        close: the closing text; may equal ``open`` (code fences, ``$ ... $``): inside the block the
            text then closes it, outside it opens one.
        nests: whether other blocks may open inside this one (``False`` for code, whose text is opaque).

    Example:
        >>> Delimiter("tool_call", "<tool_call>", "</tool_call>").close
        '</tool_call>'
    """

    name: str
    open: str
    close: str
    nests: bool = True

    def __post_init__(self):
        for field in ("name", "open", "close"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value:
                raise ValueError(f"Delimiter.{field}: expected a non-empty string, got {value!r}")
        if not isinstance(self.nests, bool):
            raise TypeError(f"Delimiter.nests: expected a bool, got {type(self.nests).__name__}")


@dataclass(frozen=True)
class StructureSpec:
    """The blocks of one agent's output, as delimiter pairs (AgentSpec's ``B_i``).

    Delimiters are matched on the decoded text as soon as they are complete, so an opening string
    that is a proper prefix of another opening string would always win; such a spec is refused.

    Attributes:
        delimiters: the block kinds, tried in order when several could open at the same byte.
        resets: strings that close every open block (chat message boundaries such as
            ``"<|im_start|>"``), so that an unbalanced fence in one message (a lone ```` ``` ```` quoted
            in a system prompt) cannot invert the blocks of every message after it.

    Example:
        >>> spec = StructureSpec.agent_default()
        >>> [d.name for d in spec.delimiters]
        ['tool_call', 'tool_response', 'code']
        >>> spec.by_name("code").nests
        False
    """

    delimiters: tuple[Delimiter, ...]
    resets: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.delimiters, tuple):
            object.__setattr__(self, "delimiters", tuple(self.delimiters))
        if isinstance(self.resets, str):
            raise TypeError(f"StructureSpec.resets: expected a sequence of strings, got the string {self.resets!r}")
        object.__setattr__(self, "resets", tuple(self.resets))
        for i, r in enumerate(self.resets):
            if not isinstance(r, str) or not r:
                raise ValueError(f"StructureSpec.resets[{i}]: expected a non-empty string, got {r!r}")
        for i, d in enumerate(self.delimiters):
            if not isinstance(d, Delimiter):
                raise TypeError(f"StructureSpec.delimiters[{i}]: expected a Delimiter, got {type(d).__name__}")
        names = [d.name for d in self.delimiters]
        if len(set(names)) != len(names):
            raise ValueError(f"StructureSpec.delimiters: expected distinct names, got {names}")
        opens = [d.open for d in self.delimiters]
        for i, a in enumerate(opens):
            for j, b in enumerate(opens):
                # a opens as soon as its last byte arrives: inside b before b's end, or at b's end when tried first
                if a != b and (a in b[:-1] or (b.endswith(a) and i < j)):
                    where = "inside" if a in b[:-1] else "at the end of, and is tried before,"
                    raise ValueError(
                        f"StructureSpec.delimiters: opening {a!r} completes {where} opening {b!r}, so {b!r} could never "
                        "open; drop or reorder one of them"
                    )
        if len(set(opens)) != len(opens):
            raise ValueError(f"StructureSpec.delimiters: expected distinct opening strings, got {opens}")

    @classmethod
    def of(cls, pairs: Sequence[tuple[str, str, str]] | Sequence[Delimiter], resets: Sequence[str] = ()) -> StructureSpec:
        """A spec from ``(name, open, close)`` triples (or :class:`Delimiter` objects) and reset strings.

        Example:
            >>> StructureSpec.of([("math", "\\\\[", "\\\\]")]).delimiters[0].open
            '\\\\['
        """
        return cls(tuple(p if isinstance(p, Delimiter) else Delimiter(*p) for p in pairs), resets)

    def with_resets(self, resets: Sequence[str]) -> StructureSpec:
        """The same blocks, closed all at once by any of ``resets`` (e.g. a chat template's message markers).

        Example:
            >>> StructureSpec.agent_default().with_resets(["<|im_start|>"]).resets
            ('<|im_start|>',)
        """
        return StructureSpec(self.delimiters, resets)

    @classmethod
    def agent_default(cls) -> StructureSpec:
        """Tool calls, tool responses (Hermes/Qwen tags), Markdown code fences; ChatML message starts reset.

        Example:
            >>> spec = StructureSpec.agent_default()
            >>> spec.by_name("tool_call").open, spec.resets
            ('<tool_call>', ('<|im_start|>',))
        """
        return cls(
            (
                Delimiter("tool_call", "<tool_call>", "</tool_call>"),
                Delimiter("tool_response", "<tool_response>", "</tool_response>"),
                Delimiter("code", "```", "```", nests=False),
            ),
            ("<|im_start|>",),
        )

    def by_name(self, name: str) -> Delimiter:
        """The delimiter called ``name``; ``KeyError`` naming the known ones otherwise.

        Example:
            >>> StructureSpec.agent_default().by_name("code").close
            '```'
        """
        for d in self.delimiters:
            if d.name == name:
                return d
        raise KeyError(f"name: expected one of {[d.name for d in self.delimiters]}, got {name!r}")
