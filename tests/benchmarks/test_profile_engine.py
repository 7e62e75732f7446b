"""The engine profiler's CPU smoke mode runs end to end on both models; a speculative output off AR fails it."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.decode import profile_engine


@pytest.mark.parametrize(("model", "budget"), [("qwen3-8b", "auto"), ("qwen3.5-4b", "off")])
def test_smoke_mode_splits_every_pass_and_profiles_the_decode_passes(tmp_path, model, budget):
    out = tmp_path / "profile_engine.json"
    assert profile_engine.main(["--smoke", "--model", model, "--budget", budget, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["spec_equal_to_ar"] is True and result["budget"] == budget
    assert (result["step_time_ms"] is None) == (budget == "off")
    for system in ("AR", "spec"):
        entry = result["systems"][system]
        for step in entry["steps"]:
            assert 0 < step["forward_ms"] <= step["ms"]
        decode = entry["summary"]["decode"]
        assert decode["passes"] > 0
        assert decode["outside_ms_mean"] == pytest.approx(decode["ms_mean"] - decode["forward_ms_mean"])
        prof = entry["decode_profile"]
        assert prof["passes"] > 0 and "ncalls" in prof["host_top_own"] and "Self CPU" in prof["torch_profiler_by_self_cpu"]
        assert 0 < prof["host_forward_ms_per_pass"] <= prof["wall_ms_per_pass"]


def test_waves_join_as_slots_free_and_every_pass_is_classed(tmp_path):
    out = tmp_path / "profile_engine.json"
    assert profile_engine.main(["--smoke", "--waves", "3", "--budget", "off", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["waves"] == 3 and len(result["prompt_lengths"]) == 3 * result["concurrency"]
    for entry in result["systems"].values():
        steps, summ = entry["steps"], entry["summary"]
        assert sum(s["joined"] for s in steps) == len(result["prompt_lengths"])  # every request joined once
        assert sum(s["left"] for s in steps) == len(result["prompt_lengths"])  # and left once
        assert summ["prefill"]["passes"] + summ["decode"]["passes"] == summ["run"]["passes"] == len(steps)
        split = summ["decode, a request left"]["passes"] + summ["decode, none left"]["passes"]
        assert split == summ["decode"]["passes"]
        assert summ["run"]["outside_seconds"] * 1e3 == pytest.approx(sum(s["ms"] - s["forward_ms"] for s in steps))
    with pytest.raises(SystemExit):
        profile_engine.main(["--smoke", "--waves", "0", "--out", str(out)])


def test_outputs_equal_sees_one_changed_token():
    class Done:
        def __init__(self, outputs):
            self.outputs = outputs

        def output(self, rid):
            return self.outputs[rid]

    prompts = [torch.tensor([1, 2]), torch.tensor([3])]
    refs = [torch.tensor([1, 2, 5, 6]), torch.tensor([3, 7])]
    same = Done({"a": torch.tensor([5, 6]), "b": torch.tensor([7])})
    off = Done({"a": torch.tensor([5, 6]), "b": torch.tensor([8])})
    assert profile_engine.outputs_equal(same, ["a", "b"], prompts, refs)
    assert not profile_engine.outputs_equal(off, ["a", "b"], prompts, refs)


def test_the_forward_clock_restores_the_forward_it_found():
    class Target:
        def forward(self, x):
            return x + 1

    plain, wrapped = Target(), Target()
    own = lambda x: x * 10  # noqa: E731  (an instance's own forward, e.g. another wrapper)
    wrapped.forward = own
    for target, expected in ((plain, 3), (wrapped, 20)):
        clock = profile_engine.ForwardClock(target, torch.device("cpu"))
        assert target.forward(2) == expected and clock.seconds > 0
        clock.close()
        assert target.forward(2) == expected
    assert "forward" not in vars(plain) and wrapped.forward is own
