"""Two-level verification against chain and tree verification at real shapes, random weights.

Question: how many tokens does one exact target pass emit with :class:`specdec.TwoLevelVerifier`, what
does a round cost stage by stage, and is it faster than one-level verification with the same drafter?

Shapes (``--shape``): ``qwen3-8b`` (dense) and ``qwen3.5-4b-hybrid`` (24 Gated DeltaNet + 8 attention
layers, ``QWEN3_5_4B`` of :mod:`benchmarks.decode.bench_hybrid`, built as that script builds it).
Acceptance is simulated (:class:`specdec.OracleDrafter`: the target's own greedy continuation with
misses drawn from a published profile), since random weights give a real drafter nothing to learn;
the Q pass is real: the target's 8-bit A+E weight view, whose argmax agreement with the exact weights
decides how far the Q chain reaches.

A variant (``--variants``) is ``<weights>-<Q storage>``:

* weights ``fp32`` / ``bf16``: plain float32 / bf16 weights; ``w12``: bf16 weights held as W12 planes
  (``specdec.formats.convert``), so the exact pass runs the W12 kernel and the Q view is the planes' A+E
  byte (8 of 12 bits);
* storage ``packed``: the Q view read as the 8-bit plane (W12 weights, bf16 weights on CUDA; float32
  weights have no 8-bit plane and read the view's values as float32); ``dense``: the view's values
  as plain weights of the target's dtype (the algorithm's gain without the byte saving).

Per variant: the time of one exact pass and one Q pass of ``--pass-rows`` rows beside the bytes of
linear weights each reads (``byte_ratio``, from the weight tensors; nominal 0.5 for bf16 packed, 0.67
for W12), then the decoding systems on the variants named by ``--system-variants``. With
``--alternate NAME=V1,V2``, the passes again under each value of the environment variable ``NAME`` in
turn, ``--alternate-rounds`` times in the same process, graphs captured again for each value
(``alternated`` in the JSON): a kernel setting compared without the spread between processes.

Exactness: float32 outputs must equal plain greedy decoding token for token (the script exits 1 if
one does not, after writing everything). bf16 / W12 outputs are compared and the result recorded
(row-count-dependent reductions flip near-tied random logits); so that a drifted run still sees its
profile, the oracle also knows the same system's warm-up output (``unmatched_rounds`` counts rounds
in which it knew neither). Times are wall clock of whole ``sd.generate`` calls after a warm-up call,
with the CUDA graph of every row bucket a system may use captured for both weight views beforehand
(``benchmarks.common.warm_graphs``); stage times come from a separate run with ``sync_stages=True``.

Run on a GPU machine: ``python -m benchmarks.decode.bench_two_level`` (writes ``$OUT/bench_two_level.json``).
CPU smoke test, same code paths at tiny shapes: ``python -m benchmarks.decode.bench_two_level --tiny``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from torch import nn

import specdec as sd
from benchmarks.common import (
    TINY_QWEN3,
    add_alternate_arguments,
    alternate_of,
    env_set,
    median_time_ms,
    provenance,
    provenance_line,
    warm_graphs,
    write_json,
)
from benchmarks.decode.bench_hybrid import QWEN3_5_4B, SMOKE
from specdec.contracts import Tree, VerifyPlan
from specdec.formats import W12Tensor, convert
from specdec.models import QWEN3_8B, DenseTarget
from specdec.models.base import DEFAULT_BUCKETS
from specdec.models.config import TargetConfig
from specdec.models.hybrid import random_hybrid_target
from specdec.models.weight_views import Q_STORAGES

TINY = TargetConfig(**TINY_QWEN3)

SHAPES = {"qwen3-8b": (QWEN3_8B, TINY), "qwen3.5-4b-hybrid": (QWEN3_5_4B, SMOKE)}  # (GPU shape, CPU smoke shape)
WEIGHTS = dict(fp32=(torch.float32, "bf16"), bf16=(torch.bfloat16, "bf16"), w12=(torch.bfloat16, "w12"))
NOMINAL_BYTE_RATIO = {"bf16-packed": 0.5, "w12-packed": 8 / 12}
SYSTEMS = ("chain", "tree", "two-level always", "two-level auto")
BASELINES = ("chain", "tree")


def parse_variant(name: str) -> tuple[str, str]:
    """``"w12-packed"`` -> ``("w12", "packed")``; ValueError naming the argument otherwise."""
    weights, _, storage = name.partition("-")
    if weights not in WEIGHTS or storage not in Q_STORAGES:
        raise ValueError(f"--variants: expected <{'|'.join(WEIGHTS)}>-<{'|'.join(Q_STORAGES)}>, got {name!r}")
    return weights, storage


def build_target(shape: str, tiny: bool, device, weights: str, storage: str, max_seq_len: int, graphs: bool):
    """A random-weight target of ``shape`` in the ``weights`` format, Q view held as ``storage``.

    ``graphs``: CUDA graphs; otherwise on the CPU the static path they capture, run eagerly (same body),
    and on CUDA plain eager forwards.
    """
    dtype, weight_format = WEIGHTS[weights]
    cfg = SHAPES[shape][1 if tiny else 0]
    torch.manual_seed(0)
    if shape == "qwen3.5-4b-hybrid":
        if weight_format != "bf16":
            raise ValueError(f"--variants: hybrid targets hold plain weights only (fp32 / bf16), got {weights!r}")
        # two state slots: graphs are keyed by slot, and nothing here rolls back further than one commit
        target = random_hybrid_target(cfg, dtype=dtype, device=device, max_seq_len=max_seq_len, seed=0, state_slots=2)
    else:
        target = DenseTarget(cfg, max_seq_len=max_seq_len, dtype=dtype, device=device).eval().requires_grad_(False)
    if weight_format == "w12":
        convert(target)
    target.set_q_view_storage(storage)
    if graphs:
        target.enable_cuda_graphs()
    elif target.device.type == "cpu":
        target.enable_static_path()
    return target


def linear_weight_bytes(target, storage: str) -> dict:
    """Bytes of ``nn.Linear`` weights one exact pass and one Q pass read (tied weights once).

    The embedding (one row read per token), norms and convolutions are left out. A packed Q weight
    reads the A+E plane and the row bases; anything else reads the view's values at the weights' width.
    """
    exact = q = 0
    seen: set[int] = set()
    for module in target.modules():
        if not isinstance(module, nn.Linear) or id(module.weight) in seen:
            continue
        w = module.weight
        seen.add(id(w))
        n, k = w.shape
        if isinstance(w, W12Tensor):
            exact += w.nbytes
            packed_q, width = w.ae.numel() + w.base.numel(), 2
        else:
            exact += w.numel() * w.element_size()
            packed = w.is_cuda and w.dtype == torch.bfloat16
            packed_q, width = (n * ((k + 7) // 8 * 8) + n if packed else None), w.element_size()
        q += packed_q if storage == "packed" and packed_q is not None else w.numel() * width
    return dict(exact_weight_bytes=exact, q_weight_bytes=q, byte_ratio=q / exact)


def run(target, prompt, tokens, *, drafter=None, verifier=None, k=0):
    """``(output, seconds)`` of one ``sd.generate`` call (synchronised)."""
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    extra = dict(drafter=drafter, verifier=verifier, num_draft_tokens=k) if drafter is not None else {}
    out = sd.generate(target, prompt, tokens, **extra)
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def pass_times(target, prompt, rows: int, reps: int) -> dict:
    """Median ms of one forward of a ``rows``-row chain plan with the exact weights and with the Q view."""
    target.reset()
    target(prompt)
    target.commit(prompt.shape[1])
    plan = VerifyPlan.for_tree(prompt[0, -1:], Tree.chain(prompt[0, : rows - 1]), prefix_len=target.length)

    def timed(view):
        def call():
            target.run_plan(plan, view=view)
            target.discard()

        return median_time_ms(call, reps, device=target.device)

    exact, q = timed("exact"), timed("q")
    return dict(rows=rows, exact_ms=exact, q_ms=q, q_over_exact=q / exact)


def alternated_pass_times(
    target, prompt, pass_rows: list[int], reps: int, name: str, values: list[str], rounds: int
) -> list[dict]:
    """The exact and Q pass times of ``pass_rows`` under each value of the environment variable ``name``, the values
    taken in turn ``rounds`` times in this one process, so that what differs between processes (the spread of one
    pass's time between two runs of the same code) does not enter a comparison of the values. A target with CUDA
    graphs captures them again for every value (a graph keeps the kernels it was captured with). The variable is
    put back as it was, and the graphs captured again under it, before returning."""
    out = []
    try:
        for round_ in range(rounds):
            for value in values:
                with env_set(name, value):
                    if target.uses_cuda_graphs:
                        target.enable_cuda_graphs()  # empties the cache: the next passes capture under `value`
                    for rows in pass_rows:
                        out.append(dict(pass_times(target, prompt, rows, reps), env=name, value=value, round=round_))
    finally:
        if target.uses_cuda_graphs:
            target.enable_cuda_graphs()
    return out


def make_verifier(system: str, budget: int, k: int, sync_stages: bool = False):
    if system == "chain":
        return sd.ChainVerifier()
    if system == "tree":
        return sd.TreeVerifier(budget)
    gate = system.split()[-1]
    return sd.TwoLevelVerifier(budget, max(budget, k), gate=gate, sync_stages=sync_stages)


def measure_system(target, prompt, tokens, reference, profile, system: str, budget: int) -> dict:
    """One system on one profile: warm-up, timed run, and (two-level) a stage-synchronised run."""
    k = profile.num_drafts
    vocab = target.vocab_size

    def oracle(extra=()):
        return sd.OracleDrafter(profile, references=[reference, *extra], vocab_size=vocab, seed=1)

    warm, _ = run(target, prompt, tokens, drafter=oracle(), verifier=make_verifier(system, budget, k), k=k)
    own = torch.cat([prompt[0], warm.tokens[0]]).cpu()  # the system's own greedy continuation (bf16 drift)
    verifier, drafter = make_verifier(system, budget, k), oracle([own])
    out, secs = run(target, prompt, tokens, drafter=drafter, verifier=verifier, k=k)
    st = out.stats
    rounds = max(1, st.rounds)
    row = dict(
        system=system,
        equal_to_ar=bool(torch.equal(out.tokens[0].cpu(), reference[prompt.shape[1] :])),
        unmatched_rounds=drafter.unmatched_rounds,
        new_tokens=int(st.new_tokens),
        exact_passes=int(st.target_passes) - 1,
        tokens_per_exact_pass=st.new_tokens / max(1, st.target_passes - 1),
        seconds=secs,
        rounds=int(st.rounds),
        round_ms=1e3 * secs / rounds,
        draft_ms_per_round=1e3 * st.draft_s / rounds,
        verify_ms_per_round=1e3 * st.verify_s / rounds,
    )
    if isinstance(verifier, sd.TwoLevelVerifier):
        staged = make_verifier(system, budget, k, sync_stages=True)
        out2, _ = run(target, prompt, tokens, drafter=oracle([own]), verifier=staged, k=k)
        row["stats"] = verifier.stats.as_dict()
        row["stage_seconds_synced"] = staged.stats.seconds
        row["draft1_seconds_synced_run"] = out2.stats.draft_s
        n = max(1, staged.stats.rounds)
        row["stage_ms_per_round_synced"] = {
            "draft1": 1e3 * out2.stats.draft_s / n,
            **{stage: 1e3 * s / n for stage, s in staged.stats.seconds.items()},
        }
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny shapes, same code paths")
    ap.add_argument("--shape", default="qwen3-8b", choices=sorted(SHAPES))
    ap.add_argument("--tokens", type=int, default=128, help="new tokens per generate call")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--profiles", default="specpilot-one-level,dspark-qwen3-8b-gsm8k", help="OracleDrafter presets, or 'none'")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"subset of {SYSTEMS}")
    ap.add_argument("--budget", type=int, default=64, help="exact-pass tree nodes (two-level) / tree budget (tree)")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="with --storages, when no --variants")
    ap.add_argument("--storages", default="packed,dense", help="Q-view storages, when no --variants")
    ap.add_argument("--variants", default=None, help="comma list of <fp32|bf16|w12>-<packed|dense>; overrides --dtype/--storages")
    ap.add_argument("--system-variants", default=None, help="variants that run the decoding systems (default: all)")
    ap.add_argument("--pass-rows", default="16,65", help="row counts of the timed single passes")
    ap.add_argument("--reps", type=int, default=20)
    add_alternate_arguments(ap, "the passes timed")
    ap.add_argument("--budget-s", type=float, default=0.0, help="wall-clock budget: no new case starts past it (0: none)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_two_level.json"))
    args = ap.parse_args(argv)

    start = time.perf_counter()
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    cuda = torch.cuda.is_available() and not args.tiny
    device = torch.device("cuda" if cuda else "cpu")
    if args.variants is None:
        tag = "bf16" if args.dtype == "bfloat16" else "fp32"
        args.variants = ",".join(f"{tag}-{s}" for s in args.storages.split(","))
    variants = args.variants.split(",")
    for v in variants:
        parse_variant(v)
    system_variants = variants if args.system_variants is None else args.system_variants.split(",")
    if not set(system_variants) <= set(variants):
        raise ValueError(f"--system-variants: expected a subset of --variants {variants}, got {system_variants}")
    systems = args.systems.split(",")
    if not set(systems) <= set(SYSTEMS):
        raise ValueError(f"--systems: expected a subset of {SYSTEMS}, got {systems}")
    profiles = [] if args.profiles == "none" else args.profiles.split(",")
    for name in profiles:
        if name not in sd.drafters.oracle.PRESETS:
            raise ValueError(f"--profiles: expected presets of {sorted(sd.drafters.oracle.PRESETS)} or 'none', got {name!r}")
    pass_rows = [int(r) for r in args.pass_rows.split(",")]
    alternate = alternate_of(ap, args)
    if args.tiny:
        args.tokens, args.prompt_len, args.reps = min(args.tokens, 24), min(args.prompt_len, 16), min(args.reps, 2)
        pass_rows = [min(r, 9) for r in pass_rows]

    def over_budget() -> bool:
        return args.budget_s > 0 and time.perf_counter() - start > args.budget_s

    max_seq_len = args.prompt_len + args.tokens + 2 * args.budget + 64
    vocab = SHAPES[args.shape][0 if cuda else 1].vocab_size
    prompt = torch.randint(0, vocab, (1, args.prompt_len), generator=torch.Generator().manual_seed(0)).to(device)
    result = dict(
        model=args.shape if cuda else f"{args.shape} (tiny stand-in)",
        device=str(device),
        label=sd.OracleDrafter.label,
        budget=args.budget,
        tokens=args.tokens,
        prompt_len=args.prompt_len,
        variants=variants,
        pass_times=[],
        alternated=[],
        warmed_rows={},
        ar_seconds={},
        rows=[],
        skipped=[],
        errors=[],
    )

    def save():
        write_json(args.out, result, prov)  # after each case: a run cut short keeps what it measured

    # phase 1, per variant: target, AR reference, single-pass times (cheap, and the Q/exact ratios come first)
    targets, references = {}, {}
    for variant in variants:
        if over_budget():
            result["skipped"].append(dict(variant=variant, what="target, AR and pass times"))
            continue
        weights, storage = parse_variant(variant)
        # CUDA graphs first; should a variant fail under them, it is recorded and retried eagerly once
        for graphs in (True, False) if cuda else (False,):
            try:
                target = build_target(args.shape, not cuda, device, weights, storage, max_seq_len, graphs=graphs)
                run(target, prompt, args.tokens)  # warm-up: graphs captured
                ar, ar_s = run(target, prompt, args.tokens)
                bytes_read = linear_weight_bytes(target, storage)
                timings = [pass_times(target, prompt, rows, args.reps) for rows in pass_rows]
                alternated = (
                    alternated_pass_times(target, prompt, pass_rows, args.reps, *alternate, args.alternate_rounds)
                    if alternate
                    else []
                )
                break
            except Exception as exc:  # recorded and reported; the other variants still run
                target = None
                stage = f"build / AR / pass times ({'CUDA graphs' if graphs else 'eager' if cuda else 'CPU'})"
                result["errors"].append(dict(variant=variant, stage=stage, error=f"{type(exc).__name__}: {exc}"))
                print(f"[{variant}] ERROR in {stage}: {type(exc).__name__}: {exc}", flush=True)
                if cuda:
                    torch.cuda.empty_cache()
                save()
        if target is None:
            continue
        for timing in timings:
            timing.update(variant=variant, graphs=graphs, nominal_byte_ratio=NOMINAL_BYTE_RATIO.get(variant, 1.0), **bytes_read)
            result["pass_times"].append(timing)
            print(
                f"[{variant}] {timing['rows']}-row pass: exact {timing['exact_ms']:.3f} ms, Q {timing['q_ms']:.3f} ms "
                f"(x{timing['q_over_exact']:.2f}; bytes x{bytes_read['byte_ratio']:.3f})",
                flush=True,
            )
        for timing in alternated:
            timing.update(variant=variant, graphs=graphs)
            result["alternated"].append(timing)
        result["ar_seconds"][variant] = ar_s
        print(f"[{variant}] AR {args.tokens / ar_s:.1f} tok/s", flush=True)
        references[variant] = torch.cat([prompt[0], ar.tokens[0]]).cpu()
        if variant in system_variants and profiles:
            targets[variant] = target
        else:
            del target
            if cuda:
                torch.cuda.empty_cache()
        save()

    # phase 2: the decoding systems; chain and tree once per weight format
    baselines_done: set[str] = set()
    for variant, target in targets.items():
        weights, storage = parse_variant(variant)
        # a graph is captured at the first use of each (row bucket, view): every bucket up to the widest pass, first
        widest = max(args.budget, *(sd.drafters.oracle.PRESETS[name].num_drafts for name in profiles)) + 1
        top = next((b for b in DEFAULT_BUCKETS if b >= widest), DEFAULT_BUCKETS[-1])
        rows = [b for b in DEFAULT_BUCKETS if b <= top]
        result["warmed_rows"][variant] = warm_graphs(target, prompt, rows, views=("exact", "q"))
        for name in profiles:
            profile = sd.drafters.oracle.PRESETS[name]
            for system in systems:
                if system in BASELINES and (weights, name) in baselines_done:
                    continue
                if over_budget():
                    result["skipped"].append(dict(variant=variant, profile=name, system=system))
                    continue
                try:
                    row = measure_system(target, prompt, args.tokens, references[variant], profile, system, args.budget)
                except Exception as exc:
                    result["errors"].append(
                        dict(variant=variant, profile=name, system=system, error=f"{type(exc).__name__}: {exc}")
                    )
                    print(f"[{variant}] {name} {system} ERROR {type(exc).__name__}: {exc}", flush=True)
                    save()
                    continue
                row.update(
                    variant=variant,
                    weights=weights,
                    storage=storage,
                    profile=name,
                    profile_tokens_per_round=profile.tokens_per_round,
                    speedup_vs_ar=result["ar_seconds"][variant] / row["seconds"],
                )
                result["rows"].append(row)
                print(
                    f"[{variant}] {name:28s} {system:18s} tok/pass {row['tokens_per_exact_pass']:5.2f}  "
                    f"x AR {row['speedup_vs_ar']:.2f}  equal {row['equal_to_ar']}  unmatched {row['unmatched_rounds']}",
                    flush=True,
                )
                save()
            baselines_done.add((weights, name))
        del target
        if cuda:
            torch.cuda.empty_cache()
    targets.clear()

    rows = result["rows"]
    for row in rows:
        if row["system"].startswith("two-level"):
            for base in rows:
                if base["profile"] == row["profile"] and base["weights"] == row["weights"] and base["system"] in BASELINES:
                    row[f"tokens_per_pass_over_{base['system']}"] = row["tokens_per_exact_pass"] / base["tokens_per_exact_pass"]
                    row[f"speedup_over_{base['system']}"] = base["seconds"] / row["seconds"]
    exact_failures = [r for r in rows if r["weights"] == "fp32" and not r["equal_to_ar"]]
    result["float32_all_equal_to_ar"] = not exact_failures
    result["wall_s"] = time.perf_counter() - start
    save()

    print(f"\n{provenance_line(prov)}")
    print("variant        rows  exact ms    Q ms   Q/exact  bytes Q/exact")
    for t in result["pass_times"]:
        print(
            f"{t['variant']:13s} {t['rows']:5d} {t['exact_ms']:9.3f} {t['q_ms']:7.3f} {t['q_over_exact']:8.2f}  {t['byte_ratio']:8.3f}"
        )
    if alternate:
        name, values = alternate
        print(f"\nin one process, {args.alternate_rounds} turns: median ms (each turn's)")
        print(f"variant        rows  {name:28s} exact ms                  Q ms")
        for variant in variants:
            for n_rows in pass_rows:
                for value in values:
                    got = [t for t in result["alternated"] if (t["variant"], t["rows"], t["value"]) == (variant, n_rows, value)]
                    if got:
                        cells = []
                        for key in ("exact_ms", "q_ms"):
                            times = [t[key] for t in got]
                            cells.append(f"{statistics.median(times):7.3f} ({' '.join(f'{x:.3f}' for x in times)})")
                        print(f"{variant:13s} {n_rows:5d}  {value:28s} {cells[0]}  {cells[1]}")
    print("\nvariant       system             profile                     tok/pass  vs chain  x AR  x tree (time)  equal")
    for row in rows:
        print(
            f"{row['variant']:13s} {row['system']:18s} {row['profile']:27s} {row['tokens_per_exact_pass']:7.2f}  "
            f"{row.get('tokens_per_pass_over_chain', 1.0):7.2f} {row['speedup_vs_ar']:5.2f}  "
            f"{row.get('speedup_over_tree', 1.0):7.2f}        {row['equal_to_ar']}"
        )
    for s in result["skipped"]:
        print(f"skipped (past --budget-s {args.budget_s:g}): {s}")
    for e in result["errors"]:
        print(f"ERROR: {e}")
    if exact_failures:
        print(f"FAIL: {len(exact_failures)} float32 rows differ from AR", flush=True)
    return 1 if exact_failures or result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
