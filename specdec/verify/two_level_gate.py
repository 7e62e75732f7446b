"""When a two-level round pays: measured tokens per second of each round kind, chosen per round.

A two-level round costs a Q pass and a second draft on top of a one-level round and pays back only
when the Q model agrees with the exact model far enough along its chain for the second draft's
subtree to be reached. Both sides of that trade move with the text (agreement), the drafter
(confidence) and the machine (stage costs), so the gate measures instead of predicting from a formula:
it keeps an exponential moving average of tokens emitted and seconds spent per round for each kind
and picks the kind with the higher rate. Until each kind has ``warmup`` rounds it alternates, and every
``probe_every`` rounds it runs the other kind once, so a rate that changes is seen again.

The decision uses only finished rounds, never the target's draws of the round it decides, so the
verification that follows stays exact whichever kind is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GATE_MODES", "RateEstimate", "TwoLevelGate"]

GATE_MODES = ("auto", "always", "never")


@dataclass
class RateEstimate:
    """Moving averages of one round kind: tokens emitted and seconds per round.

    Example:
        >>> r = RateEstimate(); r.update(4, 0.02); r.update(2, 0.02); round(r.tokens_per_s)   # (4 + 0.2 * (2 - 4)) / 0.02
        180
    """

    smoothing: float = 0.2
    rounds: int = 0
    tokens: float = 0.0
    seconds: float = 0.0

    def update(self, tokens: int, seconds: float) -> None:
        """Add one finished round: ``tokens`` emitted in ``seconds`` (the first round sets the averages)."""
        a = 1.0 if self.rounds == 0 else self.smoothing
        self.tokens += a * (tokens - self.tokens)
        self.seconds += a * (seconds - self.seconds)
        self.rounds += 1

    @property
    def tokens_per_s(self) -> float:
        """Average tokens over average seconds (0.0 before any round) (float)."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class TwoLevelGate:
    """Choose two-level or one-level verification for each round.

    Args:
        mode: ``"auto"`` (measured rates), ``"always"`` (two-level every round) or ``"never"`` (one-level).
        warmup: rounds of each kind before rates are compared (kinds alternate until then).
        probe_every: in ``"auto"``, every this many rounds run the kind not currently preferred once.
        smoothing: weight of the newest round in the moving averages.

    Example:
        >>> gate = TwoLevelGate(warmup=1, probe_every=100)
        >>> gate.choose(), gate.record(True, tokens=9, seconds=0.03)
        (True, None)
        >>> gate.choose(), gate.record(False, tokens=3, seconds=0.02)
        (False, None)
        >>> gate.choose()     # 300 tokens/s two-level against 150 one-level
        True
    """

    mode: str = "auto"
    warmup: int = 2
    probe_every: int = 16
    smoothing: float = 0.2
    two_level: RateEstimate = field(init=False)
    one_level: RateEstimate = field(init=False)
    decisions: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.mode not in GATE_MODES:
            raise ValueError(f"mode: expected one of {GATE_MODES}, got {self.mode!r}")
        for name in ("warmup", "probe_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if isinstance(self.smoothing, bool) or not isinstance(self.smoothing, (int, float)) or not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"smoothing: expected 0 < smoothing <= 1, got {self.smoothing!r}")
        self.two_level = RateEstimate(self.smoothing)
        self.one_level = RateEstimate(self.smoothing)

    def choose(self) -> bool:
        """``True`` for a two-level round, ``False`` for one-level."""
        self.decisions += 1
        if self.mode != "auto":
            return self.mode == "always"
        if self.two_level.rounds < self.warmup or self.one_level.rounds < self.warmup:
            return self.two_level.rounds <= self.one_level.rounds
        prefer = self.two_level.tokens_per_s >= self.one_level.tokens_per_s
        if self.decisions % self.probe_every == 0:
            return not prefer
        return prefer

    def record(self, two_level: bool, *, tokens: int, seconds: float) -> None:
        """Add a finished round of the given kind: ``tokens`` emitted, ``seconds`` from its draft to its commit."""
        (self.two_level if two_level else self.one_level).update(tokens, seconds)
