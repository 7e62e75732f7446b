import time

import pytest
import torch

from specdec.pilot.agents import Agent, Budget, KernelAgent, KernelCase, LLMAgent, SearchAgent, explore_all, rank_kernels
from specdec.pilot.directions import DIRECTIONS
from specdec.pilot.spec import SystemSpec

# the speedup a draft length "really" gives; 6 is best
TRUE_SPEEDUP = {2: 1.10, 3: 1.20, 4: 1.25, 6: 1.40, 8: 1.30, 12: 1.05}


class NoisyEvaluator:
    """True speedup plus noise that shrinks with effort; deterministic, counts what it was asked."""

    def __init__(self, noise):
        self.noise, self.calls = noise, []

    def __call__(self, cand, base, effort):
        self.calls.append((cand.num_draft_tokens, effort))
        return TRUE_SPEEDUP[cand.num_draft_tokens] + self.noise.get(cand.num_draft_tokens, 0.0) / effort


def constant_evaluator(cand, base, effort):
    return TRUE_SPEEDUP.get(cand.num_draft_tokens, 1.0)


class FailingAgent:
    name = "failing"

    def explore(self, direction, spec, budget):
        raise RuntimeError("boom")


def test_successive_halving_recovers_the_best_setting_despite_low_effort_noise():
    # at effort 1, 12 looks best (1.05 + 0.5) and 6 worse than 8 (1.30 < 1.35); more effort reveals 6.
    ev = NoisyEvaluator({12: 0.5, 6: -0.1, 8: 0.05})
    best = SearchAgent(ev, eta=2).explore(DIRECTIONS["draft_length"], SystemSpec(), Budget(40))
    assert best.settings == {"num_draft_tokens": 6}
    assert best.spec.num_draft_tokens == 6 and best.base == SystemSpec()
    assert 4 not in [k for k, _ in ev.calls]  # the current setting is not re-evaluated
    assert max(e for _, e in ev.calls) >= 4


def test_search_respects_its_budget():
    ev = NoisyEvaluator({})
    SearchAgent(ev).explore(DIRECTIONS["draft_length"], SystemSpec(), Budget(3))
    assert sum(e for _, e in ev.calls) <= 3


def test_search_returns_none_when_no_setting_changes_the_spec():
    spec = SystemSpec(weight_format="w12", device="cuda")
    assert SearchAgent(constant_evaluator).explore(DIRECTIONS["weight_format"], spec, Budget(4)) is None


def test_llm_agent_validates_replies_and_retries_with_the_error():
    replies = iter(
        [
            "I think longer drafts help.",
            '{"settings": {"num_draft_tokens": 7}}',
            '{"settings": {"num_draft_tokens": 8}, "rationale": "ok"}',
        ]
    )
    prompts = []

    def client(prompt):
        prompts.append(prompt)
        return next(replies)

    agent = LLMAgent(client, constant_evaluator, attempts=3)
    cand = agent.explore(DIRECTIONS["draft_length"], SystemSpec(), Budget(2))
    assert cand.settings == {"num_draft_tokens": 8} and cand.raw_speedup == TRUE_SPEEDUP[8]
    assert len(agent.rejections) == 2
    assert "expected a JSON object" in agent.rejections[0]["error"]
    assert "expected one of" in agent.rejections[1]["error"]
    assert "previous reply was rejected" in prompts[1] and "draft_length" in prompts[0]


def test_llm_agent_reads_the_json_object_among_prose_and_other_braces():
    # a greedy {.*} takes everything from the first { to the last }: a reply with braces after its object fails
    agent = LLMAgent(lambda prompt: "", constant_evaluator)
    reply = 'Try {this}: {"settings": {"num_draft_tokens": 6}, "rationale": "code repeats"} -- then {maybe} 8.'
    settings, spec = agent.parse(DIRECTIONS["draft_length"], SystemSpec(), reply)
    assert settings == {"num_draft_tokens": 6} and spec.num_draft_tokens == 6
    with pytest.raises(ValueError, match="reply: invalid JSON"):
        agent.parse(DIRECTIONS["draft_length"], SystemSpec(), '{"settings": [6,')
    with pytest.raises(ValueError, match="reply: expected an object with a 'settings' object"):
        agent.parse(DIRECTIONS["draft_length"], SystemSpec(), '{"settings": {"num_draft_tokens": 6}')  # cut short


def test_llm_agent_cannot_change_fields_outside_its_direction():
    agent = LLMAgent(lambda p: '{"settings": {"verifier": "accept_all"}}', constant_evaluator, attempts=2)
    assert agent.explore(DIRECTIONS["draft_length"], SystemSpec(), Budget(1)) is None
    assert all("unknown knobs" in r["error"] for r in agent.rejections) and len(agent.rejections) == 2


def test_rank_kernels_puts_the_furthest_from_peak_first():
    ranked = rank_kernels({"gemm": 2.0, "norm": 1.0, "copy": 1.0}, {"gemm": 100, "norm": 20, "copy": 90}, 100.0)
    assert [name for name, _ in ranked] == ["norm", "gemm", "copy"]
    assert ranked[0][1] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="only one"):
        rank_kernels({"a": 1.0}, {"b": 1}, 1.0)


def test_kernel_agent_tunes_the_worst_kernel():
    slow = KernelCase("slow", 10, [{"s": 0.01}, {"s": 0.002}, {"s": 0.02}], lambda c: lambda: time.sleep(c["s"]))
    fast = KernelCase("fast", 10**9, [{"s": 0.0}, {"s": 0.05}], lambda c: lambda: time.sleep(c["s"]))
    cand = KernelAgent([slow, fast], peak_bandwidth=1e10, reps=2).explore(None, SystemSpec(), Budget(10))
    assert cand.settings == {"slow": {"s": 0.002}}
    assert cand.raw_speedup > 2


def test_agents_satisfy_the_protocol():
    assert isinstance(SearchAgent(constant_evaluator), Agent) and isinstance(LLMAgent(str, constant_evaluator), Agent)


def test_explore_all_records_agent_errors_and_checks_jobs():
    out = explore_all(
        [
            (FailingAgent(), "draft_length", SystemSpec(), Budget(1)),
            (SearchAgent(constant_evaluator), "draft_length", SystemSpec(), Budget(8)),
        ]
    )
    assert out[0].candidate is None and "boom" in out[0].error
    assert out[1].candidate.settings == {"num_draft_tokens": 6}
    with pytest.raises(ValueError, match="jobs\\[0\\]"):
        explore_all([(FailingAgent(), "no_such_direction", SystemSpec(), Budget(1))])
    with pytest.raises(ValueError, match="executor"):
        explore_all([], executor="threads")


@pytest.mark.slow
def test_process_executor_gives_the_serial_results():
    jobs = [
        (SearchAgent(constant_evaluator), "draft_length", SystemSpec(), Budget(8)),
        (SearchAgent(constant_evaluator), "ngram_order", SystemSpec(), Budget(4)),
    ]
    serial = explore_all(jobs)
    parallel = explore_all(jobs, executor="process", max_workers=2)
    assert [e.candidate.settings for e in parallel] == [e.candidate.settings for e in serial]
    assert parallel[0].candidate.settings == {"num_draft_tokens": 6}


def test_halving_picks_its_winner_from_the_most_thorough_rung_not_a_stale_early_score():
    # effort 1 eliminates 8 (1.7) and 12; 2, 3 and 6 fall at effort 2; 3 wins at efforts 4 and 8 with ~1.07.
    # 8's stale effort-1 score 1.7 beats that, but it was never measured as carefully.
    scripted = {1: {2: 2.0, 3: 1.9, 6: 1.8, 8: 1.7, 12: 1.0}, 2: {2: 1.0, 3: 1.1, 6: 1.05}, 4: {3: 1.08, 6: 1.02}, 8: {3: 1.07}}
    best = SearchAgent(lambda cand, base, effort: scripted[effort][cand.num_draft_tokens]).explore(
        DIRECTIONS["draft_length"], SystemSpec(), Budget(40)
    )
    assert best.settings == {"num_draft_tokens": 3} and best.raw_speedup == 1.07


def test_settings_that_give_the_same_system_are_evaluated_once():
    """tree_verifier's paths knob does nothing for an oracle drafter: six settings, three systems, three arms."""
    calls = []

    def evaluate(cand, base, effort):
        calls.append(cand.to_json())
        return 1.0

    spec = SystemSpec(drafter={"kind": "oracle"})
    direction = DIRECTIONS["tree_verifier"]
    systems = {direction.apply(spec, s).to_json() for s in direction.settings()} - {spec.to_json()}
    SearchAgent(evaluate).explore(direction, spec, Budget(100))
    first_rung = calls[: len(set(calls))]
    assert len(first_rung) == len(set(first_rung)) == len(systems) < len(direction.settings())


def test_dev_evaluator_runs_each_system_untimed_once_per_effort_and_times_the_next_calls():

    from specdec.pilot.agents import DevEvaluator

    calls, times = [], iter([50.0, 60.0, 2.0, 1.0, 2.0, 0.5, 70.0, 80.0, 3.0, 1.5])

    def timer(system, prompts, max_new_tokens, seed):
        calls.append(("AR" if system.drafter is None else "spec", len(prompts), max_new_tokens))
        return next(times)

    evaluator = DevEvaluator([torch.tensor([1, 2, 3, 1, 2, 3]), torch.tensor([4, 5, 6, 4, 5])], 8, timer=timer)
    cand, base = SystemSpec(num_draft_tokens=2), SystemSpec().autoregressive()
    assert evaluator(cand, base, 1) == 2.0  # the untimed 50 and 60 left out
    assert evaluator(cand, base, 1) == 4.0  # warmed already at this effort
    assert evaluator(cand, base, 2) == 2.0  # two prompts: other buckets, so untimed runs again first
    untimed = [("AR", 1, 8), ("spec", 1, 8)]
    assert calls == [*untimed, *untimed, ("AR", 1, 8), ("spec", 1, 8), ("AR", 2, 8), ("spec", 2, 8), ("AR", 2, 8), ("spec", 2, 8)]


@pytest.mark.parametrize("name", ["reps", "worst"])
@pytest.mark.parametrize("value", [0, -1, True, 1.5])
def test_kernel_agent_checks_reps_and_worst(name, value):
    case = KernelCase("k", 10, [{"s": 0.0}], lambda c: lambda: None)
    with pytest.raises(ValueError, match=rf"{name}: expected an int >= 1, got {value!r}"):
        KernelAgent([case], peak_bandwidth=1e10, **{name: value})


@pytest.mark.parametrize("bad", [0.0, -2.0, float("inf")])
def test_dev_evaluator_refuses_a_timer_that_returns_no_time(bad):
    from specdec.pilot.agents import DevEvaluator

    evaluator = DevEvaluator(
        [torch.tensor([1, 2, 3, 1, 2, 3])], 8, timer=lambda system, *a: 1.0 if system.drafter is None else bad
    )
    with pytest.raises(ValueError, match=r"timer: expected seconds > 0 for the candidate system, got"):
        evaluator(SystemSpec(num_draft_tokens=2), SystemSpec().autoregressive(), 1)
