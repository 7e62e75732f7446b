"""The engine's token-forcing benchmark: its CPU smoke mode runs end to end, and its verdict can come out NO."""

from __future__ import annotations

import json

from benchmarks.decode import forcing_engine_gpu
from specdec.testing.faults import SlotLogitBiasFault


def run(tmp_path, *extra) -> tuple[int, dict]:
    code = forcing_engine_gpu.main(["--smoke", "--out", str(tmp_path), *extra])
    return code, json.loads((tmp_path / "forcing_engine_gpu_smoke.json").read_text())


def test_smoke_mode_passes_the_engine_and_fails_the_slot_fault_after_its_onset_only(tmp_path):
    code, result = run(tmp_path)
    assert code == 0 and result["expected_outcome"] is True and result["skipped"] == []
    lossless, auto, faulty = (
        result["candidates"][name] for name in ("engine", "engine, budget auto", "engine + SlotLogitBiasFault")
    )
    assert lossless["report"]["verdict"] == "PASS" and auto["report"]["verdict"] == "PASS"
    assert faulty["report"]["verdict"] == "FAIL" and faulty["slots"] == [0, 1, 2] and faulty["faulted_request"] == 1
    after = result["settings"]["after"]
    assert faulty["report"]["by_bucket"][f"pos < {after}"]["verdict"] == "PASS"
    assert faulty["report"]["by_bucket"][f"pos >= {after}"]["verdict"] == "FAIL"
    # only the faulted request mismatches, and only from the onset on
    assert [r["mismatches_after"] > 0 for r in faulty["per_request"]] == [False, True, False]
    assert all(r["mismatches"] == r["mismatches_after"] for r in faulty["per_request"])
    assert result["step_time_ms"]["rows"] == [3, 6, 12, 24]
    assert set(result["times_s"]) >= {"build", "stock_ar", "engine", "engine + SlotLogitBiasFault", "forcing_checks"}
    assert result["provenance"]["seed"] == 0


def test_a_lossy_engine_makes_the_outcome_no(tmp_path, monkeypatch):
    """The 'lossless' engine run on a target that biases slot 0 from its first token: it must FAIL, exit 1."""

    def biased(target, **kwargs):
        return SlotLogitBiasFault(target, slot=0, after=0, **kwargs)

    monkeypatch.setattr(forcing_engine_gpu, "RaggedDenseTarget", biased)
    code, result = run(tmp_path, "--no-auto")
    assert code == 1 and result["expected_outcome"] is False
    assert result["candidates"]["engine"]["report"]["verdict"] == "FAIL"
    assert result["verdict_as_expected"] == {"engine": False, "engine + SlotLogitBiasFault": True}


def test_past_the_wall_budget_no_case_starts_and_the_json_is_still_written(tmp_path):
    code, result = run(tmp_path, "--wall-budget-s", "0")
    assert code == 1 and result["expected_outcome"] is False
    assert result["skipped"] == ["engine", "engine + SlotLogitBiasFault", "engine, budget auto"]
    assert result["candidates"] == {}


def test_no_timed_run_is_the_first_to_use_a_graph_key(tmp_path, graph_keys, monkeypatch):
    # each engine case runs once untimed, then timed (its keys: row, request and span buckets only those requests
    # reach); the stock AR decode after every bucket of the dense target was run once
    graph_keys.timed(forcing_engine_gpu, "decode")
    engine_run, calls = forcing_engine_gpu.run_engine, []

    def second_of_each_pair_timed(*args, **kwargs):
        calls.append(1)
        graph_keys.timing = len(calls) % 2 == 0
        try:
            return engine_run(*args, **kwargs)
        finally:
            graph_keys.timing = False

    monkeypatch.setattr(forcing_engine_gpu, "run_engine", second_of_each_pair_timed)
    code, result = run(tmp_path)
    assert code == 0 and len(calls) == 6 and len(graph_keys.timed_keys) > 4
    assert graph_keys.first_used_while_timed() == []


def test_forcing_gpu_times_no_first_use_of_a_graph_key(tmp_path, graph_keys):
    from benchmarks.decode import forcing_gpu

    graph_keys.timed(forcing_gpu, "decode")
    assert forcing_gpu.main(["--smoke", "--out", str(tmp_path)]) == 0
    assert len(graph_keys.timed_keys) >= 2  # the decode step and the n-gram verify passes
    assert graph_keys.first_used_while_timed() == []
