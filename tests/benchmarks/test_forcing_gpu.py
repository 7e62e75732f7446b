import json

import pytest

from benchmarks.decode import forcing_gpu


def test_w12_smoke_checks_verify_passes_of_up_to_16_rows(tmp_path):
    args = ["--smoke", "--weight-format", "w12", "--num-draft-tokens", "15", "--graph-buckets", "1,2,4,8,16"]
    assert forcing_gpu.main([*args, "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "forcing_gpu_smoke_smoke_w12.json").read_text())
    assert result["target"]["weight_format"] == "w12" and result["target"]["dtype"] == "bf16"
    assert 12.0 < result["target"]["w12_bits_per_weight"] < 13.0
    rows = {int(r): n for r, n in result["speculative_verify_passes_by_rows"].items()}
    assert max(rows) == 16 and sum(n for r, n in rows.items() if r > 8) > 0
    assert result["lossless_report"]["passed"] and not result["faulty_report"]["passed"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--weight-format", "w12", "--dtype", "fp32"], "--dtype"),
        (["--num-draft-tokens", "15"], "--graph-buckets"),  # the default buckets end at 8 rows
        (["--graph-buckets", "1,4,2"], "--graph-buckets"),
        (["--graph-buckets", "0,1"], "--graph-buckets"),
        (["--graph-buckets", "1,x"], "--graph-buckets"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(tmp_path, args, named):
    with pytest.raises(SystemExit, match=named):
        forcing_gpu.main([*args, "--device", "cpu", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_counting_drafter_counts_rows_of_each_proposal():
    import torch

    from specdec.contracts import SamplingConfig

    drafter = forcing_gpu.CountingNGramDrafter()
    for context in (torch.tensor([1, 2, 7, 1, 2]), torch.tensor([5, 6])):
        drafter.propose(context, 4, sampling=SamplingConfig(), generator=None)
    # the first context's tail "1, 2" last occurred at its start: drafts 7, 1, 2 (4 rows); the second has no match (1 row)
    assert drafter.verify_rows == {4: 1, 1: 1}
