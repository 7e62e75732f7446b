"""Prompt-lookup drafting: copy what followed the latest earlier occurrence of the context's tail."""

from __future__ import annotations

import torch

from specdec.contracts.drafter import check_propose_arguments
from specdec.drafters.base import DraftProposal


class NGramDrafter:
    """Propose what followed earlier occurrences of the last ``n`` context tokens (prompt lookup).

    Tries ``n = max_ngram`` down to ``min_ngram``, most recent match first. With ``max_paths = 1`` the
    proposal is the continuation of the single best match (a chain); with ``max_paths > 1`` the
    continuations of up to ``max_paths`` distinct matches are merged into a tree (first path = the
    chain) for :class:`~specdec.verify.TreeVerifier`. Proposals are deterministic, so they carry no
    draft law (the verifier applies the deterministic-proposal rule when sampling).

    Args:
        max_ngram: longest suffix to match.
        min_ngram: shortest suffix to match.
        max_paths: continuations to merge into a tree (1 = chain).
        depth: longest continuation per path (default: ``max_tokens``).

    Example:
        >>> from specdec.contracts import SamplingConfig
        >>> d = NGramDrafter(max_ngram=2)
        >>> d.propose(torch.tensor([7, 8, 9, 4, 7, 8]), 3, sampling=SamplingConfig(), generator=None).tokens
        tensor([9, 4, 7])
    """

    vocab_size = None
    host_context = True  # it reads tokens on the host: an engine may hand it its context there

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, *, max_paths: int = 1, depth: int | None = None):
        for name, value in (("max_ngram", max_ngram), ("min_ngram", min_ngram), ("max_paths", max_paths), ("depth", depth)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"{name}: expected an int, got {value!r}")
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"min_ngram/max_ngram: expected 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        if max_paths < 1:
            raise ValueError(f"max_paths: expected >= 1, got {max_paths}")
        if depth is not None and depth < 1:
            raise ValueError(f"depth: expected >= 1 or None, got {depth}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.max_paths = max_paths
        self.depth = depth

    def reset(self) -> None:
        """Start a request (nothing to forget: every proposal is read from the context).

        Example:
            >>> NGramDrafter().reset()
        """

    def _continuations(self, context: torch.Tensor, length: int) -> list[torch.Tensor]:
        paths: list[torch.Tensor] = []
        seen: set[tuple[int, ...]] = set()
        n_ctx = context.numel()
        for n in range(min(self.max_ngram, n_ctx - 1), self.min_ngram - 1, -1):
            # windows[i] = context[i : i + n] for every start before the suffix itself
            windows = context[:-1].unfold(0, n, 1)  # [n_ctx - n, n]
            hits = (windows == context[-n:]).all(-1).nonzero().flatten()
            for hit in reversed(hits.tolist()):
                cont = context[hit + n : hit + n + length]
                key = tuple(cont.tolist())
                if key not in seen:
                    seen.add(key)
                    paths.append(cont.clone())
                if len(paths) == self.max_paths:
                    return paths
        return paths

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        """Up to ``max_tokens`` drafts after ``context [n]``: what followed the latest match of its tail.

        Args:
            context: ``[n]`` int64, the request so far (prompt then emitted tokens).
            max_tokens: the most drafts (tree nodes when ``max_paths > 1``).
            sampling, generator: unused: proposals are deterministic.

        Returns:
            :class:`DraftProposal` with ``tokens [k]`` (``k <= max_tokens``, empty without a match), no draft
            law, and with ``max_paths > 1`` a ``tree`` of at most ``max_tokens`` nodes whose first path is
            ``tokens``.

        Example:
            >>> from specdec.contracts import SamplingConfig
            >>> p = NGramDrafter(max_ngram=2, max_paths=2).propose(torch.tensor([1, 2, 7, 1, 2, 8, 1, 2]), 4,
            ...                                                    sampling=SamplingConfig(), generator=None)
            >>> p.tokens.tolist(), p.tree.tokens.tolist(), p.tree.parents.tolist()
            ([8, 1, 2], [8, 1, 2, 7], [-1, 0, 1, -1])
        """
        check_propose_arguments(context, max_tokens)
        if max_tokens <= 0:
            return DraftProposal(tokens=context.new_zeros(0))
        length = max_tokens if self.depth is None else min(self.depth, max_tokens)
        paths = self._continuations(context, length)
        if not paths:
            return DraftProposal(tokens=context.new_zeros(0))
        if self.max_paths == 1:
            return DraftProposal(tokens=paths[0])
        from specdec.verify.tree import Tree

        tree = Tree.from_paths([p.tolist() for p in paths], device=context.device).truncate(max_tokens)
        return DraftProposal(tokens=paths[0][: tree.num_nodes], tree=tree)
