"""The speedup ceiling of batched speculation: expected tokens from the profile, pass times from three models."""

import json

import pytest

from benchmarks.decode import engine_ceiling
from specdec.drafters.oracle import PRESETS, AcceptanceProfile


def test_expected_tokens_is_the_profile_mean_and_grows_with_k():
    for name in ("specpilot-one-level", "dspark-qwen3-8b-gsm8k"):
        profile = PRESETS[name]
        tokens = [engine_ceiling.expected_tokens(profile, k) for k in range(len(profile.conditional) + 1)]
        assert tokens[0] == 1.0
        assert all(b > a for a, b in zip(tokens, tokens[1:]))
    uneven = AcceptanceProfile(conditional=(0.5, 0.2), source="test", name="test")
    assert engine_ceiling.expected_tokens(uneven, 2) == pytest.approx(1 + 0.5 + 0.1)
    with pytest.raises(ValueError, match="k: expected 0..2"):
        engine_ceiling.expected_tokens(uneven, 3)


def test_ceiling_trades_tokens_against_the_wider_pass():
    profile = AcceptanceProfile(conditional=(0.9, 0.5, 0.1), source="test", name="test")
    # a pass costs 1 ms up to 8 rows and 1 ms more per 4 rows past that: k = 1 (8 rows) gives 1.9 / 1,
    # k = 2 (12 rows) 2.35 / 2, k = 3 (16 rows) 2.395 / 3
    result = engine_ceiling.ceiling(profile, 4, lambda r: 1.0 + max(0, r - 8) / 4, goal=1.5)
    assert result["best_k"] == 1 and result["best_rows"] == 8 and result["best_speedup"] == pytest.approx(1.9)
    k2 = next(e for e in result["by_k"] if e["k"] == 2)
    assert k2["pass_ratio"] == pytest.approx(2.0) and k2["goal_pass_ratio"] == pytest.approx(2.35 / 1.5)
    partial = engine_ceiling.ceiling(profile, 4, engine_ceiling.interpolated([4, 8], [1.0, 1.0]))
    assert [e["k"] for e in partial["by_k"]] == [0, 1]  # widths past the measured rows are left out
    with pytest.raises(ValueError, match="concurrency: 2 rows lie outside"):
        engine_ceiling.ceiling(profile, 2, engine_ceiling.interpolated([4, 8], [1.0, 1.0]))


def test_interpolated_rejects_unordered_rows():
    with pytest.raises(ValueError, match="strictly increasing"):
        engine_ceiling.interpolated([16, 16], [1.0, 2.0])


def test_committed_results_give_ceilings_below_the_floor(tmp_path, capsys):
    out = tmp_path / "ceiling.json"
    assert engine_ceiling.main(["--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert out.with_suffix(".png").exists()
    for models in result["ceilings"].values():
        floor = models["floor"]["best_speedup"]
        assert models["forward"]["best_speedup"] < floor and models["cublas_gemms"]["best_speedup"] < floor
        assert floor <= engine_ceiling.expected_tokens(PRESETS["specpilot-one-level"], 15)
    assert "4.0x at c = 16 needs" in capsys.readouterr().out
    with pytest.raises(ValueError, match="--concurrency: expected request counts >= 1"):
        engine_ceiling.main(["--concurrency", "0", "--out", str(out)])
