"""The bytes each token id decodes to, read once from a tokenizer so the decode loop never calls it."""

from __future__ import annotations

from collections.abc import Sequence


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in for each byte, inverted: character -> byte value."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class TokenPieces:
    """A cached ``token id -> bytes`` table: the text each token contributes to the decoded output.

    Bytes rather than strings, so a character split over several byte-level tokens (``é`` as two
    tokens) is rebuilt exactly when the pieces are concatenated; delimiters are matched on bytes.

    Args:
        pieces: ``pieces[i]`` is the bytes of token ``i``.

    Example:
        >>> table = TokenPieces([b"<", b"tool", b">", b"x"])
        >>> table.join([0, 1, 2]), len(table)
        (b'<tool>', 4)
    """

    def __init__(self, pieces: Sequence[bytes]):
        pieces = list(pieces)
        for i, piece in enumerate(pieces):
            if not isinstance(piece, bytes):
                raise TypeError(f"pieces[{i}]: expected bytes, got {type(piece).__name__}")
        self.pieces: list[bytes] = pieces

    def __len__(self) -> int:
        return len(self.pieces)

    def __getitem__(self, token_id: int) -> bytes:
        if not 0 <= token_id < len(self.pieces):
            raise ValueError(f"token_id: expected an id in [0, {len(self.pieces)}), got {token_id}")
        return self.pieces[token_id]

    def join(self, token_ids: Sequence[int]) -> bytes:
        """The bytes of a run of tokens, concatenated.

        Example:
            >>> TokenPieces([b"a", b"b"]).join([1, 0, 1])
            b'bab'
        """
        return b"".join(self[int(t)] for t in token_ids)

    @classmethod
    def from_tokenizer(cls, tokenizer) -> TokenPieces:
        """The table of a transformers tokenizer, one entry per id in ``range(len(tokenizer))``.

        Byte-level BPE vocabularies (GPT-2, Llama 3, Qwen, SmolLM2) are read through GPT-2's byte
        alphabet; added and special tokens contribute their text. Any other tokenizer (SentencePiece,
        whose pieces depend on their neighbours) raises ``ValueError``: build the table yourself.

        Example:
            >>> from specdec.testing.tokenizers import tiny_tokenizer
            >>> tok = tiny_tokenizer()
            >>> table = TokenPieces.from_tokenizer(tok)
            >>> table.join(tok("the cat").input_ids)
            b'the cat'
        """
        added = {int(i): t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
        tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        decoder = repr(getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None))
        if "ByteLevel" not in decoder:
            raise ValueError(
                f"tokenizer: expected a byte-level BPE tokenizer (GPT-2 byte alphabet), got decoder {decoder}; "
                "build TokenPieces from the bytes of each token yourself"
            )
        alphabet = _byte_level_alphabet()

        def piece(token: str) -> bytes:
            if all(ch in alphabet for ch in token):
                return bytes(alphabet[ch] for ch in token)
            return token.encode()

        out = []
        for i, token in enumerate(tokens):
            if i in added:
                out.append(added[i].encode())
            elif token is None:
                raise ValueError(f"tokenizer: id {i} has no token string")
            else:
                out.append(piece(token))
        return cls(out)
