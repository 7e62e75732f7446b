"""The tree-build benchmark's CPU smoke mode runs end to end; a device tree that disagrees is not timed."""

from __future__ import annotations

import json

from benchmarks.kernels import bench_tree_build


def test_smoke_mode_runs_and_checks_pass(tmp_path):
    out = tmp_path / "bench.json"
    assert bench_tree_build.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["passed"] and result["provenance"]["seed"] == 0
    assert [row["budget"] for row in result["rows"]] == [4, 16]
    for row in result["rows"]:
        assert row["checks"] == {"eager_equals_host": True}
        assert row["host_ms"] > 0 and row["device_eager_ms"] > 0 and row["device_graph_ms"] is None


def test_a_wrong_device_tree_is_reported_and_not_timed(tmp_path, monkeypatch):
    build = bench_tree_build.best_first_tree_device

    def off_by_one(lp, budget):
        tokens, parents, scores, num_nodes = build(lp, budget)
        return tokens + 1, parents, scores, num_nodes

    monkeypatch.setattr(bench_tree_build, "best_first_tree_device", off_by_one)
    out = tmp_path / "bench.json"
    assert bench_tree_build.main(["--smoke", "--out", str(out)]) == 1
    rows = json.loads(out.read_text())["rows"]
    assert all(row["checks"] == {"eager_equals_host": False} and "host_ms" not in row for row in rows)
