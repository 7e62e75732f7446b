"""The wide kernels' trace reader: the phases of a CTA add up to its life whatever its clock readings, a CTA that did
not run is left out, a half-written record is refused, and the command line names what it cannot take."""

from __future__ import annotations

import json
import random

import pytest

from benchmarks.kernels import wide_trace


def _record(times: dict, sm: int, split: int, last: bool, k_splits: int) -> list[int]:
    rec = [times.get(f, 0) for f in wide_trace.FIELDS]
    rec[wide_trace.FIELDS.index("meta")] = sm | split << 16 | int(last) << 32 | k_splits << 40
    return rec


def _increasing(rng: random.Random, names: list[str], t0: int) -> dict:
    t, out = t0, {}
    for name in names:
        t += rng.randrange(1, 5000)
        out[name] = t
    return out


@pytest.mark.parametrize("seed", range(5))
def test_the_phases_of_every_kind_of_cta_add_up_to_its_life(seed):
    rng = random.Random(seed)
    split_last = _increasing(rng, ["start", "consumed", "ring_done", "summed", "partial", "counted", "reduced", "end"], 10)
    split_other = _increasing(rng, ["start", "consumed", "ring_done", "summed", "partial", "counted", "end"], 10)
    whole = _increasing(rng, ["start", "consumed", "ring_done", "summed", "end"], 10)
    cases = [
        (split_last, True, 4, ("loop", "sums", "partial", "count", "reduce", "store")),
        (split_other, False, 4, ("loop", "sums", "partial", "count", "exit")),
        (whole, True, 1, ("loop", "sums", "store")),
    ]
    for times, last, k_splits, parts in cases:
        p = wide_trace.cta_phases(_record(times, 3, 1, last, k_splits))
        assert sum(p[ph] for ph in parts) == times["end"] - times["start"], (times, p)
        assert all(p[ph] is None for ph in wide_trace.PHASES if ph not in parts + ("wait_warps",))
        assert (p["sm"], p["split"], p["last"], p["k_splits"]) == (3, 1, last, k_splits)


def test_a_call_spans_its_first_start_to_its_last_end_and_skips_ctas_that_did_not_run():
    a = _record(
        dict(start=1000, consumed=5000, ring_done=6000, summed=6100, partial=6500, counted=7000, end=7100), 0, 0, False, 2
    )
    b = _record(
        dict(start=1200, consumed=8000, ring_done=8200, summed=8300, partial=8700, counted=9100, reduced=9900, end=10400),
        1,
        1,
        True,
        2,
    )
    not_run = [0] * len(wide_trace.FIELDS)
    t = wide_trace.call_times([a, not_run, b])
    assert (t["ctas"], t["span"], t["skew"], t["tail"]) == (2, 10400 - 1000, 200, 10400 - 8200)
    assert t["critical"]["reduce"] == 800 and t["critical"]["store"] == 500  # b ends last
    assert t["median"]["partial"] == (400 + 400) / 2 and t["median"]["exit"] == 100


def test_the_warp_warp_0_waited_for_is_named_by_its_lag():
    times = dict(start=100, consumed=5000, ring_done=5800, summed=5900, end=6400, group1=5700, escapes=4800, producer=3000)
    p = wide_trace.cta_phases(_record(times, 0, 0, True, 1))
    assert (p["wait_warps"], p["group1_lag"], p["escape_lag"], p["producer_lag"]) == (800, 700, -200, -2000)
    q_view = dict(times, escapes=0)  # the Q kernel has no escape warp
    assert wide_trace.cta_phases(_record(q_view, 0, 0, True, 1))["escape_lag"] is None
    t = wide_trace.call_times([_record(times, 0, 0, True, 1)])
    assert t["critical"]["group1_lag"] == 700 and t["critical_record"]["group1"] == 5700 - 100
    assert t["critical_record"]["start"] == 0 and t["critical_record"]["reduced"] == 0  # a point it did not reach


def test_a_half_written_record_or_an_empty_call_is_refused():
    half = _record(dict(start=10, ring_done=20), 0, 0, True, 1)  # no end
    with pytest.raises(ValueError, match="rec: expected a CTA that ran"):
        wide_trace.cta_phases(half)
    with pytest.raises(ValueError, match="records: expected at least one CTA"):
        wide_trace.call_times([[0] * len(wide_trace.FIELDS)])
    with pytest.raises(ValueError, match="calls: expected at least one"):
        wide_trace.summarize([])


def test_smoke_writes_the_made_up_trace_and_its_plot(tmp_path):
    out = tmp_path / "trace.json"
    assert wide_trace.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["linear"] for r in result["rows"]] == ["split", "whole", "persistent"] and "nothing measured" in result["device"]
    assert [r["persistent"] for r in result["rows"]] == [False, False, True]
    assert (tmp_path / "trace.png").exists() and result["provenance"]["seed"] == 0
    by_sm = result["rows"][0]["sm_effect"]  # two made-up calls, the second 40 ns later on every SM
    assert by_sm["split_half_r"] == 1.0 and by_sm["sm_mean"].keys() == {"0", "1"}


def _persistent(start: int, ring_done: int, end: int, loop: int, wait: int, epilogue: int, segments: int, partial: int):
    rec = dict(start=start, ring_done=ring_done, end=end, seg_loop=loop, seg_wait=wait, seg_epilogue=epilogue)
    rec["segments"] = segments | partial << 16
    return _record(rec, 9, 0, False, 1)


@pytest.mark.parametrize("seed", range(5))
def test_a_persistent_ctas_phases_add_up_to_its_life(seed):
    rng = random.Random(seed)
    start = rng.randrange(1, 10_000)
    loop, wait, epilogue, between, finish = (rng.randrange(0, 50_000) for _ in range(5))
    ring_done = start + loop + wait + epilogue + between
    segments, partial = rng.randrange(1, 12), rng.randrange(0, 3)
    p = wide_trace.cta_phases(_persistent(start, ring_done, ring_done + finish, loop, wait, epilogue, segments, partial))
    assert sum(p[ph] for ph in ("loop", "wait_warps", "epilogue", "between", "finish")) == ring_done + finish - start
    assert (p["between"], p["finish"], p["segments"], p["partial_segments"], p["sm"]) == (between, finish, segments, partial, 9)


def test_a_persistent_call_keeps_its_sums_as_durations_and_refuses_mixed_or_half_written_records():
    a = _persistent(1000, 9000, 9500, 6000, 500, 1200, 3, 2)
    b = _persistent(1100, 9800, 10900, 6500, 700, 1300, 2, 2)
    t = wide_trace.call_times([a, b])
    assert t["persistent"] and (t["span"], t["skew"], t["tail"]) == (10900 - 1000, 100, 10900 - 9800)
    assert t["critical"]["finish"] == 1100 and t["critical"]["segments"] == 2  # b ends last
    assert t["critical_record"]["seg_loop"] == 6500 and t["critical_record"]["end"] == 10900 - 1100
    split = _record(dict(start=1000, consumed=5000, ring_done=6000, summed=6100, end=6200), 0, 0, True, 1)
    with pytest.raises(ValueError, match="persistent and split-K records together"):
        wide_trace.call_times([a, split])
    half = _persistent(1000, 0, 9500, 6000, 500, 1200, 3, 2)
    with pytest.raises(ValueError, match="expected a persistent CTA that ran"):
        wide_trace.cta_phases(half)


def test_a_persistent_rows_ctas_are_the_ctas_that_ran_not_the_records_its_plan_reads(monkeypatch):
    import argparse
    import types

    import torch

    from specdec.kernels.cuda import ops

    ran = [_persistent(1000, 9000, 9500, 6000, 500, 1200, 3, 2), _persistent(1100, 9800, 10900, 6500, 700, 1300, 2, 2)]
    reads = []
    fake = types.SimpleNamespace(
        w12_gemm_wide=ops.w12_gemm_wide,  # the CPU reference path: the product check still runs
        q_gemm_wide=ops.q_gemm_wide,
        wide_plan=lambda kind, m, n, k, sms: dict(ctas_x=2, k_splits=2),  # a persistent plan: records for 4, 2 run
        wide_trace_reset=lambda device: None,
        wide_trace_read=lambda n: reads.append(n) or torch.tensor(ran + [[0] * len(ran[0])] * (n - len(ran))),
    )
    args = argparse.Namespace(l2_bytes=1 << 20, l2_factor=1.0, reps=2, trace_ctas=64)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(multi_processor_count=2))
    row = wide_trace.trace_case(
        fake, "made-up", "o", 256, 256, 33, "w12", args, torch.Generator().manual_seed(0), torch.device("cpu")
    )
    assert reads == [4, 4] and row["product_ok"] and row["persistent"]
    assert (row["ctas"], row["k_splits"]) == (2, 1)


def _tensor_map_ops(records: list[list[int]], reads: list[int]):
    import types

    import torch
    import torch.nn.functional as F

    return types.SimpleNamespace(
        BF16_VARIANT_ENV="SPECDEC_BF16_CUDA_VARIANT",
        skinny_gemm_bf16=lambda x, w: F.linear(x, w),  # the product the persistent kernel computes
        launch_plan=lambda kind, m, n, k, sms: dict(ctas_x=3, k_splits=2),  # 3 persistent CTAs, at most 2 pieces a block
        wide_trace_reset=lambda device: None,
        wide_trace_read=lambda n: reads.append(n) or torch.tensor(records + [[0] * len(wide_trace.FIELDS)] * (n - len(records))),
    )


def test_the_1_16_token_persistent_kernel_is_traced_and_a_call_it_did_not_run_is_named(monkeypatch):
    import argparse
    import types

    import torch

    run = _persistent(1000, 9000, 9500, 6000, 500, 1200, 2, 1)
    run[wide_trace.FIELDS.index("producer")] = 7000
    run[wide_trace.FIELDS.index("summed")] = 300  # durations in this kernel's records, not clock readings
    run[wide_trace.FIELDS.index("partial")] = 500
    for field, ns in (("counted", 20), ("reduced", 60), ("group1", 70), ("escapes", 280)):
        run[wide_trace.FIELDS.index(field)] = ns
    args = argparse.Namespace(l2_bytes=1 << 20, l2_factor=1.0, reps=2, trace_ctas=64)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(multi_processor_count=2))
    reads: list[int] = []

    def trace(records):
        fake = _tensor_map_ops(records, reads)
        gen = torch.Generator().manual_seed(0)
        return wide_trace.trace_case(fake, "made-up", "qkv", 256, 256, 16, "bf16_v3", args, gen, torch.device("cpu"))

    row = trace([run])
    assert reads == [3, 3] and row["product_ok"] and row["persistent"] and "error" not in row
    assert row["critical"]["issued"] == 6000 and row["critical"]["segments"] == 2
    assert (row["critical"]["epi_sums"], row["critical"]["epi_store"], row["critical"]["epi_rest"]) == (300, 500, 400)
    assert (row["critical"]["epi_acquire"], row["critical"]["epi_sums_warp0"], row["critical"]["epi_sums_escape"]) == (
        20,
        60,
        280,
    )
    assert row["calls"][0]["critical_record"]["summed"] == 300  # not read as a clock less the start
    assert row["calls"][0]["critical_record"]["escapes"] == 280
    split_k = trace([])  # the entry point ran its split-K kernel: nothing recorded
    assert "no CTA recorded" in split_k["error"] and "calls" not in split_k


def test_a_row_tile_call_is_traced_with_its_loop_sums_and_store(monkeypatch):
    import argparse
    import types

    import torch

    times = dict(start=1000, consumed=8000, ring_done=8200, summed=8300, end=8600, producer=7000, escapes=7900)
    tile = _record(times, 4, 0, True, 1)  # a row tile: no split, its own rows stored
    args = argparse.Namespace(l2_bytes=1 << 20, l2_factor=1.0, reps=1, trace_ctas=64)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(multi_processor_count=2))
    reads: list[int] = []
    fake = _tensor_map_ops([tile], reads)
    gen = torch.Generator().manual_seed(0)
    row = wide_trace.trace_case(fake, "made-up", "o", 256, 256, 1, "bf16_v4", args, gen, torch.device("cpu"))
    assert reads == [3] and row["product_ok"] and not row["persistent"] and row["k_splits"] == 1
    crit = row["critical"]
    assert (crit["loop"], crit["wait_warps"], crit["sums"], crit["store"]) == (7200, 200, 100, 300)
    assert (crit["producer_lag"], crit["escape_lag"], crit["partial"]) == (-1000, -100, None)


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--rows", "16"], "--rows"),
        (["--kinds", "bf16_v3", "--rows", "17"], "--rows"),
        (["--kinds", "bf16_v3,w12"], "--kinds"),
        (["--kinds", "q_v4,q"], "--kinds"),
        (["--rows", "x"], "--rows"),
        (["--linears", "up"], "--linears"),
        (["--kinds", "fp8"], "--kinds"),
        (["--reps", "0"], "--reps"),
    ],
)
def test_the_command_line_names_what_it_cannot_take(argv, named, capsys):
    with pytest.raises(SystemExit):
        wide_trace.main(argv + ["--smoke"])
    assert named in capsys.readouterr().err


def _calls_by_sm(rng: random.Random, offsets: list[float], noise: float, n_calls: int = 8) -> list[dict[int, list[int]]]:
    return [
        {sm: [round(10_000 + off + rng.gauss(0, noise)) for _ in range(3)] for sm, off in enumerate(offsets)}
        for _ in range(n_calls)
    ]


def test_a_slow_sm_that_stays_slow_is_told_from_chance():
    rng = random.Random(0)
    offsets = [rng.choice((0.0, 1500.0)) for _ in range(64)]  # half the SMs 1.5 us late in every call
    fixed = wide_trace.sm_effect(_calls_by_sm(rng, offsets, noise=200))
    assert fixed["split_half_r"] > 0.9 and 1200 < fixed["sm_spread"] < 2000
    assert fixed["within_spread"] < 800 and set(fixed["by_ctas"]) == {3}
    chance = wide_trace.sm_effect(_calls_by_sm(rng, [0.0] * 64, noise=1500))
    assert abs(chance["split_half_r"]) < 0.5


def test_the_sm_effect_needs_two_calls_and_two_sms():
    with pytest.raises(ValueError, match="at least two traced calls"):
        wide_trace.sm_effect([{0: [1], 1: [2]}])
    with pytest.raises(ValueError, match="at least two SMs"):
        wide_trace.sm_effect([{0: [1]}, {0: [2], 1: [3]}])


def test_loop_ends_are_grouped_by_the_sm_in_the_record():
    def rec(sm, start, done):
        return _record(dict(start=start, ring_done=done, end=done + 10), sm, 0, True, 1)

    ends = wide_trace.sm_loop_ends([rec(2, 50, 900), rec(7, 40, 400), rec(2, 60, 700)])
    assert ends == {2: [660, 860], 7: [360]}
