"""The engine benchmark's dense path: its CPU smoke run records the row cap, the prefill rows and the eager forwards."""

import argparse
import json

import pytest
import torch

from benchmarks.decode import bench_engine
from specdec.drafters import NGramDrafter
from specdec.models.ragged import ROW_BUCKETS, RaggedDenseTarget
from specdec.testing import tiny_target


def test_smoke_rows_record_the_cap_the_prefill_rows_and_no_eager_forward(tmp_path):
    out = tmp_path / "bench_engine.json"
    argv = ["--smoke", "--weights", "planted", "--waves", "2", "--layouts", "packed", "--wall-budget-s", "600", "--out", str(out)]
    assert bench_engine.main([*argv, "--split-forward"]) == 0
    result = json.loads(out.read_text())
    assert result["max_pass_rows_arg"] == "auto" and result["graphs"]["mode"] == "static_path"
    assert result["elementwise"] == "auto"
    lengths = result["prompt_lengths"]
    for row in result["rows"]:
        c = row["concurrency"]
        batch = lengths if c == 1 else [lengths[i % len(lengths)] for i in range(c * 2)]
        assert row["max_pass_rows"] == ROW_BUCKETS[-1]  # "auto": the static path's largest bucket
        assert row["eager_passes"] == 0 and row["max_rows_per_pass"] <= ROW_BUCKETS[-1]
        assert row["prefill_rows"] == sum(batch)
        assert row["equal_to_batched_ar"] and row["mismatches_vs_alone"] == 0
        assert row["graphs_captured"] == 0  # the timed run's keys were all run before it (the warm-up run's)
        assert row["forward_ms_per_pass"] > 0 and row["outside_forward_ms_per_pass"] > 0
        groups = row["passes_by_bucket"]
        assert sum(g["passes"] for g in groups) == row["target_passes"]
        assert all(g["bucket"] in ROW_BUCKETS and 0 < g["mean_rows"] <= g["bucket"] for g in groups)
        assert all(g["request_bucket"] <= g["bucket"] for g in groups)
        assert any(g["request_bucket"] > ROW_BUCKETS[0] for g in groups if g["prefill_passes"])  # a prompt chunk
        assert sum(g["prefill_passes"] for g in groups) >= 1
        forward_ms = sum(g["forward_ms"] * g["passes"] for g in groups) / row["target_passes"]
        assert forward_ms == pytest.approx(row["forward_ms_per_pass"], rel=1e-6)


def test_decode_counts_forwards_past_the_largest_bucket_and_the_cap_removes_them():
    ragged = RaggedDenseTarget(tiny_target(seed=0), slots=3, layout="packed")
    ragged.enable_static_path((1, 2, 4, 8))
    prompts = [torch.arange(1, 14), torch.arange(3, 12), torch.arange(5, 9)]  # 26 prompt rows
    runs = {
        cap: bench_engine.decode(
            ragged, prompts, concurrency=3, drafter=NGramDrafter(), num_draft_tokens=1, max_new_tokens=4, max_pass_rows=cap
        )
        for cap in (None, "auto", 7)
    }
    assert runs[None]["eager_passes"] == 1 and runs[None]["max_rows_per_pass"] == 26  # the prefills in one forward
    assert runs["auto"]["max_pass_rows"] == 8 and runs["auto"]["eager_passes"] == 0 and runs["auto"]["max_rows_per_pass"] == 8
    assert runs[7]["eager_passes"] == 0 and runs[7]["max_rows_per_pass"] == 7
    assert all(run["prefill_rows"] == 26 for run in runs.values())
    for a, b in zip(runs[None]["tokens"], runs[7]["tokens"]):
        assert torch.equal(a, b)
    unbucketed = RaggedDenseTarget(tiny_target(seed=0), slots=3, layout="packed")
    run = bench_engine.decode(unbucketed, prompts, concurrency=3, drafter=NGramDrafter(), num_draft_tokens=1, max_new_tokens=4)
    assert run["max_pass_rows"] is None and run["eager_passes"] is None  # no buckets: every forward is eager


def test_passes_by_bucket_groups_each_forward_once():
    groups = bench_engine.passes_by_bucket((4, 8), [1, 4, 5, 9, 0, 8], [1, 0, 5, 9, 0, 0], None)
    assert [(g["bucket"], g["passes"], g["mean_rows"], g["prefill_passes"]) for g in groups] == [
        (4, 2, 2.5, 1),
        (8, 2, 6.5, 1),
        ("eager", 1, 9.0, 1),
    ]
    assert all("forward_ms" not in g for g in groups)
    assert [g["bucket"] for g in bench_engine.passes_by_bucket(None, [3, 700], [0, 0], None)] == ["eager"]
    split = bench_engine.passes_by_bucket((1, 4, 8), [4, 4, 8], [0, 3, 0], [0.001, 0.003, 0.002], [1, 3, 1])
    assert [(g["bucket"], g["request_bucket"], g["passes"]) for g in split] == [(4, 1, 1), (4, 4, 1), (8, 1, 1)]
    assert [g["forward_ms"] for g in split] == pytest.approx([1.0, 3.0, 2.0])
    with pytest.raises(ValueError, match="prefill_rows: expected 2 entries like rows, got 1"):
        bench_engine.passes_by_bucket((4,), [1, 2], [0], None)
    with pytest.raises(ValueError, match="request_rows: expected 2 entries like rows, got 3"):
        bench_engine.passes_by_bucket((4,), [1, 2], [0, 0], None, [1, 1, 1])


def test_max_pass_rows_argument():
    assert bench_engine.parse_args(["--max-pass-rows", "none"]).max_pass_rows is None
    assert bench_engine.parse_args(["--max-pass-rows", "96"]).max_pass_rows == 96
    assert bench_engine.parse_args([]).max_pass_rows == "auto"
    for bad in ("0", "-4", "big"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected 'auto', 'none' or an int >= 1, got '{bad}'"):
            bench_engine.pass_rows_arg(bad)


def test_long_request_rows_argument():
    assert bench_engine.parse_args([]).long_request_rows == "default"
    assert bench_engine.parse_args(["--long-request-rows", "none"]).long_request_rows is None
    assert bench_engine.parse_args(["--long-request-rows", "32"]).long_request_rows == 32
    for bad in ("0", "-1", "tall"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected 'default', 'none' or an int >= 1, got '{bad}'"):
            bench_engine.long_rows_arg(bad)


def test_split_forward_times_every_forward_and_restores_the_target():
    ragged = RaggedDenseTarget(tiny_target(seed=0), slots=2, layout="packed")
    ragged.enable_static_path((1, 2, 4, 8))
    prompts = [torch.arange(1, 10), torch.arange(3, 8)]
    calls = []
    forward = ragged.forward

    def counting(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)

    ragged.forward = counting
    kwargs = dict(concurrency=2, drafter=NGramDrafter(), num_draft_tokens=1, max_new_tokens=4)
    plain = bench_engine.decode(ragged, prompts, **kwargs)
    assert "forward_ms_per_pass" not in plain
    calls.clear()
    split = bench_engine.decode(ragged, prompts, split_forward=True, **kwargs)
    assert len(calls) == split["target_passes"] > 0  # every forward went through the timer once
    assert ragged.forward is counting  # the wrapper the test installed, not the timer, is back
    assert split["forward_ms_per_pass"] > 0 and split["outside_forward_ms_per_pass"] > 0
    per_pass = split["forward_ms_per_pass"] + split["outside_forward_ms_per_pass"]
    assert per_pass == pytest.approx(split["ms_per_pass"], rel=1e-6)
    for a, b in zip(plain["tokens"], split["tokens"]):
        assert torch.equal(a, b)


def test_kernel_profile_runs_its_steps_inside_the_decode_and_keeps_the_outputs(monkeypatch):
    ragged = RaggedDenseTarget(tiny_target(seed=0), slots=2, layout="packed")
    ragged.enable_static_path((1, 2, 4, 8))
    prompts = [torch.arange(1, 10), torch.arange(3, 8)]
    kwargs = dict(concurrency=2, drafter=NGramDrafter(), num_draft_tokens=1, max_new_tokens=30)
    plain = bench_engine.decode(ragged, prompts, **kwargs)
    profiled_steps = []

    def breakdown(step, device, steps, top):
        for _ in range(steps + 1):  # one warm-up step, then the profiled ones, as the real breakdown
            step()
            profiled_steps.append(1)
        return {"kernels_ms": 0.0}

    monkeypatch.setattr(bench_engine, "step_kernel_breakdown", breakdown)
    run = bench_engine.decode(ragged, prompts, kernel_profile_steps=3, **kwargs)
    assert len(profiled_steps) == 4 and run["kernel_profile"]["passes"] == 4
    assert run["kernel_profile"]["graphs_captured"] == 0  # the static path's buckets were all run before
    assert run["target_passes"] == plain["target_passes"]
    for a, b in zip(plain["tokens"], run["tokens"]):
        assert torch.equal(a, b)
