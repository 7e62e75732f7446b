"""Padded batches and lists of prompts: every request's output equals its output alone."""

import functools

import pytest
import torch

import specdec as sd
from specdec.testing import tiny_target


@functools.cache
def _target():
    return tiny_target("qwen3", seed=2, max_seq_len=96)


def _alone(target, prompt, **kw):
    return sd.generate(target, prompt[None], 12, **kw).tokens[0]


@pytest.mark.parametrize("drafter", [None, "ngram"])
def test_left_padded_rows_decode_as_alone(drafter):
    target = _target()
    rows = [torch.tensor([4, 5, 6, 4, 5]), torch.tensor([9, 10]), torch.tensor([7, 8, 9, 7])]
    width = max(r.numel() for r in rows)
    pad = 3  # a real token id: if padding leaked into the context, the outputs would change
    ids = torch.stack([torch.cat([torch.full((width - r.numel(),), pad), r]) for r in rows])
    mask = torch.stack([torch.cat([torch.zeros(width - r.numel(), dtype=torch.long), torch.ones_like(r)]) for r in rows])
    kw = {"drafter": sd.NGramDrafter()} if drafter else {}
    out = sd.generate(target, ids, 12, attention_mask=mask, **kw)
    for row, prompt in enumerate(rows):
        assert torch.equal(out.tokens[row], _alone(target, prompt))
    assert not torch.equal(sd.generate(target, ids[1:2], 12).tokens[0], _alone(target, rows[1]))  # padding matters


def test_all_ones_mask_is_the_plain_batch():
    target = _target()
    ids = torch.tensor([[4, 5, 6], [7, 8, 9]])
    plain = sd.generate(target, ids, 10)
    masked = sd.generate(target, ids, 10, attention_mask=torch.ones_like(ids))
    assert torch.equal(plain.tokens, masked.tokens)


@pytest.mark.parametrize("mask,kind", [([[1, 1, 1], [1, 1, 0]], "right padding"), ([[1, 1, 1], [1, 0, 1]], "a hole")])
def test_masks_that_cannot_be_stripped_raise(mask, kind):
    ids = torch.tensor([[4, 5, 6], [7, 8, 9]])
    with pytest.raises(ValueError, match=f"attention_mask: row 1 has {kind}.*pass a list of 1-D prompts"):
        sd.generate(_target(), ids, 5, attention_mask=torch.tensor(mask))


def test_bad_masks_raise():
    ids = torch.tensor([[4, 5, 6]])
    with pytest.raises(ValueError, match="attention_mask: row 0 has no real token"):
        sd.generate(_target(), ids, 5, attention_mask=torch.tensor([[0, 0, 0]]))
    with pytest.raises(ValueError, match=r"attention_mask: expected a tensor of the shape of input_ids \(1, 3\)"):
        sd.generate(_target(), ids, 5, attention_mask=torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match="attention_mask: expected 0/1"):
        sd.generate(_target(), ids, 5, attention_mask=torch.tensor([[0, 2, 1]]))
    two = torch.tensor([[0, 0, 5], [4, 5, 6]])  # an all-ones mask of the wrong shape broadcasts: still refused
    with pytest.raises(ValueError, match=r"attention_mask: expected a tensor of the shape of input_ids \(2, 3\), got \(2, 2\)"):
        sd.generate(_target(), two, 5, attention_mask=torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attention_mask: expected a tensor of the shape of input_ids \(2, 3\), got list"):
        sd.generate(_target(), two, 5, attention_mask=[[0, 1, 1], [1, 1, 1]])


@pytest.mark.parametrize("verifier", ["chain", "tree"])
def test_list_of_prompts_of_different_lengths(verifier):
    target = _target()
    prompts = [torch.tensor([4, 5, 6, 4, 5]), torch.tensor([9]), torch.tensor([7, 8, 9, 7])]
    ver = sd.ChainVerifier() if verifier == "chain" else sd.TreeVerifier(budget=8)
    paths = 1 if verifier == "chain" else 2  # trees for the tree verifier
    out = sd.generate(target, prompts, 12, drafter=sd.NGramDrafter(max_paths=paths), verifier=ver, seed=3, temperature=0.8)
    assert isinstance(out.tokens, list) and len(out.tokens) == 3
    for i, prompt in enumerate(prompts):
        alone = sd.generate(
            target, prompt[None], 12, drafter=sd.NGramDrafter(max_paths=paths), verifier=ver, seed=3 + i, temperature=0.8
        )
        assert torch.equal(out.tokens[i], alone.tokens[0])
    assert len(out.per_request) == 3 and out.stats.new_tokens == 36


def test_list_of_prompts_rejects_bad_items():
    with pytest.raises(TypeError, match=r"input_ids\[1\]: expected a 1-D integer tensor"):
        sd.generate(_target(), [torch.tensor([1, 2]), torch.tensor([[3]])], 5)
    with pytest.raises(ValueError, match="input_ids: expected at least one prompt"):
        sd.generate(_target(), [], 5)
    with pytest.raises(ValueError, match=r"input_ids\[0\]: expected a prompt of at least one token"):
        sd.generate(_target(), [torch.tensor([], dtype=torch.long)], 5)
