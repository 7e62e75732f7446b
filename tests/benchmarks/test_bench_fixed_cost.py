"""The fixed-cost benchmark's CPU smoke mode runs end to end; a kernel off the float32 product fails the run."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.kernels import bench_fixed_cost, read_floor
from specdec.kernels.cuda import ops


def test_smoke_mode_times_every_kernel_warm_and_cold_and_fits_the_sweep(tmp_path):
    out = tmp_path / "fixed_cost.json"
    assert bench_fixed_cost.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["provenance"]["seed"] == 0 and result["errors"] == 0 and not result["not_run"]
    kinds = set(bench_fixed_cost.DEFAULT_KERNELS)
    assert {r["kind"] for r in result["shapes"]} == kinds | {"read_floor"}
    kernels = [r for r in result["shapes"] if r["kind"] != "read_floor"]
    assert all(r["cold_s"] > 0 and r["warm_s"] > 0 for r in kernels)
    assert all("warm_s" not in r and r["cold_s"] > 0 for r in result["sweep"])
    # the smoke weights are a few KB: the cold timing cycles through the most copies
    assert all(r["copies"] == 64 for r in result["shapes"] + result["sweep"])
    fits = {(k, m) for k in kinds for m in bench_fixed_cost.SWEEP_MS} | {("read_floor", 0)}
    assert {(f["kind"], f["M"]) for f in result["fits"]} == fits
    # one read floor a byte count a shape's kernels read, and every kernel row measured against its own bytes' floor
    for linear in ("a", "b"):
        floors = {r["weight_bytes"]: r for r in result["shapes"] if r["linear"] == linear and r["kind"] == "read_floor"}
        rows = [r for r in kernels if r["linear"] == linear]
        assert set(floors) == {r["weight_bytes"] for r in rows}
        for r in rows:
            assert r["read_floor_s"] == floors[r["weight_bytes"]]["cold_s"]
            assert r["x_read_floor"] == pytest.approx(r["cold_s"] / r["read_floor_s"])
    assert result["empty_launch_s"] > 0
    assert (tmp_path / "fixed_cost.png").stat().st_size > 0


def _q_kernel_one_output_off(monkeypatch):
    exact = ops.q_gemm_small_m

    def off(x, ae, base):
        y = exact(x, ae, base).clone()
        y[0, 0] += 1.0
        return y

    monkeypatch.setattr(ops, "q_gemm_small_m", off)


def test_a_kernel_off_the_product_fails_the_run(tmp_path, monkeypatch):
    _q_kernel_one_output_off(monkeypatch)
    out = tmp_path / "fixed_cost.json"
    assert bench_fixed_cost.main(["--smoke", "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    bad = [r for r in result["shapes"] + result["sweep"] if "error" in r]
    assert bad and {r["kind"] for r in bad} == {"cuda_q_v2", "cuda_q_v4", "cuda_q_v5"} and all("cold_s" not in r for r in bad)


def test_an_ablated_library_times_the_kernels_it_reaches_unchecked_and_checks_the_rest(tmp_path, monkeypatch, capsys):
    _q_kernel_one_output_off(monkeypatch)
    monkeypatch.setattr(bench_fixed_cost, "library_ablation", lambda ops, device: 64)
    out = tmp_path / "fixed_cost.json"
    assert bench_fixed_cost.main(["--smoke", "--out", str(out)]) == 1  # the split-K Q kernel (v2) is still checked
    result = json.loads(out.read_text())
    rows = result["shapes"] + result["sweep"]
    assert result["ablation"] == 64 and {r["kind"] for r in rows if "error" in r} == {"cuda_q_v2"}
    q = [r for r in rows if r["kind"] in ("cuda_q_v4", "cuda_q_v5")]
    assert q and all(r["unchecked"] and r["cold_s"] > 0 and "err" not in r for r in q)
    assert all("err" in r and "unchecked" not in r for r in rows if r["kind"] in ("cublas_bf16", "cuda_w12_v8"))
    assert "row tiles' x box" in capsys.readouterr().out


@pytest.mark.parametrize("ablation", [128, 256])
def test_an_ablation_of_the_tensor_map_kernels_times_every_cuda_kind_unchecked_and_checks_cublas(ablation, tmp_path, monkeypatch):
    _q_kernel_one_output_off(monkeypatch)
    monkeypatch.setattr(bench_fixed_cost, "library_ablation", lambda ops, device: ablation)
    out = tmp_path / "fixed_cost.json"
    assert bench_fixed_cost.main(["--smoke", "--out", str(out)]) == 0  # the Q kernels' wrong output is not checked
    rows = json.loads(out.read_text())["shapes"]
    assert {r["kind"] for r in rows if r.get("unchecked")} == {
        k for k in bench_fixed_cost.DEFAULT_KERNELS if k.startswith("cuda_")
    }
    assert all("err" in r and "unchecked" not in r for r in rows if r["kind"] == "cublas_bf16")


def test_an_ablation_of_the_wide_kernels_leaves_every_kernel_here_checked(tmp_path, monkeypatch):
    _q_kernel_one_output_off(monkeypatch)
    monkeypatch.setattr(bench_fixed_cost, "library_ablation", lambda ops, device: 1)  # the wide kernels' decode
    out = tmp_path / "fixed_cost.json"
    assert bench_fixed_cost.main(["--smoke", "--out", str(out)]) == 1
    rows = json.loads(out.read_text())["shapes"]
    assert {r["kind"] for r in rows if "error" in r} == {"cuda_q_v2", "cuda_q_v4", "cuda_q_v5"}
    assert not [r for r in rows if r.get("unchecked")]


def test_kernels_option_times_only_the_named_kernels(tmp_path):
    out = tmp_path / "fixed_cost.json"
    assert bench_fixed_cost.main(["--smoke", "--kernels", "cuda_w12_v8,cublas_bf16", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {r["kind"] for r in result["shapes"] + result["sweep"]} == {"cublas_bf16", "cuda_w12_v8", "read_floor"}
    assert bench_fixed_cost.main(["--smoke", "--kernels", "cublas_bf16", "--no-read-floor", "--out", str(out)]) == 0
    assert {r["kind"] for r in json.loads(out.read_text())["shapes"]} == {"cublas_bf16"}
    with pytest.raises(SystemExit):
        bench_fixed_cost.main(["--smoke", "--kernels", "cuda_w12_v11", "--out", str(out)])


def test_the_cycle_gives_each_captured_call_the_next_copy():
    seen = []
    cycle = bench_fixed_cost.Cycle(seen.append, 3)
    for _ in range(7):
        cycle()
    assert seen == [0, 1, 2, 0, 1, 2, 0]


def test_a_cycle_is_timed_in_whole_cycles():
    """20 calls over 6 copies replayed would read copies 0 and 1 again two calls after their last read (warm in the
    L2): the calls round up to 24, so every read of a copy comes 6 calls after the one before."""
    from benchmarks.kernels.bench_roofline import time_per_call

    seen = []
    time_per_call(bench_fixed_cost.Cycle(seen.append, 6), torch.device("cpu"), calls=20, reps=2)
    timed = seen[1:]  # after the one untimed call
    assert len(timed) == 2 * 24
    assert all(timed[i] == timed[i - 6] for i in range(6, len(timed)))


@pytest.mark.parametrize(("fixed_us", "tb_per_s"), [(2.0, 4.0), (9.5, 1.2)])
def test_fit_recovers_a_line_through_noisy_points(fixed_us, tb_per_s):
    nbytes = [8e6, 16e6, 32e6, 64e6, 128e6]
    noise = [1.01, 0.99, 1.0, 1.005, 0.995]
    seconds = [(fixed_us * 1e-6 + b / (tb_per_s * 1e12)) * e for b, e in zip(nbytes, noise)]
    a, b = bench_fixed_cost.fit_line(nbytes, seconds)
    assert a * 1e6 == pytest.approx(fixed_us, abs=0.6) and b / 1e12 == pytest.approx(tb_per_s, rel=0.02)


def test_fit_and_copies_refuse_bad_input():
    with pytest.raises(ValueError, match="nbytes, seconds"):
        bench_fixed_cost.fit_line([1.0], [1.0])
    with pytest.raises(ValueError, match="at least two different"):
        bench_fixed_cost.fit_line([1.0, 1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="nbytes: expected > 0"):
        bench_fixed_cost.weight_copies(0, 1 << 20)


def test_plot_only_redraws_the_png_of_a_json(tmp_path):
    out = tmp_path / "fixed_cost.json"
    assert bench_fixed_cost.main(["--smoke", "--out", str(out)]) == 0
    png = out.with_suffix(".png")
    png.unlink()
    assert bench_fixed_cost.main(["--plot-only", str(out)]) == 0
    assert png.stat().st_size > 0


def test_a_read_form_that_skips_bytes_fails_the_run(tmp_path, monkeypatch):
    def skips_the_last_word(buf):
        return buf.view(torch.int32)[:-1].sum(dtype=torch.int64)

    monkeypatch.setattr(read_floor, "read_forms", lambda device: {"torch_sum": skips_the_last_word})
    out = tmp_path / "fixed_cost.json"
    assert bench_fixed_cost.main(["--smoke", "--kernels", "cublas_bf16", "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    bad = [r for r in result["shapes"] + result["sweep"] if "error" in r]
    assert bad and all(r["kind"] == "read_floor" and "not every byte" in r["form_errors"]["torch_sum"] for r in bad)


@pytest.mark.parametrize("nbytes", [4, 10_004, 3 * 8192 * 4 + 12])
def test_the_triton_read_forms_read_every_word_once(nbytes):
    gen = torch.Generator().manual_seed(nbytes)
    buf = torch.randint(0, 256, (nbytes,), generator=gen, dtype=torch.uint8)
    forms = read_floor._triton_forms()
    assert set(forms) == {f"triton_{b}" for b in read_floor.TRITON_BLOCKS}
    for read in forms.values():
        assert read_floor.checked_sum(read(buf)) == read_floor.word_sum(buf)
    buf[-1] ^= 1  # a changed last byte changes the sum each form reports
    assert all(read_floor.checked_sum(read(buf)) == read_floor.word_sum(buf) for read in forms.values())


def test_kernels_are_timed_in_the_order_named(tmp_path):
    out = tmp_path / "fixed_cost.json"
    for order in (["cuda_w12_v10", "cublas_bf16"], ["cublas_bf16", "cuda_w12_v10"]):
        assert bench_fixed_cost.main(["--smoke", "--no-read-floor", "--kernels", ",".join(order), "--out", str(out)]) == 0
        rows = json.loads(out.read_text())["shapes"]
        first = rows[0]
        assert [r["kind"] for r in rows if (r["linear"], r["M"]) == (first["linear"], first["M"])] == order


def test_every_kernels_cold_copies_span_the_l2_factor_even_the_smallest_format():
    """The copies are sized by the fewest bytes a kernel reads (the Q view's), not by bf16's."""
    from argparse import Namespace

    n, k, l2 = 40, 256, 20_000
    args = Namespace(kernels=bench_fixed_cost.DEFAULT_KERNELS, l2_bytes=l2, l2_factor=3.0, calls=2, reps=2, read_floor=False)
    gen = torch.Generator().manual_seed(0)
    rows = bench_fixed_cost.time_shape(n, k, [1], args, gen, torch.device("cpu"), ops, warm=False)
    assert {r["kind"] for r in rows} == set(args.kernels) and min(r["weight_bytes"] for r in rows) < 2 * n * k
    assert all(r["copies"] < 64 and r["copies"] * r["weight_bytes"] >= 3.0 * l2 for r in rows)
