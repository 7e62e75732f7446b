"""Prompt-lookup drafting: copy what followed the latest earlier occurrence of the context's tail."""

from __future__ import annotations

import torch

from specdec.drafters.base import DraftProposal
from specdec.verify.sampling import SamplingConfig


class NGramDrafter:
    """Propose the continuation of the most recent earlier match of the last ``n`` context tokens.

    Tries ``n = max_ngram`` down to ``min_ngram``; the proposal is deterministic, so it carries no
    draft law (the verifier applies the deterministic-proposal rule when sampling).

    Args:
        max_ngram: longest suffix to match.
        min_ngram: shortest suffix to match.

    Example:
        >>> d = NGramDrafter(max_ngram=2)
        >>> d.propose(torch.tensor([7, 8, 9, 4, 7, 8]), 3, sampling=SamplingConfig(), generator=None).tokens
        tensor([9, 4, 7])
    """

    vocab_size = None

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"min_ngram/max_ngram: expected 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def reset(self) -> None:
        pass

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        empty = context.new_zeros(0)
        n_ctx = context.numel()
        if max_tokens <= 0:
            return DraftProposal(tokens=empty)
        for n in range(min(self.max_ngram, n_ctx - 1), self.min_ngram - 1, -1):
            # windows[i] = context[i : i + n] for every start before the suffix itself
            windows = context[:-1].unfold(0, n, 1)  # [n_ctx - n, n]
            hits = (windows == context[-n:]).all(-1).nonzero().flatten()
            if hits.numel() == 0:
                continue
            start = int(hits[-1]) + n
            return DraftProposal(tokens=context[start : start + max_tokens].clone())
        return DraftProposal(tokens=empty)
