"""Each linear's GPU time inside the lean target's captured verify step, by position: where a kernel's time in the step
differs from its time in a chain of identical calls (``bench_wide_w12``).

The Qwen3-8B-shaped lean target (random bf16 weights, ``random_target``, converted to W12 with
``specdec.formats.convert``, as ``bench_roofline --ar-step``) replays its verify step of ``--rows`` rows as a CUDA
graph under ``torch.profiler``. The weight-streaming GEMM kernels of a step (names matched by
``bench_roofline.kernel_category``) come in the model's order: per layer qkv, o, gate_up, down, then lm_head; each
kernel is labelled by its position and the per-linear mean over layers and replays is reported (microseconds), with
the step's time and its GEMM total. The run fails (exit 1) when a step's GEMM launches are not ``4 * layers + 1``:
the labels would then be wrong. ``--linears-only``: the same modules called in the same order on fixed random inputs
of ``--rows`` rows, captured as one graph with nothing between them (whether a linear's time in the step comes from
the kernels around it or from the sequence of distinct weights and shapes).

Usage (repository root, GPU): ``python3 -m benchmarks.kernels.profile_verify_linears --rows 64 --out $OUT/x.json``
(~20 s on one H100). CPU smoke: ``--smoke`` (the tiny target, no profile: the labelling on a fixed list).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

from benchmarks.common import capture_cuda_graph, provenance, provenance_line, write_json
from benchmarks.kernels.bench_roofline import AR_MODEL, AR_PROMPT, SHAPES, kernel_category

LINEARS = ("qkv", "o", "gate_up", "down")


def label_linears(durations_us: list[float], layers: int) -> dict[str, list[float]]:
    """The GEMM kernels of one step in launch order, labelled: ``4 * layers`` per-layer linears, then ``lm_head``.

    Raises ValueError when ``len(durations_us) != 4 * layers + 1``.

    Example:
        >>> label_linears([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], layers=2)
        {'qkv': [1.0, 5.0], 'o': [2.0, 6.0], 'gate_up': [3.0, 7.0], 'down': [4.0, 8.0], 'lm_head': [9.0]}
    """
    if len(durations_us) != 4 * layers + 1:
        raise ValueError(
            f"durations_us: expected {4 * layers + 1} GEMM kernels a step (4 x {layers} layers + lm_head), got {len(durations_us)}"
        )
    out = {name: durations_us[i : 4 * layers : 4] for i, name in enumerate(LINEARS)}
    out["lm_head"] = durations_us[-1:]
    return out


def step_gemm_durations(step, steps: int) -> list[list[float]]:
    """Per replay of ``step()``, the GEMM kernels' durations (us) in start order (``torch.profiler``, CUDA)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    per_step = []
    for _ in range(steps):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        kernels = [
            e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and kernel_category(e.name) == "gemm"
        ]
        kernels.sort(key=lambda e: e.time_range.start)
        per_step.append([e.time_range.end - e.time_range.start for e in kernels])
    return per_step


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64, help="rows of the verify step (2-64)")
    ap.add_argument("--steps", type=int, default=3, help="profiled replays")
    ap.add_argument("--linears-only", action="store_true", help="the step's linears alone, in its order, one graph")
    ap.add_argument("--smoke", action="store_true", help="CPU: the labelling only")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "verify_linears.json"))
    args = ap.parse_args(argv)
    if not 2 <= args.rows <= 64:
        ap.error(f"--rows: expected 2 to 64 rows, got {args.rows}")
    if args.steps < 1:
        ap.error(f"--steps: expected >= 1, got {args.steps}")
    prov = provenance(seed=0)
    print(provenance_line(prov))
    if args.smoke or not torch.cuda.is_available():
        labelled = label_linears([float(i) for i in range(9)], layers=2)
        write_json(args.out, {"smoke": True, "labelled": labelled}, prov)
        print(f"smoke: {labelled}")
        return 0
    from specdec.formats import convert
    from specdec.models import random_target

    device = torch.device("cuda")
    cfg = SHAPES[AR_MODEL]
    target = random_target(cfg, dtype=torch.bfloat16, device=device, max_seq_len=256, seed=0)
    report = convert(target)
    gen = torch.Generator(device=device).manual_seed(1)
    if args.linears_only:
        linears = [m for m in target.modules() if isinstance(m, torch.nn.Linear)]
        inputs = {
            k: torch.randn(args.rows, k, generator=gen, device=device).to(torch.bfloat16)
            for k in {m.in_features for m in linears}
        }

        def linears_in_order():
            for m in linears:
                m(inputs[m.in_features])

        step = capture_cuda_graph(linears_in_order)
    else:
        target.enable_cuda_graphs(buckets=(1, args.rows))
        prompt = torch.randint(0, cfg.vocab_size, (1, AR_PROMPT), generator=gen, device=device)
        target(prompt)
        target.commit(AR_PROMPT)
        rows = torch.zeros(1, args.rows, dtype=torch.long, device=device)

        def step():
            target(rows)
            target.truncate(AR_PROMPT)

    per_step = step_gemm_durations(step, args.steps)
    try:
        labelled = [label_linears(d, cfg.num_layers) for d in per_step]
    except ValueError as exc:
        print(f"profile_verify_linears: {exc}", file=sys.stderr)
        return 1
    means = {name: statistics.mean(v for one in labelled for v in one[name]) for name in (*LINEARS, "lm_head")}
    result = dict(
        model=AR_MODEL,
        weights="random (Gaussian, random_target seed 0), W12",
        bits_per_weight=report.bits_per_weight,
        rows=args.rows,
        steps=args.steps,
        linears_only=args.linears_only,
        env={k: v for k, v in os.environ.items() if k.startswith("SPECDEC_")},
        gemm_us_per_step=[sum(d) for d in per_step],
        mean_us=means,
        per_step_us=per_step,
    )
    write_json(args.out, result, prov)
    where = "its linears alone, in one graph" if args.linears_only else "the step"
    print(f"{args.rows}-row W12 verify step, {where} (us a call, mean over {cfg.num_layers} layers x {args.steps} replays):")
    print("  " + "  ".join(f"{name} {us:.1f}" for name, us in means.items()))
    print(f"  GEMM kernels a step: {statistics.mean(result['gemm_us_per_step']) / 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
