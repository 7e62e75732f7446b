"""``python -m specdec pilot``: run pilot rounds on one deployment and write the spec, memory and report.

Example (seconds, the tiny random target)::

    python -m specdec pilot --target tiny --drafter ngram --prompts humaneval --rounds 2 --budget-minutes 1 --out /tmp/pilot
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from specdec.data import HUMANEVAL_PROBLEMS
from specdec.options import device_option

_TIMERS = ("wall", "passes")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specdec pilot",
        description="Profile a decode system, explore the directions that close its largest gaps, keep what passes "
        "the gate (token forcing on sealed prompts + a speedup interval above 1), and write the result.",
    )
    parser.add_argument(
        "--target",
        default="tiny",
        help="'tiny' (random test model), 'smollm2' (the real 135M model) or a checkpoint folder / .gguf",
    )
    parser.add_argument(
        "--drafter",
        default="ngram",
        help="'ngram', 'smollm2' (the shipped DFlash drafter), 'dflash:FOLDER', 'dflash2:FOLDER', 'dspark:FOLDER' or 'none'",
    )
    parser.add_argument("--prompts", default="humaneval", choices=["humaneval"], help="prompt source (default humaneval)")
    parser.add_argument("--dev-prompts", type=int, default=2, help="prompts the explorers and the profiler see (default 2)")
    parser.add_argument("--sealed-prompts", type=int, default=2, help="prompts only the gate sees (default 2)")
    parser.add_argument("--prompt-tokens", type=int, default=64, help="keep the last this many prompt tokens (default 64)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens generated per prompt (default 32)")
    parser.add_argument("--num-draft-tokens", type=int, default=4, help="starting proposal length (default 4)")
    parser.add_argument("--rounds", type=int, default=2, help="pilot rounds (default 2)")
    parser.add_argument("--budget-minutes", type=float, default=5.0, help="no new round starts after this (default 5)")
    parser.add_argument("--evaluations", type=int, default=6, help="speedup evaluations per exploration (default 6)")
    parser.add_argument("--directions-per-round", type=int, default=2, help="directions explored per round (default 2)")
    parser.add_argument("--directions", default=None, help="comma-separated direction names to allow (default: all that apply)")
    parser.add_argument(
        "--timer", default="wall", choices=_TIMERS, help="'wall' seconds, or 'passes' (target forwards: deterministic)"
    )
    parser.add_argument(
        "--executor", default="serial", choices=["serial", "process", "ray"], help="how explorations run (default serial)"
    )
    parser.add_argument("--memory", default=None, help="SQLite memory file to read and extend (default OUT/memory.sqlite)")
    parser.add_argument("--device", default="cpu", help="device (default cpu)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="dtype (default float32)")
    parser.add_argument("--out", required=True, help="output folder")
    return parser


def _drafter_section(value: str) -> dict:
    if value == "ngram":
        return {"kind": "ngram"}
    if value == "none":
        return {"kind": "none"}
    if value == "smollm2":
        return {"kind": "dflash", "path": "smollm2"}
    kind, sep, path = value.partition(":")
    if sep and kind in ("dflash", "dflash2", "dspark") and path:
        if not (Path(path) / "config.json").is_file():
            raise SystemExit(f"--drafter: expected {kind}:FOLDER with a config.json in FOLDER, got {value!r}")
        return {"kind": kind, "path": path}
    raise SystemExit(f"--drafter: expected ngram, none, smollm2, dflash:FOLDER, dflash2:FOLDER or dspark:FOLDER, got {value!r}")


def _target_section(value: str) -> dict:
    if value in ("tiny", "smollm2"):
        return {"kind": value} | ({"seed": 0} if value == "tiny" else {})
    if not Path(value).exists():
        raise SystemExit(f"--target: expected 'tiny', 'smollm2' or an existing checkpoint path, got {value!r}")
    return {"kind": "path", "path": str(Path(value).resolve())}


def _prompts(args, count: int) -> list[torch.Tensor]:
    from specdec import data

    texts = data.humaneval_prompts(range(count))
    if args.target == "tiny":
        from specdec.testing import tiny_tokenizer

        tok = tiny_tokenizer()
        ids = [torch.tensor(tok(t.lower())["input_ids"], dtype=torch.long) for t in texts]
    else:
        tok = data.smollm2_tokenizer()
        ids = [data.chat_prompt_ids(tok, t)[0] for t in texts]
    return [x[-args.prompt_tokens :] for x in ids]


def _setup(args):
    """The pilot of ``args`` and what ``main`` reports with it: ``(pilot, memory, bar, dev, sealed, out)``."""
    from tqdm import tqdm

    from specdec.pilot.agents import Budget, DevEvaluator, SearchAgent
    from specdec.pilot.gate import Gate, target_pass_timer, wall_time
    from specdec.pilot.loop import Pilot
    from specdec.pilot.memory import Memory
    from specdec.pilot.spec import SystemSpec, build

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts = _prompts(args, args.sealed_prompts + args.dev_prompts)
    sealed, dev = prompts[: args.sealed_prompts], prompts[args.sealed_prompts :]
    longest = max(p.numel() for p in prompts)
    spec = SystemSpec(
        target=_target_section(args.target),
        dtype=args.dtype,
        device=args.device,
        # room for the longest prompt, its new tokens and a round's drafts (the gate's condition; 32 at least)
        max_seq_len=longest + args.max_new_tokens + max(32, args.num_draft_tokens + 2),
        drafter=_drafter_section(args.drafter),
        num_draft_tokens=args.num_draft_tokens,
    )
    stock_spec = spec.autoregressive()
    stock = build(stock_spec).target
    try:  # the starting system: a drafter that does not fit the target fails here, not rounds later
        build(spec, target=stock)
    except ValueError as err:
        raise ValueError(f"--drafter {args.drafter!r} on --target {args.target!r}: {err}") from err
    timer = target_pass_timer if args.timer == "passes" else wall_time
    gate = Gate(stock, [p.to(stock.device) for p in sealed], args.max_new_tokens, timer=timer)
    memory = Memory(args.memory or out / "memory.sqlite")
    evaluator = DevEvaluator(dev, args.max_new_tokens, timer=timer)
    bar = tqdm(total=args.rounds, desc="pilot rounds", unit="round")
    pilot = Pilot(
        spec,
        dev,
        gate,
        args.max_new_tokens,
        memory=memory,
        agent_for=lambda direction: SearchAgent(evaluator),
        budget=Budget(args.evaluations),
        directions_per_round=args.directions_per_round,
        directions=direction_names(args.directions),
        executor=args.executor,
        stock_spec=stock_spec,
        log=bar.write,
    )
    return pilot, memory, bar, dev, sealed, out


def direction_names(text: str | None) -> list[str] | None:
    """``--directions``: comma-separated names, or ``None`` (every direction that applies).

    Example:
        >>> direction_names("draft_length, tree_budget"), direction_names(None)
        (['draft_length', 'tree_budget'], None)
        >>> direction_names("draft_length,")
        Traceback (most recent call last):
        ...
        ValueError: --directions: expected comma-separated direction names, got an empty name in 'draft_length,'
    """
    if text is None:
        return None
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise ValueError(f"--directions: expected comma-separated direction names, got an empty name in {text!r}")
    return names


def final_spec_line(change: dict) -> str:
    """The line the pilot prints last: the final spec's changes to the initial one, or ``unchanged``.

    Example:
        >>> final_spec_line({}), final_spec_line({"num_draft_tokens": 8})
        ('final spec: unchanged', 'final spec: {"num_draft_tokens": 8}')
    """
    return f"final spec: {json.dumps(change, sort_keys=True) if change else 'unchanged'}"


def main(argv: list[str] | None = None) -> int:
    """Run the pilot; returns 0 when it finished its rounds (whether or not anything was accepted)."""
    args = _parser().parse_args(argv)
    for name in (
        "dev_prompts",
        "sealed_prompts",
        "prompt_tokens",
        "max_new_tokens",
        "rounds",
        "evaluations",
        "directions_per_round",
    ):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')}: expected >= 1, got {getattr(args, name)}")
    if args.num_draft_tokens < 1:
        raise SystemExit(f"--num-draft-tokens: expected >= 1, got {args.num_draft_tokens}")
    if not args.budget_minutes > 0:
        raise SystemExit(f"--budget-minutes: expected > 0, got {args.budget_minutes}")
    if args.sealed_prompts + args.dev_prompts > HUMANEVAL_PROBLEMS:
        raise SystemExit(
            f"--dev-prompts, --sealed-prompts: expected at most {HUMANEVAL_PROBLEMS} together (HumanEval's problems), "
            f"got {args.dev_prompts} + {args.sealed_prompts}"
        )
    device_option(args.device)
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit(f"--threads: expected >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    from specdec.pilot.report import write_outputs

    started = time.perf_counter()
    try:
        pilot, memory, bar, dev, sealed, out = _setup(args)
    except (ValueError, FileNotFoundError) as err:  # a bad option met while building: a message, not a traceback
        raise SystemExit(f"python -m specdec pilot: {err}") from err
    result = pilot.run(args.rounds, budget_seconds=args.budget_minutes * 60, on_round=lambda record: bar.update(1))
    bar.close()
    header = {
        "target": args.target,
        "drafter": args.drafter,
        "prompts": f"{args.prompts}: {len(dev)} development, {len(sealed)} sealed, last {args.prompt_tokens} tokens each",
        "max new tokens": args.max_new_tokens,
        "timer": args.timer,
        "rounds run": f"{len(result.rounds)} of {args.rounds}",
        "wall time": f"{time.perf_counter() - started:.1f} s",
    }
    paths = write_outputs(result, memory, out, header=header)
    print(final_spec_line(result.final.diff(result.initial)))
    print("written: " + ", ".join(str(p) for p in paths.values()))
    memory.close()
    return 0
