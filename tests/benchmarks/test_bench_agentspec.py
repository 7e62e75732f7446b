"""The AgentSpec workload: its synthetic tool turn is a tool_response block, its cache is reused as built."""

from __future__ import annotations

import json

import pytest

from benchmarks.common import provenance, write_json
from benchmarks.drafters import agentspec_workload
from specdec.drafters.agentspec import BlockTracker, StructureSpec


def test_failing_assert_cycles_through_the_asserts():
    test = "def check(candidate):\n    assert candidate(1) == 2\n    x = 3\n    assert candidate(2) == 4\n"
    assert [agentspec_workload.failing_assert(test, k) for k in range(3)] == [
        "assert candidate(1) == 2",
        "assert candidate(2) == 4",
        "assert candidate(1) == 2",
    ]
    with pytest.raises(ValueError, match="test_source"):
        agentspec_workload.failing_assert("def check(c):\n    pass\n", 0)


def test_tool_turn_is_one_closed_tool_response_block():
    text = agentspec_workload.tool_turn("f", "assert f(1) == 2")
    tracker = BlockTracker(StructureSpec.agent_default())
    opened = False
    for ch in text.encode():
        tracker.feed(bytes([ch]))
        opened |= tracker.block == "tool_response"
    assert opened and tracker.stack == ()
    assert json.loads(text[len("<tool_response>") : text.index("</tool_response>")])["passed"] is False


def test_a_cached_workload_with_the_same_settings_is_reused(tmp_path, monkeypatch):
    path = tmp_path / "w.json"
    cached = {"problem_ids": [0], "turns": 1, "max_new_tokens": 8, "requests": []}
    write_json(path, cached, provenance(seed=None))

    def build(*args, **kwargs):
        raise AssertionError("rebuilt a cached workload")

    monkeypatch.setattr(agentspec_workload, "build", build)
    assert agentspec_workload.load_or_build(path, [0], 1, 8)["requests"] == []
    with pytest.raises(AssertionError, match="rebuilt"):
        agentspec_workload.load_or_build(path, [0, 1], 1, 8)


def test_engine_schedule_adds_a_turn_only_after_the_previous_turn_finished():
    from benchmarks.drafters import bench_agentspec
    from specdec.drafters.agentspec import TokenPieces
    from specdec.testing import tiny_target
    from specdec.testing.tokenizers import tiny_tokenizer

    target, pieces = tiny_target(seed=0, max_seq_len=128), TokenPieces.from_tokenizer(tiny_tokenizer())
    requests = bench_agentspec.tiny_workload(target, problems=3, turns=3, max_new_tokens=6)["requests"]
    engine, _ = bench_agentspec.make_engine("agentspec", target, pieces, concurrency=2, num_draft_tokens=4, layout="per_request")
    outputs, events, _, peak = bench_agentspec.schedule(engine, requests, "cpu", agentspec=True)
    position = {(kind, q, t): i for i, (_, kind, q, t) in enumerate(events)}
    assert len(position) == 2 * len(requests)
    for r in requests:
        if r["turn"]:
            assert position[("add", r["query"], r["turn"])] > position[("finish", r["query"], r["turn"] - 1)]
    assert peak == 2
    assert all(o.tolist() == r["output_ids"] for o, r in zip(outputs, requests))


def test_engine_smoke_run_writes_every_arm_equal_to_ar(tmp_path):
    from benchmarks.drafters import bench_agentspec

    out = tmp_path / "c3.json"
    result = bench_agentspec.main(["--smoke", "--concurrency", "3", "--out", str(out)])
    assert set(result["arms"]) == {"ar", "ngram", "agentspec", "agentspec_no_structure"}
    for name, arm in result["arms"].items():
        assert arm["equal_to_ar"] and arm["equal_to_cached_workload"], name
        assert arm["new_tokens"] == sum(len(r["output_ids"]) for r in bench_agentspec.tiny_workload(*_tiny_args())["requests"])
    assert result["arms"]["agentspec"]["max_running"] == 3
    saved = json.loads(out.read_text())
    assert saved["concurrency"] == 3 and saved["provenance"]["command"]


def _tiny_args():
    from specdec.testing import tiny_target

    return tiny_target(seed=0, max_seq_len=256), 4, 3, 12
