import pytest
import torch

from specdec.pilot.agents import Budget, Candidate, SearchAgent
from specdec.pilot.directions import DIRECTIONS, Direction, Preconditions, register_direction
from specdec.pilot.gate import Gate
from specdec.pilot.loop import Pilot
from specdec.pilot.memory import Memory
from specdec.pilot.spec import SystemSpec, build

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
