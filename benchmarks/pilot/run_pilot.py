"""The pilot on one GPU: from plain AR to the best spec it finds, beside the best hand-configured system,
then the memory-carry experiment on a second deployment.

Modes:

- ``sim``: deployment 1 is a Qwen3-8B-shaped target with random bf16 weights and the ``oracle`` drafter
  (:class:`specdec.OracleDrafter`, profile ``specpilot-one-level``: simulated acceptance, labelled so in
  every output). The pilot starts from plain AR; three hand-configured systems (chain at the profile's
  draft length, tree verifier budget 64, two-level verification budget 64; CUDA graphs on) are measured
  beside its result through the same gate. Then deployment 2 (Qwen3-32B shape, same drafter profile)
  runs twice with the same round and time limits: from deployment 1's memory (replayed into its first
  round) and from an empty memory; each run's rounds and wall time to reach its final spec are recorded.
  A cheating agent (accept every draft, :mod:`specdec.testing.cheating`) joins every round of
  deployment 1 once a drafter is in place; the gate must reject it on token forcing.
- ``real``: SmolLM2-135M with its trained DFlash drafter (bf16 on CUDA), AR to the best spec, beside
  the best hand configuration.

Every speedup is measured by the pilot's :class:`~specdec.pilot.gate.Gate` (token forcing on sealed
prompts the explorers never see, then ``t_AR / t_system`` over three seeded repeats). Outputs are
compared with AR token for token: float32 runs (the smoke run) must be equal; bf16 runs record it.

Writes under ``--out``: ``pilot_<mode>.json`` (provenance, per-deployment summary, rounds), and per
deployment a folder with the pilot's report (Markdown and plots), its memory (SQLite and JSON) and
final spec. A wall-clock budget stops starting new rounds and measurements past it; the JSON is
rewritten after every phase.

    python -m benchmarks.pilot.run_pilot --mode sim --out $OUT/pilot_sim
    python -m benchmarks.pilot.run_pilot --mode sim --smoke --out /tmp/pilot_smoke   # CPU, tiny shapes
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import TINY_QWEN3, provenance, provenance_line, write_json
from specdec.drafters.oracle import PRESETS
from specdec.pilot.agents import Budget, DevEvaluator, SearchAgent
from specdec.pilot.directions import DIRECTIONS, drafter_choice, register_direction
from specdec.pilot.gate import Gate, target_pass_timer, wall_time
from specdec.pilot.loop import Pilot, PilotResult
from specdec.pilot.memory import Memory
from specdec.pilot.profile import copy_bandwidth
from specdec.pilot.report import write_outputs
from specdec.pilot.spec import ORACLE_REFERENCES, SystemSpec, TargetCache, add_oracle_references
from specdec.testing.cheating import CheatingAgent

PROFILE = "specpilot-one-level"
ORACLE = {"kind": "oracle", "profile": PROFILE, "seed": 0}
# W12 is left out: its lossless packing is defined for trained weights' value range, not random normal weights
SIM_DIRECTIONS = ("drafter_choice", "draft_length", "cuda_graphs", "two_level_verifier", "tree_verifier", "chain_verifier")
# deployment 2 on the GPU (Qwen3-32B shape, 61 GiB of bf16 weights): a second, graph-captured copy of the weights
# and two-level's 8-bit Q view do not fit beside the plain copy in 139 GiB, so graphs are left out there
CARRY_GPU_DIRECTIONS = tuple(d for d in SIM_DIRECTIONS if d != "cuda_graphs")
REAL_DIRECTIONS = ("drafter_choice", "draft_length", "cuda_graphs", "block_drafter_tree", "chain_verifier")

TINY_DENSE = dict(TINY_QWEN3)
TINY_DENSE_DEEPER = {**TINY_DENSE, "num_layers": 4, "hidden_size": 96, "intermediate_size": 192}


@dataclass
class Sizes:
    """How big one mode's runs are."""

    prompt_tokens: int
    max_new_tokens: int
    dev_prompts: int
    sealed_prompts: int
    evaluations: int
    rounds: int
    directions_per_round: int
    carry_rounds: int
    carry_directions_per_round: int

    def for_carry(self, max_new_tokens: int, sealed_prompts: int) -> Sizes:
        return Sizes(**{**self.__dict__, "max_new_tokens": max_new_tokens, "sealed_prompts": sealed_prompts})


GPU_SIZES = dict(
    prompt_tokens=64,
    max_new_tokens=48,
    dev_prompts=1,
    sealed_prompts=2,
    evaluations=6,
    rounds=3,
    directions_per_round=3,
    carry_rounds=3,
    carry_directions_per_round=2,
)
SMOKE_SIZES = dict(
    prompt_tokens=16,
    max_new_tokens=24,
    dev_prompts=1,
    sealed_prompts=1,
    evaluations=3,
    rounds=2,
    directions_per_round=2,
    carry_rounds=2,
    carry_directions_per_round=1,
)


@dataclass
class Clock:
    """Wall time since the start and what is left of the budget."""

    budget_s: float
    start: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.budget_s - self.elapsed()


def log_to(clock: Clock):
    def log(line: str) -> None:
        print(f"[{clock.elapsed():6.1f} s] {line}", flush=True)

    return log


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_prompts(vocab_size: int, count: int, length: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (length,), generator=gen) for _ in range(count)]


def humaneval_prompts(count: int, length: int, *, tiny: bool = False) -> list[torch.Tensor]:
    """HumanEval prompts in SmolLM2's chat format (``tiny``: the tiny test tokenizer's ids, for the smoke run)."""
    from specdec import data

    texts = data.humaneval_prompts(range(count))
    if tiny:
        from specdec.testing import tiny_tokenizer

        tok = tiny_tokenizer()
        return [torch.tensor(tok(t.lower())["input_ids"], dtype=torch.long)[-length:] for t in texts]
    tok = data.smollm2_tokenizer()
    return [data.chat_prompt_ids(tok, text)[0][-length:] for text in texts]


def reference_decodes(target, prompts: list[torch.Tensor], tokens: int) -> list[torch.Tensor]:
    """The stock target's greedy continuation of each prompt (prompt + ``tokens`` new tokens)."""
    from specdec.decode import generate

    refs = []
    for prompt in prompts:
        out = generate(target, prompt[None].to(target.device), tokens)
        refs.append(torch.cat([prompt.cpu(), out.tokens[0].cpu()]))
    return refs


def run_rounds(pilot: Pilot, rounds: int, deadline: float, clock: Clock, log) -> PilotResult:
    """Up to ``rounds`` rounds; no round starts when the last round's duration would end it past ``deadline``."""
    current, records, last = pilot.spec, [], 0.0
    for index in range(rounds):
        if clock.elapsed() + last > deadline:
            log(f"time budget: no round {index} (the last took {last:.1f} s, {deadline - clock.elapsed():.1f} s left)")
            break
        record = pilot.run_round(index, current)
        records.append(record)
        current, last = record.spec_after, record.seconds
        log(f"round {index} done in {record.seconds:.1f} s: integrated {record.integrated or 'nothing'}")
    return PilotResult(initial=pilot.spec, final=current, rounds=records)


def measure(gate: Gate, targets: TargetCache, spec: SystemSpec, ar_spec: SystemSpec, refs, max_new: int) -> dict[str, Any]:
    """``spec`` against AR through the gate (forcing verdict, speedup and its 95% interval) and its outputs against AR's
    (``refs``: ``(prompt, AR reference decode)`` pairs of the sealed prompts)."""
    system, ar = targets.build(spec), targets.build(ar_spec)
    verdict = gate.judge(system, ar)
    equal = []
    for prompt, ref in refs:
        out = system.generate(prompt[None].to(system.target.device), max_new, seed=0).tokens[0].cpu()
        equal.append(bool(torch.equal(out, ref[prompt.numel() : prompt.numel() + max_new])))
    return {
        "spec": spec.to_dict(),
        "speedup_vs_ar": verdict.speedup,
        "ci95": list(verdict.ci95),
        "forcing_passed": verdict.forcing_passed,
        "equal_to_ar": all(equal),
        "equal_to_ar_per_prompt": equal,
    }


def round_rows(result: PilotResult) -> list[dict[str, Any]]:
    rows = []
    for r in result.rounds:
        rows.append(
            {
                "round": r.index,
                "seconds": r.seconds,
                "modelled_speedup": r.speedup,
                "largest_gap": r.gaps[0] if r.gaps else None,
                "integrated": r.integrated,
                "spec_after_diff": r.spec_after.diff(result.initial),
                "candidates": [
                    {
                        "direction": c.direction,
                        "agent": c.agent,
                        "change": c.spec_diff,
                        "raw": c.raw_speedup,
                        "gated": None if c.verdict is None else c.verdict.speedup,
                        "ci95": None if c.verdict is None else list(c.verdict.ci95),
                        "forcing": None if c.verdict is None else ("PASS" if c.verdict.forcing_passed else "FAIL"),
                        "accepted": c.accepted,
                        "reasons": c.error if c.verdict is None else c.verdict.reasons,
                    }
                    for c in r.candidates
                ],
            }
        )
    return rows


def reached(result: PilotResult) -> dict[str, Any]:
    """Rounds and wall time until the run's final spec was first the current system."""
    if result.final == result.initial:
        return {"rounds_to_final": 0, "seconds_to_final": 0.0}
    seconds = 0.0
    for r in result.rounds:
        seconds += r.seconds
        if r.spec_after == result.final:
            return {"rounds_to_final": r.index + 1, "seconds_to_final": seconds}
    raise AssertionError("the final spec is the last round's spec_after")


def to_spec(run: dict[str, Any], spec: SystemSpec, initial: SystemSpec) -> dict[str, Any]:
    """Rounds and wall time until ``spec`` was the run's current system (``None``: never within the run)."""
    if spec == initial:
        return {"rounds_to_best": 0, "seconds_to_best": 0.0}
    seconds, target = 0.0, spec.diff(initial)
    for row in run["rounds"]:
        seconds += row["seconds"]
        if row["spec_after_diff"] == target:
            return {"rounds_to_best": row["round"] + 1, "seconds_to_best": seconds}
    return {"rounds_to_best": None, "seconds_to_best": None}


class CheatOnceDrafting:
    """The cheating agent, asked only once the system has a drafter (accepting every draft of no drafter is AR)."""

    name = "cheating"

    def __init__(self, evaluate):
        self.inner = CheatingAgent(evaluate)

    def explore(self, direction, spec, budget):
        return self.inner.explore(direction, spec, budget) if spec.uses_drafter else None


def deployment(
    name: str,
    ar_spec: SystemSpec,
    dev: list[torch.Tensor],
    sealed: list[torch.Tensor],
    sizes: Sizes,
    *,
    drafters: dict[str, dict],
    directions: tuple[str, ...],
    memory: Memory,
    rounds: int,
    directions_per_round: int,
    deadline: float,
    clock: Clock,
    log,
    targets: TargetCache,
    oracle: bool,
    replay_memory: bool = False,
    cheat: bool = False,
    timer=wall_time,
):
    """Run the pilot from ``ar_spec`` on one deployment; returns ``(result, gate, refs)``."""
    stock = targets.get(ar_spec)
    bandwidth = copy_bandwidth(stock.device)
    log(f"{name}: copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    if oracle:
        t0 = time.perf_counter()
        known = ORACLE_REFERENCES.get(json.dumps(ar_spec.target, sort_keys=True))
        refs = known or reference_decodes(stock, dev + sealed, sizes.max_new_tokens + PRESETS[PROFILE].num_drafts + 2)
        if not known:
            add_oracle_references(ar_spec.target, refs)
        log(f"{name}: reference decodes of {len(refs)} prompts in {time.perf_counter() - t0:.1f} s")
    else:
        refs = reference_decodes(stock, sealed, sizes.max_new_tokens)
    sealed_refs = list(zip(sealed, refs[-len(sealed) :]))
    register_direction(drafter_choice(drafters), replace=True)
    if oracle:
        # the registry's draft lengths stop at 12; the simulated drafter has 15 positions, so the grid reaches them
        lengths = tuple(sorted({*DIRECTIONS["draft_length"].knobs["num_draft_tokens"], PRESETS[PROFILE].num_drafts}))
        register_direction(dataclasses.replace(DIRECTIONS["draft_length"], knobs={"num_draft_tokens": lengths}), replace=True)
    gate = Gate(stock, [p.to(stock.device) for p in sealed], sizes.max_new_tokens, timer=timer)
    evaluator = DevEvaluator(dev, sizes.max_new_tokens, targets=targets, timer=timer)
    pilot = Pilot(
        ar_spec,
        dev,
        gate,
        sizes.max_new_tokens,
        memory=memory,
        agent_for=lambda direction: SearchAgent(evaluator),
        budget=Budget(sizes.evaluations),
        directions_per_round=directions_per_round,
        directions=list(directions),
        stock_spec=ar_spec,
        targets=targets,
        extra_agents=[CheatOnceDrafting(evaluator)] if cheat else [],
        replay_memory=replay_memory,
        bandwidth=bandwidth,
        log=log,
    )
    result = run_rounds(pilot, rounds, deadline, clock, log)
    return result, gate, sealed_refs


def real_drafter(cuda: bool) -> dict[str, Any]:
    """SmolLM2's trained DFlash drafter on the GPU; an n-gram drafter in the CPU smoke run."""
    return {"kind": "dflash", "path": "smollm2"} if cuda else {"kind": "ngram", "max_ngram": 3}


def hand_configs(mode: str, base: SystemSpec, cuda: bool) -> dict[str, SystemSpec]:
    """The hand-configured systems measured beside the pilot's result."""
    if mode == "sim":
        k = PRESETS[PROFILE].num_drafts
        drafted = base.with_changes(drafter=dict(ORACLE), num_draft_tokens=k, graphs=cuda)
        return {
            f"chain k={k}": drafted,
            "tree budget 64": drafted.with_changes(verifier={"kind": "tree", "budget": 64}),
            "two-level budget 64 (gate auto)": drafted.with_changes(
                verifier={"kind": "two_level", "budget": 64, "q_budget": 64, "gate": "auto"}
            ),
        }
    block = 8  # the shipped SmolLM2 DFlash drafter's block size
    drafter = real_drafter(cuda)
    drafted = base.with_changes(drafter=drafter, num_draft_tokens=block - 1, graphs=cuda)
    tree_knob = {"tree_budget": 32} if drafter["kind"] == "dflash" else {"max_paths": 4}
    return {
        f"chain k={block - 1}": drafted,
        "tree budget 32": drafted.with_changes(drafter={**drafter, **tree_knob}, verifier={"kind": "tree", "budget": 32}),
    }


def compare_with_hand(name, result, gate, targets, ar_spec, sealed_refs, sizes, mode, clock, deadline, log) -> dict[str, Any]:
    cuda = ar_spec.is_cuda
    out: dict[str, Any] = {"pilot": measure(gate, targets, result.final, ar_spec, sealed_refs, sizes.max_new_tokens)}
    log(f"{name}: pilot's spec {out['pilot']['speedup_vs_ar']:.2f}x AR {out['pilot']['ci95']}")
    hand = {}
    for label, spec in hand_configs(mode, ar_spec, cuda).items():
        if clock.elapsed() > deadline:
            log(f"time budget: hand config {label!r} not measured")
            hand[label] = None
            continue
        try:
            hand[label] = measure(gate, targets, spec, ar_spec, sealed_refs, sizes.max_new_tokens)
        except Exception as err:  # one hand configuration that cannot run does not end the benchmark
            log(f"{name}: hand config {label} failed: {type(err).__name__}: {err}")
            hand[label] = None
            out.setdefault("hand_errors", {})[label] = f"{type(err).__name__}: {err}"
            continue
        log(f"{name}: hand config {label}: {hand[label]['speedup_vs_ar']:.2f}x AR {hand[label]['ci95']}")
    out["hand"] = hand
    measured = {k: v for k, v in hand.items() if v is not None}
    if measured:
        best = max(measured, key=lambda k: measured[k]["speedup_vs_ar"])
        out["best_hand"] = best
        out["pilot_over_best_hand"] = out["pilot"]["speedup_vs_ar"] / measured[best]["speedup_vs_ar"]
        out["goal_pilot_at_least_best_hand"] = out["pilot"]["speedup_vs_ar"] >= measured[best]["speedup_vs_ar"]
    return out


def gate_facts(result: PilotResult) -> dict[str, Any]:
    cands = [c for r in result.rounds for c in r.candidates if c.verdict is not None]
    cheats = [c for c in cands if c.agent == "cheating"]
    integrated_forcing = []
    for r in result.rounds:
        for c in r.candidates:
            if c.direction in r.integrated:
                integrated_forcing.append(c.verdict.forcing_passed)
        if r.integration is not None and len(r.integrated) > 1:
            integrated_forcing.append(r.integration.forcing_passed)
    return {
        "candidates_gated": len(cands),
        "accepted": sum(c.accepted for c in cands),
        "cheating_candidates": len(cheats),
        "cheating_rejected": sum(not c.accepted for c in cheats),
        "cheating_failed_forcing": sum(not c.verdict.forcing_passed for c in cheats),
        "cheating_raw_speedups": [c.raw_speedup for c in cheats],
        "every_integrated_passed_forcing": all(integrated_forcing),
    }


def header(name: str, mode: str, sizes: Sizes, result: PilotResult, clock_s: float, target: str) -> dict[str, Any]:
    acceptance = (
        f"simulated: OracleDrafter profile {PROFILE} ({PRESETS[PROFILE].tokens_per_round:.2f} tokens per round at "
        f"{PRESETS[PROFILE].num_drafts} drafts)"
        if mode == "sim"
        else "real: SmolLM2-135M DFlash drafter"
    )
    return {
        "deployment": name,
        "target": target,
        "acceptance": acceptance,
        "prompts": f"{sizes.dev_prompts} development, {sizes.sealed_prompts} sealed, {sizes.prompt_tokens} tokens each",
        "max new tokens": sizes.max_new_tokens,
        "rounds run": len(result.rounds),
        "wall time": f"{clock_s:.1f} s",
    }


def fresh_memory(path: Path) -> Memory:
    """An empty SQLite memory at ``path`` (a file left by an earlier run is removed)."""
    path.unlink(missing_ok=True)
    return Memory(path)


def write_deployment(folder: Path, result: PilotResult, memory: Memory, head: dict[str, Any]) -> None:
    write_outputs(result, memory, folder, header=head)
    if memory.path != ":memory:" and Path(memory.path).parent != folder:
        shutil.copy(memory.path, folder / "memory.sqlite")


def free(targets: TargetCache, device: torch.device) -> None:
    targets.clear()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("sim", "real"), default="sim")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, float32: the same code path in well under a minute")
    ap.add_argument("--budget-seconds", type=float, default=None, help="wall budget (default: 225 sim, 105 real, 50 smoke)")
    ap.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        default="bfloat16",
        help="deployment 1's dtype on the GPU (default bfloat16; float32 keeps outputs equal to AR on random weights). "
        "Deployment 2 is bfloat16 (the 32B shape in float32 does not fit twice)",
    )
    ap.add_argument("--carry-target", default="qwen3-32b", help="deployment 2's shape in sim mode (default qwen3-32b)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "pilot"))
    args = ap.parse_args(argv)

    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    cuda = torch.cuda.is_available() and not args.smoke
    if not cuda and not args.smoke:
        raise SystemExit("no CUDA device: run with --smoke on the CPU")
    device = torch.device("cuda" if cuda else "cpu")
    dtype = args.dtype if cuda else "float32"
    sizes = Sizes(**(GPU_SIZES if cuda else SMOKE_SIZES))
    budget = args.budget_seconds or (150.0 if args.smoke else 225.0 if args.mode == "sim" else 105.0)
    # on the CPU the tiny models' wall times are launch noise: the smoke run counts target passes instead
    timer = wall_time if cuda else target_pass_timer
    clock = Clock(budget)
    log = log_to(clock)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"pilot_{args.mode}.json"
    summary: dict[str, Any] = {"mode": args.mode, "smoke": args.smoke, "device": str(device), "dtype": dtype, "budget_s": budget}
    summary["sizes"] = sizes.__dict__

    def save() -> None:
        summary["wall_s"] = clock.elapsed()
        write_json(json_path, summary, prov)

    torch.manual_seed(0)
    targets = TargetCache()
    if args.mode == "sim":
        target_section = {"kind": "random", "shape": "qwen3-8b" if cuda else TINY_DENSE, "seed": 0}
        vocab = 151936 if cuda else TINY_DENSE["vocab_size"]
        prompts = random_prompts(vocab, sizes.dev_prompts + sizes.sealed_prompts, sizes.prompt_tokens, seed=0)
        drafters, directions = {"oracle": dict(ORACLE)}, SIM_DIRECTIONS
    else:
        # the smoke run stands in a tiny target and an n-gram drafter for SmolLM2 and its DFlash drafter (the real
        # pair on these CPUs takes minutes per round; its CPU run is benchmarks/results/pilot_smollm2_cpu_*)
        target_section = {"kind": "smollm2"} if cuda else {"kind": "tiny", "seed": 0}
        prompts = humaneval_prompts(sizes.dev_prompts + sizes.sealed_prompts, sizes.prompt_tokens, tiny=not cuda)
        drafters, directions = {"real": real_drafter(cuda)}, REAL_DIRECTIONS
    dev, sealed = prompts[: sizes.dev_prompts], prompts[sizes.dev_prompts :]
    max_seq = sizes.prompt_tokens + sizes.max_new_tokens + 2 * 64 + 32
    ar_spec = SystemSpec(target=target_section, dtype=dtype, device=str(device), max_seq_len=max_seq, drafter={"kind": "none"})
    summary["deployment1"] = {"target": target_section if args.mode == "real" or cuda else "tiny qwen3 (smoke)"}

    t0 = clock.elapsed()
    stock = targets.get(ar_spec)
    sync(device)
    log(f"deployment 1: target built in {clock.elapsed() - t0:.1f} s ({target_section.get('shape', target_section['kind'])})")
    del stock
    memory1 = fresh_memory(out / "deployment1" / "memory.sqlite")
    share = 0.45 if args.mode == "sim" else 0.75
    result1, gate1, refs1 = deployment(
        "deployment 1",
        ar_spec,
        dev,
        sealed,
        sizes,
        drafters=drafters,
        directions=directions,
        memory=memory1,
        rounds=sizes.rounds,
        directions_per_round=sizes.directions_per_round,
        deadline=share * budget,
        clock=clock,
        log=log,
        targets=targets,
        oracle=args.mode == "sim",
        cheat=True,
        timer=timer,
    )
    write_deployment(
        out / "deployment1", result1, memory1, header("1", args.mode, sizes, result1, clock.elapsed(), str(target_section))
    )
    summary["deployment1"].update(
        final_spec_diff=result1.final.diff(ar_spec), rounds=round_rows(result1), gate=gate_facts(result1), **reached(result1)
    )
    save()
    cmp_deadline = (0.6 if args.mode == "sim" else 0.95) * budget
    summary["deployment1"]["comparison"] = compare_with_hand(
        "deployment 1", result1, gate1, targets, ar_spec, refs1, sizes, args.mode, clock, cmp_deadline, log
    )
    save()

    if args.mode == "sim":
        del gate1
        free(targets, device)
        carry_section = {"kind": "random", "shape": args.carry_target if cuda else TINY_DENSE_DEEPER, "seed": 1}
        ar2 = ar_spec.with_changes(target=carry_section, dtype="bfloat16" if cuda else "float32")
        sizes2 = sizes.for_carry(32, 1) if cuda else sizes
        directions2 = CARRY_GPU_DIRECTIONS if cuda else SIM_DIRECTIONS
        summary["sizes_deployment2"] = sizes2.__dict__
        prompts2 = random_prompts(vocab, sizes2.dev_prompts + sizes2.sealed_prompts, sizes2.prompt_tokens, seed=1)
        dev2, sealed2 = prompts2[: sizes2.dev_prompts], prompts2[sizes2.dev_prompts :]
        carry: dict[str, Any] = {"target": carry_section if cuda else "deeper tiny qwen3 (smoke)"}
        summary["deployment2"] = carry
        runs = (("from_memory", True), ("from_empty_memory", False))
        for i, (label, with_memory) in enumerate(runs):
            if clock.left() < 0.15 * budget:
                log(f"time budget: deployment 2 run {label!r} not started")
                carry[label] = None
                continue
            memory = fresh_memory(out / f"deployment2_{label}" / "memory.sqlite")
            if with_memory:
                for entry in memory1.entries():
                    memory.add(entry)
            # the same share of what is left for each run; the measurement after a run takes a gate call
            deadline = clock.elapsed() + (clock.left() - 0.08 * budget) / (len(runs) - i)
            t0 = clock.elapsed()
            result2, gate2, refs2 = deployment(
                f"deployment 2 ({label})",
                ar2,
                dev2,
                sealed2,
                sizes2,
                drafters=drafters,
                directions=directions2,
                memory=memory,
                rounds=sizes2.carry_rounds,
                directions_per_round=sizes2.carry_directions_per_round,
                deadline=deadline,
                clock=clock,
                log=log,
                targets=targets,
                oracle=True,
                replay_memory=True,
                timer=timer,
            )
            write_deployment(
                out / f"deployment2_{label}",
                result2,
                memory,
                header(f"2 {label}", args.mode, sizes2, result2, clock.elapsed() - t0, str(carry_section)),
            )
            final = measure(gate2, targets, result2.final, ar2, refs2, sizes2.max_new_tokens)
            carry[label] = dict(
                final_spec=result2.final,
                final_spec_diff=result2.final.diff(ar2),
                final=final,
                rounds=round_rows(result2),
                gate=gate_facts(result2),
                wall_s=clock.elapsed() - t0,
                **reached(result2),
            )
            log(
                f"deployment 2 {label}: final {final['speedup_vs_ar']:.2f}x AR after {carry[label]['rounds_to_final']} rounds "
                f"({carry[label]['seconds_to_final']:.1f} s)"
            )
            memory.close()
            save()
        mem, empty = carry.get("from_memory"), carry.get("from_empty_memory")
        if mem and empty:
            # the best spec either run found; each run's rounds and wall time until it was the current system
            best = max((mem, empty), key=lambda run: run["final"]["speedup_vs_ar"])
            carry["best_spec_diff"] = best["final_spec_diff"]
            for run in (mem, empty):
                run.update(to_spec(run, best["final_spec"], ar2))
            carry["memory_final_over_empty_final"] = mem["final"]["speedup_vs_ar"] / empty["final"]["speedup_vs_ar"]
            if mem["rounds_to_best"] is not None:
                carry["memory_reached_best_in_fewer_rounds"] = empty["rounds_to_best"] is None or (
                    mem["rounds_to_best"] < empty["rounds_to_best"]
                )
        for run in (mem, empty):
            if run:
                run["final_spec"] = run["final_spec"].to_dict()
        free(targets, device)
    memory1.close()
    save()

    bad_equal = []
    if dtype == "float32":
        d1 = summary["deployment1"]["comparison"]
        systems = [("pilot", d1["pilot"])] + [(k, v) for k, v in d1["hand"].items() if v is not None]
        for label in ("from_memory", "from_empty_memory"):
            run = summary.get("deployment2", {}).get(label)
            if run and run["final"]["spec"]["dtype"] == "float32":
                systems.append((f"deployment 2 {label}", run["final"]))
        bad_equal = [k for k, v in systems if not v["equal_to_ar"]]
        summary["float32_equal_to_ar"] = not bad_equal
        save()

    print(f"\nwrote {json_path}")
    print(f"\n{'system':40s} {'x AR':>6s} {'95% CI':>16s} forcing equal-AR")
    d1 = summary["deployment1"]["comparison"]
    rows = [("deployment 1: pilot", d1["pilot"])] + [(f"deployment 1: hand {k}", v) for k, v in d1["hand"].items()]
    for label in ("from_memory", "from_empty_memory") if args.mode == "sim" else ():
        run = summary.get("deployment2", {}).get(label)
        rows.append((f"deployment 2: pilot {label}", run["final"] if run else None))
    for label, row in rows:
        if row is None:
            print(f"{label:40s} not measured (time budget)")
            continue
        ci = f"[{row['ci95'][0]:.2f}, {row['ci95'][1]:.2f}]"
        print(
            f"{label:40s} {row['speedup_vs_ar']:6.2f} {ci:>16s} {'PASS' if row['forcing_passed'] else 'FAIL':7s} {row['equal_to_ar']}"
        )
    g = summary["deployment1"]["gate"]
    print(
        f"pilot >= best hand ({d1.get('best_hand')}): {d1.get('goal_pilot_at_least_best_hand')}; "
        f"cheating rejected {g['cheating_rejected']}/{g['cheating_candidates']} (forcing failed {g['cheating_failed_forcing']}); "
        f"integrated all passed forcing: {g['every_integrated_passed_forcing']}"
    )
    for label in ("from_memory", "from_empty_memory"):
        run = summary.get("deployment2", {}).get(label)
        if run:
            best = "-" if run.get("rounds_to_best") is None else f"{run['rounds_to_best']} rounds, {run['seconds_to_best']:.1f} s"
            print(
                f"deployment 2 {label}: own final spec after {run['rounds_to_final']} rounds ({run['seconds_to_final']:.1f} s); "
                f"best spec of both runs after {best}"
            )
    if bad_equal:
        print(f"float32 outputs differ from AR: {bad_equal}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
