"""The Nsight Compute profile: the CPU launch path, and the raw-CSV parser's numbers and limiter verdicts.

``ncu_raw_fixture.csv`` is written in ncu's raw-page layout (tool log lines around it, a row of names, a row of
units with decimal prefixes, thousands separators inside quotes, two kernels in one NVTX range, a kernel ncu
did not rename and whose metrics are empty); its numbers are chosen by hand so that each rule of the verdict
decides one range.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest

from benchmarks.kernels import profile_ncu
from benchmarks.kernels.bench_roofline import BULK_VARIANTS

FIXTURE = Path(__file__).with_name("ncu_raw_fixture.csv")


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    out = tmp_path_factory.mktemp("ncu") / "ncu_profile.json"
    assert profile_ncu.main(["--parse", str(FIXTURE), "--copy-tbs", "4.2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    return result, {r["range"]: r for r in result["records"]}


def test_each_rule_decides_the_range_built_for_it(parsed):
    _, by_range = parsed
    assert {name: r["limiter"] for name, r in by_range.items()} == {
        "cuda_q|8b_lm_head[151936x4096]|M=1": "dram-bound",  # DRAM 88.2 % of peak
        "cuda_w12|8b_lm_head[151936x4096]|M=1": "issue-bound",  # issue slots 75.5 %, DRAM 55 %, math stalls on top
        "cuda_bf16|8b_o[4096x4096]|M=8": "launch/tail-bound",  # 8 us, 0.97 waves, DRAM 79.9 % (just under 80)
        "cuda_w12|8b_o[4096x4096]|M=8": "latency-bound",  # DRAM 35 %, long_scoreboard on top, 0.4 eligible warps
        "cublas_bf16|32b_down[5120x25600]|M=8": "mixed",  # DRAM 70 %, issue 20 %, 1.5 eligible warps
        "void gemv2T_kernel_val<int, int, __nv_bfloat16, 128, 16, 4>(float, float)": "unknown",  # metrics empty
    }
    assert by_range["cuda_bf16|8b_o[4096x4096]|M=8"]["also"] == []
    assert by_range["cuda_w12|8b_lm_head[151936x4096]|M=1"]["also"] == []


def test_units_separators_and_the_bandwidth_against_the_copy(parsed):
    result, by_range = parsed
    assert result["kernels_in_csv"] == 7 and result["copy_bandwidth_bytes_per_s"] == pytest.approx(4.2e12)
    q = by_range["cuda_q|8b_lm_head[151936x4096]|M=1"]
    assert q["duration_s"] == pytest.approx(150e-6)  # "150,000" nsecond
    assert q["dram_read_bytes"] == pytest.approx(623.03e6) and q["dram_write_bytes"] == pytest.approx(12.5e3)
    assert q["dram_bytes_per_s"] == pytest.approx((623.03e6 + 12.5e3) / 150e-6)
    assert q["frac_of_copy"] == pytest.approx((623.03e6 + 12.5e3) / 150e-6 / 4.2e12)
    assert q["dram_pct"] == pytest.approx(88.2)  # dram__throughput, the second name tried
    assert (q["registers"], q["waves"], q["occupancy_pct"], q["issue_pct"], q["ipc"]) == (64.0, 4.5, 45.1, 40.0, 1.6)
    assert q["N"] == 151936 and q["K"] == 4096 and q["M"] == 1 and q["kernel"] == "cuda_q" and q["attributed"]


def test_stall_shares_leave_out_the_selected_state(parsed):
    _, by_range = parsed
    w12 = by_range["cuda_w12|8b_o[4096x4096]|M=8"]
    # long_scoreboard 6.0, wait 1.5, barrier 0.5 of 8.0 stall cycles ("selected" 1.0 is issuing, not a stall)
    assert w12["top_stalls"] == [["long_scoreboard", 0.75], ["wait", 0.1875], ["barrier", 0.0625]]


def test_kernels_of_one_range_are_added(parsed):
    _, by_range = parsed
    cublas = by_range["cublas_bf16|32b_down[5120x25600]|M=8"]
    assert cublas["kernels"] == 2
    assert cublas["duration_s"] == pytest.approx(85e-6)
    assert cublas["dram_read_bytes"] == pytest.approx(262.7e6)
    assert cublas["registers"] == 168.0 and cublas["dram_pct"] == 70.0  # rates of the longer kernel


def test_a_missing_metric_is_null(parsed):
    _, by_range = parsed
    gemv = by_range["void gemv2T_kernel_val<int, int, __nv_bfloat16, 128, 16, 4>(float, float)"]
    assert not gemv["attributed"] and gemv["registers"] == 40.0 and gemv["duration_s"] == pytest.approx(12e-6)
    assert gemv["dram_read_bytes"] is None and gemv["dram_pct"] is None and gemv["frac_of_copy"] is None
    assert gemv["top_stalls"] == []


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        (dict(dram_pct=80.0), "dram-bound"),
        (dict(dram_pct=79.99), "mixed"),
        (dict(dram_pct=50.0, issue_pct=70.0), "issue-bound"),
        (dict(duration_s=9.9e-6), "launch/tail-bound"),
        (dict(waves=0.99), "launch/tail-bound"),
        (dict(dram_pct=59.9), "latency-bound"),
        (dict(dram_pct=59.9, eligible_warps=1.0), "mixed"),
        (dict(dram_pct=59.9, stalls=[("math_pipe_throttle", 0.6), ("long_scoreboard", 0.4)]), "mixed"),
        (dict(dram_pct=None), "unknown"),
    ],
)
def test_thresholds_at_their_edges(metrics, expected):
    base = dict(dram_pct=70.0, issue_pct=20.0, duration_s=50e-6, waves=3.0, eligible_warps=0.5, stalls=[("long_scoreboard", 0.8)])
    assert profile_ncu.verdict({**base, **metrics})[0] == expected


def test_smoke_launch_names_every_range_and_the_parser_reads_them_back(tmp_path):
    manifest = tmp_path / "ncu_launch.json"
    assert profile_ncu.main(["--launch", "--smoke", "--time-reps", "1", "--out", str(manifest)]) == 0
    launched = json.loads(manifest.read_text())
    assert launched["provenance"]["seed"] == 0 and launched["skipped"] == []
    ranges = launched["ranges"]
    assert len(ranges) == 2 * len(profile_ncu.MS) * len(profile_ncu.DEFAULT_KERNELS)
    assert [r["kernel"] for r in ranges[: len(profile_ncu.DEFAULT_KERNELS)]] == list(profile_ncu.DEFAULT_KERNELS)
    assert {"cuda_w12_v3", "cuda_w12_v4", "cuda_w12_v5", "cuda_w12_v6", "cuda_w12_v7", "cuda_q_v2"} <= set(
        profile_ncu.DEFAULT_KERNELS
    )
    assert not set(profile_ncu.WIDE_KERNELS) & {r["kernel"] for r in ranges}
    assert all(re.fullmatch(profile_ncu.RANGE_PATTERN, r["range"]) and r["time_s"] > 0 for r in ranges)
    w12 = next(r for r in ranges if r["kernel"] == "cuda_w12")
    bf16 = next(r for r in ranges if r["kernel"] == "cuda_bf16")
    assert bf16["weight_bytes"] == 2 * bf16["N"] * bf16["K"] and w12["escapes"] > 0
    # a raw page as ncu writes it when it did not rename the kernels: attributed to the ranges in launch order
    header = '"ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum"\n"","","nsecond","byte"\n'
    body = "".join(f'"{i}","skinny_gemm_kernel<{i}>","2,000","{r["weight_bytes"]}"\n' for i, r in enumerate(ranges))
    raw = tmp_path / "raw.csv"
    raw.write_text(header + body)
    out = tmp_path / "profile.json"
    assert profile_ncu.main(["--parse", str(raw), "--manifest", str(manifest), "--out", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    assert [r["range"] for r in records] == [r["range"] for r in ranges]
    assert all(r["attributed"] and r["dram_read_over_weight"] == 1.0 for r in records)
    assert records[0]["weight_bytes_per_s"] == pytest.approx(ranges[0]["weight_bytes"] / 2e-6)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="--copy-tbs"):
        profile_ncu.main(["--parse", str(FIXTURE), "--copy-tbs", "0", "--out", str(tmp_path / "p.json")])
    with pytest.raises(ValueError, match="kernel"):
        profile_ncu.range_name("cutlass", "qwen3-8b", "o", 4096, 4096, 1)
    with pytest.raises(TypeError, match="text"):
        profile_ncu.read_raw_csv(b"ID")
    with pytest.raises(SystemExit):
        profile_ncu.main(["--launch", "--smoke", "--time-reps", "-1"])


@pytest.mark.parametrize(("unit", "seconds"), [("ns", 12_832e-9), ("nsecond", 12_832e-9), ("us", 12_832e-6), ("ms", 12.832)])
def test_short_time_units_are_scaled(unit, seconds):
    # ncu 2025.3 with --print-units base labels gpu__time_duration in "ns" (the H200 run of 2026-12-02)
    assert profile_ncu.parse_number("12,832", unit) == pytest.approx(seconds)


def test_smoke_launch_leaves_a_skipped_kernel_out(tmp_path):
    manifest = tmp_path / "ncu_launch.json"
    assert profile_ncu.main(["--launch", "--smoke", "--skip-kernel", "cuda_w12_v5", "--out", str(manifest)]) == 0
    launched = json.loads(manifest.read_text())
    kept = [k for k in profile_ncu.DEFAULT_KERNELS if k != "cuda_w12_v5"]
    assert launched["kernels"] == kept
    assert len(launched["ranges"]) == 2 * len(profile_ncu.MS) * len(kept)
    assert not any(r["kernel"] == "cuda_w12_v5" for r in launched["ranges"])


def test_smoke_launch_runs_every_staged_kernel_and_skips_them_all(tmp_path, w12_variants_called):
    variants = w12_variants_called
    staged = BULK_VARIANTS
    manifest = tmp_path / "ncu_launch.json"
    assert profile_ncu.main(["--launch", "--smoke", "--out", str(manifest)]) == 0
    assert set(staged) <= set(variants)
    launched = {r["kernel"] for r in json.loads(manifest.read_text())["ranges"]}
    assert {f"cuda_w12_{v}" for v in staged} <= launched
    variants.clear()
    skip = [arg for v in staged for arg in ("--skip-kernel", f"cuda_w12_{v}")]
    assert profile_ncu.main(["--launch", "--smoke", *skip, "--out", str(manifest)]) == 0
    assert not set(staged) & set(variants) and "v4" in variants
    assert json.loads(manifest.read_text())["kernels"] == [
        k for k in profile_ncu.DEFAULT_KERNELS if k not in {f"cuda_w12_{v}" for v in staged}
    ]


def test_smoke_launch_pins_the_q_column_to_the_register_kernel_and_skips_q_v2(tmp_path, q_variants_called):
    manifest = tmp_path / "ncu_launch.json"
    assert profile_ncu.main(["--launch", "--smoke", "--out", str(manifest)]) == 0
    # K = 64 would run v5 unpinned: cuda_q runs v1 there, cuda_q_v2 to v4 run v2 to v4 at any K, once warm and once profiled
    assert sorted(q_variants_called) == sorted(
        (variant, m, k) for variant in ("v1", "v2", "v3", "v4") for k in (64, 136) for m in profile_ncu.MS for _ in range(2)
    )
    q_variants_called.clear()
    assert profile_ncu.main(["--launch", "--smoke", "--skip-kernel", "cuda_q_v2", "--out", str(manifest)]) == 0
    assert {v for v, *_ in q_variants_called} == {"v1", "v3", "v4"}
    assert "cuda_q_v2" not in json.loads(manifest.read_text())["kernels"]


def test_smoke_launch_runs_only_the_chosen_kernels(tmp_path):
    manifest = tmp_path / "launch.json"
    argv = ["--launch", "--smoke", "--only-kernel", "cuda_w12_v7", "--only-kernel", "cuda_q_v2", "--out", str(manifest)]
    assert profile_ncu.main(argv) == 0
    kernels = [r["kernel"] for r in json.loads(manifest.read_text())["ranges"]]
    assert kernels and set(kernels) == {"cuda_w12_v7", "cuda_q_v2"}


def test_cases_must_name_known_linears():
    assert profile_ncu.case_list("qwen3-8b/down, qwen3-32b/o") == (("qwen3-8b", "down"), ("qwen3-32b", "o"))
    for bad in ("qwen3-8b/nope", "llama/down", "down"):
        with pytest.raises(argparse.ArgumentTypeError, match="--cases: expected model/linear"):
            profile_ncu.case_list(bad)


def test_warp_instructions_add_over_a_ranges_kernels_and_need_both_metrics():
    def row(per_cycle, cycles):
        return {
            "Kernel Name": "cuda_w12|8b_o[4096x4096]|M=8",
            "gpu__time_duration.sum": 1e-5,
            "sm__inst_executed.sum.per_cycle_active": per_cycle,
            "sm__cycles_active.avg": cycles,
        }

    records = profile_ncu.summarise([row(100.0, 30.0), row(200.0, 10.0)], None, None)
    assert records[0]["kernels"] == 2 and records[0]["warp_instructions"] == pytest.approx(5000.0)
    assert profile_ncu.summarise([row(100.0, None)], None, None)[0]["warp_instructions"] is None


def test_the_committed_w12_profile_counts_instructions_per_weight():
    result = json.loads((Path(__file__).parents[2] / "benchmarks/results/ncu_profile_h200_2026-12-03_w12.json").read_text())
    per_kweight = {(r["kernel"], r["shape"], r["M"]): 1e3 * r["warp_instructions"] / (r["N"] * r["K"]) for r in result["records"]}
    for (kernel, shape, m), value in per_kweight.items():
        if kernel == "cuda_w12_v7":  # more instructions a weight than the Q view, fewer than 2x
            assert 1.3 < value / per_kweight[("cuda_q_v2", shape, m)] < 2.0


def test_wide_kernels_launch_past_16_rows_only_when_named(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECDEC_WIDE_PIPELINE", raising=False)
    manifest = tmp_path / "wide.json"
    argv = ["--launch", "--smoke", "--time-reps", "1", "--ms", "17,40", "--out", str(manifest)]
    for kernel in ("cublas_bf16", "cuda_w12_wide", "cuda_w12_wide_pipe", "cuda_q_wide_pipe"):
        argv += ["--only-kernel", kernel]
    assert profile_ncu.main(argv) == 0
    launched = json.loads(manifest.read_text())
    ranges = launched["ranges"]
    # the smoke's second shape has K = 136: the wide kernels' ranges there are named as not launched
    assert {(r["N"], r["K"]) for r in ranges} == {(40, 64), (24, 136)}
    assert len(launched["not_launched"]) == 2 * 3 and all("[24x136]" in name for name in launched["not_launched"])
    assert [(r["kernel"], r["M"]) for r in ranges[:4]] == [
        ("cublas_bf16", 17),
        ("cuda_w12_wide", 17),
        ("cuda_w12_wide_pipe", 17),
        ("cuda_q_wide_pipe", 17),
    ]
    assert len(ranges) == 2 * 4 + 2 * 1 and "SPECDEC_WIDE_PIPELINE" not in os.environ
    wide = next(r for r in ranges if r["kernel"] == "cuda_w12_wide_pipe")
    q = next(r for r in ranges if r["kernel"] == "cuda_q_wide_pipe")
    assert wide["weight_bytes"] > q["weight_bytes"] >= wide["N"] * wide["K"]
    with pytest.raises(SystemExit):  # a tensor-map kernel past its 16 rows is refused before anything launches
        profile_ncu.main(["--launch", "--smoke", "--ms", "17", "--only-kernel", "cuda_w12_v9", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("before", [None, "0"])
def test_the_pipelined_wide_call_sees_the_variable_set_and_restores_it(monkeypatch, before):
    if before is None:
        monkeypatch.delenv("SPECDEC_WIDE_PIPELINE", raising=False)
    else:
        monkeypatch.setenv("SPECDEC_WIDE_PIPELINE", before)
    seen = profile_ncu._with_wide_pipeline(True, lambda: os.environ["SPECDEC_WIDE_PIPELINE"])()
    assert seen == "1" and os.environ.get("SPECDEC_WIDE_PIPELINE") == before
    assert profile_ncu._with_wide_pipeline(False, lambda: os.environ["SPECDEC_WIDE_PIPELINE"])() == "0"
