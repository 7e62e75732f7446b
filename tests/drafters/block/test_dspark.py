"""DSpark's prefix scheduler (Algorithm 1, Appendix A by exact enumeration) and the DSpark drafter."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import specdec as sd
from specdec.drafters.block import DSparkDrafter, PrefixScheduler, save_fixture
from specdec.testing import tiny_target
from specdec.testing.laws import autoregressive_law, chain_round_law, speculative_law, total_variation
from specdec.verify.sampling import SamplingConfig

# the verifier's law transform runs in float32: exact laws agree to ~1e-7, a bias shows at 1e-1
SAMPLING = SamplingConfig(temperature=1.0)
DRAFT = torch.tensor([0.5, 0.5], dtype=torch.float64)


def target_logits(ctx: tuple[int, ...]) -> torch.Tensor:
    # Appendix A's target (0.7, 0.3) after a 0; another law after a 1 so that later tokens matter too
    law = [0.7, 0.3] if ctx[-1] == 0 else [0.4, 0.6]
    return torch.tensor(law, dtype=torch.float64).log()


def scheduled_round(scheduler: PrefixScheduler, confidence) -> callable:
    """Exact law of one round: draw two drafts from (0.5, 0.5), let the scheduler cut the chain, verify.

    ``confidence(x_1) -> [c_1, c_2]``: c_2 reads the realised first draft, as DSpark's confidence head
    does through ``W1[x_1]``.
    """

    def round_law(ctx: tuple[int, ...]) -> dict:
        law: dict = {}
        for x1 in (0, 1):
            for x2 in (0, 1):
                mass = float(DRAFT[x1] * DRAFT[x2])
                sched = copy.deepcopy(scheduler)
                keep = int(sched.schedule(torch.tensor([confidence(x1)], dtype=torch.float64))[0])
                drafts = (x1, x2)[:keep]
                rows = torch.stack([target_logits(ctx + drafts[:i]) for i in range(keep + 1)])
                probs = DRAFT.expand(keep, 2).clone()
                for out, p in chain_round_law(rows, torch.tensor(drafts, dtype=torch.long), probs, sampling=SAMPLING).items():
                    law[out] = law.get(out, 0.0) + mass * p
        return law

    return round_law


def first_token(law: dict) -> list[float]:
    return [sum(p for seq, p in law.items() if seq[0] == v) for v in (0, 1)]


# Appendix A: c_1 = 0.5; c_2 = 1 after x_1 = 0, 0 after x_1 = 1; verifying one draft does not pay
APPENDIX_A_SPS = [1.0, 0.6, 0.6]


def appendix_a_confidence(x1: int) -> list[float]:
    return [0.5, 1.0 if x1 == 0 else 0.0]


def test_appendix_a_early_stop_is_lossless():
    spec = speculative_law(scheduled_round(PrefixScheduler(APPENDIX_A_SPS), appendix_a_confidence), (0,), 3)
    ar = autoregressive_law(target_logits, (0,), 3, sampling=SAMPLING)
    assert total_variation(spec, ar) < 1e-6


def test_appendix_a_global_search_is_biased():
    """Without the early stop, x_1 = 0 makes the search look past position 1 and verify it; x_1 = 1 does not."""
    spec = speculative_law(scheduled_round(PrefixScheduler(APPENDIX_A_SPS, early_stop=False), appendix_a_confidence), (0,), 1)
    assert [round(p, 6) for p in first_token(spec)] == [0.85, 0.15]
    ar = autoregressive_law(target_logits, (0,), 1, sampling=SAMPLING)
    assert [round(p, 6) for p in first_token(ar)] == [0.7, 0.3]


def test_early_stop_with_admissions_is_lossless():
    """The early stop admits x_2 or not depending on x_1 (already admitted): still the target's law."""
    sps = [1.0, 0.9, 0.85]

    def confidence(x1):
        return [0.9, 0.9 if x1 == 0 else 0.1]

    rnd = scheduled_round(PrefixScheduler(sps), confidence)
    lengths = {x1: int(PrefixScheduler(sps).schedule(torch.tensor([confidence(x1)]))[0]) for x1 in (0, 1)}
    assert lengths == {0: 2, 1: 1}
    spec = speculative_law(rnd, (0,), 3)
    assert total_variation(spec, autoregressive_law(target_logits, (0,), 3, sampling=SAMPLING)) < 1e-6


def test_lagged_mode_is_lossless_without_early_stop():
    sched = PrefixScheduler(APPENDIX_A_SPS, early_stop=False, lag=2)
    # two earlier calls: the capacity of the third comes from the first (global optimum: 2 tokens)
    sched.schedule(torch.tensor([appendix_a_confidence(0)]))
    sched.schedule(torch.tensor([appendix_a_confidence(1)]))
    spec = speculative_law(scheduled_round(sched, appendix_a_confidence), (0,), 3)
    assert total_variation(spec, autoregressive_law(target_logits, (0,), 3, sampling=SAMPLING)) < 1e-6
    probe = copy.deepcopy(sched)
    assert int(probe.schedule(torch.tensor([appendix_a_confidence(0)]))[0]) == 2


def test_scheduler_algorithm_1_by_hand():
    sched = PrefixScheduler([1.0, 0.95, 0.9, 0.5, 0.5, 0.5])
    # two requests: batch starts at 2 tokens; candidates .9 (r0), .8 (r1), .81 (r0, j=2) ...
    lengths = sched.schedule(torch.tensor([[0.9, 0.9, 0.9], [0.8, 0.1, 0.1]]))
    # tau*SPS: 2*.95=1.9 -> +.9: 2.9*.9=2.61 -> +.81: 3.71*.5 < 2.61 stop
    assert lengths.tolist() == [1, 0]
    assert PrefixScheduler([1.0, 2.0, 3.0]).schedule(torch.tensor([[0.0, 1.0]])).tolist() == [0]
    assert PrefixScheduler([1.0] + [10.0] * 8).schedule(torch.tensor([[1.0] * 3])).tolist() == [3]
    with pytest.raises(ValueError, match="steps_per_second"):
        PrefixScheduler([])
    with pytest.raises(ValueError, match="lag"):
        PrefixScheduler([1.0], lag=1)
    with pytest.raises(ValueError, match="confidences"):
        PrefixScheduler([1.0]).schedule(torch.ones(1, 2, 3))


def test_mutation_scheduler_without_early_stop_is_caught():
    """The enumeration catches a scheduler that silently drops the early stop."""
    biased = PrefixScheduler(APPENDIX_A_SPS)
    biased.early_stop = False
    spec = speculative_law(scheduled_round(biased, appendix_a_confidence), (0,), 3)
    assert total_variation(spec, autoregressive_law(target_logits, (0,), 3, sampling=SAMPLING)) > 0.1


@pytest.fixture(scope="module")
def dspark(tmp_path_factory):
    target = tiny_target(seed=0, vocab_size=6)
    folder = save_fixture(tmp_path_factory.mktemp("dspark"), "Qwen3DSparkModel", target, seed=2, num_layers=2)
    return target, folder


def test_dspark_confidence_and_block(dspark):
    target, folder = dspark
    drafter = DSparkDrafter.from_pretrained(folder, target)
    assert drafter.max_draft_tokens == 7  # all gamma rows predict (anchor row included)
    ctx = torch.tensor([1, 2, 3, 4])
    out = target(ctx[None, :-1], hidden_layers=drafter.target_layer_ids)
    target.reset()
    feats = torch.stack([h[0] for h in out.hidden], dim=1)
    drafter.reset()
    p = drafter.propose(ctx, 9, sampling=SamplingConfig(), generator=None, target_hidden=feats)
    assert p.tokens.shape == (7,)
    conf = drafter.last_confidence
    assert conf.shape == (7,) and bool(((conf > 0) & (conf < 1)).all())
    # the first token's law is U_1 + bias(anchor): recompute it by hand
    base = drafter.model.logits(drafter.last_hidden[:1], target.lm_head)[0]
    bias = drafter.model.markov_head.markov_w2(drafter.model.markov_head.markov_w1(ctx[-1]))
    assert int(p.tokens[0]) == int((base + bias).argmax())
    # a round that drafts nothing leaves no confidences of an earlier round behind
    none = drafter.propose(ctx, 0, sampling=SamplingConfig(), generator=None, target_hidden=feats)
    assert none.num_tokens == 0 and drafter.last_confidence is None and drafter.last_confidence_logits is None


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_dspark_with_scheduler_in_generate(dspark, temperature):
    target, folder = dspark
    sched = PrefixScheduler([1.0, 0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93])
    drafter = DSparkDrafter.from_pretrained(folder, target, scheduler=sched)
    prompt = torch.tensor([[1, 2, 3, 4, 5, 0]])
    ar = sd.generate(target, prompt, 30, temperature=temperature, seed=3)
    out = sd.generate(target, prompt, 30, drafter=drafter, temperature=temperature, seed=3, num_draft_tokens=7)
    if temperature == 0:
        assert torch.equal(out.tokens, ar.tokens)
    assert out.tokens.shape == (1, 30)
    assert math.isfinite(out.stats.mean_accepted)


def test_calibrated_confidence_reaches_the_scheduler(dspark, tmp_path):
    """Temperatures from confidence_calibration.json divide the logits; the scheduler reads the result."""
    import shutil

    from specdec.drafters.block.calibration import save_calibration

    target, folder = dspark
    calibrated = tmp_path / "calibrated"
    shutil.copytree(folder, calibrated)
    temps = torch.tensor([0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    save_calibration(calibrated, temps)
    seen = []
    sched = PrefixScheduler([1.0] * 8)
    real = sched.schedule
    sched.schedule = lambda conf: seen.append(conf.clone()) or real(conf)
    drafter = DSparkDrafter.from_pretrained(calibrated, target, scheduler=sched)
    assert torch.equal(drafter.confidence_temperatures, temps)
    ctx = torch.tensor([1, 2, 3, 4])
    out = target(ctx[None, :-1], hidden_layers=drafter.target_layer_ids)
    target.reset()
    feats = torch.stack([h[0] for h in out.hidden], dim=1)
    drafter.reset()
    drafter.propose(ctx, 3, sampling=SamplingConfig(), generator=None, target_hidden=feats)
    want = torch.sigmoid(drafter.last_confidence_logits / temps[:3])
    torch.testing.assert_close(drafter.last_confidence, want)
    torch.testing.assert_close(seen[-1][0], want)
    drafter.calibrate(None)
    assert drafter.confidence_temperatures is None
    for bad in ([1.0, 2.0], [1.0] * 6 + [0.0], [1.0] * 6 + [float("nan")]):
        with pytest.raises(ValueError, match="confidence_temperatures"):
            drafter.calibrate(bad)
