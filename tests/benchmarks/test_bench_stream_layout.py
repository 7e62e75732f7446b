"""The stream-layout probe's CPU parts: its cases and the word sum its launches are checked against."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks.kernels import bench_stream_layout as bsl


def test_every_layout_runs_at_its_gemms_split_and_the_one_wave_shapes_sweep_the_splits():
    splits = {"w12_v7": 4, "q_v2": 2, "bf16_v2": 3, "w12_wide": 5, "q_wide": 6}
    cs = bsl.cases({"o": (4096, 4096), "head": (151936, 4096)}, lambda gemm, n, k: splits[gemm])
    plan = {(c["shape"], c["layout"]): c["k_splits"] for c in cs if c["why"] == "plan"}
    # the row tiles' layouts read the whole of K in one CTA
    split_of = {name: 1 if gemm == bsl.ROW_TILE else splits[gemm] for name, (_, _, gemm) in bsl.LAYOUTS.items()}
    assert plan == {(s, name): split_of[name] for s in ("o", "head") for name in bsl.LAYOUTS}
    assert {name for name, ks in split_of.items() if ks == 1} == {n for n in bsl.LAYOUTS if "16_" in n}
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


def test_the_gemms_and_the_read_floor_of_their_bytes_are_timed_beside_the_probe():
    # on the CPU every GEMM of GEMMS runs its reference path; what matters is that each is timed and that each byte
    # count gets its read floor (kind read_floor), with the probe's own arguments
    args = argparse.Namespace(calls=2, reps=1, l2_bytes=1 << 16, l2_factor=1.0)
    rows = bsl.time_gemms("tiny", 64, 256, args, torch.Generator().manual_seed(0), torch.device("cpu"), 1e10)
    kinds = [r["kind"] for r in rows if r["kind"] != "read_floor"]
    assert kinds == list(bsl.GEMMS) and all(r["shape"] == "tiny" and r["cold_s"] > 0 for r in rows), rows
    floors = {r["weight_bytes"] for r in rows if r["kind"] == "read_floor"}
    assert floors == {r["weight_bytes"] for r in rows if r["kind"] != "read_floor"}


def test_the_probe_compiles_for_sm90_with_every_layout(tmp_path):
    # stream_probe.cu includes the library's source: a change there that breaks the probe shows here, not on the GPU
    from specdec.kernels.cuda.build import build_command

    nvcc = shutil.which("nvcc")
    if nvcc is None:  # as the library's own tests: no CUDA toolkit, nothing to compile with
        pytest.skip("no nvcc on this machine")
    out = tmp_path / "stream_probe.so"
    cmd = build_command(out, nvcc=nvcc)
    source = Path(bsl.__file__).with_name(bsl.SOURCE_NAME)
    cmd = [str(source) if part.endswith("skinny_gemm.cu") else part for part in cmd]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    names = subprocess.run(["nm", "-D", str(out)], capture_output=True, text=True, check=True).stdout
    assert "specdec_probe_stream" in names and "specdec_probe_error" in names
