"""Profiles and ceilings: where a decode system's time goes per round, and how low each part could go.

Stage times come from :class:`specdec.GenerationStats` (draft, verify, other). The target's commit runs
inside the verifier, so ``GenerationStats`` counts it in ``verify``; :func:`profile_system` times every
``target.commit`` call of the profiled run (:class:`CommitTimer`, synchronised on CUDA) and moves that
time from ``verify`` to ``commit``. Ceilings come from the same machine: a copy-bandwidth probe
(:func:`copy_bandwidth`, CUDA events on a GPU, host timers elsewhere), the bytes each pass must read
(:func:`module_bytes`) and the acceptance ceiling from the drafter's statistics
(:func:`acceptance_ceiling`). :func:`kernel_table` lists per-kernel times from ``torch.profiler``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "STAGES",
    "Ceilings",
    "CommitTimer",
    "KernelTime",
    "RoundProfile",
    "acceptance_ceiling",
    "copy_bandwidth",
    "device_timer",
    "kernel_table",
    "measure_ceilings",
    "module_bytes",
    "profile_system",
]

STAGES = ("draft", "verify", "commit", "other")
"""The stages a round's time splits into."""


def device_timer(device: torch.device | str) -> Callable[[Callable[[], Any]], float]:
    """A function timing one call of ``fn`` in seconds: CUDA events on a CUDA device, ``perf_counter`` elsewhere.

    Example:
        >>> seconds = device_timer("cpu")(lambda: sum(range(100)))
        >>> seconds >= 0
        True
    """
    device = torch.device(device)
    if device.type == "cuda":

        def timed(fn: Callable[[], Any]) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3

        return timed

    def timed_host(fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return timed_host


def copy_bandwidth(device: torch.device | str = "cpu", *, nbytes: int = 1 << 26, reps: int = 5) -> float:
    """Bytes per second of a copy of ``nbytes`` on ``device`` (read and written bytes both counted).

    The median of ``reps`` timed copies after one warm-up: the memory-bandwidth ceiling of this machine.

    Example:
        >>> copy_bandwidth("cpu", nbytes=1 << 20, reps=3) > 0
        True
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
        raise ValueError(f"nbytes: expected an int >= 1, got {nbytes!r}")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps: expected an int >= 1, got {reps!r}")
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    timer = device_timer(device)
    dst.copy_(src)
    seconds = statistics.median(timer(lambda: dst.copy_(src)) for _ in range(reps))
    return 2 * nbytes / max(seconds, 1e-12)


def module_bytes(module: Any) -> int:
    """Bytes of a module's weights (parameters and persistent buffers, shared tensors once); 0 for ``None``
    or an object that is not a ``torch.nn.Module`` (an n-gram drafter reads no weights).

    Example:
        >>> module_bytes(torch.nn.Linear(4, 2, bias=False)), module_bytes(None)
        (32, 0)
    """
    if not isinstance(module, torch.nn.Module):
        inner = getattr(module, "model", None)
        return module_bytes(inner) if isinstance(inner, torch.nn.Module) else 0
    seen: dict[tuple[int, int], int] = {}
    for tensor in module.state_dict(keep_vars=True).values():
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            seen[(tensor.untyped_storage().data_ptr(), tensor.storage_offset())] = tensor.numel() * tensor.element_size()
    return sum(seen.values())


def acceptance_ceiling(accepted_histogram: Sequence[int], num_draft_tokens: int, longest_proposal: int = 0) -> float:
    """Tokens per round a drafter could reach at this proposal length: ``1 + k`` where ``k`` is the longest proposal
    the run offered (``GenerationStats.longest_proposal``; the longest run the histogram shows accepted if that is
    longer, as a two-level round's second draft can make it), at most ``num_draft_tokens``; ``1 + num_draft_tokens``
    without statistics.

    Example:
        >>> acceptance_ceiling([3, 1, 0, 2], 6, longest_proposal=6), acceptance_ceiling([3, 1, 0, 2], 6), acceptance_ceiling([], 4)
        (7.0, 4.0, 5.0)
    """
    if isinstance(longest_proposal, bool) or not isinstance(longest_proposal, int) or longest_proposal < 0:
        raise ValueError(f"longest_proposal: expected an int >= 0, got {longest_proposal!r}")
    if isinstance(num_draft_tokens, bool) or not isinstance(num_draft_tokens, int) or num_draft_tokens < 0:
        raise ValueError(f"num_draft_tokens: expected an int >= 0, got {num_draft_tokens!r}")
    hist = list(accepted_histogram)
    if any(not isinstance(c, int) or c < 0 for c in hist):
        raise ValueError(f"accepted_histogram: expected counts >= 0, got {hist}")
    longest = max(len(hist) - 1, longest_proposal) if sum(hist) else num_draft_tokens
    return 1.0 + min(max(longest, 0), num_draft_tokens)


@dataclass
class Ceilings:
    """Lower bounds on each stage's seconds per round and the upper bound on tokens per round.

    Attributes:
        stages: seconds per round, one entry per stage of :data:`STAGES`.
        tau: tokens per round a perfect drafter would give at this proposal length.
        bandwidth: the copy bandwidth (bytes/s) the byte floors divide by.
    """

    stages: dict[str, float]
    tau: float
    bandwidth: float


@dataclass
class RoundProfile:
    """Where one system's time goes, per speculative round, and the AR time per token it competes with.

    Attributes:
        stages: measured seconds per round for each of :data:`STAGES`.
        tau: tokens emitted per round (accepted drafts + 1).
        t_ar: seconds per token of plain AR decoding of the same target.
        ceilings: :class:`Ceilings`, or ``None`` when not measured.
        rounds, tokens: what the profile was measured over.
        accepted_histogram: the run's ``GenerationStats.accepted_histogram``.

    Example:
        >>> p = RoundProfile(stages={"draft": 1.0, "verify": 2.0, "commit": 0.0, "other": 1.0}, tau=3.0, t_ar=2.0)
        >>> p.t_round
        4.0
    """

    stages: dict[str, float]
    tau: float
    t_ar: float
    ceilings: Ceilings | None = None
    rounds: int = 0
    tokens: int = 0
    accepted_histogram: list[int] = field(default_factory=list)

    def __post_init__(self):
        missing = [s for s in STAGES if s not in self.stages]
        extra = [s for s in self.stages if s not in STAGES]
        if missing or extra:
            raise ValueError(f"stages: expected exactly the keys {STAGES}, got {sorted(self.stages)}")
        if any(not v >= 0 for v in self.stages.values()):
            raise ValueError(f"stages: expected seconds >= 0, got {self.stages}")
        if not self.tau >= 1:
            raise ValueError(f"tau: expected tokens per round >= 1, got {self.tau!r}")
        if not self.t_ar > 0:
            raise ValueError(f"t_ar: expected seconds per AR token > 0, got {self.t_ar!r}")

    @property
    def t_round(self) -> float:
        """Seconds per round: the sum of the stage times."""
        return sum(self.stages.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {k: v for k, v in self.__dict__.items() if k != "ceilings"}
        out["ceilings"] = None if self.ceilings is None else dict(self.ceilings.__dict__)
        return out


class CommitTimer:
    """Within a ``with`` block, time every ``target.commit`` call (seconds in :attr:`seconds`, calls in :attr:`calls`).

    On CUDA each call is synchronised before and after, so the time is the commit's device work (the
    KV moves of a tree path) and not only its launch; the profiled run pays those syncs, the gate's
    timings do not.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> with CommitTimer(target) as timer:
        ...     _ = target(torch.tensor([[1, 2, 3]])); target.commit(3)
        >>> timer.calls, timer.seconds > 0, "commit" in vars(target)
        (1, True, False)
    """

    def __init__(self, target: Any):
        if not callable(getattr(target, "commit", None)):
            raise TypeError(f"target: expected an object with a commit method, got {type(target).__name__}")
        self.target, self.seconds, self.calls = target, 0.0, 0
        self._cuda = getattr(getattr(target, "device", None), "type", None) == "cuda"

    def __enter__(self) -> CommitTimer:
        inner = self.target.commit
        self._own = "commit" in vars(self.target)
        self._previous = vars(self.target).get("commit")

        def timed_commit(*args: Any, **kwargs: Any) -> Any:
            if self._cuda:
                torch.cuda.synchronize(self.target.device)
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                if self._cuda:
                    torch.cuda.synchronize(self.target.device)
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        object.__setattr__(self.target, "commit", timed_commit)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._own:
            object.__setattr__(self.target, "commit", self._previous)
        else:
            object.__delattr__(self.target, "commit")


def _stats_of(system, prompts, max_new_tokens: int, seed: int):
    from specdec.generation import GenerationStats

    total = GenerationStats()
    for prompt in prompts:
        total = total + system.generate(prompt[None], max_new_tokens, seed=seed).stats
    return total


def measure_ceilings(
    system, profile_tau_hist: Sequence[int], *, bandwidth: float | None = None, longest_proposal: int = 0
) -> Ceilings:
    """Ceilings of a built system on this machine: byte floors over the copy bandwidth, and the acceptance ceiling.

    The verify floor reads the target's weights once per round; the draft floor the drafter's weights
    once per round (0 for a drafter without weights); commit and other are 0 (what CUDA graphs and
    overlap can reach).

    Example:
        >>> from specdec.pilot.spec import SystemSpec, build
        >>> c = measure_ceilings(build(SystemSpec()), [1, 1], bandwidth=1e9)
        >>> c.stages["draft"], c.stages["verify"] > 0, c.tau
        (0.0, True, 2.0)
    """
    bw = copy_bandwidth(system.target.device) if bandwidth is None else float(bandwidth)
    if not bw > 0:
        raise ValueError(f"bandwidth: expected bytes/s > 0, got {bw!r}")
    stages = {
        "draft": module_bytes(system.drafter) / bw if system.drafter is not None else 0.0,
        "verify": module_bytes(system.target) / bw,
        "commit": 0.0,
        "other": 0.0,
    }
    tau = acceptance_ceiling(profile_tau_hist, system.spec.num_draft_tokens, longest_proposal)
    return Ceilings(stages=stages, tau=tau, bandwidth=bw)


def profile_system(
    system,
    prompts: Sequence[torch.Tensor],
    max_new_tokens: int,
    *,
    seed: int = 0,
    ar_system=None,
    bandwidth: float | None = None,
) -> RoundProfile:
    """Run ``system`` (a :class:`specdec.pilot.BuiltSystem`) on ``prompts`` and split its time per round.

    Args:
        system: the system to profile (speculative; a spec without a drafter profiles as AR rounds).
        prompts: 1-D token tensors.
        max_new_tokens: tokens per prompt.
        seed: the generation seed.
        ar_system: the AR baseline on the same target (default: ``system``'s target without a drafter).
        bandwidth: bytes/s for the ceilings; ``None`` runs :func:`copy_bandwidth` on the target's device.

    Example:
        >>> from specdec.pilot.spec import SystemSpec, build
        >>> system = build(SystemSpec())
        >>> p = profile_system(system, [torch.tensor([1, 2, 3, 1, 2, 3])], 8, bandwidth=1e9)
        >>> p.tokens, p.tau >= 1
        (8, True)
    """
    from specdec.pilot.spec import build

    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts: expected at least one 1-D token tensor, got none")
    if ar_system is None:
        ar_system = build(system.spec.autoregressive(), target=system.target)
    # both calls once untimed: a target with CUDA graphs captures one at the first use of each row bucket
    _stats_of(ar_system, prompts, max_new_tokens, seed)
    _stats_of(system, prompts, max_new_tokens, seed)
    ar = _stats_of(ar_system, prompts, max_new_tokens, seed)
    with CommitTimer(system.target) as commits:
        spec = _stats_of(system, prompts, max_new_tokens, seed)
    # The prefill (one token a prompt) is no round and no AR decode step: its time, from a run of it alone on the
    # same target, comes off both sides, as its token does, so that AR profiled against itself models 1.0x.
    with CommitTimer(system.target) as prefill_commits:
        prefill = _stats_of(ar_system, prompts, 1, seed)
    rounds = spec.rounds if spec.rounds else max(spec.target_passes - len(prompts), 1)
    decode_tokens = spec.new_tokens - len(prompts)  # the prefill emits each prompt's first token
    tau = max(decode_tokens / rounds, 1.0)
    # GenerationStats counts the commits (the prefill's too) in verify: move them to their own stage
    commit_s = min(commits.seconds, spec.verify_s)
    prefill_commit_s = min(prefill_commits.seconds, prefill.verify_s, commit_s)
    stages = {
        "draft": spec.draft_s / rounds,
        "verify": max(spec.verify_s - commit_s - (prefill.verify_s - prefill_commit_s), 0.0) / rounds,
        "commit": (commit_s - prefill_commit_s) / rounds,
        "other": max(spec.other_s - prefill.other_s, 0.0) / rounds,
    }
    t_ar = max(ar.total_s - prefill.total_s, 0.0) / max(ar.new_tokens - len(prompts), 1)
    ceilings = measure_ceilings(system, spec.accepted_histogram, bandwidth=bandwidth, longest_proposal=spec.longest_proposal)
    return RoundProfile(
        stages=stages,
        tau=tau,
        t_ar=t_ar,
        ceilings=ceilings,
        rounds=rounds,
        tokens=spec.new_tokens,
        accepted_histogram=list(spec.accepted_histogram),
    )


@dataclass
class KernelTime:
    """One kernel's (or op's) total self time in a ``torch.profiler`` trace.

    Attributes:
        name: the kernel or op name.
        seconds: total self time.
        calls: how many times it ran.
    """

    name: str
    seconds: float
    calls: int


def kernel_table(fn: Callable[[], Any], device: torch.device | str = "cpu", *, top: int = 20) -> list[KernelTime]:
    """Per-kernel self times of one ``fn()`` call from ``torch.profiler`` (CUDA kernels on a GPU, ops on the CPU).

    Example:
        >>> table = kernel_table(lambda: torch.ones(64, 64) @ torch.ones(64, 64), "cpu")
        >>> any("mm" in k.name for k in table)
        True
    """
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    rows = []
    for event in prof.key_averages():
        us = event.self_device_time_total if device.type == "cuda" else event.self_cpu_time_total
        if us > 0:
            rows.append(KernelTime(name=event.key, seconds=us / 1e6, calls=event.count))
    rows.sort(key=lambda k: -k.seconds)
    return rows[:top]
