"""Drafters with known behaviour, for tests: exactly-k acceptance, and random proposals."""

from __future__ import annotations

import copy

import torch

from specdec.drafters.base import DraftProposal
from specdec.drafters.model import ModelDrafter
from specdec.verify.sampling import SamplingConfig


class ForcedDrafter:
    """Under greedy verification, exactly ``min(accept, max_tokens)`` draft tokens are accepted per round.

    It drafts the target's own greedy continuation with a private copy of the target, keeps the
    first ``accept`` tokens, and appends one token that differs from the target's next argmax (when
    ``max_tokens`` leaves room), so that the verifier's longest-prefix match stops exactly there.

    Args:
        target: the target to imitate (deep-copied; the copy keeps its own cache).
        accept: tokens to have accepted per round (0 forces every round to a miss).

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> out = sd.generate(target, torch.tensor([[1, 2, 3]]), 12, drafter=ForcedDrafter(target, accept=2),
        ...                   num_draft_tokens=4)                          # doctest: +SKIP
        >>> out.stats.accepted_histogram                                   # doctest: +SKIP
        [0, 0, 3, ...]
    """

    def __init__(self, target, accept: int):
        if isinstance(accept, bool) or not isinstance(accept, int) or accept < 0:
            raise ValueError(f"accept: expected an int >= 0, got {accept!r}")
        self.accept = accept
        self.vocab_size = target.vocab_size
        self._oracle = ModelDrafter(copy.deepcopy(target))

    def reset(self) -> None:
        self._oracle.reset()

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        greedy = SamplingConfig()
        n_true = min(self.accept, max_tokens)
        # one more than kept: the target's next argmax, which the forced miss must differ from
        want = n_true + 1 if n_true < max_tokens else n_true
        truth = self._oracle.propose(context, want, sampling=greedy, generator=None).tokens
        tokens = truth[:n_true]
        if want > n_true:
            miss = (truth[n_true : n_true + 1] + 1) % self.vocab_size
            tokens = torch.cat([tokens, miss])
        return DraftProposal(tokens=tokens, draft_probs=None)


class RandomDrafter:
    """Proposes tokens drawn uniformly (with their uniform law as ``draft_probs``): a worst-case drafter.

    Example:
        >>> d = RandomDrafter(vocab_size=10)
        >>> d.propose(torch.tensor([1]), 3, sampling=SamplingConfig(), generator=torch.Generator().manual_seed(0)).tokens.shape
        torch.Size([3])
    """

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def reset(self) -> None:
        pass

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        tokens = torch.randint(0, self.vocab_size, (max_tokens,), generator=generator, device=context.device)
        law = torch.full((max_tokens, self.vocab_size), 1.0 / self.vocab_size, device=context.device)
        return DraftProposal(tokens=tokens, draft_probs=None if sampling.greedy else law)
