"""DSpark: a semi-autoregressive block drafter with a Markov head and a confidence head, and the
hardware-aware prefix scheduler that decides how many drafts each request verifies.

The parallel stage is the DFlash backbone (:mod:`specdec.drafters.dflash`), except that all ``gamma``
rows of the block ``[anchor, MASK x (gamma - 1)]`` predict: row ``k`` gives the logits ``U_k`` of the
``k``-th token after the anchor. The sequential stage adds a low-rank bigram bias on the previous
token, ``p_k(v) ~ exp(U_k(v) + (W2 W1[x_{k-1}])(v))`` (``x_0`` = the anchor), sampled left to right,
so every per-token law is an exact softmax and standard rejection sampling stays lossless. The
confidence head estimates ``c_k = sigmoid(w . [h_k ; W1[x_{k-1}]] + b)``, the probability that token
``k`` survives given that the tokens before it did.

:class:`PrefixScheduler` is Algorithm 1 of the DSpark paper: admit draft positions in decreasing
order of survival ``a_{r,j} = prod_{i <= j} c_{r,i}`` while the expected throughput
``(R + sum admitted a) * SPS(batch tokens)`` improves, and **stop at the first admission that does not
improve it**. The early stop is what keeps verification lossless: ``c_{j+1}`` depends on the realised
token ``x_j``, so a search that looks past a non-improving step lets ``x_j``'s value decide whether
``x_j`` itself is verified (Appendix A: target ``(0.7, 0.3)``, draft ``(0.5, 0.5)`` -> output
``(0.85, 0.15)``; ``tests/test_dspark.py`` reproduces it by exact enumeration). The lagged mode fixes
the *number* of admitted tokens from confidences two steps old, then fills it with the current best
candidates, which is causal without the early stop.
"""

from __future__ import annotations

from typing import Sequence

import torch

from specdec.drafters.base import DraftProposal
from specdec.drafters.dflash import DSPARK, _BlockDrafter
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample

__all__ = ["DSparkDrafter", "PrefixScheduler"]


class PrefixScheduler:
    """DSpark's hardware-aware prefix scheduler (Algorithm 1), exact (early stop) or 2-step lagged.

    Args:
        steps_per_second: ``SPS(B)`` for ``B = 1, 2, ...`` verify tokens in the batch: entry ``B - 1``
            is the profiled engine steps per second at ``B`` tokens. Batches beyond the table are not
            considered.
        early_stop: stop at the first admission that does not improve ``tau * SPS(B)`` (lossless).
            ``False`` is the retrospective global search, biased unless ``lag`` is used.
        lag: ``0`` (Algorithm 1) or ``2``: the number of admitted drafts is the global-search optimum
            computed on the confidences of two calls earlier; the current call admits that many
            candidates in decreasing order of the current survival. The first two calls fall back to
            the early-stop rule.

    Example:
        >>> sched = PrefixScheduler([1.0, 0.95, 0.9, 0.5])
        >>> sched.schedule(torch.tensor([[0.9, 0.9, 0.9]])).tolist()      # admits 2: (1+.9+.81)*.9 > (1+.9)*.95
        [2]
    """

    def __init__(self, steps_per_second: Sequence[float], *, early_stop: bool = True, lag: int = 0):
        sps = torch.as_tensor(steps_per_second, dtype=torch.float64).flatten()
        if sps.numel() < 1 or not bool((sps > 0).all()):
            raise ValueError(f"steps_per_second: expected a non-empty table of positive values, got {list(steps_per_second)}")
        if lag not in (0, 2):
            raise ValueError(f"lag: expected 0 (Algorithm 1) or 2 (the lagged production mode), got {lag!r}")
        self.sps = sps.tolist()
        self.early_stop = bool(early_stop)
        self.lag = lag
        self._history: list[torch.Tensor] = []

    def reset(self) -> None:
        self._history = []

    def _candidates(self, confidences: torch.Tensor) -> tuple[list[tuple[float, int, int]], int]:
        if confidences.ndim != 2:
            raise ValueError(f"confidences: expected [requests, gamma], got shape {tuple(confidences.shape)}")
        surv = torch.cumprod(confidences.double().clamp(0, 1), dim=1)  # [R, gamma]
        cands = [(float(surv[r, j]), r, j) for r in range(surv.shape[0]) for j in range(surv.shape[1]) if surv[r, j] > 0]
        # decreasing survival; ties by request then position, so prefixes are admitted in order
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        return cands, surv.shape[0]

    def _search(self, confidences: torch.Tensor, early_stop: bool) -> torch.Tensor:
        cands, requests = self._candidates(confidences)
        lengths = [0] * requests
        best_lengths = list(lengths)
        if requests > len(self.sps):
            raise ValueError(f"confidences: {requests} requests exceed the steps_per_second table ({len(self.sps)} entries)")
        tokens, tau = requests, float(requests)
        best = tau * self.sps[tokens - 1]
        for surv, r, j in cands:
            if tokens + 1 > len(self.sps):
                break
            lengths[r] = j + 1
            tokens += 1
            tau += surv
            value = tau * self.sps[tokens - 1]
            if value > best:
                best, best_lengths = value, list(lengths)
            elif early_stop:
                break
        return torch.tensor(best_lengths, dtype=torch.long)

    def schedule(self, confidences: torch.Tensor) -> torch.Tensor:
        """Draft tokens to verify per request: ``confidences [R, gamma]`` -> ``lengths [R]`` int64.

        Positions with confidence 0 are never admitted; ``lengths[r] <= gamma``.
        """
        confidences = torch.as_tensor(confidences).detach().cpu()
        if confidences.ndim == 1:
            confidences = confidences[None]
        if self.lag == 0:
            return self._search(confidences, self.early_stop)
        self._history.append(confidences)
        if len(self._history) <= self.lag:
            return self._search(confidences, True)
        old = self._history[-1 - self.lag]
        self._history = self._history[-self.lag - 1 :]
        capacity = int(self._search(old, False).sum())
        cands, requests = self._candidates(confidences)
        lengths = [0] * requests
        for _, r, j in cands[:capacity]:
            lengths[r] = max(lengths[r], j + 1)
        return torch.tensor(lengths, dtype=torch.long)


class DSparkDrafter(_BlockDrafter):
    """DSpark (``Qwen3DSparkModel``, DeepSpec): backbone + Markov head + confidence head.

    Greedy takes ``argmax(U_k + bias(x_{k-1}))`` left to right; at ``temperature > 0`` each token is
    drawn from the request's law (temperature / top-k / top-p) of those logits, which is returned as
    ``draft_probs``. ``last_confidence [k]`` holds the confidence of each proposed position.

    Args:
        model, target: as for :class:`~specdec.drafters.DFlashDrafter`.
        tree_budget: propose a best-first tree (path-dependent: the Markov bias of each child depends
            on its parent's token) of at most ``min(tree_budget, max_tokens)`` nodes.
        scheduler: a :class:`PrefixScheduler`; the chain is cut to the length it admits (batch 1). Not
            used with trees.
    """

    architectures = (DSPARK,)
    first_predicting_row = 0

    def __init__(self, model, target, *, tree_budget: int | None = None, scheduler: PrefixScheduler | None = None):
        super().__init__(model, target, tree_budget=tree_budget)
        if scheduler is not None and not isinstance(scheduler, PrefixScheduler):
            raise TypeError(f"scheduler: expected a PrefixScheduler or None, got {type(scheduler).__name__}")
        self.scheduler = scheduler
        self.last_confidence: torch.Tensor | None = None

    @classmethod
    def from_pretrained(cls, folder, target, *, dtype=None, tree_budget=None, scheduler: PrefixScheduler | None = None):
        from specdec.drafters.dflash import load_block_model

        return cls(load_block_model(folder, target, dtype=dtype), target, tree_budget=tree_budget, scheduler=scheduler)

    def reset(self) -> None:
        super().reset()
        if self.scheduler is not None:
            self.scheduler.reset()

    def step_logits(self, base_logits: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """``U_k + W2 W1[prev]``: ``[V]`` logits of one position given the previous token."""
        head = getattr(self.model, "markov_head", None)
        if head is None:
            return base_logits
        return base_logits + head.markov_w2(head.markov_w1(prev)).float()

    def confidence(self, hidden: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """``c_k`` in ``[0, 1]`` for rows ``hidden [k, H]`` with previous tokens ``prev [k]``."""
        head = getattr(self.model, "confidence_head", None)
        if head is None:
            return torch.ones(hidden.shape[0], device=hidden.device)
        feats = hidden
        if self.cfg.confidence_head_with_markov:
            feats = torch.cat([hidden, self.model.markov_head.markov_w1(prev).to(hidden.dtype)], dim=-1)
        return torch.sigmoid(head.proj(feats).float().squeeze(-1))

    def _draft(self, context, hidden, k, sampling, generator) -> DraftProposal:
        base = self.model.logits(hidden, self.lm_head)  # [k, V]
        if self.tree_budget is not None:
            anchor = int(context[-1])
            temperature = 1.0 if sampling.greedy else sampling.temperature

            def child_logprobs(path: torch.Tensor) -> torch.Tensor:
                t = path.numel()
                prev = anchor if t == 0 else int(path[-1])
                step = self.step_logits(base[t], torch.tensor(prev, device=base.device))
                return torch.log_softmax(step / temperature, dim=-1).cpu()

            return self._tree_from(child_logprobs, k, min(self.tree_budget, k), context.device)
        prev = context[-1]
        tokens, prevs, laws = [], [], []
        for t in range(k):
            step = self.step_logits(base[t], prev)  # [V]
            prevs.append(prev)
            if sampling.greedy:
                prev = step.argmax(-1)
            else:
                law = logits_to_probs(step, sampling)
                prev = sample(law, generator)
                laws.append(law)
            tokens.append(prev)
        drafted = torch.stack(tokens)
        conf = self.confidence(hidden, torch.stack(prevs))
        self.last_confidence = conf
        draft_probs = torch.stack(laws) if laws else None
        if self.scheduler is not None:
            # the admission of position j reads c_1..c_j only (the early-stop rule), never x_j
            keep = int(self.scheduler.schedule(conf[None])[0])
            drafted = drafted[:keep]
            draft_probs = None if draft_probs is None else draft_probs[:keep]
        return DraftProposal(tokens=drafted, draft_probs=draft_probs)
