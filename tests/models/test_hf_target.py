"""HFTarget: a transformers causal LM on the chain path of the Target protocol, against transformers' own generate."""

from __future__ import annotations

import pytest
import torch

import specdec as sd
from specdec.contracts import Target, Tree, VerifyPlan
from specdec.testing import tiny_hf_model

PROMPT = torch.tensor([[5, 9, 2, 7, 5, 9, 2, 7, 5, 11]])


def _hf_generate(hf, prompt, new_tokens):
    out = hf.generate(
        prompt,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        attention_mask=torch.ones_like(prompt),
        pad_token_id=0,
    )
    return out[:, prompt.shape[1] :]


@pytest.mark.parametrize("family", ["llama", "qwen3", "qwen3_5_text"])
@pytest.mark.parametrize("drafter", [None, "ngram"])
def test_greedy_generate_equals_transformers_generate(family, drafter):
    hf = tiny_hf_model(family, seed=3, num_layers=2)
    want = _hf_generate(hf, PROMPT, 24)
    target = sd.HFTarget(hf)
    assert isinstance(target, Target) and not target.supports_trees
    got = sd.generate(target, PROMPT, 24, drafter=sd.NGramDrafter(max_ngram=2) if drafter else None, num_draft_tokens=3)
    assert torch.equal(got.tokens, want)


@pytest.mark.parametrize("family", ["llama", "qwen3_5_text"])
def test_commit_and_truncate_keep_exactly_the_kept_tokens(family):
    """After a partial commit / a truncate / a discard, the next logits are those of a fresh run of the kept tokens."""
    hf = tiny_hf_model(family, seed=4, num_layers=2)
    ids = torch.randint(0, 97, (1, 12), generator=torch.Generator().manual_seed(0))
    target = sd.HFTarget(hf)
    target.forward(ids[:, :8])
    target.commit(5)  # rows 5..7 dropped
    target.forward(ids[:, 5:9])
    target.discard()  # nothing kept
    target.forward(ids[:, 5:10])
    target.commit(torch.arange(5))
    assert target.length == 10
    target.truncate(7)
    got = target.forward(ids[:, 7:12]).logits
    fresh = sd.HFTarget(hf)
    fresh.forward(ids[:, :7])
    fresh.commit(7)
    want = fresh.forward(ids[:, 7:12]).logits
    # other chunkings of the same tokens round differently (BLAS row counts, GDN chunks): a tolerance far
    # below what a wrong state gives (checked against the state with the dropped rows still in it)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    wrong = sd.HFTarget(hf)
    wrong.forward(ids[:, :8])
    wrong.commit(8)
    assert (wrong.forward(ids[:, 7:12]).logits - want).abs().max() > 1e-2


def test_hidden_taps_follow_hf_numbering():
    hf = tiny_hf_model("qwen3", seed=2, num_layers=2)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    ref = hf(ids, output_hidden_states=True)
    out = sd.HFTarget(hf).forward(ids, hidden_layers=(0, 2))
    assert torch.equal(out.hidden[0], ref.hidden_states[0]) and torch.equal(out.hidden[1], ref.hidden_states[2])
    assert torch.equal(out.logits, ref.logits.float())


def test_tree_plans_and_bad_input_are_refused():
    target = sd.HFTarget(tiny_hf_model("llama", seed=0), max_seq_len=16)
    tree_plan = VerifyPlan.for_tree(torch.tensor([3]), Tree(tokens=[7, 8], parents=[-1, -1]), prefix_len=0)
    with pytest.raises(ValueError, match="plan: HFTarget verifies chains only"):
        target.run_plan(tree_plan)
    with pytest.raises(ValueError, match="mask"):
        target.forward(torch.tensor([[1, 2]]), mask=torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match="tokens"):
        target.forward(torch.tensor([[1.0]]))
    with pytest.raises(ValueError, match=r"tokens: expected token ids in \[0, 97\), got ids in \[1, 200\]"):
        target.forward(torch.tensor([[1, 200]]))
    with pytest.raises(ValueError, match="max_seq_len 16"):
        target.forward(torch.zeros(1, 17, dtype=torch.long))
    target.forward(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match="accepted: expected 0 <= n <= 3"):
        target.commit(4)
    with pytest.raises(ValueError, match="accepted: HFTarget keeps a prefix"):
        target.commit(torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="length"):
        target.truncate(1)
    with pytest.raises(TypeError, match="model"):
        sd.HFTarget(object())
