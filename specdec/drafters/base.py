"""The drafter protocol: what a drafter receives each round, what it returns, how it rolls back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from specdec.verify.sampling import SamplingConfig

if TYPE_CHECKING:
    from specdec.verify.tree import Tree


@dataclass
class DraftProposal:
    """A drafter's answer for one round.

    Attributes:
        tokens: ``[k]`` int64, the proposed continuation of the context (``k`` may be 0).
        draft_probs: ``[k, V]`` float32, the law each token was drawn from, conditioned on the context
            and the earlier proposed tokens; ``None`` for a deterministic proposal (n-gram lookup, an
            oracle), which the verifier then treats with the deterministic-proposal rule. A drafter
            that draws greedily must not report a softmax here: the law of an argmax is one-hot.
        tree_logprobs: ``[k, V]`` the drafter's log-probs at each depth along ``tokens``: scores from
            which :class:`~specdec.verify.TreeVerifier` builds a best-first tree. Unlike
            ``draft_probs`` they need not be the law the tokens were drawn from, so greedy drafters
            report them too.
        tree: a tree the drafter built itself (several n-gram continuations, path-dependent
            selectors), at most ``max_tokens`` nodes; ``tokens`` is then its first root-to-leaf path.

    Example:
        >>> DraftProposal(tokens=torch.tensor([5, 9]), draft_probs=None).num_tokens
        2
    """

    tokens: torch.Tensor
    draft_probs: torch.Tensor | None = None
    tree_logprobs: torch.Tensor | None = None
    tree: "Tree | None" = None

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.numel())


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
    """

    vocab_size: int | None

    def reset(self) -> None: ...

    def propose(
        self,
        context: torch.Tensor,
        max_tokens: int,
        *,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> DraftProposal: ...
