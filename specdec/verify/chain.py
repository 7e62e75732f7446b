"""Chain verification: greedy longest-prefix match and rejection sampling.

For a proposal ``d_1..d_k`` with target laws ``p_1..p_{k+1}`` (``p_i`` = target law of the token after
``d_{i-1}``) and draft laws ``q_i``:

* draft law given (``q`` known): accept ``d_i`` with probability ``min(1, p_i(d_i) / q_i(d_i))``; on the
  first rejection draw from the residual ``norm(max(p_i - q_i, 0))``.
* deterministic proposal (``q`` unknown, the token was chosen, not drawn): accept with probability
  ``p_i(d_i)``; on rejection draw from ``p_i`` with ``d_i`` removed, renormalised. This is the
  rejection rule for a point-mass ``q`` and therefore exact.
* after ``k`` acceptances the bonus token is drawn from ``p_{k+1}``.

Greedy decoding is the same rule with one-hot target laws, which reduces to "accept while the draft
equals the target argmax, then emit the argmax".
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec.contracts.drafter import Drafter
from specdec.contracts.plan import VerifyPlan
from specdec.contracts.proposal import DraftProposal
from specdec.contracts.result import VerifyResult
from specdec.contracts.sampling import SamplingConfig
from specdec.contracts.target import Target, check_target
from specdec.verify.processors import process_logits, row_prefixes
from specdec.verify.round_inputs import check_round_inputs
from specdec.verify.sampling import logits_to_probs, sample

__all__ = ["ChainLaws", "ChainVerifier", "VerifyResult", "chain_accept", "chain_laws", "greedy_chain_accept_tokens"]


@dataclass
class ChainLaws:
    """The laws a chain verification samples from (exposed so tests can compose them exactly).

    Attributes:
        accept_probs: ``[k]`` probability of accepting ``d_i`` given ``d_1..d_{i-1}`` were accepted.
        residual_probs: ``[k, V]`` law of the replacement token when ``d_i`` is rejected.
        bonus_probs: ``[V]`` law of the token after ``d_k`` when every draft is accepted.

    Example:
        >>> laws = chain_laws(torch.tensor([[0.5, 0.5], [0.2, 0.8]]), torch.tensor([0]), torch.tensor([[1.0, 0.0]]))
        >>> laws.accept_probs, laws.residual_probs, laws.bonus_probs
        (tensor([0.5000]), tensor([[0., 1.]]), tensor([0.2000, 0.8000]))
    """

    accept_probs: torch.Tensor
    residual_probs: torch.Tensor
    bonus_probs: torch.Tensor


def chain_laws(target_probs: torch.Tensor, draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None) -> ChainLaws:
    """Acceptance and residual laws of a chain.

    Args:
        target_probs: ``[k + 1, V]`` target law at each verify row (row ``i`` follows ``d_i``; row 0
            follows the root).
        draft_tokens: ``[k]`` int64 proposed tokens, in ``[0, V)`` (not read here: :func:`chain_accept` and
            the verifiers check the ids).
        draft_probs: ``[k, V]`` the laws they were drawn from, or ``None`` (deterministic proposal).

    Example:
        >>> laws = chain_laws(torch.tensor([[0.5, 0.5], [1.0, 0.0]]), torch.tensor([0]), None)
        >>> laws.accept_probs, laws.residual_probs
        (tensor([0.5000]), tensor([[0., 1.]]))
    """
    k = _check_chain_shapes("target_probs", target_probs, draft_tokens, draft_probs)
    rows = torch.arange(k, device=target_probs.device)
    p = target_probs[:k]  # [k, V]
    p_tok = p[rows, draft_tokens]  # [k]
    if draft_probs is None:
        accept = p_tok
        residual = p.clone()
        residual[rows, draft_tokens] = 0.0
    else:
        q_tok = draft_probs[rows, draft_tokens]
        # q(d) = 0 means the drafter reported a law that could not have produced d: never accept it.
        ratio = p_tok / q_tok.clamp_min(torch.finfo(q_tok.dtype).tiny)
        accept = torch.where(q_tok > 0, ratio.clamp(max=1.0), torch.zeros_like(p_tok))
        residual = (p - draft_probs).clamp_min(0.0)
    mass = residual.sum(-1, keepdim=True)
    # A zero residual only happens when acceptance is certain (p == q, or p(d) == 1); any law works there.
    residual = torch.where(mass > 0, residual / mass.clamp_min(torch.finfo(mass.dtype).tiny), p)
    return ChainLaws(accept_probs=accept, residual_probs=residual, bonus_probs=target_probs[k])


def _check_chain_shapes(name: str, rows: torch.Tensor, draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None) -> int:
    """``k`` after checking a chain's shapes (host metadata only): ``rows`` ``[k + 1, V]`` (one verify row a draft
    token and the bonus row), ``draft_tokens`` ``[k]``, ``draft_probs`` ``[k, V]`` or ``None``."""
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.dim() != 1:
        raise ValueError(
            f"draft_tokens: expected a 1-D tensor [k], got {getattr(draft_tokens, 'shape', type(draft_tokens).__name__)}"
        )
    if draft_tokens.dtype != torch.long:  # uint8 ids would index the laws as a mask
        raise TypeError(f"draft_tokens: expected int64 token ids, got {draft_tokens.dtype}")
    k = draft_tokens.numel()
    if not isinstance(rows, torch.Tensor) or rows.dim() != 2 or rows.shape[0] != k + 1:
        got = tuple(rows.shape) if isinstance(rows, torch.Tensor) else type(rows).__name__
        raise ValueError(f"{name}: expected shape [k + 1, V] = [{k + 1}, V] (the root row and one a draft token), got {got}")
    if draft_probs is not None and tuple(draft_probs.shape) != (k, rows.shape[1]):
        raise ValueError(
            f"draft_probs: expected shape ({k}, {rows.shape[1]}) (one law a draft token), got {tuple(draft_probs.shape)}"
        )
    return k


def chain_accept(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    *,
    sampling: SamplingConfig,
    generator: torch.Generator | None = None,
) -> tuple[int, torch.Tensor]:
    """Decide a chain: returns ``(num_accepted, bonus_token)``; ``bonus_token`` is a 0-d int64 tensor.

    Args:
        target_logits: ``[k + 1, V]`` target logits of the verify rows ``[root, d_1, ..., d_k]``.
        draft_tokens: ``[k]``.
        draft_probs: ``[k, V]`` or ``None``; ignored when ``sampling`` is greedy.

    Raises:
        ValueError: a draft id outside ``[0, V)`` (read in the round's one host read); TypeError: ids not int64.

    Example (greedy: accept while the draft equals the argmax, then emit the argmax):
        >>> logits = torch.tensor([[0.0, 5.0], [5.0, 0.0], [0.0, 5.0]])
        >>> chain_accept(logits, torch.tensor([1, 1]), None, sampling=SamplingConfig())
        (1, tensor(0))
    """
    k = _check_chain_shapes("target_logits", target_logits, draft_tokens, draft_probs)
    vocab = target_logits.shape[1]
    if sampling.greedy:
        target_tokens = target_logits.argmax(-1)  # [k + 1]
        n = _read_decision((draft_tokens == target_tokens[:k]).long(), draft_tokens, vocab)
        return n, target_tokens[n]
    target_probs = logits_to_probs(target_logits, sampling)
    laws = chain_laws(target_probs, draft_tokens.clamp(0, vocab - 1), draft_probs)  # a bad id raises below
    u = torch.rand(k, generator=generator, device=target_logits.device, dtype=torch.float64)
    n = _read_decision((u < laws.accept_probs.double()).long(), draft_tokens, vocab)
    law = laws.bonus_probs if n == k else laws.residual_probs[n]
    return n, sample(law, generator)


def _read_decision(accepted: torch.Tensor, draft_tokens: torch.Tensor, vocab: int) -> int:
    """The accepted prefix's length from ``accepted [k]`` (1 where draft ``i`` passes), read in the round's one host
    read together with the draft ids' range check; raises ``ValueError`` naming the first id outside ``[0, vocab)``."""
    if not accepted.numel():
        return 0
    out_of_range = (draft_tokens < 0) | (draft_tokens >= vocab)
    n, any_bad, first_bad = torch.stack(
        [accepted.cumprod(0).sum(), out_of_range.any().long(), out_of_range.long().argmax()]
    ).tolist()
    if any_bad:
        raise ValueError(
            f"draft_tokens: expected token ids in [0, {vocab}), got draft_tokens[{first_bad}] = {int(draft_tokens[first_bad])}"
        )
    return n


def greedy_chain_accept_tokens(draft_tokens: Sequence[int], target_tokens: Sequence[int]) -> tuple[int, int]:
    """Greedy chain acceptance from host tokens: ``(num_accepted, bonus_token)`` as Python ints.

    The rule of :func:`chain_accept` with greedy sampling, given the target argmax of every verify row
    already read to the host (``target_logits.argmax(-1).tolist()``): accept while ``draft_tokens[i]``
    equals ``target_tokens[i]``, then emit ``target_tokens[n]``. Given the argmax of the same logits it
    decides exactly what :func:`chain_accept` decides, ties included: both take the same argmax over
    the same values, whose ties resolve to the first maximal index.

    Args:
        draft_tokens: ``k`` proposed token ids.
        target_tokens: ``k + 1`` target argmax ids of the verify rows ``[root, d_1, ..., d_k]``.

    Example:
        >>> greedy_chain_accept_tokens([1, 1], [1, 0, 1])
        (1, 0)
    """
    k = len(draft_tokens)
    if len(target_tokens) != k + 1:
        raise ValueError(f"target_tokens: expected k + 1 = {k + 1} ids (one per verify row), got {len(target_tokens)}")
    n = 0
    while n < k and draft_tokens[n] == target_tokens[n]:
        n += 1
    return n, target_tokens[n]


class ChainVerifier:
    """Verify a chain of draft tokens with one target forward.

    Greedy: longest prefix where the draft equals the target argmax, plus the bonus token.
    Sampling: rejection sampling against the drafter's law, or the deterministic-proposal rule when
    the drafter gives none. Both are lossless (see :func:`chain_laws`).

    Args:
        validate_proposals: check every proposal with :meth:`~specdec.contracts.DraftProposal.validate`
            before the target pass (one host read per round). ``False`` skips the check for a drafter
            already trusted, e.g. inside an overlapped pipeline where that read would serialise the
            draft and the verify.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> _ = target(torch.tensor([[1, 2]])); target.commit(2)  # prefill all but the root
        >>> from specdec.drafters import DraftProposal
        >>> result = ChainVerifier().verify(target, torch.tensor([3]), DraftProposal(torch.tensor([4, 5])),
        ...                                 sampling=SamplingConfig(), generator=None)
        >>> result.emitted.shape[0] == result.num_accepted + 1
        True
    """

    def __init__(self, *, validate_proposals: bool = True):
        if not isinstance(validate_proposals, bool):
            raise TypeError(f"validate_proposals: expected a bool, got {type(validate_proposals).__name__}")
        self.validate_proposals = validate_proposals
        self._warned_tree = False

    def verify(
        self,
        target: Target,
        root: torch.Tensor,
        proposal: DraftProposal,
        *,
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
        hidden_layers: Sequence[int] = (),
        context: torch.Tensor | None = None,
        drafter: Drafter | None = None,
    ) -> VerifyResult:
        """Run one round: one target pass over ``[root, d_1, ..., d_k]``, accept a prefix, commit it.

        Args:
            target: a :class:`~specdec.contracts.Target` whose cache holds the context but the root.
            root: ``[1]`` int64, the newest emitted token.
            proposal: the drafter's :class:`~specdec.contracts.DraftProposal` (validated here; a tree in
                it is not verified, the chain is its first root-to-leaf path, :meth:`~specdec.contracts.DraftProposal.chain`: a
                warning says so, once a verifier).
            sampling, generator: the target law and the request's generator.
            hidden_layers: taps to return for the committed rows.
            context: ``[n]`` every token so far, ``root`` last; required when ``sampling.needs_prefix``
                (repetition penalty, logits processors: row ``i`` is processed with ``context + d_1..d_i``).
            drafter: the drafter of the round, which the decode loop passes to every verifier; a one-level
                verifier never calls it (:class:`~specdec.verify.two_level.TwoLevelVerifier` drafts again).

        Returns:
            :class:`~specdec.contracts.VerifyResult` with ``emitted [n + 1]`` (``n`` accepted drafts, then the
            bonus token), ``num_accepted = n`` and ``hidden [n + 1, taps, H]`` (``None`` without taps).

        Example (greedy; the target's cache holds ``[1, 2]``, the root ``3`` is not in it yet):
            >>> from specdec.testing import tiny_target
            >>> from specdec.contracts import DraftProposal
            >>> target = tiny_target(seed=0)
            >>> _ = target(torch.tensor([[1, 2]])); target.commit(2)
            >>> result = ChainVerifier().verify(target, torch.tensor([3]), DraftProposal(torch.tensor([4, 5])),
            ...                                 sampling=SamplingConfig())
            >>> target.length == 2 + result.num_accepted + 1, result.emitted.shape[0] == result.num_accepted + 1
            (True, True)
        """
        check_target(target)
        check_round_inputs(target, root, context)
        if self.validate_proposals:
            proposal.validate(vocab_size=target.vocab_size)
        if (proposal.tree is not None or proposal.parents is not None) and not self._warned_tree:
            self._warned_tree = True
            warnings.warn(
                "ChainVerifier: the drafter proposed a tree; only its first root-to-leaf path (proposal.chain()) is "
                "verified. Pass verifier=TreeVerifier() to verify the whole tree.",
                stacklevel=2,
            )
        proposal = proposal.chain()
        drafts = proposal.tokens
        plan = VerifyPlan.chain(root.view(1), drafts, prefix_len=target.length)
        out = target.run_plan(plan, hidden_layers=hidden_layers)
        logits = out.logits[0]  # [k + 1, V]
        if sampling.needs_prefix:
            if context is None:
                raise ValueError(
                    "context: expected the tokens so far [n] (sampling has a repetition penalty or logits "
                    "processors, whose law depends on them), got None"
                )
            logits = process_logits(logits, row_prefixes(context, plan), sampling)
        n, bonus = chain_accept(logits, drafts, proposal.draft_probs, sampling=sampling, generator=generator)
        target.commit(n + 1)
        hidden = torch.stack([h[0, : n + 1] for h in out.hidden], dim=1) if hidden_layers else None  # [n + 1, taps, H]
        return VerifyResult(emitted=torch.cat([drafts[:n], bonus.view(1)]), num_accepted=n, hidden=hidden)
