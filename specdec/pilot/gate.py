"""The gate: a candidate counts only if its outputs pass token forcing against the stock target on a sealed
prompt set, and its speedup over the current system has a 95% interval above 1 from repeated, seeded runs.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from specdec.forcing import TokenForcingChecker
from specdec.pilot.spec import BuiltSystem, SystemSpec, TargetCache, build

__all__ = ["Gate", "GateVerdict", "ratio_interval", "target_pass_timer", "wall_time"]


def wall_time(system: BuiltSystem, prompts: Sequence[torch.Tensor], max_new_tokens: int, seed: int) -> float:
    """Seconds to decode every prompt with ``system`` (greedy, one request at a time), device synchronised.

    Example:
        >>> system = build(SystemSpec())
        >>> wall_time(system, [torch.tensor([1, 2, 3])], 4, seed=0) > 0
        True
    """
    device = system.target.device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for prompt in prompts:
        system.generate(prompt[None], max_new_tokens, seed=seed)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def ratio_interval(ratios: Sequence[float], level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """Geometric mean of speedup ratios and its Student-t interval (on the log scale).

    Example:
        >>> mean, (lo, hi) = ratio_interval([1.2, 1.25, 1.22])
        >>> round(mean, 3), lo > 1
        (1.223, True)
        >>> ratio_interval([0.8, 1.5, 1.2])[1][0] < 1
        True
    """
    from scipy.stats import t as student_t

    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level: expected a confidence level in (0, 1), e.g. 0.95, got {level!r}")
    values = list(ratios)
    if len(values) < 2:
        raise ValueError(f"ratios: expected at least 2 repeats for an interval, got {len(values)}")
    if any(not r > 0 for r in values):
        raise ValueError(f"ratios: expected positive ratios, got {values}")
    logs = [math.log(r) for r in values]
    mean = statistics.fmean(logs)
    half = float(student_t.ppf(0.5 + level / 2, len(logs) - 1)) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), (math.exp(mean - half), math.exp(mean + half))


@dataclass
class GateVerdict:
    """The gate's decision on one candidate.

    Attributes:
        accepted: both tests passed.
        forcing_passed: the token-forcing verdict on the sealed prompts.
        forcing_failures: the checker's failure lines (empty on a pass).
        speedup: geometric mean of ``t_current / t_candidate`` over the repeats.
        ci95: its 95% interval.
        ratios: the per-repeat ratios.
        reasons: why it was rejected (empty when accepted).
    """

    accepted: bool
    forcing_passed: bool
    forcing_failures: list[str]
    speedup: float
    ci95: tuple[float, float]
    ratios: list[float]
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


class Gate:
    """Judge candidates on prompts the explorers never see.

    Args:
        stock: the stock target (stock weights and dtype) outputs are forced through.
        sealed_prompts: 1-D token tensors, held here and nowhere else.
        max_new_tokens: tokens per prompt.
        seeds: one repeat per seed (at least 3).
        timer: ``timer(system, prompts, max_new_tokens, seed) -> seconds`` (default :func:`wall_time`).
        checker_kwargs: extra :class:`specdec.forcing.TokenForcingChecker` arguments (default bucket edge: half the run).

    Example:
        >>> from specdec.testing import tiny_target
        >>> stock = tiny_target(seed=0)
        >>> gate = Gate(stock, [torch.tensor([1, 2, 3, 1, 2, 3])], 16, timer=lambda system, p, n, seed: 1.0 if system.drafter is None else 0.5)
        >>> verdict = gate.judge(SystemSpec(drafter={"kind": "ngram"}), SystemSpec().autoregressive(), stock_target=stock)
        >>> verdict.accepted, verdict.speedup
        (True, 2.0)
    """

    def __init__(
        self,
        stock,
        sealed_prompts: Sequence[torch.Tensor],
        max_new_tokens: int,
        *,
        seeds: Sequence[int] = (0, 1, 2),
        timer: Callable[..., float] = wall_time,
        **checker_kwargs: Any,
    ):
        prompts = list(sealed_prompts)
        if not prompts or any(not isinstance(p, torch.Tensor) or p.ndim != 1 or p.numel() == 0 for p in prompts):
            raise ValueError("sealed_prompts: expected a non-empty list of non-empty 1-D token tensors")
        for i, p in enumerate(prompts):  # read once, here: the gate judges many systems on them
            if p.dtype != torch.long:
                raise TypeError(f"sealed_prompts[{i}]: expected int64 token ids, got {p.dtype}")
            if int(p.min()) < 0 or int(p.max()) >= stock.vocab_size:
                raise ValueError(
                    f"sealed_prompts[{i}]: expected token ids in [0, {stock.vocab_size}), got ids in "
                    f"[{int(p.min())}, {int(p.max())}]"
                )
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 2:
            raise ValueError(f"max_new_tokens: expected an int >= 2, got {max_new_tokens!r}")
        seeds = list(seeds)
        if len(seeds) < 3 or len(set(seeds)) != len(seeds) or any(not isinstance(s, int) for s in seeds):
            raise ValueError(f"seeds: expected at least 3 distinct int seeds, got {seeds}")
        if not callable(timer):
            raise TypeError(f"timer: expected a callable, got {type(timer).__name__}")
        self._prompts = [p.to(stock.device) for p in prompts]
        self.max_new_tokens = max_new_tokens
        self.seeds = seeds
        self.timer = timer
        checker_kwargs.setdefault("bucket_edges", (max(1, max_new_tokens // 2),))
        self.checker = TokenForcingChecker(stock, **checker_kwargs)
        self._null = None

    @property
    def num_prompts(self) -> int:
        """How many sealed prompts there are (their tokens are not exposed)."""
        return len(self._prompts)

    def _outputs(self, system: BuiltSystem) -> list[torch.Tensor]:
        return [system.generate(p[None], self.max_new_tokens, seed=self.seeds[0]).tokens[0] for p in self._prompts]

    def forcing(self, system: BuiltSystem):
        """The token-forcing report of ``system``'s greedy outputs on the sealed prompts.

        The gate sets no stop, so every output must hold ``max_new_tokens`` tokens: forcing checks the tokens an
        output has, and a system that emits fewer would pass it while doing less work.

        Raises:
            ValueError: an output is shorter or longer than ``max_new_tokens`` (names the prompt).
        """
        if self._null is None:
            self._null = self.checker.calibrate(self._prompts, max_new_tokens=self.max_new_tokens)
        outputs = self._outputs(system)
        for i, y in enumerate(outputs):
            if y.numel() != self.max_new_tokens:
                raise ValueError(
                    f"system: expected {self.max_new_tokens} tokens (max_new_tokens) for sealed prompt {i}, got "
                    f"{y.numel()}: the gate sets no stop, so a system must emit them all"
                )
        return self.checker.check(self._prompts, outputs, null=self._null)

    def judge(
        self,
        candidate: SystemSpec | BuiltSystem,
        current: SystemSpec | BuiltSystem,
        *,
        stock_target: Any = None,
    ) -> GateVerdict:
        """Token forcing on ``candidate``, then ``t_current / t_candidate`` once per seed, alternating the two, after
        one untimed run of each.

        Args:
            candidate, current: specs (built here) or built systems.
            stock_target: a target to build the specs on: two specs must then agree on every field that decides
                a target (``TargetCache.KEYS``), and their weights must be ``stock_target``'s (``None`` builds a
                fresh one per spec; :class:`~specdec.pilot.spec.TargetCache` shares them by those fields).

        Raises:
            ValueError: with ``stock_target``, the specs differ in a field that decides the target (a spec on
                other weights would be judged on the stock's); a spec's ``max_seq_len`` is too short for the
                sealed prompts; a system emits fewer than ``max_new_tokens`` tokens; a timer returns a time <= 0.
        """
        if stock_target is not None and isinstance(candidate, SystemSpec) and isinstance(current, SystemSpec):
            differ = [
                f"{k} ({getattr(candidate, k)!r} vs {getattr(current, k)!r})"
                for k in TargetCache.KEYS
                if getattr(candidate, k) != getattr(current, k)
            ]
            if differ:
                raise ValueError(
                    "stock_target: both specs are built on it, so they must describe the same target; candidate and "
                    f"current differ in {', '.join(differ)}"
                )
        cand = candidate if isinstance(candidate, BuiltSystem) else build(candidate, target=stock_target)
        base = current if isinstance(current, BuiltSystem) else build(current, target=stock_target)
        longest = max(p.numel() for p in self._prompts)
        for name, spec in (("candidate", cand.spec), ("current", base.spec)):
            if spec.max_seq_len < longest + self.max_new_tokens + spec.num_draft_tokens + 2:
                raise ValueError(
                    f"{name}: max_seq_len {spec.max_seq_len} is too small for the sealed prompts ({longest} tokens) plus "
                    f"{self.max_new_tokens} new tokens and {spec.num_draft_tokens} drafts"
                )
        report = self.forcing(cand)
        # both systems once untimed (a target with CUDA graphs captures one at the first use of each row bucket)
        self.timer(base, self._prompts, self.max_new_tokens, self.seeds[0])
        self.timer(cand, self._prompts, self.max_new_tokens, self.seeds[0])
        ratios = []
        for seed in self.seeds:
            t_base = self.timer(base, self._prompts, self.max_new_tokens, seed)
            t_cand = self.timer(cand, self._prompts, self.max_new_tokens, seed)
            for name, t in (("current", t_base), ("candidate", t_cand)):
                if not (isinstance(t, (int, float)) and t > 0 and math.isfinite(t)):
                    raise ValueError(f"timer: expected seconds > 0 for the {name} system at seed {seed}, got {t!r}")
            ratios.append(t_base / t_cand)
        mean, ci = ratio_interval(ratios)
        reasons = []
        if not report.passed:
            reasons.append("token forcing failed: " + "; ".join(report.failures))
        elif report.verdict != "PASS":  # INCOMPLETE: a stratum no token reached proves nothing about it
            reasons.append(f"token forcing incomplete: {', '.join(report.uncovered)} not covered")
        if not ci[0] > 1:
            reasons.append(f"speedup {mean:.3f}x, 95% CI [{ci[0]:.3f}, {ci[1]:.3f}] does not lie above 1")
        return GateVerdict(
            accepted=not reasons,
            forcing_passed=report.verdict == "PASS",
            forcing_failures=list(report.failures),
            speedup=mean,
            ci95=ci,
            ratios=ratios,
            reasons=reasons,
        )


def target_pass_timer(system: BuiltSystem, prompts: Sequence[torch.Tensor], max_new_tokens: int, seed: int) -> float:
    """A deterministic cost in place of seconds: the target forwards decoding every prompt takes.

    For tests and machines too noisy to time: a system's cost is its number of target passes (what a
    memory-bound target pays per round), blind to drafter and host time.

    Example:
        >>> system = build(SystemSpec().autoregressive())
        >>> target_pass_timer(system, [torch.tensor([1, 2, 3])], 5, seed=0)  # the prefill, then one pass per token
        5.0
    """
    return float(sum(system.generate(p[None], max_new_tokens, seed=seed).stats.target_passes for p in prompts))
