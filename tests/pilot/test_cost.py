import pytest

from specdec.pilot.cost import StepTimeTable, batched_speedup, gaps, speedup
from specdec.pilot.profile import Ceilings, RoundProfile


def _profile(stages, tau, t_ar, ceil_stages, ceil_tau):
    return RoundProfile(stages=stages, tau=tau, t_ar=t_ar, ceilings=Ceilings(stages=ceil_stages, tau=ceil_tau, bandwidth=1.0))


def test_gaps_on_a_synthetic_profile_with_known_answers():
    # t_round = 1 + 3 + 0 + 1 = 5 s, tau = 2.5, t_AR = 2 s/token: speedup 2.5 * 2 / 5 = 1.0.
    # At the ceilings one at a time: verify 3 -> 1 gives t_round 3, speedup 5/3; draft 1 -> 0 gives 1.25;
    # other 1 -> 0.5 gives 5/4.5; tau 2.5 -> 5 gives 2.0.
    p = _profile(
        {"draft": 1.0, "verify": 3.0, "commit": 0.0, "other": 1.0},
        2.5,
        2.0,
        {"draft": 0.0, "verify": 1.0, "commit": 0.0, "other": 0.5},
        5.0,
    )
    assert speedup(p.tau, p.t_ar, p.t_round) == pytest.approx(1.0)
    ranked = gaps(p)
    assert [g.stage for g in ranked] == ["acceptance", "verify", "draft", "other", "commit"]
    lost = {g.stage: g.lost_speedup for g in ranked}
    assert lost["acceptance"] == pytest.approx(1.0)
    assert lost["verify"] == pytest.approx(5 / 3 - 1)
    assert lost["draft"] == pytest.approx(0.25)
    assert lost["other"] == pytest.approx(5 / 4.5 - 1)
    assert lost["commit"] == 0.0


def test_a_stage_already_below_its_ceiling_loses_nothing():
    p = _profile(
        {"draft": 0.5, "verify": 1.0, "commit": 0.0, "other": 0.0},
        2.0,
        1.0,
        {"draft": 1.0, "verify": 1.0, "commit": 0.0, "other": 0.0},
        2.0,
    )
    assert {g.stage: g.lost_speedup for g in gaps(p)} == {
        "draft": 0.0,
        "verify": 0.0,
        "commit": 0.0,
        "other": 0.0,
        "acceptance": 0.0,
    }


def test_gaps_need_ceilings_and_profiles_check_their_fields():
    with pytest.raises(ValueError, match="ceilings"):
        gaps(RoundProfile(stages={"draft": 1.0, "verify": 1.0, "commit": 0.0, "other": 0.0}, tau=2.0, t_ar=1.0))
    with pytest.raises(ValueError, match="stages"):
        RoundProfile(stages={"draft": 1.0, "verify": 1.0}, tau=2.0, t_ar=1.0)
    with pytest.raises(ValueError, match="tau"):
        RoundProfile(stages={"draft": 1.0, "verify": 1.0, "commit": 0.0, "other": 0.0}, tau=0.5, t_ar=1.0)


def test_batched_speedup_from_a_step_time_table():
    table = StepTimeTable([1, 2, 4, 8], [1.0, 1.0, 1.2, 2.0])
    # two requests, tau 2 each, one draft each: 4 verify tokens -> T = 1.2 s, 4 tokens per step;
    # AR: 2 tokens per T(2) = 1.0 s.  (4 / 1.2) / 2 = 5/3.
    assert batched_speedup([2.0, 2.0], [1, 1], table) == pytest.approx(5 / 3)
    # drafter time counts in the round
    assert batched_speedup([2.0, 2.0], [1, 1], table, t_draft=0.8) == pytest.approx((4 / 2.0) / 2)
    assert table(6) == pytest.approx(1.6)
    with pytest.raises(ValueError, match="measured range"):
        table(9)
    with pytest.raises(ValueError, match="tokens"):
        StepTimeTable([2, 1], [1.0, 1.0])
    with pytest.raises(ValueError, match="equal non-empty"):
        batched_speedup([2.0], [1, 1], table)
