"""The prompt-chunk attention benchmark's CPU smoke run: every variant checked against the per-request reference."""

import json

from benchmarks.kernels import bench_chunk_attention


def test_smoke_checks_every_variant_against_the_reference(tmp_path):
    out = tmp_path / "chunk_attention.json"
    assert bench_chunk_attention.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["failed"] == [] and len(result["cases"]) == len(bench_chunk_attention.SMOKE_CHUNKS)
    for case in result["cases"]:
        assert set(case["variants"]) == {"slots", "slots_verify_only", "chunk_masked/math", "chunk_causal"}
        for name, row in case["variants"].items():
            assert row["passed"] and row["max_abs_error"] < 1e-4 and row["attn_us"] > 0, name
        assert case["variants"]["slots"]["mask_us"] > 0
