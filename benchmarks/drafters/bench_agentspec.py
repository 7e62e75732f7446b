"""AgentSpec on the CPU or a GPU: tokens per target pass and wall-clock speedup on an agent-like workload.

Workload: :mod:`benchmarks.drafters.agentspec_workload` (multi-turn HumanEval code repair with tool
calls and code blocks, every turn the SmolLM2-135M target's own greedy answer), read from its cached
JSON (built first when missing). Target: SmolLM2-135M-Instruct in fp32 on the CPU, greedy.

Arms, decoded request by request in the workload's order (problem by problem, turn by turn), the
arms interleaved per request so that a change in machine load hits all of them alike:

* ``ar``: plain autoregressive decoding;
* ``ngram``: :class:`specdec.drafters.NGramDrafter` (prompt lookup, ``max_ngram=3``);
* ``agentspec``: :class:`AgentSpecDrafter` with structure isolation (partition by agent, query, block;
  global fallback);
* ``agentspec_no_structure``: the same drafter with ``isolate=False`` (one global index): the
  isolation ablation.

Every speculative output is checked against AR's in the same run (``torch.equal``) and against the
workload's cached answer. The machine is shared: the load average before and after the run is
recorded, and wall-clock numbers move with it (tokens per pass do not). Reported per arm: tokens, target passes, tokens per pass, mean accepted
drafts per round, wall seconds (draft and verify parts) and speedup over AR in wall time. The AgentSpec
drafters keep their history across requests (that is the point); each arm starts from an empty one.

    python -m benchmarks.drafters.bench_agentspec --out benchmarks/results/bench_agentspec_cpu_2026-12-02.json
    python -m benchmarks.drafters.bench_agentspec --device cuda --budget-s 40 --out $OUT/bench_agentspec_h200.json

Batch 1 only: :class:`specdec.Engine` takes one drafter per request (a factory) or one stateless shared
drafter, while AgentSpec shares its history across requests and sizes drafts over the batch, which
the engine does not hand a drafter.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

import specdec as sd
from benchmarks.common import provenance, provenance_line, write_json
from benchmarks.drafters.agentspec_workload import DEFAULT_OUT as WORKLOAD_PATH
from benchmarks.drafters.agentspec_workload import load_or_build
from specdec.data import smollm2_target, smollm2_tokenizer
from specdec.drafters import AgentSpecDrafter, NGramDrafter
from specdec.drafters.agentspec import TokenPieces

AGENT = "coder"


def sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def make_arms(pieces: TokenPieces) -> dict:
    return {
        "ar": None,
        "ngram": NGramDrafter(max_ngram=3),
        "agentspec": AgentSpecDrafter(pieces, isolate=True),
        "agentspec_no_structure": AgentSpecDrafter(pieces, isolate=False),
    }


def run(
    workload: dict, num_draft_tokens: int, *, progress: bool = True, device: str = "cpu", budget_s: float = float("inf")
) -> dict:
    """Decode the workload's requests with every arm; past ``budget_s`` seconds no new request starts (one always runs)."""
    started = time.perf_counter()
    tokenizer = smollm2_tokenizer()
    target = smollm2_target(progress=False, max_seq_len=4096, device=device)
    pieces = TokenPieces.from_tokenizer(tokenizer)
    arms = make_arms(pieces)
    totals = {
        name: {"new_tokens": 0, "target_passes": 0, "rounds": 0, "accepted": 0, "wall_s": 0.0, "draft_s": 0.0, "verify_s": 0.0}
        for name in arms
    }
    equal_to_ar = {name: True for name in arms}
    equal_to_cached = {name: True for name in arms}
    rows = []
    warm = torch.tensor([workload["requests"][0]["prompt_ids"][:32]], device=device)
    sd.generate(target, warm, 4)
    for request in workload["requests"]:
        if rows and time.perf_counter() - started > budget_s:
            break
        prompt = torch.tensor([request["prompt_ids"]], device=device)
        cached = torch.tensor(request["output_ids"])
        max_new = len(request["output_ids"])
        row = {"query": request["query"], "turn": request["turn"], "prompt_tokens": prompt.shape[1]}
        ar_tokens = None
        for name, drafter in arms.items():
            if isinstance(drafter, AgentSpecDrafter):
                drafter.begin_request(agent=AGENT, query=request["query"])
            sync(device)
            start = time.perf_counter()
            out = sd.generate(target, prompt, max_new, drafter=drafter, num_draft_tokens=num_draft_tokens)
            sync(device)
            wall = time.perf_counter() - start
            tokens = out.tokens[0]
            if isinstance(drafter, AgentSpecDrafter):
                # the last round's emitted tokens reach the history too
                drafter.observe(torch.cat([prompt[0], tokens]))
            if name == "ar":
                ar_tokens = tokens
            equal_to_ar[name] &= torch.equal(tokens, ar_tokens)
            equal_to_cached[name] &= torch.equal(tokens.cpu(), cached)
            stats = out.stats
            t = totals[name]
            t["new_tokens"] += stats.new_tokens
            t["target_passes"] += stats.target_passes
            t["rounds"] += stats.rounds
            t["accepted"] += sum(n * c for n, c in enumerate(stats.accepted_histogram))
            t["wall_s"] += wall
            t["draft_s"] += stats.draft_s
            t["verify_s"] += stats.verify_s
            row[name] = {
                "target_passes": stats.target_passes,
                "tokens_per_pass": round(stats.tokens_per_target_pass, 3),
                "wall_s": round(wall, 3),
            }
        rows.append(row)
        if progress:
            summary = "  ".join(f"{n}: {row[n]['tokens_per_pass']:.2f} tok/pass {row[n]['wall_s']:.1f}s" for n in arms)
            print(f"query {row['query']} turn {row['turn']} ({row['prompt_tokens']} prompt tokens)  {summary}", flush=True)
    ar_wall = totals["ar"]["wall_s"]
    results = {}
    for name, t in totals.items():
        results[name] = {
            **{k: round(v, 3) if isinstance(v, float) else v for k, v in t.items()},
            "tokens_per_pass": round(t["new_tokens"] / t["target_passes"], 3),
            "mean_accepted_per_round": round(t["accepted"] / t["rounds"], 3) if t["rounds"] else None,
            "speedup_vs_ar_wall": round(ar_wall / t["wall_s"], 3),
            "equal_to_ar": equal_to_ar[name],
            "equal_to_cached_workload": equal_to_cached[name],
        }
        drafter = arms[name]
        if isinstance(drafter, AgentSpecDrafter):
            results[name]["fallback_rounds"] = drafter.fallback_rounds
            results[name]["drafter_rounds"] = drafter.rounds
    return {
        "arms": results,
        "requests": rows,
        "requests_run": len(rows),
        "requests_in_workload": len(workload["requests"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, default=Path(WORKLOAD_PATH))
    parser.add_argument("--problems", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--num-draft-tokens", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=float("inf"), help="start no new request past this wall time")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the workload must be cached: building it runs on the CPU)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    prov = provenance(seed=None)
    print(provenance_line(prov))
    workload = load_or_build(args.workload, args.problems, args.turns, args.max_new_tokens)
    load_before = os.getloadavg()
    result = run(workload, args.num_draft_tokens, device=args.device, budget_s=args.budget_s)
    result = {
        "load_average_1_5_15_before": [round(x, 2) for x in load_before],
        "load_average_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "workload_file": str(args.workload.name),
        "workload_provenance": workload["provenance"],
        "threads": args.threads,
        "num_draft_tokens": args.num_draft_tokens,
        "target": f"SmolLM2-135M-Instruct fp32, {args.device}, greedy",
        "device": args.device,
        **result,
    }
    print(f"{result['requests_run']} of {result['requests_in_workload']} requests ({args.device})")
    for name, r in result["arms"].items():
        print(
            f"{name:24s} tokens/pass {r['tokens_per_pass']:.3f}  wall {r['wall_s']:.1f}s  speedup vs AR {r['speedup_vs_ar_wall']:.3f}  "
            f"equal to AR {r['equal_to_ar']}"
        )
    if args.out is not None:
        print(write_json(args.out, result, prov))


if __name__ == "__main__":
    main()
