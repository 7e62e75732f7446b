"""TokenPieces: the cached id -> bytes table rebuilds exactly what the tokenizer itself decodes."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec.drafters.agentspec import TokenPieces
from specdec.testing.tokenizers import tiny_tokenizer

TINY = tiny_tokenizer()
TINY_TABLE = TokenPieces.from_tokenizer(TINY)


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 \n.,!?:", max_size=60))
def test_tiny_table_matches_the_tokenizers_decode(text):
    ids = TINY(text).input_ids
    assert TINY_TABLE.join(ids) == TINY.decode(ids, clean_up_tokenization_spaces=False).encode()


def test_every_tiny_id_has_a_piece():
    assert len(TINY_TABLE) == len(TINY)
    for i in range(len(TINY)):
        assert TINY_TABLE[i] == TINY.decode([i], clean_up_tokenization_spaces=False).encode()


def test_bad_ids_and_pieces_are_refused():
    with pytest.raises(ValueError, match="token_id"):
        TINY_TABLE[len(TINY)]
    with pytest.raises(TypeError, match=r"pieces\[1\]"):
        TokenPieces([b"a", "b"])


class _SentencePieceLike:
    """Just enough of a tokenizer whose decoder is not byte-level."""

    added_tokens_decoder: dict = {}
    backend_tokenizer = type("Backend", (), {"decoder": "Metaspace(replacement='▁')"})()

    def __len__(self):
        return 2

    def convert_ids_to_tokens(self, ids):
        return ["▁a", "b"][: len(ids)]


def test_a_tokenizer_that_is_not_byte_level_is_refused():
    with pytest.raises(ValueError, match="tokenizer: expected a byte-level BPE"):
        TokenPieces.from_tokenizer(_SentencePieceLike())


def _is_utf8(piece: bytes) -> bool:
    try:
        piece.decode()
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.real_model
def test_smollm2_table_rebuilds_split_characters_and_special_tokens():
    from specdec.data import smollm2_tokenizer

    tok = smollm2_tokenizer()
    table = TokenPieces.from_tokenizer(tok)
    text = (
        '<|im_start|>assistant\n<tool_call>\n{"name": "run"}</tool_call>\n```python\ndef f():\n    return "é 日本"\n```<|im_end|>'
    )
    ids = tok(text).input_ids
    # 'é' and '日' are each split over byte-level tokens whose own bytes are not valid UTF-8
    assert sum(not _is_utf8(table[i]) for i in ids) >= 2
    assert table.join(ids) == tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False).encode()
    assert table.join(ids) == text.encode()
