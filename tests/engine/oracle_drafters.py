"""Drafters for engine tests that know the greedy target's next tokens: a draft model with the target's own weights
(``tiny_target(seed=0)``), from which each test builds the trees it needs."""

from __future__ import annotations

import torch

from specdec.contracts import SamplingConfig
from specdec.drafters import ModelDrafter
from specdec.testing import tiny_target


class TargetOracle:
    """The greedy continuation of ``tiny_target(seed=0, max_seq_len=max_seq_len)`` after a context, as a drafter's
    base: subclasses define ``propose`` from :meth:`truth`."""

    def __init__(self, max_seq_len: int):
        self.oracle = ModelDrafter(tiny_target(seed=0, max_seq_len=max_seq_len))
        self.vocab_size = self.oracle.vocab_size

    def reset(self):
        self.oracle.reset()

    def truth(self, context: torch.Tensor, n: int) -> torch.Tensor:
        """The target's next ``n`` greedy tokens after ``context`` (``[n]`` int64)."""
        return self.oracle.propose(context, n, sampling=SamplingConfig(), generator=None).tokens
