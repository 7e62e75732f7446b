"""DSpark's gated and RNN sequential heads: DeepSpec names, exactness in generate, draft laws, the bias formula."""

from __future__ import annotations

import json

import pytest
import torch
from scipy import stats

import specdec as sd
from specdec.drafters.block import (
    DSparkDrafter,
    block_bias,
    build_dspark_model,
    export_state_dict,
    fixture_config,
    load_dspark_model,
    markov_step,
    random_block_model,
    read_dspark_config,
    save_fixture,
)
from specdec.drafters.block import dspark as dspark_mod
from specdec.testing import tiny_target
from specdec.verify.sampling import SamplingConfig
from specdec.verify.tree import TreeVerifier

HEADS = ["vanilla", "gated", "rnn"]


@pytest.fixture(scope="module")
def small_target():
    # a 6-token vocabulary: random drafts are accepted often enough for exactness tests to bite
    return tiny_target(seed=0, vocab_size=6)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, small_target):
    root = tmp_path_factory.mktemp("heads")
    return {h: save_fixture(root / h, "Qwen3DSparkModel", small_target, seed=1, num_layers=2, markov_head_type=h) for h in HEADS}


def _features(target, drafter, context):
    target.reset()
    out = target(context[None, :-1], hidden_layers=drafter.target_layer_ids)
    target.reset()
    return torch.stack([h[0] for h in out.hidden], dim=1)  # [n - 1, taps, H]


def test_deepspec_tensor_names_and_shapes(small_target):
    h, r = small_target.config.hidden_size, 8
    gated = export_state_dict(
        random_block_model(fixture_config("Qwen3DSparkModel", small_target, markov_head_type="gated"), small_target)
    )
    assert gated["markov_head.gate_proj.weight"].shape == (r, h + r)
    assert gated["markov_head.gate_proj.bias"].shape == (r,)
    rnn = export_state_dict(
        random_block_model(fixture_config("Qwen3DSparkModel", small_target, markov_head_type="rnn"), small_target)
    )
    assert rnn["markov_head.joint_proj.weight"].shape == (3 * r, 2 * r + h)
    assert rnn["markov_head.joint_proj.bias"].shape == (3 * r,)
    assert {"markov_head.markov_w1.weight", "markov_head.markov_w2.weight", "confidence_head.proj.weight"} <= set(rnn)
    assert "markov_head.gate_proj.weight" not in rnn and "markov_head.joint_proj.weight" not in gated


@pytest.mark.parametrize("head", HEADS)
def test_round_trip(head, folders, small_target):
    config = json.loads((folders[head] / "config.json").read_text())
    assert config["markov_head_type"] == head
    ref = random_block_model(config, small_target, seed=1)
    loaded = load_dspark_model(folders[head], small_target)
    assert loaded.cfg.markov_head_type == head
    for name, tensor in ref.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


def _reference_bias(model, head, prevs, hidden):
    """The spec's formulas with explicit matrices, position by position (``s_0 = 0``)."""
    w1 = model.markov_head.markov_w1.weight.double()  # [V, r]
    w2 = model.markov_head.markov_w2.weight.double()  # [V, r]
    hidden = hidden.double()
    out, s = [], torch.zeros(w1.shape[1], dtype=torch.float64)
    for k, prev in enumerate(prevs):
        e = w1[prev]
        if head == "vanilla":
            out.append(w2 @ e)
        elif head == "gated":
            g = model.markov_head.gate_proj
            gate = torch.sigmoid(g.weight.double() @ torch.cat([hidden[k], e]) + g.bias.double())
            out.append(w2 @ (gate * e))
        else:
            j = model.markov_head.joint_proj
            z = torch.cat([s, e, hidden[k]])
            r = w1.shape[1]
            a, c, o = (j.weight.double() @ z + j.bias.double()).split(r)
            s = torch.sigmoid(a) * s + (1 - torch.sigmoid(a)) * torch.tanh(c)
            out.append(w2 @ torch.tanh(o))
    return torch.stack(out)


def _check_drafter_against_reference(drafter, target):
    ctx = torch.tensor([1, 2, 3, 4, 5, 0])
    drafter.reset()
    p = drafter.propose(ctx, 7, sampling=SamplingConfig(), generator=None, target_hidden=_features(target, drafter, ctx))
    hidden = drafter.last_hidden  # [7, H]: all rows predict
    prevs = [int(ctx[-1])] + p.tokens[:-1].tolist()
    ref = _reference_bias(drafter.model, drafter.head_type, prevs, hidden)
    base = drafter.model.logits(hidden, target.lm_head).double()
    # greedy drafting is the argmax of U_k + b_k along its own path
    assert p.tokens.tolist() == (base + ref).argmax(-1).tolist()
    state, got = None, []
    for k, prev in enumerate(prevs):
        bias, state = drafter.sequential_bias(torch.tensor(prev), hidden[k], state)
        got.append(bias)
    torch.testing.assert_close(torch.stack(got).double(), ref, atol=1e-5, rtol=1e-5)
    # teacher-forced block form (training) == the step-by-step form (inference)
    tf = block_bias(drafter.model.markov_head, drafter.head_type, torch.tensor(prevs), hidden)
    torch.testing.assert_close(tf.double(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("head", HEADS)
def test_bias_matches_reference_formula(head, folders, small_target):
    _check_drafter_against_reference(DSparkDrafter.from_pretrained(folders[head], small_target), small_target)


def test_mutation_rnn_without_carried_state_is_caught(folders, small_target, monkeypatch):
    """DeepSpec's stateless single-step RNN bias (state reset every step) must fail the reference check."""
    real = dspark_mod.markov_step
    monkeypatch.setattr(
        dspark_mod, "markov_step", lambda head, kind, prev, hidden=None, state=None: real(head, kind, prev, hidden, None)
    )
    with pytest.raises(AssertionError):
        _check_drafter_against_reference(DSparkDrafter.from_pretrained(folders["rnn"], small_target), small_target)


def test_mutation_gate_dropped_is_caught(folders, small_target, monkeypatch):
    monkeypatch.setattr(
        dspark_mod, "markov_step", lambda head, kind, prev, hidden=None, state=None: (head.markov_w2(head.markov_w1(prev)), None)
    )
    with pytest.raises(AssertionError):
        _check_drafter_against_reference(DSparkDrafter.from_pretrained(folders["gated"], small_target), small_target)


@pytest.mark.parametrize("head", ["gated", "rnn"])
def test_tree_child_logprobs_follow_the_path(head, folders, small_target, monkeypatch):
    """Each tree node's children get the law of the chain drafted along that node's path."""
    drafter = DSparkDrafter.from_pretrained(folders[head], small_target, tree_budget=6)
    captured = {}
    real = drafter._tree_from

    def spy(child_logprobs, depth, budget, device):
        captured["f"] = child_logprobs
        return real(child_logprobs, depth, budget, device)

    monkeypatch.setattr(drafter, "_tree_from", spy)
    ctx = torch.tensor([1, 2, 3, 4, 5, 0])
    drafter.reset()
    proposal = drafter.propose(
        ctx, 6, sampling=SamplingConfig(), generator=None, target_hidden=_features(small_target, drafter, ctx)
    )
    assert proposal.tree is not None and proposal.tree.tokens.numel() == 6
    hidden = drafter.last_hidden[:6]
    base = drafter.model.logits(hidden, small_target.lm_head)
    for path in ([], [3], [3, 1], [0, 5, 2], [4, 4, 4, 4]):
        prevs = torch.tensor([0] + path)
        ref = torch.log_softmax(
            base[len(path)] + block_bias(drafter.model.markov_head, head, prevs, hidden[: len(path) + 1])[-1].float(), -1
        )
        torch.testing.assert_close(captured["f"](torch.tensor(path, dtype=torch.long)), ref, atol=1e-6, rtol=1e-6)
    # the RNN law at depth 2 depends on the token two steps back, the gated one does not
    a = captured["f"](torch.tensor([1, 2]))
    b = captured["f"](torch.tensor([3, 2]))
    assert (head == "rnn") == bool((a - b).abs().max() > 1e-6)


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
@pytest.mark.parametrize("head", ["gated", "rnn"])
def test_greedy_generate_equals_autoregressive(head, tree, folders, small_target):
    prompt = torch.tensor([[1, 2, 3, 4, 5, 0, 1]])
    ar = sd.generate(small_target, prompt, 40)
    drafter = DSparkDrafter.from_pretrained(folders[head], small_target, tree_budget=6 if tree else None)
    verifier = TreeVerifier(budget=6) if tree else sd.ChainVerifier()
    out = sd.generate(small_target, prompt, 40, drafter=drafter, verifier=verifier, num_draft_tokens=6)
    assert torch.equal(out.tokens, ar.tokens)
    assert sum(n * c for n, c in enumerate(out.stats.accepted_histogram)) > 0


def _law_p_value(drafter, target, draws: int = 300) -> float:
    """Chi-square of observed draft tokens against the summed reported laws, over every position."""
    ctx = torch.tensor([1, 2, 3, 4, 5, 0, 1])
    feats = _features(target, drafter, ctx)
    drafter.reset()
    sampling = SamplingConfig(temperature=1.3)
    observed = expected = None
    for s in range(draws):
        gen = torch.Generator().manual_seed(1000 + s)
        p = drafter.propose(ctx, 5, sampling=sampling, generator=gen, target_hidden=feats if s == 0 else feats[:0])
        hits = torch.nn.functional.one_hot(p.tokens, target.vocab_size).double()
        observed = hits if observed is None else observed + hits
        expected = p.draft_probs.double() if expected is None else expected + p.draft_probs.double()
    keep = expected > 5
    chi = float((((observed - expected) ** 2) / expected)[keep].sum())
    return float(stats.chi2.sf(chi, max(int(keep.sum()) - keep.shape[0], 1)))


@pytest.mark.parametrize("head", ["gated", "rnn"])
def test_sampled_law_is_reported_law(head, folders, small_target, monkeypatch):
    drafter = DSparkDrafter.from_pretrained(folders[head], small_target)
    assert _law_p_value(drafter, small_target) > 1e-3
    monkeypatch.setattr(dspark_mod, "sample", lambda probs, generator=None: probs.argmax(-1))
    assert _law_p_value(drafter, small_target, draws=150) < 1e-6


@pytest.mark.parametrize("head", ["gated", "rnn"])
def test_sampled_generate_matches_autoregressive_law(head, folders, small_target):
    """T = 1 through the chain verifier: speculative and plain decoding of the same seeds have one law."""
    from specdec.testing import two_sample_chi2

    prompt = torch.tensor([[1, 2, 3, 4, 5, 0, 1]])
    drafter = DSparkDrafter.from_pretrained(folders[head], small_target)
    runs = 150
    spec = torch.cat(
        [
            sd.generate(small_target, prompt, 3, drafter=drafter, temperature=1.0, seed=s, num_draft_tokens=4).tokens
            for s in range(runs)
        ]
    )
    ar = torch.cat([sd.generate(small_target, prompt, 3, temperature=1.0, seed=10_000 + s).tokens for s in range(runs)])
    assert two_sample_chi2(spec, ar, context=1).p_value > 1e-3


def test_bad_head_configs_name_the_field(tmp_path, small_target):
    with pytest.raises(ValueError, match="markov_head_type.*'lstm'"):
        read_dspark_config(fixture_config("Qwen3DSparkModel", small_target, markov_head_type="lstm"))
    raw = fixture_config("Qwen3DSparkModel", small_target)
    del raw["markov_head_type"]
    with pytest.raises(ValueError, match="markov_head_type: missing"):
        read_dspark_config(raw)
    # DeepSpec lowercases the field
    assert read_dspark_config(fixture_config("Qwen3DSparkModel", small_target, markov_head_type="RNN")).markov_head_type == "rnn"
    assert read_dspark_config(fixture_config("Qwen3DSparkModel", small_target, markov_rank=0)).markov_head_type is None
    with pytest.raises(ValueError, match="architectures"):
        read_dspark_config(fixture_config("DFlashDraftModel", small_target))
    from safetensors.torch import load_file, save_file

    folder = save_fixture(tmp_path / "g", "Qwen3DSparkModel", small_target, markov_head_type="gated")
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["markov_head.gate_proj.bias"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match="missing tensors.*gate_proj.bias"):
        DSparkDrafter.from_pretrained(folder, small_target)
    # a vanilla-built model cannot serve as an rnn drafter
    cfg = read_dspark_config(fixture_config("Qwen3DSparkModel", small_target, markov_head_type="rnn"))
    from specdec.drafters.block import BlockDraftModel

    with pytest.raises(ValueError, match="joint_proj"):
        DSparkDrafter(BlockDraftModel(cfg, 6), small_target)
    assert hasattr(build_dspark_model(cfg, 6).markov_head, "joint_proj")
    with pytest.raises(ValueError, match="head_type"):
        markov_step(build_dspark_model(cfg, 6).markov_head, "lstm", torch.tensor(1), torch.zeros(32))
    with pytest.raises(ValueError, match="hidden"):
        markov_step(build_dspark_model(cfg, 6).markov_head, "rnn", torch.tensor(1))


@pytest.mark.parametrize("head", ["gated", "rnn", "RNN"])
def test_load_drafter_dispatches_every_head(head, tmp_path, small_target):
    """``load_drafter`` reads all DSpark head types (case-insensitively, as DeepSpec does)."""
    from specdec.drafters import load_drafter

    folder = save_fixture(tmp_path / head, "Qwen3DSparkModel", small_target, seed=1, num_layers=2, markov_head_type=head.lower())
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "markov_head_type": head}))
    drafter = load_drafter(folder, small_target)
    assert isinstance(drafter, DSparkDrafter)
    assert drafter.cfg.markov_head_type == head.lower()
