"""A 97-token byte-level BPE tokenizer built offline, matching the vocabulary of :func:`tiny_target`."""

from __future__ import annotations

__all__ = ["tiny_tokenizer"]

_LETTERS = list("abcdefghijklmnopqrstuvwxyz") + ["Ġ"] + list("0123456789") + ["Ċ"] + list(".,!?:")
_MERGED = [
    "th",
    "he",
    "in",
    "er",
    "an",
    "re",
    "on",
    "at",
    "en",
    "nd",
    "st",
    "op",
    "to",
    "es",
    "or",
    "te",
    "of",
    "ed",
    "is",
    "it",
    "al",
    "ar",
    "ou",
    "ng",
    "le",
    "Ġt",
    "Ġa",
    "Ġs",
    "Ġo",
    "Ġw",
    "Ġthe",
    "Ġst",
    "Ġop",
    "Ġto",
    "Ġin",
    "Ġof",
    "Ġan",
    "Ġis",
    "Ġit",
    "Ġon",
    "Ġre",
    "Ġhe",
    "Ġat",
    "Ġen",
    "Ġes",
    "Ġor",
    "Ġte",
    "Ġed",
    "Ġal",
    "Ġar",
    "Ġou",
    "Ġng",
    "Ġle",
]


def tiny_tokenizer():
    """A transformers fast tokenizer over 97 ids (``<eos>`` = 0, letters, digits, space, newline, merges).

    Built in memory from the ``tokenizers`` package (nothing is downloaded), so text-in / text-out
    decoding, stop strings and streamers can be shown and tested with :func:`tiny_target`.

    Example:
        >>> tok = tiny_tokenizer()
        >>> len(tok), tok.eos_token_id, tok.decode(tok("the stop").input_ids)
        (97, 0, 'the stop')
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<eos>": 0}
    for piece in _LETTERS:
        vocab[piece] = len(vocab)
    merges = []
    for piece in _MERGED:
        cut = next(i for i in range(len(piece) - 1, 0, -1) if piece[:i] in vocab and piece[i:] in vocab)
        merges.append((piece[:cut], piece[cut:]))
        vocab[piece] = len(vocab)
    if len(vocab) != 97:
        raise RuntimeError(f"tiny_tokenizer: expected 97 ids (the tiny targets' vocabulary), built {len(vocab)}")
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
