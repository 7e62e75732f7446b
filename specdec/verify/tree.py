"""Tree verification: one target forward over a tree of candidate continuations.

A chain proposal ends the round at its first miss; a tree keeps several candidates at each depth, so a
miss on one branch can still be covered by a sibling. The pieces, each usable on its own:

* :class:`Tree` -- tokens and parent pointers (parents before children), validated on construction.
* :func:`best_first_tree` -- the ``budget`` most likely draft prefixes (the DDTree heap), from per-depth
  draft log-probs ``[D, V]`` or from a callable that gives path-dependent child log-probs.
* :func:`best_first_tree_device` -- the same tree from ``[D, V]`` log-probs with fixed-shape tensor ops on
  the device (no host sync, CUDA-graph capturable), as padded tensors.
* :func:`tree_attention_mask` / :func:`tree_positions` -- the mask and RoPE positions of the verify rows
  ``[root, node_0, ..., node_{N-1}]``.
* :func:`greedy_walk` / :func:`sample_and_match` -- decide which root path is accepted and the bonus
  token, from the target's logits / law at every verify row.
* :class:`TreeVerifier` -- all of the above against a :class:`specdec.models.Target`, plus the KV commit.

Row convention: verify row 0 is the root (the newest emitted token, not yet in the cache); node ``i``
is row ``i + 1``; ``parents[i] == -1`` means "child of the root".

Why sample-and-match is exact: at each visited row the emitted token is drawn from the target's law
given exactly the tokens emitted before it, and the next row to visit (the first child carrying that
token) depends only on tokens already emitted. So the emitted sequence is a target sample, for any tree
that was built without looking at the target's draws. Accepting deterministic top-k children with the
chain ratio ``min(1, p/q)`` is *not* exact (``tests/verify/test_tree.py`` measures the bias).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec.contracts.drafter import Drafter
from specdec.contracts.plan import VerifyPlan
from specdec.contracts.proposal import DraftProposal
from specdec.contracts.result import VerifyResult
from specdec.contracts.sampling import SamplingConfig
from specdec.contracts.target import Target, check_target
from specdec.contracts.tree import Tree, tree_attention_mask, tree_positions
from specdec.verify.best_first import _check_budget, best_first_tree
from specdec.verify.best_first_device import best_first_tree_device
from specdec.verify.processors import process_logits, row_prefixes
from specdec.verify.round_inputs import check_round_inputs
from specdec.verify.sampling import logits_to_probs
from specdec.verify.walks import TreeWalk, greedy_walk, match_walk, sample_and_match

__all__ = [
    "Tree",
    "TreeWalk",
    "TreeVerifier",
    "best_first_tree",
    "best_first_tree_device",
    "greedy_walk",
    "match_walk",
    "sample_and_match",
    "tree_attention_mask",
    "tree_positions",
]


class TreeVerifier:
    """Verify a tree of draft continuations with one target forward.

    The verify rows are ``[root, node_0, ..., node_{N-1}]`` (node ``i`` = row ``i + 1``). Example tree
    (tokens a..e, ``parents = [-1, -1, 0, 1, 1]``) after a committed prefix ``p0..p{L-1}``::

        p0 .. p{L-1} ── r ─┬─ a ── c                 row:   r  a  b  c  d  e
                           └─ b ─┬─ d                depth: 0  1  1  2  2  2
                                 └─ e                position = L + depth

        attention mask (1 = may attend; the committed prefix is visible to every row):

                  p0 .. p{L-1} │ r  a  b  c  d  e
              r    1  ..  1    │ 1  .  .  .  .  .
              a    1  ..  1    │ 1  1  .  .  .  .
              b    1  ..  1    │ 1  .  1  .  .  .
              c    1  ..  1    │ 1  1  .  1  .  .
              d    1  ..  1    │ 1  .  1  .  1  .
              e    1  ..  1    │ 1  .  1  .  .  1

    Row ``x``'s logits predict the token after the path ``r .. x``. Greedy: follow the child equal to
    the argmax of the current row, and emit the argmax of the last matched row as the bonus token.
    Sampling: :func:`sample_and_match`. The accepted rows' K/V are compacted to the front of the
    verify window (``target.commit(rows)``); the bonus token becomes the next root.

    Where the tree comes from, in this order:

    1. ``proposal.tree`` (a :class:`Tree`), if the proposal carries one;
    2. ``proposal.tree_logprobs [k, V]`` (per-depth draft log-probs, if the proposal carries them) or
       else ``log(proposal.draft_probs)``: ``best_first_tree(..., min(budget, room - 1))``;
    3. otherwise the chain of ``proposal.tokens``.

    A chain-shaped tree runs exactly the chain verify forward, so with a chain the greedy output is
    identical to :class:`~specdec.verify.chain.ChainVerifier`'s and the sampled output has the same law.

    Args:
        budget: most nodes in a tree built here (capped by the cache room).
        top_k: at most this many children per node in a tree built here.
        validate_proposals: as for :class:`~specdec.verify.chain.ChainVerifier`.
        device_tree: build trees from log-probs with :func:`best_first_tree_device` (tensor ops on the
            log-probs' device) instead of the host heap; the same tree. The number of nodes is read
            back to the host once to make the :class:`Tree` (its depths are built on the host anyway).

    Example:
        >>> from specdec.testing import tiny_target
        >>> from specdec.drafters.base import DraftProposal
        >>> target = tiny_target(seed=0)
        >>> _ = target(torch.tensor([[1, 2]])); target.commit(2)      # prefill all but the root
        >>> probs = torch.softmax(torch.randn(3, target.vocab_size, generator=torch.Generator().manual_seed(0)), -1)
        >>> result = TreeVerifier(budget=8).verify(target, torch.tensor([3]), DraftProposal(probs.argmax(-1), probs),
        ...                                        sampling=SamplingConfig(), generator=None)
        >>> result.emitted.shape[0] == result.num_accepted + 1
        True
    """

    def __init__(self, budget: int = 64, *, top_k: int | None = None, device_tree: bool = False, validate_proposals: bool = True):
        self.budget = _check_budget(budget)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k: expected an int >= 1 or None, got {top_k!r}")
        if not isinstance(device_tree, bool):
            raise TypeError(f"device_tree: expected a bool, got {type(device_tree).__name__} {device_tree!r}")
        if not isinstance(validate_proposals, bool):
            raise TypeError(f"validate_proposals: expected a bool, got {type(validate_proposals).__name__}")
        self.top_k = top_k
        self.device_tree = device_tree
        self.validate_proposals = validate_proposals
        self.last_tree: Tree | None = None

    def build_tree(self, proposal: DraftProposal, *, room: int) -> Tree:
        """The tree this verifier checks for ``proposal``, with at most ``room - 1`` nodes.

        Args:
            proposal: ``proposal.tree`` is used as given; else ``tree_logprobs [k, V]`` (or
                ``log(draft_probs [k, V])``) feed :func:`best_first_tree` with ``min(budget, room - 1)``
                nodes; else the chain of ``proposal.tokens [k]``.
            room: free cache slots (``target.room()``); the root takes one.

        Returns:
            a :class:`Tree` of ``N <= room - 1`` nodes (``tokens [N]``, ``parents [N]``).

        Example:
            >>> probs = torch.tensor([[0.6, 0.4, 0.0], [0.1, 0.9, 0.0]])
            >>> tree = TreeVerifier(budget=3).build_tree(DraftProposal(probs.argmax(-1), probs), room=16)
            >>> tree.tokens.tolist(), tree.parents.tolist()
            ([0, 1, 1], [-1, 0, -1])
        """
        given = proposal.as_tree()
        if given is not None:
            if not isinstance(given, Tree):
                raise TypeError(f"proposal.tree: expected a Tree, got {type(given).__name__}")
            given.check_fits(room, name="proposal.tree")
            return given
        tokens = proposal.tokens
        scores = proposal.tree_logprobs
        if scores is None and proposal.draft_probs is not None:
            # probabilities are <= 1; clamp the rounding of renormalised laws so their logs stay <= 0
            scores = proposal.draft_probs.float().clamp(max=1.0).log()
        if scores is None or tokens.numel() == 0:
            tree = Tree.chain(tokens)
            tree.check_fits(room, name="proposal.tokens")
            return tree
        budget = min(self.budget, room - 1)
        if budget < 1:
            return Tree.chain(tokens[:0])
        if self.device_tree:
            tokens, parents, node_scores, num_nodes = best_first_tree_device(scores, budget, top_k=self.top_k, check_values=True)
            n = int(num_nodes)
            return Tree(tokens=tokens[:n], parents=parents[:n], scores=node_scores[:n])
        return best_first_tree(scores, budget, top_k=self.top_k)

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
        """Run one round: build the tree, one target pass over its plan, walk it, commit the accepted path.

        Args:
            target: a :class:`~specdec.contracts.Target` whose cache holds the context but the root.
            root: ``[1]`` int64, the newest emitted token.
            proposal: the drafter's :class:`~specdec.contracts.DraftProposal` (validated here).
            sampling, generator: the target law and the request's generator.
            hidden_layers: taps to return for the committed rows.
            context: ``[n]`` every token so far, ``root`` last; required when ``sampling.needs_prefix``
                (repetition penalty, logits processors: each row is processed with ``context`` then the
                tokens of its own root-to-node path).
            drafter: the drafter of the round, which the decode loop passes to every verifier; a one-level
                verifier never calls it (:class:`~specdec.verify.two_level.TwoLevelVerifier` drafts again).

        Returns:
            :class:`~specdec.contracts.VerifyResult` with ``emitted [n + 1]`` (the ``n`` accepted nodes' tokens
            along one root path, then the bonus token), ``num_accepted = n`` and ``hidden [n + 1, taps, H]``
            (``None`` without taps). The tree checked is kept in :attr:`last_tree`.

        Example (greedy; the target's cache holds ``[1, 2]``, the root ``3`` is not in it yet):
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> _ = target(torch.tensor([[1, 2]])); target.commit(2)
            >>> tree = Tree(tokens=[4, 5, 6], parents=[-1, -1, 0])
            >>> result = TreeVerifier().verify(target, torch.tensor([3]), DraftProposal(torch.tensor([4]), tree=tree),
            ...                                sampling=SamplingConfig())
            >>> target.length == 2 + result.num_accepted + 1, result.emitted.shape[0] == result.num_accepted + 1
            (True, True)
        """
        check_target(target)
        check_round_inputs(target, root, context)
        if self.validate_proposals:
            proposal.validate(vocab_size=target.vocab_size)
        device = target.device
        tree = self.build_tree(proposal, room=target.room()).to(device)
        if not tree.is_chain and not target.supports_trees:
            raise ValueError(
                f"target: {type(target).__name__} verifies chains only (supports_trees is False), got a tree of "
                f"{tree.num_nodes} nodes; use ChainVerifier or a drafter that proposes a chain"
            )
        self.last_tree = tree
        plan = VerifyPlan.for_tree(root, tree, prefix_len=target.length)
        out = target.run_plan(plan, hidden_layers=hidden_layers)
        logits = out.logits[0]  # [N + 1, V]
        if sampling.needs_prefix:
            if context is None:
                raise ValueError(
                    "context: expected the tokens so far [n] (sampling has a repetition penalty or logits "
                    "processors, whose law depends on them), got None"
                )
            logits = process_logits(logits, row_prefixes(context, plan), sampling)
        if sampling.greedy:
            walk = greedy_walk(tree, logits)
        else:
            walk = sample_and_match(tree, logits_to_probs(logits, sampling), generator=generator)
        target.commit(plan.accepted_rows(walk.num_accepted, walk.rows))
        hidden = None
        if hidden_layers:
            kept = torch.arange(walk.num_accepted + 1, device=device) if tree.is_chain else walk.rows.to(device)
            hidden = torch.stack([h[0] for h in out.hidden], dim=1)[kept]  # [n + 1, taps, H]
        return VerifyResult(emitted=walk.emitted, num_accepted=walk.num_accepted, hidden=hidden)
