"""bench_ssd on the CPU: the oracle-step base's acceptance, and the smoke run of the 8B-shape mode end to end."""

from __future__ import annotations

import json
import sys

import torch

import specdec as sd
from benchmarks.drafters import bench_ssd
from specdec.contracts import SamplingConfig
from specdec.drafters.ssd import SpeculativeSpeculationDrafter
from specdec.testing import tiny_target


def _reference(target, prompt, n):
    return torch.cat([prompt[0], sd.generate(target, prompt, n).tokens[0]])


def test_oracle_steps_accept_everything_at_rate_one_and_nothing_at_rate_zero():
    target, prompt = tiny_target(seed=0), torch.tensor([[1, 2, 3, 4]])
    reference = _reference(target, prompt, 40)
    for alpha, accepted in ((1.0, 4), (0.0, 0)):
        steps = bench_ssd.OracleSteps(reference, vocab_size=target.vocab_size, alpha=alpha, runner_up=0.5, block=4)
        out = sd.generate(target, prompt, 21, drafter=steps, num_draft_tokens=4)
        assert torch.equal(out.tokens, reference[None, 4:25])
        histogram = out.stats.accepted_histogram
        assert histogram[accepted] == out.stats.rounds == sum(histogram), (alpha, histogram)


def test_ssd_over_oracle_steps_proposes_what_the_plain_base_proposes():
    target, prompt = tiny_target(seed=0), torch.tensor([[1, 2, 3, 4]])
    reference = _reference(target, prompt, 60)

    def steps():
        return bench_ssd.OracleSteps(reference, vocab_size=target.vocab_size, alpha=0.8, runner_up=0.5, block=4, seed=3)

    plain = sd.generate(target, prompt, 40, drafter=steps(), num_draft_tokens=4)
    ssd = SpeculativeSpeculationDrafter(steps(), fan_out=3, transport="sequential")
    spec = sd.generate(target, prompt, 40, drafter=ssd, num_draft_tokens=4)
    assert torch.equal(spec.tokens, plain.tokens) and torch.equal(plain.tokens, reference[None, 4:44])
    assert spec.stats.accepted_histogram == plain.stats.accepted_histogram
    assert 0 < ssd.stats.hits and 0 < ssd.stats.misses


def test_a_block_step_is_one_forward_per_block():
    from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model

    target = tiny_target(seed=0)
    steps = bench_ssd.BlockSteps(DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target))
    steps.reset()
    context = torch.tensor([5, 6, 7])
    for _ in range(steps.block):
        token = steps.propose(context, 1, sampling=SamplingConfig(), generator=None).tokens
        context = torch.cat([context, token])
    assert steps.forwards == 1
    steps.propose(context, 1, sampling=SamplingConfig(), generator=None)
    assert steps.forwards == 2


def test_sim_smoke_run_writes_every_system_equal_to_ar(tmp_path, monkeypatch):
    out = tmp_path / "ssd.json"
    monkeypatch.setattr(sys, "argv", ["bench_ssd", "--smoke", "--out", str(out)])
    bench_ssd.main()
    result = json.loads(out.read_text())
    for rows in (result["check_float32"]["rows"], result["rows"]):
        assert set(rows) == {"ar", "plain", "ssd-seq-2", "ssd-overlap-2"}
        assert all(row["equal_to_ar"] and row["follows_reference"] for row in rows.values())
        assert (
            rows["ssd-seq-2"]["tokens_per_pass"] == rows["plain"]["tokens_per_pass"] == rows["ssd-overlap-2"]["tokens_per_pass"]
        )
        assert rows["plain"]["tokens_per_pass"] > 2.0
        assert 0.0 <= rows["ssd-overlap-2"]["hit_rate"] <= 1.0
        assert rows["ssd-overlap-2"]["overlap_over_no_overlap"] > 0
