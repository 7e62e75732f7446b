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
        >>> import specdec as sd
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> out = sd.generate(target, torch.tensor([[1, 2, 3]]), 10, drafter=ForcedDrafter(target, accept=2),
        ...                   num_draft_tokens=4)
        >>> out.stats.accepted_histogram          # 1 token from the prefill, then 3 rounds of 2 accepted + 1
        [0, 0, 3]
    """

    def __init__(self, target, accept: int):
        if isinstance(accept, bool) or not isinstance(accept, int) or accept < 0:
            raise ValueError(f"accept: expected an int >= 0, got {accept!r}")
        self.accept = accept
        self.vocab_size = target.vocab_size
        self._oracle = ModelDrafter(copy.deepcopy(target))

    def reset(self) -> None:
        """Start a new request: empty the private target copy's cache.

        Example:
            >>> from specdec.testing import tiny_target
            >>> ForcedDrafter(tiny_target(seed=0), accept=1).reset()
        """
        self._oracle.reset()

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        """The target's greedy continuation of ``context``, cut after ``accept`` tokens, then one forced miss.

        ``sampling`` and ``generator`` are accepted for the :class:`~specdec.contracts.Drafter` protocol
        and not used: the continuation is always the greedy one.

        Args:
            context: ``[n]`` int64, the request so far.
            max_tokens: the most tokens to propose.

        Returns:
            :class:`DraftProposal` with ``tokens [k]``, ``k = min(accept + 1, max_tokens)``, and
            ``draft_probs=None``: the first ``min(accept, max_tokens)`` tokens are the target's argmax
            chain; when ``accept < max_tokens`` the last one is ``(argmax + 1) % V``, which differs from it.

        Example:
            >>> from specdec.testing import tiny_target
            >>> drafter = ForcedDrafter(tiny_target(seed=0), accept=2)
            >>> drafter.reset()
            >>> drafter.propose(torch.tensor([1, 2, 3]), 4, sampling=SamplingConfig(), generator=None).tokens
            tensor([72, 18, 17])
        """
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
        """Nothing to forget: the drafter keeps no state between calls.

        Example:
            >>> RandomDrafter(vocab_size=10).reset()
        """

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        """``max_tokens`` ids drawn uniformly from ``[0, vocab_size)`` with ``generator``; ``context`` only sets the device.

        Returns:
            :class:`DraftProposal` with ``tokens [max_tokens]`` int64 and ``draft_probs [max_tokens, V]``
            filled with ``1 / V`` (``None`` under greedy ``sampling``).

        Example:
            >>> p = RandomDrafter(vocab_size=4).propose(torch.tensor([1]), 2, sampling=SamplingConfig(temperature=1.0),
            ...                                         generator=torch.Generator().manual_seed(0))
            >>> p.tokens.shape, p.draft_probs
            (torch.Size([2]), tensor([[0.2500, 0.2500, 0.2500, 0.2500],
                    [0.2500, 0.2500, 0.2500, 0.2500]]))
        """
        tokens = torch.randint(0, self.vocab_size, (max_tokens,), generator=generator, device=context.device)
        law = torch.full((max_tokens, self.vocab_size), 1.0 / self.vocab_size, device=context.device)
        return DraftProposal(tokens=tokens, draft_probs=None if sampling.greedy else law)
