import pytest
import torch

from specdec.pilot.agents import Budget, Candidate, DevEvaluator, SearchAgent
from specdec.pilot.directions import DIRECTIONS, Direction, Preconditions, drafter_choice, register_direction
from specdec.pilot.gate import Gate, target_pass_timer
from specdec.pilot.loop import Pilot
from specdec.pilot.memory import Memory, MemoryEntry, preconditions_of
from specdec.pilot.spec import SystemSpec, build
from specdec.testing.cheating import CheatingAgent

DEV = [torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])]
SEALED = [torch.tensor([4, 5, 6, 4, 5, 6])]
START = SystemSpec(drafter={"kind": "ngram", "max_ngram": 3}, num_draft_tokens=2)


def modelled_cost(spec):
    """Made-up seconds: each draft token saves 5%, a 4-gram drafter saves 20%, a tree verifier costs 10% more."""
    if spec.drafter["kind"] == "none":
        return 1.0
    cost = 1.0 - 0.05 * spec.num_draft_tokens
    cost *= 0.8 if spec.drafter.get("max_ngram") == 4 else 1.0
    return cost * (1.1 if spec.verifier["kind"] == "tree" else 1.0)


def timer(system, prompts, max_new_tokens, seed):
    return modelled_cost(system.spec)


def evaluate(cand, base, effort):
    return modelled_cost(base) / modelled_cost(cand)


@pytest.fixture(scope="module")
def stock():
    return build(START.autoregressive()).target


def _pilot(stock, memory, directions, per_round=2, agent_for=None):
    return Pilot(
        START,
        DEV,
        Gate(stock, SEALED, 16, timer=timer),
        16,
        memory=memory,
        bandwidth=1e9,
        agent_for=agent_for or (lambda d: SearchAgent(evaluate)),
        budget=Budget(12),
        directions=directions,
        directions_per_round=per_round,
        stock_spec=START.autoregressive(),
    )


def test_a_round_stacks_winners_on_different_fields_and_remembers_everything(stock):
    memory = Memory()
    result = _pilot(stock, memory, ["draft_length", "ngram_order", "tree_verifier"], per_round=3).run(rounds=1)
    record = result.rounds[0]
    by_direction = {c.direction: c for c in record.candidates}
    assert by_direction["draft_length"].accepted and by_direction["ngram_order"].accepted
    assert by_direction["tree_verifier"].verdict is None or not by_direction["tree_verifier"].accepted
    assert sorted(record.integrated) == ["draft_length", "ngram_order"]
    assert record.integration is not None and record.integration.accepted
    assert result.final.num_draft_tokens == 12 and result.final.drafter["max_ngram"] == 4
    assert record.integration.speedup == pytest.approx(modelled_cost(START) / modelled_cost(result.final))
    mechanisms = [e.mechanism for e in memory.entries()]
    assert "draft_length" in mechanisms and "ngram_order" in mechanisms
    assert any("+" in m for m in mechanisms)


def test_rounds_continue_from_the_new_spec_and_stop_when_nothing_helps(stock):
    result = _pilot(stock, Memory(), ["draft_length"]).run(rounds=2)
    assert result.rounds[0].spec_after.num_draft_tokens == 12
    assert result.rounds[1].spec_before == result.rounds[0].spec_after
    assert result.rounds[1].candidates[0].verdict is None  # every other length is slower: nothing proposed
    assert result.final.num_draft_tokens == 12


def test_remembered_mechanisms_are_explored_first_on_a_matching_system(stock):
    memory = Memory()
    _pilot(stock, memory, ["ngram_order"], per_round=1).run(rounds=1)
    pilot = _pilot(stock, memory, None, per_round=1)
    system = build(START, target=stock)
    from specdec.pilot import cost
    from specdec.pilot.profile import profile_system

    ranked = cost.gaps(profile_system(system, DEV, 16, bandwidth=1e9))
    assert pilot.choose_directions(START, ranked) == ["ngram_order"]


def test_a_replayed_memory_entry_is_explored_first_too(stock):
    """A winner replayed from memory is remembered as ``memory:<mechanisms>``; its mechanisms still lead."""
    from specdec.pilot.memory import MemoryEntry, preconditions_of

    memory = Memory()
    change = {"drafter": {"kind": "ngram", "max_ngram": 2}}
    memory.add(MemoryEntry("memory:ngram_order", preconditions_of(START), change, 1.5, 1.2, 1.8, "PASS", True))
    pilot = _pilot(stock, memory, None, per_round=1)
    assert pilot.choose_directions(START, []) == ["ngram_order"]


def test_a_registered_direction_is_explored_without_changing_the_loop(stock):
    name = "draft_length_odd"
    register_direction(
        Direction(
            name,
            "odd draft lengths",
            ("acceptance",),
            Preconditions(drafter_kinds=("ngram",)),
            {"num_draft_tokens": (5, 7)},
            lambda spec, s: spec.with_changes(**s),
            fields=("num_draft_tokens",),
        )
    )
    try:
        result = _pilot(stock, Memory(), [name], per_round=1).run(rounds=1)
        assert result.rounds[0].candidates[0].direction == name
        assert result.final.num_draft_tokens == 7
    finally:
        del DIRECTIONS[name]


def test_a_failing_candidate_does_not_become_the_spec(stock):
    class WorseAgent:
        name = "worse"

        def explore(self, direction, spec, budget):
            worse = spec.with_changes(verifier={"kind": "tree", "budget": 8})
            return Candidate(direction.name, worse, spec, {"budget": 8}, 1.5)

    result = _pilot(stock, Memory(), ["tree_verifier"], per_round=1, agent_for=lambda d: WorseAgent()).run(rounds=1)
    cand = result.rounds[0].candidates[0]
    assert cand.raw_speedup == 1.5 and not cand.accepted and cand.verdict.speedup < 1
    assert result.final == START


AR_START = START.autoregressive()


def _register_ngram_choice():
    register_direction(drafter_choice({"ngram3": {"kind": "ngram", "max_ngram": 3}}), replace=True)


def _from_ar(stock, memory, replay):
    return Pilot(
        AR_START,
        DEV,
        Gate(stock, SEALED, 16, timer=timer),
        16,
        memory=memory,
        bandwidth=1e9,
        agent_for=lambda d: SearchAgent(evaluate),
        budget=Budget(12),
        directions=["drafter_choice", "draft_length"],
        directions_per_round=2,
        stock_spec=AR_START,
        replay_memory=replay,
    )


def test_a_new_deployment_replays_memory_and_reaches_the_spec_in_fewer_rounds(stock):
    _register_ngram_choice()
    try:
        memory = Memory()
        first = _from_ar(stock, memory, replay=True).run(rounds=3)
        # from AR only the drafter choice applies; the draft length follows in the next round
        assert first.rounds[0].integrated == ["drafter_choice"] and first.rounds[1].integrated == ["draft_length"]
        assert first.final.drafter == {"kind": "ngram", "max_ngram": 3} and first.final.num_draft_tokens == 12

        replayed = _from_ar(stock, memory, replay=True).run(rounds=1)
        record = replayed.rounds[0]
        assert record.integrated == ["memory:drafter_choice+draft_length"]
        assert record.spec_after == first.final
        memory_candidate = record.candidates[0]
        assert memory_candidate.agent == "memory" and memory_candidate.accepted and memory_candidate.verdict.forcing_passed
        assert record.seconds > 0

        empty = _from_ar(stock, Memory(), replay=True).run(rounds=1)
        assert empty.final != first.final  # one round from an empty memory does not get there
    finally:
        del DIRECTIONS["drafter_choice"]


def test_remembered_follows_matching_entries_and_skips_mechanisms_not_allowed(stock):
    memory = Memory()
    memory.add(
        MemoryEntry("drafter_choice", preconditions_of(AR_START), {"drafter": dict(START.drafter)}, 2.0, 1.5, 2.5, "PASS", True)
    )
    memory.add(MemoryEntry("draft_length", preconditions_of(START), {"num_draft_tokens": 8}, 1.2, 1.1, 1.3, "PASS", True))
    memory.add(
        MemoryEntry(
            "ngram_order", preconditions_of(START), {"drafter": {"kind": "ngram", "max_ngram": 5}}, 3.0, 2.9, 3.1, "PASS", True
        )
    )
    memory.add(MemoryEntry("draft_length", preconditions_of(START), {"num_draft_tokens": 6}, 9.0, 8.0, 10.0, "FAIL", False))
    pilot = Pilot(AR_START, DEV, Gate(stock, SEALED, 16, timer=timer), 16, memory=memory, stock_spec=AR_START)
    spec, used = pilot.remembered(AR_START)
    # the drafter field is set once (ngram_order's later edit of it is skipped); the rejected entry is never used
    assert used == ["drafter_choice", "draft_length"]
    assert spec == START.with_changes(num_draft_tokens=8)
    only_drafter = Pilot(
        AR_START, DEV, Gate(stock, SEALED, 16, timer=timer), 16, memory=memory, stock_spec=AR_START, directions=["draft_length"]
    )
    assert only_drafter.remembered(AR_START) == (AR_START, [])


def test_an_extra_cheating_agent_is_rejected_on_forcing_beside_honest_directions():
    start = SystemSpec(
        target={"kind": "tiny", "seed": 0, "weight_scale": 4.0}, drafter={"kind": "ngram", "max_ngram": 2}, num_draft_tokens=4
    )
    dev = [torch.tensor([20, 21, 22, 20, 21, 22, 20, 21])]
    sealed = [torch.tensor([7, 8, 9, 7, 8, 9, 7, 8]), torch.tensor([11, 12, 11, 12, 11, 12])]
    stock = build(start.autoregressive()).target
    evaluator = DevEvaluator(dev, 24, timer=target_pass_timer)
    pilot = Pilot(
        start,
        dev,
        Gate(stock, sealed, 24, timer=target_pass_timer),
        24,
        memory=Memory(),
        bandwidth=1e9,
        agent_for=lambda d: SearchAgent(evaluator),
        budget=Budget(4),
        directions=["draft_length"],
        directions_per_round=1,
        stock_spec=start.autoregressive(),
        extra_agents=[CheatingAgent(evaluator)],
    )
    record = pilot.run(rounds=1).rounds[0]
    cheats = [c for c in record.candidates if c.agent == "cheating"]
    assert len(cheats) == 1 and cheats[0].direction == "accept_all"
    assert not cheats[0].accepted and not cheats[0].verdict.forcing_passed
    assert "accept_all" not in record.integrated
    with pytest.raises(TypeError, match="extra_agents"):
        Pilot(start, dev, pilot.gate, 24, extra_agents=[object()])
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match=rf"max_new_tokens: expected an int >= 1, got {bad!r}"):
            Pilot(start, dev, pilot.gate, bad)


def test_a_candidate_the_gate_cannot_build_is_recorded_and_the_round_goes_on(stock):
    class BrokenAgent:
        name = "broken"

        def explore(self, direction, spec, budget):
            broken = spec.with_changes(verifier={"kind": "specdec.verify:NoSuchVerifier"})
            return Candidate("broken", broken, spec, {}, 2.0)

    pilot = _pilot(stock, Memory(), ["draft_length"], per_round=1)
    pilot.extra_agents = [BrokenAgent()]
    record = pilot.run(rounds=1).rounds[0]
    broken = [c for c in record.candidates if c.agent == "broken"]
    assert len(broken) == 1 and broken[0].verdict is None and "NoSuchVerifier" in broken[0].error
    assert record.integrated == ["draft_length"]


def test_a_faster_stack_replaces_the_best_single_winner_even_when_measured_with_more_spread():
    """The H200 8B round: graphs alone 5.96x (tight interval), graphs + drafter 13.15x (wide): the stack must win."""
    from specdec.pilot.gate import GateVerdict
    from specdec.pilot.loop import prefer_stack

    def verdict(speedup, low, high, accepted=True):
        return GateVerdict(accepted, accepted, [], speedup, (low, high), [speedup] * 3)

    graphs_alone = verdict(5.96, 5.5, 6.4)
    assert prefer_stack(verdict(13.15, 2.0, 80.0), graphs_alone)
    assert not prefer_stack(verdict(4.0, 3.9, 4.1), graphs_alone)
    assert not prefer_stack(verdict(13.15, 2.0, 80.0, accepted=False), graphs_alone)
