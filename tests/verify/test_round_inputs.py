"""Every verifier refuses a root or context it could only misread, before any target pass."""

from __future__ import annotations

import pytest
import torch

from specdec.contracts import DraftProposal, SamplingConfig
from specdec.drafters import NGramDrafter
from specdec.testing import tiny_target
from specdec.verify import ChainVerifier, TreeVerifier, TwoLevelVerifier

VERIFIERS = {
    "chain": ChainVerifier,
    "tree": lambda: TreeVerifier(budget=4),
    "two-level": lambda: TwoLevelVerifier(4, 4, gate="always"),
}
CASES = [
    (
        dict(root=torch.tensor([3.7])),
        TypeError,
        r"root: expected a \[1\] integer tensor \(the newest emitted token\), got torch.float32 \(1,\)",
    ),
    (dict(root=3), TypeError, "root: expected a \\[1\\] integer tensor .*, got int"),
    (dict(root=torch.tensor([3, 4])), TypeError, r"root: expected a \[1\] integer tensor .*, got torch.int64 \(2,\)"),
    (dict(root=torch.tensor([300])), ValueError, r"root: expected a token id in \[0, 97\), got 300"),
    (dict(root=torch.tensor([97])), ValueError, r"root: expected a token id in \[0, 97\), got 97"),
    (dict(root=torch.tensor([3], device="meta")), ValueError, r"root: expected device cpu \(the target's\), got meta"),
    (
        dict(context=torch.zeros(0, dtype=torch.long)),
        ValueError,
        r"context: expected every token so far, the root last: target.length \+ 1 = 3 ids \(the target's cache holds 2\), got 0",
    ),
    (dict(context=torch.tensor([4, 4, 4, 4, 3])), ValueError, r"context: expected .* = 3 ids .*, got 5"),
    (dict(context=torch.tensor([3])), ValueError, r"context: expected .* = 3 ids .*, got 1"),
    (dict(context=torch.tensor([1.0, 2.0, 3.0])), TypeError, "context: expected a 1-D integer tensor of every token so far"),
    (dict(context=torch.tensor([9, 9, 9])), ValueError, "context: expected the root 3 last, got 9"),
    (dict(context=torch.tensor([1, 99, 3])), ValueError, r"context: expected token ids in \[0, 97\), got context\[1\] = 99"),
    (dict(context=torch.tensor([-1, 2, 3])), ValueError, r"context: expected token ids in \[0, 97\), got context\[0\] = -1"),
]


@pytest.mark.parametrize("kwargs,error,message", CASES)
@pytest.mark.parametrize("verifier", sorted(VERIFIERS))
def test_bad_root_or_context_is_named_and_nothing_runs(verifier, kwargs, error, message):
    target = tiny_target(seed=0)
    target(torch.tensor([[1, 2]]))
    target.commit(2)
    args = dict(root=torch.tensor([3]), context=torch.tensor([1, 2, 3])) | kwargs
    with pytest.raises(error, match=message):
        VERIFIERS[verifier]().verify(
            target,
            args["root"],
            DraftProposal(torch.tensor([4, 5])),
            sampling=SamplingConfig(),
            context=args["context"],
            drafter=NGramDrafter(),
        )
    assert target.length == 2  # no pass ran, nothing was committed
    result = VERIFIERS[verifier]().verify(
        target,
        torch.tensor([3]),
        DraftProposal(torch.tensor([4, 5])),
        sampling=SamplingConfig(),
        context=torch.tensor([1, 2, 3]),
        drafter=NGramDrafter(),
    )
    assert target.length == 3 + result.num_accepted
