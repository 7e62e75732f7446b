"""``generate``: autoregressive and speculative decoding on the same lean runtime."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch

from specdec.drafters.base import DraftProposal, Drafter
from specdec.verify.chain import ChainVerifier
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample

# On an accelerator, AR decoding looks for EOS only every this many tokens (no host sync per token).
_EOS_CHECK_EVERY = 16


@dataclass
class GenerationStats:
    """Counters of one or more requests.

    Attributes:
        new_tokens: tokens returned.
        target_passes: target forwards, the prefill included (AR: one per token).
        rounds: speculative rounds (verify passes).
        accepted_histogram: ``accepted_histogram[n]`` = rounds that accepted ``n`` draft tokens.
        draft_s, verify_s, other_s: wall time split (prefill counts as verify).
    """

    new_tokens: int = 0
    target_passes: int = 0
    rounds: int = 0
    accepted_histogram: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0
    other_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.draft_s + self.verify_s + self.other_s

    @property
    def tokens_per_target_pass(self) -> float:
        return self.new_tokens / max(self.target_passes, 1)

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.total_s if self.total_s > 0 else float("nan")

    @property
    def mean_accepted(self) -> float:
        total = sum(self.accepted_histogram)
        return sum(n * c for n, c in enumerate(self.accepted_histogram)) / total if total else 0.0

    def record_round(self, num_accepted: int) -> None:
        if len(self.accepted_histogram) <= num_accepted:
            self.accepted_histogram.extend([0] * (num_accepted + 1 - len(self.accepted_histogram)))
        self.accepted_histogram[num_accepted] += 1
        self.rounds += 1

    def __add__(self, other: "GenerationStats") -> "GenerationStats":
        size = max(len(self.accepted_histogram), len(other.accepted_histogram))
        hist = [0] * size
        for h in (self.accepted_histogram, other.accepted_histogram):
            for n, c in enumerate(h):
                hist[n] += c
        return GenerationStats(
            new_tokens=self.new_tokens + other.new_tokens,
            target_passes=self.target_passes + other.target_passes,
            rounds=self.rounds + other.rounds,
            accepted_histogram=hist,
            draft_s=self.draft_s + other.draft_s,
            verify_s=self.verify_s + other.verify_s,
            other_s=self.other_s + other.other_s,
        )

    def summary(self) -> str:
        return (
            f"{self.new_tokens} tokens, {self.target_passes} target passes "
            f"({self.tokens_per_target_pass:.2f} tokens/pass), {self.tokens_per_second:.1f} tok/s; "
            f"time draft {self.draft_s:.2f}s / verify {self.verify_s:.2f}s / other {self.other_s:.2f}s"
        )

    def as_dict(self) -> dict:
        return {
            "new_tokens": self.new_tokens,
            "target_passes": self.target_passes,
            "rounds": self.rounds,
            "accepted_histogram": list(self.accepted_histogram),
            "tokens_per_target_pass": self.tokens_per_target_pass,
            "tokens_per_second": self.tokens_per_second,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "other_s": self.other_s,
        }


@dataclass
class GenerationOutput:
    """Result of :func:`generate`.

    Attributes:
        tokens: ``[batch, new_tokens]`` int64, or a list of 1-D tensors when requests stopped at EOS
            after different lengths.
        stats: counters summed over the batch.
        per_request: counters of each request.
    """

    tokens: torch.Tensor | list[torch.Tensor]
    stats: GenerationStats
    per_request: list[GenerationStats]


def _check_generate_args(target, input_ids, max_new_tokens, drafter, num_draft_tokens) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or input_ids.dtype not in (torch.long, torch.int32):
        desc = f"{input_ids.dtype} with shape {tuple(input_ids.shape)}" if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise TypeError(f"input_ids: expected a 2-D integer tensor [batch, prompt_len], got {desc}")
    if input_ids.shape[0] < 1 or input_ids.shape[1] < 1:
        raise ValueError(f"input_ids: expected at least one request of at least one token, got shape {tuple(input_ids.shape)}")
    if input_ids.device != target.device:
        raise ValueError(f"input_ids: expected device {target.device} (the target's), got {input_ids.device}")
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or hi >= target.vocab_size:
        raise ValueError(f"input_ids: token ids must lie in [0, {target.vocab_size}), got values in [{lo}, {hi}]")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
    if input_ids.shape[1] + max_new_tokens > target.max_seq_len:
        raise ValueError(
            f"input_ids: prompt length {input_ids.shape[1]} + max_new_tokens {max_new_tokens} exceeds the target's "
            f"max_seq_len {target.max_seq_len}"
        )
    if isinstance(num_draft_tokens, bool) or not isinstance(num_draft_tokens, int) or num_draft_tokens < 0:
        raise ValueError(f"num_draft_tokens: expected an int >= 0, got {num_draft_tokens!r}")
    if drafter is not None:
        if not isinstance(drafter, Drafter):
            raise TypeError(f"drafter: expected an object with reset() and propose() (specdec.drafters.Drafter), got {type(drafter).__name__}")
        if drafter.vocab_size is not None and drafter.vocab_size != target.vocab_size:
            raise ValueError(f"drafter: vocabulary size {drafter.vocab_size} differs from the target's {target.vocab_size}")


def _seeds(seed, batch: int) -> list[int | None]:
    if seed is None or isinstance(seed, int):
        return [None if seed is None else seed + i for i in range(batch)]
    seeds = list(seed)
    if len(seeds) != batch:
        raise ValueError(f"seed: expected an int or {batch} ints (one per request), got {len(seeds)}")
    return seeds


@torch.no_grad()
def generate(
    target,
    input_ids: torch.Tensor,
    max_new_tokens: int = 256,
    drafter: Drafter | None = None,
    verifier=None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | Sequence[int] | None = None,
    *,
    num_draft_tokens: int = 4,
    eos_token_id: int | Sequence[int] | None = None,
) -> GenerationOutput:
    """Decode ``max_new_tokens`` per request, autoregressively (``drafter=None``) or speculatively.

    Requests (rows of ``input_ids``) are decoded one after another on the target's batch-1 cache.

    Args:
        target: a :class:`specdec.models.Target`.
        input_ids: ``[batch, prompt_len]`` int64 prompts.
        max_new_tokens: tokens to generate per request (fewer if EOS is emitted first).
        drafter: a :class:`specdec.drafters.Drafter`; ``None`` = plain autoregressive decoding.
        verifier: default :class:`specdec.ChainVerifier`.
        temperature, top_p, top_k: the target law; ``temperature=0`` is greedy.
        seed: per-request seeds (an int gives ``seed + row``); ``None`` draws from torch's global RNG.
        num_draft_tokens: the most tokens a drafter may propose per round.
        eos_token_id: stop a request after emitting one of these; ``None`` never stops early.

    Returns:
        :class:`GenerationOutput`.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> prompt = torch.tensor([[1, 2, 3, 1, 2]])
        >>> ar = generate(target, prompt, max_new_tokens=12)
        >>> spec = generate(target, prompt, max_new_tokens=12, drafter=NGramDrafter())
        >>> torch.equal(ar.tokens, spec.tokens)
        True
    """
    _check_generate_args(target, input_ids, max_new_tokens, drafter, num_draft_tokens)
    sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    verifier = verifier if verifier is not None else ChainVerifier()
    eos = torch.tensor([] if eos_token_id is None else ([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)), dtype=torch.long, device=target.device)
    outputs, per_request = [], []
    for prompt, row_seed in zip(input_ids.long(), _seeds(seed, input_ids.shape[0])):
        generator = None
        if row_seed is not None:
            generator = torch.Generator(device=target.device).manual_seed(row_seed)
        tokens, stats = _generate_one(target, prompt, max_new_tokens, drafter, verifier, sampling, generator, num_draft_tokens, eos)
        outputs.append(tokens)
        per_request.append(stats)
    total = sum(per_request[1:], per_request[0])
    if len({t.numel() for t in outputs}) == 1:
        return GenerationOutput(tokens=torch.stack(outputs), stats=total, per_request=per_request)
    return GenerationOutput(tokens=outputs, stats=total, per_request=per_request)


def _pick(logits: torch.Tensor, sampling: SamplingConfig, generator) -> torch.Tensor:
    if sampling.greedy:
        return logits.argmax(-1)
    return sample(logits_to_probs(logits, sampling), generator)


def _generate_one(target, prompt, max_new, drafter, verifier, sampling, generator, k_max, eos):
    stats = GenerationStats()
    plen = prompt.numel()
    # [plen + max_new + k_max]: context so far; a round may emit up to k_max + 1 tokens past max_new - 1
    buf = torch.empty(plen + max_new + k_max + 1, dtype=torch.long, device=prompt.device)
    buf[:plen] = prompt
    start = time.perf_counter()
    target.reset()
    if drafter is not None:
        drafter.reset()
    taps = tuple(getattr(drafter, "target_layer_ids", ()) or ()) if drafter is not None else ()
    prefill = target(prompt[None], hidden_layers=taps)
    logits = prefill.logits[0, -1]
    target.commit(plen)
    # [rows, taps, H] features of the rows committed since the drafter last saw any
    fresh_hidden = torch.stack([h[0] for h in prefill.hidden], dim=1) if taps else None
    buf[plen] = _pick(logits, sampling, generator)
    length = plen + 1
    stats.target_passes = 1
    stats.verify_s += time.perf_counter() - start
    done_at = None
    # A host read per token is free on the CPU; on an accelerator AR looks for EOS every few tokens.
    check_every = 1 if target.device.type == "cpu" else _EOS_CHECK_EVERY
    while length - plen < max_new:
        if drafter is None:
            t0 = time.perf_counter()
            logits = target(buf[length - 1 : length][None]).logits[0, -1]
            target.commit(1)
            buf[length] = _pick(logits, sampling, generator)
            length += 1
            stats.verify_s += time.perf_counter() - t0
        else:
            t0 = time.perf_counter()
            k = max(0, min(k_max, max_new - (length - plen) - 1, target.room() - 1))
            extra = {"target_hidden": fresh_hidden} if taps else {}
            proposal: DraftProposal = drafter.propose(buf[:length], k, sampling=sampling, generator=generator, **extra)
            if proposal.num_tokens > k or (proposal.tree is not None and proposal.tree.num_nodes > k):
                size = proposal.tree.num_nodes if proposal.tree is not None else proposal.num_tokens
                raise ValueError(f"drafter: proposed {size} tokens / tree nodes, expected at most {k}")
            t1 = time.perf_counter()
            extra = {"hidden_layers": taps} if taps else {}
            result = verifier.verify(target, buf[length - 1 : length], proposal, sampling=sampling, generator=generator, **extra)
            fresh_hidden = result.hidden
            t2 = time.perf_counter()
            m = result.emitted.numel()
            buf[length : length + m] = result.emitted
            length += m
            stats.record_round(result.num_accepted)
            stats.draft_s += t1 - t0
            stats.verify_s += t2 - t1
        stats.target_passes += 1
        if eos.numel() and (drafter is not None or (length - plen) % check_every == 0 or length - plen >= max_new):
            hits = torch.isin(buf[plen:length], eos).nonzero()
            if hits.numel():
                done_at = int(hits[0])
                break
    if done_at is None and eos.numel():
        hits = torch.isin(buf[plen:length], eos).nonzero()
        done_at = int(hits[0]) if hits.numel() else None
    n_out = min(max_new, length - plen) if done_at is None else min(max_new, done_at + 1)
    stats.new_tokens = n_out
    if target.device.type == "cuda":
        torch.cuda.synchronize(target.device)
    stats.other_s = max(0.0, time.perf_counter() - start - stats.draft_s - stats.verify_s)
    return buf[plen : plen + n_out].clone(), stats
