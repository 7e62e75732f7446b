"""Parallel drafters at Qwen3-8B shape: draft forward cost against the target's AR step, and a full
speculative run with simulated acceptance.

Part 1: per-round draft time (feature ingestion of 5 committed rows + one block forward + the
drafting head) of random-weight DFlash (5 layers, block 16), DFlash2 (5 layers, block 8, selector
top-16 rank 256) and DSpark (5 layers, block 7, Markov rank 256) drafters for a Qwen3-8B-shaped bf16
target, next to the target's AR step (CUDA-graph replay). Taps: [1, 9, 17, 25, 33] (DeepSpec Qwen3-8B).

Part 2: greedy AR, then a speculative run with ``OracleDrafter`` at the DSpark Qwen3-8B GSM8K profile
(6.17 tokens/round, **simulated acceptance**), alone and wrapping the DSpark drafter (its forward runs
and costs time every round). Reported: speedup over AR measured in the same run, tokens per target
pass, and their ratio. Goal: ratio >= 0.85 at batch 1 (a round costs at most 1.18 AR steps).

Gate: a speculative run counts only if every round accepted exactly what the oracle planned, except
the one round where bf16 verify first leaves the AR reference (rounds after it propose nothing and
must accept nothing); otherwise its row is marked ``INVALID`` and no ratio is reported. Whether the
output equals the AR output is reported beside it (bf16 verify and AR steps may round differently;
greedy fp32 equality is tested on CPU in tests/test_dflash.py).

    python3 benchmarks/decode/bench_drafters.py --out $OUT/bench_drafters.json
    python3 benchmarks/decode/bench_drafters.py --smoke      # tiny shapes on the CPU: checks the script runs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import specdec as sd  # noqa: E402
from specdec.drafters.checkpoints import fixture_config, random_block_model  # noqa: E402
from specdec.drafters.dflash import DFlash2Drafter, DFlashDrafter  # noqa: E402
from specdec.drafters.dspark import DSparkDrafter  # noqa: E402
from specdec.drafters.oracle import PRESETS, OracleDrafter  # noqa: E402
from specdec.models import QWEN3_8B, random_target  # noqa: E402
from specdec.verify.sampling import SamplingConfig  # noqa: E402

TAPS = [1, 9, 17, 25, 33]
QWEN3_MASK = 151669
DRAFTERS = {
    "dflash-b16": (DFlashDrafter, "DFlashDraftModel", {"block_size": 16}),
    "dflash2-b8": (DFlash2Drafter, "DFlash2DraftModel", {"block_size": 8, "selector_rank": 256, "selector_top_k": 16}),
    "dspark-b7": (DSparkDrafter, "Qwen3DSparkModel", {"block_size": 7, "markov_rank": 256}),
}


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def cuda_ms(fn, iters: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    if not torch.cuda.is_available():
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def build_drafter(name: str, target, taps=TAPS, mask=QWEN3_MASK):
    cls, arch, sizes = DRAFTERS[name]
    cfg = fixture_config(arch, target, num_layers=5, target_layer_ids=taps, mask_token_id=mask,
                         intermediate_size=target.config.intermediate_size, **sizes)
    model = random_block_model(cfg, target, seed=1)
    return cls(model, target)


def time_draft(drafter, target, prefix: int, new_rows: int, iters: int) -> float:
    """Median ms of one propose with ``new_rows`` freshly committed feature rows at a ``prefix`` context."""
    ctx = torch.randint(0, target.vocab_size, (prefix,), device=target.device)
    taps = len(drafter.target_layer_ids)
    feats = torch.randn(prefix - 1, taps, target.config.hidden_size, device=target.device, dtype=target.dtype)
    greedy = SamplingConfig()
    drafter.reset()
    drafter.propose(ctx, drafter.max_draft_tokens, sampling=greedy, generator=None, target_hidden=feats)

    def step():
        drafter.cache.crop(prefix - 1 - new_rows)
        drafter.propose(ctx, drafter.max_draft_tokens, sampling=greedy, generator=None, target_hidden=feats[-new_rows:])

    return cuda_ms(step, iters)


def time_ar_step(target, prefix: int, iters: int) -> float:
    tok = torch.randint(0, target.vocab_size, (1, 1), device=target.device)
    target.reset()
    target(torch.randint(0, target.vocab_size, (1, prefix), device=target.device))
    target.commit(prefix)

    def step():
        target(tok)
        target.truncate(prefix)

    return cuda_ms(step, iters)


def timed_generate(target, prompt, n, **kw):
    sync()
    t0 = time.perf_counter()
    out = sd.generate(target, prompt, n, **kw)
    sync()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, to check the script runs")
    args = ap.parse_args()
    torch.manual_seed(0)
    taps, mask = TAPS, QWEN3_MASK
    if args.smoke:
        from specdec.models import TargetConfig

        cfg = TargetConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=4, num_heads=4,
                           num_kv_heads=2, head_dim=16, qk_norm=True, model_type="qwen3")
        device, dtype, taps, mask = torch.device("cpu"), torch.float32, [0, 1, 2], 511
        args.prefix, args.new_tokens, args.iters = 32, 48, 3
    else:
        cfg, device, dtype = QWEN3_8B, torch.device("cuda"), torch.bfloat16
    target = random_target(cfg, dtype=dtype, device=device, max_seq_len=args.prefix + args.new_tokens + 64)
    if device.type == "cuda":
        target.enable_cuda_graphs(buckets=(1, 2, 4, 8, 16), compile=True)
    gpu = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke)"
    results = {"gpu": gpu, "torch": torch.__version__, "prefix": args.prefix, "note": "random weights"}

    ar_ms = time_ar_step(target, args.prefix, args.iters)
    results["ar_step_ms"] = ar_ms
    drafters, rows = {}, []
    for name in DRAFTERS:
        drafter = build_drafter(name, target, taps, mask)
        drafters[name] = drafter
        ms = time_draft(drafter, target, args.prefix, new_rows=5, iters=args.iters)
        results[f"draft_ms/{name}"] = ms
        rows.append((name, ms, ms / ar_ms))
        if device.type == "cuda":
            torch.cuda.empty_cache()

    # Part 2: the same prompt decoded AR, then with simulated acceptance
    prompt = torch.randint(0, target.vocab_size, (1, args.prefix), device=device)
    sd.generate(target, prompt, 16)  # warm-up (graph capture of every bucket happened above)
    ar, ar_s = timed_generate(target, prompt, args.new_tokens)
    reference = torch.cat([prompt[0], ar.tokens[0]])
    profile = PRESETS["dspark-qwen3-8b-gsm8k"]
    spec_rows = []
    for label, wrap in (("oracle", None), ("oracle+dspark-b7", drafters["dspark-b7"])):
        oracle = OracleDrafter(profile, references=[reference], wrap=wrap, vocab_size=target.vocab_size, seed=0)
        sd.generate(target, prompt, 32, drafter=oracle, num_draft_tokens=profile.num_drafts)  # warm-up
        oracle = OracleDrafter(profile, references=[reference], wrap=wrap, vocab_size=target.vocab_size, seed=0)
        out, spec_s = timed_generate(target, prompt, args.new_tokens, drafter=oracle, num_draft_tokens=profile.num_drafts)
        # rounds after a bf16 divergence from the AR reference propose nothing (accepted 0)
        hist = out.stats.accepted_histogram
        planned = [0] * max(len(hist), max(oracle.planned, default=0) + 1)
        for m in oracle.planned:
            planned[m] += 1
        planned[0] += oracle.unmatched_rounds
        moved = sum(abs(a - b) for a, b in zip(planned, hist + [0] * (len(planned) - len(hist))))
        same = out.tokens[0] == ar.tokens[0]
        first_diff = None if bool(same.all()) else int((~same).nonzero()[0, 0])
        # exact plan, or one round moved (the round where bf16 verify first left the AR reference)
        valid = moved == 0 or (moved == 2 and first_diff is not None)
        speedup = ar_s / spec_s
        tpp = out.stats.tokens_per_target_pass
        entry = {
            "label": f"{label} ({oracle.label})",
            "valid": valid,
            "speedup_over_ar": speedup if valid else None,
            "tokens_per_target_pass": tpp,
            "ratio": speedup / tpp if valid else None,
            "ar_s": ar_s,
            "spec_s": spec_s,
            "wrapped_draft_s": oracle.wrapped_seconds,
            "unmatched_rounds": oracle.unmatched_rounds,
            "identical_to_ar": first_diff is None,
            "first_difference_at": first_diff,
            "stats": out.stats.as_dict(),
        }
        results[f"spec/{label}"] = entry
        spec_rows.append(entry)

    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
    shape = "tiny shape, fp32" if args.smoke else "Qwen3-8B shape, bf16"
    print(f"\n{results['gpu']}  {shape}, random weights, prefix {args.prefix}")
    print(f"{'drafter':<22}{'draft ms':>10}{'x AR step':>11}")
    print(f"{'target AR step':<22}{ar_ms:>10.3f}{1.0:>11.2f}")
    for name, ms, ratio in rows:
        print(f"{name:<22}{ms:>10.3f}{ratio:>11.2f}")
    print(f"\n{'run (simulated acceptance)':<46}{'speedup':>9}{'tok/pass':>10}{'ratio':>8}  goal >= 0.85")
    for e in spec_rows:
        if e["valid"]:
            same = "same as AR" if e["identical_to_ar"] else f"differs from AR at token {e['first_difference_at']}"
            print(f"{e['label']:<46}{e['speedup_over_ar']:>9.2f}{e['tokens_per_target_pass']:>10.2f}{e['ratio']:>8.3f}  {same}")
        else:
            print(f"{e['label']:<46}  INVALID (accepted counts differ from the oracle's plan)")


if __name__ == "__main__":
    main()
