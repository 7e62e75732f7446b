"""The hybrid CUDA-graph benchmark's CPU smoke mode runs end to end and its static-path checks pass."""

from __future__ import annotations

import json

from benchmarks.decode import bench_hybrid_graphs


def test_smoke_mode_runs_and_checks_pass(tmp_path):
    out = tmp_path / "bench.json"
    assert bench_hybrid_graphs.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["gate_passed"] and result["weights"] == "random"
    for step in ("decode", "tree64"):
        assert result["checks"][step]["eager_equals_static_logits"]
        assert result["checks"][step]["eager_equals_static_commit"]
    assert result["timings"]["ar_static_ms"] > 0
