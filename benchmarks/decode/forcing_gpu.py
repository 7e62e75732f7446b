"""Token forcing at realistic length and precision: bf16 on a GPU, 2048+ generated tokens.

Checks the two claims of the token-forcing checker where they matter:

1. a lossless system passes: n-gram speculative decoding in bf16 (whose verify passes round
   differently from plain decoding, so its sequences may diverge from AR after a near-tie flip);
2. the planted fault fails: the same speculative system on a target whose logits get +2 on every
   7th vocabulary id from generated position 2048 on (``LogitBiasFault(target, 2.0, 7, 2048)``),
   and it fails in the ``pos >= 2048`` stratum only.

The target has Qwen3-0.6B's shapes (28 layers, hidden 1024, vocab 151,936) with random weights
(trained weights are not available offline; exactness does not depend on training). Weights follow
``specdec.testing.tiny_hf_model``'s ``N(0, 1/fan_in)`` init and the LM head is rescaled so the
logits have standard deviation ``--logit-std`` (default 4): peaked enough that greedy outputs are
not flat-logit noise, flat enough that near-ties (where bf16 rounding flips the argmax) occur.
Prompts are random token ids. ``--shape qwen3-8b`` builds the lean Qwen3-8B-shaped target with
``specdec.models.random_target`` on the device (the same init, no transformers model), the one the
decode-step benchmarks time; ``--weight-format w12`` converts it to W12, so that every linear of every
pass runs the W12 CUDA kernels, and ``--num-draft-tokens 15 --graph-buckets 1,2,4,8,16`` makes the
speculative passes the 9-16 row verify steps (the JSON counts the verify passes by rows).

Run (on the GPU machine, from the repository root):

    python -m benchmarks.decode.forcing_gpu            # writes $OUT/forcing_gpu.json
    python -m benchmarks.decode.forcing_gpu --smoke    # tiny shapes on the CPU, a minute
    python -m benchmarks.decode.forcing_gpu --shape qwen3-8b --weight-format w12 --num-draft-tokens 15 \
        --graph-buckets 1,2,4,8,16                     # writes $OUT/forcing_gpu_qwen3-8b_w12.json

The verdict line ``expected outcome: yes`` means: lossless candidate PASS; faulty candidate FAIL, with
its ``pos < after`` stratum clean (rounding flips only, as in the null) and its ``pos >= after``
stratum failing the rate rule.
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
from specdec.forcing import TokenForcingChecker
from specdec.testing import tiny_hf_model
from specdec.testing.faults import LogitBiasFault

SHAPES = {
    # Qwen3-0.6B (config.json of Qwen/Qwen3-0.6B), untied head so it can be rescaled
    "qwen3-0.6b": dict(
        model_type="qwen3",
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        head_dim=128,
    ),
    "smoke": dict(
        model_type="qwen3",
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
    ),
}


# Shapes built as lean targets on the device by specdec.models.random_target (too large for a transformers model on the host).
LEAN_SHAPES = ("qwen3-8b",)


def build_target(shape: str, logit_std: float, dtype: torch.dtype, device: str, max_seq_len: int, seed: int):
    if shape in LEAN_SHAPES:
        from specdec.models import random_target
        from specdec.models.shapes import SHAPES as LEAN

        target = random_target(LEAN[shape], dtype=dtype, device=device, max_seq_len=max_seq_len, seed=seed)
        with torch.no_grad():
            # its head is N(0, 1 / hidden): logits of std ~1 after the final norm; scaled as the tiny models' below
            target.lm_head.weight.mul_(logit_std)
        return target
    cfg = dict(SHAPES[shape])
    model_type = cfg.pop("model_type")
    hf = tiny_hf_model(model_type, seed=seed, tie_word_embeddings=False, **cfg)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        # the final norm makes hidden rows unit-RMS, so N(0, s^2 / hidden) head weights give logits of std ~ s
        head = hf.lm_head.weight
        head.copy_(torch.randn(head.shape, generator=gen) * logit_std / head.shape[1] ** 0.5)
    return sd.load_target(hf, dtype=dtype, device=device, max_seq_len=max_seq_len, progress=False)


class CountingNGramDrafter(sd.NGramDrafter):
    """The n-gram drafter, counting the rows of the verify pass each proposal makes (its drafts + 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.verify_rows: dict[int, int] = {}

    def propose(self, context, max_tokens, *, sampling, generator):
        proposal = super().propose(context, max_tokens, sampling=sampling, generator=generator)
        rows = int(proposal.tokens.numel()) + 1
        self.verify_rows[rows] = self.verify_rows.get(rows, 0) + 1
        return proposal


def parse_buckets(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` -> ``(1, 2, 4, 8)``: positive, increasing row counts."""
    try:
        buckets = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"--graph-buckets: expected comma-separated row counts such as 1,2,4,8, got {text!r}") from None
    if not buckets or buckets[0] < 1 or list(buckets) != sorted(set(buckets)):
        raise SystemExit(f"--graph-buckets: expected increasing positive row counts, got {text!r}")
    return buckets


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def decode(system, prompts, max_new, drafter, k, device):
    sync(device)
    start = time.perf_counter()
    outs, stats = [], sd.GenerationStats()
    for p in prompts:
        out = sd.generate(system, p[None], max_new, drafter=drafter, num_draft_tokens=k)
        outs.append(out.tokens[0])
        stats = stats + out.stats
    sync(device)
    return outs, stats, time.perf_counter() - start


@torch.no_grad()
def logit_profile(target, prompt, output, rows: int = 512) -> dict:
    """Spread and top-1/top-2 gap of the stock logits over the first ``rows`` generated positions."""
    target.reset()
    seq = torch.cat([prompt, output[: rows - 1]])[None]
    logits = target(seq).logits[0, prompt.numel() - 1 :].float()
    target.reset()
    top2 = logits.topk(2, dim=-1).values
    gap = top2[:, 0] - top2[:, 1]
    q = torch.tensor([0.1, 0.5, 0.9], device=gap.device)
    return {
        "logit_std_mean": float(logits.std(-1).mean()),
        "top1_top2_gap_quantiles_10_50_90": [float(v) for v in gap.quantile(q)],
        "top_logit_mean": float(top2[:, 0].mean()),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny shapes, fp32 (bf16 for w12), CPU, short outputs (checks the script runs)"
    )
    parser.add_argument("--shape", default="qwen3-0.6b", choices=sorted((*SHAPES, *LEAN_SHAPES)))
    parser.add_argument(
        "--weight-format", default="bf16", choices=["bf16", "w12"], help="w12: the target's linears converted (bf16 only)"
    )
    parser.add_argument(
        "--graph-buckets", default="1,2,4,8", help="row buckets of the target's graphs; cover --num-draft-tokens + 1"
    )
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--num-prompts", type=int, default=2)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=2600)
    parser.add_argument(
        "--after", type=int, default=2048, help="the fault acts from this generated position on; also the bucket edge"
    )
    parser.add_argument("--bias", type=float, default=2.0)
    parser.add_argument("--every", type=int, default=7)
    parser.add_argument("--logit-std", type=float, default=4.0)
    parser.add_argument("--num-draft-tokens", type=int, default=6)
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)
    if args.smoke:
        args.shape, args.max_new_tokens, args.after, args.num_prompts = "smoke", 160, 96, 2
        args.dtype = "bf16" if args.weight_format == "w12" else "fp32"  # W12 holds bf16 weights
        args.device = args.device or "cpu"
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    if args.after >= args.max_new_tokens:
        raise SystemExit(f"--after {args.after} must be below --max-new-tokens {args.max_new_tokens}")
    if args.weight_format == "w12" and dtype != torch.bfloat16:
        raise SystemExit(f"--weight-format w12 stores bf16 weights exactly: expected --dtype bf16, got --dtype {args.dtype}")
    buckets = parse_buckets(args.graph_buckets)
    if buckets[-1] < args.num_draft_tokens + 1:
        raise SystemExit(
            f"--graph-buckets: the largest bucket must hold a verify pass of --num-draft-tokens + 1 = "
            f"{args.num_draft_tokens + 1} rows, got {buckets[-1]}"
        )

    prov = provenance(args.seed)
    t0 = time.perf_counter()
    max_seq_len = args.prompt_len + args.max_new_tokens + args.num_draft_tokens + 8
    target = build_target(args.shape, args.logit_std, dtype, device, max_seq_len, args.seed)
    bits_per_weight = None
    if args.weight_format == "w12":
        from specdec.formats import convert

        bits_per_weight = convert(target).bits_per_weight
    # decode steps (1 row) and n-gram verify steps (up to k + 1 rows) replay CUDA graphs (on the CPU: the same static
    # path, eagerly)
    (target.enable_cuda_graphs if device.startswith("cuda") else target.enable_static_path)(buckets=buckets)
    build_s = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(args.seed + 2)
    prompts = [torch.randint(0, target.vocab_size, (args.prompt_len,), generator=gen).to(device) for _ in range(args.num_prompts)]
    print(
        f"target {args.shape} {args.dtype} on {device}: {target.config.num_parameters() / 1e6:.0f}M parameters, built in {build_s:.1f} s",
        flush=True,
    )

    # every graph bucket once before the timed decodes (a graph is captured at the first use of its bucket)
    warm_graphs(target, prompts[0][None], buckets)
    stock_out, stock_stats, stock_s = decode(target, prompts, args.max_new_tokens, None, args.num_draft_tokens, device)
    print(f"stock AR          : {stock_stats.summary()}", flush=True)
    drafter = CountingNGramDrafter()
    spec_out, spec_stats, spec_s = decode(target, prompts, args.max_new_tokens, drafter, args.num_draft_tokens, device)
    print(f"speculative       : {spec_stats.summary()}", flush=True)
    verify_rows = dict(sorted(drafter.verify_rows.items()))
    print(f"verify passes by rows: {verify_rows}", flush=True)
    fault = LogitBiasFault(target, bias=args.bias, every=args.every, after=args.after)
    fault_out, fault_stats, fault_s = decode(
        fault, prompts, args.max_new_tokens, sd.NGramDrafter(), args.num_draft_tokens, device
    )
    print(f"faulty speculative: {fault_stats.summary()}", flush=True)

    checker = TokenForcingChecker(target, chunk_size=args.chunk_size, bucket_edges=(args.after,))
    sync(device)
    t1 = time.perf_counter()
    null = checker.calibrate(prompts, stock_out)
    lossless = checker.check(prompts, spec_out, null=null)
    faulty = checker.check(prompts, fault_out, null=null)
    sync(device)
    check_s = time.perf_counter() - t1

    identical = sum(torch.equal(a, b) for a, b in zip(stock_out, spec_out))
    first_divergence = []
    for a, b in zip(stock_out, spec_out):
        diff = (a != b).nonzero()
        first_divergence.append(int(diff[0]) if diff.numel() else None)
    early, late = f"pos < {args.after}", f"pos >= {args.after}"
    # before `after` the faulty system is the lossless one: rounding flips only, no verdict there
    expected = lossless.passed and not faulty.passed and faulty.by_bucket[early].passed and faulty.by_bucket[late].rate_failed
    profile = logit_profile(target, prompts[0], stock_out[0])
    distinct = [len(set(o.tolist())) / o.numel() for o in stock_out]

    print("\n== lossless candidate: n-gram speculative decoding ==")
    print(lossless.table())
    print(f"\n== faulty candidate: + {args.bias:g} on every {args.every}th id from position {args.after} ==")
    print(faulty.table(max_events=5))
    result = {
        "benchmark": "forcing_gpu",
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "settings": {k: v for k, v in vars(args).items()},
        "target": {
            "shape": args.shape,
            "dtype": args.dtype,
            "weight_format": args.weight_format,
            "w12_bits_per_weight": bits_per_weight,
            "graph_buckets": list(buckets),
            "parameters": target.config.num_parameters(),
            "logits": profile,
            "distinct_token_fraction_per_output": distinct,
        },
        "times_s": {
            "build": build_s,
            "stock_ar": stock_s,
            "speculative": spec_s,
            "faulty_speculative": fault_s,
            "forcing_checks": check_s,
        },
        "stats": {
            "stock_ar": stock_stats.as_dict(),
            "speculative": spec_stats.as_dict(),
            "faulty_speculative": fault_stats.as_dict(),
        },
        "speculative_vs_ar": {"identical_sequences": identical, "of": len(prompts), "first_divergence": first_divergence},
        "speculative_verify_passes_by_rows": verify_rows,
        "lossless_report": lossless.to_dict(max_listed=200),
        "faulty_report": faulty.to_dict(max_listed=200),
        "expected_outcome": expected,
    }
    stem = "forcing_gpu_smoke" if args.smoke else "forcing_gpu"
    if args.weight_format != "bf16" or (not args.smoke and args.shape != parser.get_default("shape")):
        stem += f"_{args.shape}_{args.weight_format}"
    path = write_json(Path(args.out) / f"{stem}.json", result, prov)

    print(f"\n{provenance_line(prov)}")
    print("| candidate | tokens | mismatches | rate | 95% CI | null rate | large-margin events | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rep in (
        ("bf16 speculative (lossless)" if dtype == torch.bfloat16 else "speculative (lossless)", lossless),
        ("speculative + LogitBiasFault", faulty),
    ):
        print(
            f"| {name} | {rep.num_tokens} | {rep.num_mismatches} | {rep.mismatch_rate:.2e} | [{rep.ci95[0]:.1e}, {rep.ci95[1]:.1e}] | "
            f"{rep.null_rate:.2e} | {len(rep.large_margin_events)} | {'PASS' if rep.passed else 'FAIL'} |"
        )
    print(
        f"speculative sequences identical to AR: {identical}/{len(prompts)} (first divergence {first_divergence}); "
        f"logit std {profile['logit_std_mean']:.2f}, top1-top2 gap median {profile['top1_top2_gap_quantiles_10_50_90'][1]:.3f}"
    )
    print(f"expected outcome: {'yes' if expected else 'NO'}; JSON written to {path}")
    return 0 if expected else 1


if __name__ == "__main__":
    sys.exit(main())
