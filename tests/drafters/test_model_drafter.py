"""A model drafter's cache keeps only the longest common prefix with the new context, alone and batched."""

from __future__ import annotations

import warnings

import pytest
import torch

import specdec as sd
from specdec.contracts import SamplingConfig
from specdec.drafters import ModelDrafter
from specdec.drafters.batched_model import BatchedModelDrafter
from specdec.testing import tiny_target

GREEDY = SamplingConfig()


def _logprobs_alone(drafter, context, k):
    return drafter.propose(context, k, sampling=GREEDY, generator=None).tree_logprobs


def test_a_context_that_differs_mid_way_but_agrees_after_keeps_only_the_common_prefix():
    first = torch.tensor([5, 6, 7, 8, 9, 10])
    second = torch.tensor([5, 11, 7, 8, 9, 10, 12])  # agrees with `first` at 4 of its first 6 tokens, not as a prefix
    used, fresh = ModelDrafter(tiny_target(seed=1)), ModelDrafter(tiny_target(seed=1))
    used.reset()
    fresh.reset()
    _logprobs_alone(used, first, 3)
    assert torch.equal(_logprobs_alone(used, second, 3), _logprobs_alone(fresh, second, 3))

    batched, reference = BatchedModelDrafter(tiny_target(seed=1), slots=2), ModelDrafter(tiny_target(seed=1))
    batched.reset(1)
    reference.reset()
    args = dict(samplings=[GREEDY], generators=[None], target_hiddens=[None])
    batched.propose_batch([1], [first], [3], **args)
    got = batched.propose_batch([1], [second], [3], **args)[0].tree_logprobs
    assert torch.equal(got, _logprobs_alone(reference, second, 3))


def test_a_draft_model_drafts_every_token_whose_input_its_cache_holds():
    import warnings

    # a cache of 16 rows holds a 14-token context and the inputs of two more drafts: three tokens come out
    context = torch.arange(1, 15)
    alone = ModelDrafter(tiny_target(seed=1, max_seq_len=16))
    alone.reset()
    batched = BatchedModelDrafter(tiny_target(seed=1, max_seq_len=16), slots=1)
    batched.reset(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "overflow" warning: everything asked for fits
        assert alone.propose(context, 3, sampling=GREEDY, generator=None).num_tokens == 3
        got = batched.propose_batch([0], [context], [3], samplings=[GREEDY], generators=[None], target_hiddens=[None])
        assert got[0].num_tokens == 3


def test_a_hybrid_draft_model_that_cannot_roll_back_reads_the_context_again():
    # a hybrid model keeps recurrent states for its last state_slots - 1 commits; 12 draft tokens a round roll back
    # past them, which raised before: now the drafter warns once and re-reads the context, and decoding stays lossless
    target = tiny_target("qwen3_5_text", seed=0, max_seq_len=128)
    drafter = ModelDrafter(tiny_target("qwen3_5_text", seed=3, max_seq_len=128))
    prompt = torch.tensor([[5, 17, 42, 8, 3, 60]])
    with pytest.warns(UserWarning, match=r"ModelDrafter: the draft model cannot roll back to \d+ tokens .*state_slots"):
        spec = sd.generate(target, prompt, 30, drafter=drafter, num_draft_tokens=12)
    assert torch.equal(spec.tokens, sd.generate(target, prompt, 30).tokens)


@pytest.mark.parametrize("max_new_tokens", [6, 7, 8])
def test_a_draft_model_shorter_than_the_target_ends_its_requests_without_error(max_new_tokens):
    """generate asks for 0 drafts in a request's last round; a context one past the draft cache then drafts nothing."""
    target = tiny_target(seed=0, max_seq_len=64)
    prompt = torch.tensor([[1, 2, 3]])
    drafter = ModelDrafter(tiny_target(seed=1, max_seq_len=8))
    drafter.reset()
    assert drafter.propose(torch.arange(1, 10), 0, sampling=GREEDY, generator=None).num_tokens == 0  # 9 = 8 + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the drafts that no longer fit are announced once
        spec = sd.generate(target, prompt, max_new_tokens, drafter=drafter, num_draft_tokens=3)
    assert torch.equal(spec.tokens, sd.generate(target, prompt, max_new_tokens).tokens)
