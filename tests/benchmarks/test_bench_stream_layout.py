"""The stream-layout probe's CPU parts: its cases and the word sum its launches are checked against."""

from __future__ import annotations

import numpy as np
import torch

from benchmarks.kernels import bench_stream_layout as bsl


def test_every_layout_runs_at_its_gemms_split_and_the_one_wave_shapes_sweep_the_splits():
    splits = {"w12_v7": 4, "q_v2": 2, "bf16_v2": 3}
    cs = bsl.cases({"o": (4096, 4096), "head": (151936, 4096)}, lambda gemm, n, k: splits[gemm])
    plan = {(c["shape"], c["layout"]): c["k_splits"] for c in cs if c["why"] == "plan"}
    assert plan == {(s, name): splits[bsl.LAYOUTS[name][2]] for s in ("o", "head") for name in bsl.LAYOUTS}
    swept = {(c["layout"], c["k_splits"]) for c in cs if c["shape"] == "o" and c["why"] == "splits"}
    # the plan's own split (4) is not run twice
    assert swept == {(lay, ks) for lay in bsl.SWEEP_LAYOUTS for ks in bsl.SWEEP_SPLITS if ks != 4}
    assert not [c for c in cs if c["shape"] == "head" and c["why"] == "splits"]
    promos = {c["promotion"] for c in cs if c["layout"] == "rows_w12" and c["k_splits"] == 4 and c["shape"] == "o"}
    assert promos == set(bsl.PROMOTIONS)
    assert len({(c["shape"], c["layout"], c["k_splits"], c["promotion"]) for c in cs}) == len(cs)


def test_splits_past_the_stages_are_left_out():
    cs = bsl.cases({"tiny": (64, 256)}, lambda gemm, n, k: 1)  # two stages of 128
    assert max(c["k_splits"] for c in cs) == 2


def test_word_sum_reads_little_endian_unsigned_words():
    gen = torch.Generator().manual_seed(0)
    buf = torch.randint(0, 256, (4096,), dtype=torch.uint8, generator=gen)
    expected = int(np.frombuffer(buf.numpy().tobytes(), dtype="<u4").astype(np.uint64).sum())
    assert bsl.word_sum(buf) == expected


def test_smoke_prints_the_cases(capsys):
    assert bsl.main(["--smoke", "--shapes", "8b_o"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(bsl.cases({"8b_o": bsl.SHAPES["8b_o"]}, lambda g, n, k: 4))
