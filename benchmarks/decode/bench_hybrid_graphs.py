"""CUDA graphs of a Qwen3.5-4B-shaped hybrid target: graphed == eager, then AR step and tree-64 verify timings.

Random bf16 weights at the Qwen3.5-4B shape (``QWEN3_5_4B`` of ``bench_hybrid``; labelled ``random``
in the JSON). First the checks (exit 1 before timing if the graphed path differs from the static path
it captures): decode (1 row), tree-64 verify and their commits, each run by three targets with the
same weights: eager, static path (the graph's body run eagerly) and graphed. The cache is filled to
``max_seq_len`` by each checked step, so all three attend over the same slots; ``graphed == eager``
is reported beside ``graphed == static`` (the latter is the gate).

Then timings (CUDA events, median): the AR step (forward of 1 row + commit) eager and graphed beside
its weight-read floor (weight bytes / measured copy bandwidth), and the tree-64 verify step (forward
of 64 rows + commit of a 5-token path) graphed, as a ratio to the graphed AR step.

    python3 -m benchmarks.decode.bench_hybrid_graphs --out $OUT/bench_hybrid_graphs.json
    python3 -m benchmarks.decode.bench_hybrid_graphs --smoke    # tiny model, CPU, static path only
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks.common import copy_bandwidth, median_time_ms, provenance, provenance_line, write_json
from benchmarks.decode.bench_hybrid import QWEN3_5_4B, SMOKE, random_tree
from specdec.contracts import Tree, VerifyPlan
from specdec.models.hybrid import random_hybrid_target

TREE_ROWS = 64
BUCKETS = (1, TREE_ROWS)
MAX_SEQ_LEN = 256


def build_targets(cfg, *, device, dtype, seed: int) -> dict:
    """Eager, static-path and (on CUDA) graphed targets with the same random weights."""
    kinds = ("eager", "static", "graphed") if device.type == "cuda" else ("eager", "static")
    targets = {}
    for kind in kinds:
        t = random_hybrid_target(cfg, dtype=dtype, device=device, max_seq_len=MAX_SEQ_LEN, seed=seed, state_slots=2)
        if kind == "static":
            t.enable_static_path(BUCKETS)
        elif kind == "graphed":
            t.enable_cuda_graphs(BUCKETS)
        targets[kind] = t
    return targets


def tree_plan(prefix_len: int, vocab: int, device, seed: int) -> tuple[VerifyPlan, torch.Tensor]:
    """A bushy 64-row verify plan and the rows of one of its deepest paths (what a commit keeps)."""
    rows = random_tree(TREE_ROWS - 1, seed)  # parents of [root, node_0..node_62]
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (TREE_ROWS,), generator=gen)
    tree = Tree(tokens=tokens[1:].to(device), parents=torch.tensor([p - 1 for p in rows[1:]], device=device))
    plan = VerifyPlan.for_tree(tokens[:1].to(device), tree, prefix_len=prefix_len)
    depth = [0] * TREE_ROWS
    for i in range(1, TREE_ROWS):
        depth[i] = depth[rows[i]] + 1
    node = max(range(TREE_ROWS), key=lambda i: depth[i])
    path = []
    while node >= 0:
        path.append(node)
        node = rows[node]
    return plan, torch.tensor(path[::-1], dtype=torch.long, device=device)


def committed_state(target) -> list[torch.Tensor]:
    return [c[:, :, : target.length].clone() for c in target.k_caches + target.v_caches] + [
        target.recurrent_states.clone(),
        target.conv_states.clone(),
    ]


def check(targets: dict, prefix: torch.Tensor, plan: VerifyPlan, accepted) -> dict:
    """Run ``plan`` and commit ``accepted`` on every target; torch.equal of logits and committed states against 'static'."""
    outs, states = {}, {}
    for kind, t in targets.items():
        t.reset()
        t(prefix)
        t.commit(prefix.shape[1])
        outs[kind] = t.run_plan(plan).logits
        t.commit(accepted)
        states[kind] = committed_state(t)
    result = {}
    for kind in targets:
        if kind == "static":
            continue
        result[f"{kind}_equals_static_logits"] = bool(torch.equal(outs[kind], outs["static"]))
        result[f"{kind}_equals_static_commit"] = all(torch.equal(a, b) for a, b in zip(states[kind], states["static"]))
        result[f"{kind}_vs_static_max_abs_logit_diff"] = float((outs[kind] - outs["static"]).abs().max())
    if "graphed" in targets:
        result["graphed_equals_eager_logits"] = bool(torch.equal(outs["graphed"], outs["eager"]))
    return result


def step_ms(target, plan: VerifyPlan, accepted, prefix_len: int, reps: int, device) -> float:
    """Median ms of one forward + commit, rolled back (truncate to a held length) after each call."""

    def step():
        target.run_plan(plan)
        target.commit(accepted)
        target.truncate(prefix_len)

    return median_time_ms(step, reps, device=device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model on the CPU, static path only")
    parser.add_argument("--out", default=None, help="JSON result path")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    prov = provenance(args.seed)
    print(provenance_line(prov))
    if args.smoke:
        cfg, device, dtype, reps = SMOKE, torch.device("cpu"), torch.float32, 2
    else:
        if not torch.cuda.is_available():
            print("needs a CUDA device (or --smoke)", file=sys.stderr)
            return 2
        cfg, device, dtype, reps = QWEN3_5_4B, torch.device("cuda"), torch.bfloat16, args.reps
    torch.manual_seed(args.seed)
    targets = build_targets(cfg, device=device, dtype=dtype, seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, cfg.vocab_size, (1, MAX_SEQ_LEN), generator=gen).to(device)
    root = tokens[0, -1:]
    # the checked steps fill the cache to max_seq_len: every target attends over the same slots
    decode_plan = VerifyPlan.chain(root, root[:0], prefix_len=MAX_SEQ_LEN - 1)
    plan64, path = tree_plan(MAX_SEQ_LEN - TREE_ROWS, cfg.vocab_size, device, args.seed)
    checks = {
        "decode": check(targets, tokens[:, : MAX_SEQ_LEN - 1], decode_plan, 1),
        "tree64": check(targets, tokens[:, : MAX_SEQ_LEN - TREE_ROWS], plan64, path),
    }
    gate_kind = "graphed" if "graphed" in targets else "eager"
    passed = all(c[f"{gate_kind}_equals_static_logits"] and c[f"{gate_kind}_equals_static_commit"] for c in checks.values())
    for name, c in checks.items():
        print(f"check {name}: " + ", ".join(f"{k}={v}" for k, v in c.items()))
    result = {
        "shape": "qwen3.5-4b" if not args.smoke else "smoke",
        "weights": "random",
        "dtype": str(dtype),
        "max_seq_len": MAX_SEQ_LEN,
        "buckets": list(BUCKETS),
        "checks": checks,
        "gate_passed": passed,
    }
    if not passed:
        print(f"GATE FAILED: {gate_kind} differs from the static path it runs", file=sys.stderr)
        if args.out:
            write_json(args.out, result, prov)
        return 1
    t = targets["eager"]
    weight_bytes = (
        sum(p.numel() * p.element_size() for p in t.parameters()) - t.embed.weight.numel() * t.embed.weight.element_size()
    )
    bandwidth = copy_bandwidth(device)
    prefix_len = MAX_SEQ_LEN // 2
    ar_plan = VerifyPlan.chain(root, root[:0], prefix_len=prefix_len)
    tplan, tpath = tree_plan(prefix_len, cfg.vocab_size, device, args.seed)
    timings = {}
    for kind in ("eager", "graphed" if "graphed" in targets else "static"):
        target = targets[kind]
        target.reset()
        target(tokens[:, :prefix_len])
        target.commit(prefix_len)
        timings[f"ar_{kind}_ms"] = step_ms(target, ar_plan, 1, prefix_len, reps, device)
        timings[f"tree64_{kind}_ms"] = step_ms(target, tplan, tpath, prefix_len, reps, device)
    fast = "graphed" if "graphed" in targets else "static"
    floor_ms = weight_bytes / bandwidth * 1e3
    timings.update(
        weight_bytes=weight_bytes,
        copy_bandwidth_Bps=bandwidth,
        weight_read_floor_ms=floor_ms,
        tree64_over_ar=timings[f"tree64_{fast}_ms"] / timings[f"ar_{fast}_ms"],
    )
    result["timings"] = timings
    print(f"{'step':<22}{'eager ms':>10}{f'{fast} ms':>12}{'floor ms':>10}")
    print(f"{'AR (1 row + commit)':<22}{timings['ar_eager_ms']:>10.3f}{timings[f'ar_{fast}_ms']:>12.3f}{floor_ms:>10.3f}")
    print(f"{'tree-64 + commit':<22}{timings['tree64_eager_ms']:>10.3f}{timings[f'tree64_{fast}_ms']:>12.3f}{'':>10}")
    print(
        f"weight bytes {weight_bytes / 1e9:.3f} GB, copy bandwidth {bandwidth / 1e12:.2f} TB/s, "
        f"tree-64 / AR ({fast}) = {timings['tree64_over_ar']:.2f}"
    )
    if args.out:
        write_json(args.out, result, prov)
    return 0


if __name__ == "__main__":
    sys.exit(main())
