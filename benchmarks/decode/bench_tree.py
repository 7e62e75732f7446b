"""Tree verify forward vs the autoregressive step, Qwen3-8B shape, random bf16 weights.

Question: what does one target forward over ``[root] + N`` tree nodes (tree mask, depth positions)
cost relative to the AR step (one row) of the same run? Goal: 64 nodes <= 1.25x the AR step.
Secondary: the price of the tree mask itself, i.e. the tree forward vs a causal (chain) forward of the
same row count; a dedicated tree-attention kernel is only worth writing if that exceeds 10%.

For each committed prefix length ``L`` and node count ``N`` in 16/32/64/128:

* ``ar``: one row, causal (what plain decoding runs per token);
* ``chain``: ``N + 1`` rows, default causal mask and positions;
* ``tree``: ``N + 1`` rows of a best-first tree (``best_first_tree`` on peaked random draft laws,
  depth <= 8), tree mask and ``L + depth`` positions;
* ``verify``: ``TreeVerifier.verify`` end to end (tree build from ``[8, V]`` draft laws, forward,
  greedy walk, KV compaction) -- eager only, host syncs included.

Forwards are timed eagerly and, on CUDA, as CUDA graphs of one eager ``Target.forward`` call (its mask
and slot set-up included; launch overhead removed; this is what a graph-captured decode loop pays).
Median of ``--reps`` CUDA-event timings.

Correctness gate, before any timing: tree-forward logits of a few leaves' paths must match causal
forwards of those paths (within 3.5% of the logit scale in bf16) and the argmax must agree on >= 80%
of the rows; a configuration that fails the gate is not timed.

Random weights are fine here: the measured quantity (time) does not depend on training.

Run on a GPU machine: ``python -m benchmarks.decode.bench_tree`` (writes ``$OUT/bench_tree.json``).
CPU smoke test: ``python -m benchmarks.decode.bench_tree --tiny``.

``--real``: the other half of the question, on the real SmolLM2-135M-Instruct (offline GGUF) with
HumanEval prompts, greedy: tokens per target pass of the tree vs the chain with the same n-gram
drafter (chain: ``NGramDrafter`` + ``ChainVerifier``; tree: the continuations of several earlier
matches merged into a trie + ``TreeVerifier``). Both outputs must equal plain AR decoding token for
token, or nothing is reported. Writes ``$OUT/bench_tree_real.json``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

import torch

from benchmarks.common import TINY_QWEN3, capture_cuda_graph, median_time_ms, provenance, provenance_line, write_json
from specdec.drafters.base import DraftProposal
from specdec.models import QWEN3_8B, DenseTarget
from specdec.models.config import TargetConfig
from specdec.verify.sampling import SamplingConfig
from specdec.verify.tree import Tree, TreeVerifier, best_first_tree, tree_positions

TINY = TargetConfig(**TINY_QWEN3)
DRAFT_DEPTH = 8


def draft_logprobs(vocab: int, gen: torch.Generator, device) -> torch.Tensor:
    """Peaked random per-depth draft laws [DRAFT_DEPTH, V] (a trained drafter's are peaked too)."""
    logits = torch.randn(DRAFT_DEPTH, vocab, generator=gen) * 3.0
    return torch.log_softmax(logits, -1).to(device)


def timer(device):
    """``measure(fn, reps)``: median microseconds of one call (CUDA events on a GPU, wall clock on the CPU)."""
    warmup = 3 if device.type == "cuda" else 1

    def measure(fn, reps: int) -> float:
        return median_time_ms(fn, reps, device=device, warmup=warmup) * 1e3

    return measure


def graphed(target: DenseTarget, tokens: torch.Tensor, tree: Tree | None):
    """Capture one eager forward of ``tokens`` (tree mask and depth positions if ``tree``) in a CUDA graph.

    Returns the replay function, or None when capture fails. The forward writes K/V only at
    uncommitted slots, so replays leave the committed cache alone.
    """
    if tree is None:
        forward = lambda: target(tokens)  # noqa: E731
    else:
        positions = tree_positions(tree, target.length)[None]
        forward = lambda: target(tokens, positions, tree.ancestor_mask)  # noqa: E731
    try:
        return capture_cuda_graph(forward)
    except Exception as exc:  # a runtime change must not cost the eager numbers of the same run
        print(f"note: CUDA graph capture failed ({exc!r}); graph timings skipped", flush=True)
        return None


def check_tree_forward(target: DenseTarget, tree: Tree, root: torch.Tensor) -> dict:
    """Tree-forward logits vs causal forwards of a few leaves' root paths (same committed prefix)."""
    length = target.length
    rows = torch.cat([root, tree.tokens])[None]
    tree_logits = target(rows, tree_positions(tree, length)[None], tree.ancestor_mask).logits[0].float()  # [N + 1, V]
    parents = set(tree.parents.tolist())
    leaves = [i for i in range(tree.num_nodes) if i not in parents]
    leaves = sorted(leaves, key=lambda i: -int(tree.depth[i]))[:4]
    worst, agree, flips, total, scale = 0.0, 0, 0, 0, float(tree_logits.abs().max())
    for leaf in leaves:
        path = tree.path(leaf)
        target.truncate(length)
        path_logits = target(torch.cat([root, tree.tokens[path]])[None]).logits[0].float()  # [1 + depth, V]
        mine = tree_logits[[0] + [i + 1 for i in path]]
        row_diff = (mine - path_logits).abs().amax(-1)  # [1 + depth]
        worst = max(worst, float(row_diff.max()))
        top2 = path_logits.topk(2, dim=-1).values
        # a row whose top-2 margin is within twice its own rounding error may flip its argmax legitimately
        decisive = (top2[:, 0] - top2[:, 1]) > 2 * row_diff
        same = mine.argmax(-1) == path_logits.argmax(-1)
        agree += int(same.sum())
        flips += int((decisive & ~same).sum())
        total += len(path) + 1
    target.truncate(length)
    finite = bool(torch.isfinite(tree_logits).all())
    # Relative to the logit scale. Calibrated on CPU in bf16 with a 36-layer random Qwen3-shaped model:
    # a correct tree gives 0.6-1.2% (rounding of different row counts), flat instead of depth positions
    # 5.8%, a wrong mask more.
    tol = 0.035 * scale if target.dtype != torch.float32 else 1e-4 * max(scale, 1.0)
    # Random weights give near-flat logits, so argmax agreement alone fails on ties; an argmax that differs
    # where the margin exceeds the rounding of that row is a real error.
    ok = finite and worst <= tol and flips == 0
    return {
        "ok": ok,
        "max_abs_diff": worst,
        "tolerance": tol,
        "logit_scale": scale,
        "argmax_agree": agree,
        "decisive_argmax_flips": flips,
        "rows_checked": total,
        "finite": finite,
    }


def run_real(args) -> None:
    import specdec as sd
    from specdec import data
    from specdec.verify.chain import ChainVerifier

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    target = data.smollm2_target(device=device, max_seq_len=2048, progress=False)
    tok = data.smollm2_tokenizer()
    eos = list(target.config.eos_token_ids) or None
    prompts = [data.chat_prompt_ids(tok, p).to(device) for p in data.humaneval_prompts(range(args.num_prompts))]
    rows, totals = [], {}
    systems = {
        "chain": lambda: dict(drafter=sd.NGramDrafter(max_ngram=3), verifier=ChainVerifier(), num_draft_tokens=args.depth),
    }
    for budget in args.real_budgets:
        systems[f"tree-{budget}"] = lambda b=budget: dict(
            drafter=sd.NGramDrafter(max_ngram=3, depth=args.depth, max_paths=args.max_paths),
            verifier=TreeVerifier(budget=b),
            num_draft_tokens=b,
        )
    for i, ids in enumerate(prompts):
        ar = sd.generate(target, ids, args.new_tokens, eos_token_id=eos)
        for name, make in systems.items():
            out = sd.generate(target, ids, args.new_tokens, eos_token_id=eos, **make())
            same = torch.equal(torch.as_tensor(out.tokens[0]), torch.as_tensor(ar.tokens[0]))
            rows.append({"prompt": i, "system": name, "equal_to_ar": same, **out.stats.as_dict()})
            t = totals.setdefault(name, {"new_tokens": 0, "target_passes": 0, "rounds": 0, "all_equal": True, "hist": []})
            t["new_tokens"] += out.stats.new_tokens
            t["target_passes"] += out.stats.target_passes
            t["rounds"] += out.stats.rounds
            t["all_equal"] &= same
            h = out.stats.accepted_histogram
            t["hist"] = [a + b for a, b in itertools.zip_longest(t["hist"], h, fillvalue=0)]
            print(f"prompt {i:3d} {name:9s} equal_to_ar={same} {out.stats.summary()}", flush=True)
    ok = all(t["all_equal"] for t in totals.values())
    prov = provenance(seed=None)
    print(f"\n{provenance_line(prov)}")
    print("| system | tokens / target pass | mean accepted / round | equal to AR |\n|---|---|---|---|")
    for name, t in totals.items():
        mean_acc = sum(n * c for n, c in enumerate(t["hist"])) / max(t["rounds"], 1)
        t["tokens_per_target_pass"] = t["new_tokens"] / max(t["target_passes"], 1)
        t["mean_accepted"] = mean_acc
        shown = f"{t['tokens_per_target_pass']:.3f}" if ok else "not reported (output differs from AR)"
        print(f"| {name} | {shown} | {mean_acc:.3f} | {t['all_equal']} |")
    out_path = os.path.join(os.environ.get("OUT", "."), "bench_tree_real.json")
    env = {
        "device": str(device),
        "model": "SmolLM2-135M-Instruct Q4_1 (dequantised, fp32)",
        "prompts": f"HumanEval[0:{args.num_prompts}]",
        "new_tokens": args.new_tokens,
        "depth": args.depth,
        "max_paths": args.max_paths,
        "all_equal_to_ar": ok,
    }
    write_json(out_path, {"env": env, "totals": totals if ok else None, "rows": rows}, prov, indent=1)
    print(f"wrote {out_path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shape, for a CPU smoke test")
    parser.add_argument("--prefix", type=int, nargs="+", default=None, help="committed prefix lengths")
    parser.add_argument("--nodes", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--no-graph", action="store_true")
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_tree.json"))
    parser.add_argument("--real", action="store_true", help="SmolLM2-135M + HumanEval: tokens per pass, tree vs chain")
    parser.add_argument("--num-prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--depth", type=int, default=8, help="--real: draft depth (chain length, tree depth)")
    parser.add_argument("--max-paths", type=int, default=8, help="--real: continuations merged into the tree")
    parser.add_argument("--real-budgets", type=int, nargs="+", default=[16, 32])
    args = parser.parse_args()
    if args.real:
        run_real(args)
        return

    device = torch.device("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    cfg = TINY if args.tiny else QWEN3_8B
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    prefixes = args.prefix or ([64] if args.tiny else [1024, 4096])
    use_graph = device.type == "cuda" and not args.no_graph
    measure = timer(device)
    seed = 0
    prov = provenance(seed)
    gen = torch.Generator().manual_seed(seed)

    torch.manual_seed(seed)
    t0 = time.perf_counter()
    max_seq_len = max(prefixes) + max(args.nodes) + 8
    with torch.no_grad():
        target = DenseTarget(cfg, max_seq_len=max_seq_len, dtype=dtype, device=device).eval().requires_grad_(False)
    build_s = time.perf_counter() - t0
    env = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(dtype),
        "config": "qwen3-8b" if not args.tiny else "tiny",
        "build_s": build_s,
        "reps": args.reps,
    }
    print(provenance_line(prov), flush=True)
    print(f"# {env}", flush=True)
    results = []
    checks = {}
    with torch.no_grad():
        for length in prefixes:
            target.reset()
            # prefill in chunks so the largest prefix does not need one huge attention matrix
            prompt = torch.randint(0, cfg.vocab_size, (length,), generator=gen).to(device)
            for start in range(0, length, 512):
                chunk = prompt[start : start + 512]
                target(chunk[None])
                target.commit(chunk.numel())
            root = torch.randint(0, cfg.vocab_size, (1,), generator=gen).to(device)

            def timed_graph(tokens, tree):
                replay = graphed(target, tokens, tree) if use_graph else None
                return None if replay is None else measure(replay, args.reps)

            def run_eager(tokens, tree):
                if tree is None:
                    return lambda: target(tokens)
                positions = tree_positions(tree, length)[None]
                return lambda: target(tokens, positions, tree.ancestor_mask)

            ar_tokens = root[None]
            ar_eager = measure(run_eager(ar_tokens, None), args.reps)
            ar_graph = timed_graph(ar_tokens, None)
            row = {"prefix": length, "nodes": 0, "kind": "ar", "eager_us": ar_eager, "graph_us": ar_graph}
            results.append(row)
            print(f"L={length:5d} ar           eager {ar_eager:9.1f} us   graph {ar_graph or float('nan'):9.1f} us", flush=True)
            for n in args.nodes:
                lp = draft_logprobs(cfg.vocab_size, gen, device)
                tree = best_first_tree(lp, n).to(device)
                if tree.num_nodes != n:
                    raise RuntimeError(f"best_first_tree gave {tree.num_nodes} nodes, expected {n}")
                key = f"L{length}-N{n}"
                checks[key] = check_tree_forward(target, tree, root)
                if not checks[key]["ok"]:
                    print(f"CHECK FAILED {key}: {checks[key]}", flush=True)
                    continue
                rows = torch.cat([root, tree.tokens])[None]
                chain_tokens = rows
                tree_eager = measure(run_eager(rows, tree), args.reps)
                chain_eager = measure(run_eager(chain_tokens, None), args.reps)
                tree_graph = chain_graph = None
                tree_graph = timed_graph(rows, tree)
                chain_graph = timed_graph(chain_tokens, None)
                # end to end: draft laws -> tree -> forward -> walk -> compaction, then roll back
                verifier = TreeVerifier(budget=n)
                draft_probs = lp.exp().float()
                proposal = DraftProposal(tokens=draft_probs.argmax(-1), draft_probs=draft_probs)

                def verify_once():
                    target.truncate(length)
                    verifier.verify(target, root, proposal, sampling=SamplingConfig())

                verify_eager = measure(verify_once, max(5, args.reps // 3))
                target.truncate(length)
                t_build = time.perf_counter()
                for _ in range(5):
                    best_first_tree(lp, n)
                build_us = (time.perf_counter() - t_build) / 5 * 1e6
                for kind, eager, graph in (("tree", tree_eager, tree_graph), ("chain", chain_eager, chain_graph)):
                    results.append(
                        {
                            "prefix": length,
                            "nodes": n,
                            "kind": kind,
                            "eager_us": eager,
                            "graph_us": graph,
                            "depth": tree.max_depth,
                        }
                    )
                results.append(
                    {
                        "prefix": length,
                        "nodes": n,
                        "kind": "verify",
                        "eager_us": verify_eager,
                        "graph_us": None,
                        "best_first_tree_us": build_us,
                    }
                )
                print(
                    f"L={length:5d} N={n:3d} tree   eager {tree_eager:9.1f} us   graph {tree_graph or float('nan'):9.1f} us"
                    f"   (chain {chain_eager:9.1f} / {chain_graph or float('nan'):9.1f}; verify e2e {verify_eager:9.1f};"
                    f" best_first_tree {build_us:7.1f} us; depth {tree.max_depth})",
                    flush=True,
                )

    # the table: ratios from one run
    lines = [
        "",
        "| L | N | tree/AR (graph) | tree/AR (eager) | tree/chain (graph) | tree/chain (eager) | verify e2e/AR (eager) | goal N=64 <= 1.25x |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary = []
    for length in prefixes:
        ar = next(r for r in results if r["prefix"] == length and r["kind"] == "ar")
        for n in args.nodes:
            tr = next((r for r in results if r["prefix"] == length and r["nodes"] == n and r["kind"] == "tree"), None)
            if tr is None:
                lines.append(f"| {length} | {n} | check failed | | | | | |")
                continue
            ch = next(r for r in results if r["prefix"] == length and r["nodes"] == n and r["kind"] == "chain")
            ve = next(r for r in results if r["prefix"] == length and r["nodes"] == n and r["kind"] == "verify")

            def ratio(a, b):
                return None if a is None or b is None else a / b

            item = {
                "prefix": length,
                "nodes": n,
                "tree_over_ar_graph": ratio(tr["graph_us"], ar["graph_us"]),
                "tree_over_ar_eager": ratio(tr["eager_us"], ar["eager_us"]),
                "tree_over_chain_graph": ratio(tr["graph_us"], ch["graph_us"]),
                "tree_over_chain_eager": ratio(tr["eager_us"], ch["eager_us"]),
                "verify_over_ar_eager": ratio(ve["eager_us"], ar["eager_us"]),
            }
            summary.append(item)
            goal = ""
            if n == 64:
                best = item["tree_over_ar_graph"] if item["tree_over_ar_graph"] is not None else item["tree_over_ar_eager"]
                goal = "met" if best <= 1.25 else "NOT met"

            def fmt(x):
                return "-" if x is None else f"{x:.2f}x"

            lines.append(
                f"| {length} | {n} | {fmt(item['tree_over_ar_graph'])} | {fmt(item['tree_over_ar_eager'])} | "
                f"{fmt(item['tree_over_chain_graph'])} | {fmt(item['tree_over_chain_eager'])} | "
                f"{fmt(item['verify_over_ar_eager'])} | {goal} |"
            )
    print(f"\n{provenance_line(prov)}")
    print("\n".join(lines))
    write_json(args.out, {"env": env, "checks": checks, "results": results, "summary": summary}, prov, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
