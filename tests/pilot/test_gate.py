import math

import pytest
import torch

from specdec.pilot.gate import Gate, ratio_interval, target_pass_timer
from specdec.pilot.spec import BuiltSystem, SystemSpec, build
from specdec.testing.faults import LogitBiasFault

PROMPTS = [torch.tensor([1, 2, 3, 1, 2, 3, 1, 2]), torch.tensor([5, 6, 7, 5, 6, 7])]


@pytest.fixture(scope="module")
def stock():
    return build(SystemSpec().autoregressive()).target


def draft_length_timer(system, prompts, max_new_tokens, seed):
    """A made-up cost where each draft token saves 10% (AR costs 1.0)."""
    return 1.0 if system.drafter is None else 1.0 - 0.1 * system.spec.num_draft_tokens


def test_ratio_interval_matches_the_student_t_interval_on_the_log_scale():
    mean, (lo, hi) = ratio_interval([math.exp(0.1), math.exp(0.2), math.exp(0.3)])
    # mean of logs 0.2, sd 0.1, t(0.975, 2) = 4.302653: half-width 4.302653 * 0.1 / sqrt(3) = 0.248414
    assert mean == pytest.approx(math.exp(0.2))
    assert lo == pytest.approx(math.exp(0.2 - 0.248414), rel=1e-5) and hi == pytest.approx(math.exp(0.2 + 0.248414), rel=1e-5)
    with pytest.raises(ValueError, match="at least 2"):
        ratio_interval([1.2])


def test_gate_accepts_a_lossless_faster_candidate(stock):
    gate = Gate(stock, PROMPTS, 16, timer=draft_length_timer)
    verdict = gate.judge(SystemSpec(num_draft_tokens=4), SystemSpec().autoregressive(), stock_target=stock)
    assert verdict.accepted and verdict.forcing_passed and verdict.reasons == []
    assert verdict.speedup == pytest.approx(1 / 0.6) and len(verdict.ratios) == 3


def test_gate_rejects_a_lossless_candidate_without_a_significant_speedup(stock):
    # the untimed runs of current and candidate, then current, candidate per seed: ratios 1.25, 0.77, 1.05
    noisy = iter([9.0, 1.0, 1.0, 0.8, 1.0, 1.3, 1.0, 0.95])
    gate = Gate(stock, PROMPTS, 16, timer=lambda *a: next(noisy))
    verdict = gate.judge(SystemSpec(num_draft_tokens=4), SystemSpec().autoregressive(), stock_target=stock)
    assert verdict.ratios == pytest.approx([1.0 / 0.8, 1.0 / 1.3, 1.0 / 0.95])  # the untimed runs' 9.0 and 1.0 left out
    assert verdict.forcing_passed and not verdict.accepted
    assert verdict.ci95[0] < 1 < verdict.ci95[1] and "does not lie above 1" in verdict.reasons[0]


def test_gate_rejects_a_faster_lossy_candidate_on_token_forcing(stock):
    gate = Gate(stock, PROMPTS, 24, timer=lambda system, *a: 1.0 if system.spec.num_draft_tokens == 0 else 0.5)
    faulty_target = LogitBiasFault(stock, bias=4.0, every=3, after=0)
    spec = SystemSpec(drafter={"kind": "none"}, num_draft_tokens=1)
    faulty = BuiltSystem(
        spec=spec, target=faulty_target, drafter=None, verifier=build(spec, target=stock).verifier, kwargs={"num_draft_tokens": 1}
    )
    verdict = gate.judge(faulty, SystemSpec().autoregressive().with_changes(num_draft_tokens=0), stock_target=stock)
    assert verdict.speedup == pytest.approx(2.0) and verdict.ci95[0] > 1
    assert not verdict.forcing_passed and not verdict.accepted
    assert verdict.reasons[0].startswith("token forcing failed")


def test_gate_rejects_a_candidate_whose_forcing_check_is_incomplete(stock):
    """No rule fires on a stratum no token reaches, which proves nothing about it: the gate does not accept that."""
    gate = Gate(stock, PROMPTS, 16, timer=draft_length_timer, bucket_edges=(64,))  # 16 new tokens never reach 64
    verdict = gate.judge(SystemSpec(num_draft_tokens=4), SystemSpec().autoregressive(), stock_target=stock)
    assert not verdict.accepted and not verdict.forcing_passed
    assert verdict.reasons[0] == "token forcing incomplete: pos >= 64 not covered"


def test_target_pass_timer_counts_target_forwards(stock):
    ar = build(SystemSpec().autoregressive(), target=stock)
    assert target_pass_timer(ar, PROMPTS, 10, seed=0) == 2 * 10


def test_gate_checks_its_arguments(stock):
    with pytest.raises(ValueError, match="seeds"):
        Gate(stock, PROMPTS, 16, seeds=(0, 1))
    with pytest.raises(ValueError, match="sealed_prompts"):
        Gate(stock, [], 16)
    # refused here, not at the first judge after the calibration
    with pytest.raises(TypeError, match=r"sealed_prompts\[1\]: expected int64 token ids, got torch.float32"):
        Gate(stock, [PROMPTS[0], PROMPTS[0].float()], 16)
    with pytest.raises(ValueError, match=rf"sealed_prompts\[0\]: expected token ids in \[0, {stock.vocab_size}\), got ids in"):
        Gate(stock, [PROMPTS[0] + stock.vocab_size], 16)
    gate = Gate(stock, PROMPTS, 16)
    with pytest.raises(ValueError, match="max_seq_len"):
        gate.judge(SystemSpec(max_seq_len=16), SystemSpec().autoregressive(), stock_target=None)


def test_the_gate_runs_each_system_once_untimed_before_its_timed_runs(stock):
    calls = []

    def recording(system, prompts, max_new_tokens, seed):
        calls.append(("AR" if system.drafter is None else "spec", seed))
        return 1.0

    gate = Gate(stock, PROMPTS, 16, timer=recording)
    gate.judge(SystemSpec(num_draft_tokens=4), SystemSpec().autoregressive(), stock_target=stock)
    first_seed = gate.seeds[0]
    assert calls[:2] == [("AR", first_seed), ("spec", first_seed)]
    assert calls[2:] == [(name, seed) for seed in gate.seeds for name in ("AR", "spec")]


class TruncatingSystem(BuiltSystem):
    """Emits only the first ``keep`` of the tokens asked for: each is the stock's, so token forcing alone passes it."""

    keep = 12

    def generate(self, prompts, max_new_tokens, **overrides):
        out = super().generate(prompts, min(max_new_tokens, self.keep), **overrides)
        out.tokens = out.tokens[:, : self.keep]
        return out


def test_gate_refuses_a_system_that_emits_fewer_tokens_than_asked(stock):
    gate = Gate(stock, PROMPTS, 16, timer=lambda system, *a: 0.75 if isinstance(system, TruncatingSystem) else 1.0)
    ar = build(SystemSpec().autoregressive(), target=stock)
    short = TruncatingSystem(**ar.__dict__)
    # the outputs it does emit are the stock's own tokens
    assert gate.checker.check(gate._prompts, gate._outputs(short), null=gate._outputs(ar)).verdict == "PASS"
    with pytest.raises(ValueError, match=r"system: expected 16 tokens \(max_new_tokens\) for sealed prompt 0, got 12"):
        gate.judge(short, ar)


def test_gate_builds_two_specs_on_the_stock_target_only_when_they_describe_the_same_target(stock):
    gate = Gate(stock, PROMPTS, 16, timer=draft_length_timer)
    other_weights = SystemSpec(target={"kind": "tiny", "seed": 1}, weight_format="w12", num_draft_tokens=4)
    with pytest.raises(ValueError, match=r"stock_target: .* differ in target .*weight_format \('w12' vs 'bf16'\)"):
        gate.judge(other_weights, SystemSpec().autoregressive(), stock_target=stock)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_gate_refuses_a_timer_that_returns_no_time(stock, bad):
    gate = Gate(stock, PROMPTS, 16, timer=lambda system, *a: bad if system.drafter is not None else 1.0)
    with pytest.raises(ValueError, match=r"timer: expected seconds > 0 for the candidate system at seed 0, got"):
        gate.judge(SystemSpec(num_draft_tokens=4), SystemSpec().autoregressive(), stock_target=stock)


@pytest.mark.parametrize("level", [95, 0, 1.0, True])
def test_ratio_interval_refuses_a_level_outside_0_1(level):
    with pytest.raises(ValueError, match=r"level: expected a confidence level in \(0, 1\)"):
        ratio_interval([1.1, 1.2, 1.3], level=level)
