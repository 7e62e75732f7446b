"""The packed-attention benchmark's CPU smoke mode runs every variant end to end; a wrong output is not timed."""

from __future__ import annotations

import json

import torch

from benchmarks.kernels import bench_packed_attention


def test_smoke_mode_runs_every_variant_and_checks_pass(tmp_path):
    out = tmp_path / "bench.json"
    assert bench_packed_attention.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["passed"] and result["provenance"]["seed"] == 0 and result["skipped"] == []
    ran = sorted(name for case in result["cases"] for name in case["variants"])
    assert ran == sorted(["sdpa", "flex"] * 2 + ["flex-q32"] * 2)
    for case in result["cases"]:
        assert case["rows"] == sum(case["rows_per_request"])
        for row in case["variants"].values():
            assert row["max_abs_error"] <= 1e-4 and row["attn_ms"] > 0 and row["mask_ms"] > 0


def test_a_wrong_flex_output_is_reported_and_not_timed(tmp_path, monkeypatch):
    flex = bench_packed_attention.flex_over_slots
    monkeypatch.setattr(bench_packed_attention, "flex_over_slots", lambda *args, **kwargs: flex(*args, **kwargs) + 0.01)
    out = tmp_path / "bench.json"
    assert bench_packed_attention.main(["--smoke", "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    for case in result["cases"]:
        for name, row in case["variants"].items():
            assert row["passed"] == (name == "sdpa") and ("attn_ms" in row) == (name == "sdpa")


def test_a_variant_that_raises_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise torch.OutOfMemoryError("no room")

    monkeypatch.setattr(bench_packed_attention, "packed_block_mask", broken)
    out = tmp_path / "bench.json"
    assert bench_packed_attention.main(["--smoke", "--out", str(out), "--budget-s", "1000"]) == 1
    first = json.loads(out.read_text())["cases"][0]["variants"]
    assert first["flex"] == {"passed": False, "error": "OutOfMemoryError: no room"} and first["sdpa"]["passed"]


def test_nothing_starts_past_the_budget(tmp_path):
    out = tmp_path / "bench.json"
    assert bench_packed_attention.main(["--smoke", "--out", str(out), "--budget-s", "0"]) == 1
    result = json.loads(out.read_text())
    assert result["cases"] == [] and len(result["skipped"]) == 4 and result["passed"] is False
