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
