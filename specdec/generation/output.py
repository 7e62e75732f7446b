"""What :func:`specdec.generate` returns: tokens (and text), with counters per request."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["GenerationOutput", "GenerationStats", "build_output"]


@dataclass
class GenerationStats:
    """Counters of one or more requests.

    Attributes:
        new_tokens: tokens returned.
        target_passes: exact target forwards, the prefill included (AR: one per token); a two-level round's Q pass
            (8-bit view) is not one of them: ``TwoLevelVerifier.stats.q_passes`` counts those.
        rounds: speculative rounds (verify passes).
        accepted_histogram: ``accepted_histogram[n]`` = rounds that accepted ``n`` draft tokens the output keeps:
            in a round that a stop or ``max_new_tokens`` ends early, ``n`` = its kept tokens - 1, so that a
            single-sequence run returns ``1 + rounds + sum(n * count)`` tokens.
        longest_proposal: the most draft tokens a round offered along one path (a tree's depth), over all rounds.
        draft_s, verify_s, other_s: wall time split (prefill counts as verify).

    Example:
        >>> stats = GenerationStats(new_tokens=9, target_passes=4)
        >>> stats.record_round(2); stats.record_round(0)
        >>> stats.accepted_histogram, stats.mean_accepted, stats.tokens_per_target_pass
        ([1, 0, 1], 1.0, 2.25)
    """

    new_tokens: int = 0
    target_passes: int = 0
    rounds: int = 0
    accepted_histogram: list[int] = field(default_factory=list)
    longest_proposal: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    other_s: float = 0.0

    @property
    def total_s(self) -> float:
        """Wall time in seconds: ``draft_s + verify_s + other_s``.

        Example:
            >>> GenerationStats(draft_s=0.5, verify_s=1.0, other_s=0.25).total_s
            1.75
        """
        return self.draft_s + self.verify_s + self.other_s

    @property
    def tokens_per_target_pass(self) -> float:
        """Returned tokens per target forward (AR: 1.0; the prefill counts as a pass).

        Example:
            >>> GenerationStats(new_tokens=10, target_passes=4).tokens_per_target_pass
            2.5
        """
        return self.new_tokens / max(self.target_passes, 1)

    @property
    def tokens_per_second(self) -> float:
        """Returned tokens per second of :attr:`total_s` (``nan`` when no time was measured).

        Example:
            >>> GenerationStats(new_tokens=10, verify_s=2.0).tokens_per_second
            5.0
        """
        return self.new_tokens / self.total_s if self.total_s > 0 else float("nan")

    @property
    def mean_accepted(self) -> float:
        """Mean accepted draft tokens per round, from :attr:`accepted_histogram` (0.0 without rounds).

        Example:
            >>> GenerationStats(accepted_histogram=[1, 0, 3]).mean_accepted
            1.5
        """
        total = sum(self.accepted_histogram)
        return sum(n * c for n, c in enumerate(self.accepted_histogram)) / total if total else 0.0

    def record_round(self, num_accepted: int) -> None:
        """Count one speculative round that accepted ``num_accepted`` draft tokens.

        Example:
            >>> stats = GenerationStats(); stats.record_round(3)
            >>> stats.rounds, stats.accepted_histogram
            (1, [0, 0, 0, 1])
        """
        if len(self.accepted_histogram) <= num_accepted:
            self.accepted_histogram.extend([0] * (num_accepted + 1 - len(self.accepted_histogram)))
        self.accepted_histogram[num_accepted] += 1
        self.rounds += 1

    def __add__(self, other: GenerationStats) -> GenerationStats:
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
            longest_proposal=max(self.longest_proposal, other.longest_proposal),
            draft_s=self.draft_s + other.draft_s,
            verify_s=self.verify_s + other.verify_s,
            other_s=self.other_s + other.other_s,
        )

    def summary(self) -> str:
        """One line: tokens, target passes, tokens per pass, tokens per second and the time split.

        Example:
            >>> GenerationStats(new_tokens=8, target_passes=4, verify_s=1.0).summary()
            '8 tokens, 4 target passes (2.00 tokens/pass), 8.0 tok/s; time draft 0.00s / verify 1.00s / other 0.00s'
        """
        return (
            f"{self.new_tokens} tokens, {self.target_passes} target passes "
            f"({self.tokens_per_target_pass:.2f} tokens/pass), {self.tokens_per_second:.1f} tok/s; "
            f"time draft {self.draft_s:.2f}s / verify {self.verify_s:.2f}s / other {self.other_s:.2f}s"
        )

    def as_dict(self) -> dict:
        """The counters and derived rates as a JSON-ready ``dict``.

        Example:
            >>> GenerationStats(new_tokens=4, target_passes=2).as_dict()["tokens_per_target_pass"]
            2.0
        """
        return {
            "new_tokens": self.new_tokens,
            "target_passes": self.target_passes,
            "rounds": self.rounds,
            "accepted_histogram": list(self.accepted_histogram),
            "longest_proposal": self.longest_proposal,
            "tokens_per_target_pass": self.tokens_per_target_pass,
            "tokens_per_second": self.tokens_per_second,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "other_s": self.other_s,
        }


@dataclass
class GenerationOutput:
    """Result of :func:`specdec.generate`.

    Attributes:
        tokens: the new tokens of each request. A 2-D ``input_ids`` gives ``[batch, new_tokens]`` int64,
            or a list of 1-D tensors when requests stopped after different lengths; a list of prompts
            (tensors or strings) always gives a list; one string gives ``[1, new_tokens]``.
        stats: counters summed over the requests.
        per_request: counters of each request.
        text: with a ``tokenizer``, the decoded new tokens (``skip_special_tokens=True``, so an EOS token
            is in ``tokens`` but not in ``text``): one ``str`` for a string prompt, else one per request.

    Example:
        >>> out = GenerationOutput(tokens=torch.tensor([[5, 6]]), stats=GenerationStats(), per_request=[GenerationStats()])
        >>> out.tokens.shape, out.text
        (torch.Size([1, 2]), None)
    """

    tokens: torch.Tensor | list[torch.Tensor]
    stats: GenerationStats
    per_request: list[GenerationStats]
    text: str | list[str] | None = None


def build_output(
    outputs: list[torch.Tensor], per_request: list[GenerationStats], *, as_list: bool, text_form: str | None, tokenizer=None
) -> GenerationOutput:
    """Assemble :class:`GenerationOutput` from each request's ``[n_i]`` tokens and counters.

    Args:
        as_list: return ``tokens`` as a list even when every request has the same length.
        text_form: ``"str"`` (one string prompt: ``tokens [1, n]``, ``text`` a string), ``"list"`` or ``None``.
        tokenizer: decodes ``text`` when given.

    Example:
        >>> build_output([torch.tensor([1, 2]), torch.tensor([3])], [GenerationStats(new_tokens=2), GenerationStats(new_tokens=1)],
        ...              as_list=False, text_form=None).tokens
        [tensor([1, 2]), tensor([3])]
    """
    total = sum(per_request[1:], per_request[0])
    same_length = len({t.numel() for t in outputs}) == 1
    tokens = torch.stack(outputs) if same_length and not as_list else list(outputs)
    text = None
    if tokenizer is not None:
        text = [tokenizer.decode(t.tolist(), skip_special_tokens=True) for t in outputs]
    if text_form == "str":
        tokens = outputs[0][None]
        text = text[0]
    return GenerationOutput(tokens=tokens, stats=total, per_request=per_request, text=text)
