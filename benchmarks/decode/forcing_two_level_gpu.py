"""Token forcing on two-level outputs in bf16: the verifier passes, a fault in the Q hand-off is caught.

Checks, at a realistic shape and precision, the two claims the CPU test
(``tests/forcing/test_two_level_forcing.py``) makes at a tiny one:

1. a lossless system passes: :class:`specdec.TwoLevelVerifier` (``gate="always"``: every round runs the
   8-bit Q pass, the second draft and the exact pass) with the n-gram drafter, bf16, against the stock
   target (its verify passes round differently from plain decoding, so outputs may diverge from AR
   after a near-tie flip; the checker's null is the stock target's own outputs);
2. a planted fault in the Q hand-off fails: :class:`QChainHandOff` lets the exact pass reuse the Q
   pass's logits on the rows both passes share (the root and the Q chain), so Q-view argmaxes leak
   into acceptance and into what is committed.

The target has Qwen3-0.6B's shapes (``forcing_gpu.SHAPES``) with random weights built on the device
(``N(0, 1/fan_in)`` matrices; LM head rescaled to logits of standard deviation ``--logit-std``, as in
``forcing_gpu``). Prompts are random ids. Each prompt runs stock AR, two-level and faulty two-level
in turn; no new prompt starts past ``--budget-s`` (the checks run on the prompts finished).

Run (GPU machine, repository root): ``python -m benchmarks.decode.forcing_two_level_gpu`` (writes
``$OUT/forcing_two_level_gpu.json``); CPU smoke, same code path at tiny shapes: ``--smoke``.
The last line says ``expected outcome: yes`` when the lossless candidate passes and the faulty one fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

import specdec as sd
from benchmarks.common import provenance, provenance_line, warm_graphs, write_json
from benchmarks.decode.forcing_gpu import SHAPES
from specdec.forcing import TokenForcingChecker
from specdec.models import DenseTarget
from specdec.models.config import TargetConfig
from specdec.testing.faults import QChainHandOff


def random_target(shape: str, logit_std: float, dtype, device, max_seq_len: int, seed: int) -> DenseTarget:
    """A random-weight dense target built on ``device``: matrices ``N(0, 1/fan_in)``, embeddings ``N(0, 1)``,
    norms 1, LM head ``N(0, logit_std^2 / hidden)`` (the final norm makes rows unit-RMS: logits of std ~ ``logit_std``)."""
    cfg = TargetConfig(**SHAPES[shape], qk_norm=True)
    target = DenseTarget(cfg, max_seq_len=max_seq_len, dtype=dtype, device=device)
    gen = torch.Generator(device=target.device).manual_seed(seed)
    with torch.no_grad():
        for name, param in target.named_parameters():
            if name == "embed.weight":
                param.normal_(0.0, 1.0, generator=gen)
            elif name == "lm_head.weight":
                param.normal_(0.0, logit_std / param.shape[1] ** 0.5, generator=gen)
            elif param.ndim == 2:
                param.normal_(0.0, param.shape[1] ** -0.5, generator=gen)
            else:
                param.fill_(1.0)
    return target.eval().requires_grad_(False)


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, CPU, short outputs (the same code path)")
    parser.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES))
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--logit-std", type=float, default=4.0)
    parser.add_argument("--num-draft-tokens", type=int, default=6)
    parser.add_argument("--budget", type=int, default=12, help="exact-pass nodes")
    parser.add_argument("--q-budget", type=int, default=8, help="Q-pass nodes")
    parser.add_argument("--q-storage", default="dense", choices=["dense", "packed"], help="how the Q view is held")
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument("--budget-s", type=float, default=40.0, help="no new prompt starts past this wall time (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)
    if args.smoke:
        args.shape, args.max_new_tokens, args.num_prompts = "smoke", 96, 4
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32

    prov = provenance(args.seed)
    start = time.perf_counter()
    max_seq_len = args.prompt_len + args.max_new_tokens + args.budget + 8
    target = random_target(args.shape, args.logit_std, dtype, device, max_seq_len, args.seed)
    target.set_q_view_storage(args.q_storage)
    # AR steps, Q passes (<= q_budget + 1 rows), exact passes (<= budget + 1 rows) and the prefill replay
    # graphs on CUDA; on the CPU the same static body runs eagerly
    buckets = (1, 2, 4, 8, 16, 32)
    target.enable_cuda_graphs(buckets) if device.type == "cuda" else target.enable_static_path(buckets)
    build_s = time.perf_counter() - start
    gen = torch.Generator().manual_seed(args.seed + 2)
    all_prompts = [
        torch.randint(0, target.vocab_size, (args.prompt_len,), generator=gen).to(device) for _ in range(args.num_prompts)
    ]
    print(
        f"target {args.shape} {args.dtype} on {device}: {target.config.num_parameters() / 1e6:.0f}M parameters, built in {build_s:.1f} s"
    )

    # every graph bucket with both weight views once before the timed calls (a graph is captured at the first use of
    # each (bucket, view))
    warm_graphs(target, all_prompts[0][None], buckets, views=("exact", "q"))
    systems = {"stock": lambda: target, "two-level": lambda: target, "faulty two-level": lambda: QChainHandOff(target)}
    outs = {name: [] for name in systems}
    stats = {name: [] for name in systems}
    seconds = dict.fromkeys(systems, 0.0)
    prompts = []
    for i, p in enumerate(all_prompts):
        if args.budget_s > 0 and time.perf_counter() - start > args.budget_s:
            print(f"past --budget-s {args.budget_s:g}: {i} of {args.num_prompts} prompts run", flush=True)
            break
        for name, system in systems.items():
            kwargs = {}
            if name != "stock":
                verifier = sd.TwoLevelVerifier(args.budget, args.q_budget, gate="always")
                kwargs = dict(drafter=sd.NGramDrafter(), verifier=verifier, num_draft_tokens=args.num_draft_tokens)
            sync(device)
            t0 = time.perf_counter()
            out = sd.generate(system(), p[None], args.max_new_tokens, **kwargs)
            sync(device)
            seconds[name] += time.perf_counter() - t0
            outs[name].append(out.tokens[0])
            stats[name].append(kwargs["verifier"].stats.as_dict() if kwargs else out.stats.as_dict())
        prompts.append(p)
        print(f"prompt {i}: " + ", ".join(f"{n} {seconds[n]:.1f} s" for n in systems), flush=True)
    if not prompts:
        raise SystemExit(f"--budget-s {args.budget_s:g}: no prompt finished before the budget")

    checker = TokenForcingChecker(target, chunk_size=args.chunk_size, bucket_edges=())
    sync(device)
    t1 = time.perf_counter()
    null = checker.calibrate(prompts, outs["stock"])
    lossless = checker.check(prompts, outs["two-level"], null=null)
    faulty = checker.check(prompts, outs["faulty two-level"], null=null)
    sync(device)
    check_s = time.perf_counter() - t1
    identical = sum(torch.equal(a, b) for a, b in zip(outs["stock"], outs["two-level"]))
    q_passes = sum(s["q_passes"] for s in stats["two-level"])
    expected = lossless.verdict == "PASS" and faulty.verdict == "FAIL" and q_passes > 0

    result = {
        "benchmark": "forcing_two_level_gpu",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "settings": dict(vars(args)),
        "target": {"shape": args.shape, "dtype": args.dtype, "parameters": target.config.num_parameters()},
        "prompts_run": len(prompts),
        "times_s": {"build": build_s, **seconds, "forcing_checks": check_s, "total": time.perf_counter() - start},
        "two_level_stats": {name: stats[name] for name in ("two-level", "faulty two-level")},
        "two_level_vs_ar": {"identical_sequences": identical, "of": len(prompts)},
        "lossless_report": lossless.to_dict(max_listed=200),
        "faulty_report": faulty.to_dict(max_listed=200),
        "expected_outcome": expected,
    }
    path = write_json(
        Path(args.out) / ("forcing_two_level_smoke.json" if args.smoke else "forcing_two_level_gpu.json"), result, prov
    )

    print("\n== lossless candidate: two-level verification ==")
    print(lossless.table())
    print("\n== faulty candidate: exact pass reuses the Q logits on shared rows ==")
    print(faulty.table(max_events=5))
    print(f"\n{provenance_line(prov)}")
    print("| candidate | tokens | mismatches | rate | 95% CI | null rate | large-margin events | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rep in ((f"{args.dtype} two-level (lossless)", lossless), ("two-level + QChainHandOff", faulty)):
        print(
            f"| {name} | {rep.num_tokens} | {rep.num_mismatches} | {rep.mismatch_rate:.2e} | [{rep.ci95[0]:.1e}, {rep.ci95[1]:.1e}] | "
            f"{rep.null_rate:.2e} | {len(rep.large_margin_events)} | {rep.verdict} |"
        )
    print(
        f"two-level sequences identical to AR: {identical}/{len(prompts)}; Q passes {q_passes}; wall {result['times_s']['total']:.1f} s"
    )
    print(f"expected outcome: {'yes' if expected else 'NO'}; JSON written to {path}")
    return 0 if expected else 1


if __name__ == "__main__":
    sys.exit(main())
