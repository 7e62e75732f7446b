"""How far batched speculation can beat batched AR on one GPU: the speedup ceiling for each time model of a pass.

At concurrency ``c`` with every request verifying a chain of ``k`` drafts, a round gives each request ``E(k) =
1 + p_1 + p_1 p_2 + ... + p_1...p_k`` tokens (the acceptance profile's expectation) in one forward of ``c (k + 1)``
rows, where batched AR gives one token in a forward of ``c`` rows. So with no host work, no prefill and no tails

    speedup(k) = E(k) * T(c) / T(c (k + 1)),

and the ceiling is its maximum over ``k``. Three time models ``T(R)`` of the forward, from committed H200 results:

* ``forward``: the engine's measured step-time table (the whole graphed forward, to a device sync);
* ``cublas_gemms``: only the pass's GEMMs, cuBLAS at its best formulation per row count, cold weights
  (``bench_wide_linear``); everything else free;
* ``floor``: the hardware's: ``max(weight bytes / copy bandwidth, 2 * params * R / peak bf16 FLOP/s)``, the
  bandwidth measured in the same wide-linear run, the peak the H200's dense bf16 tensor-core rate (989 TFLOP/s).

Between measured row counts ``T`` is interpolated linearly; widths outside a model's measured rows are left out.
The engine's measured speedup sits below the ``forward`` ceiling by its host work, prefill passes and the tails of
a closed batch; the ``floor`` ceiling says what the goal asks of the kernels.

Run (repository root, CPU, about a second): ``python -m benchmarks.decode.engine_ceiling`` (prints a table, writes
``$OUT/engine_ceiling.json`` and a plot beside it).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.common import agg_pyplot, provenance, provenance_line, write_json
from specdec.drafters.oracle import PRESETS, AcceptanceProfile

H200_BF16_DENSE_FLOPS = 989.4e12  # NVIDIA H200 SXM datasheet, bf16 tensor core, dense
DEFAULT_ENGINE = "benchmarks/results/bench_engine_h200_2026-12-03_split_run2.json"
DEFAULT_WIDE_LINEAR = "benchmarks/results/wide_linear_h200_2026-12-03.json"


def expected_tokens(profile: AcceptanceProfile, k: int) -> float:
    """``E(k)``: expected tokens a round (accepted drafts + the target's own) for a chain of ``k`` drafts.

    Example:
        >>> round(expected_tokens(PRESETS["specpilot-one-level"], 15), 6), expected_tokens(PRESETS["specpilot-one-level"], 0)
        (4.8, 1.0)
    """
    if not 0 <= k <= len(profile.conditional):
        raise ValueError(f"k: expected 0..{len(profile.conditional)} (the profile's draft positions), got {k}")
    total, reach = 1.0, 1.0
    for p in profile.conditional[:k]:
        reach *= p
        total += reach
    return total


def interpolated(rows: list[int], ms: list[float]) -> Callable[[int], float | None]:
    """``T(R)`` linear between the measured ``rows``; ``None`` outside them.

    Example:
        >>> t = interpolated([16, 32], [4.0, 6.0])
        >>> t(16), t(24), t(48)
        (4.0, 5.0, None)
    """
    if len(rows) != len(ms) or not rows or any(b <= a for a, b in zip(rows, rows[1:])):
        raise ValueError(f"rows: expected strictly increasing row counts, one per time; got {rows} and {ms}")

    def at(r: int) -> float | None:
        return float(np.interp(r, rows, ms)) if rows[0] <= r <= rows[-1] else None

    return at


def time_models(engine: dict, wide_linear: dict, peak_flops: float, concurrency: int) -> dict[str, Callable[[int], float | None]]:
    """The three ``T(R)`` models (ms) from a ``bench_engine`` result (the step-time table its run at
    ``concurrency`` profiled, else its first row's) and a ``bench_wide_linear`` result."""
    rows = engine["rows"]
    table = next((r for r in rows if r.get("concurrency") == concurrency), rows[0])["step_time_ms"]
    gemm = {int(r): min(v.values()) for r, v in wide_linear["pass_gemm_ms"].items()}
    gemm_rows = sorted(gemm)
    layers = wide_linear["layers"]
    shapes = {(r["linear"], r["N"], r["K"]) for r in wide_linear["rows"]}
    params = sum(n * k * (1 if name == "lm_head" else layers) for name, n, k in shapes)
    floor_ms = wide_linear["floor_ms"]
    return {
        "forward": interpolated(table["rows"], table["ms"]),
        "cublas_gemms": interpolated(gemm_rows, [gemm[r] for r in gemm_rows]),
        "floor": lambda r: max(floor_ms, 1e3 * 2 * params * r / peak_flops),
    }


def ceiling(
    profile: AcceptanceProfile, concurrency: int, time_ms: Callable[[int], float | None], goal: float | None = None
) -> dict:
    """Speedup over batched AR for every chain length the model covers, and the best one.

    With a ``goal``, each ``k`` also carries ``pass_ratio`` (its pass time over AR's) and ``goal_pass_ratio``
    (``E(k) / goal``: the most its pass may cost over AR's for the goal to be reachable at that ``k``).

    Example:
        >>> flat = ceiling(PRESETS["specpilot-one-level"], 4, lambda r: 1.0)  # a forward costing the same at any width
        >>> flat["best_k"], round(flat["best_speedup"], 6)
        (15, 4.8)
    """
    base = time_ms(concurrency)
    if base is None:
        raise ValueError(f"concurrency: {concurrency} rows lie outside the time model's measured rows")
    by_k = []
    for k in range(len(profile.conditional) + 1):
        t = time_ms(concurrency * (k + 1))
        if t is not None:
            tokens = expected_tokens(profile, k)
            entry = dict(k=k, rows=concurrency * (k + 1), tokens=tokens, ms=t, speedup=tokens * base / t)
            if goal is not None:
                entry.update(pass_ratio=t / base, goal_pass_ratio=tokens / goal)
            by_k.append(entry)
    best = max(by_k, key=lambda e: e["speedup"])
    return dict(ar_ms=base, by_k=by_k, best_k=best["k"], best_rows=best["rows"], best_speedup=best["speedup"])


def plot(result: dict, path: Path) -> None:
    plt = agg_pyplot()
    fig, axes = plt.subplots(1, len(result["ceilings"]), figsize=(5.5 * len(result["ceilings"]), 4), squeeze=False)
    for ax, (c, models) in zip(axes[0], result["ceilings"].items()):
        for name, model in models.items():
            ax.plot([e["k"] for e in model["by_k"]], [e["speedup"] for e in model["by_k"]], marker="o", label=name)
        for goal in result["goals"].get(c, ()):
            ax.axhline(goal, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("drafts verified per request (k)")
        ax.set_ylabel("speedup over batched AR (no host work, no prefill)")
        ax.set_title(f"c = {c}, {result['profile']}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="specpilot-one-level", choices=sorted(PRESETS))
    ap.add_argument("--concurrency", default="16,24", help="comma-separated request counts")
    ap.add_argument("--engine", default=DEFAULT_ENGINE, help="a bench_engine JSON (its first row's step-time table)")
    ap.add_argument("--wide-linear", default=DEFAULT_WIDE_LINEAR, help="a bench_wide_linear JSON")
    ap.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_FLOPS / 1e12, help="dense bf16 peak")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "engine_ceiling.json"))
    args = ap.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    if any(c < 1 for c in levels):
        raise ValueError(f"--concurrency: expected request counts >= 1, got {args.concurrency!r}")
    if args.peak_tflops <= 0:
        raise ValueError(f"--peak-tflops: expected > 0, got {args.peak_tflops}")
    prov = provenance(seed=None)
    print(provenance_line(prov), flush=True)
    engine = json.loads(Path(args.engine).read_text())
    wide_linear = json.loads(Path(args.wide_linear).read_text())
    profile = PRESETS[args.profile]
    goals = {16: 4.0, 24: 2.0}  # the batched-decoding goals at these concurrencies
    ceilings = {
        str(c): {
            name: ceiling(profile, c, t, goals.get(c))
            for name, t in time_models(engine, wide_linear, args.peak_tflops * 1e12, c).items()
        }
        for c in levels
    }
    result = dict(
        profile=args.profile,
        profile_source=profile.source,
        engine_result=args.engine,
        wide_linear_result=args.wide_linear,
        peak_bf16_flops=args.peak_tflops * 1e12,
        goals={str(c): [g] for c, g in goals.items()},
        ceilings=ceilings,
    )
    out = write_json(args.out, result, prov)
    plot(result, out.with_suffix(".png"))
    print(f"speedup ceiling over batched AR ({args.profile}; no host work, no prefill, no tails)")
    print(" c   model           best k  rows   AR ms  pass ms  tokens  ceiling")
    for c, per_model in ceilings.items():
        for name, m in per_model.items():
            best = next(e for e in m["by_k"] if e["k"] == m["best_k"])
            print(
                f"{c:>2s}   {name:14s} {m['best_k']:6d} {m['best_rows']:5d} {m['ar_ms']:7.2f} {best['ms']:8.2f}"
                f" {best['tokens']:7.2f} {m['best_speedup']:8.2f}"
            )
        if int(c) in goals:
            forward = {e["k"]: e for e in per_model["forward"]["by_k"]}
            shown = [e for e in per_model["floor"]["by_k"] if e["k"] in forward and e["k"] in (3, 5, 7, 11, 15)]
            print(
                f"    {goals[int(c)]}x at c = {c} needs a pass of R rows within E(k)/{goals[int(c)]} of AR's: "
                + ", ".join(
                    f"R {e['rows']} <= {e['goal_pass_ratio']:.2f}x (forward {forward[e['k']]['pass_ratio']:.2f}x)" for e in shown
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
