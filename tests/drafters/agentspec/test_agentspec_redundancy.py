"""RedundancyScorer: g(c, n) = (c/n) p(n) with Eq. 1's p(n); majority path, support and CT*."""

import math

import pytest

from specdec.drafters.agentspec import RedundancyScorer


@pytest.mark.parametrize("g_min", [0.0, 0.2, 0.5, 1.0])
def test_one_candidate_scores_the_floor(g_min):
    # Eq. 1: p(1) = g_min exactly; Algorithm 2's exp(-n) form would give g_min + (1 - g_min)(1 - 1/e)
    scorer = RedundancyScorer(g_min)
    assert scorer.support_weight(1) == g_min
    assert scorer.score([[3, 4]]).score == g_min


def test_support_weight_values():
    scorer = RedundancyScorer(0.2)
    assert scorer.support_weight(0) == 0.0
    assert scorer.support_weight(2) == pytest.approx(0.2 + 0.8 * (1 - math.exp(-1)), abs=1e-15)
    assert scorer.support_weight(50) == pytest.approx(1.0, abs=1e-15)


def test_majority_path_support_and_confident_prefix():
    scorer = RedundancyScorer(0.0)
    # 3 of 4 agree on 1; of those, all 3 agree on 1, 2; then 2 of them on 3
    r = scorer.score([[1, 2, 3], [9, 9], [1, 2, 3, 4], [1, 2, 5]])
    assert r.path == (1, 2, 3, 4)
    assert r.support == (3, 3, 2, 1)
    assert (r.num_candidates, r.agreeing, r.confident_length) == (4, 3, 2)
    assert r.score == pytest.approx(0.75 * (1 - math.exp(-3)), abs=1e-15)


def test_ties_go_to_the_most_recent_candidate_and_a_lone_candidate_has_no_confident_prefix():
    scorer = RedundancyScorer(0.3)
    r = scorer.score([[7, 1], [8, 2], [], [8, 3], [7, 4]])
    assert r.path[0] == 7 and r.num_candidates == 4 and r.agreeing == 2
    lone = scorer.score([[5, 6, 7]])
    assert lone.path == (5, 6, 7) and lone.confident_length == 0
    empty = scorer.score([])
    assert (empty.path, empty.score, empty.confident_length) == ((), 0.0, 0)


@pytest.mark.parametrize("g_min", [-0.1, 1.5, True, "0.2"])
def test_bad_floor_is_refused(g_min):
    with pytest.raises(ValueError, match="g_min"):
        RedundancyScorer(g_min)
