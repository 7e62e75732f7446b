"""The wide W12 benchmark's CPU smoke run checks and times every kernel; a kernel that decodes one weight wrong, or
whose product is off, fails the run."""

from __future__ import annotations

import json
import os
import statistics

import pytest
import torch

from benchmarks.kernels import bench_wide_w12


def test_smoke_checks_and_times_every_kernel(tmp_path):
    out = tmp_path / "wide_w12.json"
    assert bench_wide_w12.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["errors"] == 0 and not result["not_run"]
    assert all(bench_wide_w12.check_passed(c) for c in result["checks"]) and len(result["checks"]) == 4
    timed = {(r["linear"], r["M"], r["kind"]) for r in result["timings"]}
    wide = {"cublas_bf16", "cuda_w12_wide", "cuda_q_wide"}  # no Triton off the GPU
    # the tensor-map calls at up to 16 rows, two of them at 17-32 rows
    expected = {16: wide | {"cuda_w12_small_m", "cuda_q_small_m"}, 17: wide | {"cuda_w12_two_calls"}, 40: wide}
    assert timed == {(s, m, k) for s in ("a", "b") for m, kinds in expected.items() for k in kinds}
    assert all(r["x_cublas"] > 0 for r in result["timings"]) and (tmp_path / "wide_w12.png").exists()


def test_read_floor_gives_every_timed_row_its_own_bytes_floor(tmp_path, capsys):
    out = tmp_path / "wide_w12.json"
    assert bench_wide_w12.main(["--smoke", "--read-floor", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    floors = {(f["linear"], f["weight_bytes"]): f["cold_s"] for f in result["read_floors"]}
    # one floor a linear and byte count: bf16, W12 and the Q view read different bytes of the same linear
    assert len(floors) == 6 and all(f["kind"] == "read_floor" for f in result["read_floors"])
    for r in result["timings"]:
        assert r["read_floor_s"] == floors[(r["linear"], r["weight_bytes"])]
        assert r["x_read_floor"] == pytest.approx(r["cold_s"] / r["read_floor_s"])
    assert "x floor)" in capsys.readouterr().out
    assert bench_wide_w12.main(["--smoke", "--out", str(out)]) == 0  # off by default: no floors, none on the rows
    result = json.loads(out.read_text())
    assert result["read_floors"] == [] and not any("x_read_floor" in r for r in result["timings"])


def test_the_run_says_whether_its_chains_ran_under_programmatic_launch(tmp_path, monkeypatch, capsys):
    for mode, said in (("1", True), ("0", False)):
        monkeypatch.setenv("SPECDEC_PDL", mode)
        out = tmp_path / f"wide_w12_{mode}.json"
        assert bench_wide_w12.main(["--smoke", "--out", str(out)]) == 0
        assert json.loads(out.read_text())["programmatic_launch"] == mode
        assert ("overlapped throughput" in capsys.readouterr().out) is said


def test_a_wrong_decode_or_product_fails_the_run(tmp_path, monkeypatch):
    from specdec.kernels.cuda import ops

    exact = ops.w12_gemm_wide

    def one_weight_off(x, ae, *planes):
        y = exact(x, ae, *planes)
        return y + (x[:, 5:6] != 0) * torch.tensor([1.0] + [0.0] * (ae.shape[0] - 1), dtype=y.dtype)  # W[0, 5] + 1

    monkeypatch.setattr(ops, "w12_gemm_wide", one_weight_off)
    out = tmp_path / "wide_w12.json"
    assert bench_wide_w12.main(["--smoke", "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    assert [c["w12_exact"] for c in result["checks"] if c["check"] == "decode"] == [False, False]
    assert all(c["q_exact"] for c in result["checks"] if c["check"] == "decode")


def _one_weight_off(op):
    def wrong(x, ae, *planes):
        y = op(x, ae, *planes)
        return y + (x[:, 5:6] != 0) * torch.tensor([1.0] + [0.0] * (ae.shape[0] - 1), dtype=y.dtype)  # W[0, 5] + 1

    return wrong


def test_an_ablated_library_times_its_wide_kernels_unchecked_and_says_so(tmp_path, monkeypatch, capsys):
    from specdec.kernels.cuda import ops

    monkeypatch.setattr(bench_wide_w12, "library_ablation", lambda ops, device: 2)
    monkeypatch.setattr(ops, "w12_gemm_wide", _one_weight_off(ops.w12_gemm_wide))
    out = tmp_path / "wide_w12.json"
    assert bench_wide_w12.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["ablation"] == 2 and result["checks"] == [] and result["errors"] == 0
    assert {r["kind"] for r in result["timings"] if "cold_s" in r} >= {"cuda_w12_wide", "cuda_q_wide"}
    assert "no MMAs" in capsys.readouterr().out
    with pytest.raises(ValueError, match="ablation: expected 1 to 2047"):
        bench_wide_w12.ablation_name(2048)


@pytest.mark.parametrize(
    "ablation, failed",
    [
        (1, {"cuda_w12_two_calls", "cuda_w12_small_m"}),  # a wide kernels' bit: the small-M kinds still checked
        (64, {"cuda_w12_wide"}),  # the row tiles' x box: the wide kinds still checked
        (128, {"cuda_w12_wide"}),  # the tensor-map kernels' x box: the wide kinds still checked
        (256, {"cuda_w12_wide"}),  # the consumers' bank conflicts: the wide kinds still checked
        (1024, {"cuda_w12_wide"}),  # the 1-16 token consumers' loads and math: the wide kinds still checked
    ],
)
def test_an_ablated_library_still_checks_the_kernels_its_bits_do_not_reach(ablation, failed, tmp_path, monkeypatch):
    from specdec.kernels.cuda import ops

    monkeypatch.setattr(bench_wide_w12, "library_ablation", lambda ops, device: ablation)
    monkeypatch.setattr(ops, "w12_gemm_small_m", _one_weight_off(ops.w12_gemm_small_m))
    monkeypatch.setattr(ops, "w12_gemm_wide", _one_weight_off(ops.w12_gemm_wide))
    out = tmp_path / "wide_w12.json"
    assert bench_wide_w12.main(["--smoke", "--out", str(out)]) == 1
    timings = json.loads(out.read_text())["timings"]
    assert {r["kind"] for r in timings if "error" in r} == failed
    assert {"cuda_w12_wide", "cuda_w12_small_m", "cuda_w12_two_calls"} - failed <= {r["kind"] for r in timings if "cold_s" in r}


def test_alternate_times_every_kernel_under_each_value_in_turn_and_puts_the_variable_back(tmp_path, monkeypatch):
    seen = []
    timer = bench_wide_w12.time_per_call

    def recording(cycle, device, **kw):  # which value each timing ran under, in order
        seen.append(os.environ.get("SPECDEC_WIDE_STREAM_K"))
        return timer(cycle, device, **kw)

    monkeypatch.setattr(bench_wide_w12, "time_per_call", recording)
    monkeypatch.setenv("SPECDEC_WIDE_STREAM_K", "auto")
    out = tmp_path / "wide_w12.json"
    argv = ["--smoke", "--kernels", "cublas_bf16,cuda_q_wide", "--out", str(out)]
    assert bench_wide_w12.main(argv + ["--alternate", "SPECDEC_WIDE_STREAM_K=0,1", "--alternate-rounds", "2"]) == 0
    assert os.environ["SPECDEC_WIDE_STREAM_K"] == "auto"
    result = json.loads(out.read_text())
    assert result["alternate"] == dict(name="SPECDEC_WIDE_STREAM_K", values=["0", "1"], rounds=2)
    rows = {(r["linear"], r["M"], r["kind"], r["setting"]): r for r in result["timings"]}
    cases = {key[:3] for key in rows}
    assert len(rows) == 2 * len(cases) and {"cublas_bf16", "cuda_q_wide"} == {kind for _, _, kind in cases}
    assert seen == ["0", "1", "0", "1"] * len(cases)  # every case timed 0, 1, 0, 1
    for r in rows.values():
        assert len(r["turns_s"]) == 2 and r["cold_s"] == statistics.median(r["turns_s"]) and r["x_cublas"] > 0
    # each setting's rows against cuBLAS of the same setting
    q0 = rows[("a", 40, "cuda_q_wide", "SPECDEC_WIDE_STREAM_K=0")]
    assert q0["x_cublas"] == pytest.approx(rows[("a", 40, "cublas_bf16", "SPECDEC_WIDE_STREAM_K=0")]["cold_s"] / q0["cold_s"])


@pytest.mark.parametrize(
    "argv", [["--alternate", "SPECDEC_WIDE_STREAM_K=0"], ["--alternate", "x=0,1"], ["--alternate-rounds", "0"]]
)
def test_alternate_names_what_it_cannot_take(argv, capsys):
    with pytest.raises(SystemExit):
        bench_wide_w12.main(["--smoke", "--checks-only"] + argv)
    assert "--alternate" in capsys.readouterr().err
