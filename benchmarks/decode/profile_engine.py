"""Where an engine pass goes: the target forward, and the rest (host work, kernels outside the forward, waits).

Builds a packed ragged target with CUDA graphs (``--model qwen3-8b``: the dense Qwen3-8B shape, random bf16
weights with a planted successor rule, :func:`specdec.models.plant_successor_rule`, as ``bench_engine``'s goal
cases, so that no bf16 rounding of a batch shape moves the greedy continuation; ``--model qwen3.5-4b``: the
Qwen3.5-4B-shaped hybrid, the same way), runs ``--concurrency`` requests
of ``--prompt-len`` +- 16 tokens through an :class:`~specdec.engine.Engine` (batched AR: no drafts; spec: the
``specpilot-one-level`` oracle following the AR outputs, a chain of its drafts; ``--budget auto``: the global verify
budget over a step-time table profiled first), once untimed (captures the graphs) and once timed. Every
``engine.step()`` of the timed run is timed to a device sync, its target forward between two more syncs, and classed
as a prefill pass (some request still joining) or a decode pass. The decode passes then run once more under
``cProfile`` (host functions by own and by cumulative time, the target's forward listed apart) and
``torch.profiler`` (device kernel time a pass, and the host-side table by self CPU time: the CUDA runtime calls,
waits in ``cudaStreamSynchronize`` or a blocking copy among them). Prints a table and writes JSON.

Usage (GPU): ``python3 -m benchmarks.decode.profile_engine --out $OUT/profile_engine.json`` (~90 s;
``--model qwen3.5-4b`` for the hybrid). CPU smoke: ``--smoke`` (a tiny float32 model, static path, a few tokens).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time

import torch

from benchmarks.common import TINY_QWEN3, provenance, provenance_line, write_json
from benchmarks.decode.bench_hybrid import QWEN3_5_4B
from benchmarks.decode.bench_hybrid import SMOKE as TINY_HYBRID
from specdec.drafters import NGramDrafter
from specdec.drafters.oracle import PRESETS, OracleDrafter
from specdec.engine import Engine
from specdec.engine.budget import StepTimeTable
from specdec.models import QWEN3_8B, DenseTarget, TargetConfig, plant_successor_rule
from specdec.models.hybrid import random_hybrid_target
from specdec.models.ragged import RaggedDenseTarget
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.verify import ChainVerifier

MODELS = ("qwen3-8b", "qwen3.5-4b")
BUDGETS = ("off", "auto")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class ForwardClock:
    """Wraps a ragged target's ``forward`` on its instance: each call timed between two device syncs.

    ``seconds`` accumulates the forwards' time; :meth:`close` restores the ``forward`` the instance had (its own
    attribute if it had one, else the class's).
    """

    def __init__(self, ragged, device: torch.device):
        self.ragged, self.device, self.seconds = ragged, device, 0.0
        self.own = vars(ragged).get("forward")
        forward = ragged.forward

        def timed(*args, **kwargs):
            sync(device)
            start = time.perf_counter()
            out = forward(*args, **kwargs)
            sync(device)
            self.seconds += time.perf_counter() - start
            return out

        ragged.forward = timed

    def close(self) -> None:
        if self.own is None:
            del self.ragged.forward
        else:
            self.ragged.forward = self.own


def make_engine(ragged, prompts, *, spec: bool, references, new_tokens: int, budget: str, table, max_batch: int):
    profile = PRESETS["specpilot-one-level"]
    made = iter(range(len(prompts)))

    def oracle():
        i = next(made)
        return OracleDrafter(profile, references=[references[i]], vocab_size=ragged.vocab_size, seed=i)

    auto = spec and budget == "auto"
    engine = Engine(
        ragged,
        oracle if spec else NGramDrafter(),
        ChainVerifier(),
        max_batch=max_batch,
        num_draft_tokens=profile.num_drafts if spec else 0,
        verify_budget="auto" if auto else None,
        step_time=table if auto else None,
    )
    ids = [engine.add_request(p, max_new_tokens=new_tokens) for p in prompts]
    return engine, ids


def outputs_equal(engine, ids, prompts, references) -> bool:
    """Whether every request's prompt and output equal its reference (``torch.equal``)."""
    return all(torch.equal(torch.cat([p.cpu(), engine.output(r).cpu()]), ref) for p, r, ref in zip(prompts, ids, references))


def joining(engine) -> bool:
    """Whether some request is still waiting or prefilling its prompt."""
    return bool(engine.waiting) or any(engine.request(r).prefilled < engine.request(r).prompt.numel() for r in engine.running)


def timed_steps(engine, ragged, device) -> list[dict]:
    """Every step of ``engine`` to completion: wall ms (to a device sync), its forwards' ms, whether a request was
    joining, the rows, and how many requests joined the running set and left it (finished) in the step."""
    steps = []
    clock = ForwardClock(ragged, device)
    try:
        while engine.has_work:
            prefill = joining(engine)
            before = set(engine.running)
            sync(device)
            t0, forward_before = time.perf_counter(), clock.seconds
            engine.step()
            sync(device)
            ms = (time.perf_counter() - t0) * 1e3
            forward_ms = (clock.seconds - forward_before) * 1e3
            after = set(engine.running)
            steps.append(
                {
                    "ms": ms,
                    "forward_ms": forward_ms,
                    "prefill": prefill,
                    "rows": engine.last_pass_rows,
                    "joined": len(after - before),
                    "left": len(before - after),
                }
            )
    finally:
        clock.close()
    return steps


def _classes(steps: list[dict]) -> dict[str, list[dict]]:
    return {
        "prefill": [s for s in steps if s["prefill"]],
        "decode": [s for s in steps if not s["prefill"]],
        "decode, a request left": [s for s in steps if not s["prefill"] and s["left"]],
        "decode, none left": [s for s in steps if not s["prefill"] and not s["left"]],
    }


def summary(steps: list[dict]) -> dict:
    """Per class of pass (prefill: a request still joining; decode; decode passes in which a request finished or not):
    passes, mean / median ms, mean forward and outside ms, mean rows; and the whole run's seconds outside the forward."""
    out = {}
    for kind, chosen in _classes(steps).items():
        ms = sorted(s["ms"] for s in chosen)
        n = max(1, len(chosen))
        out[kind] = {
            "passes": len(chosen),
            "ms_mean": sum(ms) / n if ms else None,
            "ms_median": ms[len(ms) // 2] if ms else None,
            "forward_ms_mean": sum(s["forward_ms"] for s in chosen) / n if chosen else None,
            "outside_ms_mean": sum(s["ms"] - s["forward_ms"] for s in chosen) / n if chosen else None,
            "rows_mean": sum(s["rows"] for s in chosen) / n if chosen else None,
        }
    out["run"] = {
        "passes": len(steps),
        "seconds": sum(s["ms"] for s in steps) / 1e3,
        "outside_seconds": sum(s["ms"] - s["forward_ms"] for s in steps) / 1e3,
    }
    return out


def profile_decode(make, ragged, device, *, decode_steps: int) -> dict:
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
    stats = {}
    for order in ("tottime", "cumulative"):
        stream = io.StringIO()
        pstats.Stats(prof, stream=stream).sort_stats(order).print_stats(40)
        stats[order] = stream.getvalue()
    forward = [v for k, v in pstats.Stats(prof).stats.items() if k[2] == "forward" and "ragged" in k[0]]
    forward_s = max((v[3] for v in forward), default=0.0)  # cumulative seconds of the ragged target's forward
    kernels = [e for e in tprof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    device_ms = sum(e.device_time for e in kernels) / 1e3 / max(1, ran)
    host_table = tprof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=70)
    return {
        "passes": ran,
        "wall_ms_per_pass": wall_ms,
        "host_forward_ms_per_pass": 1e3 * forward_s / max(1, ran),
        "device_kernel_ms_per_pass": device_ms if kernels else None,
        "kernels_per_pass": len(kernels) / max(1, ran),
        "host_top_own": stats["tottime"],
        "host_top_cumulative": stats["cumulative"],
        "torch_profiler_by_self_cpu": host_table,
    }


def build(model: str, cuda: bool, device, concurrency: int, max_seq_len: int):
    """The packed ragged target of ``model`` (tiny float32 stand-ins on the CPU) with graphs or the static path."""
    if model == "qwen3.5-4b":
        cfg, dtype = (QWEN3_5_4B, torch.bfloat16) if cuda else (TINY_HYBRID, torch.float32)
        base = random_hybrid_target(cfg, dtype=dtype, device=device, max_seq_len=max_seq_len, seed=0, state_slots=2)
        plant_successor_rule(base)
        ragged = RaggedHybridTarget(base, slots=concurrency, max_seq_len=max_seq_len, layout="packed")
        label = "qwen3.5-4b shape, random bf16 weights, planted successor rule" if cuda else "tiny hybrid, float32, planted"
    else:
        cfg, dtype = (QWEN3_8B, torch.bfloat16) if cuda else (TargetConfig(**TINY_QWEN3), torch.float32)
        torch.manual_seed(0)
        base = DenseTarget(cfg, max_seq_len=max_seq_len, dtype=dtype, device=device).eval().requires_grad_(False)
        plant_successor_rule(base)
        ragged = RaggedDenseTarget(base, slots=concurrency, max_seq_len=max_seq_len, layout="packed")
        label = "qwen3-8b shape, random bf16 weights, planted successor rule" if cuda else "tiny dense, float32, planted"
    if cuda:
        ragged.enable_cuda_graphs()
    else:
        ragged.enable_static_path()
    return cfg, ragged, label


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--model", choices=MODELS, default="qwen3-8b")
    ap.add_argument("--budget", choices=BUDGETS, default="auto", help="the speculative engine's verify budget")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--waves", type=int, default=1, help="requests = waves x concurrency, joining as slots free up")
    ap.add_argument("--decode-steps", type=int, default=8, help="decode passes profiled")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "profile_engine.json"))
    args = ap.parse_args(argv)
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    cuda = torch.cuda.is_available() and not args.smoke
    device = torch.device("cuda" if cuda else "cpu")
    if args.smoke:
        args.concurrency, args.prompt_len, args.new_tokens, args.decode_steps = 2, 24, 6, 2
    spread = min(16, args.prompt_len // 4)
    max_seq_len = args.prompt_len + spread + args.new_tokens + 24
    cfg, ragged, label = build(args.model, cuda, device, args.concurrency, max_seq_len)
    gen = torch.Generator().manual_seed(0)
    if args.waves < 1:
        ap.error(f"--waves: expected an int >= 1, got {args.waves}")
    requests = args.waves * args.concurrency
    lengths = torch.randint(args.prompt_len - spread, args.prompt_len + spread + 1, (requests,), generator=gen).tolist()
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen).to(device) for n in lengths]
    table = None
    if args.budget == "auto":
        c = args.concurrency
        table = StepTimeTable.profile(
            ragged,
            rows=tuple(c * m for m in (1, 2, 4, 8, 16)),
            requests=c,
            prefix_len=args.prompt_len,
            reps=1 if args.smoke else 3,
        )
    result = {
        "model": label,
        "graphs": ragged.uses_cuda_graphs,
        "concurrency": args.concurrency,
        "waves": args.waves,
        "budget": args.budget,
        "step_time_ms": None if table is None else dict(zip(table.rows, table.ms)),
        "prompt_lengths": lengths,
        "new_tokens": args.new_tokens,
        "systems": {},
    }
    references = None
    for system in ("AR", "spec"):
        spec = system == "spec"

        def make(spec=spec):
            return make_engine(
                ragged,
                prompts,
                spec=spec,
                references=references,
                new_tokens=args.new_tokens,
                budget=args.budget,
                table=table,
                max_batch=args.concurrency,
            )

        warm, ids = make()
        warm.run()  # untimed: captures the graphs
        if not spec:
            references = [torch.cat([p.cpu(), warm.output(r).cpu()]) for p, r in zip(prompts, ids)]
        else:
            result["spec_equal_to_ar"] = outputs_equal(warm, ids, prompts, references)
        engine, _ = make()
        steps = timed_steps(engine, ragged, device)
        entry = {
            "steps": steps,
            "summary": summary(steps),
            "decode_profile": profile_decode(make, ragged, device, decode_steps=args.decode_steps),
        }
        result["systems"][system] = entry
        prof = entry["decode_profile"]
        print(f"\n{system}: host functions of {prof['passes']} decode passes (own time)", flush=True)
        print("\n".join(prof["host_top_own"].splitlines()[:40]), flush=True)
        print(f"\n{system}: host functions (cumulative)", flush=True)
        print("\n".join(prof["host_top_cumulative"].splitlines()[:50]), flush=True)
        print(f"\n{system}: torch.profiler, by self CPU time", flush=True)
        print(prof["torch_profiler_by_self_cpu"], flush=True)
    print(f"\nspeculative outputs equal to AR: {result.get('spec_equal_to_ar')}")
    print(
        "system  kind                    passes  ms mean  forward  outside  rows mean | decode profiled: wall ms  kernel ms  kernels"
    )
    for system, entry in result["systems"].items():
        prof = entry["decode_profile"]
        for kind, s in entry["summary"].items():
            if kind != "run" and s["passes"]:
                print(
                    f"{system:6s}  {kind:22s}  {s['passes']:6d}  {s['ms_mean']:7.2f}  {s['forward_ms_mean']:7.2f}  "
                    f"{s['outside_ms_mean']:7.2f}  {s['rows_mean']:9.1f} | "
                    f"{prof['wall_ms_per_pass']:8.2f}  {prof['device_kernel_ms_per_pass'] or 0:9.2f}  {prof['kernels_per_pass']:7.0f}"
                )
    for system, entry in result["systems"].items():
        run = entry["summary"]["run"]
        print(
            f"{system:6s}  whole run: {run['passes']} passes, {run['seconds']:.3f} s, {run['outside_seconds'] * 1e3:.1f} ms "
            f"outside the forward ({run['outside_seconds'] * 1e3 / max(1, run['passes']):.2f} ms a pass)"
        )
    write_json(args.out, result, prov)
    print(f"wrote {args.out}")
    return 0 if result.get("spec_equal_to_ar") else 1


if __name__ == "__main__":
    raise SystemExit(main())
