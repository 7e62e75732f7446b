"""Arguments of the AgentSpec drafter, its index and allocator, the two-level gate and the verify budget that were
accepted and misread (a string flag read as True, a float n-gram length failing later) or refused without a name."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.drafters.agentspec import AgentSpecDrafter, BudgetAllocator, PartitionedSuffixIndex, TokenPieces
from specdec.engine.budget import allocate
from specdec.verify.two_level import TwoLevelVerifier
from specdec.verify.two_level_gate import TwoLevelGate

PIECES = TokenPieces([bytes([97 + i]) for i in range(10)])


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: TwoLevelGate(smoothing="0.5"), ValueError, "smoothing"),
        (lambda: TwoLevelGate(smoothing=True), ValueError, "smoothing"),
        (lambda: TwoLevelVerifier(view=""), ValueError, "view"),
        (lambda: PartitionedSuffixIndex(max_ngram="8"), ValueError, "max_ngram: expected an int"),
        (lambda: PartitionedSuffixIndex(min_ngram=1.5, max_ngram=3), ValueError, "min_ngram: expected an int"),
        (lambda: AgentSpecDrafter(PIECES, isolate="no"), TypeError, "isolate: expected a bool"),
        (lambda: AgentSpecDrafter(PIECES, fallback=0.0), TypeError, "fallback: expected a bool"),
        (lambda: BudgetAllocator(8).allocate([True], [1]), ValueError, r"scores\[0\]"),
    ],
    ids=[
        "smoothing-str",
        "smoothing-bool",
        "empty-view",
        "max-ngram-str",
        "min-ngram-float",
        "isolate",
        "fallback",
        "bool-score",
    ],
)
def test_bad_arguments_are_refused_by_name(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_allocate_takes_numpy_ints_for_every_size():
    plan = allocate([[0.5]], base_tokens=1, fixed_rows=np.int64(1), max_nodes=np.int64(3), max_rows=np.int64(3))
    assert plan == allocate([[0.5]], base_tokens=1, fixed_rows=1, max_nodes=3, max_rows=3)
