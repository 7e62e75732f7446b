"""TwoLevelGate and RateEstimate: argument checks and the decisions on scripted rates."""

from __future__ import annotations

import pytest

from specdec.verify.two_level_gate import RateEstimate, TwoLevelGate


def test_rate_estimate_first_round_sets_then_smooths():
    r = RateEstimate(smoothing=0.5)
    assert r.tokens_per_s == 0.0
    r.update(4, 2.0)
    assert (r.rounds, r.tokens, r.seconds, r.tokens_per_s) == (1, 4.0, 2.0, 2.0)
    r.update(8, 1.0)
    assert (r.rounds, r.tokens, r.seconds, r.tokens_per_s) == (2, 6.0, 1.5, 4.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(mode="maybe"), "mode: expected one of"),
        (dict(warmup=0), "warmup: expected an int >= 1"),
        (dict(warmup=True), "warmup: expected an int >= 1"),
        (dict(warmup=1.5), "warmup: expected an int >= 1"),
        (dict(probe_every=0), "probe_every: expected an int >= 1"),
        (dict(smoothing=0.0), "smoothing: expected 0 < smoothing <= 1"),
        (dict(smoothing=1.5), "smoothing: expected 0 < smoothing <= 1"),
    ],
)
def test_gate_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TwoLevelGate(**kwargs)


@pytest.mark.parametrize("mode, want", [("always", True), ("never", False)])
def test_fixed_modes_ignore_the_rates(mode, want):
    gate = TwoLevelGate(mode=mode, warmup=1, probe_every=2)
    for _ in range(7):
        assert gate.choose() is want
        gate.record(want, tokens=1 if want else 100, seconds=1.0)
    assert gate.decisions == 7


def play(gate: TwoLevelGate, rates: dict[bool, tuple[int, float]], rounds: int) -> list[bool]:
    """Run ``rounds`` decisions, each round of kind k reporting ``rates[k]`` (tokens, seconds)."""
    picks = []
    for _ in range(rounds):
        kind = gate.choose()
        picks.append(kind)
        tokens, seconds = rates[kind]
        gate.record(kind, tokens=tokens, seconds=seconds)
    return picks


def test_warmup_alternates_starting_with_two_level():
    gate = TwoLevelGate(warmup=3, probe_every=1000)
    picks = play(gate, {True: (1, 1.0), False: (9, 1.0)}, 6)
    assert picks == [True, False, True, False, True, False]
    assert gate.two_level.rounds == gate.one_level.rounds == 3


@pytest.mark.parametrize("faster", [True, False])
def test_after_warmup_the_faster_kind_is_preferred_and_the_other_probed(faster):
    gate = TwoLevelGate(warmup=1, probe_every=4)
    rates = {faster: (6, 1.0), (not faster): (2, 1.0)}
    picks = play(gate, rates, 14)
    assert picks[:2] == [True, False]
    # decisions 3..14: the preferred kind, except on every 4th decision (4, 8, 12) the other one
    for decision, pick in enumerate(picks[2:], start=3):
        assert pick == (faster if decision % 4 else not faster), (decision, picks)


def test_a_rate_that_changes_is_seen_through_the_probes():
    gate = TwoLevelGate(warmup=1, probe_every=3, smoothing=1.0)
    play(gate, {True: (2, 1.0), False: (5, 1.0)}, 6)
    assert gate.choose() is False  # decision 7: one-level is faster
    gate.record(False, tokens=5, seconds=1.0)
    # two-level becomes faster; the probe at decision 9 measures it and the gate switches
    picks = play(gate, {True: (9, 1.0), False: (5, 1.0)}, 4)
    assert picks == [False, True, True, True]


def test_ties_prefer_two_level():
    gate = TwoLevelGate(warmup=1, probe_every=1000)
    play(gate, {True: (3, 1.0), False: (3, 1.0)}, 2)
    assert gate.choose() is True


def test_record_needs_keyword_counts():
    gate = TwoLevelGate()
    with pytest.raises(TypeError):
        gate.record(True, 3, 1.0)
