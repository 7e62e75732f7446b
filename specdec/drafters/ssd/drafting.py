"""Draft a chain one step at a time, so that the SSD drafter owns every draw and every reported law.

The base drafter is only asked for its next-token scores (a one-token greedy proposal's
``tree_logprobs``); the draw, the optional Saguaro transform and the reported law happen here, in one
place, for the just-in-time backup and for the pre-drafted continuations alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specdec.contracts.drafter import Drafter
from specdec.contracts.proposal import DraftProposal
from specdec.contracts.sampling import SamplingConfig
from specdec.drafters.ssd.saguaro import SaguaroTransform
from specdec.verify.sampling import logits_to_probs

__all__ = ["DraftedChain", "Sampler", "StepScores", "draft_chain", "ranking_law"]

Sampler = Callable[[torch.Tensor, "torch.Generator | None"], torch.Tensor]
"""``(probs [V], generator) -> token`` (0-d int64): how every token is drawn (default :func:`specdec.verify.sample`)."""

_GREEDY = SamplingConfig()
_UNIT_TEMPERATURE = SamplingConfig(temperature=1.0)


class StepScores:
    """The base drafter's next-token log-scores ``[V]`` after a context, from a one-token greedy proposal.

    Greedy proposals draw nothing, so asking costs no randomness; drafters with a cache (e.g.
    :class:`~specdec.drafters.ModelDrafter`) keep their longest common prefix, so stepping a chain
    feeds one token per call.

    Example:
        >>> from specdec.drafters import ModelDrafter
        >>> from specdec.testing import tiny_target
        >>> base = ModelDrafter(tiny_target(seed=1)); base.reset()
        >>> StepScores(base)(torch.tensor([1, 2, 3])).shape
        torch.Size([97])
    """

    def __init__(self, base: Drafter):
        self.base = base

    def __call__(self, context: torch.Tensor) -> torch.Tensor | None:
        """``[V]`` log-scores, or ``None`` when the base proposes nothing after ``context`` (its cache is full)."""
        proposal = self.base.propose(context, 1, sampling=_GREEDY, generator=None)
        if proposal.num_tokens == 0:
            return None
        if proposal.tree_logprobs is None or proposal.num_tokens != 1:
            raise TypeError(
                f"base: expected a drafter whose one-token greedy proposal carries tree_logprobs [1, V] (its next-token "
                f"scores), got {type(self.base).__name__} returning tree_logprobs={proposal.tree_logprobs!r}"
            )
        return proposal.tree_logprobs[0]


def ranking_law(scores: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """The drafter's own law ``[..., V]`` used to rank outcomes: the sampling law, or the unit-temperature softmax when greedy.

    Example:
        >>> ranking_law(torch.tensor([0.0, 0.0]), SamplingConfig()).tolist()
        [0.5, 0.5]
    """
    return logits_to_probs(scores, _UNIT_TEMPERATURE if sampling.greedy else sampling)


@dataclass
class DraftedChain:
    """A chain drafted by :func:`draft_chain`.

    Attributes:
        proposal: ``tokens [K]``, ``draft_probs [K, V]`` (the law each token was drawn from, after the
            transform; ``None`` when greedy), ``tree_logprobs [K, V]`` (the base's scores).
        ranking: ``[K, V]`` the untransformed law at each position (:func:`ranking_law`).
    """

    proposal: DraftProposal
    ranking: torch.Tensor


def draft_chain(
    step: Callable[[torch.Tensor], torch.Tensor | None],
    context: torch.Tensor,
    num_tokens: int,
    *,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    sampler: Sampler,
    transform: SaguaroTransform | None = None,
) -> DraftedChain:
    """Draft up to ``num_tokens`` tokens after ``context [n]`` one ``step`` at a time (fewer where ``step``
    returns ``None``: the base can step no further; a prefix of a sequential draw keeps its law).

    Greedy: each token is the argmax of the scores and the proposal is deterministic
    (``draft_probs=None``). Sampling: each token is drawn by ``sampler`` from
    ``transform(logits_to_probs(scores, sampling))`` and exactly that tensor is reported as its row of
    ``draft_probs`` -- the one law both the draw and the verifier's ratio use.

    Example:
        >>> step = lambda ctx: torch.tensor([0.0, 3.0, 1.0])
        >>> chain = draft_chain(step, torch.tensor([0]), 2, sampling=SamplingConfig(), generator=None, sampler=None)
        >>> chain.proposal.tokens, chain.proposal.draft_probs
        (tensor([1, 1]), None)
    """
    tokens, laws, scores, ranks = [], [], [], []
    ctx = context
    for _ in range(num_tokens):
        s = step(ctx)
        if s is None:
            break
        s = s.float()
        scores.append(torch.log_softmax(s, dim=-1))
        ranks.append(ranking_law(s, sampling))
        if sampling.greedy:
            token = s.argmax(-1)
        else:
            law = logits_to_probs(s, sampling)
            law = transform(law) if transform is not None else law
            token = sampler(law, generator).reshape(())
            laws.append(law)
        tokens.append(token.to(torch.long))
        ctx = torch.cat([ctx, token.view(1).to(ctx.device)])
    device = context.device
    if not tokens:
        return DraftedChain(DraftProposal(tokens=context.new_zeros(0)), torch.zeros(0, 0, device=device))
    return DraftedChain(
        DraftProposal(
            tokens=torch.stack(tokens).to(device),
            draft_probs=torch.stack(laws) if laws else None,
            tree_logprobs=torch.stack(scores),
        ),
        torch.stack(ranks),
    )
