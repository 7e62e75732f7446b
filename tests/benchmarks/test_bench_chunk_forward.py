"""The prompt-chunk forward benchmark's CPU smoke run: both variants agree and only one attends the chunk apart."""

import json

from benchmarks.decode import bench_chunk_forward

# the pass's bucket (Rb, Tb, Lb, Tl) per chunk of the smoke run: 16 one-row requests + the chunk, 64-token span
APART = {8: [24, 1, 64, 8], 12: [32, 1, 64, 16]}
JOINT = {8: [24, 8, 64, 0], 12: [32, 16, 64, 0]}


def test_smoke_runs_both_variants_and_only_apart_splits(tmp_path):
    out = tmp_path / "chunk_forward.json"
    assert bench_chunk_forward.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["passed"] and [c["chunk_rows"] for c in result["cases"]] == [8, 12]
    for case in result["cases"]:
        apart, joint = case["variants"]["apart"], case["variants"]["joint"]
        assert APART[case["chunk_rows"]] in apart["keys"] and JOINT[case["chunk_rows"]] in joint["keys"]
        assert all(key[3] == 0 for key in joint["keys"])
        assert not case["default_apart"]  # the tiny spans pad far less than LONG_REQUEST_PADDING
        assert apart["forward_ms"] > 0 and joint["forward_ms"] > 0
