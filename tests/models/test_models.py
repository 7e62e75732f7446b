"""The lean runtime against transformers on the same weights, and its cache operations."""

import logging

import gguf
import numpy as np
import pytest
import torch

import specdec as sd
from specdec.models import loading
from specdec.testing import tiny_hf_model, tiny_target

CONFIGS = {
    "llama-gqa": dict(model_type="llama", num_heads=4, num_kv_heads=2),
    "llama-mha-tied": dict(model_type="llama", num_heads=4, num_kv_heads=4, tie_word_embeddings=True),
    "qwen3-qknorm-odd": dict(
        model_type="qwen3", vocab_size=101, hidden_size=40, num_heads=5, num_kv_heads=1, head_dim=12, intermediate_size=52
    ),
    "qwen2-bias": dict(model_type="qwen2", num_heads=4, num_kv_heads=2, num_layers=3),
    # q/k/v/o biases (llama, qwen3) and the MLP's (llama): every one a tensor the runtime must load
    "llama-attention-bias": dict(model_type="llama", extra_config={"attention_bias": True}),
    "llama-mlp-bias": dict(model_type="llama", extra_config={"mlp_bias": True}),
    "qwen3-attention-bias": dict(model_type="qwen3", extra_config={"attention_bias": True}),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_and_hidden_match_transformers(name):
    hf = tiny_hf_model(seed=3, **CONFIGS[name])
    target = sd.load_target(hf, dtype=torch.float32, device="cpu", max_seq_len=64)
    ids = torch.randint(0, hf.config.vocab_size, (1, 23), generator=torch.Generator().manual_seed(0))
    ref = hf(ids, output_hidden_states=True)
    out = target(ids, hidden_layers=(0, 1, hf.config.num_hidden_layers))
    torch.testing.assert_close(out.logits, ref.logits.float(), rtol=1e-4, atol=1e-4)
    # every tap, the last one included: HF's last hidden state is after the final norm
    for got, layer in zip(out.hidden, (0, 1, hf.config.num_hidden_layers)):
        torch.testing.assert_close(got, ref.hidden_states[layer], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_ar_equals_hf_generate(name):
    hf = tiny_hf_model(seed=5, **CONFIGS[name])
    target = sd.load_target(hf, dtype=torch.float32, device="cpu", max_seq_len=96)
    prompt = torch.randint(0, hf.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(1))
    ref = hf.generate(
        prompt, max_new_tokens=40, do_sample=False, min_new_tokens=40, attention_mask=torch.ones_like(prompt), pad_token_id=0
    )[:, prompt.shape[1] :]
    ours = sd.generate(target, prompt, max_new_tokens=40)
    assert torch.equal(ours.tokens, ref)


def test_incremental_decode_matches_full_forward():
    target = tiny_target(seed=2, max_seq_len=64)
    ids = torch.randint(0, target.vocab_size, (1, 17), generator=torch.Generator().manual_seed(2))
    full = target(ids).logits
    target.reset()
    target(ids[:, :10])
    target.commit(10)
    rows = []
    for i in range(10, 17):
        rows.append(target(ids[:, i : i + 1]).logits)
        target.commit(1)
    rest = torch.cat(rows, 1)
    torch.testing.assert_close(rest, full[:, 10:], rtol=1e-5, atol=1e-5)


def test_commit_keeps_only_accepted_rows():
    """Rows 0, 2, 3 of a verify window are compacted; the next logits equal a clean run of that path."""
    target = tiny_target(seed=4, max_seq_len=64)
    prefix = torch.tensor([[5, 6, 7, 8]])
    window = torch.tensor([[9, 10, 11, 12, 13]])
    # a tree: row 1 and row 2 are both children of row 0; rows 3, 4 follow row 2
    parents = [-1, 0, 0, 2, 3]
    mask = torch.zeros(5, 5, dtype=torch.bool)
    for i in range(5):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parents[j]
    depth = torch.tensor([[0, 1, 1, 2, 3]])
    target(prefix)
    target.commit(4)
    tree_logits = target(window, positions=4 + depth, mask=mask).logits
    target.commit(torch.tensor([0, 2, 3]))
    assert target.length == 7
    nxt = target(torch.tensor([[14]])).logits

    clean = tiny_target(seed=4, max_seq_len=64)
    path = torch.tensor([[5, 6, 7, 8, 9, 11, 12, 14]])
    ref = clean(path).logits
    torch.testing.assert_close(nxt[0, -1], ref[0, -1], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tree_logits[0, [0, 2, 3]], ref[0, 4:7], rtol=1e-5, atol=1e-5)


def test_commit_without_compaction_is_detected():
    """Mutation: committing the first three rows instead of the path gives different next logits."""
    target = tiny_target(seed=4, max_seq_len=64)
    target(torch.tensor([[5, 6, 7, 8]]))
    target.commit(4)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    target(torch.tensor([[9, 10, 11]]), positions=torch.tensor([[4, 5, 5]]), mask=mask)
    target.commit(2)  # wrong: keeps row 1, the rejected sibling, instead of row 2
    wrong = target(torch.tensor([[14]])).logits
    clean = tiny_target(seed=4, max_seq_len=64)
    ref = clean(torch.tensor([[5, 6, 7, 8, 9, 11, 14]])).logits
    assert not torch.allclose(wrong[0, -1], ref[0, -1], atol=1e-3)


@pytest.mark.parametrize("rows", [[0, 9], [2, 0], [1, 1], [-1], [0, 100]])
def test_commit_refuses_rows_outside_the_last_forward_or_out_of_order(rows):
    """Rows past the window, repeated, descending or negative would copy stale or foreign K/V into the cache."""
    target = tiny_target(seed=0, max_seq_len=16)
    target(torch.tensor([[1, 2, 3]]))
    with pytest.raises(ValueError, match=r"accepted: expected ascending row indices in \[0, 3\)"):
        target.commit(torch.tensor(rows))
    assert target.length == 0
    target.commit(torch.tensor([0, 1]))  # the scratch rows are still there to commit
    assert target.length == 2


def test_commit_checks_a_tree_given_as_mask_and_positions_alone():
    """Without tree_parents the forward's mask says which rows each row saw: a row whose parent was skipped is refused."""
    from specdec.kernels.gdn.meta import build_tree_meta

    parents = torch.tensor([-1, 0, 0, 2])  # row 3 is a child of row 2, not of row 1
    mask = build_tree_meta(parents, validate=False).ancestors[0].bool()
    target = tiny_target(seed=0)
    target(torch.tensor([[1, 2, 3, 4]]), torch.tensor([[0, 1, 1, 2]]), mask)
    with pytest.raises(ValueError, match=r"row 3 \(accepted\[2\]\) attended rows \[0, 2, 3\], not \[0, 1, 3\]"):
        target.commit(torch.tensor([0, 1, 3]))
    assert target.length == 0
    target.commit(torch.tensor([0, 2, 3]))
    clean = tiny_target(seed=0)
    ref = clean(torch.tensor([[1, 3, 4, 5]])).logits[0, -1]
    torch.testing.assert_close(target(torch.tensor([[5]])).logits[0, -1], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tree", [False, True])
def test_commit_refuses_rows_that_are_not_one_path_of_the_last_forward(tree):
    """Siblings, or rows past a skipped one, ran at other positions or saw other rows than the slots they would fill."""
    target = tiny_target(seed=4, max_seq_len=64)
    target(torch.tensor([[5, 6, 7, 8]]))
    target.commit(4)
    if tree:  # rows 0 and 1 children of the prefix, row 2 a child of row 1
        target(torch.tensor([[9, 10, 11]]), tree_parents=torch.tensor([-1, -1, 1]))
        bad = [
            (torch.tensor([0, 1]), "row 1 \\(accepted\\[1\\]\\) ran at position 4, not 5"),
            (2, "row 1 \\(accepted\\[1\\]\\) ran at position 4, not 5"),
            (torch.tensor([0, 2]), "row 2 \\(accepted\\[1\\]\\) has parent 1, not 0"),
        ]
    else:  # a chain: row 2 ran after row 1 at position 6
        target(torch.tensor([[9, 10, 11]]))
        bad = [
            (torch.tensor([0, 2]), "row 2 \\(accepted\\[1\\]\\) ran at position 6, not 5"),
            (torch.tensor([1]), "row 1 \\(accepted\\[0\\]\\) ran at position 5, not 4"),
        ]
    for accepted, message in bad:
        with pytest.raises(ValueError, match="accepted: expected the rows of one root-to-node path; " + message):
            target.commit(accepted)
        assert target.length == 4
    target.commit(torch.tensor([1, 2]) if tree else 3)
    clean = tiny_target(seed=4, max_seq_len=64)
    ref = clean(torch.tensor([[5, 6, 7, 8, 10, 11, 14]] if tree else [[5, 6, 7, 8, 9, 10, 11, 14]])).logits
    torch.testing.assert_close(target(torch.tensor([[14]])).logits[0, -1], ref[0, -1], rtol=1e-5, atol=1e-5)


TINY_CONFIG = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("num_kv_heads", 3, "num_heads: expected a multiple of num_kv_heads = 3, got 4"),
        ("num_kv_heads", 0, "num_kv_heads: expected a positive int, got 0"),
        ("num_heads", 0, "num_heads: expected a positive int, got 0"),
        ("num_layers", -1, "num_layers: expected a positive int, got -1"),
        ("vocab_size", 0, "vocab_size: expected a positive int, got 0"),
        ("head_dim", 7, "head_dim: expected an even int"),
        ("hidden_size", 32.0, "hidden_size: expected a positive int, got 32.0"),
    ],
)
def test_target_config_refuses_shapes_no_forward_could_run(field, value, message):
    with pytest.raises(ValueError, match=message):
        sd.TargetConfig(**{**TINY_CONFIG, field: value})
    sd.TargetConfig(**TINY_CONFIG)  # the same config otherwise builds


def test_load_from_checkpoint_folder(tmp_path):
    hf = tiny_hf_model("qwen3", seed=7)
    hf.save_pretrained(tmp_path)
    from_folder = sd.load_target(tmp_path, dtype=torch.float32, device="cpu", max_seq_len=32)
    from_model = sd.load_target(hf, dtype=torch.float32, device="cpu", max_seq_len=32)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    assert torch.equal(from_folder(ids).logits, from_model(ids).logits)


def test_errors_name_the_argument():
    target = tiny_target(seed=0, max_seq_len=16)
    with pytest.raises(TypeError, match="tokens"):
        target(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="max_seq_len 16"):
        target(torch.zeros(1, 17, dtype=torch.long))
    for ids in ([[1, 200]], [[1, -1]]):
        with pytest.raises(ValueError, match=r"tokens: expected token ids in \[0, 97\), got ids in"):
            target(torch.tensor(ids))
    with pytest.raises(ValueError, match="mask"):
        target(torch.tensor([[1, 2]]), mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="accepted"):
        target(torch.tensor([[1, 2]]))
        target.commit(3)
    with pytest.raises(ValueError, match="model_type"):
        from transformers import GPT2Config, GPT2LMHeadModel

        sd.load_target(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=10)), device="cpu")
    with pytest.raises(ValueError, match="weight_format"):
        sd.load_target(tiny_hf_model(), weight_format="int4", device="cpu")
    with pytest.raises(ValueError, match="model_or_path"):
        sd.load_target("/nonexistent/folder", device="cpu")


def test_cuda_graphs_need_a_cuda_target():
    with pytest.raises(ValueError, match="CUDA"):
        tiny_target(seed=6, max_seq_len=48).enable_cuda_graphs()


def test_w12_target_is_bit_identical_to_bf16_target():
    hf = tiny_hf_model("qwen3", seed=8, vocab_size=89)
    plain = sd.load_target(hf, dtype=torch.bfloat16, device="cpu", max_seq_len=64)
    w12 = sd.load_target(hf, dtype=torch.bfloat16, device="cpu", max_seq_len=64, weight_format="w12")
    assert isinstance(w12.layers[0].mlp.w13.weight, sd.W12Tensor)
    ids = torch.tensor([[5, 17, 3, 60, 2, 2, 41]])
    assert torch.equal(w12(ids).logits, plain(ids).logits)
    w12.reset()
    plain.reset()
    assert torch.equal(sd.generate(w12, ids, 24).tokens, sd.generate(plain, ids, 24).tokens)
    with pytest.raises(ValueError, match="w12"):
        sd.load_target(hf, dtype=torch.float32, device="cpu", weight_format="w12")


def test_load_target_with_no_device_or_dtype_gives_a_float32_cpu_target(caplog):
    hf = tiny_hf_model("qwen3", seed=9)
    with caplog.at_level(logging.INFO, logger="specdec"):
        target = sd.load_target(hf, max_seq_len=32, progress=False)
    assert target.embed.weight.device.type == "cpu" and target.embed.weight.dtype == torch.float32
    assert target.layers[0].attn.wqkv.weight.dtype == torch.float32
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "specdec")
    assert "device=cpu (the model's device)" in logged and "dtype=torch.float32" in logged
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    explicit = sd.load_target(hf, dtype=torch.float32, device="cpu", max_seq_len=32)
    assert torch.equal(target(ids).logits, explicit(ids).logits)


def test_load_target_from_a_folder_without_cuda_chooses_cpu(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    tiny_hf_model("llama", seed=10).save_pretrained(tmp_path)
    with caplog.at_level(logging.INFO, logger="specdec"):
        target = sd.load_target(tmp_path, max_seq_len=32)
    assert target.embed.weight.device.type == "cpu" and target.embed.weight.dtype == torch.float32
    assert "device=cpu (no CUDA device)" in caplog.text


def test_load_target_explicit_arguments_win_over_the_defaults():
    hf = tiny_hf_model("llama", seed=11)
    target = sd.load_target(hf, dtype=torch.bfloat16, max_seq_len=32)
    assert target.embed.weight.dtype == torch.bfloat16 and target.embed.weight.device.type == "cpu"
    w12 = sd.load_target(hf, max_seq_len=32, weight_format="w12")  # W12 holds bf16: bf16 is chosen
    assert isinstance(w12.layers[0].mlp.w13.weight, sd.W12Tensor)
    with pytest.raises(TypeError, match="device"):
        sd.load_target(hf, device=0.5)


def test_default_choice_is_cuda_and_bf16_when_cuda_is_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert loading._choose_device_and_dtype(None, None, None, "bf16") == (torch.device("cuda"), torch.bfloat16)
    assert loading._choose_device_and_dtype(torch.device("cpu"), None, None, "bf16") == (torch.device("cpu"), torch.float32)
    assert loading._choose_device_and_dtype(None, "cpu", torch.float64, "bf16") == (torch.device("cpu"), torch.float64)


def write_gguf(path, architecture: str):
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("architecture", ["rwkv7", "gpt2"], ids=["unknown_to_transformers", "transformers_only"])
def test_gguf_with_an_unsupported_architecture_names_it(tmp_path, architecture):
    path = write_gguf(tmp_path / "tiny.gguf", architecture)
    expected = r"\('llama', 'qwen2', 'qwen3'\)"
    with pytest.raises(
        ValueError,
        match=rf"model_or_path: tiny\.gguf holds GGUF architecture '{architecture}'; "
        rf"expected one of {expected}",
    ):
        sd.load_target(path, device="cpu", progress=False)


def test_gguf_architectures_are_transformers_gguf_ones_the_runtime_supports():
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    assert loading.gguf_architectures() == ("llama", "qwen2", "qwen3")
    assert set(loading.gguf_architectures()) <= set(GGUF_SUPPORTED_ARCHITECTURES) & set(sd.models.SUPPORTED_MODEL_TYPES)


def test_a_file_that_is_not_gguf_is_named(tmp_path):
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"not a gguf file")
    with pytest.raises(ValueError, match="model_or_path: .*broken.gguf' is not a readable GGUF file"):
        sd.load_target(path, device="cpu", progress=False)


def test_tiny_models_leave_the_global_rng_as_they_found_it():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_hf_model("qwen3", seed=0)
    tiny_target(seed=1)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    "model_type, extra, message",
    [
        ("llama", {"hidden_act": "gelu"}, "hidden_act: expected 'silu'"),
        ("qwen2", {"use_sliding_window": True, "sliding_window": 2, "max_window_layers": 0}, "layer_types: expected every"),
        ("qwen3", {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4}, "layer_types: expected every"),
        (
            "llama",
            {"rope_parameters": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 1e4}},
            "rope_type: 'dynamic' frequencies depend on the sequence length",
        ),
    ],
)
def test_configs_the_runtime_would_run_as_another_model_are_refused(model_type, extra, message):
    hf = tiny_hf_model(model_type, seed=0, extra_config=extra)
    with pytest.raises(ValueError, match=message):
        sd.load_target(hf, dtype=torch.float32, device="cpu", progress=False)


def test_a_checkpoint_tensor_without_a_place_in_the_runtime_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    loading.save_hf_checkpoint(tiny_hf_model("llama", seed=0), tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    state["model.layers.1.mlp.down_proj.bias"] = torch.zeros(32)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"no place for: \['model.layers.1.mlp.down_proj.bias'\]"):
        sd.load_target(tmp_path, dtype=torch.float32, device="cpu", progress=False)


def test_an_untied_checkpoint_without_its_head_is_refused_and_a_tied_one_may_keep_it(tmp_path):
    from safetensors.torch import load_file, save_file

    untied, tied = tmp_path / "untied", tmp_path / "tied"
    loading.save_hf_checkpoint(tiny_hf_model("llama", seed=0), untied)
    state = load_file(str(untied / "model.safetensors"))
    del state["lm_head.weight"]
    save_file(state, str(untied / "model.safetensors"))
    with pytest.raises(ValueError, match="missing tensor 'lm_head.weight'"):
        sd.load_target(untied, dtype=torch.float32, device="cpu", progress=False)
    hf = tiny_hf_model("llama", seed=0, tie_word_embeddings=True)
    loading.save_hf_checkpoint(hf, tied)
    state = load_file(str(tied / "model.safetensors"))
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    save_file(state, str(tied / "model.safetensors"))
    target = sd.load_target(tied, dtype=torch.float32, device="cpu", progress=False)
    ids = torch.tensor([[3, 1, 4]])
    torch.testing.assert_close(target(ids).logits, hf(ids).logits, rtol=1e-4, atol=1e-4)


def test_random_targets_without_a_device_go_where_cuda_is_or_to_the_cpu(monkeypatch):
    from specdec.models.hybrid import random_hybrid_target

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    dense = loading.random_target(tiny_target(seed=0).config, dtype=torch.float32, max_seq_len=16)
    hybrid = random_hybrid_target(tiny_target("qwen3_5_text", seed=0).config, dtype=torch.float32, max_seq_len=16)
    assert dense.device.type == "cpu" and hybrid.device.type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert loading.default_device() == torch.device("cuda")


@pytest.mark.parametrize("model_type", ["llama", "qwen3_5_text"])
@pytest.mark.parametrize("layer", [1.5, True, -1, 3])
def test_hidden_layers_must_be_int_indices(model_type, layer):
    target = tiny_target(model_type, seed=0, max_seq_len=16, num_layers=2)
    with pytest.raises(ValueError, match=rf"hidden_layers: expected indices in \[0, 2\], got {layer!r}"):
        target(torch.tensor([[1, 2]]), hidden_layers=(layer,))


@pytest.mark.parametrize("model_type", ["llama", "qwen3_5_text"])
def test_a_plan_made_for_another_length_is_refused(model_type):
    from specdec.contracts import Tree, VerifyPlan

    target = tiny_target(model_type, seed=0, max_seq_len=32)
    target(torch.tensor([[1, 2, 3]]))
    target.commit(3)
    stale = VerifyPlan.for_tree(torch.tensor([4]), Tree(tokens=[5, 6], parents=[-1, -1]), prefix_len=0)
    with pytest.raises(ValueError, match=r"plan: expected prefix_len 3 \(the target's committed length\), got 0"):
        target.run_plan(stale)
