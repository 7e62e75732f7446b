"""Best-first tree build: the host heap (``best_first_tree``) vs fixed-shape tensor ops (``best_first_tree_device``).

Shape: Qwen3-8B's vocabulary (V = 151936), D = 16 draft depths of float32 log-probs on the device,
budgets 16 / 32 / 64. Variants:

- ``host_ms``: ``best_first_tree(lp, budget)``: top-k on the device, one copy to the host, the heap in
  Python, the tree copied back (its syncs included);
- ``device_eager_ms``: ``best_first_tree_device(lp, budget)`` launched op by op;
- ``device_graph_ms``: the same captured in one CUDA graph and replayed (the way a decode step would
  run it).

Each timing is the median over ``--reps`` calls between CUDA events (``median_time_ms``). Before any
timing, the device outputs (eager, and the graph's after new log-probs are copied into its input) are
checked equal (``torch.equal``) to the host heap's tree; a budget that fails is reported and not timed.

Run: ``python3 -m benchmarks.kernels.bench_tree_build [--out bench_tree_build.json]``.
CPU smoke (small V and D, no graph): ``python3 -m benchmarks.kernels.bench_tree_build --smoke``.
"""

from __future__ import annotations

import argparse
import os

import torch

from benchmarks.common import capture_cuda_graph, median_time_ms, provenance, provenance_line, write_json
from specdec.verify import best_first_tree, best_first_tree_device

VOCAB = 151936  # Qwen3-8B
DEPTH = 16
BUDGETS = (16, 32, 64)
SMOKE_SHAPE = dict(vocab=1000, depth=4, budgets=(4, 16), reps=3)


def draft_logprobs(depth: int, vocab: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """``[depth, vocab]`` float32 log-probs, peaked like a draft model's (a few plausible tokens per depth)."""
    logits = torch.randn(depth, vocab, generator=gen) * 4.0  # [D, V]
    return torch.log_softmax(logits, dim=-1).to(device)


def equals_host(lp: torch.Tensor, budget: int, outputs) -> bool:
    """The device outputs ``(tokens, parents, scores, num_nodes)`` hold the host heap's tree."""
    want = best_first_tree(lp, budget)
    tokens, parents, scores, num_nodes = outputs
    n = int(num_nodes)
    return (
        n == want.num_nodes
        and torch.equal(tokens[:n], want.tokens)
        and torch.equal(parents[:n], want.parents)
        and torch.equal(scores[:n], want.scores)
    )


def bench_budget(budget: int, depth: int, vocab: int, reps: int, gen: torch.Generator, device: torch.device) -> dict:
    lp = draft_logprobs(depth, vocab, gen, device)
    row = {"budget": budget, "checks": {"eager_equals_host": equals_host(lp, budget, best_first_tree_device(lp, budget))}}
    replay = None
    if device.type == "cuda":
        static_lp = lp.clone()
        static_out: list = []  # the captured call's outputs, rewritten by every replay

        def capture_target():
            static_out[:] = best_first_tree_device(static_lp, budget)

        replay = capture_cuda_graph(capture_target)
        # new values in the captured input: the graph must follow them
        fresh = draft_logprobs(depth, vocab, gen, device)
        static_lp.copy_(fresh)
        replay()
        torch.cuda.synchronize()
        row["checks"]["graph_equals_host"] = equals_host(fresh, budget, static_out)
    row["passed"] = all(row["checks"].values())
    if not row["passed"]:
        return row
    row["host_ms"] = median_time_ms(lambda: best_first_tree(lp, budget), reps, device=device)
    row["device_eager_ms"] = median_time_ms(lambda: best_first_tree_device(lp, budget), reps, device=device)
    row["device_graph_ms"] = median_time_ms(replay, reps, device=device) if replay is not None else None
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_tree_build.json"))
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help="CPU, V = 1000, D = 4, budgets 4 and 16, no CUDA graph")
    args = parser.parse_args(argv)
    seed = 0
    prov = provenance(seed)
    print(provenance_line(prov), flush=True)
    if args.smoke:
        device = torch.device("cpu")
        vocab, depth, budgets, reps = SMOKE_SHAPE["vocab"], SMOKE_SHAPE["depth"], SMOKE_SHAPE["budgets"], SMOKE_SHAPE["reps"]
    else:
        if not torch.cuda.is_available():
            parser.error("needs CUDA; use --smoke on a CPU")
        device = torch.device("cuda")
        vocab, depth, budgets, reps = VOCAB, DEPTH, BUDGETS, args.reps
    gen = torch.Generator().manual_seed(seed)
    rows = [bench_budget(budget, depth, vocab, reps, gen, device) for budget in budgets]
    print(f"V = {vocab}, D = {depth}, float32 log-probs on {device}, median of {reps}")
    print(f"{'budget':>6} {'host ms':>9} {'eager ms':>9} {'graph ms':>9} {'host/graph':>10}")
    for row in rows:
        if not row["passed"]:
            print(f"{row['budget']:>6} CHECK FAILED {row['checks']}: not timed")
            continue
        graph = row["device_graph_ms"]
        ratio = f"{row['host_ms'] / graph:>10.1f}" if graph else f"{'-':>10}"
        graph_text = f"{graph:>9.3f}" if graph is not None else f"{'-':>9}"
        print(f"{row['budget']:>6} {row['host_ms']:>9.3f} {row['device_eager_ms']:>9.3f} {graph_text} {ratio}")
    passed = all(row["passed"] for row in rows)
    result = {"vocab": vocab, "depth": depth, "dtype": torch.float32, "device": str(device), "reps": reps, "passed": passed}
    path = write_json(args.out, {**result, "rows": rows}, prov)
    print(f"wrote {path}")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
