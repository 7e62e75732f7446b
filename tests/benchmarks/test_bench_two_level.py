"""The two-level benchmark's CPU smoke mode runs end to end and its float32 exactness gate can fail."""

from __future__ import annotations

import json
import os

import pytest
import torch
from torch import nn

from benchmarks.decode import bench_two_level
from specdec.formats import convert
from specdec.testing.cheating import AcceptAllVerifier

ARGS = ["--tiny", "--variants", "fp32-packed", "--profiles", "specpilot-one-level", "--systems", "chain,two-level always"]
ARGS += ["--tokens", "24", "--pass-rows", "5"]


def test_smoke_mode_runs_and_every_float32_output_equals_ar(tmp_path):
    out = tmp_path / "bench.json"
    assert bench_two_level.main([*ARGS, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["float32_all_equal_to_ar"] and result["errors"] == [] and result["skipped"] == []
    assert [(t["variant"], t["rows"]) for t in result["pass_times"]] == [("fp32-packed", 5)]
    assert result["pass_times"][0]["byte_ratio"] == 1.0  # float32 weights have no 8-bit plane
    systems = [row["system"] for row in result["rows"]]
    assert systems == ["chain", "two-level always"]
    two_level = result["rows"][1]
    assert two_level["stats"]["q_passes"] > 0 and "tokens_per_pass_over_chain" in two_level
    assert set(two_level["stage_ms_per_round_synced"]) == {"draft1", "q_pass", "draft2", "exact", "commit", "one_level"}


def test_a_lossy_system_fails_the_float32_gate(tmp_path, monkeypatch):
    make = bench_two_level.make_verifier

    def lossy(system, budget, k, sync_stages=False):
        return AcceptAllVerifier() if system == "chain" else make(system, budget, k, sync_stages)

    monkeypatch.setattr(bench_two_level, "make_verifier", lossy)
    out = tmp_path / "bench.json"
    assert bench_two_level.main([*ARGS, "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    assert not result["float32_all_equal_to_ar"]
    assert [row["equal_to_ar"] for row in result["rows"]] == [False, True]


def test_a_run_past_its_budget_skips_cases_and_still_writes(tmp_path):
    out = tmp_path / "bench.json"
    assert bench_two_level.main([*ARGS, "--budget-s", "1e-9", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["pass_times"] == [] and result["rows"] == [] and len(result["skipped"]) == 1


def test_w12_q_weights_read_two_thirds_of_the_exact_bytes():
    model = nn.Sequential(nn.Linear(64, 32, bias=False), nn.Linear(32, 16, bias=False)).to(torch.bfloat16)
    bf16 = bench_two_level.linear_weight_bytes(model, "packed")
    assert bf16["exact_weight_bytes"] == (64 * 32 + 32 * 16) * 2 and bf16["byte_ratio"] == 1.0  # CPU: no packed plane
    convert(model)
    w12 = bench_two_level.linear_weight_bytes(model, "packed")
    assert w12["byte_ratio"] == pytest.approx(2 / 3, abs=0.02)
    assert bench_two_level.linear_weight_bytes(model, "dense")["q_weight_bytes"] == bf16["exact_weight_bytes"]


def test_a_hybrid_variant_must_hold_plain_weights():
    with pytest.raises(ValueError, match="hybrid targets hold plain weights"):
        bench_two_level.build_target("qwen3.5-4b-hybrid", True, "cpu", "w12", "packed", 64, graphs=False)
    with pytest.raises(ValueError, match="--variants"):
        bench_two_level.parse_variant("int8-packed")


def test_the_systems_run_only_graph_keys_warmed_before_them(tmp_path, monkeypatch):
    # a CUDA target captures a graph at the first use of each (bucket, hidden layers, view): one inside a timed run
    # costs it ~0.1-0.2 s on the 8B shape, so every key the systems use must have been run before them
    from specdec.models.graphs import StaticGraphs

    phase, keys = ["before"], {"before": set(), "warm": set(), "systems": set()}
    run, warm = StaticGraphs.run, bench_two_level.warm_graphs

    def recording_run(self, key, body):
        keys[phase[0]].add(key)
        return run(self, key, body)

    def recording_warm(*args, **kwargs):
        phase[0] = "warm"
        rows = warm(*args, **kwargs)
        phase[0] = "systems"
        return rows

    monkeypatch.setattr(StaticGraphs, "run", recording_run)
    monkeypatch.setattr(bench_two_level, "warm_graphs", recording_warm)
    args = ["--tiny", "--variants", "w12-packed", "--profiles", "specpilot-one-level", "--systems", "tree,two-level always"]
    out = tmp_path / "bench.json"
    assert bench_two_level.main([*args, "--tokens", "32", "--pass-rows", "3", "--out", str(out)]) == 0
    assert {view for _, _, view in keys["systems"]} == {"exact", "q"}
    assert keys["systems"] <= keys["warm"], keys["systems"] - keys["warm"]
    assert json.loads(out.read_text())["warmed_rows"]["w12-packed"][:4] == [1, 2, 4, 8]


def test_forcing_two_level_times_no_first_use_of_a_graph_key(tmp_path, graph_keys):
    import specdec
    from benchmarks.decode import forcing_two_level_gpu

    graph_keys.timed(specdec, "generate")
    forcing_two_level_gpu.main(["--smoke", "--out", str(tmp_path)])
    assert {view for *_, view in graph_keys.timed_keys} == {"exact", "q"}
    assert graph_keys.first_used_while_timed() == []


def test_warm_graphs_runs_every_bucket_view_and_feature_layer_set_the_prompt_can_hold(graph_keys):
    from benchmarks.common import warm_graphs
    from specdec.testing import tiny_target

    target = tiny_target(seed=0)
    target.enable_static_path((1, 2, 4, 8, 16))
    prompt = torch.arange(1, 7)[None]
    assert warm_graphs(target, prompt, (1, 2, 4, 8, 16), views=("exact", "q"), hidden_layers=((), (0, 1))) == [1, 2, 4]
    used = {key for _, key in graph_keys.untimed}
    passes = {(b, layers, view) for b in (1, 2, 4) for layers in ((), (0, 1)) for view in ("exact", "q")}
    assert used == passes | {(8, layers, "exact") for layers in ((), (0, 1))}  # the 6-token prefill: bucket 8
    assert target.length == 0  # reset after


def test_alternate_times_the_passes_under_each_value_in_turn_and_puts_the_variable_back(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_TEST_SETTING", "before")
    out = tmp_path / "bench.json"
    args = ["--tiny", "--variants", "fp32-packed", "--profiles", "none", "--tokens", "24", "--pass-rows", "5,3"]
    args += ["--alternate", "SPECDEC_TEST_SETTING=a,b", "--alternate-rounds", "2", "--out", str(out)]
    assert bench_two_level.main(args) == 0
    got = [(t["round"], t["value"], t["rows"]) for t in json.loads(out.read_text())["alternated"]]
    assert got == [(r, v, n) for r in (0, 1) for v in ("a", "b") for n in (5, 3)]
    assert os.environ["SPECDEC_TEST_SETTING"] == "before"


def test_alternated_passes_run_under_their_value_and_capture_graphs_again_for_each(monkeypatch):
    seen, captures = [], []

    class GraphTarget:
        uses_cuda_graphs = True

        def enable_cuda_graphs(self):
            captures.append(os.environ.get("SPECDEC_TEST_SETTING"))

    def fake_pass_times(target, prompt, rows, reps):
        seen.append(os.environ.get("SPECDEC_TEST_SETTING"))
        return dict(rows=rows, exact_ms=1.0, q_ms=1.0, q_over_exact=1.0)

    monkeypatch.delenv("SPECDEC_TEST_SETTING", raising=False)
    monkeypatch.setattr(bench_two_level, "pass_times", fake_pass_times)
    rows = bench_two_level.alternated_pass_times(GraphTarget(), None, [4], 1, "SPECDEC_TEST_SETTING", ["0", "auto"], 2)
    assert seen == ["0", "auto", "0", "auto"] and [r["value"] for r in rows] == seen
    assert captures == ["0", "auto", "0", "auto", None]  # and once more after, under the variable as it was (unset)
    assert "SPECDEC_TEST_SETTING" not in os.environ


@pytest.mark.parametrize("spec", ["SPECDEC_X", "SPECDEC_X=1", "specdec_x=1,2", "SPECDEC_X=1,1", "SPECDEC_X=1,", "=1,2"])
def test_alternate_rejects_a_malformed_spec(spec, capsys):
    with pytest.raises(SystemExit):
        bench_two_level.main(["--tiny", "--alternate", spec])
    assert "--alternate: expected NAME=VALUE,VALUE[,...] (two or more distinct values)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_two_level.main(["--tiny", "--alternate", "SPECDEC_X=1,2", "--alternate-rounds", "0"])
    assert "--alternate-rounds: expected a positive count, got 0" in capsys.readouterr().err
