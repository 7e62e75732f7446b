"""How tokens are drawn: the settings every drafter, verifier and decode loop share."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingConfig:
    """How tokens are drawn: the target law of the next token given the tokens so far.

    The law of a row is built in transformers' order: ``repetition_penalty``, then each of
    ``logits_processor`` (``processor(input_ids [1, L], scores [1, V]) -> [1, V]``, any transformers
    ``LogitsProcessor``), then ``temperature``, ``top_k``, ``top_p``. ``temperature == 0`` is greedy
    (the argmax of the processed logits). The first two depend on the tokens so far, so they are applied
    by :func:`specdec.verify.processors.process_logits` with each row's own prefix; the rest
    (:func:`specdec.verify.sampling.logits_to_probs`) depend on the logits alone.

    Attributes:
        temperature: ``0`` = greedy, else the logits are divided by it.
        top_k: keep the ``top_k`` largest logits (``0`` = off).
        top_p: keep the smallest set of most likely tokens whose mass reaches ``top_p`` (``1`` = off).
        repetition_penalty: transformers' ``RepetitionPenaltyLogitsProcessor``: the logit of every token
            already in the prefix (prompt included) is divided by it when positive, multiplied when
            negative (``1`` = off).
        logits_processor: a tuple of transformers ``LogitsProcessor`` objects (or callables of the same
            signature) applied after the repetition penalty.

    Example:
        >>> SamplingConfig(temperature=0.7, top_k=50).greedy
        False
        >>> SamplingConfig(repetition_penalty=1.3).needs_prefix
        True
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    logits_processor: tuple = ()

    def __post_init__(self) -> None:
        if isinstance(self.temperature, bool) or not (
            isinstance(self.temperature, (int, float)) and 0 <= self.temperature < math.inf
        ):
            raise ValueError(f"temperature: expected a finite float >= 0, got {self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k: expected an int >= 0 (0 = off), got {self.top_k!r}")
        if isinstance(self.top_p, bool) or not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p: expected a float in (0, 1], got {self.top_p!r}")
        penalty = self.repetition_penalty
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not 0 < penalty < math.inf:
            raise ValueError(f"repetition_penalty: expected a finite float > 0 (1 = off), got {penalty!r}")
        processors = self.logits_processor
        if processors is None:
            processors = ()
        if callable(processors) and not isinstance(processors, (list, tuple)):
            processors = (processors,)
        if not isinstance(processors, (list, tuple)):
            raise TypeError(f"logits_processor: expected a list of LogitsProcessor objects, got {type(processors).__name__}")
        for i, proc in enumerate(processors):
            if not callable(proc):
                raise TypeError(
                    f"logits_processor[{i}]: expected a callable (input_ids, scores) -> scores, got {type(proc).__name__}"
                )
        object.__setattr__(self, "logits_processor", tuple(processors))

    @property
    def greedy(self) -> bool:
        """Whether the next token is the argmax of the (processed) logits (``temperature == 0``)."""
        return self.temperature == 0

    @property
    def needs_prefix(self) -> bool:
        """Whether the law depends on the tokens so far (a repetition penalty or logits processors)."""
        return self.repetition_penalty != 1.0 or bool(self.logits_processor)
