"""bench_ar's arguments: the steps are compared with the one-row step, so --ms must hold 1."""

from __future__ import annotations

import pytest

from benchmarks.decode import bench_ar


@pytest.mark.parametrize("ms", ["4,16", "0,1"])
def test_ms_without_a_one_row_step_is_refused_before_anything_runs(ms, capsys):
    # "4,1,16" compared every step with the first (M = 4): the 16-row step read 4x its one-row step, not 16x
    with pytest.raises(SystemExit):
        bench_ar.main(["--ms", ms])
    assert "--ms: expected positive row counts including 1" in capsys.readouterr().err
