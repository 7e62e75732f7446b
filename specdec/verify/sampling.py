"""The logits -> probabilities transform and the inverse-CDF draw shared by drafters and verifiers."""

from __future__ import annotations

import torch

from specdec.contracts.sampling import SamplingConfig

__all__ = ["SamplingConfig", "logits_to_probs", "sample"]


def logits_to_probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Target (or draft) law after temperature, top-k and top-p: ``[..., V]`` -> ``[..., V]`` float32.

    Only the prefix-free part of ``sampling`` is applied here; a repetition penalty and logits processors
    (``sampling.needs_prefix``) depend on each row's prefix and are applied to the logits before, by
    :func:`specdec.verify.processors.process_logits` (verifiers and :func:`specdec.generate` do so).

    Greedy settings give the one-hot law of the argmax, so the same acceptance code serves both modes.
    Top-p keeps the smallest set of most likely tokens whose mass reaches ``top_p`` (ties broken by
    token id, deterministically).

    Example:
        >>> logits_to_probs(torch.tensor([0.0, 1.0, 2.0]), SamplingConfig(temperature=1.0, top_k=2)).round(decimals=3)
        tensor([0.0000, 0.2690, 0.7310])
    """
    logits = logits.float()
    if sampling.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / sampling.temperature
    vocab = logits.shape[-1]
    if 0 < sampling.top_k < vocab:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        # mass strictly before each token; keep tokens whose preceding mass is still < top_p
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        keep_sorted = before < sampling.top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs * keep
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row of ``probs [..., V]`` -> ``[...]`` int64 (inverse CDF with the generator).

    Inverse-CDF sampling with one uniform per row keeps the stream of random numbers identical on
    every backend, which makes seeded runs reproducible. Zero-probability tokens are never drawn.

    Example:
        >>> sample(torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]]), torch.Generator().manual_seed(0)).shape
        torch.Size([2])
        >>> sample(torch.tensor([0.0, 0.0, 1.0]))
        tensor(2)
    """
    flat = probs.reshape(-1, probs.shape[-1])
    u = torch.rand(flat.shape[0], 1, generator=generator, device=flat.device, dtype=torch.float64)
    cdf = torch.cumsum(flat.double(), dim=-1)
    mass = cdf[:, -1]
    # a NaN or empty law would draw id V, which is no token: checked where the read is free (on an accelerator it
    # would stall every sampled token; there the embedding's bounds check stops id V)
    if flat.device.type == "cpu" and not bool(((mass > 0) & torch.isfinite(mass)).all()):
        raise ValueError(
            f"probs: expected every row to have positive, finite mass, got row sums {mass[~((mass > 0) & torch.isfinite(mass))][:3].tolist()} "
            "(every logit -inf after the logits processors or top-k / top-p, or a temperature so small that logits / T overflow)"
        )
    cdf = cdf / cdf[:, -1:]
    # u < 1 = cdf[-1], so the first index with cdf > u exists and carries positive mass
    idx = torch.searchsorted(cdf, u, right=True)
    return idx.reshape(probs.shape[:-1])
