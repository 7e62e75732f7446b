"""Each linear's GPU time inside the lean target's captured decode or verify step, by position: where a kernel's time
in the step differs from its time in a chain of identical calls (``bench_wide_w12``), and each linear against its
weight-read floor.

The Qwen3-8B-shaped lean target (random bf16 weights, ``random_target``; converted to W12 with
``specdec.formats.convert`` with ``--weights w12``; ``bf16``: cuBLAS; ``bf16_skinny``: the CUDA skinny GEMM through
``use_skinny_linears``, as ``bench_roofline --ar-step``) replays its step of ``--rows``
rows (1: the one-token decode step) as a CUDA graph under ``torch.profiler``. The weight-streaming GEMM kernels of a step (names matched by
``bench_roofline.kernel_category``) come in the model's order: per layer qkv, o, gate_up, down, then lm_head; each
kernel is labelled by its position (a cuBLAS split-K reduction counted with the GEMM before it) and the per-linear mean over layers and replays is reported (microseconds), with
the step's GEMM total, the kernel each linear ran (its first layer's) and each linear's floor: its weight bytes
over the copy bandwidth measured in the same run. The run fails (exit 1) when a step's GEMM launches are not ``4 * layers + 1``:
the labels would then be wrong. ``--linears-only``: the same modules called in the same order on fixed random inputs
of ``--rows`` rows, captured as one graph with nothing between them (whether a linear's time in the step comes from
the kernels around it or from the sequence of distinct weights and shapes); ``--launch-only`` runs the step without
``torch.profiler`` for a profiler outside it (ncu, which takes CUPTI for itself); with ``--order by-linear`` the same calls
grouped by linear (every layer's qkv, then every o, ...; lm_head last), labelled back to their linears: whether a
linear's cost among the others comes from the alternation of shapes. ``--view q`` (W12 weights only): the
step through the target's Q view (the two-level verifier's first pass; ``q_linear`` with ``--linears-only``), each
linear's floor then its Q bytes (one a weight and the row bases).

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
SPLIT_K_REDUCTION_MARKS = ("splitkreduce", "splitk_reduce")  # cuBLAS's, the Triton W12 / Q kernels'


def label_linears(kernels: list, layers: int) -> dict[str, list]:
    """A step's GEMM kernels (durations, names: anything a kernel) in launch order, labelled: ``4 * layers`` per-layer
    linears, then ``lm_head``.

    Raises ValueError when ``len(kernels) != 4 * layers + 1``.

    Example:
        >>> label_linears([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], layers=2)
        {'qkv': [1.0, 5.0], 'o': [2.0, 6.0], 'gate_up': [3.0, 7.0], 'down': [4.0, 8.0], 'lm_head': [9.0]}
    """
    if len(kernels) != 4 * layers + 1:
        raise ValueError(
            f"kernels: expected {4 * layers + 1} GEMM kernels a step (4 x {layers} layers + lm_head), got {len(kernels)}"
        )
    out = {name: kernels[i : 4 * layers : 4] for i, name in enumerate(LINEARS)}
    out["lm_head"] = kernels[-1:]
    return out


def by_linear_order(count: int, layers: int) -> list[int]:
    """The positions of a step's ``count = 4 * layers + 1`` linears called grouped by linear: every layer's qkv, then
    every o, gate_up, down, and lm_head last (``--order by-linear``).

    Example:
        >>> by_linear_order(9, layers=2)
        [0, 4, 1, 5, 2, 6, 3, 7, 8]
    """
    if count != 4 * layers + 1:
        raise ValueError(f"count: expected {4 * layers + 1} linears (4 x {layers} layers + lm_head), got {count}")
    return [layer * 4 + i for i in range(4) for layer in range(layers)] + [count - 1]


def to_step_order(kernels: list, order: list[int]) -> list:
    """Kernels launched for the linears at step positions ``order`` (one a linear), put back in step order.

    Example:
        >>> to_step_order(["qkv0", "qkv1", "o0", "o1", "head"], [0, 2, 1, 3, 4])
        ['qkv0', 'o0', 'qkv1', 'o1', 'head']
    """
    if sorted(order) != list(range(len(kernels))):
        raise ValueError(f"order: expected a permutation of 0..{len(kernels) - 1}, got {order}")
    out = [None] * len(kernels)
    for kernel, position in zip(kernels, order):
        out[position] = kernel
    return out


def fold_split_k_reductions(kernels: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """``(name, us)`` GEMM kernels in launch order with each split-K reduction (cuBLAS's ``splitKreduce``, the Triton
    W12 / Q kernels' ``_splitk_reduce_kernel``) added to the GEMM before it: one entry a linear, its time both kernels'.

    Raises ValueError when a reduction comes first (no GEMM to add it to).

    Example:
        >>> fold_split_k_reductions([("nvjet_splitK_TNT", 5.0), ("cublasLt::splitKreduce_kernel", 1.5), ("nvjet_TNT", 4.0)])
        [('nvjet_splitK_TNT', 6.5), ('nvjet_TNT', 4.0)]
        >>> fold_split_k_reductions([("_w12_gemm_kernel", 9.0), ("_splitk_reduce_kernel", 1.0)])
        [('_w12_gemm_kernel', 10.0)]
    """
    out: list[tuple[str, float]] = []
    for name, us in kernels:
        if any(mark in name.lower() for mark in SPLIT_K_REDUCTION_MARKS):
            if not out:
                raise ValueError(f"kernels: a split-K reduction ({name}) before any GEMM kernel")
            out[-1] = (out[-1][0], out[-1][1] + us)
        else:
            out.append((name, us))
    return out


def step_gemm_kernels(step, steps: int) -> list[list[tuple[str, float]]]:
    """Per replay of ``step()``, the GEMM kernels' names and durations (us) in start order (``torch.profiler``, CUDA),
    a cuBLAS split-K reduction counted with its GEMM (:func:`fold_split_k_reductions`)."""
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
        per_step.append(fold_split_k_reductions([(e.name, e.time_range.end - e.time_range.start) for e in kernels]))
    return per_step


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64, help="rows of the step (1: the one-token decode step; up to 64)")
    ap.add_argument(
        "--weights",
        choices=("w12", "bf16", "bf16_skinny"),
        default="w12",
        help="the target's linear weights (bf16: cuBLAS; bf16_skinny: the CUDA skinny GEMM, use_skinny_linears)",
    )
    ap.add_argument("--view", choices=("exact", "q"), default="exact", help="the target's weight view (q: W12 weights only)")
    ap.add_argument("--steps", type=int, default=3, help="profiled replays")
    ap.add_argument("--linears-only", action="store_true", help="the step's linears alone, in its order, one graph")
    ap.add_argument(
        "--order",
        choices=("step", "by-linear"),
        default="step",
        help="with --linears-only: the step's order or grouped by linear",
    )
    ap.add_argument(
        "--launch-only",
        action="store_true",
        help="run the step --steps times without torch.profiler, for a profiler outside (ncu: CUPTI takes one client)",
    )
    ap.add_argument("--smoke", action="store_true", help="CPU: the labelling only")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "verify_linears.json"))
    args = ap.parse_args(argv)
    if not 1 <= args.rows <= 64:
        ap.error(f"--rows: expected 1 to 64 rows, got {args.rows}")
    if args.steps < 1:
        ap.error(f"--steps: expected >= 1, got {args.steps}")
    if args.order != "step" and not args.linears_only:
        ap.error(f"--order {args.order}: expected with --linears-only (the step's own order is the step's)")
    if args.view == "q" and args.weights != "w12":
        ap.error(f"--view q: expected --weights w12 (the Q view is W12's), got --weights {args.weights}")
    prov = provenance(seed=0)
    print(provenance_line(prov))
    if args.smoke or not torch.cuda.is_available():
        labelled = label_linears([float(i) for i in range(9)], layers=2)
        write_json(args.out, {"smoke": True, "labelled": labelled}, prov)
        print(f"smoke: {labelled}")
        return 0
    from benchmarks.common import copy_bandwidth
    from benchmarks.kernels.bench_roofline import linear_weight_bytes
    from specdec.formats import convert
    from specdec.formats.w12 import q_linear
    from specdec.models import random_target, use_skinny_linears

    device = torch.device("cuda")
    cfg = SHAPES[AR_MODEL]
    target = random_target(cfg, dtype=torch.bfloat16, device=device, max_seq_len=256, seed=0)
    bits = convert(target).bits_per_weight if args.weights == "w12" else 16.0
    if args.weights == "bf16_skinny":
        use_skinny_linears(target)
    copy_bw = copy_bandwidth(device)
    linears = [m for m in target.modules() if isinstance(m, torch.nn.Linear)]

    def read_bytes(m: torch.nn.Linear) -> int:
        return int(m.weight.ae.nbytes + m.weight.base.nbytes) if args.view == "q" else linear_weight_bytes(m)

    floor_us = {name: read_bytes(m) / copy_bw * 1e6 for name, m in zip((*LINEARS, "lm_head"), [*linears[:4], linears[-1]])}
    gen = torch.Generator(device=device).manual_seed(1)
    if args.linears_only:
        inputs = {
            k: torch.randn(args.rows, k, generator=gen, device=device).to(torch.bfloat16)
            for k in {m.in_features for m in linears}
        }

        order = by_linear_order(len(linears), cfg.num_layers) if args.order == "by-linear" else list(range(len(linears)))

        def linears_in_order():
            for m in (linears[i] for i in order):
                x = inputs[m.in_features]
                if args.view == "q":
                    q_linear(x, m.weight)
                else:
                    m(x)

        step = capture_cuda_graph(linears_in_order)
    else:
        target.enable_cuda_graphs(buckets=tuple(sorted({1, args.rows})))
        prompt = torch.randint(0, cfg.vocab_size, (1, AR_PROMPT), generator=gen, device=device)
        target(prompt)
        target.commit(AR_PROMPT)
        rows = torch.zeros(1, args.rows, dtype=torch.long, device=device)

        def step():
            target(rows, view=args.view)
            target.truncate(AR_PROMPT)

    if args.launch_only:
        for _ in range(args.steps + 1):  # as step_gemm_kernels: one warm-up, then the steps
            step()
        torch.cuda.synchronize()
        launched = dict(model=AR_MODEL, rows=args.rows, view=args.view, linears_only=args.linears_only, order=args.order)
        write_json(args.out, dict(launched, launch_only=True, step_calls=args.steps + 1), prov)
        print(f"{args.rows}-row {args.weights} step ({args.view} view): {args.steps + 1} calls launched for an outside profiler")
        return 0
    kernels = step_gemm_kernels(step, args.steps)
    if args.linears_only and args.order == "by-linear":
        kernels = [to_step_order(one, order) if len(one) == len(order) else one for one in kernels]  # else: refused below
    per_step = [[us for _, us in one] for one in kernels]
    try:
        labelled = [label_linears(d, cfg.num_layers) for d in per_step]
        names = {label: ran[0] for label, ran in label_linears([name for name, _ in kernels[0]], cfg.num_layers).items()}
    except ValueError as exc:
        print(f"profile_verify_linears: {exc}", file=sys.stderr)
        return 1
    means = {name: statistics.mean(v for one in labelled for v in one[name]) for name in (*LINEARS, "lm_head")}
    result = dict(
        model=AR_MODEL,
        weights=f"random (Gaussian, random_target seed 0), {args.weights}",
        bits_per_weight=bits,
        copy_bandwidth_bytes_per_s=copy_bw,
        rows=args.rows,
        view=args.view,
        steps=args.steps,
        linears_only=args.linears_only,
        order=args.order,
        env={k: v for k, v in os.environ.items() if k.startswith("SPECDEC_")},
        gemm_us_per_step=[sum(d) for d in per_step],
        mean_us=means,
        floor_us=floor_us,
        x_floor={name: means[name] / floor_us[name] for name in means},
        kernel=names,
        per_step_us=per_step,
    )
    write_json(args.out, result, prov)
    where = "its linears alone, in one graph" if args.linears_only else "the step"
    print(
        f"{args.rows}-row {args.weights} step ({args.view} view), {where} (us a call, mean over {cfg.num_layers} layers x {args.steps} replays; "
        "x its read floor):"
    )
    print("  " + "  ".join(f"{name} {us:.1f} ({us / floor_us[name]:.2f}x)" for name, us in means.items()))
    print(f"  GEMM kernels a step: {statistics.mean(result['gemm_us_per_step']) / 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
