"""BudgetAllocator: B_t = floor(alpha / bz); L_i = max(|CT*_i|, floor(B_t g_i / sum g))."""

import pytest

from specdec.drafters.agentspec import BudgetAllocator


def test_shares_follow_the_scores_and_never_drop_below_the_confident_prefix():
    allocator = BudgetAllocator(alpha=40)
    # B_t = 10; shares 10 * (0.5, 0.25, 0.25) / 1.0 = 5, 2.5 -> 2, 2.5 -> 2; CT* raises the last to 4
    assert allocator.allocate([0.5, 0.25, 0.25, 0.0], [0, 1, 4, 3]) == [5, 2, 4, 3]
    assert allocator.batch_budget(4) == 10


def test_budget_shrinks_with_batch_size():
    allocator = BudgetAllocator(alpha=12)
    one = allocator.allocate([0.4], [0])
    three = allocator.allocate([0.4, 0.4, 0.4], [0, 0, 0])
    assert one == [12] and three == [1, 1, 1]


def test_all_zero_scores_draft_the_confident_prefixes():
    assert BudgetAllocator(alpha=8).allocate([0.0, 0.0], [2, 0]) == [2, 0]
    assert BudgetAllocator(alpha=8).allocate([], []) == []


@pytest.mark.parametrize(
    ("scores", "lengths", "match"),
    [
        ([0.5], [1, 2], "confident_lengths"),
        ([float("nan")], [0], r"scores\[0\]"),
        ([-1.0], [0], r"scores\[0\]"),
        ([0.5], [-1], r"confident_lengths\[0\]"),
    ],
    ids=["length-mismatch", "nan-score", "negative-score", "negative-length"],
)
def test_bad_inputs_are_refused(scores, lengths, match):
    with pytest.raises(ValueError, match=match):
        BudgetAllocator(alpha=8).allocate(scores, lengths)
    with pytest.raises(ValueError, match="alpha"):
        BudgetAllocator(alpha=-1)
    with pytest.raises(ValueError, match="batch_size"):
        BudgetAllocator(alpha=8).batch_budget(0)
