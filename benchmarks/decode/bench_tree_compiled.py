"""Tree verify forward vs the AR step with the runtime's own compiled CUDA graphs (Qwen3-8B shape, bf16).

``bench_tree.py`` captures the uncompiled body; this measures what ``sd.generate`` runs after
``target.enable_cuda_graphs(buckets, compile=True)``: one graph per row count (1 for AR, N + 1 for a
tree of N nodes, so no padding). Correctness gate first: the tree forward's logits against causal
forwards of leaf paths (``bench_tree.check_tree_forward``). Goal: 64 nodes <= 1.25x the AR step.

    python -m benchmarks.decode.bench_tree_compiled --out $OUT/bench_tree_compiled.json
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from benchmarks.common import provenance, provenance_line, write_json
from benchmarks.decode.bench_tree import check_tree_forward, draft_logprobs, timer
from specdec.models import QWEN3_8B, random_target
from specdec.verify.tree import best_first_tree, tree_positions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--prefix", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_tree_compiled.json"))
    parser.add_argument("--seed", type=int, default=0, help="torch's global seed (weights, prefix, root); trees use seed 0")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    prov = provenance(args.seed)
    device = torch.device("cuda")
    median_us = timer(device)
    target = random_target(QWEN3_8B, dtype=torch.bfloat16, device=device, max_seq_len=args.prefix + 256)
    target.enable_cuda_graphs(buckets=[1] + [n + 1 for n in args.nodes], compile=True)
    prefix = torch.randint(0, QWEN3_8B.vocab_size, (1, args.prefix), device=device)
    target(prefix)
    target.commit(args.prefix)
    gen = torch.Generator().manual_seed(0)
    root = torch.randint(0, QWEN3_8B.vocab_size, (1,), device=device)

    def ar():
        target(root[None])
        target.truncate(args.prefix)

    t0 = time.perf_counter()
    ar_us = median_us(ar, args.reps)
    rows = []
    for n in args.nodes:
        tree = best_first_tree(draft_logprobs(QWEN3_8B.vocab_size, gen, device), n).to(device)
        check = check_tree_forward(target, tree, root)
        row = {"nodes": n, "depth": int(tree.depth.max()), "check": check}
        if check["ok"]:
            tokens = torch.cat([root, tree.tokens])[None]
            positions = tree_positions(tree, args.prefix)[None]

            def step():
                target(tokens, positions, tree.ancestor_mask)
                target.truncate(args.prefix)

            row["tree_us"] = median_us(step, args.reps)
            row["tree_over_ar"] = row["tree_us"] / ar_us
        rows.append(row)
        print(
            f"N={n}: {row.get('tree_us', float('nan')):.1f} us = {row.get('tree_over_ar', float('nan')):.2f}x AR; check {check['ok']}",
            flush=True,
        )
    result = {"prefix": args.prefix, "ar_us": ar_us, "rows": rows, "wall_s": time.perf_counter() - t0}
    write_json(args.out, result, prov)
    print(f"\n{provenance_line(prov)}")
    print(f"Qwen3-8B shape, compiled CUDA graphs, prefix {args.prefix}: AR step {ar_us:.1f} us")
    for row in rows:
        goal = "  goal <= 1.25x: " + ("met" if row.get("tree_over_ar", 9) <= 1.25 else "NOT met") if row["nodes"] == 64 else ""
        print(f"  tree {row['nodes']:3d} nodes: {row.get('tree_over_ar', float('nan')):.2f}x the AR step{goal}")


if __name__ == "__main__":
    main()
