"""Explorers: an :class:`Agent` takes one direction and the current spec and returns its best :class:`Candidate`.

Built-ins: :class:`SearchAgent` (successive halving over the direction's knobs), :class:`KernelAgent`
(ranks kernels by achieved / peak bandwidth and picks the fastest configuration of the worst ones) and
:class:`LLMAgent` (any ``prompt -> text`` client proposes settings as JSON, validated before use).
:func:`explore_all` runs explorations serially, in processes, or as Ray tasks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from specdec.pilot.directions import DIRECTIONS, Direction
from specdec.pilot.gate import wall_time
from specdec.pilot.profile import copy_bandwidth, device_timer
from specdec.pilot.spec import SystemSpec, TargetCache

__all__ = [
    "Agent",
    "Budget",
    "Candidate",
    "DevEvaluator",
    "Exploration",
    "KernelAgent",
    "KernelCase",
    "LLMAgent",
    "SearchAgent",
    "explore_all",
    "rank_kernels",
]


@dataclass(frozen=True)
class Budget:
    """What one exploration may spend: speedup evaluations (each one ``evaluate`` call at effort 1 counts 1;
    effort ``e`` counts ``e``).

    Example:
        >>> Budget(evaluations=8).evaluations
        8
    """

    evaluations: int = 8

    def __post_init__(self):
        if isinstance(self.evaluations, bool) or not isinstance(self.evaluations, int) or self.evaluations < 1:
            raise ValueError(f"evaluations: expected an int >= 1, got {self.evaluations!r}")


@dataclass
class Candidate:
    """An explorer's best system for one direction, with the explorer's own (unsealed) measurement.

    Any object with these attributes is accepted where a candidate is expected.

    Attributes:
        direction: the direction's name.
        spec: the proposed system.
        base: the spec it started from.
        settings: the knob values chosen.
        raw_speedup: the explorer's speedup estimate over ``base`` on its development prompts.
        description: one line on the mechanism.
        agent: the explorer's name.
        trials: every evaluation made (``{"settings", "effort", "speedup"}``).
    """

    direction: str
    spec: SystemSpec
    base: SystemSpec
    settings: dict[str, Any]
    raw_speedup: float
    description: str = ""
    agent: str = ""
    trials: list[dict[str, Any]] = field(default_factory=list)


@runtime_checkable
class Agent(Protocol):
    """``explore(direction, spec, budget) -> Candidate | None`` (``None``: nothing worth proposing)."""

    name: str

    def explore(self, direction: Direction, spec: SystemSpec, budget: Budget) -> Candidate | None:
        """Explore ``direction`` from ``spec`` within ``budget``; ``None`` when nothing worth gating was found."""


class DevEvaluator:
    """``evaluate(candidate, base, effort) -> t_base / t_candidate`` on development prompts (picklable).

    ``effort`` is how many of the prompts are timed (capped at all of them). Each system runs the timed call once
    untimed first, the first time it is evaluated at that effort: a target with CUDA graphs captures one at the first
    use of each row bucket, and the same greedy call reaches the same buckets again. ``targets``: a
    :class:`~specdec.pilot.spec.TargetCache` to share with the loop (one copy of large weights); a pickled evaluator
    starts with an empty cache (and warms again).

    Example:
        >>> ev = DevEvaluator([torch.tensor([1, 2, 3, 1, 2, 3])], 8)
        >>> ev(SystemSpec(), SystemSpec().autoregressive(), 1) > 0
        True
    """

    def __init__(
        self,
        prompts: Sequence[torch.Tensor],
        max_new_tokens: int,
        *,
        seed: int = 0,
        timer: Callable[..., float] = wall_time,
        targets: TargetCache | None = None,
    ):
        self.prompts = [p.cpu() for p in prompts]
        if not self.prompts:
            raise ValueError("prompts: expected at least one 1-D token tensor, got none")
        if targets is not None and not isinstance(targets, TargetCache):
            raise TypeError(f"targets: expected a TargetCache, got {type(targets).__name__}")
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.timer = timer
        self.targets = targets if targets is not None else TargetCache()
        self._warmed: set[tuple[str, int]] = set()

    def __getstate__(self):
        return {**self.__dict__, "targets": TargetCache(), "_warmed": set()}

    def __call__(self, candidate: SystemSpec, base: SystemSpec, effort: int = 1) -> float:
        cand, ref = self.targets.build(candidate), self.targets.build(base)
        prompts = [p.to(cand.target.device) for p in self.prompts[: max(1, effort)]]
        for system, spec in ((ref, base), (cand, candidate)):
            if (repr(spec), len(prompts)) not in self._warmed:  # untimed: the first uses of its graph keys
                self.timer(system, prompts, self.max_new_tokens, self.seed)
                self._warmed.add((repr(spec), len(prompts)))
        times = {
            name: self.timer(system, prompts, self.max_new_tokens, self.seed)
            for name, system in (("base", ref), ("candidate", cand))
        }
        for name, t in times.items():
            if not (isinstance(t, (int, float)) and t > 0 and math.isfinite(t)):
                raise ValueError(f"timer: expected seconds > 0 for the {name} system, got {t!r}")
        return times["base"] / times["candidate"]


class SearchAgent:
    """Successive halving over a direction's knob grid.

    Rung 0 evaluates every setting at effort ``min_effort``; each rung keeps the best ``1 / eta`` and
    multiplies the effort by ``eta``, until one setting is left or the budget runs out.

    Args:
        evaluate: ``evaluate(candidate_spec, base_spec, effort) -> speedup`` (e.g. :class:`DevEvaluator`).
        eta: the halving factor (>= 2).
        min_effort: effort of the first rung.
        min_speedup: propose nothing unless the winner's measured speedup exceeds this.

    Example:
        >>> from specdec.pilot.directions import DIRECTIONS
        >>> fake = lambda cand, base, effort: {2: 1.1, 3: 1.3, 4: 1.2}.get(cand.num_draft_tokens, 0.9)
        >>> best = SearchAgent(fake).explore(DIRECTIONS["draft_length"], SystemSpec(num_draft_tokens=6), Budget(30))
        >>> best.settings, best.raw_speedup
        ({'num_draft_tokens': 3}, 1.3)
    """

    name = "search"

    def __init__(
        self,
        evaluate: Callable[[SystemSpec, SystemSpec, int], float],
        *,
        eta: int = 2,
        min_effort: int = 1,
        min_speedup: float = 1.0,
    ):
        if not callable(evaluate):
            raise TypeError(f"evaluate: expected a callable, got {type(evaluate).__name__}")
        if isinstance(eta, bool) or not isinstance(eta, int) or eta < 2:
            raise ValueError(f"eta: expected an int >= 2, got {eta!r}")
        if isinstance(min_effort, bool) or not isinstance(min_effort, int) or min_effort < 1:
            raise ValueError(f"min_effort: expected an int >= 1, got {min_effort!r}")
        self.evaluate, self.eta, self.min_effort, self.min_speedup = evaluate, eta, min_effort, float(min_speedup)

    def explore(self, direction: Direction, spec: SystemSpec, budget: Budget) -> Candidate | None:
        """Successive halving over the direction's knob grid: the best settings at the most thorough rung."""
        arms = []
        for settings in direction.settings():
            proposed = direction.apply(spec, settings)
            # settings the spec ignores (a knob without effect on this drafter) give a system already an arm: one arm
            if proposed != spec and all(proposed != other for _, other in arms):
                arms.append((settings, proposed))
        if not arms:
            return None
        spent, effort, trials = 0, self.min_effort, []
        scores = {i: float("-inf") for i in range(len(arms))}
        alive = list(range(len(arms)))
        while alive:
            evaluated = []
            for i in alive:
                if spent + effort > budget.evaluations:
                    break
                scores[i] = float(self.evaluate(arms[i][1], spec, effort))
                spent += effort
                evaluated.append(i)
                trials.append({"settings": arms[i][0], "effort": effort, "speedup": scores[i]})
            if not evaluated or len(alive) == 1 or len(evaluated) < len(alive):
                break
            alive = sorted(evaluated, key=lambda i: -scores[i])[: max(1, math.ceil(len(evaluated) / self.eta))]
            effort *= self.eta
        if not trials:
            return None
        # the winner comes from the most thorough rung, not from a stale low-effort score
        top_effort = max(t["effort"] for t in trials)
        finalists = [i for i in scores if any(t["effort"] == top_effort and t["settings"] == arms[i][0] for t in trials)]
        best = max(finalists, key=lambda i: scores[i])
        if not scores[best] > self.min_speedup:
            return None
        return Candidate(
            direction=direction.name,
            spec=arms[best][1],
            base=spec,
            settings=arms[best][0],
            raw_speedup=scores[best],
            description=direction.mechanism,
            agent=self.name,
            trials=trials,
        )


@dataclass
class KernelCase:
    """A kernel the :class:`KernelAgent` can tune.

    Attributes:
        name: the kernel's name.
        bytes_moved: bytes one call reads and writes.
        configs: its launch configurations (tile sizes, split-K ...); the first one is the current.
        make: ``make(config) -> fn``, ``fn()`` runs the kernel once.
    """

    name: str
    bytes_moved: int
    configs: Sequence[Mapping[str, Any]]
    make: Callable[[Mapping[str, Any]], Callable[[], Any]]


def rank_kernels(seconds: Mapping[str, float], bytes_moved: Mapping[str, int], peak_bandwidth: float) -> list[tuple[str, float]]:
    """Kernels by achieved / peak bandwidth, furthest from the limit first.

    Example:
        >>> rank_kernels({"a": 1.0, "b": 1.0}, {"a": 50, "b": 90}, 100.0)
        [('a', 0.5), ('b', 0.9)]
    """
    if not peak_bandwidth > 0:
        raise ValueError(f"peak_bandwidth: expected bytes/s > 0, got {peak_bandwidth!r}")
    missing = sorted(set(seconds) ^ set(bytes_moved))
    if missing:
        raise ValueError(f"seconds, bytes_moved: expected the same kernels, these are in only one: {missing}")
    ratios = [(name, bytes_moved[name] / seconds[name] / peak_bandwidth) for name in seconds]
    return sorted(ratios, key=lambda r: r[1])


class KernelAgent:
    """Time each kernel at its current configuration, rank by achieved / peak bandwidth, and try every
    configuration of the ``worst`` furthest from the limit; keep the fastest.

    It is minimal: configurations are not part of a :class:`SystemSpec`, so the candidate carries the
    spec unchanged and the chosen configurations in ``settings``.

    Example:
        >>> import time
        >>> case = KernelCase("copy", 1 << 20, [{"sleep": 0.002}, {"sleep": 0.0}], lambda c: lambda: time.sleep(c["sleep"]))
        >>> best = KernelAgent([case], peak_bandwidth=1e12).explore(None, SystemSpec(), Budget(4))
        >>> best.settings["copy"], best.raw_speedup > 1
        ({'sleep': 0.0}, True)
    """

    name = "kernel"

    def __init__(
        self,
        kernels: Sequence[KernelCase],
        *,
        peak_bandwidth: float | None = None,
        device: str = "cpu",
        reps: int = 3,
        worst: int = 1,
    ):
        self.kernels = list(kernels)
        if not self.kernels:
            raise ValueError("kernels: expected at least one KernelCase, got none")
        for name, value in (("reps", reps), ("worst", worst)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        self.device, self.reps, self.worst = device, reps, worst
        self.peak_bandwidth = peak_bandwidth

    def _time(self, fn: Callable[[], Any]) -> float:
        timer = device_timer(self.device)
        fn()
        return min(timer(fn) for _ in range(self.reps))

    def explore(self, direction: Direction | None, spec: SystemSpec, budget: Budget) -> Candidate | None:
        """Rank the kernels by achieved / peak bandwidth and tune the furthest one's configuration."""
        peak = self.peak_bandwidth if self.peak_bandwidth is not None else copy_bandwidth(self.device)
        current = {k.name: self._time(k.make(k.configs[0])) for k in self.kernels}
        ranking = rank_kernels(current, {k.name: k.bytes_moved for k in self.kernels}, peak)
        by_name = {k.name: k for k in self.kernels}
        chosen, trials, spent, gain_num, gain_den = {}, [], len(self.kernels), 0.0, 0.0
        for name, fraction in ranking[: self.worst]:
            case = by_name[name]
            best_cfg, best_s = dict(case.configs[0]), current[name]
            for cfg in case.configs[1:]:
                if spent >= budget.evaluations:
                    break
                seconds = self._time(case.make(cfg))
                spent += 1
                trials.append(
                    {
                        "settings": {name: dict(cfg)},
                        "effort": 1,
                        "speedup": current[name] / seconds,
                        "bandwidth_fraction": fraction,
                    }
                )
                if seconds < best_s:
                    best_cfg, best_s = dict(cfg), seconds
            chosen[name] = best_cfg
            gain_num, gain_den = gain_num + current[name], gain_den + best_s
        return Candidate(
            direction=direction.name if direction is not None else "kernel_tuning",
            spec=spec,
            base=spec,
            settings=chosen,
            raw_speedup=gain_num / gain_den if gain_den > 0 else 1.0,
            description="kernel configurations furthest from the memory-bandwidth limit, retuned",
            agent=self.name,
            trials=trials,
        )


def _first_json_object(reply: str) -> Any:
    """The first JSON value that decodes from a ``{`` of ``reply`` (prose and braces may come before or after it).

    Example:
        >>> _first_json_object('Here: {"settings": {"num_draft_tokens": 6}} -- keep {it} short')
        {'settings': {'num_draft_tokens': 6}}
    """
    decoder, first_error = json.JSONDecoder(), None
    for start, char in enumerate(reply):
        if char != "{":
            continue
        try:
            return decoder.raw_decode(reply, start)[0]
        except json.JSONDecodeError as err:
            first_error = first_error or err
    if first_error is None:
        raise ValueError(f"reply: expected a JSON object, got {reply[:200]!r}")
    raise ValueError(f"reply: invalid JSON ({first_error})")


class LLMAgent:
    """A language model proposes the direction's settings as JSON; each proposal is validated, then measured.

    The client is any callable ``prompt -> text``. The reply must hold one JSON object
    ``{"settings": {knob: value, ...}, "rationale": "..."}`` with knobs and values from the direction's
    grid. An invalid reply is recorded in :attr:`rejections` and the model is asked again with the
    error, up to ``attempts`` times.

    Example:
        >>> from specdec.pilot.directions import DIRECTIONS
        >>> client = lambda prompt: '{"settings": {"num_draft_tokens": 6}, "rationale": "repetitive code"}'
        >>> agent = LLMAgent(client, lambda cand, base, effort: 1.4)
        >>> agent.explore(DIRECTIONS["draft_length"], SystemSpec(), Budget(2)).settings
        {'num_draft_tokens': 6}
    """

    name = "llm"

    def __init__(
        self, client: Callable[[str], str], evaluate: Callable[[SystemSpec, SystemSpec, int], float], *, attempts: int = 3
    ):
        if not callable(client):
            raise TypeError(f"client: expected a callable prompt -> text, got {type(client).__name__}")
        if not callable(evaluate):
            raise TypeError(f"evaluate: expected a callable, got {type(evaluate).__name__}")
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"attempts: expected an int >= 1, got {attempts!r}")
        self.client, self.evaluate, self.attempts = client, evaluate, attempts
        self.rejections: list[dict[str, str]] = []

    @staticmethod
    def prompt(direction: Direction, spec: SystemSpec, error: str | None = None) -> str:
        """The text sent to the client."""
        knobs = {k: list(v) for k, v in direction.knobs.items()}
        text = (
            f"You tune a speculative-decoding system.\nDirection: {direction.name}: {direction.mechanism}\n"
            f"Knobs and allowed values: {json.dumps(knobs)}\nCurrent system: {spec.to_json()}\n"
            'Reply with one JSON object {"settings": {knob: value}, "rationale": "..."}.'
        )
        return text if error is None else text + f"\nYour previous reply was rejected: {error}"

    def parse(self, direction: Direction, spec: SystemSpec, reply: str) -> tuple[dict[str, Any], SystemSpec]:
        """Validate a reply; returns the settings and the spec they give, or raises ``ValueError``."""
        if not isinstance(reply, str):
            raise ValueError(f"reply: expected text, got {type(reply).__name__}")
        data = _first_json_object(reply)
        if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
            raise ValueError(f"reply: expected an object with a 'settings' object, got {data!r}")
        settings = {k: tuple(v) if isinstance(v, list) else v for k, v in data["settings"].items()}
        return settings, direction.apply(spec, settings)

    def explore(self, direction: Direction, spec: SystemSpec, budget: Budget) -> Candidate | None:
        """Ask the client for a spec edit as JSON, validate it against the direction, evaluate it."""
        error = None
        for _ in range(self.attempts):
            reply = self.client(self.prompt(direction, spec, error))
            try:
                settings, proposed = self.parse(direction, spec, reply)
            except (ValueError, TypeError) as err:
                error = str(err)
                self.rejections.append({"direction": direction.name, "reply": str(reply)[:500], "error": error})
                continue
            effort = max(1, budget.evaluations)
            measured = float(self.evaluate(proposed, spec, effort))
            return Candidate(
                direction=direction.name,
                spec=proposed,
                base=spec,
                settings=settings,
                raw_speedup=measured,
                description=direction.mechanism,
                agent=self.name,
                trials=[{"settings": settings, "effort": effort, "speedup": measured}],
            )
        return None


@dataclass
class Exploration:
    """One job's outcome: the candidate (or ``None``) and the error text if the explorer raised."""

    direction: str
    agent: str
    candidate: Candidate | None
    error: str | None = None


def _run_job(agent: Agent, direction_name: str | None, spec: SystemSpec, budget: Budget) -> Exploration:
    direction = None if direction_name is None else DIRECTIONS[direction_name]
    name = getattr(agent, "name", type(agent).__name__)
    try:
        candidate = agent.explore(direction, spec, budget)
    except Exception as err:  # an explorer's failure is recorded, not fatal to the round
        return Exploration(direction_name or "", name, None, f"{type(err).__name__}: {err}")
    return Exploration(direction_name or "", name, candidate)


_EXECUTORS = ("serial", "process", "ray")


def explore_all(
    jobs: Sequence[tuple[Agent, str, SystemSpec, Budget]],
    *,
    executor: str = "serial",
    max_workers: int = 2,
    num_gpus: float = 0,
) -> list[Exploration]:
    """Run ``(agent, direction name, spec, budget)`` jobs; results in job order.

    Args:
        jobs: the direction is looked up by name in each worker's :data:`DIRECTIONS` (built-ins, and any
            registered when the agent's module is imported); ``None`` for agents that take no direction.
        executor: ``"serial"``, ``"process"`` (a spawn process pool; agents must be picklable) or
            ``"ray"`` (Ray tasks with ``num_gpus`` each on the running or a local Ray instance).
        max_workers: processes for ``"process"``.
        num_gpus: GPUs per Ray task (1 on a GPU machine: each explorer owns one device).

    Example:
        >>> fake = lambda cand, base, effort: float(cand.num_draft_tokens == 3) + 1
        >>> [e.candidate.settings for e in explore_all([(SearchAgent(fake), "draft_length", SystemSpec(), Budget(12))])]
        [{'num_draft_tokens': 3}]
    """
    if executor not in _EXECUTORS:
        raise ValueError(f"executor: expected one of {_EXECUTORS}, got {executor!r}")
    for i, job in enumerate(jobs):
        if len(job) != 4 or not isinstance(job[0], Agent) or not (job[1] is None or job[1] in DIRECTIONS):
            raise ValueError(f"jobs[{i}]: expected (agent, registered direction name or None, spec, budget), got {job!r}")
    if executor == "serial" or not jobs:
        return [_run_job(*job) for job in jobs]
    if executor == "process":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=max_workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_run_job, *job) for job in jobs]
            return [f.result() for f in futures]
    try:
        import ray
    except ImportError as err:
        raise ImportError("executor='ray' needs Ray: pip install ray (see requirements-ci.txt for the pinned version)") from err
    if not ray.is_initialized():
        ray.init(num_cpus=max_workers, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_gpus=num_gpus, num_cpus=1)(_run_job)
    return ray.get([remote.remote(*job) for job in jobs])
