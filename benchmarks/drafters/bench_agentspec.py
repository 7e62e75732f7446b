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

With ``--concurrency N`` (``N >= 2``) every selected request runs through :class:`specdec.Engine` with
``max_batch=N`` instead, arm after arm, requests added in the workload's order: a later turn of a
problem joins only once the earlier turn of that problem has finished (its prompt contains that turn's
answer), so at most one turn per problem runs at a time and up to ``N`` problems run together. Arms:
``ar`` (the engine with no drafts: ``num_draft_tokens=0``), ``ngram`` (a :class:`~specdec.engine.drafting.LoopDrafter`
over the n-gram drafter), ``agentspec`` and ``agentspec_no_structure`` (the batched form of the drafter,
:class:`~specdec.drafters.agentspec.AgentSpecBatchDrafter`: one history for all requests, structure per
request through ``add_request(..., drafter_request=...)``, draft lengths sized over the batch). Per arm:
tokens/s, target passes (ragged forwards over the whole batch), tokens per pass, tokens per request round
(comparable with batch 1), speed-up over the engine's AR, and whether every output equals the cached answer
and the engine AR's. ``--layout per_request`` (default) keeps every output equal to batch-1 decoding;
``packed`` (one GEMM per layer over the batch: what makes batching pay) agrees to float32 rounding, so a
near-tie can flip a token (recorded, not an error).

    python -m benchmarks.drafters.bench_agentspec --out benchmarks/results/bench_agentspec_cpu_2026-12-02.json
    python -m benchmarks.drafters.bench_agentspec --device cuda --budget-s 40 --out $OUT/bench_agentspec_h200.json
    python -m benchmarks.drafters.bench_agentspec --concurrency 16 --workload W.json --problems 0 1 ... 15 --turns 3 \
        --max-new-tokens 32 --layout packed --out /tmp/bench_agentspec_c16.json
    python -m benchmarks.drafters.bench_agentspec --smoke --concurrency 3          # tiny target on the CPU, same code path
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import deque
from pathlib import Path

import torch

import specdec as sd
from benchmarks.common import provenance, provenance_line, write_json
from benchmarks.drafters.agentspec_workload import DEFAULT_OUT as WORKLOAD_PATH
from benchmarks.drafters.agentspec_workload import load_or_build
from specdec.drafters import AgentSpecDrafter, NGramDrafter
from specdec.drafters.agentspec import TokenPieces
from specdec.engine import Engine
from specdec.engine.drafting import LoopDrafter

AGENT = "coder"
ENGINE_ARMS = ("ar", "ngram", "agentspec", "agentspec_no_structure")


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


def select(workload: dict, problems: list[int], turns: int) -> dict:
    """The workload restricted to ``problems`` and turns ``< turns``, in its order; ``ValueError`` if one is missing.

    Example:
        >>> w = {"requests": [{"query": q, "turn": t} for q in (0, 1) for t in (0, 1)]}
        >>> [(r["query"], r["turn"]) for r in select(w, [1], 1)["requests"]]
        [(1, 0)]
    """
    chosen = [r for r in workload["requests"] if r["query"] in problems and r["turn"] < turns]
    have = {(r["query"], r["turn"]) for r in chosen}
    missing = [(q, t) for q in problems for t in range(turns) if (q, t) not in have]
    if missing:
        raise ValueError(f"problems/turns: the workload has no request for (problem, turn) {missing[0]}")
    return {**workload, "requests": chosen}


def load_workload(path: Path, problems: list[int], turns: int, max_new_tokens: int) -> dict:
    """The cached workload at ``path`` cut to ``problems`` x ``turns`` when it covers them, else :func:`load_or_build`'s."""
    if path.exists():
        cached = json.loads(path.read_text())
        covers = set(problems) <= set(cached["problem_ids"]) and turns <= cached["turns"]
        if covers and cached["max_new_tokens"] == max_new_tokens:
            return select(cached, problems, turns)
    return load_or_build(path, problems, turns, max_new_tokens)


def tiny_workload(target, problems: int, turns: int, max_new_tokens: int) -> dict:
    """A workload shaped like the real one for ``--smoke``: per problem, turns whose prompt holds the earlier answers.

    Each turn's answer is the tiny target's greedy output; the next prompt is the previous one, the answer
    and a fixed "tool" tail.
    """
    gen = torch.Generator().manual_seed(0)
    requests = []
    for q in range(problems):
        prompt = torch.randint(1, 97, (6,), generator=gen).repeat(2)
        for turn in range(turns):
            answer = sd.generate(target, prompt[None], max_new_tokens).tokens[0]
            requests.append({"query": q, "turn": turn, "prompt_ids": prompt.tolist(), "output_ids": answer.tolist()})
            prompt = torch.cat([prompt, answer, torch.tensor([5, 6, 7, 8])])
    return {
        "workload": "tiny smoke workload",
        "problem_ids": list(range(problems)),
        "turns": turns,
        "max_new_tokens": max_new_tokens,
        "requests": requests,
        "provenance": None,
    }


def run(
    workload: dict,
    num_draft_tokens: int,
    target,
    pieces: TokenPieces,
    *,
    progress: bool = True,
    device: str = "cpu",
    budget_s: float = float("inf"),
) -> dict:
    """Decode the workload's requests one at a time with every arm; past ``budget_s`` seconds no new request starts (one always runs)."""
    started = time.perf_counter()
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


def make_engine(name: str, target, pieces: TokenPieces, *, concurrency: int, num_draft_tokens: int, layout: str):
    """The engine of one arm (fresh KV slots; an AgentSpec arm starts from an empty history) and its batch drafter."""
    common = dict(max_batch=concurrency, layout=layout)
    if name == "ar":
        return Engine(target, NGramDrafter(), num_draft_tokens=0, **common), None
    if name == "ngram":
        drafter = LoopDrafter(NGramDrafter(max_ngram=3), slots=concurrency)
    elif name in ("agentspec", "agentspec_no_structure"):
        drafter = AgentSpecDrafter(pieces, isolate=name == "agentspec").batched(slots=concurrency)
    else:
        raise ValueError(f"name: expected one of {ENGINE_ARMS}, got {name!r}")
    return Engine(target, drafter, num_draft_tokens=num_draft_tokens, batched_drafting=True, **common), drafter


def schedule(
    engine: Engine, requests: list[dict], device: str, *, agentspec: bool
) -> tuple[list[torch.Tensor], list[tuple], list, int]:
    """Run ``requests`` through ``engine`` in order, a problem's next turn joining once its previous turn finished.

    Returns every request's output and ``(verify rounds, accepted drafts)`` (in ``requests`` order), the
    event log ``[(step, "add" | "finish", query, turn)]`` and the most requests that ran in one step.
    """
    per_query: dict[object, deque] = {}
    for i, request in enumerate(requests):
        per_query.setdefault(request["query"], deque()).append(i)
    busy: dict[object, object] = {}  # query -> request id of its running turn
    outputs: list[torch.Tensor | None] = [None] * len(requests)
    counts: list[tuple[int, int] | None] = [None] * len(requests)
    events: list[tuple] = []
    steps = peak = 0
    while any(per_query.values()) or busy:
        for i in sorted(per_query[q][0] for q in per_query if per_query[q] and q not in busy):
            request = requests[i]
            per_query[request["query"]].popleft()
            extra = {"drafter_request": {"agent": AGENT, "query": request["query"]}} if agentspec else {}
            busy[request["query"]] = engine.add_request(
                torch.tensor(request["prompt_ids"], device=device),
                max_new_tokens=len(request["output_ids"]),
                request_id=i,
                **extra,
            )
            events.append((steps, "add", request["query"], request["turn"]))
        # every running request emits at least one token per step
        peak = max(peak, len(engine.step()))
        steps += 1
        for query, rid in list(busy.items()):
            status = engine.status(rid)
            if status == "finished":
                state = engine.request(rid)
                counts[rid] = (state.rounds, state.accepted)
                outputs[rid] = engine.pop(rid)
                del busy[query]
                events.append((steps, "finish", query, requests[rid]["turn"]))
            elif status != "running" and status != "waiting":
                raise RuntimeError(f"request {rid} (query {query}, turn {requests[rid]['turn']}) ended {status}")
    return outputs, events, counts, peak


def run_engine(
    workload: dict,
    num_draft_tokens: int,
    target,
    pieces: TokenPieces,
    *,
    concurrency: int,
    layout: str = "per_request",
    progress: bool = True,
    device: str = "cpu",
    budget_s: float = float("inf"),
) -> dict:
    """Every arm through :class:`Engine` with ``max_batch=concurrency``; past ``budget_s`` seconds no new arm starts (AR always runs)."""
    started = time.perf_counter()
    requests = workload["requests"]
    warm, _ = make_engine("agentspec", target, pieces, concurrency=concurrency, num_draft_tokens=num_draft_tokens, layout=layout)
    schedule(warm, [{**requests[0], "output_ids": requests[0]["output_ids"][:4]}], device, agentspec=True)
    results: dict[str, dict] = {}
    ar_outputs = None
    for name in ENGINE_ARMS:
        if results and time.perf_counter() - started > budget_s:
            results[name] = {"skipped": "wall-time budget"}
            if progress:
                print(f"{name}: skipped (budget)", flush=True)
            continue
        engine, drafter = make_engine(
            name, target, pieces, concurrency=concurrency, num_draft_tokens=num_draft_tokens, layout=layout
        )
        sync(device)
        start = time.perf_counter()
        outputs, events, counts, peak = schedule(engine, requests, device, agentspec=name.startswith("agentspec"))
        sync(device)
        wall = time.perf_counter() - start
        if name == "ar":
            ar_outputs = outputs
        new_tokens = sum(o.numel() for o in outputs)
        rounds = sum(r for r, _ in counts)
        # each request's own passes: its prefill, then one per verify round (what batch 1 counts as target passes)
        request_passes = len(requests) + rounds
        result = {
            "new_tokens": new_tokens,
            "target_passes": engine.target_passes,
            "engine_steps": events[-1][0] if events else 0,
            "wall_s": round(wall, 3),
            "tokens_per_s": round(new_tokens / wall, 2),
            "tokens_per_pass": round(new_tokens / engine.target_passes, 3),
            "request_passes": request_passes,
            "tokens_per_request_pass": round(new_tokens / request_passes, 3),
            "mean_accepted_per_round": round(sum(a for _, a in counts) / rounds, 3) if rounds else None,
            "equal_to_cached_workload": all(
                torch.equal(o.cpu(), torch.tensor(r["output_ids"])) for o, r in zip(outputs, requests)
            ),
            "equal_to_ar": all(torch.equal(o, a) for o, a in zip(outputs, ar_outputs)),
            "max_running": peak,
        }
        if name.startswith("agentspec"):
            result["drafter_rounds"] = drafter.rounds
            result["fallback_rounds"] = drafter.fallback_rounds
        results[name] = result
        if progress:
            print(
                f"{name:24s} {wall:7.2f}s  {result['tokens_per_s']:8.1f} tok/s  passes {engine.target_passes}  "
                f"tok/pass {result['tokens_per_pass']:.2f}  tok/request pass {result['tokens_per_request_pass']:.2f}  equal to cached {result['equal_to_cached_workload']}",
                flush=True,
            )
    ar_wall = results["ar"]["wall_s"]
    ngram_wall = results["ngram"].get("wall_s")
    for result in results.values():
        if "wall_s" in result:
            result["speedup_vs_ar_wall"] = round(ar_wall / result["wall_s"], 3)
            result["speedup_vs_ngram_wall"] = round(ngram_wall / result["wall_s"], 3) if ngram_wall else None
    return {
        "concurrency": concurrency,
        "layout": layout,
        "arms": results,
        "requests_run": len(requests),
        "requests_in_workload": len(requests),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", type=Path, default=Path(WORKLOAD_PATH))
    parser.add_argument("--problems", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--num-draft-tokens", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--budget-s", type=float, default=float("inf"), help="start no new request (batch 1) or arm (engine) past this wall time"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the workload must be cached: building it runs on the CPU)")
    parser.add_argument(
        "--concurrency", type=int, default=1, help="1: one request at a time (sd.generate); N >= 2: sd.Engine, max_batch N"
    )
    parser.add_argument("--layout", default="per_request", choices=("per_request", "packed"), help="the engine's ragged layout")
    parser.add_argument("--smoke", action="store_true", help="the tiny target and a tiny workload on the CPU (same code path)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.concurrency < 1:
        raise ValueError(f"--concurrency: expected an int >= 1, got {args.concurrency}")
    torch.set_num_threads(args.threads)
    prov = provenance(seed=None)
    print(provenance_line(prov))
    if args.smoke:
        from specdec.testing import tiny_target
        from specdec.testing.tokenizers import tiny_tokenizer

        args.device = "cpu"
        target = tiny_target(seed=0, max_seq_len=256)
        pieces = TokenPieces.from_tokenizer(tiny_tokenizer())
        workload = tiny_workload(target, problems=4, turns=3, max_new_tokens=12)
        model = "tiny llama (smoke), fp32, cpu, greedy"
    else:
        from specdec.data import smollm2_target, smollm2_tokenizer

        workload = load_workload(args.workload, args.problems, args.turns, args.max_new_tokens)
        longest = max(len(r["prompt_ids"]) + len(r["output_ids"]) for r in workload["requests"])
        # a slot holds the prompt, the answer and one round's drafts past it
        max_seq_len = 4096 if args.concurrency == 1 else -(-(longest + args.num_draft_tokens + 2) // 64) * 64
        target = smollm2_target(progress=False, max_seq_len=max_seq_len, device=args.device)
        pieces = TokenPieces.from_tokenizer(smollm2_tokenizer())
        model = f"SmolLM2-135M-Instruct fp32, {args.device}, greedy"
    load_before = os.getloadavg()
    if args.concurrency == 1:
        result = run(workload, args.num_draft_tokens, target, pieces, device=args.device, budget_s=args.budget_s)
    else:
        result = run_engine(
            workload,
            args.num_draft_tokens,
            target,
            pieces,
            concurrency=args.concurrency,
            layout=args.layout,
            device=args.device,
            budget_s=args.budget_s,
        )
    result = {
        "load_average_1_5_15_before": [round(x, 2) for x in load_before],
        "load_average_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        "workload_file": None if args.smoke else str(args.workload.name),
        "workload_provenance": workload["provenance"],
        "problems": sorted({r["query"] for r in workload["requests"]}),
        "turns": max(r["turn"] for r in workload["requests"]) + 1,
        "threads": args.threads,
        "num_draft_tokens": args.num_draft_tokens,
        "target": model,
        "device": args.device,
        **result,
    }
    if args.out is not None:
        print(write_json(args.out, result, prov))
    print(
        f"{result['requests_run']} of {result['requests_in_workload']} requests ({args.device}, concurrency {args.concurrency})"
    )
    for name, r in result["arms"].items():
        if "skipped" in r:
            print(f"{name:24s} skipped ({r['skipped']})")
            continue
        per_request = f"tok/request pass {r['tokens_per_request_pass']:.3f}  " if "tokens_per_request_pass" in r else ""
        print(
            f"{name:24s} tokens/pass {r['tokens_per_pass']:.3f}  {per_request}wall {r['wall_s']:.1f}s  "
            f"speedup vs AR {r['speedup_vs_ar_wall']:.3f}  equal to AR {r['equal_to_ar']}  equal to cached {r['equal_to_cached_workload']}"
        )
    return result


if __name__ == "__main__":
    main()
