import time

import pytest
import torch

import specdec as sd
from specdec.pilot.profile import (
    STAGES,
    CommitTimer,
    acceptance_ceiling,
    copy_bandwidth,
    kernel_table,
    measure_ceilings,
    module_bytes,
    profile_system,
)
from specdec.pilot.spec import SystemSpec, build

PROMPT = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2, 3, 1])


def test_copy_bandwidth_probe_runs_on_the_cpu_and_checks_arguments():
    assert copy_bandwidth("cpu", nbytes=1 << 20, reps=2) > 0
    with pytest.raises(ValueError, match="nbytes"):
        copy_bandwidth("cpu", nbytes=0)


def test_module_bytes_counts_shared_weights_once():
    lin = torch.nn.Linear(8, 8, bias=False)
    twin = torch.nn.Sequential(lin, lin)
    assert module_bytes(twin) == 8 * 8 * 4
    target = build(SystemSpec()).target
    unique = {p.data_ptr(): p.numel() * p.element_size() for p in target.parameters()}
    assert module_bytes(target) >= sum(unique.values())
    assert module_bytes(sd.NGramDrafter()) == 0


def test_acceptance_ceiling_is_one_plus_the_longest_proposal():
    assert acceptance_ceiling([5, 0, 0, 0, 1], 8) == 5.0
    assert acceptance_ceiling([5, 0, 0, 0, 1], 2) == 3.0
    assert acceptance_ceiling([0, 0], 4) == 5.0
    # the longest proposal offered, not only the longest run accepted (a weak drafter's rounds rarely reach it)
    assert acceptance_ceiling([4, 1], 8, longest_proposal=8) == 9.0
    assert acceptance_ceiling([4, 0, 0, 1], 8, longest_proposal=2) == 4.0  # a second draft accepted past the first
    with pytest.raises(ValueError, match="longest_proposal: expected an int >= 0, got -1"):
        acceptance_ceiling([1], 4, longest_proposal=-1)
    with pytest.raises(ValueError, match="num_draft_tokens"):
        acceptance_ceiling([], -1)


def test_profile_matches_the_generation_stats_it_is_built_from():
    system = build(SystemSpec(num_draft_tokens=3))
    profile = profile_system(system, [PROMPT], 24, bandwidth=1e9)
    stats = system.generate(PROMPT[None], 24, seed=0).stats
    assert set(profile.stages) == set(STAGES) and profile.stages["commit"] > 0.0
    assert profile.tokens == 24 and profile.rounds == stats.rounds
    assert profile.tau == pytest.approx((24 - 1) / stats.rounds)
    assert profile.accepted_histogram == stats.accepted_histogram
    assert profile.ceilings.stages["verify"] == pytest.approx(module_bytes(system.target) / 1e9)
    assert profile.ceilings.tau <= 1 + 3


def test_commit_time_is_its_own_stage_and_leaves_verify():
    system = build(SystemSpec(num_draft_tokens=3))
    commit = system.target.commit
    delay = 0.05  # several times a round's verify on a loaded 2-core CPU (~13 ms), so the checks below do not race it

    def slow_commit(*args, **kwargs):
        time.sleep(delay)
        return commit(*args, **kwargs)

    object.__setattr__(system.target, "commit", slow_commit)
    try:
        profile = profile_system(system, [PROMPT], 24, bandwidth=1e9)
    finally:
        object.__delattr__(system.target, "commit")
    # one commit per round plus the prefill's (whose own run's is taken off): a sleep per round lands in commit;
    # were commit time left inside verify, verify would also hold a sleep per round
    assert profile.stages["commit"] >= 0.9 * delay
    assert profile.stages["verify"] < delay
    assert "commit" not in vars(system.target) or vars(system.target)["commit"] is not slow_commit


def test_commit_timer_restores_the_target_and_counts_calls():
    system = build(SystemSpec())
    with CommitTimer(system.target) as timer:
        system.generate(PROMPT[None], 6, seed=0)
    assert timer.calls >= 2 and timer.seconds > 0  # the prefill and at least one round
    assert "commit" not in vars(system.target)
    with pytest.raises(TypeError, match="target"):
        CommitTimer(object())


def test_ceilings_of_a_system_without_drafter_weights():
    c = measure_ceilings(build(SystemSpec()), [], bandwidth=2e9)
    assert c.stages["draft"] == 0.0 and c.stages["commit"] == 0.0 and c.stages["other"] == 0.0
    with pytest.raises(ValueError, match="bandwidth"):
        measure_ceilings(build(SystemSpec()), [], bandwidth=0.0)


def test_kernel_table_lists_cpu_ops():
    a = torch.randn(64, 64)
    table = kernel_table(lambda: a @ a, "cpu")
    assert table and all(k.seconds > 0 and k.calls >= 1 for k in table)


def test_profile_runs_both_timed_calls_once_untimed_first(monkeypatch):
    from specdec.pilot import profile as profile_module

    calls, stats_of = [], profile_module._stats_of

    def recording(system, prompts, max_new_tokens, seed):
        calls.append(("AR" if system.drafter is None else "spec", len(prompts), max_new_tokens))
        return stats_of(system, prompts, max_new_tokens, seed)

    monkeypatch.setattr(profile_module, "_stats_of", recording)
    system = build(SystemSpec())
    profile_module.profile_system(system, [torch.tensor([1, 2, 3, 1, 2, 3]), torch.tensor([4, 5, 4, 5])], 8, bandwidth=1e9)
    # untimed, then the timed pair, then the prefill alone (one token a prompt)
    assert calls == [("AR", 2, 8), ("spec", 2, 8)] * 2 + [("AR", 2, 1)]


class PassTimedSystem:
    """A system whose every target pass takes exactly ``pass_s`` seconds: AR emits one token a pass (the prefill's
    included); with ``tau`` > 1, each round after the prefill emits ``tau`` tokens in one pass."""

    def __init__(self, pass_s: float, tau: int = 1):
        from types import SimpleNamespace

        self.spec = SystemSpec().autoregressive() if tau == 1 else SystemSpec(num_draft_tokens=tau - 1)
        self.target = SimpleNamespace(device=torch.device("cpu"), commit=lambda *a, **k: None, parameters=lambda: iter(()))
        self.drafter = None if tau == 1 else object()
        self.pass_s, self.tau = pass_s, tau

    def generate(self, prompts, max_new_tokens, seed=0):
        from types import SimpleNamespace

        from specdec.generation import GenerationStats

        rounds = -(-(max_new_tokens - 1) // self.tau) if self.tau > 1 else 0
        passes = 1 + (rounds if self.tau > 1 else max_new_tokens - 1)
        hist = [0] * self.tau
        if rounds:
            hist[self.tau - 1] = rounds
        stats = GenerationStats(
            new_tokens=max_new_tokens, target_passes=passes, rounds=rounds, accepted_histogram=hist, verify_s=passes * self.pass_s
        )
        return SimpleNamespace(stats=stats)


@pytest.mark.parametrize("max_new_tokens", [2, 4, 17])
def test_ar_profiled_against_itself_models_a_speedup_of_one(max_new_tokens):
    from specdec.pilot import cost

    ar = PassTimedSystem(1.0)
    p = profile_system(ar, [PROMPT], max_new_tokens, ar_system=ar, bandwidth=1e9)
    assert (p.tau, p.t_ar, p.t_round) == (1.0, 1.0, 1.0)
    assert cost.speedup(p.tau, p.t_ar, p.t_round) == 1.0
    # three tokens a pass at the same pass time: 3x, whatever the prefill
    spec = PassTimedSystem(1.0, tau=3)
    q = profile_system(spec, [PROMPT], 1 + 3 * 4, ar_system=ar, bandwidth=1e9)
    assert cost.speedup(q.tau, q.t_ar, q.t_round) == pytest.approx(3.0)
