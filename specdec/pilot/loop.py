"""The pilot loop: profile, rank gaps, explore directions, gate every candidate, stack the winners, remember.

One round:

1. profile the current system on the development prompts (:func:`specdec.pilot.profile.profile_system`);
2. rank its gaps to the ceilings (:func:`specdec.pilot.cost.gaps`);
3. pick directions: those memory says worked on matching systems first, then those addressing the
   largest gaps; each goes to an agent (:func:`specdec.pilot.agents.explore_all`); with
   ``replay_memory``, the first round also gates the system memory's accepted edits lead to
   (:meth:`Pilot.remembered`), so a new deployment can start from what worked on a matching one;
4. gate every candidate (:class:`specdec.pilot.gate.Gate`: token forcing on sealed prompts, speedup
   interval above 1);
5. stack the winners that touch different spec fields and gate the stack; the better of the stack and
   the best single winner becomes the current system;
6. write one memory entry per gated candidate and per stack.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from specdec.pilot import cost
from specdec.pilot.agents import Agent, Budget, DevEvaluator, SearchAgent, explore_all
from specdec.pilot.directions import DIRECTIONS, Direction, applicable
from specdec.pilot.gate import Gate, GateVerdict
from specdec.pilot.memory import Memory, MemoryEntry, preconditions_of
from specdec.pilot.profile import profile_system
from specdec.pilot.spec import SystemSpec, TargetCache

__all__ = ["CandidateRecord", "Pilot", "PilotResult", "RoundRecord", "prefer_stack"]


@dataclass
class CandidateRecord:
    """A candidate and what the gate said.

    Attributes:
        direction, agent: where it came from.
        spec_diff: the spec fields it changes.
        raw_speedup: the explorer's own (unsealed) speedup estimate.
        verdict: the gate's :class:`GateVerdict`; ``None`` when the explorer failed or proposed nothing.
        error: the explorer's error, if any.
    """

    direction: str
    agent: str
    spec_diff: dict[str, Any]
    raw_speedup: float
    verdict: GateVerdict | None
    error: str | None = None

    @property
    def accepted(self) -> bool:
        """Whether the gate accepted it."""
        return self.verdict is not None and self.verdict.accepted

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = dict(self.__dict__)
        out["verdict"] = None if self.verdict is None else self.verdict.to_dict()
        return out


@dataclass
class RoundRecord:
    """What one round saw and did.

    Attributes:
        index: 0-based round number.
        spec_before, spec_after: the current system at the start and the end of the round.
        profile: the current system's :class:`~specdec.pilot.profile.RoundProfile` as a dict.
        gaps: ``(stage, lost speedup)``, largest first.
        speedup: the current system's modelled speedup over AR at the round's start.
        candidates: one :class:`CandidateRecord` per exploration.
        integrated: the mechanisms that became part of ``spec_after`` (empty: the system did not change).
        integration: the gate's verdict on the stack of winners (``None`` with fewer than two winners).
        seconds: the round's wall time.
    """

    index: int
    spec_before: SystemSpec
    spec_after: SystemSpec
    profile: dict[str, Any]
    gaps: list[tuple[str, float]]
    speedup: float
    candidates: list[CandidateRecord] = field(default_factory=list)
    integrated: list[str] = field(default_factory=list)
    integration: GateVerdict | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "seconds": self.seconds,
            "index": self.index,
            "spec_before": self.spec_before.to_dict(),
            "spec_after": self.spec_after.to_dict(),
            "profile": self.profile,
            "gaps": self.gaps,
            "speedup": self.speedup,
            "candidates": [c.to_dict() for c in self.candidates],
            "integrated": self.integrated,
            "integration": None if self.integration is None else self.integration.to_dict(),
        }


def prefer_stack(stack: GateVerdict, best: GateVerdict) -> bool:
    """Whether the gated stack of winners replaces the best single winner.

    Both already passed the gate against the current system (forcing, and a 95% interval above 1), so the
    choice between them is by their measured speedups. Comparing the lower ends of the intervals instead
    would keep a small, tightly measured gain over a larger one measured with more spread: on the H200 8B
    shape that kept CUDA graphs alone (5.96x) over graphs plus a drafter (13.15x).

    Example:
        >>> v = lambda s, lo, hi: GateVerdict(True, True, [], s, (lo, hi), [s] * 3)
        >>> prefer_stack(v(13.2, 2.5, 60.0), v(6.0, 5.5, 6.5))
        True
        >>> prefer_stack(GateVerdict(False, False, ["forcing"], 13.2, (2.5, 60.0), []), v(6.0, 5.5, 6.5))
        False
    """
    return stack.accepted and stack.speedup >= best.speedup


@dataclass
class PilotResult:
    """The loop's outcome: the starting and final specs and every round."""

    initial: SystemSpec
    final: SystemSpec
    rounds: list[RoundRecord]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"initial": self.initial.to_dict(), "final": self.final.to_dict(), "rounds": [r.to_dict() for r in self.rounds]}


def _shares_weights(spec: SystemSpec, stock: SystemSpec) -> bool:
    keys = ("target", "dtype", "device", "max_seq_len", "weight_format")
    return not spec.graphs and all(getattr(spec, k) == getattr(stock, k) for k in keys)


class Pilot:
    """Run rounds of profile, explore, gate, integrate on one deployment.

    Args:
        spec: the starting system.
        dev_prompts: the prompts explorers and the profiler see (1-D token tensors).
        gate: the :class:`Gate` (it holds the sealed prompts and the stock target).
        max_new_tokens: tokens per development prompt.
        memory: a :class:`Memory` to read from and write to.
        agent_for: ``agent_for(direction) -> Agent`` (default: a :class:`SearchAgent` timing the
            development prompts).
        budget: each exploration's :class:`Budget` (default ``Budget()``).
        directions_per_round: how many directions are explored per round.
        executor, max_workers: how explorations run (see :func:`explore_all`).
        bandwidth: bytes/s for the ceilings (``None``: measured on this machine).
        stock_spec: the spec of the gate's stock target; systems with the same weights reuse it (they
            decode on it one after another and never change its weights).
        targets: the :class:`TargetCache` systems are built from (share it with a :class:`DevEvaluator`
            so that large weights exist once); default a new one.
        extra_agents: agents asked every round besides the directions' (``explore(None, spec, budget)``),
            e.g. an adversary whose candidates the gate must reject.
        replay_memory: in the first round, also gate the system :meth:`remembered` builds from memory.
        log: receives one line per event.

    Example:
        >>> from specdec.pilot.spec import build
        >>> prompts = [torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])]
        >>> spec = SystemSpec(drafter={"kind": "ngram"}, num_draft_tokens=2)
        >>> stock = build(spec.autoregressive()).target
        >>> timer = lambda system, p, n, seed: 1.0 / system.spec.num_draft_tokens  # longer drafts are "faster"
        >>> gate = Gate(stock, prompts, 16, timer=timer)
        >>> pilot = Pilot(spec, prompts, gate, 16, agent_for=lambda d: SearchAgent(lambda c, b, e: c.num_draft_tokens / b.num_draft_tokens),
        ...               directions=["draft_length"], bandwidth=1e9, stock_spec=spec.autoregressive())
        >>> result = pilot.run(rounds=1)
        >>> result.final.num_draft_tokens
        12
    """

    def __init__(
        self,
        spec: SystemSpec,
        dev_prompts: Sequence[torch.Tensor],
        gate: Gate,
        max_new_tokens: int,
        *,
        memory: Memory | None = None,
        agent_for: Callable[[Direction], Agent] | None = None,
        budget: Budget | None = None,
        directions_per_round: int = 3,
        directions: Sequence[str] | None = None,
        executor: str = "serial",
        max_workers: int = 2,
        bandwidth: float | None = None,
        stock_spec: SystemSpec | None = None,
        targets: TargetCache | None = None,
        extra_agents: Sequence[Agent] = (),
        replay_memory: bool = False,
        log: Callable[[str], None] = lambda line: None,
    ):
        if not isinstance(spec, SystemSpec):
            raise TypeError(f"spec: expected a SystemSpec, got {type(spec).__name__}")
        if not isinstance(gate, Gate):
            raise TypeError(f"gate: expected a Gate, got {type(gate).__name__}")
        self.dev_prompts = [p for p in dev_prompts]
        if not self.dev_prompts:
            raise ValueError("dev_prompts: expected at least one 1-D token tensor, got none")
        if isinstance(directions_per_round, bool) or not isinstance(directions_per_round, int) or directions_per_round < 1:
            raise ValueError(f"directions_per_round: expected an int >= 1, got {directions_per_round!r}")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
        unknown = sorted(set(directions or ()) - set(DIRECTIONS))
        if unknown:
            raise ValueError(f"directions: unknown {unknown}; registered: {sorted(DIRECTIONS)}")
        self.spec, self.gate, self.max_new_tokens = spec, gate, max_new_tokens
        self.memory = memory if memory is not None else Memory(":memory:")
        self.budget, self.directions_per_round = budget or Budget(), directions_per_round
        self.allowed = list(directions) if directions is not None else None
        self.executor, self.max_workers, self.bandwidth = executor, max_workers, bandwidth
        self.stock_spec, self.log = stock_spec, log
        if targets is not None and not isinstance(targets, TargetCache):
            raise TypeError(f"targets: expected a TargetCache, got {type(targets).__name__}")
        self.extra_agents = list(extra_agents)
        for i, agent in enumerate(self.extra_agents):
            if not isinstance(agent, Agent):
                raise TypeError(f"extra_agents[{i}]: expected an Agent (name, explore), got {type(agent).__name__}")
        if not isinstance(replay_memory, bool):
            raise TypeError(f"replay_memory: expected a bool, got {type(replay_memory).__name__}")
        self.replay_memory = replay_memory
        self.targets = targets if targets is not None else TargetCache()
        evaluator = DevEvaluator(self.dev_prompts, max_new_tokens, targets=self.targets)
        self.agent_for = agent_for or (lambda direction: SearchAgent(evaluator))
        if stock_spec is not None:
            self.targets.put(stock_spec, gate.checker.stock)

    def _judge(self, candidate: SystemSpec, current: SystemSpec) -> GateVerdict:
        return self.gate.judge(self.targets.build(candidate), self.targets.build(current))

    def choose_directions(self, spec: SystemSpec, ranked_gaps: list[cost.Gap]) -> list[str]:
        """Directions for this round: remembered winners on matching systems first, then by gap size."""
        pool = [d for d in applicable(spec) if self.allowed is None or d.name in self.allowed]
        pool = [d for d in pool if any(d.apply(spec, s) != spec for s in d.settings())]
        names = [d.name for d in pool]
        chosen = []
        for entry in self.memory.retrieve(spec):
            for name in entry.mechanism.removeprefix("memory:").split("+"):  # a replayed entry: memory:a+b
                if name in names and name not in chosen:
                    chosen.append(name)
        rank = {g.stage: i for i, g in enumerate(g for g in ranked_gaps if g.lost_speedup > 0)}
        by_gap = sorted(pool, key=lambda d: min(rank.get(s, len(rank)) for s in d.stages))
        chosen += [d.name for d in by_gap if d.name not in chosen]
        return chosen[: self.directions_per_round]

    def remembered(self, spec: SystemSpec, *, max_steps: int = 8) -> tuple[SystemSpec, list[str]]:
        """The system memory leads to from ``spec``, and the mechanisms on the way.

        Each step applies the accepted entry (preconditions matching the system so far, best interval
        lower bound first) whose edit changes the system and touches no field an earlier step set.
        With ``directions`` given to the pilot, entries of other mechanisms are left out.

        Example:
            >>> from specdec.pilot.gate import target_pass_timer
            >>> from specdec.pilot.spec import build
            >>> memory = Memory()
            >>> start = SystemSpec().autoregressive()
            >>> memory.add(MemoryEntry("drafter_choice", preconditions_of(start), {"drafter": {"kind": "ngram"}}, 2.0, 1.5, 2.5,
            ...                        "PASS", True))
            >>> memory.add(MemoryEntry("draft_length", preconditions_of(SystemSpec()), {"num_draft_tokens": 8}, 1.2, 1.1, 1.3,
            ...                        "PASS", True))
            >>> gate = Gate(build(start).target, [torch.tensor([1, 2, 3])], 8, timer=target_pass_timer)
            >>> spec, used = Pilot(start, [torch.tensor([1, 2])], gate, 8, memory=memory).remembered(start)
            >>> used, spec.drafter, spec.num_draft_tokens
            (['drafter_choice', 'draft_length'], {'kind': 'ngram'}, 8)
        """
        current, used, touched = spec, [], set()
        for _ in range(max_steps):
            for entry in self.memory.retrieve(current):
                if not entry.spec_diff or touched & set(entry.spec_diff) or not self._allows(entry.mechanism):
                    continue
                try:
                    proposed = current.apply_diff(entry.spec_diff)
                except (TypeError, ValueError):  # an entry written by another specdec's schema
                    continue
                if proposed != current:
                    current, touched = proposed, touched | set(entry.spec_diff)
                    used.append(entry.mechanism)
                    break
            else:
                break
        return current, used

    def _allows(self, mechanism: str) -> bool:
        names = mechanism.removeprefix("memory:").split("+")
        return self.allowed is None or all(name in self.allowed for name in names)

    def _remember(self, mechanism: str, base: SystemSpec, spec: SystemSpec, verdict: GateVerdict) -> None:
        self.memory.add(
            MemoryEntry(
                mechanism=mechanism,
                preconditions=preconditions_of(base),
                spec_diff=spec.diff(base),
                gain=verdict.speedup,
                ci_low=verdict.ci95[0],
                ci_high=verdict.ci95[1],
                forcing_verdict="PASS" if verdict.forcing_passed else "FAIL",
                accepted=verdict.accepted,
                failure_modes=list(verdict.reasons),
            )
        )

    def run_round(self, index: int, current: SystemSpec) -> RoundRecord:
        """One round from ``current``; returns its record (``spec_after`` is the new current system)."""
        started = time.perf_counter()
        record = self._run_round(index, current)
        record.seconds = time.perf_counter() - started
        return record

    def _gate_candidate(self, record, direction, agent, spec, raw_speedup, current, winners) -> None:
        try:
            verdict = self._judge(spec, current)
        except Exception as err:  # a candidate that cannot be built or run is rejected, the round goes on
            error = f"the gate could not run it: {type(err).__name__}: {err}"
            record.candidates.append(CandidateRecord(direction, agent, spec.diff(current), float(raw_speedup), None, error))
            self.log(f"  {direction} ({agent}): {error}")
            return
        record.candidates.append(CandidateRecord(direction, agent, spec.diff(current), float(raw_speedup), verdict))
        self._remember(direction, current, spec, verdict)
        state = "accepted" if verdict.accepted else "rejected: " + "; ".join(verdict.reasons)
        self.log(f"  {direction} ({agent}): raw {raw_speedup:.2f}x, gated {verdict.speedup:.2f}x {state}")
        if verdict.accepted:
            winners.append((direction, spec, verdict))

    def _run_round(self, index: int, current: SystemSpec) -> RoundRecord:
        system = self.targets.build(current)
        profile = profile_system(
            system, [p.to(system.target.device) for p in self.dev_prompts], self.max_new_tokens, bandwidth=self.bandwidth
        )
        ranked = cost.gaps(profile)
        record = RoundRecord(
            index=index,
            spec_before=current,
            spec_after=current,
            profile=profile.to_dict(),
            gaps=[(g.stage, g.lost_speedup) for g in ranked],
            speedup=cost.speedup(profile.tau, profile.t_ar, profile.t_round),
        )
        self.log(
            f"round {index}: modelled speedup {record.speedup:.2f}x; largest gap {ranked[0].stage} ({ranked[0].lost_speedup:+.2f}x)"
        )
        names = self.choose_directions(current, ranked)
        jobs = [(self.agent_for(DIRECTIONS[n]), n, current, self.budget) for n in names]
        jobs += [(agent, None, current, self.budget) for agent in self.extra_agents]
        explorations = explore_all(jobs, executor=self.executor, max_workers=self.max_workers)
        winners = []
        if self.replay_memory and index == 0:
            replayed, used = self.remembered(current)
            if used:
                self._gate_candidate(record, "memory:" + "+".join(used), "memory", replayed, float("nan"), current, winners)
        for exp in explorations:
            cand = exp.candidate
            if not exp.direction:
                exp.direction = getattr(cand, "direction", "") or exp.agent
            if cand is None:
                record.candidates.append(
                    CandidateRecord(exp.direction, exp.agent, {}, float("nan"), None, exp.error or "nothing proposed")
                )
                self.log(f"  {exp.direction}: no candidate ({exp.error or 'nothing proposed'})")
                continue
            if not isinstance(cand.spec, SystemSpec):
                record.candidates.append(
                    CandidateRecord(exp.direction, exp.agent, {}, float("nan"), None, "candidate.spec is not a SystemSpec")
                )
                continue
            self._gate_candidate(record, exp.direction, exp.agent, cand.spec, cand.raw_speedup, current, winners)
        if not winners:
            return record
        winners.sort(key=lambda w: -w[2].speedup)
        best_name, best_spec, best_verdict = winners[0]
        stacked, names_in, touched = current, [], set()
        for name, spec, _ in winners:
            diff = spec.diff(current)
            if touched & set(diff):
                continue
            stacked, touched = stacked.apply_diff(diff), touched | set(diff)
            names_in.append(name)
        if len(names_in) > 1:
            verdict = self._judge(stacked, current)
            record.integration = verdict
            self._remember("+".join(names_in), current, stacked, verdict)
            self.log(
                f"  stack {'+'.join(names_in)}: gated {verdict.speedup:.2f}x {'accepted' if verdict.accepted else 'rejected'}"
            )
            if prefer_stack(verdict, best_verdict):
                record.spec_after, record.integrated = stacked, names_in
                return record
        record.spec_after, record.integrated = best_spec, [best_name]
        return record

    def run(
        self, rounds: int, *, budget_seconds: float = float("inf"), on_round: Callable[[RoundRecord], None] | None = None
    ) -> PilotResult:
        """Run up to ``rounds`` rounds (no new round starts after ``budget_seconds``); returns the result."""
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"rounds: expected an int >= 1, got {rounds!r}")
        if not budget_seconds > 0:
            raise ValueError(f"budget_seconds: expected > 0, got {budget_seconds!r}")
        start, current, records = time.perf_counter(), self.spec, []
        for index in range(rounds):
            if time.perf_counter() - start > budget_seconds:
                self.log(f"budget of {budget_seconds:.0f} s spent after {index} rounds")
                break
            record = self.run_round(index, current)
            records.append(record)
            current = record.spec_after
            if on_round is not None:
                on_round(record)
        return PilotResult(initial=self.spec, final=current, rounds=records)
