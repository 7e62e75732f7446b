"""DSpark training at toy scale: losses fall, acceptance rises, output stays exact, STS lowers ECE, checkpoints round-trip."""

from __future__ import annotations

import json

import pytest
import torch

import specdec as sd
from specdec.drafters import load_drafter
from specdec.drafters.block import DSparkDrafter, fixture_config, random_block_model
from specdec.drafters.block.calibration import calibrated_survival, expected_calibration_error, sequential_temperature_scaling
from specdec.testing import tiny_target
from specdec.train.dspark import (
    DSparkTrainingConfig,
    DSparkTrainingData,
    block_hidden,
    confidence_data,
    dspark_config,
    dspark_losses,
    init_dspark,
    make_dspark_data,
    save,
    tokens_per_target_pass,
    train_dspark,
)
from specdec.verify.chain import ChainVerifier
from specdec.verify.sampling import SamplingConfig

VOCAB = 8  # a low-entropy target: its greedy continuations settle into short cycles a drafter can learn
CFG = DSparkTrainingConfig(steps=60, block_size=5, continuation_tokens=24, num_anchors=16, batch_size=4, seed=0, markov_rank=8)


def _split(data: DSparkTrainingData, sl: slice) -> DSparkTrainingData:
    return DSparkTrainingData(
        tokens=data.tokens[sl],
        features=data.features[sl],
        prompt_lengths=data.prompt_lengths[sl],
        last_hidden=data.last_hidden[sl],
    )


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def layer_ids(target):
    return tuple(dspark_config(target, CFG)["target_layer_ids"])


@pytest.fixture(scope="module")
def data(target, layer_ids):
    prompts = torch.randint(0, VOCAB, (16, 5), generator=torch.Generator().manual_seed(0))
    return make_dspark_data(target, prompts, CFG, layer_ids)


@pytest.fixture(scope="module")
def held_out(target, layer_ids):
    prompts = torch.randint(0, VOCAB, (32, 5), generator=torch.Generator().manual_seed(1))
    return prompts, make_dspark_data(target, prompts, CFG, layer_ids)


@pytest.fixture(scope="module")
def trained(target, data):
    before = {k: v.clone() for k, v in target.state_dict().items()}
    model, history = train_dspark(target, None, CFG, progress=False, data=data)
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items()), "training changed the target"
    return model, history


def _mean(xs):
    return sum(xs) / len(xs)


def test_data_last_hidden_gives_the_targets_logits(target, data):
    target.reset()
    logits = target(data.tokens[0][None]).logits[0]
    target.reset()
    torch.testing.assert_close(target.lm_head(data.last_hidden[0]).float(), logits, atol=1e-5, rtol=1e-5)
    assert data.features[0].shape == (5 + CFG.continuation_tokens, 2 * target.config.hidden_size)


def test_losses_fall_and_acceptance_rises(target, trained, held_out):
    model, history = trained
    assert len(history.loss) == CFG.steps
    assert len(history.seconds) == CFG.steps and history.seconds == sorted(history.seconds)  # the clock at every step
    assert _mean(history.loss[-10:]) < 0.7 * _mean(history.loss[:10]), history.loss
    for term in ("ce", "tv", "confidence"):
        assert _mean(history.terms[term][-10:]) < _mean(history.terms[term][:10]), (term, history.terms[term])
    assert _mean(history.acceptance[-10:]) > _mean(history.acceptance[:10]) + 0.1
    assert len(history.position_accuracy) == CFG.block_size
    prompts = held_out[0][:4]
    before = tokens_per_target_pass(target, init_dspark(target, CFG).eval(), prompts, 24)
    after = tokens_per_target_pass(target, model, prompts, 24)
    # measured 1.14 -> 3.28 tokens per pass with 80 steps on these seeds
    assert after > before + 0.5, (before, after)


def test_speculative_equals_autoregressive(target, trained, held_out):
    drafter = DSparkDrafter(trained[0], target)
    prompts = held_out[0][:4]
    ar = sd.generate(target, prompts, 30)
    spec = sd.generate(target, prompts, 30, drafter=drafter, verifier=ChainVerifier(), num_draft_tokens=drafter.max_draft_tokens)
    assert torch.equal(ar.tokens, spec.tokens)
    assert spec.stats.target_passes < ar.stats.target_passes


def _propose(model, target, tokens, features, p):
    drafter = DSparkDrafter(model, target)
    taps = len(model.cfg.target_layer_ids)
    ctx = features[:p].reshape(p, taps, -1)
    proposal = drafter.propose(
        tokens[: p + 1], model.cfg.block_size, sampling=SamplingConfig(), generator=None, target_hidden=ctx
    )
    return proposal.tokens, drafter.last_confidence_logits, drafter.last_hidden


def test_training_forward_and_calibration_drafts_match_inference(target, trained, data):
    model = trained[0]
    seq = 3
    tokens, features = data.tokens[seq], data.features[seq]
    anchors = torch.tensor([20, 4, 11, 27])
    hidden = block_hidden(model, target, features, tokens, anchors)
    logits, _, _, drafted = confidence_data(model, target, _split(data, slice(seq, seq + 1)))
    all_anchors = torch.arange(data.prompt_lengths[seq] - 1, tokens.numel() - 1)
    for i, p in enumerate(anchors.tolist()):
        ref_tokens, ref_conf, ref_hidden = _propose(model, target, tokens, features, p)
        torch.testing.assert_close(hidden[i], ref_hidden, atol=1e-5, rtol=1e-5)
        row = int((all_anchors == p).nonzero()[0])
        assert torch.equal(drafted[row], ref_tokens)
        torch.testing.assert_close(logits[row], ref_conf, atol=1e-5, rtol=1e-5)


def test_training_forward_matches_inference_across_the_window(target, data, layer_ids):
    """A DSpark drafter with sliding-window layers: the training forward equals inference for blocks on
    both sides of the window (context + block from W - 2 to W + B + 2 rows)."""
    window = 6
    config = fixture_config(
        "Qwen3DSparkModel",
        target,
        num_layers=2,
        block_size=CFG.block_size,
        target_layer_ids=list(layer_ids),
        extra={"layer_types": ["sliding_attention"] * 2, "sliding_window": window},
    )
    model = random_block_model(config, target, seed=3)
    assert model.cfg.sliding_window == (window, window)
    tokens, features = data.tokens[3], data.features[3]
    anchors = torch.arange(window - 2 - CFG.block_size, window + 3).clamp(min=1).unique()
    hidden = block_hidden(model, target, features, tokens, anchors)  # [A, B, H]
    for i, p in enumerate(anchors.tolist()):
        _, _, ref_hidden = _propose(model, target, tokens, features, p)
        torch.testing.assert_close(hidden[i], ref_hidden, atol=1e-5, rtol=1e-5)


def test_calibration_labels_are_greedy_survival(target, trained, data):
    model = trained[0]
    small = _split(data, slice(0, 2))
    logits, labels, mask, drafted = confidence_data(model, target, small)
    # recompute by hand for the first sequence: survival = drafts agree with the target's own greedy tokens
    tokens = small.tokens[0]
    anchors = torch.arange(small.prompt_lengths[0] - 1, tokens.numel() - 1)
    for row, p in enumerate(anchors.tolist()):
        want, alive = [], 1.0
        for k in range(CFG.block_size):
            q = p + 1 + k
            if q >= tokens.numel():
                assert not bool(mask[row, k])
                continue
            alive = alive * float(int(drafted[row, k]) == int(tokens[q]))
            want.append(alive)
            assert bool(mask[row, k])
        assert labels[row, : len(want)].tolist() == want


def test_sts_after_training_lowers_ece(target, trained, held_out):
    model = trained[0]
    data = held_out[1]
    # ~300 blocks each: with fewer, the per-position grid search overfits the fitting half
    fit, check = _split(data, slice(0, 16)), _split(data, slice(16, 32))
    logits, labels, mask, _ = confidence_data(model, target, fit)
    temps = sequential_temperature_scaling(logits, labels, mask=mask)
    l2, y2, m2, _ = confidence_data(model, target, check)
    lu, yu, mu, _ = confidence_data(init_dspark(target, CFG).eval(), target, check)
    raw = expected_calibration_error(calibrated_survival(l2), y2, mask=m2)
    calibrated = expected_calibration_error(calibrated_survival(l2, temps), y2, mask=m2)
    untrained = expected_calibration_error(calibrated_survival(lu), yu, mask=mu)
    # on the half of the held-out prompts STS never saw; measured 0.118 (untrained), 0.134 (trained), 0.086 (STS)
    assert calibrated < raw and calibrated < untrained, (untrained, raw, calibrated)
    # the drafter applies the temperatures to last_confidence
    drafter = DSparkDrafter(model, target, confidence_temperatures=temps)
    tokens, features = data.tokens[0], data.features[0]
    drafter.propose(
        tokens[:11], CFG.block_size, sampling=SamplingConfig(), generator=None, target_hidden=features[:10].reshape(10, 2, -1)
    )
    torch.testing.assert_close(drafter.last_confidence, torch.sigmoid(drafter.last_confidence_logits / temps))


def test_checkpoint_round_trip(target, trained, data, tmp_path):
    model, history = trained
    temps = torch.linspace(0.5, 2.0, CFG.block_size)
    folder = save(model, tmp_path / "dspark", target=target, config=CFG, history=history, temperatures=temps)
    raw = json.loads((folder / "config.json").read_text())
    assert (
        raw["architectures"] == ["Qwen3DSparkModel"]
        and raw["markov_head_type"] == "vanilla"
        and raw["block_size"] == CFG.block_size
    )
    assert json.loads((folder / "training.json").read_text())["steps"] == CFG.steps
    tokens, features = data.tokens[5], data.features[5]
    for loaded in (DSparkDrafter.from_pretrained(folder, target), load_drafter(folder, target)):
        assert isinstance(loaded, DSparkDrafter) and torch.equal(loaded.confidence_temperatures, temps)
        for p in (4, 17):
            ref = _propose(model, target, tokens, features, p)
            got = _propose(loaded.model, target, tokens, features, p)
            assert torch.equal(ref[0], got[0]) and torch.equal(ref[1], got[1])


@pytest.mark.parametrize("head", ["gated", "rnn"])
def test_head_variants_train_and_reload(head, target, data, tmp_path):
    cfg = DSparkTrainingConfig(**{**CFG.__dict__, "markov_head_type": head, "steps": 15})
    model, history = train_dspark(target, None, cfg, progress=False, data=data)
    assert _mean(history.loss[-3:]) < _mean(history.loss[:3])
    assert hasattr(model.markov_head, "gate_proj" if head == "gated" else "joint_proj")
    folder = save(model, tmp_path / head)
    loaded = DSparkDrafter.from_pretrained(folder, target)
    tokens, features = data.tokens[2], data.features[2]
    ref = _propose(model, target, tokens, features, 9)
    got = _propose(loaded.model, target, tokens, features, 9)
    assert torch.equal(ref[0], got[0])
    prompt = data.tokens[0][:5][None]
    assert torch.equal(
        sd.generate(target, prompt, 20, drafter=loaded, num_draft_tokens=5).tokens, sd.generate(target, prompt, 20).tokens
    )


def test_losses_by_hand(target, trained, data):
    """The loss terms against a direct per-row computation (teacher forcing, target law from last_hidden)."""
    model = trained[0]
    tokens, features, last = data.tokens[1], data.features[1], data.last_hidden[1]
    anchors = torch.tensor([6, tokens.numel() - 3])  # the second block runs past the end
    w = CFG.position_weights()
    got = dspark_losses(model, target, features, last, tokens, anchors, w)
    ce = tv = conf = weight = 0.0
    for p in anchors.tolist():
        _, conf_logits, hidden = _propose(model, target, tokens, features, p)
        prev = int(tokens[p])
        drafter = DSparkDrafter(model, target)
        for k in range(CFG.block_size):
            q = p + 1 + k
            if q >= tokens.numel():
                break
            bias, _ = drafter.sequential_bias(torch.tensor(prev), hidden[k])
            logits = model.logits(hidden[k], target.lm_head) + bias
            p_d, p_t = torch.softmax(logits, -1), torch.softmax(target.lm_head(last[q - 1]).float(), -1)
            l1 = float((p_d - p_t).abs().sum())
            c = float(drafter.confidence_logits(hidden[k : k + 1], torch.tensor([prev]))[0])
            acc = min(max(1 - l1 / 2, 0.0), 1.0)
            ce += float(w[k]) * float(-torch.log_softmax(logits, -1)[tokens[q]])
            tv += float(w[k]) * l1
            conf += float(w[k]) * float(torch.nn.functional.binary_cross_entropy_with_logits(torch.tensor(c), torch.tensor(acc)))
            weight += float(w[k])
            prev = int(tokens[q])
    for name, want in (("ce", ce), ("tv", tv), ("confidence", conf), ("weight", weight)):
        assert abs(float(got[name]) - want) < 1e-4 * max(1.0, abs(want)), (name, float(got[name]), want)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"markov_head_type": "lstm"}, "markov_head_type"),
        ({"markov_rank": -1}, "markov_rank"),
        ({"markov_rank": 0}, "confidence_head_with_markov"),
        ({"tv_weight": -0.1}, "tv_weight"),
        ({"ce_weight": 0.0, "tv_weight": 0.0}, "tv_weight"),
        ({"confidence_head": 1}, "confidence_head"),
        ({"block_size": 1}, "block_size"),
    ],
)
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DSparkTrainingConfig(**kwargs)


def test_bad_inputs(target, data):
    from specdec.train.dflash import TrainingConfig, make_training_data

    with pytest.raises(TypeError, match="config"):
        train_dspark(target, None, TrainingConfig(steps=1), progress=False, data=data)
    plain = make_training_data(target, torch.tensor([[1, 2, 3]]), TrainingConfig(continuation_tokens=4), (0, 1))
    with pytest.raises(TypeError, match="data"):
        train_dspark(target, None, DSparkTrainingConfig(steps=1), progress=False, data=plain)
    with pytest.raises(ValueError, match="mask_token_id"):
        dspark_config(target, DSparkTrainingConfig(mask_token_id=VOCAB))
    no_conf = init_dspark(target, DSparkTrainingConfig(confidence_head=False, steps=1))
    with pytest.raises(ValueError, match="confidence head"):
        confidence_data(no_conf, target, data)
    with_conf = init_dspark(target, DSparkTrainingConfig(steps=1))
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match=f"anchors_per_sequence: expected None \\(every anchor\\) or an int >= 1, got {bad}"):
            confidence_data(with_conf, target, data, anchors_per_sequence=bad)
    with pytest.raises(ValueError, match="max_seconds: 1e-09 s ended training before its first step"):
        train_dspark(target, None, DSparkTrainingConfig(steps=3, max_seconds=1e-9), progress=False, data=data)
    with pytest.raises(TypeError, match="model"):
        save(torch.nn.Linear(2, 2), "/tmp/never")


def test_calibration_labels_with_sampled_data_mask_unknown_contexts(target, trained, layer_ids):
    """With sampled continuations the data can leave the target's greedy path: those positions are masked."""
    model = trained[0]
    cfg = DSparkTrainingConfig(**{**CFG.__dict__, "data_temperature": 1.0})
    prompts = torch.randint(0, VOCAB, (3, 5), generator=torch.Generator().manual_seed(7))
    data = make_dspark_data(target, prompts, cfg, layer_ids)
    logits, labels, mask, drafted = confidence_data(model, target, data)
    row = 0
    for j, tokens in enumerate(data.tokens):
        target.reset()
        greedy = target(tokens[None]).logits[0].argmax(-1)  # greedy[i]: the target's choice for token i + 1
        target.reset()
        for p in range(data.prompt_lengths[j] - 1, tokens.numel() - 1):
            alive, on_data = 1, True
            for k in range(CFG.block_size):
                q = p + 1 + k
                known = q < tokens.numel() and (alive == 0 or on_data)
                assert bool(mask[row, k]) == known, (j, p, k)
                if known:
                    alive = alive * int(int(drafted[row, k]) == int(greedy[q - 1]))
                    assert float(labels[row, k]) == alive
                    on_data = on_data and int(drafted[row, k]) == int(tokens[q])
            row += 1
    assert row == labels.shape[0] and not bool(mask.all())


def test_bad_training_data_names_the_field(target, data):
    """Features of the wrong width, a missing last_hidden row, or no generated token: errors before any step."""
    from dataclasses import replace

    cfg = DSparkTrainingConfig(steps=1)
    wide = replace(data, features=[torch.cat([data.features[0], data.features[0][:, :1]], dim=1)] + list(data.features[1:]))
    with pytest.raises(ValueError, match=r"data: features\[0\] expected shape"):
        train_dspark(target, None, cfg, progress=False, data=wide)
    short = replace(data, last_hidden=list(data.last_hidden[:-1]))
    with pytest.raises(ValueError, match=r"data: last_hidden\[\d+\] expected shape"):
        train_dspark(target, None, cfg, progress=False, data=short)
    no_gen = replace(data, prompt_lengths=[t.numel() for t in data.tokens])
    with pytest.raises(ValueError, match="at least one generated token"):
        train_dspark(target, None, cfg, progress=False, data=no_gen)
