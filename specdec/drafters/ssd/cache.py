"""The speculation cache: pre-drafted next proposals keyed by the outcome they assume."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.contracts.proposal import DraftProposal
from specdec.drafters.ssd.outcome import VerificationOutcome

__all__ = ["CachedSpeculation", "SpeculationCache"]


@dataclass
class CachedSpeculation:
    """A continuation drafted for one assumed outcome, with the law it was drawn from.

    Attributes:
        proposal: the :class:`DraftProposal` to return on a hit: ``tokens [K]`` and ``draft_probs [K, V]``
            (the law each token was drawn from) or ``None`` for a deterministic continuation.
        ranking: ``[K, V]`` the drafter's own (untransformed) law at each drafted position, from which
            the outcomes of the next round are predicted; ``None`` when unknown.

    Example:
        >>> entry = CachedSpeculation(DraftProposal(torch.tensor([3, 1]), torch.full((2, 4), 0.25)))
        >>> entry.truncated(1).proposal.tokens, entry.truncated(1).proposal.draft_probs.shape
        (tensor([3]), torch.Size([1, 4]))
    """

    proposal: DraftProposal
    ranking: torch.Tensor | None = None

    def truncated(self, max_tokens: int) -> CachedSpeculation:
        """The first ``max_tokens`` drafts: a prefix of a sequentially drawn chain keeps its law row by row."""
        p = self.proposal
        if p.num_tokens <= max_tokens:
            return self
        cut = DraftProposal(
            tokens=p.tokens[:max_tokens],
            draft_probs=None if p.draft_probs is None else p.draft_probs[:max_tokens],
            tree_logprobs=None if p.tree_logprobs is None else p.tree_logprobs[:max_tokens],
        )
        return CachedSpeculation(cut, self.ranking)


class SpeculationCache:
    """Pre-drafted continuations of one round, keyed by :class:`VerificationOutcome`, with hit/miss counts.

    The entries live one round: :meth:`replace` installs the next round's, :meth:`lookup` reads the
    entry of the actual outcome and counts a hit or a miss.

    Example:
        >>> cache = SpeculationCache()
        >>> cache.replace({VerificationOutcome(0, 5): CachedSpeculation(DraftProposal(torch.tensor([2])))})
        >>> cache.lookup(VerificationOutcome(0, 5)).proposal.tokens, cache.lookup(VerificationOutcome(1, 5))
        (tensor([2]), None)
        >>> cache.hits, cache.misses, cache.hit_rate
        (1, 1, 0.5)
    """

    def __init__(self):
        self.entries: dict[VerificationOutcome, CachedSpeculation] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, outcome: object) -> bool:
        return outcome in self.entries

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)`` (0.0 before any lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def replace(self, entries: dict[VerificationOutcome, CachedSpeculation]) -> None:
        """Drop every entry and install ``entries`` (outcome -> :class:`CachedSpeculation`)."""
        for key, value in entries.items():
            if not isinstance(key, VerificationOutcome):
                raise TypeError(f"entries: expected VerificationOutcome keys, got {type(key).__name__}")
            if not isinstance(value, CachedSpeculation):
                raise TypeError(f"entries[{key}]: expected a CachedSpeculation, got {type(value).__name__}")
        self.entries = dict(entries)

    def clear(self) -> None:
        """Drop every entry and zero the counters."""
        self.entries = {}
        self.hits = self.misses = 0

    def peek(self, outcome: VerificationOutcome | None) -> CachedSpeculation | None:
        """The entry for ``outcome`` (``None`` if absent or ``outcome`` is ``None``); counts nothing."""
        return None if outcome is None else self.entries.get(outcome)

    def lookup(self, outcome: VerificationOutcome | None) -> CachedSpeculation | None:
        """:meth:`peek`, counting a hit or a miss (``None`` = an outcome nothing could predict: a miss)."""
        entry = self.peek(outcome)
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry
