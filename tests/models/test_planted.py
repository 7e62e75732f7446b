"""The planted successor rule: the greedy continuation is known in advance and survives bf16 batching."""

import pytest
import torch

import specdec as sd
from specdec.drafters import NGramDrafter
from specdec.engine import Engine
from specdec.models.planted import plant_successor_rule, successor_chain
from specdec.models.ragged import RaggedDenseTarget
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.testing import tiny_target


def _untied(dtype=torch.float32, seed=0):
    return tiny_target(seed=seed, tie_word_embeddings=False, dtype=dtype)


def _prompts(vocab, count, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (int(n),), generator=gen) for n in torch.randint(1, 30, (count,), generator=gen)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_decoding_follows_the_planted_chain(dtype):
    target = _untied(dtype)
    succ = plant_successor_rule(target, seed=3)
    for prompt in _prompts(target.vocab_size, 4):
        out = sd.generate(target, prompt[None], max_new_tokens=24).tokens[0]
        assert torch.equal(out, successor_chain(succ, int(prompt[-1]), 24))


def test_every_position_has_a_wide_margin():
    target = _untied()
    succ = plant_successor_rule(target)
    tokens = torch.randint(0, target.vocab_size, (1, 120), generator=torch.Generator().manual_seed(1))
    logits = target.forward(tokens).logits[0]  # [T, V]
    top2 = logits.topk(2, dim=-1)
    assert torch.equal(top2.indices[:, 0], succ[tokens[0]])
    hidden = target.config.hidden_size
    # the successor's logit is ~sqrt(H), the runner-up the largest of V random projections of size O(1)
    # (at H = 32, V = 97 the margin is ~0.4 sqrt(H); bf16 rounds these logits by ~0.02)
    assert (top2.values[:, 0] - top2.values[:, 1]).min() > 0.3 * hidden**0.5


def test_unplanted_weights_do_not_follow_a_chain():
    target = _untied()
    succ = torch.randperm(target.vocab_size, generator=torch.Generator().manual_seed(0))
    prompt = torch.tensor([3, 1, 4])
    out = sd.generate(target, prompt[None], max_new_tokens=12).tokens[0]
    assert not torch.equal(out, successor_chain(succ, 4, 12))


def test_bf16_packed_batches_equal_the_chain_for_every_request():
    """The reason for the rule: bf16 rounding that depends on the batch cannot move a planted argmax."""
    target = _untied(torch.bfloat16)
    succ = plant_successor_rule(target, seed=5)
    ragged = RaggedDenseTarget(target, slots=4, max_seq_len=96, layout="packed")
    prompts = _prompts(target.vocab_size, 6, seed=2)
    engine = Engine(ragged, NGramDrafter(), max_batch=4, num_draft_tokens=3)
    ids = [engine.add_request(p, max_new_tokens=16) for p in prompts]
    engine.run()
    for rid, p in zip(ids, prompts):
        assert torch.equal(engine.output(rid), successor_chain(succ, int(p[-1]), 16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hybrid_greedy_decoding_follows_the_planted_chain(dtype):
    """Gated DeltaNet + attention layers and the (1 + w) final norm: the embedding still dominates the stream."""
    target = tiny_target("qwen3_5_text", seed=0, tie_word_embeddings=False, dtype=dtype)
    succ = plant_successor_rule(target, seed=3)
    for prompt in _prompts(target.vocab_size, 4):
        out = sd.generate(target, prompt[None], max_new_tokens=24).tokens[0]
        assert torch.equal(out, successor_chain(succ, int(prompt[-1]), 24))


def test_unplanted_hybrid_does_not_follow_a_chain():
    target = tiny_target("qwen3_5_text", seed=0, tie_word_embeddings=False)
    succ = torch.randperm(target.vocab_size, generator=torch.Generator().manual_seed(3))
    prompt = torch.tensor([3, 1, 4])
    out = sd.generate(target, prompt[None], max_new_tokens=12).tokens[0]
    assert not torch.equal(out, successor_chain(succ, 4, 12))


@pytest.mark.parametrize("layout", ["packed", "per_request"])
def test_bf16_hybrid_engine_batches_equal_the_chain_for_every_request(layout):
    target = tiny_target("qwen3_5_text", seed=0, tie_word_embeddings=False, dtype=torch.bfloat16)
    succ = plant_successor_rule(target, seed=5)
    ragged = RaggedHybridTarget(target, slots=4, max_seq_len=96, layout=layout)
    prompts = _prompts(target.vocab_size, 6, seed=2)
    engine = Engine(ragged, NGramDrafter(), max_batch=4, num_draft_tokens=3)
    ids = [engine.add_request(p, max_new_tokens=16) for p in prompts]
    engine.run()
    for rid, p in zip(ids, prompts):
        assert torch.equal(engine.output(rid), successor_chain(succ, int(p[-1]), 16))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="untied"):
        plant_successor_rule(tiny_target(seed=0, tie_word_embeddings=True))
    target = _untied()
    vocab = target.vocab_size
    with pytest.raises(ValueError, match="permutation"):
        plant_successor_rule(target, torch.zeros(vocab, dtype=torch.long))
    with pytest.raises(ValueError, match=rf"shape \({vocab},\)"):
        plant_successor_rule(target, torch.arange(vocab - 1))
    with pytest.raises(ValueError, match="int64"):
        plant_successor_rule(target, torch.arange(vocab, dtype=torch.int32))
    with pytest.raises(ValueError, match="embed_scale"):
        plant_successor_rule(target, embed_scale=0.0)
    with pytest.raises(ValueError, match="length"):
        successor_chain(torch.arange(vocab), 0, -1)
    for start in (-1, vocab, True, 1.0):
        with pytest.raises(ValueError, match=rf"start: expected a token id in \[0, {vocab}\), got {start!r}"):
            successor_chain(torch.arange(vocab), start, 2)
