"""Where each goal of the weight-streaming GEMMs stands, judged from the JSON of one call on one GPU.

The goals (the Qwen3-8B and Qwen3-32B linear shapes, M <= 64, cold weights, each ratio from one run):

* W12 exact >= 1.30x cuBLAS bf16 on every shape (the byte limit 1.333x);
* the Q view >= 1.85x cuBLAS bf16 (limit 2.0x);
* the bf16 skinny GEMM >= 0.90 of the copy bandwidth;
* the 8B AR step <= 1.15x its weight-read floor with bf16 weights, and with W12 weights <= 0.80x the bf16 step;
* the verify step at M = 16 <= 1.10x the M = 1 step.

Inputs, all from one call: ``bench_fixed_cost`` (M = 1, 8, 16: cuBLAS bf16 and the library's default CUDA kernels),
``bench_wide_w12`` (17-64 rows: cuBLAS bf16, the wide kernels, the Triton Q kernel) and ``bench_roofline --ar-step
--verify-rows 16``. Each linear is judged on the kernel the library runs for its view and rows with the settings of
the run (the fixed-cost run's ``$SPECDEC_*`` from its provenance, applied while routing; :func:`default_kernel`), so
a goal reads what a model gets, not the best kernel of the run. Each band of rows (1, 8, 16, 17-32, 33-64) gives the
worst and best linear, and its worst case is named; the kernels' distance from their own read floor (``x_read_floor``
of the fixed-cost run, and of the wide run with ``--read-floor`` or else borrowed from the fixed-cost run's floor of
the same bytes: :func:`borrow_read_floors`) is carried where the call measured it, with what each band would reach
at its read floors (where even that misses a goal, the hardware stands in the way).

Usage (repository root; no GPU needed): ``python3 -m benchmarks.kernels.goals --fixed-cost A.json --wide B.json
--ar-step C.json --out $OUT/goals.json`` (prints the table; writes JSON and a PNG).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from benchmarks.common import agg_pyplot, provenance, redraw, report
from benchmarks.kernels.bench_wide_w12 import ratios

BANDS = ((1, 1, "1"), (8, 8, "8"), (16, 16, "16"), (17, 32, "17-32"), (33, 64, "33-64"))
MODELS = ("qwen3-8b", "qwen3-32b")
# (goal, view, target: the worst linear at least this)
LINEAR_GOALS = (
    ("W12 exact x cuBLAS bf16", "w12", 1.30),
    ("Q view x cuBLAS bf16", "q", 1.85),
    ("bf16 skinny GEMM, of copy", "bf16", 0.90),
)
# (goal, ar-step key, target, higher is better)
STEP_GOALS = (
    ("8B AR step bf16 (cuBLAS linears) x floor", "bf16_x_floor", 1.15, False),
    ("8B AR step bf16 (CUDA skinny linears) x floor", "bf16_skinny_x_floor", 1.15, False),
    ("8B AR step W12 / bf16 step", "w12_vs_bf16_step", 0.80, False),
    ("W12 verify step, 16 rows / one-token step", "w12_verify_x_step", 1.10, False),
    ("bf16 verify step, 16 rows / one-token step", "bf16_verify_x_step", 1.10, False),
)


@contextlib.contextmanager
def routing_env(env: dict[str, str]) -> Iterator[None]:
    """The process's ``SPECDEC_*`` variables replaced by ``env`` (a run's provenance ``env``) for the block."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("SPECDEC_")}
    try:
        for k in saved:
            del os.environ[k]
        os.environ.update({k: v for k, v in env.items() if k.startswith("SPECDEC_")})
        yield
    finally:
        for k in [k for k in os.environ if k.startswith("SPECDEC_")]:
            del os.environ[k]
        os.environ.update(saved)


def default_kernel(view: str, m: int, k: int) -> str:
    """The benchmarks' name of the kernel the library runs for ``view`` (``"w12"``, ``"q"`` or ``"bf16"``, the CUDA
    skinny GEMM) at ``m`` rows and width ``k`` under the current ``$SPECDEC_*``: the tensor-map variant up to 16 rows
    (``bench_fixed_cost``'s ``cuda_<view>_<variant>``), past them the wide op where
    :func:`specdec.kernels.cuda.ops.wide_gemm_enabled` sends the rows, else W12's two 16-row calls (up to 32 rows) or
    Triton (``bench_wide_w12``'s names).

    Example:
        >>> with routing_env({}):
        ...     [default_kernel("w12", m, 4096) for m in (1, 32)], [default_kernel("q", m, 4096) for m in (16, 32, 64)]
        (['cuda_w12_v10', 'cuda_w12_wide'], ['cuda_q_v5', 'triton_q', 'cuda_q_wide'])
    """
    from specdec.kernels.cuda import ops

    if view not in ("w12", "q", "bf16"):
        raise ValueError(f"view: expected 'w12', 'q' or 'bf16', got {view!r}")
    if m < 1:
        raise ValueError(f"m: expected at least 1 row, got {m}")
    variant = {"w12": ops.w12_variant, "q": ops.q_variant, "bf16": ops.bf16_variant}[view](k)
    if m <= ops.max_tokens(view, k):
        return f"cuda_{view}_{variant}"
    if view == "bf16":
        raise ValueError(f"m: the bf16 skinny GEMM takes at most {ops.max_tokens(view, k)} rows, got {m}")
    wide = k % ops.WIDE_STAGE_K == 0 and m <= ops.WIDE_MAX_TOKENS and ops.wide_gemm_enabled("exact" if view == "w12" else "q", m)
    if wide:
        return f"cuda_{view}_wide"
    return "cuda_w12_two_calls" if view == "w12" and m <= 2 * ops.max_tokens(view, k) else f"triton_{view}"


def _measure(view: str, row: dict, copy_bw: float) -> float | None:
    if "cold_s" not in row:
        return None
    if view == "bf16":
        return row["weight_bytes"] / row["cold_s"] / copy_bw
    return row.get("x_cublas")


def _span(values: list[float]) -> list[float] | None:
    return [min(values), max(values)] if values else None


def linear_goal(goal: str, view: str, target: float, rows: list[dict], copy_bw: float, env: dict[str, str]) -> dict:
    """One linear goal by band of rows: the default kernel's worst and best linear (``x`` cuBLAS bf16, or of copy for
    bf16) and whether the band's worst meets ``target``; ``missing`` lists the (model, linear, M) whose default kernel
    the run did not time, which fail the goal rather than vanish from it. Where the run timed the read floor of a
    kernel's bytes, ``at_read_floor`` spans what the band's kernels would reach taking exactly their floor (value x
    ``x_read_floor``: no kernel reading those bytes does better on that GPU) and ``short_at_read_floor`` names the
    cases that would miss ``target`` even there: a limit of the hardware and the format, not of the kernel.

    Example:
        >>> rows = [dict(model="qwen3-8b", linear="o", M=1, kind="cuda_w12_v10", K=4096, cold_s=1.0, x_cublas=1.2,
        ...              x_read_floor=1.25)]
        >>> g = linear_goal("W12", "w12", 1.30, rows, 1.0, {})
        >>> b = g["bands"][0]
        >>> b["worst"], b["met"], g["met"], b["at_read_floor"], b["short_at_read_floor"]
        (1.2, False, False, [1.5, 1.5], [])
    """
    bands = []
    for lo, hi, label in BANDS:
        cases = sorted({(r["model"], r["linear"], r["M"], r["K"]) for r in rows if lo <= r["M"] <= hi})
        if view == "bf16" and lo > 16:
            continue
        values, missing = [], []
        for model, lname, m, k in cases:
            with routing_env(env):
                kind = default_kernel(view, m, k)
            row = next((r for r in rows if (r["model"], r["linear"], r["M"], r["kind"]) == (model, lname, m, kind)), None)
            value = None if row is None else _measure(view, row, copy_bw)
            if value is None:
                missing.append(f"{model}/{lname}/{m}/{kind}")
            else:
                floor = row.get("x_read_floor")
                values.append((value, f"{model} {lname} M={m} ({kind})", floor, None if floor is None else value * floor))
        if not values and not missing:
            continue
        worst = min(values) if values else None
        best = max(values) if values else None
        bands.append(
            dict(
                rows=label,
                cases=len(values),
                worst=None if worst is None else worst[0],
                worst_case=None if worst is None else worst[1],
                best=None if best is None else best[0],
                best_case=None if best is None else best[1],
                x_read_floor=_span([v[2] for v in values if v[2] is not None]),
                at_read_floor=_span([v[3] for v in values if v[3] is not None]),
                short_at_read_floor=[v[1] for v in values if v[3] is not None and v[3] < target],
                missing=missing,
                met=bool(values) and not missing and worst[0] >= target,
            )
        )
    return dict(
        goal=goal, view=view, target=target, higher_is_better=True, bands=bands, met=bool(bands) and all(b["met"] for b in bands)
    )


def step_goals(ar_step: dict) -> list[dict]:
    """The step goals from a ``bench_roofline --ar-step --verify-rows 16`` JSON (a missing key fails its goal)."""
    out = []
    for goal, key, target, higher in STEP_GOALS:
        value = ar_step.get(key)
        met = value is not None and (value >= target if higher else value <= target)
        out.append(dict(goal=goal, key=key, target=target, higher_is_better=higher, value=value, met=met))
    return out


def _load(path: str, what: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise SystemExit(f"--{what}: expected a JSON file, found nothing at {p}")
    return json.loads(p.read_text())


FLOOR_BYTES_RTOL = 1e-3  # W12's bytes vary by a few hundred a linear with its random weights' escapes


def borrow_read_floors(rows: list[dict], floors: list[dict]) -> list[dict]:
    """``rows`` (a wide run's) with ``read_floor_s`` / ``x_read_floor`` where they lack one and ``floors`` (the same
    call's fixed-cost ``read_floor`` rows) timed the same (N, K) at the same bytes within ``FLOOR_BYTES_RTOL``: the
    floor is a property of the byte count on that GPU, so the fixed-cost run's measures the wide kernels' too
    (``read_floor_from``: ``"fixed_cost"``).

    Example:
        >>> floors = [dict(N=8, K=64, weight_bytes=1000, cold_s=2.0)]
        >>> rows = [dict(N=8, K=64, weight_bytes=1000, cold_s=3.0), dict(N=8, K=64, weight_bytes=750, cold_s=3.0)]
        >>> [r.get("x_read_floor") for r in borrow_read_floors(rows, floors)]
        [1.5, None]
    """
    out = []
    for r in rows:
        if "x_read_floor" not in r and "cold_s" in r:
            same = [
                f
                for f in floors
                if (f.get("N"), f.get("K")) == (r["N"], r["K"])
                and f.get("cold_s")
                and abs(f["weight_bytes"] - r["weight_bytes"]) <= FLOOR_BYTES_RTOL * r["weight_bytes"]
            ]
            if same:
                floor = same[0]["cold_s"]
                r = dict(r, read_floor_s=floor, x_read_floor=r["cold_s"] / floor, read_floor_from="fixed_cost")
        out.append(r)
    return out


def goals(fixed_cost: dict, wide: dict, ar_step: dict) -> dict:
    """Every goal from the three runs of one call (``--verify-rows`` 16 and the same GPU are required)."""
    devices = {fixed_cost["device"], wide["device"], ar_step.get("device")}
    if len(devices) != 1:
        raise ValueError(f"runs: expected one GPU for the three runs, got {sorted(map(str, devices))}")
    if ar_step.get("verify_rows") != 16:
        raise ValueError(f"ar_step: expected the verify step of 16 rows (--verify-rows 16), got {ar_step.get('verify_rows')}")
    floors = [r for r in fixed_cost["shapes"] if r["kind"] == "read_floor"]
    wide_rows = borrow_read_floors([r for r in wide["timings"] if r["model"] in MODELS], floors)
    rows = [r for r in fixed_cost["shapes"] if r["model"] in MODELS] + wide_rows
    rows = ratios(rows)
    env = fixed_cost["provenance"].get("env", {})
    wide_env = wide["provenance"].get("env", {})
    if {k: v for k, v in env.items() if k.startswith("SPECDEC_")} != {
        k: v for k, v in wide_env.items() if k.startswith("SPECDEC_")
    }:
        raise ValueError(f"runs: expected the same $SPECDEC_* in the fixed-cost and wide runs, got {env} and {wide_env}")
    copy_bw = fixed_cost["copy_bandwidth_bytes_per_s"]
    lin = [linear_goal(goal, view, target, rows, copy_bw, env) for goal, view, target in LINEAR_GOALS]
    return dict(
        device=fixed_cost["device"],
        copy_bandwidth_bytes_per_s=copy_bw,
        chains_env=env,
        step_env=ar_step["provenance"].get("env", {}),
        sources={k: d["provenance"] for k, d in (("fixed_cost", fixed_cost), ("wide", wide), ("ar_step", ar_step))},
        linear_goals=lin,
        step_goals=step_goals(ar_step),
        step_ms=dict(
            bf16=1e3 * ar_step["bf16_step_s"],
            bf16_skinny=1e3 * ar_step["bf16_skinny_step_s"],
            w12=1e3 * ar_step["w12_step_s"],
            bf16_floor=1e3 * ar_step["bf16_floor_s"],
            w12_verify_16=1e3 * ar_step["w12_verify_s"],
            bf16_verify_16=1e3 * ar_step["bf16_verify_s"],
        ),
    )


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def summary_lines(result: dict) -> list[str]:
    lines = [f"goals on {result['device']} (linears: worst - best by rows, the default kernel of each)"]
    for g in result["linear_goals"]:
        lines.append(f"{g['goal']} (goal {g['target']:.2f}): {'met' if g['met'] else 'NOT met'}")
        for b in g["bands"]:
            miss = f"; not timed: {', '.join(b['missing'])}" if b["missing"] else ""
            floor = ""
            if b.get("at_read_floor"):
                lo, hi = b["at_read_floor"]
                short = b["short_at_read_floor"]
                floor = f"; at their read floors {lo:.2f} - {hi:.2f}" + (
                    f", short even there: {', '.join(short)}" if short else ""
                )
            lines.append(f"  M {b['rows']}: {_fmt(b['worst'])} - {_fmt(b['best'])} (worst: {b['worst_case']}){floor}{miss}")
    for g in result["step_goals"]:
        sense = ">=" if g["higher_is_better"] else "<="
        lines.append(f"{g['goal']}: {_fmt(g['value'])} (goal {sense} {g['target']:.2f}): {'met' if g['met'] else 'NOT met'}")
    return lines


def plot(result: dict, path: Path) -> str | None:
    try:
        plt = agg_pyplot()
    except ImportError:
        return "no matplotlib: no plot"
    fig, axes = plt.subplots(1, len(result["linear_goals"]), figsize=(4.2 * len(result["linear_goals"]), 3.4), squeeze=False)
    for ax, g in zip(axes.flat, result["linear_goals"]):
        bands = [b for b in g["bands"] if b["worst"] is not None]
        xs = range(len(bands))
        lo = [b["worst"] for b in bands]
        hi = [b["best"] for b in bands]
        ax.vlines(xs, lo, hi, lw=6, color="tab:blue", alpha=0.6)
        ax.scatter(xs, lo, color="tab:red", zorder=3, s=14, label="worst linear")
        floors = [(x, b["at_read_floor"]) for x, b in zip(xs, bands) if b.get("at_read_floor")]
        if floors:
            ax.vlines([x + 0.15 for x, _ in floors], [f[0] for _, f in floors], [f[1] for _, f in floors], lw=3, color="0.6")
            ax.scatter([x + 0.15 for x, _ in floors], [f[0] for _, f in floors], color="0.4", s=10, label="at the read floors")
        ax.axhline(g["target"], color="gray", ls=":", lw=1, label=f"goal {g['target']:.2f}")
        ax.set_xticks(list(xs), [b["rows"] for b in bands])
        ax.set_xlabel("rows")
        ax.set_title(g["goal"], fontsize=9)
        ax.legend(fontsize=6, loc="lower left")
    fig.suptitle(f"the goals' linears, worst to best, {result['device']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixed-cost", help="bench_fixed_cost JSON (M = 1, 8, 16)")
    ap.add_argument("--wide", help="bench_wide_w12 JSON (17-64 rows)")
    ap.add_argument("--ar-step", help="bench_roofline --ar-step --verify-rows 16 JSON")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "goals.json"))
    ap.add_argument("--plot-only", default=None, help="redraw the PNG of an existing JSON and exit")
    args = ap.parse_args(argv)
    if args.plot_only:
        return redraw(plot, args.plot_only)
    missing = [f"--{name.replace('_', '-')}" for name in ("fixed_cost", "wide", "ar_step") if getattr(args, name) is None]
    if missing:
        ap.error(f"{', '.join(missing)}: expected the JSON of each of the call's three runs (or --plot-only JSON)")
    result = goals(_load(args.fixed_cost, "fixed-cost"), _load(args.wide, "wide"), _load(args.ar_step, "ar-step"))
    report(args.out, result, provenance(seed=None), plot, summary_lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
