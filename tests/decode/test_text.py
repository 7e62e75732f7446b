"""Text in, text out: tokenizer prompts, several EOS ids, stop strings (against transformers' generate), streamers."""

import functools

import pytest
import torch

import specdec as sd
from specdec.testing import tiny_hf_model, tiny_target

SEED = 5


@functools.cache
def _target():
    return tiny_target("llama", seed=SEED, max_seq_len=96)


@functools.cache
def _hf():
    return tiny_hf_model("llama", seed=SEED)


def test_text_prompt_gives_text_back(tiny_tokenizer):
    out = sd.generate(_target(), "the stop is on top.", 10, tokenizer=tiny_tokenizer, drafter=sd.NGramDrafter())
    ids = torch.tensor([tiny_tokenizer("the stop is on top.")["input_ids"]])
    ar = sd.generate(_target(), ids, 10)
    assert torch.equal(out.tokens, ar.tokens)
    assert out.text == tiny_tokenizer.decode(ar.tokens[0].tolist(), skip_special_tokens=True) and isinstance(out.text, str)
    batch = sd.generate(_target(), ["the stop", "on top"], 6, tokenizer=tiny_tokenizer)
    assert isinstance(batch.text, list) and len(batch.text) == 2 and isinstance(batch.tokens, list)
    with pytest.raises(ValueError, match="tokenizer: text prompts need a transformers tokenizer"):
        sd.generate(_target(), "the stop", 5)


def test_any_of_several_eos_ids_stops():
    prompts = torch.tensor([[4, 5, 6, 7], [8, 9, 10, 11]])
    free = sd.generate(_target(), prompts, 30).tokens
    eos = [int(free[0, 7]), int(free[1, 3])]
    for kw in ({}, {"drafter": sd.NGramDrafter()}):
        out = sd.generate(_target(), prompts, 30, eos_token_id=eos, **kw).tokens
        for row in range(2):
            first = min(i for i, t in enumerate(free[row].tolist()) if t in eos)
            assert out[row].tolist() == free[row, : first + 1].tolist()
    with pytest.raises(ValueError, match=r"eos_token_id: expected an int or a list of ints in \[0, 97\)"):
        sd.generate(_target(), prompts, 5, eos_token_id=[3, 97])


def _boundary_stop_string(tokenizer, tokens, at):
    """A stop string that spans the boundary between generated tokens ``at - 1`` and ``at``."""
    before = tokenizer.decode(tokens[:at])
    after = tokenizer.decode(tokens[: at + 1])
    return after[len(before) - 1 : len(before) + 1]


@pytest.mark.parametrize("drafter", [None, "ngram"])
def test_stop_strings_match_transformers_generate(tiny_tokenizer, drafter):
    prompt = torch.tensor([tiny_tokenizer("the stop is on top.")["input_ids"]])
    free = sd.generate(_target(), prompt, 40).tokens[0].tolist()
    stop = _boundary_stop_string(tiny_tokenizer, free, 9)
    assert len(stop) == 2
    kw = {"drafter": sd.NGramDrafter(), "num_draft_tokens": 6} if drafter else {}
    out = sd.generate(_target(), prompt, 40, tokenizer=tiny_tokenizer, stop_strings=[stop, "zzz"], **kw)
    hf = _hf().generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=40,
        do_sample=False,
        stop_strings=[stop, "zzz"],
        tokenizer=tiny_tokenizer,
        pad_token_id=0,
    )
    want = hf[0, prompt.shape[1] :]
    assert want.numel() < 40  # transformers stopped early on the stop string
    assert torch.equal(out.tokens[0], want)
    assert stop in out.text[0]


def test_stop_strings_need_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer: stop_strings are matched"):
        sd.generate(_target(), torch.tensor([[1, 2]]), 5, stop_strings=["ab"])


class Recorder:
    def __init__(self):
        self.calls = []

    def put(self, value):
        self.calls.append(("put", value.clone()))

    def end(self):
        self.calls.append(("end", None))


@pytest.mark.parametrize("kw", [{}, {"drafter": "ngram"}, {"drafter": "ngram", "eos": True}])
def test_streamer_gets_exactly_the_output(kw):
    prompts = torch.tensor([[4, 5, 6, 4, 5, 6, 4], [8, 9, 10, 8, 9, 10, 8]])
    extra = {"drafter": sd.NGramDrafter(), "num_draft_tokens": 6} if "drafter" in kw else {}
    if kw.get("eos"):
        extra["eos_token_id"] = int(sd.generate(_target(), prompts, 17).tokens[0, 9])
    rec, chunks = Recorder(), []
    out = sd.generate(_target(), prompts, 17, streamer=rec, **extra)
    out2 = sd.generate(_target(), prompts, 17, streamer=chunks.append, **extra)
    ends = [i for i, (kind, _) in enumerate(rec.calls) if kind == "end"]
    assert len(ends) == 2
    starts = [0, ends[0] + 1]
    for row in range(2):
        calls = rec.calls[starts[row] : ends[row]]
        assert torch.equal(calls[0][1], prompts[row : row + 1])  # transformers' streamers get the prompt first
        assert torch.equal(torch.cat([v for _, v in calls[1:]]), out.tokens[row])
    assert torch.equal(torch.cat(chunks), torch.cat(list(out2.tokens)))
    if extra.get("drafter"):
        assert len(chunks) < out.stats.new_tokens  # several tokens per round are streamed together


def test_text_streamer_prints_the_decoded_output(tiny_tokenizer, capsys):
    from transformers import TextStreamer

    out = sd.generate(
        _target(),
        "the stop is",
        12,
        tokenizer=tiny_tokenizer,
        drafter=sd.NGramDrafter(),
        streamer=TextStreamer(tiny_tokenizer, skip_prompt=True),
    )
    assert capsys.readouterr().out == out.text + "\n"
