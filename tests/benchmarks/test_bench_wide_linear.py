"""The wide-linear benchmark's CPU smoke run times every formulation; one that computes another product fails it."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.kernels import bench_wide_linear


def test_smoke_times_every_variant_and_sums_a_pass(tmp_path):
    out = tmp_path / "wide_linear.json"
    assert bench_wide_linear.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["errors"] == 0 and not result["not_run"]
    assert {(r["linear"], r["R"]) for r in result["rows"]} == {(s, r) for s in ("a", "lm_head") for r in (4, 8)}
    for r in (4, 8):
        by_linear = {row["linear"]: row for row in result["rows"] if row["R"] == r}
        for v in ("linear", "swap"):
            want = 1e3 * (bench_wide_linear.LAYERS * by_linear["a"][f"{v}_s"] + by_linear["lm_head"][f"{v}_s"])
            assert result["pass_gemm_ms"][str(r)][v] == pytest.approx(want)


def test_a_variant_off_the_product_fails_the_run(tmp_path, monkeypatch):
    exact = bench_wide_linear.variant_call

    def call(name):
        if name == "swap":
            return lambda x, w: exact(name)(x, w) * 1.1
        return exact(name)

    monkeypatch.setattr(bench_wide_linear, "variant_call", call)
    out = tmp_path / "wide_linear.json"
    assert bench_wide_linear.main(["--smoke", "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    assert result["errors"] == 4 and all("swap_error" in r and "swap_s" not in r and "linear_s" in r for r in result["rows"])


def test_unknown_variant_is_named():
    with pytest.raises(ValueError, match="variant: expected one of"):
        bench_wide_linear.variant_call("tf32")
    x, w = torch.randn(3, 8), torch.randn(5, 8)
    assert torch.allclose(bench_wide_linear.variant_call("swap")(x, w), x @ w.T, atol=1e-5)
