"""Backups: what the SSD drafter proposes when the actual outcome is not in the speculation cache.

Every backup reports the law it proposes with: a sampled proposal carries ``draft_probs`` (the
verifier runs the ratio test), a chosen one carries ``None`` (the verifier accepts ``d`` with
probability ``p(d)``, the exact rule for a point-mass proposal). Verifying a random or n-gram token by
argmax matching would accept the target's argmax with probability 1 instead of ``p(argmax)``.

* :class:`NeuralBackup` -- the base drafter just in time (slow, good drafts).
* :class:`RandomBackup` -- uniform random tokens with their uniform law (instant, poor drafts).
* ``"ngram"`` -- :class:`~specdec.drafters.NGramDrafter` (instant, deterministic).
* :class:`BatchAwareBackup` -- neural below a batch size, a fast backup at or above it: with many
  rows, one slow miss stalls the whole batch.
"""

from __future__ import annotations

import torch

from specdec.contracts.proposal import DraftProposal
from specdec.contracts.sampling import SamplingConfig
from specdec.drafters.ngram import NGramDrafter
from specdec.drafters.ssd.drafting import DraftedChain, Sampler, draft_chain
from specdec.drafters.ssd.saguaro import SaguaroTransform
from specdec.verify.sampling import sample

__all__ = ["BACKUP_KINDS", "BatchAwareBackup", "NeuralBackup", "RandomBackup", "make_backup"]

BACKUP_KINDS = ("neural", "ngram", "random")


class NeuralBackup:
    """Draft just in time with the base drafter's scores ``step(context) -> [V]`` (:func:`draft_chain`).

    Example:
        >>> backup = NeuralBackup(lambda ctx: torch.tensor([0.0, 2.0, 0.0]))
        >>> backup.propose(torch.tensor([0]), 2, sampling=SamplingConfig(), generator=None).tokens
        tensor([1, 1])
    """

    kind = "neural"
    vocab_size = None

    def __init__(self, step, *, transform: SaguaroTransform | None = None, sampler: Sampler = sample):
        self.step, self.transform, self.sampler = step, transform, sampler

    def reset(self) -> None:
        """Nothing to forget (the base drafter is reset by its owner)."""

    def draft(self, context, max_tokens, *, sampling, generator) -> DraftedChain:
        """The proposal and its ranking laws (see :class:`~specdec.drafters.ssd.drafting.DraftedChain`)."""
        return draft_chain(
            self.step, context, max_tokens, sampling=sampling, generator=generator, sampler=self.sampler, transform=self.transform
        )

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        """``max_tokens`` drafts after ``context [n]``; ``draft_probs [k, V]`` when sampling, else ``None``."""
        return self.draft(context, max_tokens, sampling=sampling, generator=generator).proposal


class RandomBackup:
    """Uniform random tokens, reported with their uniform law (``None`` under greedy sampling).

    Example:
        >>> p = RandomBackup(4).propose(torch.tensor([0]), 2, sampling=SamplingConfig(temperature=1.0),
        ...                             generator=torch.Generator().manual_seed(0))
        >>> p.tokens.shape, p.draft_probs[0].tolist()
        (torch.Size([2]), [0.25, 0.25, 0.25, 0.25])
    """

    kind = "random"

    def __init__(self, vocab_size: int, *, sampler: Sampler = sample):
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"vocab_size: expected an int >= 1, got {vocab_size!r}")
        self.vocab_size, self.sampler = vocab_size, sampler

    def reset(self) -> None:
        """Nothing to forget."""

    def propose(self, context, max_tokens, *, sampling: SamplingConfig, generator) -> DraftProposal:
        """``max_tokens`` uniform draws (``tokens [k]``), ``draft_probs [k, V]`` = ``1 / V`` (``None`` when greedy)."""
        law = torch.full((self.vocab_size,), 1.0 / self.vocab_size, device=context.device)
        tokens = [self.sampler(law, generator).reshape(()) for _ in range(max_tokens)]
        out = torch.stack(tokens).to(device=context.device, dtype=torch.long) if tokens else context.new_zeros(0)
        probs = None if sampling.greedy else law.expand(max_tokens, -1).clone()
        return DraftProposal(tokens=out, draft_probs=probs)


class BatchAwareBackup:
    """Chooses a backup per row from the batch size: ``slow`` below ``batch_threshold`` rows, ``fast`` at or above.

    Set :attr:`batch_size` to the number of rows decoded together (1 for :func:`specdec.generate`).

    Example:
        >>> policy = BatchAwareBackup(batch_threshold=8)
        >>> policy.choose(), (setattr(policy, "batch_size", 8), policy.choose())[1]
        ('neural', 'random')
    """

    def __init__(self, batch_threshold: int, *, slow: str = "neural", fast: str = "random"):
        if isinstance(batch_threshold, bool) or not isinstance(batch_threshold, int) or batch_threshold < 1:
            raise ValueError(f"batch_threshold: expected an int >= 1, got {batch_threshold!r}")
        for name, value in (("slow", slow), ("fast", fast)):
            if value not in BACKUP_KINDS:
                raise ValueError(f"{name}: expected one of {BACKUP_KINDS}, got {value!r}")
        self.batch_threshold, self.slow, self.fast = batch_threshold, slow, fast
        self.batch_size = 1

    def choose(self) -> str:
        """The backup kind for a row missing now."""
        return self.slow if self.batch_size < self.batch_threshold else self.fast


def make_backup(kind: str, *, step, vocab_size: int, transform: SaguaroTransform | None, sampler: Sampler):
    """The backup of ``kind`` (one of :data:`BACKUP_KINDS`).

    Example:
        >>> type(make_backup("ngram", step=None, vocab_size=5, transform=None, sampler=sample)).__name__
        'NGramDrafter'
    """
    if kind == "neural":
        return NeuralBackup(step, transform=transform, sampler=sampler)
    if kind == "random":
        return RandomBackup(vocab_size, sampler=sampler)
    if kind == "ngram":
        return NGramDrafter()
    raise ValueError(f"backup: expected one of {BACKUP_KINDS}, a Drafter or a BatchAwareBackup, got {kind!r}")
