"""Where a request stops: the first EOS id, or the token that completes a stop string.

Stop strings follow transformers' ``generate(stop_strings=...)``: transformers' own
``StopStringCriteria`` is asked after each new token, with the whole sequence so far (prompt included,
so a stop string may start in the prompt); generation stops after the token that completes a stop
string, and that token is kept whole (the text may run past the stop string inside it).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import torch

__all__ = ["StopCondition"]


def _eos_ids(eos_token_id, vocab_size: int, device) -> torch.Tensor:
    expected = f"eos_token_id: expected an int or a list of ints in [0, {vocab_size}), got {eos_token_id!r}"
    if isinstance(eos_token_id, torch.Tensor):  # a 0-d or 1-D integer tensor of ids
        if eos_token_id.is_floating_point() or eos_token_id.dtype == torch.bool or eos_token_id.ndim > 1:
            raise ValueError(expected)
        eos_token_id = eos_token_id.tolist()
    if eos_token_id is None:
        ids = []
    elif isinstance(eos_token_id, numbers.Integral) and not isinstance(eos_token_id, bool):
        ids = [eos_token_id]
    elif isinstance(eos_token_id, (str, bytes)) or not isinstance(eos_token_id, Iterable):
        raise ValueError(expected)
    else:
        ids = list(eos_token_id)
    for tok in ids:
        if isinstance(tok, bool) or not isinstance(tok, numbers.Integral) or not 0 <= tok < vocab_size:
            raise ValueError(expected)
    return torch.tensor([int(tok) for tok in ids], dtype=torch.long, device=device)


class StopCondition:
    """EOS ids and stop strings of a request.

    Args:
        eos_token_id: an id or a list of ids; a request stops after emitting any of them.
        stop_strings: a string or a list; needs ``tokenizer``.
        tokenizer: the transformers tokenizer whose vocabulary the stop strings are matched on.
        vocab_size, device: of the target.

    Example:
        >>> stop = StopCondition(eos_token_id=[7, 9], vocab_size=10)
        >>> stop.first_stop(torch.tensor([1, 2, 3, 9, 7]), start=2, end=5)   # the output ends after the 9
        4
    """

    def __init__(
        self,
        eos_token_id=None,
        stop_strings: str | Sequence[str] | None = None,
        tokenizer=None,
        *,
        vocab_size: int,
        device: torch.device | str = "cpu",
    ):
        self.eos = _eos_ids(eos_token_id, vocab_size, device)
        self.criteria = None
        if stop_strings is not None:
            strings = [stop_strings] if isinstance(stop_strings, str) else list(stop_strings)
            if not strings or not all(isinstance(s, str) and s for s in strings):
                raise ValueError(f"stop_strings: expected a non-empty string or a list of them, got {stop_strings!r}")
            if tokenizer is None:
                raise ValueError(
                    "tokenizer: stop_strings are matched on the tokenizer's vocabulary; pass tokenizer=..., got None"
                )
            from transformers.generation.stopping_criteria import StopStringCriteria

            self.criteria = StopStringCriteria(tokenizer=tokenizer, stop_strings=strings)

    @property
    def per_token(self) -> bool:
        """Whether stops must be looked for after every token (stop strings need each position's prefix)."""
        return self.criteria is not None

    def first_stop(self, tokens: torch.Tensor, start: int, end: int) -> int | None:
        """End (exclusive) of the output if a stop occurs among ``tokens[start:end]``, else ``None``.

        Args:
            tokens: ``[L]`` int64, the prompt then the emitted tokens.
            start, end: the positions emitted since the last call.

        Returns:
            ``p + 1`` for the first position ``p`` in ``[start, end)`` that is an EOS id or completes a stop
            string.
        """
        if end <= start:
            return None
        stop = None
        if self.eos.numel():
            hits = torch.isin(tokens[start:end], self.eos).nonzero()
            if hits.numel():
                stop = start + int(hits[0]) + 1
        if self.criteria is not None:
            for pos in range(start, end if stop is None else stop - 1):
                if bool(self.criteria(tokens[None, : pos + 1], None)[0]):
                    return pos + 1
        return stop
