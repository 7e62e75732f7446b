"""A model of the engine's verify budget: real rounds on a tiny target, each pass charged a measured step-time table.

Question: at a given concurrency, does the global verify budget (``verify_budget="auto"``) beat verifying every
draft, and does pooling acceptance estimates across requests help, when each forward costs what the H200 measured?
The engine runs for real (tiny float32 target on the CPU, oracle drafter with simulated acceptance, per-request
seeds), so rounds, acceptance, allocations and tails are the engine's own; only time is modelled: each forward
of ``R`` rows is charged ``T(R) + host_ms`` from the step-time table of a committed ``bench_engine`` JSON (rows past
the table's last entry scale linearly). Every speculative output is checked equal to AR.

This is a model, not a measurement: it leaves out how host work grows with draft rows and requests.

Run (repository root): ``python -m benchmarks.decode.model_engine_budget --requests 64`` (CPU, about a minute;
prints a table, writes ``$OUT/model_engine_budget.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from benchmarks.common import TINY_QWEN3, provenance, provenance_line, write_json
from specdec.drafters import NGramDrafter
from specdec.drafters.oracle import PRESETS, OracleDrafter
from specdec.engine import Engine
from specdec.engine.budget import StepTimeTable
from specdec.models import DenseTarget
from specdec.models.config import TargetConfig
from specdec.models.ragged import RaggedDenseTarget


def charged_ms(table: StepTimeTable, rows: int, host_ms: float) -> float:
    """Modelled milliseconds of one forward of ``rows`` rows: the table (linear past its end) plus host work.

    Example:
        >>> charged_ms(StepTimeTable(rows=(16, 256), ms=(10.0, 15.0)), 512, 1.0)
        31.0
    """
    last_rows, last_ms = table.rows[-1], table.ms[-1]
    return (table(rows) if rows <= last_rows else last_ms * rows / last_rows) + host_ms


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=64, help="requests decoded through the slots")
    ap.add_argument("--concurrency", type=int, default=16, help="engine slots")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--profile", default="specpilot-one-level", choices=sorted(PRESETS))
    ap.add_argument("--table-from", default="benchmarks/results/bench_engine_h200_2026-12-02_run5.json")
    ap.add_argument("--host-ms", type=float, default=1.8, help="host work charged to every forward")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "model_engine_budget.json"))
    args = ap.parse_args(argv)
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    if args.requests < args.concurrency:
        raise ValueError(f"--requests: expected at least --concurrency {args.concurrency}, got {args.requests}")
    run = json.loads(Path(args.table_from).read_text())
    row = next(r for r in run["rows"] if r["layout"] == "packed" and r["concurrency"] == args.concurrency)
    table = StepTimeTable(rows=tuple(row["step_time_ms"]["rows"]), ms=tuple(row["step_time_ms"]["ms"]))
    budget_table = StepTimeTable(rows=table.rows, ms=tuple(m + args.host_ms for m in table.ms))

    cfg = TargetConfig(**TINY_QWEN3)
    torch.manual_seed(0)
    profile = PRESETS[args.profile]
    max_len = 64 + args.new_tokens + profile.num_drafts + 8
    dense = DenseTarget(cfg, max_seq_len=max_len, dtype=torch.float32).eval().requires_grad_(False)
    ragged = RaggedDenseTarget(dense, slots=args.concurrency, max_seq_len=max_len, layout="packed")
    ragged.enable_static_path()
    gen = torch.Generator().manual_seed(1)
    lengths = torch.randint(20, 60, (args.requests,), generator=gen).tolist()
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in lengths]
    rows_per_pass: list[int] = []
    forward = ragged.forward

    def counted(requests, **kwargs):
        rows_per_pass.append(sum(r.tokens.shape[1] for r in requests))
        return forward(requests, **kwargs)

    ragged.forward = counted

    def decode(drafter, k, budget=None, pooled=True):
        rows_per_pass.clear()
        engine = Engine(
            ragged,
            drafter,
            max_batch=args.concurrency,
            num_draft_tokens=k,
            verify_budget=budget,
            step_time=budget_table if budget else None,
            pooled_acceptance=pooled,
        )
        ids = [engine.add_request(p, max_new_tokens=args.new_tokens) for p in prompts]
        engine.run()
        tokens = [engine.output(i) for i in ids]
        ms = sum(charged_ms(table, r, args.host_ms) for r in rows_per_pass)
        return tokens, ms, list(rows_per_pass)

    ar, ar_ms, ar_rows = decode(NGramDrafter(), 0)
    references = [torch.cat([p, t]) for p, t in zip(prompts, ar)]

    def oracles():
        made = iter(range(len(prompts)))

        def make():
            i = next(made)
            return OracleDrafter(profile, references=[references[i]], vocab_size=cfg.vocab_size, seed=i)

        return make

    total = sum(t.numel() for t in ar)
    print(
        f"{args.requests} requests x {args.new_tokens} tokens through {args.concurrency} slots; table {Path(args.table_from).name}"
    )
    print("system               passes  rows/pass  modelled ms  tok/s  x AR  = AR")
    print(
        f"{'AR':20s} {len(ar_rows):6d}  {sum(ar_rows) / len(ar_rows):9.0f}  {ar_ms:11.0f}  {total / ar_ms * 1e3:5.0f}  1.00  True"
    )
    failed = False
    result = dict(
        settings=vars(args),
        step_time_ms=dict(rows=list(table.rows), ms=list(table.ms)),
        systems=[dict(system="AR", passes=len(ar_rows), rows_per_pass=sum(ar_rows) / len(ar_rows), modelled_ms=ar_ms)],
    )
    for name, budget, pooled in (
        ("budget off", None, True),
        ("budget auto, own", "auto", False),
        ("budget auto, pooled", "auto", True),
    ):
        tokens, ms, rows = decode(oracles(), profile.num_drafts, budget, pooled)
        equal = all(torch.equal(a, b) for a, b in zip(tokens, ar))
        failed = failed or not equal
        print(
            f"{name:20s} {len(rows):6d}  {sum(rows) / len(rows):9.0f}  {ms:11.0f}  {total / ms * 1e3:5.0f}  {ar_ms / ms:4.2f}  {equal}"
        )
        result["systems"].append(
            dict(
                system=name,
                passes=len(rows),
                rows_per_pass=sum(rows) / len(rows),
                modelled_ms=ms,
                x_ar=ar_ms / ms,
                equal_to_ar=equal,
            )
        )
    write_json(Path(args.out), result, prov)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
