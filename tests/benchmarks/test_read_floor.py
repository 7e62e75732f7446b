"""The read floor's CPU smoke mode runs end to end and fits its sizes; bad sizes are refused."""

from __future__ import annotations

import json

import pytest

from benchmarks.kernels import read_floor


def test_smoke_mode_checks_and_times_every_size_and_fits_them(tmp_path):
    out = tmp_path / "read_floor.json"
    assert read_floor.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["errors"] == 0 and result["provenance"]["seed"] == 0
    assert [r["weight_bytes"] for r in result["rows"]] == [int(m * 1e6) for m in read_floor.SMOKE_MBS]
    assert all(r["form"] == "torch_sum" and r["cold_s"] == r["forms"]["torch_sum"] > 0 for r in result["rows"])
    assert result["fit"]["fixed_s"] == result["fit"]["fixed_s"]  # a number, not NaN
    assert (tmp_path / "read_floor.png").stat().st_size > 0


@pytest.mark.parametrize("mb", ["abc", "0.000001", ""])
def test_bad_sizes_are_refused(tmp_path, mb):
    with pytest.raises(SystemExit):
        read_floor.main(["--mb", mb, "--out", str(tmp_path / "x.json")])
