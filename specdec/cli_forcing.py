"""``python -m specdec forcing``: token-forcing check of speculative decoding on the real model.

Stock = greedy autoregressive decoding of SmolLM2-135M-Instruct; candidate = n-gram speculative
decoding of the same model; prompts = HumanEval. Both run in float32 on the CPU, where speculative
decoding is exactly lossless, so the check must pass; ``--inject-fault`` adds a candidate with a
planted logit bias (every 7th id from a chosen position on), which the check must reject.

The fault acts from ``--fault-after`` (default: the bucket edge, half the run), not from
``LogitBiasFault``'s default 2048, which a short CPU run never reaches: a self-test whose outputs do
not reach the fault's position would leave its stratum uncovered and prove nothing. The run refuses
such settings and reports the stratum's coverage.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from specdec.data import HUMANEVAL_PROBLEMS
from specdec.options import device_option

DEFAULT_FAULT_BIAS = 2.0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specdec forcing",
        description="Token-forcing check: n-gram speculative decoding (candidate) against AR decoding (stock) "
        "of SmolLM2-135M-Instruct on HumanEval prompts.",
    )
    parser.add_argument("--num-prompts", type=int, default=3, help="HumanEval problems to use (default 3)")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="tokens generated per prompt (default 96)")
    parser.add_argument("--num-draft-tokens", type=int, default=6, help="n-gram draft length (default 6)")
    parser.add_argument("--bucket-edge", type=int, default=None, help="position-bucket edge (default max_new_tokens // 2)")
    parser.add_argument("--chunk-size", type=int, default=256, help="teacher-forcing rows per forward (default 256)")
    parser.add_argument(
        "--inject-fault",
        action="store_true",
        help="also check a candidate with a +bias logit fault on every 7th id after the bucket edge (must FAIL)",
    )
    parser.add_argument(
        "--fault-bias",
        type=float,
        default=None,
        help=f"logit bias of the injected fault (default {DEFAULT_FAULT_BIAS})",
    )
    parser.add_argument(
        "--fault-after",
        type=int,
        default=None,
        help="generated position from which the injected fault acts (default: the bucket edge; LogitBiasFault's own default, 2048, is beyond a CPU run)",
    )
    parser.add_argument("--no-eos", action="store_true", help="do not stop at EOS")
    parser.add_argument(
        "--json",
        default=None,
        help="write the run as JSON here: settings, provenance, each system's stats and each candidate's report",
    )
    parser.add_argument("--plot", default=None, help="save the candidate's report plot (PNG) here")
    parser.add_argument("--device", default="cpu", help="device (default cpu)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the check; returns 0 when the lossless candidate's verdict is PASS (and the faulty one, if any,
    reaches its fault's stratum and FAILs)."""
    args = _parser().parse_args(argv)
    for name in ("num_prompts", "max_new_tokens", "chunk_size"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')}: expected >= 1, got {getattr(args, name)}")
    if args.num_draft_tokens < 1:  # 0 makes the speculative candidate plain AR: the self-test would prove nothing
        raise SystemExit(f"--num-draft-tokens: expected >= 1, got {args.num_draft_tokens}")
    edge = args.bucket_edge if args.bucket_edge is not None else max(1, args.max_new_tokens // 2)
    if not 1 <= edge < args.max_new_tokens:
        raise SystemExit(
            f"--bucket-edge: expected 1 <= bucket-edge < --max-new-tokens ({args.max_new_tokens}), got {edge}: the "
            "stratum past it would hold no token"
        )
    if args.num_prompts > HUMANEVAL_PROBLEMS:
        raise SystemExit(f"--num-prompts: expected at most {HUMANEVAL_PROBLEMS} (HumanEval's problems), got {args.num_prompts}")
    if not args.inject_fault and (args.fault_after is not None or args.fault_bias is not None):
        raise SystemExit("--fault-after, --fault-bias: set for the injected fault, but --inject-fault is not given")
    fault_bias = DEFAULT_FAULT_BIAS if args.fault_bias is None else args.fault_bias
    if not math.isfinite(fault_bias):
        raise SystemExit(f"--fault-bias: expected a finite number of logits, got {fault_bias}")
    device_option(args.device)
    for flag, path in (("--json", args.json), ("--plot", args.plot)):
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise SystemExit(f"{flag}: expected a file in an existing folder, got {path!r} (no folder {Path(path).parent})")
        if path is not None and Path(path).is_dir():
            raise SystemExit(f"{flag}: expected a file, got the folder {path!r}")
    fault_after = args.fault_after if args.fault_after is not None else edge
    if args.inject_fault and 0 < fault_after < edge:
        raise SystemExit(
            f"--fault-after: expected 0 or >= --bucket-edge ({edge}), got {fault_after}: the positions the fault acts on "
            "must be one stratum (pos >= fault-after, or all) for its coverage to be judged"
        )
    if args.inject_fault and not 0 <= fault_after < args.max_new_tokens:
        raise SystemExit(
            f"--fault-after: expected 0 <= fault-after < --max-new-tokens ({args.max_new_tokens}), got {fault_after}: "
            "the run would never reach the fault, and its stratum would not be covered"
        )

    provenance = _provenance(argv, args.device)  # read before the run: the code that runs it
    import specdec as sd
    from specdec import data
    from specdec.forcing import TokenForcingChecker
    from specdec.forcing.report import finite_json
    from specdec.testing.faults import LogitBiasFault

    print("specdec forcing: SmolLM2-135M-Instruct, HumanEval prompts, float32, greedy")
    print("stock = AR decoding; candidate = n-gram speculative decoding; every emitted token is scored against stock\n")
    t0 = time.perf_counter()
    tokenizer = data.smollm2_tokenizer()
    problems = data.humaneval_problems()[: args.num_prompts]
    prompts = [data.chat_prompt_ids(tokenizer, p["prompt"])[0].to(args.device) for p in problems]
    longest = max(p.numel() for p in prompts)
    target = data.smollm2_target(
        dtype=torch.float32, device=args.device, max_seq_len=longest + args.max_new_tokens + args.num_draft_tokens + 2
    )
    eos = None if args.no_eos else (target.config.eos_token_ids or None)
    print(f"model and {len(prompts)} prompts ready in {time.perf_counter() - t0:.1f} s\n")

    def run(system, drafter):
        start = time.perf_counter()
        outs, stats = [], sd.GenerationStats()
        for prompt in prompts:
            out = sd.generate(
                system,
                prompt[None],
                args.max_new_tokens,
                drafter=drafter,
                num_draft_tokens=args.num_draft_tokens,
                eos_token_id=eos,
            )
            outs.append(out.tokens[0])
            stats = stats + out.stats
        return outs, stats, time.perf_counter() - start

    stock_out, stock_stats, stock_s = run(target, None)
    print(f"stock (AR)            : {stock_stats.summary()}")
    cand_out, cand_stats, cand_s = run(target, sd.NGramDrafter(max_ngram=3))
    print(f"candidate (n-gram SD) : {cand_stats.summary()}")

    edges = sorted({edge, fault_after} - {0}) if args.inject_fault else [edge]  # fault_after is 0 or the last edge
    checker = TokenForcingChecker(target, chunk_size=args.chunk_size, bucket_edges=tuple(edges))
    null = checker.calibrate(prompts, stock_out, prompt_sets="humaneval")
    report = checker.check(prompts, cand_out, null=null, prompt_sets="humaneval")
    identical = sum(torch.equal(a.cpu(), b.cpu()) for a, b in zip(stock_out, cand_out))
    print(f"\nsequences identical to stock: {identical}/{len(prompts)}\n")
    print("candidate: n-gram speculative decoding (expected verdict: PASS)")
    print(report.table(tokenizer=tokenizer))
    record = {
        "provenance": provenance,
        "settings": {
            "num_prompts": args.num_prompts,
            "max_new_tokens": args.max_new_tokens,
            "num_draft_tokens": args.num_draft_tokens,
            "bucket_edges": list(edges),
            "chunk_size": args.chunk_size,
            "eos": eos is not None,
            "device": args.device,
            "inject_fault": args.inject_fault,
            "fault_after": fault_after if args.inject_fault else None,
            "fault_bias": fault_bias if args.inject_fault else None,
        },
        "stock": {"system": "AR decoding", "stats": stock_stats.as_dict()},
        "candidate": {
            "system": "n-gram speculative decoding",
            "stats": cand_stats.as_dict(),
            "report": report.to_dict(tokenizer=tokenizer),
        },
    }
    if args.plot:
        report.plot(args.plot)
        print(f"plot written to {args.plot}")
    issues = [] if report.verdict == "PASS" else [f"the lossless candidate's verdict is {report.verdict}, expected PASS"]
    summary = [f"lossless candidate: {report.verdict}"]

    if args.inject_fault:
        fault = LogitBiasFault(target, bias=fault_bias, every=7, after=fault_after)
        fault_out, fault_stats, _ = run(fault, sd.NGramDrafter(max_ngram=3))
        fault_report = checker.check(prompts, fault_out, null=null, prompt_sets="humaneval")
        stratum = fault_report.by_bucket[f"pos >= {fault_after}"] if fault_after > 0 else fault_report.strata[0]
        print(
            f"\nfaulty candidate: n-gram SD with a +{fault_bias:g} logit bias on every 7th id from generated position "
            f"{fault_after} (LogitBiasFault's default is 2048; lowered so that this {args.max_new_tokens}-token run covers it). "
            "Expected verdict: FAIL"
        )
        print(f"faulty candidate      : {fault_stats.summary()}")
        print(fault_report.table(tokenizer=tokenizer))
        record["faulty"] = {
            "system": f"n-gram speculative decoding, +{fault_bias:g} logit bias on every 7th id from position {fault_after}",
            "stats": fault_stats.as_dict(),
            "report": fault_report.to_dict(tokenizer=tokenizer),
        }
        coverage = f"covered by {stratum.num_tokens} tokens" if stratum.covered else "NOT COVERED"
        coverage = f"its stratum {stratum.name} {coverage}"
        summary.append(f"faulty candidate: {fault_report.verdict} ({coverage})")
        if not stratum.covered:
            issues.append(
                f"the faulty run never reached generated position {fault_after}: {stratum.name} is NOT COVERED, "
                "so the self-test proves nothing"
            )
        elif fault_report.verdict != "FAIL":
            issues.append(f"the faulty candidate's verdict is {fault_report.verdict}, expected FAIL")
    verdict = (
        ("self-test: NOT OK -- " + "; ".join(issues)) if issues else ("self-test: OK -- " + "; ".join(summary) + ", as expected")
    )
    if args.json:
        record["self_test"] = verdict
        Path(args.json).write_text(json.dumps(finite_json(record), indent=2, allow_nan=False))
        print(f"\nrun written to {args.json}")
    print("\n" + verdict)
    return 1 if issues else 0


def _provenance(argv: list[str] | None, device: str) -> dict:
    """Where the run comes from: versions, the commit when run from a git checkout, the command, the UTC date."""
    import datetime
    import platform
    import subprocess
    import sys

    import specdec

    def git(*args: str) -> str | None:
        try:
            run = subprocess.run(
                ["git", "-C", str(Path(specdec.__file__).parent), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return run.stdout.strip() if run.returncode == 0 else None

    commit = git("rev-parse", "HEAD") or None
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "specdec": specdec.__version__,
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
        "device": device,
        "command": "python -m specdec forcing " + " ".join(sys.argv[2:] if argv is None else argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
