import pytest
import torch

import specdec as sd
from specdec.pilot.agents import Budget, DevEvaluator, SearchAgent
from specdec.pilot.directions import DIRECTIONS
from specdec.pilot.gate import Gate, target_pass_timer
from specdec.pilot.loop import Pilot
from specdec.pilot.memory import Memory
from specdec.pilot.spec import SystemSpec, build
from specdec.testing.cheating import ACCEPT_ALL_KIND, AcceptAllVerifier, CheatingAgent

DEV = [torch.tensor([20, 21, 22, 20, 21, 22, 20, 21]), torch.tensor([30, 31, 30, 31, 30, 31])]
SEALED = [torch.tensor([7, 8, 9, 7, 8, 9, 7, 8]), torch.tensor([11, 12, 11, 12, 11, 12])]
# weight_scale 4: logit margins of several units, so a wrong token is a large-margin event (at the default
# scale the tiny model's top logits are near-ties, which token forcing rightly forgives)
START = SystemSpec(
    target={"kind": "tiny", "seed": 0, "weight_scale": 4.0}, drafter={"kind": "ngram", "max_ngram": 2}, num_draft_tokens=4
)


@pytest.fixture(scope="module")
def stock():
    return build(START.autoregressive()).target


def test_accept_all_verifier_emits_drafts_the_target_would_not():
    system = build(START.with_changes(verifier={"kind": ACCEPT_ALL_KIND}))
    assert isinstance(system.verifier, AcceptAllVerifier)
    prompt = DEV[1][None]
    cheat = system.generate(prompt, 24)
    honest = sd.generate(system.target, prompt, 24)
    assert cheat.stats.target_passes < honest.stats.target_passes
    assert not torch.equal(cheat.tokens, honest.tokens)


def test_gate_rejects_the_cheat_although_its_raw_speedup_beats_the_honest_candidate(stock):
    evaluator = DevEvaluator(DEV, 24, timer=target_pass_timer)
    cheat = CheatingAgent(evaluator).explore(DIRECTIONS["draft_length"], START, Budget(4))
    honest = SearchAgent(evaluator).explore(DIRECTIONS["ngram_order"], START, Budget(4))
    honest_raw = honest.raw_speedup if honest is not None else 1.0
    assert cheat.raw_speedup > max(honest_raw, 1.2)

    gate = Gate(stock, SEALED, 24, timer=target_pass_timer)
    verdict = gate.judge(cheat.spec, START, stock_target=stock)
    assert verdict.speedup > 1.2 and verdict.ci95[0] > 1  # it is faster on the sealed prompts too
    assert not verdict.forcing_passed and not verdict.accepted
    assert any("large-margin" in f or "mismatch rate" in f for f in verdict.forcing_failures)


def test_a_pilot_run_with_the_cheating_agent_keeps_the_honest_spec(stock):
    evaluator = DevEvaluator(DEV, 24, timer=target_pass_timer)
    memory = Memory()
    pilot = Pilot(
        START,
        DEV,
        Gate(stock, SEALED, 24, timer=target_pass_timer),
        24,
        memory=memory,
        bandwidth=1e9,
        agent_for=lambda d: CheatingAgent(evaluator),
        directions=["draft_length"],
        directions_per_round=1,
        stock_spec=START.autoregressive(),
    )
    result = pilot.run(rounds=1)
    record = result.rounds[0].candidates[0]
    assert record.raw_speedup > 1.2 and not record.accepted and not record.verdict.forcing_passed
    assert result.final == START
    [entry] = memory.entries()
    assert entry.forcing_verdict == "FAIL" and not entry.accepted and entry.failure_modes[0].startswith("token forcing failed")
