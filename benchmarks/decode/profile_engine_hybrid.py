"""Where an engine pass on the packed hybrid goes: forward, commits and host work, split by pass kind.

Builds the Qwen3.5-4B-shaped hybrid (random bf16 weights, labelled so) under
:class:`~specdec.models.ragged_hybrid.RaggedHybridTarget` ``"packed"`` with CUDA graphs, runs ``--concurrency``
requests of ``--prompt-len`` +- 16 tokens through an :class:`~specdec.engine.Engine` (batched AR: no drafts;
spec: the ``specpilot-one-level`` oracle following the AR outputs, a chain of 15 drafts, no budget), once untimed
(captures the graphs) and once timed. Every ``engine.step()`` of the timed run is timed to a device sync and
classed as a prefill pass (some request still joining) or a decode pass; the decode passes run once more under
``cProfile`` (host functions by cumulative time) and ``torch.profiler`` (device kernel time a pass). Prints a table
and writes JSON.

Usage (GPU): ``python3 -m benchmarks.decode.profile_engine_hybrid --out $OUT/profile_engine_hybrid.json`` (~90 s).
CPU smoke: ``--smoke`` (a tiny float32 hybrid, static path, a few tokens).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time

import torch

from benchmarks.common import provenance, provenance_line, write_json
from benchmarks.decode.bench_hybrid import QWEN3_5_4B
from benchmarks.decode.bench_hybrid import SMOKE as TINY_HYBRID
from specdec.drafters import NGramDrafter
from specdec.drafters.oracle import PRESETS, OracleDrafter
from specdec.engine import Engine
from specdec.models.hybrid import random_hybrid_target
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.verify import ChainVerifier


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_engine(ragged, prompts, *, spec: bool, references, new_tokens: int):
    profile = PRESETS["specpilot-one-level"]
    made = iter(range(len(prompts)))

    def oracle():
        i = next(made)
        return OracleDrafter(profile, references=[references[i]], vocab_size=ragged.vocab_size, seed=i)

    engine = Engine(
        ragged,
        oracle if spec else NGramDrafter(),
        ChainVerifier(),
        max_batch=len(prompts),
        num_draft_tokens=profile.num_drafts if spec else 0,
    )
    ids = [engine.add_request(p, max_new_tokens=new_tokens) for p in prompts]
    return engine, ids


def joining(engine) -> bool:
    """Whether some request is still waiting or prefilling its prompt."""
    return bool(engine.waiting) or any(engine.request(r).prefilled < engine.request(r).prompt.numel() for r in engine.running)


def timed_steps(engine, device) -> list[dict]:
    """Every step of ``engine`` to completion: its wall ms (to a device sync), whether a request was joining, its rows."""
    steps = []
    while engine.has_work:
        prefill = joining(engine)
        sync(device)
        t0 = time.perf_counter()
        engine.step()
        sync(device)
        steps.append({"ms": (time.perf_counter() - t0) * 1e3, "prefill": prefill, "rows": engine.last_pass_rows})
    return steps


def summary(steps: list[dict]) -> dict:
    out = {}
    for kind in ("prefill", "decode"):
        chosen = [s for s in steps if s["prefill"] == (kind == "prefill")]
        ms = sorted(s["ms"] for s in chosen)
        out[kind] = {
            "passes": len(chosen),
            "ms_mean": sum(ms) / len(ms) if ms else None,
            "ms_median": ms[len(ms) // 2] if ms else None,
            "rows_mean": sum(s["rows"] for s in chosen) / len(chosen) if chosen else None,
        }
    return out


def profile_decode(make, device, *, decode_steps: int) -> dict:
    """Run an engine past its prefills, then ``decode_steps`` decode passes under cProfile and torch.profiler."""
    engine, _ = make()
    while engine.has_work and joining(engine):
        engine.step()
    sync(device)
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    prof = cProfile.Profile()
    ran = 0
    t0 = time.perf_counter()
    with torch.profiler.profile(activities=activities) as tprof:
        prof.enable()
        while engine.has_work and ran < decode_steps:
            engine.step()
            ran += 1
        sync(device)
        prof.disable()
    wall_ms = (time.perf_counter() - t0) * 1e3 / max(1, ran)
    stream = io.StringIO()
    pstats.Stats(prof, stream=stream).sort_stats("cumulative").print_stats(40)
    kernels = [e for e in tprof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    device_ms = sum(e.device_time for e in kernels) / 1e3 / max(1, ran)
    return {
        "passes": ran,
        "wall_ms_per_pass": wall_ms,
        "device_kernel_ms_per_pass": device_ms if kernels else None,
        "kernels_per_pass": len(kernels) / max(1, ran),
        "host_top_cumulative": stream.getvalue(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--decode-steps", type=int, default=8, help="decode passes profiled")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "profile_engine_hybrid.json"))
    args = ap.parse_args(argv)
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    cuda = torch.cuda.is_available() and not args.smoke
    device = torch.device("cuda" if cuda else "cpu")
    if args.smoke:
        args.concurrency, args.prompt_len, args.new_tokens, args.decode_steps = 2, 24, 6, 2
    cfg, dtype = (QWEN3_5_4B, torch.bfloat16) if cuda else (TINY_HYBRID, torch.float32)
    spread = min(16, args.prompt_len // 4)
    max_seq_len = args.prompt_len + spread + args.new_tokens + 24
    base = random_hybrid_target(cfg, dtype=dtype, device=device, max_seq_len=max_seq_len, seed=0, state_slots=2)
    ragged = RaggedHybridTarget(base, slots=args.concurrency, max_seq_len=max_seq_len, layout="packed")
    if cuda:
        ragged.enable_cuda_graphs()
    else:
        ragged.enable_static_path()
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(args.prompt_len - spread, args.prompt_len + spread + 1, (args.concurrency,), generator=gen).tolist()
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).to(device) for n in lengths]
    result = {
        "model": "qwen3.5-4b shape, random bf16 weights" if cuda else "tiny hybrid, float32",
        "graphs": ragged.uses_cuda_graphs,
        "concurrency": args.concurrency,
        "prompt_lengths": lengths,
        "new_tokens": args.new_tokens,
        "systems": {},
    }
    references = None
    for system in ("AR", "spec"):
        spec = system == "spec"

        def make(spec=spec):
            return make_engine(ragged, prompts, spec=spec, references=references, new_tokens=args.new_tokens)

        warm, ids = make()
        warm.run()  # untimed: captures the graphs
        if not spec:
            references = [torch.cat([p.cpu(), warm.output(r).cpu()]) for p, r in zip(prompts, ids)]
        engine, _ = make()
        steps = timed_steps(engine, device)
        entry = {
            "steps": steps,
            "summary": summary(steps),
            "decode_profile": profile_decode(make, device, decode_steps=args.decode_steps),
        }
        result["systems"][system] = entry
        print(f"\n{system}: host functions of {entry['decode_profile']['passes']} decode passes (cumulative)", flush=True)
        print("\n".join(entry["decode_profile"]["host_top_cumulative"].splitlines()[:45]), flush=True)
    print("\nsystem  kind     passes  ms mean  ms median  rows mean | decode profiled: wall ms  kernel ms  kernels")
    for system, entry in result["systems"].items():
        prof = entry["decode_profile"]
        for kind, s in entry["summary"].items():
            if s["passes"]:
                print(
                    f"{system:6s}  {kind:7s}  {s['passes']:6d}  {s['ms_mean']:7.2f}  {s['ms_median']:9.2f}  {s['rows_mean']:9.1f} | "
                    f"{prof['wall_ms_per_pass']:8.2f}  {prof['device_kernel_ms_per_pass'] or 0:9.2f}  {prof['kernels_per_pass']:7.0f}"
                )
    write_json(args.out, result, prov)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
