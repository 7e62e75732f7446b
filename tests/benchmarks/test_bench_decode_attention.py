"""``bench_decode_attention`` on the CPU: the smoke run writes its JSON; its cases' masks."""

from __future__ import annotations

import json

import torch

from benchmarks.kernels import bench_decode_attention as bench


def test_smoke_run_checks_every_variant_against_the_target_path(tmp_path):
    out = tmp_path / "decode_attention.json"
    assert bench.main(["--smoke", "--out", str(out), "--calls", "2", "--reps", "1"]) == 0
    result = json.loads(out.read_text())
    assert result["provenance"]["seed"] == 0 and result["tensors"] == "random"
    assert {r["variant"] for r in result["rows"]} == {
        "SDPA (bool mask)",
        "SDPA (additive mask)",
        "math (additive mask)",
        "split-KV Triton (additive mask)",
        "split-KV Triton, 8 warps a split",
    }
    for r in result["rows"]:
        assert "error" not in r and r["us"] > 0
        # the additive mask is what SDPA makes of the boolean one: the same path gives the same bits
        assert r["max_abs_diff"] == 0 if r["variant"].startswith("SDPA") else r["max_abs_diff"] < 1e-5


def test_cases_commit_half_the_span_then_mask_the_new_rows_causally():
    t = bench.case_tensors(2, 8, bench.SMOKE_HEADS, torch.float32, torch.device("cpu"), torch.Generator().manual_seed(0))
    # half the span committed, then the two rows causal: row 0 sees 5 slots, row 1 sees 6, for each of the 2 groups
    assert t["mask"].shape == (1, 1, 4, 8) and t["mask"].sum(-1).flatten().tolist() == [5, 6, 5, 6]
