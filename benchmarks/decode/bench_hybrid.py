"""Verify step of a Qwen3.5-4B-shaped hybrid target (tree of 16/32/64 nodes) against its AR step.

Random bf16 weights at the Qwen3.5-4B shape (32 layers = 24 Gated DeltaNet + 8 gated attention,
pattern [GDN, GDN, GDN, Attn]; hidden 2560; attention 16/4 heads of 256, 64 rotary dims; GDN Hk 16,
Hv 32, dk = dv = 128, conv 4; FFN 9216; vocab 248320). Eager forwards (hybrid targets have no CUDA
graphs yet), so small steps include Python launch overhead; the numbers are for comparing verify
against AR on the same runtime, and path against WY GDN kernels.

Correctness gate first (exits 1 before timing if it fails):
  * every row of a 16-node tree forward has the logits of a clean chain run of its own path
    (argmax agreement and max |diff| relative to the logits' scale, bf16);
  * committing a path that is not a prefix of the row order gives the recurrent states of a clean
    run of that path;
  * the Triton path and WY kernels agree with the PyTorch reference (``gdn_method="naive"``) on the
    tree forward.

    python benchmarks/decode/bench_hybrid.py --out $OUT/bench_hybrid.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from specdec.models.hybrid import HybridConfig, random_hybrid_target  # noqa: E402

QWEN3_5_4B = HybridConfig(
    vocab_size=248320, hidden_size=2560, intermediate_size=9216, num_layers=32,
    layer_types=tuple("full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(32)),
    num_heads=16, num_kv_heads=4, head_dim=256, rotary_dim=64,
    linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, rope_theta=10_000_000.0, model_type="qwen3_5_text",
)


def random_tree(n: int, seed: int, max_depth: int = 8) -> list[int]:
    """Parents of the verify rows [root, node_0..node_{n-1}]: row 0 = -1, nodes below it, bushy near the root."""
    gen = torch.Generator().manual_seed(seed)
    parents, depth = [-1], [0]
    for i in range(1, n + 1):
        while True:
            # prefer recent rows (deep paths), sometimes shallow ones (siblings)
            j = int(torch.randint(0, i, (1,), generator=gen)) if torch.rand(1, generator=gen) < 0.4 else i - 1 - int(
                torch.randint(0, min(i, 3), (1,), generator=gen))
            if depth[j] < max_depth:
                break
        parents.append(j)
        depth.append(depth[j] + 1)
    return parents


def path_to(parents: list[int], row: int) -> list[int]:
    out = []
    while row >= 0:
        out.append(row)
        row = parents[row]
    return out[::-1]


def deepest_non_prefix_path(parents: list[int]) -> list[int]:
    best = [0]
    for r in range(len(parents)):
        p = path_to(parents, r)
        if len(p) > len(best) or (len(p) == len(best) and p != list(range(len(p)))):
            best = p
    return best


def ancestor_mask(parents: list[int], device) -> torch.Tensor:
    t = len(parents)
    m = torch.eye(t, dtype=torch.bool)
    for r in range(t):
        for a in path_to(parents, r):
            m[r, a] = True
    return m.to(device)


def depth_positions(parents: list[int], length: int, device) -> torch.Tensor:
    return torch.tensor([[length + len(path_to(parents, r)) - 1 for r in range(len(parents))]], device=device)


def tree_forward(target, tokens, parents):
    dev = target.device
    return target(tokens, depth_positions(parents, target.length, dev), ancestor_mask(parents, dev),
                  tree_parents=torch.tensor(parents, device=dev))


def gate(target, prefix: int, seed: int) -> dict:
    """Correctness gate on the benchmark target itself (bf16)."""
    dev = target.device
    parents = random_tree(16, seed)
    tokens = torch.randint(0, target.vocab_size, (1, len(parents)), device=dev,
                           generator=torch.Generator(device=dev).manual_seed(seed))
    ctx = torch.randint(0, target.vocab_size, (1, prefix), device=dev, generator=torch.Generator(device=dev).manual_seed(seed + 1))
    result = {}
    target.reset()
    target(ctx); target.commit(prefix)
    outs = {}
    for method, backend in (("naive", "torch"), ("path", "auto"), ("wy", "auto")):
        target.gdn_method, target.backend = method, backend
        outs[method] = tree_forward(target, tokens, parents).logits[0]
        target.truncate(prefix)
    scale = outs["naive"].float().std().item()
    for method in ("path", "wy"):
        diff = (outs[method] - outs["naive"]).abs().max().item() / scale
        agree = (outs[method].argmax(-1) == outs["naive"].argmax(-1)).float().mean().item()
        result[f"{method}_vs_naive"] = {"max_rel_diff": diff, "argmax_agreement": agree}
    target.gdn_method, target.backend = "path", "auto"
    # rows against clean chain runs of their paths
    tree_logits = outs["path"]
    worst, agree = 0.0, 0
    for r in range(len(parents)):
        p = path_to(parents, r)
        target.truncate(prefix)
        clean = target(tokens[:, p]).logits[0, -1]
        worst = max(worst, (clean - tree_logits[r]).abs().max().item() / scale)
        agree += int(clean.argmax() == tree_logits[r].argmax())
    result["rows_vs_clean_paths"] = {"max_rel_diff": worst, "argmax_agreement": agree / len(parents)}
    # commit a path that is not a prefix of the row order
    path = deepest_non_prefix_path(parents)
    target.truncate(prefix)
    tree_forward(target, tokens, parents)
    target.commit(torch.tensor(path, device=dev))
    got = target.recurrent_states.clone()
    target.truncate(prefix)
    target(tokens[:, path]); target.commit(len(path))
    want = target.recurrent_states
    result["commit_vs_clean_run"] = {
        "path": path,
        "max_rel_state_diff": ((got - want).abs().max() / want.abs().max().clamp_min(1e-12)).item(),
    }
    target.reset()
    ok = (all(result[f"{m}_vs_naive"]["argmax_agreement"] >= 0.9 and result[f"{m}_vs_naive"]["max_rel_diff"] < 0.25
              for m in ("path", "wy"))
          and result["rows_vs_clean_paths"]["argmax_agreement"] >= 0.9
          and result["rows_vs_clean_paths"]["max_rel_diff"] < 0.25
          and result["commit_vs_clean_run"]["max_rel_state_diff"] < 0.05)
    result["passed"] = bool(ok)
    return result


def time_step(target, prefix: int, parents: list[int] | None, commit: list[int] | int, iters: int) -> dict:
    """Median GPU time of forward (+ commit) of one step after a ``prefix``-token context."""
    dev = target.device
    rows = 1 if parents is None else len(parents)
    tokens = torch.randint(0, target.vocab_size, (1, rows), device=dev)
    accepted = commit if isinstance(commit, int) else torch.tensor(commit, device=dev)

    def step(with_commit: bool):
        if parents is None:
            target(tokens)
        else:
            tree_forward(target, tokens, parents)
        if with_commit:
            target.commit(accepted)
        target.truncate(prefix)

    out = {}
    for with_commit in (False, True):
        for _ in range(3):
            step(with_commit)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step(with_commit)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        out["forward_commit_us" if with_commit else "forward_us"] = statistics.median(times)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_hybrid.json"))
    ap.add_argument("--prefix", type=int, default=512)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--nodes", type=int, nargs="+", default=[16, 32, 64])
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    target = random_hybrid_target(QWEN3_5_4B, dtype=torch.bfloat16, device="cuda", max_seq_len=args.prefix + 256, seed=0)
    report = {"shape": "Qwen3.5-4B (random bf16 weights)", "device": torch.cuda.get_device_name(),
              "torch": torch.__version__, "prefix": args.prefix, "eager": True}
    report["gate"] = gate(target, args.prefix, seed=1)
    print(json.dumps(report["gate"], indent=1))
    if not report["gate"]["passed"]:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print("correctness gate FAILED; no timings", file=sys.stderr)
        return 1
    ctx = torch.randint(0, target.vocab_size, (1, args.prefix), device="cuda")
    target.reset()
    target(ctx); target.commit(args.prefix)
    rows = []
    ar = time_step(target, args.prefix, None, 1, args.iters)
    rows.append({"step": "AR (1 row)", "method": "path", **ar})
    for method in ("path", "wy"):
        target.gdn_method = method
        for n in args.nodes:
            parents = random_tree(n, seed=n)
            path = deepest_non_prefix_path(parents)
            res = time_step(target, args.prefix, parents, path, args.iters)
            rows.append({"step": f"tree {n} nodes", "method": method, "rows": n + 1, "accepted_path_len": len(path),
                         **res, "vs_ar_forward": res["forward_us"] / ar["forward_us"]})
    target.gdn_method = "path"
    report["steps"] = rows
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"{'step':<16}{'gdn':>6}{'forward us':>13}{'fwd+commit us':>15}{'x AR':>7}")
    for r in rows:
        print(f"{r['step']:<16}{r['method']:>6}{r['forward_us']:>13.0f}{r['forward_commit_us']:>15.0f}"
              f"{r.get('vs_ar_forward', 1.0):>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
