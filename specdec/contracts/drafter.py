"""The ``Drafter`` protocol: what a drafter receives each round, what it returns, how it rolls back."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from specdec.contracts.proposal import DraftProposal
from specdec.contracts.sampling import SamplingConfig


@runtime_checkable
class Drafter(Protocol):
    """What :func:`specdec.generate` asks of a drafter.

    Each round the decode loop calls ``propose(context, max_tokens, sampling=..., generator=...)`` with
    ``context [n]``: every token of the request so far (prompt, then every emitted token, the newest
    one last). The drafter returns at most ``max_tokens`` proposed next tokens as a
    :class:`DraftProposal`.

    Rollback is implicit: the next call's context is the old one plus the tokens the verifier
    emitted. A drafter with a cache keeps the longest common prefix of what it has cached and the new
    context and drops the rest (attention caches crop; recurrent states restore a snapshot), so a
    drafter never needs to be told how many tokens were accepted.

    ``reset()`` is called once per request, before the first ``propose``. ``vocab_size`` is checked
    against the target's (``None`` for drafters that only copy tokens from the context).

    Feature taps: a drafter with a non-empty attribute ``target_layer_ids`` (HF ``hidden_states``
    numbering) also receives ``target_hidden=`` ``[r, taps, H]``: the target's hidden states at those
    layers for the ``r`` context rows committed since its previous call (the whole prompt at the first
    call, then the previous root and the accepted drafts), taken from the verify pass itself, so no
    extra target pass runs. The newest context token (the root) has no features yet.

    Example:
        >>> from specdec.drafters import NGramDrafter
        >>> isinstance(NGramDrafter(), Drafter), isinstance(object(), Drafter)   # runtime-checkable
        (True, False)
    """

    vocab_size: int | None

    def reset(self) -> None:
        """Start a new request: forget every cached context row (called once before the first :meth:`propose`).

        Example:
            >>> from specdec.drafters import NGramDrafter
            >>> NGramDrafter().reset()
        """

    def propose(
        self,
        context: torch.Tensor,
        max_tokens: int,
        *,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> DraftProposal:
        """Up to ``max_tokens`` proposed next tokens after ``context``.

        Args:
            context: ``[n]`` int64, the request so far (prompt, then every emitted token, newest last).
            max_tokens: the most tokens (tree nodes) to propose; ``k <= max_tokens``.
            sampling: the request's :class:`SamplingConfig`; a sampling drafter draws from this law.
            generator: the request's RNG, or ``None``; all randomness must come from it.

        Returns:
            :class:`DraftProposal` with ``tokens [k]``, ``draft_probs [k, V]`` when the tokens were
            sampled (else ``None``), and optionally a ``tree``.

        Example:
            >>> from specdec.drafters import NGramDrafter
            >>> drafter: Drafter = NGramDrafter(max_ngram=2)
            >>> drafter.propose(torch.tensor([7, 8, 9, 4, 7, 8]), 2, sampling=SamplingConfig(), generator=None).tokens
            tensor([9, 4])
        """


def check_propose_arguments(
    context: object, max_tokens: object, *, context_name: str = "context", max_name: str = "max_tokens"
) -> None:
    """Raise naming the argument unless ``context`` is a non-empty 1-D int64 tensor and ``max_tokens`` an int >= 0.

    The checks every drafter's ``propose`` makes first (shape, dtype and a host int only: no device read).

    Example:
        >>> check_propose_arguments(torch.tensor([5.0, 6.0]), 2)
        Traceback (most recent call last):
        ...
        TypeError: context: expected a non-empty 1-D int64 tensor, got torch.float32 (2,)
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise ValueError(f"{max_name}: expected an int >= 0, got {max_tokens!r}")
    if not isinstance(context, torch.Tensor) or context.ndim != 1 or context.dtype != torch.long or context.numel() < 1:
        desc = f"{context.dtype} {tuple(context.shape)}" if isinstance(context, torch.Tensor) else type(context).__name__
        raise TypeError(f"{context_name}: expected a non-empty 1-D int64 tensor, got {desc}")


@runtime_checkable
class FinishingDrafter(Protocol):
    """A drafter with work that can outlive a request's last round (SSD's pre-draft of the next round).

    :func:`specdec.generate` calls ``finish()`` once when a request ends (after its last round, or when
    an error stops it), so the drafter's work in flight is done or dropped before ``generate`` returns
    and nothing keeps using the drafter (or a model it shares) behind the caller's back.

    Example:
        >>> from specdec.drafters import ModelDrafter, NGramDrafter, SpeculativeSpeculationDrafter
        >>> from specdec.testing import tiny_target
        >>> ssd = SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0)))
        >>> isinstance(ssd, FinishingDrafter), isinstance(NGramDrafter(), FinishingDrafter)
        (True, False)
    """

    def finish(self) -> None:
        """End the request: wait for (and discard) work still in flight; the next request starts with ``reset()``."""


@runtime_checkable
class PartlyVerifiedDrafter(Protocol):
    """A drafter that learns from its rounds' outcomes and must hear when only its first drafts were verified.

    Under a verify budget (:class:`specdec.Engine` with ``verify_budget``) a round may check the first ``n`` of the
    ``k`` drafts proposed; the drafts past ``n`` were never judged, so reading the next context as "``n`` accepted,
    then a rejection" would teach the drafter a lower acceptance than it has. The engine calls ``verified(n)``
    after such a round, before the drafter's next ``propose``.

    Example:
        >>> from specdec.drafters import ModelDrafter, NGramDrafter, SpeculativeSpeculationDrafter
        >>> from specdec.testing import tiny_target
        >>> ssd = SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0)))
        >>> isinstance(ssd, PartlyVerifiedDrafter), isinstance(NGramDrafter(), PartlyVerifiedDrafter)
        (True, False)
    """

    def verified(self, num_drafts: int) -> None:
        """The last round's first ``num_drafts`` drafts were verified, the others never were."""
