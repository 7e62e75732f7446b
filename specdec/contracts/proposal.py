"""What a drafter hands the verifier each round, and the one place where it is checked."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from specdec.contracts.tree import Tree

# A reported law may drift from 1 by float32 rounding of a renormalised softmax, never by more.
_PROB_SUM_TOLERANCE = 1e-3


@dataclass
class DraftProposal:
    """A drafter's answer for one round.

    Attributes:
        tokens: ``[k]`` int64, the proposed continuation of the context (``k`` may be 0); with
            ``parents`` or ``tree``, the tokens of the tree's nodes / its first root-to-leaf path.
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
        parents: ``[k]`` int64 parent of each token (``-1`` = child of the root, ``parents[i] < i``):
            the same tree as ``tree`` given as a tensor; ``None`` for a chain.
        confidence: ``[k]`` float32 per-node confidence in ``[0, 1]``, set by a drafter that has one (the
            library's drafters leave it ``None``: DSpark keeps its calibrated confidences in
            ``last_confidence``). A verify budget reads it for trees and greedy chains; verifiers never do.

    Example:
        >>> DraftProposal(tokens=torch.tensor([5, 9]), draft_probs=None).num_tokens
        2
        >>> DraftProposal(torch.tensor([5, 9, 4]), parents=torch.tensor([-1, -1, 0])).as_tree().max_depth
        2
    """

    tokens: torch.Tensor
    draft_probs: torch.Tensor | None = None
    tree_logprobs: torch.Tensor | None = None
    tree: Tree | None = None
    parents: torch.Tensor | None = None
    confidence: torch.Tensor | None = None
    _parents_tree: Tree | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def num_tokens(self) -> int:
        """``k``, the length of :attr:`tokens` (int)."""
        return int(self.tokens.numel())

    @property
    def num_nodes(self) -> int:
        """Nodes the verifier would check: the tree's when a tree is given, else ``num_tokens``."""
        return self.tree.num_nodes if self.tree is not None else self.num_tokens

    def as_tree(self) -> Tree | None:
        """The drafter's own tree (``tree``, or ``tokens`` + ``parents``, built on the first call: its checks read
        the parents on the host once a round, however many readers ask); ``None`` when it proposed a chain."""
        if self.tree is not None:
            return self.tree
        if self.parents is not None:
            if self._parents_tree is None:
                try:
                    self._parents_tree = Tree(tokens=self.tokens, parents=self.parents)
                except (TypeError, ValueError) as err:  # named as the proposal's field, as validate() names it
                    raise type(err)(f"proposal.parents: {err}") from err
            return self._parents_tree
        return None

    def chain(self) -> DraftProposal:
        """The chain a chain verifier checks: this proposal when it is one; for a tree, its first root-to-leaf path.

        With ``tree``, ``tokens`` already is that path (the proposal comes back without the tree). With ``parents``,
        ``tokens`` holds every node: the path takes the first child at each depth, with those nodes' rows of
        ``draft_probs`` and ``confidence`` (each node's law given its own path, so the chain rule stays exact);
        ``tree_logprobs``, a drafter's scores per depth, are dropped there.

        Example:
            >>> tree = DraftProposal(torch.tensor([7, 8, 9]), parents=torch.tensor([-1, -1, 0]))   # 7 -> 9, and 8
            >>> tree.chain().tokens.tolist()
            [7, 9]
        """
        if self.tree is not None:
            return replace(self, tree=None)
        if self.parents is None:
            return self
        index = torch.tensor(self.as_tree().first_path(), dtype=torch.long, device=self.tokens.device)

        def rows(t):
            return None if t is None else t[index.to(t.device)]

        return DraftProposal(tokens=self.tokens[index], draft_probs=rows(self.draft_probs), confidence=rows(self.confidence))

    def validate(self, *, vocab_size: int) -> None:
        """Raise ``ValueError`` / ``TypeError`` naming the field when the proposal is malformed.

        Checks: ``tokens`` 1-D int64 ids in ``[0, vocab_size)``; ``draft_probs`` of shape ``[k, V]``,
        finite, non-negative, each row summing to 1; ``tree_logprobs`` ``[k', V]`` with ``1 <= k' <= k``, log-probabilities (``<= 0``, no NaN);
        ``parents`` ``[k]`` with ``-1 <= parents[i] < i``; ``tree`` a :class:`Tree` whose tokens lie in
        range; ``confidence`` ``[k]`` in ``[0, 1]``. Device-side checks are gathered into one host read.

        Example:
            >>> DraftProposal(torch.tensor([3, 120])).validate(vocab_size=100)
            Traceback (most recent call last):
            ...
            ValueError: proposal.tokens: expected token ids in [0, 100), got tokens[1] = 120
        """
        validate_proposal(self, vocab_size=vocab_size)


def _check_tensor(name: str, value, *, ndim: int, floating: bool) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: expected a tensor, got {type(value).__name__}")
    if floating != value.is_floating_point() or value.dtype == torch.bool:
        kind = "a floating" if floating else "an integer"
        raise TypeError(f"{name}: expected {kind} dtype, got {value.dtype}")
    if value.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, got shape {tuple(value.shape)}")
    return value


def validate_proposal(proposal: DraftProposal, *, vocab_size: int) -> None:
    """See :meth:`DraftProposal.validate`; the function form serves verifiers that take any proposal.

    Example:
        >>> validate_proposal(DraftProposal(torch.tensor([3, 5])), vocab_size=100)   # well formed: returns None
        >>> validate_proposal(DraftProposal(torch.tensor([3]), draft_probs=torch.ones(1, 4)), vocab_size=4)
        Traceback (most recent call last):
        ...
        ValueError: proposal.draft_probs: expected each row to sum to 1 (within 0.001), got row 0 summing to 4
    """
    checks = proposal_checks(proposal, vocab_size=vocab_size)
    if not checks:
        return
    device = proposal.tokens.device
    passed = torch.stack([ok.reshape(()).to(device) for ok, _ in checks]).tolist()  # the one host read
    for ok, message in zip(passed, (m for _, m in checks)):
        if not ok:
            raise ValueError(message())


def _first_bad(bad: torch.Tensor) -> int:
    return int(bad.nonzero()[0, 0])


def _checked_on_host(proposal: DraftProposal, vocab_size: int):
    """``(tokens, draft_probs, tree_logprobs)`` after the host's checks of them (types, dimensions, shapes)."""
    if not isinstance(proposal, DraftProposal):
        raise TypeError(f"proposal: expected a DraftProposal, got {type(proposal).__name__}")
    tokens = _check_tensor("proposal.tokens", proposal.tokens, ndim=1, floating=False)
    if tokens.dtype != torch.long:  # uint8 ids would index as a mask, int8 / int16 not at all
        raise TypeError(f"proposal.tokens: expected int64 token ids, got {tokens.dtype}")
    k = tokens.numel()
    probs = logprobs = None
    if proposal.draft_probs is not None:
        probs = _check_tensor("proposal.draft_probs", proposal.draft_probs, ndim=2, floating=True)
        if tuple(probs.shape) != (k, vocab_size):
            raise ValueError(
                f"proposal.draft_probs: expected shape ({k}, {vocab_size}) (one law per proposed token over the "
                f"target's vocabulary), got {tuple(probs.shape)}"
            )
    if proposal.tree_logprobs is not None:
        logprobs = _check_tensor("proposal.tree_logprobs", proposal.tree_logprobs, ndim=2, floating=True)
        if logprobs.shape[1] != vocab_size:
            raise ValueError(f"proposal.tree_logprobs: expected shape (depth, {vocab_size}), got {tuple(logprobs.shape)}")
        if not (min(k, 1) <= logprobs.shape[0] <= k):  # a row a depth along tokens: past the last token nothing to score
            raise ValueError(
                f"proposal.tree_logprobs: expected 1 to {k} rows (one a depth along the {k} tokens), got {logprobs.shape[0]}"
                if k
                else f"proposal.tree_logprobs: expected no rows for a proposal of no tokens, got {logprobs.shape[0]}"
            )
    return tokens, probs, logprobs


def _token_checks(tokens: torch.Tensor, vocab_size: int) -> list:
    if not tokens.numel():
        return []
    out_of_range = (tokens < 0) | (tokens >= vocab_size)
    return [
        (
            ~out_of_range.any(),
            lambda: (
                f"proposal.tokens: expected token ids in [0, {vocab_size}), got tokens[{_first_bad(out_of_range)}] = "
                f"{int(tokens[_first_bad(out_of_range)])}"
            ),
        )
    ]


def _prob_checks(probs: torch.Tensor | None) -> list:
    if probs is None or not probs.shape[0]:
        return []
    finite = torch.isfinite(probs).all(-1)  # [k]
    nonneg = (probs >= 0).all(-1)
    sums = probs.float().sum(-1)
    summed = (sums - 1).abs() <= _PROB_SUM_TOLERANCE
    return [
        (finite.all(), lambda: f"proposal.draft_probs: expected finite values, got NaN/inf in row {_first_bad(~finite)}"),
        (nonneg.all(), lambda: f"proposal.draft_probs: expected values >= 0, got a negative entry in row {_first_bad(~nonneg)}"),
        (
            summed.all() | ~finite.all(),
            lambda: (
                f"proposal.draft_probs: expected each row to sum to 1 (within {_PROB_SUM_TOLERANCE}), got row "
                f"{_first_bad(~summed)} summing to {float(sums[_first_bad(~summed)]):.6g}"
            ),
        ),
    ]


def _logprob_checks(logprobs: torch.Tensor | None) -> list:
    if logprobs is None or not logprobs.numel():
        return []
    return [
        (~torch.isnan(logprobs).any(), lambda: "proposal.tree_logprobs: expected no NaN, got NaN"),
        (
            ~(logprobs > 0).any(),
            lambda: f"proposal.tree_logprobs: expected log-probabilities (<= 0), got a maximum of {float(logprobs.max()):.6g}",
        ),
    ]


def proposals_pass_conditions(proposals, *, vocab_size: int) -> list[torch.Tensor]:
    """0-d bool tensors, all true iff every proposal of ``proposals`` passes :meth:`DraftProposal.validate`.

    Tokens, ``draft_probs`` and ``tree_logprobs`` of all proposals are checked together (a few kernels for any
    number of proposals); a proposal with ``parents``, a ``tree`` or ``confidence`` adds its own checks. What the
    host can decide raises at once, as ``validate`` raises it. A caller reads all conditions in one host read and,
    when one fails, validates each proposal alone for its message.

    Example:
        >>> good, bad = DraftProposal(torch.tensor([3, 4])), DraftProposal(torch.tensor([120]))
        >>> [bool(ok) for ok in proposals_pass_conditions([good, good], vocab_size=100)]
        [True]
        >>> [bool(ok) for ok in proposals_pass_conditions([good, bad], vocab_size=100)]
        [False]
    """
    conditions, plain = [], []
    for proposal in proposals:
        if proposal.parents is None and proposal.tree is None and proposal.confidence is None:
            plain.append(_checked_on_host(proposal, vocab_size))
        else:
            conditions += [ok for ok, _ in proposal_checks(proposal, vocab_size=vocab_size)]
    for position, checks in ((0, _token_checks), (1, _prob_checks), (2, _logprob_checks)):
        parts = [fields[position] for fields in plain if fields[position] is not None and fields[position].numel()]
        if parts:
            device = parts[0].device
            joined = torch.cat([t.to(device) for t in parts])
            conditions += [ok for ok, _ in (checks(joined, vocab_size) if position == 0 else checks(joined))]
    return conditions


def proposal_checks(proposal: DraftProposal, *, vocab_size: int) -> list[tuple[torch.Tensor, Callable[[], str]]]:
    """The checks of :meth:`DraftProposal.validate` that need the device: ``(condition, message)`` pairs, each
    condition a 0-d bool tensor that must be true, each message built (with device reads) only when it is not.

    What the host can decide (types, shapes) raises here at once.

    Example:
        >>> checks = proposal_checks(DraftProposal(torch.tensor([3, 120])), vocab_size=100)
        >>> [bool(ok) for ok, _ in checks], checks[0][1]()
        ([False], 'proposal.tokens: expected token ids in [0, 100), got tokens[1] = 120')
    """
    tokens, probs, logprobs = _checked_on_host(proposal, vocab_size)
    k = tokens.numel()
    checks = _token_checks(tokens, vocab_size) + _prob_checks(probs) + _logprob_checks(logprobs)
    if proposal.parents is not None:
        parents = _check_tensor("proposal.parents", proposal.parents, ndim=1, floating=False)
        if parents.numel() != k:
            raise ValueError(f"proposal.parents: expected shape ({k},) (one parent per token), got {tuple(parents.shape)}")
        if k:
            index = torch.arange(k, device=parents.device)
            bad_parent = (parents < -1) | (parents >= index)
            checks.append(
                (
                    ~bad_parent.any(),
                    lambda: (
                        f"proposal.parents: expected -1 <= parents[i] < i (parents before children), got parents"
                        f"[{_first_bad(bad_parent)}] = {int(parents[_first_bad(bad_parent)])}"
                    ),
                )
            )
    if proposal.tree is not None:
        tree = proposal.tree
        if not isinstance(tree, Tree):
            raise TypeError(f"proposal.tree: expected a Tree, got {type(tree).__name__}")
        if proposal.parents is not None:
            raise ValueError("proposal.parents: expected None when proposal.tree is given (one tree per proposal), got a tensor")
        if tree.num_nodes:
            tree_oob = tree.tokens >= vocab_size
            checks.append(
                (
                    ~tree_oob.any(),
                    lambda: (
                        f"proposal.tree: expected token ids in [0, {vocab_size}), got tree.tokens[{_first_bad(tree_oob)}] = "
                        f"{int(tree.tokens[_first_bad(tree_oob)])}"
                    ),
                )
            )
    if proposal.confidence is not None:
        conf = _check_tensor("proposal.confidence", proposal.confidence, ndim=1, floating=True)
        nodes = proposal.num_nodes
        if conf.numel() != nodes:
            raise ValueError(f"proposal.confidence: expected shape ({nodes},) (one value per node), got {tuple(conf.shape)}")
        if nodes:
            in_unit = (conf >= 0) & (conf <= 1)
            checks.append(
                (
                    in_unit.all(),
                    lambda: f"proposal.confidence: expected values in [0, 1], got {float(conf[_first_bad(~in_unit)])}",
                )
            )
    return checks


def check_proposal_size(proposal: DraftProposal, max_tokens: int) -> None:
    """Raise ``ValueError`` when a drafter proposed more tokens (or tree nodes) than the round allows.

    Example:
        >>> check_proposal_size(DraftProposal(torch.tensor([1, 2, 3])), 2)
        Traceback (most recent call last):
        ...
        ValueError: drafter: proposed 3 tokens / tree nodes, expected at most 2
    """
    if not isinstance(proposal, DraftProposal):
        raise TypeError(f"drafter: expected propose() to return a DraftProposal, got {type(proposal).__name__}")
    _check_tensor("proposal.tokens", proposal.tokens, ndim=1, floating=False)
    num_tokens = proposal.num_tokens
    size = proposal.tree.num_nodes if proposal.tree is not None else num_tokens
    if num_tokens > max_tokens or size > max_tokens:
        raise ValueError(f"drafter: proposed {max(size, num_tokens)} tokens / tree nodes, expected at most {max_tokens}")
