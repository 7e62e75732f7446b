"""The W12 prefill benchmark's CPU smoke run checks and times every variant; a variant off the product fails it."""

from __future__ import annotations

import json

import pytest

from benchmarks.kernels import bench_w12_prefill


def test_smoke_checks_and_times_every_variant(tmp_path):
    out = tmp_path / "w12_prefill.json"
    assert bench_w12_prefill.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert not result["failed"] and not result["not_run"] and out.with_suffix(".png").is_file()
    assert {(r["linear"], r["M"]) for r in result["rows"]} == {(s, m) for s in ("o", "gate_up") for m in (4, 8)}
    for row in result["rows"]:
        assert all(row[f"{v}_ms"] > 0 for v in bench_w12_prefill.VARIANTS), row
    want = bench_w12_prefill.LAYERS * sum(r["dequant_ms"] for r in result["rows"] if r["M"] == 8)
    assert bench_w12_prefill.prefill_ms(result["rows"], 8, "dequant", ("o", "gate_up")) == pytest.approx(want)


def test_a_variant_off_the_product_fails_the_run(tmp_path, monkeypatch):
    exact = bench_w12_prefill.variant_calls

    def calls(w, w12):
        made = exact(w, w12)
        triton = made["triton"]
        made["triton"] = lambda x: triton(x) * 1.1
        return made

    monkeypatch.setattr(bench_w12_prefill, "variant_calls", calls)
    out = tmp_path / "w12_prefill.json"
    assert bench_w12_prefill.main(["--smoke", "--out", str(out)]) == 1
    rows = json.loads(out.read_text())["rows"]
    assert all("triton_error" in r and "triton_ms" not in r and "dequant_ms" in r for r in rows)


def test_a_decode_off_the_weight_fails_the_run(tmp_path, monkeypatch):
    exact = bench_w12_prefill.variant_calls

    def calls(w, w12):
        made = exact(w, w12)
        decode = made["decode_only"]
        made["decode_only"] = lambda x: decode(x).neg()
        return made

    monkeypatch.setattr(bench_w12_prefill, "variant_calls", calls)
    out = tmp_path / "w12_prefill.json"
    assert bench_w12_prefill.main(["--smoke", "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    assert not result["rows"] and len(result["failed"]) == 2 and "decode" in result["failed"][0]


def test_crossover_is_the_fewest_rows_from_which_dequant_wins_everywhere():
    def row(name, m, dq, tr):
        return {"linear": name, "M": m, "dequant_ms": dq, "triton_ms": tr}

    rows = [
        row("a", 128, 2, 1),
        row("b", 128, 1, 2),
        row("a", 256, 1, 2),
        row("b", 256, 1, 2),
        row("a", 512, 1, 3),
        row("b", 512, 1, 3),
    ]
    assert bench_w12_prefill.crossover(rows, ("a", "b"), (128, 256, 512)) == 256
    rows[-1]["dequant_ms"] = 9  # a loss at the widest rows: no M from which it wins everywhere
    assert bench_w12_prefill.crossover(rows, ("a", "b"), (128, 256, 512)) is None


@pytest.mark.parametrize("argv, match", [(["--rows", "0,4"], "--rows"), (["--rows", "a"], "--rows"), (["--reps", "0"], "--reps")])
def test_bad_arguments_are_refused_with_their_name(argv, match, capsys):
    with pytest.raises(SystemExit):
        bench_w12_prefill.main(["--smoke", *argv])
    assert match in capsys.readouterr().err
