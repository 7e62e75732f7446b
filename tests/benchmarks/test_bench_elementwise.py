"""The element-wise kernels' GPU benchmark: its checks (interpreter), its timing code on the CPU, its guards."""

import json
import time

import pytest
import torch

from benchmarks.kernels import bench_elementwise
from specdec.models.config import TargetConfig


def test_smoke_checks_every_op_in_every_dtype(tmp_path):
    out = tmp_path / "elementwise.json"
    assert bench_elementwise.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    seen = {(c["op"], c["output"], c["dtype"]) for c in result["checks"]}
    assert {op for op, _, _ in seen} == {"rope", "qk_norm_rope", "rope_cache", "rope_cache_slotted", "silu_mul", "add_norm"}
    assert len({d for _, _, d in seen}) == 3 and result["failed"] == []
    assert all(c["differ"] == 0 for c in result["checks"] if c["must_be_bitwise"])


def test_ulp_diff_orders_signed_values():
    a = torch.tensor([-1.0, 0.0, 1.0])
    b = torch.nextafter(a, torch.full_like(a, 5.0))
    assert bench_elementwise.ulp_diff(a, b) == (3, 1)
    assert bench_elementwise.ulp_diff(torch.tensor([-0.0]), torch.tensor([0.0])) == (0, 0)
    assert bench_elementwise.ulp_diff(a.half(), a.half()) == (0, 0)


def test_a_broken_kernel_fails_the_check(monkeypatch):
    import specdec.kernels.act as act

    real = act.silu_mul_triton
    monkeypatch.setattr(act, "silu_mul_triton", lambda gate_up: real(gate_up) * 1.01)  # off by a percent
    _, failed = bench_elementwise.check([(3, (4, 2, 16), 24, 40)], torch.device("cpu"), torch.Generator().manual_seed(0))
    assert failed and all("silu_mul" in f for f in failed)


def test_timing_code_runs_with_the_graph_and_timer_stood_in_on_the_cpu(monkeypatch):
    def cpu_time_ms(fn, reps, warmup=1):  # one call: the interpreter's kernels are slow
        start = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - start)

    monkeypatch.setattr(bench_elementwise, "capture_cuda_graph", lambda fn, warmup=2: fn)
    monkeypatch.setattr(bench_elementwise, "mean_time_ms", cpu_time_ms)
    cfg = TargetConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_layers=1, num_heads=4, num_kv_heads=2,
                       head_dim=8, qk_norm=True, model_type="qwen3")  # fmt: skip
    layers = bench_elementwise.layer_times(cfg, (1, 3), torch.device("cpu"), prefix=5, reps=2)
    assert [r["rows"] for r in layers] == [1, 3]
    # bf16 on the CPU: the references both ways (no CUDA), so the outputs agree exactly
    assert all(r["kernels_ms"] > 0 and r["reference_ms"] > 0 and r["max_abs_diff"] == 0.0 for r in layers)
    monkeypatch.setattr(bench_elementwise, "CALLS", 2)
    ops = bench_elementwise.op_times((4, 2, 8), 24, 32, (2,), torch.device("cpu"), torch.Generator().manual_seed(0))
    assert {r["op"] for r in ops} == {"rope", "qk_norm_rope", "rope_cache", "rope_cache_slotted", "silu_mul", "add_norm"}
    assert all(r["kernel_us"] > 0 and r["reference_us"] > 0 for r in ops)


def test_plot_and_cpu_guard(tmp_path, monkeypatch):
    assert bench_elementwise.plot({"layer": []}, tmp_path / "x.png") == "no layer timings to plot"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(SystemExit):
        bench_elementwise.main(["--smoke", "--out", str(tmp_path / "e.json")])
