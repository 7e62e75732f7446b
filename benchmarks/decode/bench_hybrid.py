"""Verify step of a Qwen3.5-4B-shaped hybrid target (tree of 16/32/64 nodes) against its AR step.

Random bf16 weights at the Qwen3.5-4B shape (32 layers = 24 Gated DeltaNet + 8 gated attention,
pattern [GDN, GDN, GDN, Attn]; hidden 2560; attention 16/4 heads of 256, 64 rotary dims; GDN Hk 16,
Hv 32, dk = dv = 128, conv 4; FFN 9216; vocab 248320). Eager forwards (hybrid targets have no CUDA
graphs yet), so small steps include Python launch overhead; the numbers are for comparing verify
against AR on the same runtime, and path against WY GDN kernels.

Correctness gate first (exits 1 before timing if it fails), an error budget against a float32 copy
of the same weights: the Triton path and WY kernels' tree logits, and the recurrent state committed
along a path that is not a prefix of the row order, may differ from float32 by at most twice what the
bf16 PyTorch reference (resp. a bf16 chain run of the path) differs by.

    python -m benchmarks.decode.bench_hybrid --out $OUT/bench_hybrid.json
    python -m benchmarks.decode.bench_hybrid --smoke      # tiny model on the CPU: the script runs end to end

Beside the gate, ``kernel_check`` compares the GDN kernels with the float64 reference directly at
the target's GDN head shapes (the gate's tree and the prefill chain), so that a gate failure can be
told apart from a kernel defect.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from benchmarks.common import median_time_ms, provenance, provenance_line, write_json
from specdec.kernels import gdn
from specdec.models.hybrid import HybridConfig, random_hybrid_target

QWEN3_5_4B = HybridConfig(
    vocab_size=248320,
    hidden_size=2560,
    intermediate_size=9216,
    num_layers=32,
    layer_types=tuple("full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(32)),
    num_heads=16,
    num_kv_heads=4,
    head_dim=256,
    rotary_dim=64,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    rope_theta=10_000_000.0,
    model_type="qwen3_5_text",
)


# a few-layer, narrow hybrid with the same layer pattern: the CPU smoke run of this script
SMOKE = HybridConfig(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_layers=4,
    layer_types=("linear_attention",) * 3 + ("full_attention",),
    num_heads=2,
    num_kv_heads=1,
    head_dim=32,
    rotary_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=32,
    linear_value_head_dim=32,
    linear_conv_kernel_dim=4,
    rope_theta=10_000.0,
    model_type="qwen3_5_text",
)


def random_tree(n: int, seed: int, max_depth: int = 8) -> list[int]:
    """Parents of the verify rows [root, node_0..node_{n-1}]: row 0 = -1, nodes below it, bushy near the root."""
    gen = torch.Generator().manual_seed(seed)
    parents, depth = [-1], [0]
    for i in range(1, n + 1):
        while True:
            # prefer recent rows (deep paths), sometimes shallow ones (siblings)
            j = (
                int(torch.randint(0, i, (1,), generator=gen))
                if torch.rand(1, generator=gen) < 0.4
                else i - 1 - int(torch.randint(0, min(i, 3), (1,), generator=gen))
            )
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
    return target(
        tokens,
        depth_positions(parents, target.length, dev),
        ancestor_mask(parents, dev),
        tree_parents=torch.tensor(parents, device=dev),
    )


def kernel_check(cfg: HybridConfig, device, parents: list[int], prefix: int, seed: int) -> dict:
    """Max error (relative to the output's max) of the GDN kernels against the float64 reference, at
    the target's GDN shapes, for the gate's tree and for a prefill chain, bf16 inputs / fp32 outputs."""
    gen = torch.Generator().manual_seed(seed)
    hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    res = {}
    for name, par in (("tree", parents), ("prefill_chain", list(range(-1, prefix - 1)))):
        n = len(par)
        q, k = (torch.randn(n, hk, dk, generator=gen).bfloat16().to(device) for _ in range(2))
        v = torch.randn(n, hv, dv, generator=gen).bfloat16().to(device)
        g = (-torch.rand(n, hv, generator=gen) * 2).to(device)
        beta = torch.rand(n, hv, generator=gen).to(device)
        s0 = (0.1 * torch.randn(hv, dk, dv, generator=gen)).to(device)
        meta = gdn.build_tree_meta(torch.tensor(par, device=device))
        ref = gdn.naive_gdn_tree(q.float(), k.float(), v.float(), g, beta, meta, s0, dtype=torch.float64)
        scale = ref.abs().max().item()
        for method in ("path", "wy"):
            out = gdn.gdn_tree(q.float(), k.float(), v.float(), g, beta, meta, s0, method=method).float()
            res[f"{name}_{method}"] = {
                "max_rel_err": (out.double() - ref).abs().max().item() / scale,
                "finite": bool(torch.isfinite(out).all()),
            }
    return res


def gate(target, prefix: int, seed: int) -> dict:
    """Correctness gate on the benchmark target itself, as an error budget (flash-attention style).

    Random hybrids amplify bf16 rounding strongly (a 16-layer CPU model already moves its logits by
    ~0.5 of their std between bf16 and float32 on the same weights), so fixed tolerances cannot tell a
    defect from rounding. Each bf16 quantity is therefore compared with a float32 copy of the same
    weights, and may be off by at most twice what the bf16 PyTorch reference is off by.
    """
    dev = target.device
    parents = random_tree(16, seed)
    tokens = torch.randint(
        0, target.vocab_size, (1, len(parents)), device=dev, generator=torch.Generator(device=dev).manual_seed(seed)
    )
    ctx = torch.randint(
        0, target.vocab_size, (1, prefix), device=dev, generator=torch.Generator(device=dev).manual_seed(seed + 1)
    )
    reference = random_hybrid_target(target.config, dtype=torch.float32, device=dev, max_seq_len=target.max_seq_len)
    reference.load_state_dict({k: v.float() for k, v in target.state_dict().items()})
    reference.gdn_method, reference.backend = "naive", "torch"

    def tree_logits(model, method, backend):
        model.gdn_method, model.backend = method, backend
        model.reset()
        model(ctx)
        model.commit(prefix)
        out = tree_forward(model, tokens, parents).logits[0].float()
        model.reset()
        return out

    ref = tree_logits(reference, "naive", "torch")
    scale = ref.std().item()

    def err(x):
        return (x - ref).abs().max().item() / scale

    result = {
        "reference": "float32 copy of the same weights, naive GDN",
        "kernel_check": kernel_check(target.config, dev, parents, prefix, seed),
    }
    budget = 2 * err(tree_logits(target, "naive", "torch")) + 1e-3
    result["bf16_naive_error"] = budget / 2
    for method in ("path", "wy"):
        out = tree_logits(target, method, "auto")
        agree = (out.argmax(-1) == ref.argmax(-1)).float().mean().item()
        result[f"{method}_error"] = {"max_rel_diff": err(out), "argmax_agreement_with_fp32": agree, "budget": budget}
    # commit a path that is not a prefix of the row order: states vs the float32 clean run of that path
    path = deepest_non_prefix_path(parents)

    def committed_state(model, tree_first: bool):
        model.reset()
        model(ctx)
        model.commit(prefix)
        if tree_first:
            tree_forward(model, tokens, parents)
            model.commit(torch.tensor(path, device=dev))
        else:
            model(tokens[:, path])
            model.commit(len(path))
        state = model.recurrent_states.float().clone()
        model.reset()
        return state

    target.gdn_method, target.backend = "path", "auto"
    want = committed_state(reference, tree_first=False)
    norm = want.abs().max().clamp_min(1e-12)
    chain_err = ((committed_state(target, tree_first=False) - want).abs().max() / norm).item()
    tree_err = ((committed_state(target, tree_first=True) - want).abs().max() / norm).item()
    result["commit"] = {
        "path": path,
        "tree_commit_state_error": tree_err,
        "chain_state_error": chain_err,
        "budget": 2 * chain_err + 1e-3,
    }
    del reference
    ok = all(result[f"{m}_error"]["max_rel_diff"] <= budget for m in ("path", "wy")) and tree_err <= 2 * chain_err + 1e-3
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
        ms = median_time_ms(lambda: step(with_commit), iters, device=dev, warmup=3)
        out["forward_commit_us" if with_commit else "forward_us"] = ms * 1e3
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_hybrid.json"))
    ap.add_argument("--prefix", type=int, default=512)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--nodes", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--smoke", action="store_true", help="tiny model, CPU allowed, 3 iterations: checks the script runs")
    args = ap.parse_args()
    if args.smoke:
        cfg, device = SMOKE, ("cuda" if torch.cuda.is_available() else "cpu")
        args.prefix, args.iters, args.nodes = 24, 3, [16]
    elif not torch.cuda.is_available():
        print("needs a CUDA device (or --smoke)", file=sys.stderr)
        return 2
    else:
        cfg, device = QWEN3_5_4B, "cuda"
    seed = 0
    prov = provenance(seed)
    torch.manual_seed(seed)
    target = random_hybrid_target(cfg, dtype=torch.bfloat16, device=device, max_seq_len=args.prefix + 256, seed=seed)
    report = {
        "shape": "smoke" if args.smoke else "Qwen3.5-4B (random bf16 weights)",
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "prefix": args.prefix,
        "eager": True,
    }
    report["gate"] = gate(target, args.prefix, seed=1)
    print(provenance_line(prov))
    print(json.dumps(report["gate"], indent=1))
    if not report["gate"]["passed"]:
        write_json(args.out, report, prov, indent=1)
        print("correctness gate FAILED; no timings", file=sys.stderr)
        return 1
    ctx = torch.randint(0, target.vocab_size, (1, args.prefix), device=device)
    target.reset()
    target(ctx)
    target.commit(args.prefix)
    rows = []
    ar = time_step(target, args.prefix, None, 1, args.iters)
    rows.append({"step": "AR (1 row)", "method": "path", **ar})
    for method in ("path", "wy"):
        target.gdn_method = method
        for n in args.nodes:
            parents = random_tree(n, seed=n)
            path = deepest_non_prefix_path(parents)
            res = time_step(target, args.prefix, parents, path, args.iters)
            rows.append(
                {
                    "step": f"tree {n} nodes",
                    "method": method,
                    "rows": n + 1,
                    "accepted_path_len": len(path),
                    **res,
                    "vs_ar_forward": res["forward_us"] / ar["forward_us"],
                }
            )
    target.gdn_method = "path"
    report["steps"] = rows
    write_json(args.out, report, prov, indent=1)
    print(f"\n{provenance_line(prov)}")
    print(f"{'step':<16}{'gdn':>6}{'forward us':>13}{'fwd+commit us':>15}{'x AR':>7}")
    for r in rows:
        print(
            f"{r['step']:<16}{r['method']:>6}{r['forward_us']:>13.0f}{r['forward_commit_us']:>15.0f}"
            f"{r.get('vs_ar_forward', 1.0):>7.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
