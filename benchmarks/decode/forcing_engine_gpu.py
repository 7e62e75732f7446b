"""Batch invariance of the engine in bf16, judged by the token-forcing checker: 16 requests decoded together
against each decoded alone.

In bf16 a packed batch rounds differently from a request alone (a row's GEMM result depends on how many
rows share the call), so the engine's outputs may leave the alone outputs after a near-tie flip and
``torch.equal`` is not the test. The token-forcing checker is: it teacher-forces the stock target on each
request's engine output and compares the mismatch rate, stratified by generated position, with a null
calibrated on the stock system's own outputs, and counts large-margin mismatches. Checked:

1. lossless candidates pass: :class:`specdec.Engine` over the dense target, layout ``"packed"`` (one GEMM per
   linear layer over every request's rows, CUDA graphs), ``max_batch`` = the number of prompts, prompts of
   different lengths, n-gram drafter, ``num_draft_tokens`` 6; once with every draft verified and once with
   ``verify_budget="auto"`` over a :class:`~specdec.engine.budget.StepTimeTable` profiled on the ragged target;
2. a planted cross-talk fault fails, and only after its onset: the same engine on
   :class:`~specdec.testing.faults.SlotLogitBiasFault`, a ragged target that adds ``+2`` to every 7th
   vocabulary id of the logits of ONE slot's rows from that request's generated position ``after`` on. Its
   ``pos < after`` stratum must pass (rounding flips only, as in the null), its ``pos >= after`` stratum must
   fail, and every large-margin event must lie in the faulted request at ``pos >= after``. The late stratum
   pools all requests, so one biased request in 16 dilutes its mismatch rate: whether the rate rule fires
   there too is recorded (``late_rate_rule_failed``), and the faulted request's own mismatches from ``after``
   on are listed beside its null's (``per_request``).

The stock system is the batch-1 target decoding each prompt alone (``sd.generate``, AR). The target is
``forcing_gpu``'s: Qwen3-0.6B shapes, random weights, logits of standard deviation 4, bf16, CUDA graphs.
Each request's output is recorded against its stock output (identical or not, first divergence) and its
mismatches and large-margin events are counted per request. Equality with the alone output is recorded,
never required: the packed layout is not bitwise batch-invariant in any dtype.

Run (on the GPU machine, from the repository root):

    python -m benchmarks.decode.forcing_engine_gpu            # writes $OUT/forcing_engine_gpu.json
    python -m benchmarks.decode.forcing_engine_gpu --smoke    # tiny shapes, float32, CPU (same code path)

No engine case starts past ``--wall-budget-s``; the checks run on the cases that ran. Exit 0 iff the
expected outcome holds (``expected outcome: yes``): every lossless candidate that ran PASSES, the faulty one
FAILS as described in 2.
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
from benchmarks.decode.bench_engine import enable_graphs
from benchmarks.decode.forcing_gpu import SHAPES, build_target, decode, logit_profile, sync
from specdec.engine.budget import StepTimeTable
from specdec.forcing import TokenForcingChecker
from specdec.models.ragged import RaggedDenseTarget
from specdec.testing.faults import SlotLogitBiasFault

LOSSLESS, AUTO, FAULTY = "engine", "engine, budget auto", "engine + SlotLogitBiasFault"


def run_engine(ragged: RaggedDenseTarget, prompts, *, max_new_tokens, num_draft_tokens, verify_budget=None, step_time=None):
    """Every prompt through one engine of ``len(prompts)`` slots: ``(outputs [m] int64 each, info)``.

    ``info["slots"][i]`` is the slot request ``i`` ran in (every request joins at the first step).

    Example:
        >>> from specdec.testing import tiny_target
        >>> ragged = RaggedDenseTarget(tiny_target(seed=0), slots=2, layout="packed")
        >>> outs, info = run_engine(ragged, [torch.tensor([1, 2, 3]), torch.tensor([4])], max_new_tokens=5, num_draft_tokens=2)
        >>> [o.numel() for o in outs], info["slots"]
        ([5, 5], [0, 1])
    """
    engine = sd.Engine(
        ragged,
        sd.NGramDrafter(),
        max_batch=len(prompts),
        num_draft_tokens=num_draft_tokens,
        verify_budget=verify_budget,
        step_time=step_time,
    )
    ids = [engine.add_request(p, max_new_tokens=max_new_tokens) for p in prompts]
    sync(str(ragged.device))
    start = time.perf_counter()
    engine.step()
    slots = [engine.request(rid).slot for rid in ids]
    while engine.has_work:
        engine.step()
    sync(str(ragged.device))
    seconds = time.perf_counter() - start
    outputs = [engine.output(rid) for rid in ids]
    rounds = sum(engine.request(rid).rounds for rid in ids)
    new_tokens = sum(o.numel() for o in outputs)
    info = {
        "seconds": seconds,
        "new_tokens": new_tokens,
        "tokens_per_s": new_tokens / seconds,
        "target_passes": engine.target_passes,
        "ms_per_pass": 1e3 * seconds / max(1, engine.target_passes),
        "rounds": rounds,
        "accepted_per_round": sum(engine.request(rid).accepted for rid in ids) / max(1, rounds),
        "slots": slots,
    }
    return outputs, info


def per_request(report, stock_out, outputs, after: int) -> list[dict]:
    """Per request: identical to its stock output, first divergence, its candidate and null mismatches (all, and
    from generated position ``after`` on) and its large-margin events.

    Example:
        >>> from specdec.testing import tiny_target
        >>> stock = tiny_target(seed=0)
        >>> prompts = [torch.tensor([1, 2, 3])]
        >>> out = sd.generate(stock, prompts[0][None], 8).tokens[0]
        >>> report = TokenForcingChecker(stock, bucket_edges=(4,)).check(prompts, [out])
        >>> per_request(report, [out], [out], after=4)[0]["identical_to_stock"]
        True
    """
    rows = []
    for i, (ref, out) in enumerate(zip(stock_out, outputs)):
        ref, out = ref.cpu(), out.cpu()
        n = min(ref.numel(), out.numel())
        diff = (ref[:n] != out[:n]).nonzero()
        first = int(diff[0]) if diff.numel() else (None if ref.numel() == out.numel() else n)
        rows.append(
            {
                "identical_to_stock": first is None,
                "first_divergence": first,
                "mismatches": sum(e.sequence == i for e in report.mismatches),
                "mismatches_after": sum(e.sequence == i and e.position >= after for e in report.mismatches),
                "null_mismatches": sum(e.sequence == i for e in report.null_mismatch_events),
                "null_mismatches_after": sum(e.sequence == i and e.position >= after for e in report.null_mismatch_events),
                "large_margin_events": sum(e.sequence == i for e in report.large_margin_events),
            }
        )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, fp32, CPU, short outputs (checks the script runs)")
    parser.add_argument("--shape", default="qwen3-0.6b", choices=sorted(SHAPES))
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--num-prompts", type=int, default=16, help="requests, all in one engine (max_batch)")
    parser.add_argument("--min-prompt-len", type=int, default=16)
    parser.add_argument("--max-prompt-len", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=768)
    parser.add_argument(
        "--after", type=int, default=512, help="the fault acts from this generated position on; also the bucket edge"
    )
    parser.add_argument("--fault-slot", type=int, default=5, help="the slot (= request, in admission order) faulted")
    parser.add_argument("--bias", type=float, default=2.0)
    parser.add_argument("--every", type=int, default=7)
    parser.add_argument("--logit-std", type=float, default=4.0)
    parser.add_argument("--num-draft-tokens", type=int, default=6)
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument(
        "--no-graphs",
        action="store_true",
        help="no CUDA graphs: the stock target eager, the ragged targets on the eager static path",
    )
    parser.add_argument("--no-auto", action="store_true", help="skip the verify_budget='auto' candidate")
    parser.add_argument("--wall-budget-s", type=float, default=170.0, help="no engine case starts past this many seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args(argv)
    if args.smoke:
        args.shape, args.dtype, args.num_prompts, args.max_new_tokens, args.after = "smoke", "fp32", 3, 160, 64
        args.min_prompt_len, args.max_prompt_len, args.fault_slot = 4, 12, 1
    t_start = time.perf_counter()
    cuda = torch.cuda.is_available() and not args.smoke
    device = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    if not 1 <= args.after < args.max_new_tokens:
        raise ValueError(f"--after: expected 1 <= after < --max-new-tokens {args.max_new_tokens}, got {args.after}")
    if not 1 <= args.min_prompt_len <= args.max_prompt_len:
        raise ValueError(
            f"--min-prompt-len: expected 1 <= it <= --max-prompt-len {args.max_prompt_len}, got {args.min_prompt_len}"
        )
    if not 0 <= args.fault_slot < args.num_prompts:
        raise ValueError(f"--fault-slot: expected a slot in [0, {args.num_prompts}), got {args.fault_slot}")
    if args.num_prompts < 2:
        raise ValueError(f"--num-prompts: expected at least 2 (a batch), got {args.num_prompts}")

    prov = provenance(args.seed)
    print(provenance_line(prov), flush=True)
    k, n = args.num_draft_tokens, args.num_prompts
    max_seq_len = args.max_prompt_len + args.max_new_tokens + k + 8
    target = build_target(args.shape, args.logit_std, dtype, device, max_seq_len, args.seed)
    if not args.no_graphs:
        # decode steps (1 row) of the stock system replay CUDA graphs (on the CPU: the same static path, eagerly)
        (target.enable_cuda_graphs if cuda else target.enable_static_path)(buckets=(1, 2, 4, 8))
    times = {"build": time.perf_counter() - t_start}
    gen = torch.Generator().manual_seed(args.seed + 2)
    lengths = torch.randint(args.min_prompt_len, args.max_prompt_len + 1, (n,), generator=gen).tolist()
    prompts = [torch.randint(0, target.vocab_size, (m,), generator=gen).to(device) for m in lengths]
    print(
        f"target {args.shape} {args.dtype} on {device}: {target.config.num_parameters() / 1e6:.0f}M parameters, "
        f"built in {times['build']:.1f} s; {n} prompts of {min(lengths)}-{max(lengths)} tokens x {args.max_new_tokens} new",
        flush=True,
    )

    warm_graphs(target, prompts[0][None], (1, 2, 4, 8))  # a graph is captured at the first use of its bucket
    stock_out, stock_stats, times["stock_ar"] = decode(target, prompts, args.max_new_tokens, None, k, device)
    print(f"stock AR, each prompt alone: {stock_stats.summary()} ({times['stock_ar']:.1f} s)", flush=True)

    result = {
        "benchmark": "forcing_engine_gpu",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "settings": dict(vars(args)),
        "prompt_lengths": lengths,
        "candidates": {},
        "skipped": [],
    }
    outputs: dict[str, list[torch.Tensor]] = {}
    ragged = RaggedDenseTarget(target, slots=n, max_seq_len=max_seq_len, layout="packed")
    result["graphs"] = {LOSSLESS: enable_graphs(ragged, cuda, args.no_graphs)}
    engine_args = dict(max_new_tokens=args.max_new_tokens, num_draft_tokens=k)

    def start_case(name: str) -> bool:
        elapsed = time.perf_counter() - t_start
        if elapsed > args.wall_budget_s:
            result["skipped"].append(name)
            print(f"skipped (past --wall-budget-s {args.wall_budget_s:g} at {elapsed:.0f} s): {name}", flush=True)
            return False
        return True

    def timed_engine(system, **kwargs):
        # the same run once untimed first: the engine's graphs are keyed by row, request and span buckets that only a
        # run of the same requests reaches, and each is captured at its first use
        run_engine(system, prompts, **kwargs)
        return run_engine(system, prompts, **kwargs)

    def record(name: str, outs, info) -> None:
        outputs[name] = outs
        result["candidates"][name] = info
        times[name] = info["seconds"]
        print(
            f"{name:28s}: {info['tokens_per_s']:8.1f} tok/s, {info['target_passes']} passes, {info['ms_per_pass']:.2f} ms a pass, "
            f"{info['accepted_per_round']:.2f} accepted a round ({info['seconds']:.1f} s)",
            flush=True,
        )

    if start_case(LOSSLESS):
        record(LOSSLESS, *timed_engine(ragged, **engine_args))
    if start_case(FAULTY):
        fault = SlotLogitBiasFault(
            target,
            slots=n,
            slot=args.fault_slot,
            bias=args.bias,
            every=args.every,
            after=args.after,
            max_seq_len=max_seq_len,
            layout="packed",
        )
        result["graphs"][FAULTY] = enable_graphs(fault, cuda, args.no_graphs)
        record(FAULTY, *timed_engine(fault, **engine_args))
        del fault
    if args.no_auto:
        result["skipped"].append(AUTO)
    elif start_case(AUTO):
        t0 = time.perf_counter()
        # round sizes from every request verifying 1 row up to 8 rows; a full round has n * (k + 1) <= 8n rows
        table = StepTimeTable.profile(
            ragged,
            rows=tuple(n * m for m in (1, 2, 4, 8)),
            requests=n,
            prefix_len=args.max_prompt_len,
            reps=1 if args.smoke else 3,
            warmup=1,
        )
        times["step_time_profile"] = time.perf_counter() - t0
        result["step_time_ms"] = {"rows": list(table.rows), "ms": list(table.ms)}
        print(f"step time table (ragged target, {n} requests): {dict(zip(table.rows, table.ms))}", flush=True)
        record(AUTO, *timed_engine(ragged, verify_budget="auto", step_time=table, **engine_args))

    checker = TokenForcingChecker(target, chunk_size=args.chunk_size, bucket_edges=(args.after,))
    sync(device)
    t1 = time.perf_counter()
    null = checker.calibrate(prompts, stock_out)
    reports = {name: checker.check(prompts, outs, null=null) for name, outs in outputs.items()}
    sync(device)
    times["forcing_checks"] = time.perf_counter() - t1

    early, late = f"pos < {args.after}", f"pos >= {args.after}"
    verdicts = {}
    for name, rep in reports.items():
        rows = per_request(rep, stock_out, outputs[name], args.after)
        info = result["candidates"][name]
        info["identical_to_stock"] = sum(r["identical_to_stock"] for r in rows)
        info["first_divergence"] = [r["first_divergence"] for r in rows]
        info["per_request"] = rows
        info["report"] = rep.to_dict(max_listed=200)
        if name == FAULTY:
            faulted = info["slots"].index(args.fault_slot)
            info["faulted_request"] = faulted
            localized = all(e.sequence == faulted and e.position >= args.after for e in rep.large_margin_events)
            info["large_margin_events_in_faulted_request_after_onset"] = localized
            # before `after` the faulty system is the lossless one: rounding flips only, no verdict there; after it,
            # the late stratum fails (by its large-margin events, or the rate rule: one biased request in n dilutes
            # the pooled rate, so it is recorded, not required)
            info["late_rate_rule_failed"] = rep.by_bucket[late].rate_failed
            verdicts[name] = not rep.passed and rep.by_bucket[early].passed and not rep.by_bucket[late].passed and localized
        else:
            verdicts[name] = rep.passed
    expected = FAULTY in reports and LOSSLESS in reports and all(verdicts.values())
    profile = logit_profile(target, prompts[0], stock_out[0])
    times["total"] = time.perf_counter() - t_start
    result.update(
        target={
            "shape": args.shape,
            "dtype": args.dtype,
            "parameters": target.config.num_parameters(),
            "logits": profile,
            "distinct_token_fraction_per_output": [len(set(o.tolist())) / o.numel() for o in stock_out],
        },
        times_s=times,
        stock_stats=stock_stats.as_dict(),
        null={
            "tokens": null.num_tokens,
            "mismatches": null.num_mismatches,
            "tau": null.tau,
            "max_null_margin": null.max_null_margin,
        },
        verdict_as_expected=verdicts,
        expected_outcome=expected,
    )
    path = write_json(
        Path(args.out) / ("forcing_engine_gpu_smoke.json" if args.smoke else "forcing_engine_gpu.json"), result, prov
    )

    for name, rep in reports.items():
        print(f"\n== {name} ==")
        print(rep.table(max_events=5))
    print(f"\n{provenance_line(prov)}")
    for name in reports:
        print(f"first divergence from alone, {name}: {result['candidates'][name]['first_divergence']}")
    if FAULTY in reports:
        rep, info = reports[FAULTY], result["candidates"][FAULTY]
        print(
            f"faulty: {early} {rep.by_bucket[early].verdict}, {late} {rep.by_bucket[late].verdict}; large-margin events all in "
            f"the faulted request {info['faulted_request']} after the onset: {info['large_margin_events_in_faulted_request_after_onset']}; "
            f"late rate rule fired: {info['late_rate_rule_failed']}; faulted request from {args.after} on: "
            f"{info['per_request'][info['faulted_request']]['mismatches_after']} mismatches "
            f"(null {info['per_request'][info['faulted_request']]['null_mismatches_after']})"
        )
    print(
        f"\n{n} requests x {args.max_new_tokens} tokens, prompts {min(lengths)}-{max(lengths)}, {args.dtype}, packed, "
        f"n-gram k={k}; fault: +{args.bias:g} on every {args.every}th id, slot {args.fault_slot}, from position {args.after}"
    )
    print(
        "| candidate | tokens | mismatches | rate | 95% CI | null rate | large-margin events | identical to alone | verdict | as expected |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rep in reports.items():
        info = result["candidates"][name]
        print(
            f"| {name} | {rep.num_tokens} | {rep.num_mismatches} | {rep.mismatch_rate:.2e} | [{rep.ci95[0]:.1e}, {rep.ci95[1]:.1e}] | "
            f"{rep.null_rate:.2e} | {len(rep.large_margin_events)} | {info['identical_to_stock']}/{n} | "
            f"{'PASS' if rep.passed else 'FAIL'} | {'yes' if verdicts[name] else 'NO'} |"
        )
    print(f"skipped: {result['skipped'] or 'none'}; wall {times['total']:.1f} s")
    print(f"expected outcome: {'yes' if expected else 'NO'}; JSON written to {path}")
    return 0 if expected else 1


if __name__ == "__main__":
    sys.exit(main())
