"""A 97-token byte-level BPE tokenizer built offline, matching the tiny test targets' vocabulary."""

import pytest

LETTERS = list("abcdefghijklmnopqrstuvwxyz") + ["Ġ"] + list("0123456789") + ["Ċ"] + list(".,!?:")
MERGED = ["th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "st", "op", "to", "es", "or", "te", "of", "ed", "is",
          "it", "al", "ar", "ou", "ng", "le", "Ġt", "Ġa", "Ġs", "Ġo", "Ġw", "Ġthe", "Ġst", "Ġop", "Ġto", "Ġin", "Ġof", "Ġan",
          "Ġis", "Ġit", "Ġon", "Ġre", "Ġhe", "Ġat", "Ġen", "Ġes", "Ġor", "Ġte", "Ġed", "Ġal", "Ġar", "Ġou", "Ġng", "Ġle"]


def build_tiny_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<eos>": 0}
    for piece in LETTERS:
        vocab[piece] = len(vocab)
    merges = []
    for piece in MERGED:
        cut = next(i for i in range(len(piece) - 1, 0, -1) if piece[:i] in vocab and piece[i:] in vocab)
        merges.append((piece[:cut], piece[cut:]))
        vocab[piece] = len(vocab)
    assert len(vocab) == 97
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tiny_tokenizer()
