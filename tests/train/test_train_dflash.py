"""Drafter training at toy scale: the loss falls, acceptance rises, the checkpoint round-trips, output stays exact."""

from __future__ import annotations

import json

import pytest
import torch

import specdec as sd
from specdec.drafters import DFlashDrafter, load_drafter
from specdec.drafters.block import fixture_config, random_block_model
from specdec.testing import tiny_target
from specdec.train.dflash import (
    TrainingConfig,
    block_logits,
    default_target_layer_ids,
    drafter_config,
    init_drafter,
    make_training_data,
    plot_history,
    save,
    tokens_per_target_pass,
    train_drafter,
)
from specdec.verify.chain import ChainVerifier
from specdec.verify.sampling import SamplingConfig

VOCAB = 8  # a low-entropy target: its greedy continuations settle into short cycles a drafter can learn
CFG = TrainingConfig(steps=80, block_size=5, continuation_tokens=32, num_anchors=16, batch_size=4, seed=0)


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def prompts():
    return torch.randint(0, VOCAB, (16, 5), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def held_out():
    return torch.randint(0, VOCAB, (4, 5), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def data(target):
    prompts = torch.randint(0, VOCAB, (16, 5), generator=torch.Generator().manual_seed(0))
    return make_training_data(target, prompts, CFG, (0, 1))


@pytest.fixture(scope="module")
def trained(target, prompts, data):
    before = {k: v.clone() for k, v in target.state_dict().items()}
    grads = [p.requires_grad for p in target.parameters()]
    model, history = train_drafter(target, prompts, CFG, progress=False, data=data)
    after = target.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "training changed the target"
    assert [p.requires_grad for p in target.parameters()] == grads
    return model, history


def _mean(xs):
    return sum(xs) / len(xs)


def test_data_are_the_targets_own_continuations(target, prompts, data):
    ar = sd.generate(target, prompts[:1], CFG.continuation_tokens)
    assert torch.equal(data.tokens[0], torch.cat([prompts[0], ar.tokens[0]]))
    assert data.features[0].shape == (5 + CFG.continuation_tokens, 2 * target.config.hidden_size)
    target.reset()
    hidden = target(data.tokens[0][None], hidden_layers=(1, 2)).hidden
    target.reset()
    assert torch.equal(data.features[0], torch.cat([hidden[0][0], hidden[1][0]], -1))


def test_loss_falls_and_acceptance_rises(target, trained, held_out):
    model, history = trained
    assert len(history.loss) == CFG.steps and len(history.accuracy) == CFG.steps
    assert _mean(history.loss[-10:]) < 0.6 * _mean(history.loss[:10]), history.loss
    assert _mean(history.accuracy[-10:]) > _mean(history.accuracy[:10]) + 0.2
    assert len(history.position_accuracy) == CFG.block_size - 1
    untrained = init_drafter(target, CFG).eval()
    before = tokens_per_target_pass(target, untrained, held_out, 32)
    after = tokens_per_target_pass(target, model, held_out, 32)
    # measured 1.02 -> 1.54 on these seeds; a random drafter almost never gets a token accepted
    assert after > before + 0.25, (before, after)


def test_training_is_deterministic(target, prompts, data, trained):
    cfg = TrainingConfig(**{**CFG.__dict__, "steps": 5})
    _, h1 = train_drafter(target, prompts, cfg, progress=False, data=data)
    _, h2 = train_drafter(target, prompts, cfg, progress=False, data=data)
    assert h1.loss == h2.loss
    cfg_other = TrainingConfig(**{**cfg.__dict__, "seed": 1})
    assert train_drafter(target, prompts, cfg_other, progress=False, data=data)[1].loss != h1.loss


def test_speculative_equals_autoregressive(target, trained, held_out):
    drafter = DFlashDrafter(trained[0], target)
    ar = sd.generate(target, held_out, 40)
    spec = sd.generate(target, held_out, 40, drafter=drafter, verifier=ChainVerifier(), num_draft_tokens=drafter.max_draft_tokens)
    assert torch.equal(ar.tokens, spec.tokens)
    assert spec.stats.target_passes < ar.stats.target_passes


def _inference_logprobs(model, target, tokens, features, p):
    drafter = DFlashDrafter(model, target)
    taps = len(model.cfg.target_layer_ids)
    ctx = features[:p].reshape(p, taps, -1)
    proposal = drafter.propose(
        tokens[: p + 1], model.cfg.block_size - 1, sampling=SamplingConfig(), generator=None, target_hidden=ctx
    )
    return proposal.tree_logprobs


@pytest.mark.parametrize("p", [1, 7, 20, 35])
def test_training_forward_matches_inference(target, trained, data, p):
    model = trained[0]
    tokens, features = data.tokens[3], data.features[3]
    anchors = torch.tensor([35, p, 1, 20])  # several blocks in one call, in no particular order
    logits = block_logits(model, target, features, tokens, anchors)  # [A, B-1, V]
    row = int((anchors == p).nonzero()[0])
    ref = _inference_logprobs(model, target, tokens, features, p)
    torch.testing.assert_close(torch.log_softmax(logits[row], -1), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_training_forward_matches_inference_across_the_window(target, data, causal):
    """A windowed drafter: the training forward equals inference for blocks on both sides of the window
    (context + block from W - 2 to W + B + 2 rows), where the window decides what each row sees."""
    window = 6
    config = fixture_config(
        "DFlashDraftModel",
        target,
        num_layers=2,
        block_size=CFG.block_size,
        target_layer_ids=[0, 1],
        sliding_window=window,
        extra={"is_causal": causal},
    )
    model = random_block_model(config, target, seed=3)
    assert model.cfg.sliding_window == (window, window) and model.cfg.layer_causal == (causal, causal)
    tokens, features = data.tokens[3], data.features[3]
    anchors = torch.arange(window - 2 - CFG.block_size, window + 3).clamp(min=1).unique()
    logits = block_logits(model, target, features, tokens, anchors)  # [A, B-1, V]
    for row, p in enumerate(anchors.tolist()):
        ref = _inference_logprobs(model, target, tokens, features, p)
        torch.testing.assert_close(torch.log_softmax(logits[row], -1), ref, atol=1e-5, rtol=1e-5)


def test_blocks_never_see_their_own_or_later_features(target, trained, data):
    model = trained[0]
    tokens, features = data.tokens[2], data.features[2]
    p = 12
    ref = block_logits(model, target, features, tokens, torch.tensor([p]))
    garbage = features.clone()
    # the anchor's own row and everything after are unknown at inference: replacing them changes nothing
    garbage[p:] = 100.0 * torch.randn(garbage[p:].shape, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(block_logits(model, target, garbage, tokens, torch.tensor([p])), ref, atol=1e-6, rtol=1e-6)
    # mutation: the row just before the anchor IS context, so the same change there must show
    garbage[p - 1] = 100.0
    assert (block_logits(model, target, garbage, tokens, torch.tensor([p])) - ref).abs().max() > 1e-3


def test_saved_checkpoint_reloads_with_same_proposals(target, trained, data, tmp_path):
    model, history = trained
    folder = save(model, tmp_path / "drafter", config=CFG, history=history)
    raw = json.loads((folder / "config.json").read_text())
    assert raw["architectures"] == ["DFlashDraftModel"] and raw["dflash_config"]["block_size"] == CFG.block_size
    assert json.loads((folder / "training.json").read_text())["steps"] == CFG.steps
    tokens, features = data.tokens[5], data.features[5]
    for loaded in (DFlashDrafter.from_pretrained(folder, target), load_drafter(folder, target)):
        assert isinstance(loaded, DFlashDrafter)
        for p in (4, 17, 30):
            ref = _inference_logprobs(model, target, tokens, features, p)
            got = _inference_logprobs(loaded.model, target, tokens, features, p)
            assert torch.equal(ref, got)


def test_plot_history(trained, tmp_path):
    path = plot_history(trained[1], tmp_path / "loss.png")
    assert path.is_file() and path.stat().st_size > 1000
    with pytest.raises(ValueError, match="history"):
        plot_history(type(trained[1])(), tmp_path / "empty.png")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"block_size": 1}, "block_size"),
        ({"block_size": True}, "block_size"),
        ({"num_layers": 0}, "num_layers"),
        ({"steps": 0}, "steps"),
        ({"num_anchors": -3}, "num_anchors"),
        ({"lr": 0.0}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"loss_decay_gamma": -1.0}, "loss_decay_gamma"),
        ({"grad_clip": 0}, "grad_clip"),
        ({"data_temperature": -0.5}, "data_temperature"),
        ({"target_layer_ids": ()}, "target_layer_ids"),
        ({"target_layer_ids": [0, 1]}, "target_layer_ids"),
        ({"num_heads": 4, "num_kv_heads": 3}, "num_kv_heads"),
        ({"mask_token_id": -1}, "mask_token_id"),
        ({"head_dim": 3}, "head_dim: expected an even int"),
    ],
)
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainingConfig(**kwargs)


def test_config_that_does_not_fit_the_target_raises(target, prompts):
    with pytest.raises(ValueError, match="target_layer_ids"):
        drafter_config(target, TrainingConfig(target_layer_ids=(0, 5)))
    with pytest.raises(ValueError, match="mask_token_id"):
        drafter_config(target, TrainingConfig(mask_token_id=VOCAB))
    with pytest.raises(ValueError, match=r"prompts\[1\]"):
        train_drafter(target, [torch.tensor([1, 2]), torch.tensor([1, VOCAB])], TrainingConfig(steps=1), progress=False)
    with pytest.raises(TypeError, match="config"):
        train_drafter(target, prompts, {"steps": 1}, progress=False)
    from specdec.train.dspark import DSparkTrainingConfig

    with pytest.raises(TypeError, match=r"config: expected a DFlash TrainingConfig .* got a DSparkTrainingConfig weighing 4"):
        train_drafter(target, prompts, DSparkTrainingConfig(steps=1, block_size=4), progress=False)


def test_position_weights_and_default_layers():
    w = TrainingConfig(block_size=4, loss_decay_gamma=2.0).position_weights()
    torch.testing.assert_close(w, torch.exp(-torch.arange(3.0) / 2.0))
    assert torch.equal(TrainingConfig(block_size=4, loss_decay_gamma=None).position_weights(), torch.ones(3))
    assert default_target_layer_ids(36, 5) == (1, 9, 17, 25, 33)
    assert default_target_layer_ids(28, 1) == (14,)
    assert default_target_layer_ids(2, 3) == (0, 1)


# The batched paths used at real scale
def test_batched_block_logits_equal_per_sequence(target, trained, data):
    """A padded batch of sequences of different lengths gives each sequence's own logits."""
    model, _ = trained
    picks = [0, 3, 7]
    lengths = [data.tokens[j].numel() for j in picks]
    gen = torch.Generator().manual_seed(5)
    # make lengths differ on purpose: cut the sequences to awkward lengths
    cut = [lengths[0], lengths[1] - 7, lengths[2] - 13]
    toks = [data.tokens[j][:n] for j, n in zip(picks, cut)]
    feats = [data.features[j][:n] for j, n in zip(picks, cut)]
    anchors = torch.stack([torch.randint(0, n - 1, (6,), generator=gen) for n in cut])  # [S, A]
    from torch.nn.utils.rnn import pad_sequence

    batched = block_logits(model, target, pad_sequence(feats, batch_first=True), pad_sequence(toks, batch_first=True), anchors)
    for s in range(len(picks)):
        single = block_logits(model, target, feats[s], toks[s], anchors[s])
        torch.testing.assert_close(batched[s], single, rtol=1e-5, atol=1e-5)


def test_batched_block_logits_ignore_padding_content(target, trained, data):
    """Garbage in the padding after a sequence's end cannot change its logits (no block sees it)."""
    model, _ = trained
    toks, feats = data.tokens[1], data.features[1]
    L = toks.numel()
    anchors = torch.tensor([[0, L // 2, L - 2]])
    padded_t = torch.cat([toks, torch.full((9,), 3)])[None]
    padded_f = torch.cat([feats, torch.full((9, feats.shape[1]), 1e4)])[None]
    a = block_logits(model, target, padded_f, padded_t, anchors)
    b = block_logits(model, target, feats[None], toks[None], anchors)
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_time_budget_stops_training(target, prompts, data):
    cfg = TrainingConfig(**{**CFG.__dict__, "steps": 10_000, "max_seconds": 1.5})
    model, history = train_drafter(target, prompts, cfg, progress=False, data=data)
    assert 0 < len(history.loss) < 10_000
    assert history.seconds[-1] < 1.5 + 1.0
    # the learning rate decays with time towards the 10 % floor
    assert history.lr[-1] < 0.5 * cfg.lr


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), "1"])
def test_bad_time_budget_raises(value):
    with pytest.raises(ValueError, match="max_seconds"):
        TrainingConfig(max_seconds=value)


def test_hf_batched_data_equal_lean_target_continuations():
    """Greedy continuations and tap features from transformers' batched generate == the lean target's."""
    from specdec.testing import tiny_hf_model
    from specdec.train.dflash import make_training_data_hf

    hf = tiny_hf_model("llama", seed=3, vocab_size=VOCAB + 40)
    lean = sd.load_target(hf, dtype=torch.float32, device="cpu", max_seq_len=128, progress=False)
    cfg = TrainingConfig(continuation_tokens=12)
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, VOCAB + 40, (n,), generator=gen) for n in (5, 5, 9, 3, 9)]  # mixed lengths: left padding
    data = make_training_data_hf(hf, prompts, cfg, (0, 1), batch_size=2)
    ref = make_training_data(lean, prompts, cfg, (0, 1))
    assert len(data.tokens) == len(prompts)
    for j in range(len(prompts)):
        assert torch.equal(data.tokens[j], ref.tokens[j]), j
        assert data.prompt_lengths[j] == prompts[j].numel()
        torch.testing.assert_close(data.features[j], ref.features[j], rtol=1e-4, atol=1e-4)


def test_hf_batched_data_end_at_eos():
    from specdec.testing import tiny_hf_model
    from specdec.train.dflash import make_training_data_hf

    hf = tiny_hf_model("llama", seed=3, vocab_size=VOCAB + 40)
    cfg = TrainingConfig(continuation_tokens=16)
    prompts = [torch.tensor([1, 2, 3, 4]), torch.tensor([5, 6, 7])]
    free = make_training_data_hf(hf, prompts, cfg, (0,))
    cont = free.tokens[0][4:]
    eos = int(cont[3])  # a token the continuation emits: it must end there, EOS kept
    first = int((cont == eos).nonzero()[0])
    ended = make_training_data_hf(hf, prompts, cfg, (0,), eos_token_id=eos)
    assert torch.equal(ended.tokens[0], free.tokens[0][: 4 + first + 1])
    assert ended.features[0].shape[0] == ended.tokens[0].numel()


def test_hf_batched_data_bad_input():
    from specdec.testing import tiny_hf_model
    from specdec.train.dflash import make_training_data_hf

    hf = tiny_hf_model("llama", seed=3)
    with pytest.raises(ValueError, match="batch_size"):
        make_training_data_hf(hf, [torch.tensor([1, 2])], TrainingConfig(), (0,), batch_size=0)
    with pytest.raises(ValueError, match="layer_ids"):
        make_training_data_hf(hf, [torch.tensor([1, 2])], TrainingConfig(), (0, 5))
    with pytest.raises(ValueError, match="prompts"):
        make_training_data_hf(hf, [torch.tensor([1, 500])], TrainingConfig(), (0,))


def test_bad_training_data_names_the_field(target, prompts, data):
    from dataclasses import replace

    wide = replace(data, features=[torch.cat([data.features[0], data.features[0][:, :1]], dim=1)] + list(data.features[1:]))
    with pytest.raises(ValueError, match=r"data: features\[0\] expected shape"):
        train_drafter(target, prompts, CFG, progress=False, data=wide)
    no_gen = replace(data, prompt_lengths=[t.numel() for t in data.tokens])
    with pytest.raises(ValueError, match="at least one generated token"):
        train_drafter(target, prompts, CFG, progress=False, data=no_gen)
    cases = [
        (replace(data, tokens=[], prompt_lengths=[], features=[]), "data: expected at least one sequence, got none"),
        (replace(data, prompt_lengths=list(data.prompt_lengths[:-1])), r"data.prompt_lengths: expected one entry a sequence"),
        (replace(data, features=list(data.features[:-1])), r"data.features: expected one entry a sequence"),
        (
            replace(data, tokens=[data.tokens[0].float()] + list(data.tokens[1:])),
            r"data.tokens\[0\]: expected a 1-D int64 tensor",
        ),
        (
            replace(data, tokens=[data.tokens[0] + VOCAB] + list(data.tokens[1:])),
            r"data.tokens\[0\]: expected token ids in \[0, ",
        ),
    ]
    for bad, message in cases:
        with pytest.raises(ValueError, match=message):
            train_drafter(target, prompts, CFG, progress=False, data=bad)


def test_hf_batched_sampled_data_are_seeded_and_leave_the_global_rng_alone():
    from specdec.testing import tiny_hf_model
    from specdec.train.dflash import make_training_data_hf

    hf = tiny_hf_model("llama", seed=3, vocab_size=VOCAB + 40)
    cfg = TrainingConfig(continuation_tokens=10, data_temperature=1.0, seed=7)
    prompts = [torch.tensor([1, 2, 3, 4]), torch.tensor([5, 6, 7])]
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = make_training_data_hf(hf, prompts, cfg, (0,))
    assert torch.equal(torch.get_rng_state(), before), "the caller's global RNG state changed"
    torch.manual_seed(999)  # a different global state must not change seeded data
    b = make_training_data_hf(hf, prompts, cfg, (0,))
    assert all(torch.equal(x, y) for x, y in zip(a.tokens, b.tokens))
    other = make_training_data_hf(hf, prompts, TrainingConfig(continuation_tokens=10, data_temperature=1.0, seed=8), (0,))
    assert any(not torch.equal(x, y) for x, y in zip(a.tokens, other.tokens))
