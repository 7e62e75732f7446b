"""The budget model runs the engine for real and charges each pass from a committed step-time table."""

from benchmarks.decode.model_engine_budget import main


def test_budget_model_runs_and_every_output_equals_ar(capsys, tmp_path):
    out_json = tmp_path / "model.json"
    assert main(["--requests", "8", "--concurrency", "4", "--new-tokens", "12", "--out", str(out_json)]) == 0
    assert out_json.exists()
    out = capsys.readouterr().out
    for system in ("AR", "budget off", "budget auto, own", "budget auto, pooled"):
        assert f"\n{system} " in out
    assert "False" not in out
