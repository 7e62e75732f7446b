"""One request's verify round split around the shared target pass: plan it, then accept from its logits.

:meth:`ChainVerifier.verify <specdec.verify.chain.ChainVerifier.verify>` and
:meth:`TreeVerifier.verify <specdec.verify.tree.TreeVerifier.verify>` run plan, target pass, acceptance
and commit in one call. An engine runs one target pass for all its requests, so it needs the two
halves apart: :func:`plan_round` (what the verifier checks: validation, the tree, the plan) before the
pass, :func:`accept_round` (the verifier's own acceptance rule on that request's logits, with its own
generator) after. Both call the same functions the verifiers call, in the same order, so a request's
round decides exactly what the batch-1 verifier decides for the same logits and generator state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.proposal import DraftProposal
from specdec.contracts.sampling import SamplingConfig
from specdec.contracts.tree import Tree
from specdec.verify.chain import ChainVerifier, chain_accept
from specdec.verify.processors import process_logits, row_prefixes
from specdec.verify.sampling import logits_to_probs
from specdec.verify.tree import TreeVerifier
from specdec.verify.walks import greedy_walk, sample_and_match

__all__ = ["RoundOutcome", "SUPPORTED_VERIFIERS", "accept_round", "check_verifier", "plan_round", "truncate_chain"]

SUPPORTED_VERIFIERS = (ChainVerifier, TreeVerifier)


@dataclass
class RoundOutcome:
    """What one request's round decided.

    Attributes:
        emitted: ``[n + 1]`` int64, the accepted draft tokens then the bonus token.
        num_accepted: ``n``.
        commit: what the target's commit keeps: a row count (chain) or ``[n + 1]`` ascending rows (tree).

    Example:
        >>> out = RoundOutcome(emitted=torch.tensor([4, 5, 9]), num_accepted=2, commit=3)   # a chain round
        >>> out.emitted[: out.num_accepted].tolist(), int(out.emitted[-1])                   # accepted drafts, bonus
        ([4, 5], 9)
    """

    emitted: torch.Tensor
    num_accepted: int
    commit: int | torch.Tensor


def check_verifier(verifier: object) -> ChainVerifier | TreeVerifier:
    """Return ``verifier`` when its round can be split around a shared pass, else raise ``TypeError``.

    Only the exact classes :class:`~specdec.verify.chain.ChainVerifier` and
    :class:`~specdec.verify.tree.TreeVerifier` qualify: a subclass may change ``verify`` in ways the
    split round would not follow.

    Example:
        >>> check_verifier(ChainVerifier()).__class__.__name__
        'ChainVerifier'
    """
    if type(verifier) not in SUPPORTED_VERIFIERS:
        raise TypeError(f"verifier: expected a ChainVerifier or a TreeVerifier, got {type(verifier).__name__}")
    return verifier


def plan_round(
    verifier: ChainVerifier | TreeVerifier,
    proposal: DraftProposal,
    root: torch.Tensor,
    *,
    prefix_len: int,
    room: int,
    vocab_size: int,
    tree: Tree | None = None,
) -> VerifyPlan:
    """The verify plan ``verifier`` would run for ``proposal`` on a target holding ``prefix_len`` tokens.

    Args:
        verifier: a :class:`ChainVerifier` (the chain of ``proposal.tokens``) or a :class:`TreeVerifier`
            (its :meth:`~specdec.verify.tree.TreeVerifier.build_tree` with ``room``).
        proposal: the request's drafter proposal (validated when the verifier validates).
        root: ``[1]`` int64, the newest emitted token.
        prefix_len, room: the request's committed length and free slots.
        vocab_size: the target's ``V``.
        tree: for a :class:`TreeVerifier`, the tree to check instead of its ``build_tree`` (a global
            verify budget's truncation of it); must fit ``room``.

    Example:
        >>> plan = plan_round(ChainVerifier(), DraftProposal(torch.tensor([4, 5])), torch.tensor([3]),
        ...                   prefix_len=2, room=10, vocab_size=97)
        >>> plan.tokens.tolist()
        [[3, 4, 5]]
    """
    if verifier.validate_proposals:
        proposal.validate(vocab_size=vocab_size)
    if type(verifier) is ChainVerifier:
        return VerifyPlan.chain(root.view(1), proposal.tokens, prefix_len=prefix_len)
    if tree is None:
        tree = verifier.build_tree(proposal, room=room)
    elif not isinstance(tree, Tree):
        raise TypeError(f"tree: expected a Tree or None, got {type(tree).__name__}")
    else:
        tree.check_fits(room, name="tree")
    tree = tree.to(root.device)
    verifier.last_tree = tree
    return VerifyPlan.for_tree(root, tree, prefix_len=prefix_len)


def truncate_chain(proposal: DraftProposal, num_tokens: int) -> DraftProposal:
    """The chain proposal's first ``num_tokens`` drafts, with their laws, scores and confidences.

    Verifying a prefix of a chain is verifying a shorter chain: the chain rule stays lossless.

    Example:
        >>> truncate_chain(DraftProposal(torch.tensor([4, 5, 6])), 2).tokens.tolist()
        [4, 5]
    """
    if proposal.tree is not None or proposal.parents is not None:
        raise ValueError("proposal: expected a chain proposal (no tree, no parents) to truncate, got a tree")
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or not 0 <= num_tokens <= proposal.num_tokens:
        raise ValueError(f"num_tokens: expected an int in [0, {proposal.num_tokens}], got {num_tokens!r}")
    if num_tokens == proposal.num_tokens:
        return proposal

    def head(t):
        return None if t is None else t[:num_tokens]

    return DraftProposal(
        tokens=proposal.tokens[:num_tokens],
        draft_probs=head(proposal.draft_probs),
        tree_logprobs=head(proposal.tree_logprobs),
        confidence=head(proposal.confidence),
    )


def accept_round(
    verifier: ChainVerifier | TreeVerifier,
    plan: VerifyPlan,
    logits: torch.Tensor,
    proposal: DraftProposal,
    *,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    context: torch.Tensor,
) -> RoundOutcome:
    """``verifier``'s acceptance of ``plan`` from its rows' logits, exactly as its batch-1 ``verify`` computes it.

    A :class:`ChainVerifier` applies the chain rule (:func:`~specdec.verify.chain.chain_accept`); a
    :class:`TreeVerifier` walks the tree (:func:`~specdec.verify.walks.greedy_walk` or
    :func:`~specdec.verify.walks.sample_and_match`).

    Args:
        verifier: the verifier that made ``plan``.
        plan: from :func:`plan_round`.
        logits: ``[N + 1, V]`` float32, the target's logits of the plan's rows.
        proposal: the proposal the plan was made from (its ``draft_probs`` feed the chain rule).
        sampling, generator: the request's law and RNG.
        context: ``[n]`` every token so far, the root last (read when ``sampling.needs_prefix``).

    Example:
        >>> plan = VerifyPlan.chain(torch.tensor([3]), torch.tensor([1]), prefix_len=0)
        >>> logits = torch.tensor([[0.0, 5.0], [5.0, 0.0]])
        >>> accept_round(ChainVerifier(), plan, logits, DraftProposal(torch.tensor([1])), sampling=SamplingConfig(), generator=None,
        ...              context=torch.tensor([3])).emitted.tolist()
        [1, 0]
    """
    if sampling.needs_prefix:
        logits = process_logits(logits, row_prefixes(context, plan), sampling)
    if type(verifier) is ChainVerifier:
        drafts = proposal.tokens
        n, bonus = chain_accept(logits, drafts, proposal.draft_probs, sampling=sampling, generator=generator)
        return RoundOutcome(emitted=torch.cat([drafts[:n], bonus.view(1)]), num_accepted=n, commit=n + 1)
    tree = plan.tree
    if sampling.greedy:
        walk = greedy_walk(tree, logits)
    else:
        walk = sample_and_match(tree, logits_to_probs(logits, sampling), generator=generator)
    return RoundOutcome(
        emitted=walk.emitted, num_accepted=walk.num_accepted, commit=plan.accepted_rows(walk.num_accepted, walk.rows)
    )
