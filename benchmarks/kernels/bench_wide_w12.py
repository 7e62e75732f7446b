"""The wide W12 and Q-view kernels (17-128 rows, ``wgmma`` from registers): exact first, then timed against cuBLAS bf16.

The tree and two-level verifiers' passes run the target's linears over 17-128 rows. Until these kernels, W12 weights
there went to the Triton kernel (0.23-0.38x cuBLAS bf16) or, at 17-32 rows, to two 16-row CUDA calls reading the
weights twice. ``specdec.kernels.cuda.ops.w12_gemm_wide`` / ``q_gemm_wide`` (``specdec/kernels/cuda/README.md``, "Wide
calls") read them once.

Checks, before any timing (each a row of ``checks``; the run fails if one fails):

* **decode, bit for bit**: one-hot rows of x read the weights back through the kernel (output column n of row m is
  then ``W[n, k_m]``), ``rows`` columns a call, for the exact view (escapes included: planted subnormals, zeros,
  outliers, a crowded escape tile) and the Q view, on shapes with a partial last 64-row block, K splits over CTAs,
  and 1 to 4 n-tiles of 32 tokens (partial ones too);
* **products**: random x at 17-128 rows against the float32 product of the decoded weights (the roofline's tolerance),
  twice (bit-equal: the split-K sums are in a fixed order), and once replayed from a CUDA graph (bit-equal).

Timing: each (model linear, rows) on cold weights (copies spanning 3x the L2, as ``bench_fixed_cost.py``) for cuBLAS
bf16 (``F.linear``), the wide W12 and Q kernels and the paths they would replace: above 16 rows the Triton W12 and Q
kernels (``backend="triton"``) and, at up to 32 rows, two 16-row W12 calls; at 16 rows, where the wide kernels are
not taken, the tensor-map W12 and Q calls the library runs there (whether the wide kernels would beat them). Prints a table of microseconds and
ratios to cuBLAS bf16 and writes JSON and a PNG. Random weights (Gaussian, std 0.02), labelled so.

Usage (repository root, GPU): ``python3 -m benchmarks.kernels.bench_wide_w12 --out $OUT/wide_w12.json`` (~90 s on one
H200; no new case starts past ``--budget-s``). ``--checks-only``: the checks on small shapes (for compute-sanitizer).
CPU smoke: ``--smoke`` (the reference paths, tiny shapes, no Triton kernels; times mean nothing there).
``--read-floor`` also times the read floor of each kernel's weight bytes (``read_floor.py``; ``read_floors`` in the
JSON) and gives every timed row its time over it (``x_read_floor``): what a kernel reading those bytes and nothing
else would take, so ``x_cublas * x_read_floor`` bounds what any kernel of that format can reach against cuBLAS.

With ``$SPECDEC_CUDA_KERNELS`` naming a library built with ``-DSPECDEC_WIDE_ABLATE`` (bits of what the wide kernels
leave out: 1 the decode, 2 the MMAs, 4 x's box, 8 the epilogue, 16 W12's escape warps, 32 their loads of x;
``specdec/kernels/cuda/README.md``, "Wide calls") the wide kernels are timed without their checks and the JSON says
``ablation``: what each part costs.

``--alternate NAME=V1,V2`` times every kernel under each value of the environment variable ``NAME`` in turn,
``--alternate-rounds`` times in this one process (each turn a graph captured again: a setting read at each call, such
as ``$SPECDEC_WIDE_STREAM_K``, is the one its graph captured), one row a value (``setting``; ``cold_s`` the median of
its turns, ``turns_s`` each): settings compared without the spread between processes, up to ~8 % on some calls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import (
    add_alternate_arguments,
    agg_pyplot,
    alternate_of,
    copy_bandwidth,
    env_set,
    provenance,
    provenance_line,
    redraw,
    report,
)
from benchmarks.kernels.bench_roofline import (
    linear_shapes,
    planted_weight,
    sync,
    time_per_call,
    w12_planes,
    weight_bytes,
    zero_sign,
)
from benchmarks.kernels.read_floor import Cycle, attach_read_floors, cold_weight_device, weight_copies
from specdec.kernels.launch import pdl_mode

ROWS = (16, 17, 32, 33, 64, 65, 96, 128)
SMOKE_ROWS = (16, 17, 40)
KERNELS = (
    "cublas_bf16",
    "cuda_w12_wide",
    "cuda_q_wide",
    "triton_w12",
    "triton_q",
    "cuda_w12_two_calls",
    "cuda_w12_small_m",
    "cuda_q_small_m",
)
# (N, K, one-hot rows a call): a partial last 64-row block; K split over CTAs (4 row blocks of 64 stages); 1-4 n-tiles;
# 105 stages in 6 uneven W12 splits on 132 SMs (planted escapes in the first, a middle and the last slice), a partial
# last 128-row block; 198 row blocks with K split in two on 132 SMs (396 CTAs: three waves)
CHECK_SHAPES = (
    (200, 1024, 32),
    (256, 4096, 64),
    (898, 6720, 64),
    (130, 2048, 128),
    (72, 1024, 16),
    (72, 1024, 17),
    (72, 1024, 33),
    (72, 1024, 100),
    (25344, 2048, 64),
)
SMOKE_CHECK_SHAPES = ((72, 128, 32), (40, 256, 17))
PRODUCT_ROWS = (16, 17, 33, 65, 100, 128)
SMOKE_PRODUCT_ROWS = (17, 40)
# A library built with -DSPECDEC_WIDE_ABLATE=A (ops.wide_ablation, A the bits of these parts left out) times parts of
# the wide kernels (bits 1-32), of the 1-16 token row-tile kernels (64) or of the 1-16 token tensor-map kernels of
# 64-row blocks (128), the bank conflicts of both kernels' consumers' stage loads (256), the persistent kernel's
# segment epilogues (512) or both kernels' consumers' loads and math (1024: their ring alone); their products are wrong,
# so the kinds
# whose kernels a bit of A reaches (ABLATED_KERNELS: kind -> bits) are timed unchecked and the checks are not run.
ABLATED_PARTS = {
    1: "decode",
    2: "MMAs",
    4: "x's box",
    8: "epilogue",
    16: "escape warps",
    32: "escape warps' x loads",
    64: "row tiles' x box",
    128: "tensor-map kernels' x box",
    256: "consumers' bank conflicts",
    512: "persistent kernel's segment epilogues",
    1024: "1-16 token consumers' loads and math",
}
ABLATED_KERNELS = {
    "cuda_w12_wide": 63,
    "cuda_q_wide": 63,
    "cuda_w12_two_calls": 448 | 512 | 1024,
    "cuda_w12_small_m": 448 | 512 | 1024,
    "cuda_q_small_m": 448 | 512 | 1024,
}


def calls_of(ops, w: torch.Tensor, w12, copies: int) -> dict[str, tuple[Callable[[torch.Tensor, int], torch.Tensor], bool]]:
    """kernel -> (``call(x, copy)``, compares with the Q view's product) over ``copies`` identical copies of ``w`` and
    of ``w12`` (its W12 encoding)."""
    from specdec.formats import W12Tensor, q_linear, w12_linear

    bf16 = [w] + [w.clone() for _ in range(copies - 1)]
    planes = [w12_planes(w12)] + [tuple(t.clone() for t in w12_planes(w12)) for _ in range(copies - 1)]
    tensors = [W12Tensor(*p, tuple(w12.shape)) for p in planes]

    def two_calls(x: torch.Tensor, i: int) -> torch.Tensor:
        return torch.cat([ops.w12_gemm_small_m(part, *planes[i]) for part in x.split(ops.TENSOR_MAP_MAX_TOKENS)])

    return {
        "cublas_bf16": (lambda x, i: F.linear(x, bf16[i]), False),
        "cuda_w12_wide": (lambda x, i: ops.w12_gemm_wide(x, *planes[i]), False),
        "cuda_q_wide": (lambda x, i: ops.q_gemm_wide(x, planes[i][0], planes[i][2]), True),
        "triton_w12": (lambda x, i: w12_linear(x, tensors[i], backend="triton"), False),
        "triton_q": (lambda x, i: q_linear(x, tensors[i], backend="triton"), True),
        "cuda_w12_two_calls": (two_calls, False),
        "cuda_w12_small_m": (lambda x, i: ops.w12_gemm_small_m(x, *planes[i]), False),
        "cuda_q_small_m": (lambda x, i: ops.q_gemm_small_m(x, planes[i][0], planes[i][2]), True),
    }


def times_kernel(kind: str, m: int, tensor_map_max: int) -> bool:
    """Whether ``kind`` is timed at ``m`` rows: the tensor-map (``*_small_m``) calls up to ``tensor_map_max`` rows,
    where the library takes them; two of them and the Triton kernels, the paths the wide kernels replace, above it.

    Example:
        >>> [m for m in (16, 17, 32, 33) if times_kernel("cuda_w12_two_calls", m, 16)]
        [17, 32]
    """
    if kind.endswith("_small_m"):
        return m <= tensor_map_max
    if kind == "cuda_w12_two_calls":
        return tensor_map_max < m <= 2 * tensor_map_max
    if kind.startswith("triton"):
        return m > tensor_map_max
    return True


def one_hot_read(op: Callable[[torch.Tensor], torch.Tensor], n: int, k: int, rows: int, device: torch.device) -> torch.Tensor:
    """The weight ``[n, k]`` read back through ``op(x)``, calls of ``rows`` one-hot x rows (row i picks column k0 + i;
    past K the last column again, those outputs dropped), so any ``rows`` runs, partial n-tiles of tokens included.

    Example:
        >>> w = torch.arange(12.0).reshape(3, 4)
        >>> torch.equal(one_hot_read(lambda x: x @ w.T, 3, 4, 3, torch.device("cpu")), w)
        True
    """
    cols = []
    for k0 in range(0, k, rows):
        x = torch.zeros(rows, k, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32, device=device)
        x[torch.arange(rows), (k0 + torch.arange(rows)).clamp(max=k - 1)] = 1.0
        cols.append(op(x)[: min(rows, k - k0)].T)
    return torch.cat(cols, dim=1)


def decode_check(ops, n: int, k: int, rows: int, gen: torch.Generator, device: torch.device) -> dict:
    """One-hot reads of a planted weight through both wide kernels, ``rows`` columns a call: exact view against
    ``to_bf16()`` and Q view against ``q_view()``, bit for bit (zeros' signs aside)."""
    from specdec.formats import W12Tensor

    w12 = W12Tensor.from_bf16(planted_weight(n, k, gen, device))
    planes = w12_planes(w12)
    exact = one_hot_read(lambda x: ops.w12_gemm_wide(x.to(torch.bfloat16), *planes), n, k, rows, device)
    q = one_hot_read(lambda x: ops.q_gemm_wide(x.to(torch.bfloat16), w12.ae, w12.base), n, k, rows, device)
    return dict(
        check="decode",
        N=n,
        K=k,
        rows=rows,
        escapes=int(w12.num_escapes),
        w12_exact=bool(torch.equal(zero_sign(exact), zero_sign(w12.to_bf16()))),
        q_exact=bool(torch.equal(zero_sign(q), zero_sign(w12.q_view()))),
    )


def product_check(ops, n: int, k: int, m: int, gen: torch.Generator, device: torch.device) -> dict:
    """Random x at ``m`` rows through both wide kernels: within the roofline's tolerance of the float32 product of the
    decoded weights, bit-equal on a second call and from a CUDA graph replay."""
    from specdec.formats import W12Tensor

    w12 = W12Tensor.from_bf16(planted_weight(n, k, gen, device))
    x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
    row = dict(check="product", N=n, K=k, M=m)
    for name, call, w in (
        ("w12", lambda: ops.w12_gemm_wide(x, *w12_planes(w12)), w12.to_bf16()),
        ("q", lambda: ops.q_gemm_wide(x, w12.ae, w12.base), w12.q_view()),
    ):
        ref = x.float() @ w.float().T
        err_ref = (F.linear(x, w).float() - ref).abs().max().item()
        y = call()
        err = (y.float() - ref).abs()
        row[f"{name}_within_tolerance"] = bool((err <= 2 * err_ref + ref.abs() * 2**-7).all())
        row[f"{name}_max_err"] = err.max().item()
        row[f"{name}_deterministic"] = bool(torch.equal(call(), y))
        if device.type == "cuda":
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = call()
            graph.replay()
            sync(device)
            row[f"{name}_graph_equal"] = bool(torch.equal(out, y))
    return row


def ablation_name(ablation: int) -> str:
    """What a ``SPECDEC_WIDE_ABLATE`` value leaves out of the wide kernels.

    Example:
        >>> ablation_name(3), ablation_name(12), ablation_name(19), ablation_name(64)
        ('no decode, no MMAs', "no x's box, no epilogue", 'no decode, no MMAs, no escape warps', "no row tiles' x box")
        >>> ablation_name(1024)
        "no 1-16 token consumers' loads and math"
    """
    if not 0 < ablation < 2 * max(ABLATED_PARTS):
        raise ValueError(f"ablation: expected 1 to {2 * max(ABLATED_PARTS) - 1} (bits of {ABLATED_PARTS}), got {ablation}")
    return ", ".join(f"no {part}" for bit, part in ABLATED_PARTS.items() if ablation & bit)


def library_ablation(ops, device: torch.device) -> int:
    """The loaded library's ``SPECDEC_WIDE_ABLATE`` (``ops.wide_ablation``) on a GPU; 0 off it, where the wide ops run
    their references."""
    return ops.wide_ablation() if device.type == "cuda" else 0


def check_passed(row: dict) -> bool:
    """Every flag of a check row holds.

    Example:
        >>> check_passed(dict(check="decode", w12_exact=True, q_exact=False)), check_passed(dict(w12_exact=True))
        (False, True)
    """
    return all(v for key, v in row.items() if isinstance(v, bool))


def time_case(ops, model: str, lname: str, n: int, k: int, ms, args, gen, device) -> list[dict]:
    """Every kernel at every row count of ``ms`` for one linear, on cold weights; each output checked first."""
    from specdec.formats import W12Tensor

    w = (torch.randn(n, k, generator=gen, device=device) * 0.02).to(torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    w_q = w12.q_view()
    # sized by the fewest bytes a kernel reads, so every kernel's copies span at least l2_factor x the L2
    copies = weight_copies(min(weight_bytes(kind, n, k, w12) for kind in args.kernels), args.l2_bytes, args.l2_factor)
    calls = calls_of(ops, w, w12, copies)
    rows = []
    for m in ms:
        x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
        refs = {False: x.float() @ w.float().T, True: x.float() @ w_q.float().T}
        errs = {q: (F.linear(x, w if not q else w_q).float() - refs[q]).abs().max().item() for q in refs}
        for kind in args.kernels:
            if not times_kernel(kind, m, ops.TENSOR_MAP_MAX_TOKENS):
                continue
            call, q_view = calls[kind]
            row = dict(model=model, linear=lname, kind=kind, N=n, K=k, M=m, weight_bytes=weight_bytes(kind, n, k, w12))

            def checked_time() -> float:
                err = (call(x, 0).float() - refs[q_view]).abs()
                ablated = args.ablation & ABLATED_KERNELS.get(kind, 0) != 0  # wrong products by design: timed only
                if not ablated and not bool((err <= 2 * errs[q_view] + refs[q_view].abs() * 2**-7).all()):
                    raise AssertionError(f"output off the float32 product by {err.max().item():.3g}")
                cold = Cycle(lambda i, call=call, x=x: call(x, i), copies)
                return time_per_call(cold, device, calls=max(args.calls, copies), reps=args.reps)

            if args.alternate is None:
                try:
                    row["cold_s"] = checked_time()
                except Exception as exc:  # one failing kernel must not hide the others' numbers
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                rows.append(row)
            else:
                rows += alternated_rows(row, checked_time, *args.alternate, args.alternate_rounds)
    del calls
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def alternated_rows(row: dict, timed: Callable[[], float], name: str, values: list[str], rounds: int) -> list[dict]:
    """``row`` once a value of the environment variable ``name``, each with ``setting`` (``NAME=value``), ``turns_s``
    (``timed()`` under that value, taken in turn with the other values ``rounds`` times) and ``cold_s`` their median,
    or ``error`` for a value whose call failed (its other turns skipped).

    Example (a stand-in timer that reads the variable):
        >>> t = lambda: {"0": 2.0, "1": 1.0}[os.environ["SPECDEC_EXAMPLE_SETTING"]]
        >>> rs = alternated_rows(dict(kind="w"), t, "SPECDEC_EXAMPLE_SETTING", ["0", "1"], 3)
        >>> [(r["setting"], r["cold_s"], r["turns_s"]) for r in rs]
        [('SPECDEC_EXAMPLE_SETTING=0', 2.0, [2.0, 2.0, 2.0]), ('SPECDEC_EXAMPLE_SETTING=1', 1.0, [1.0, 1.0, 1.0])]
    """
    turns: dict[str, list[float]] = {v: [] for v in values}
    errors: dict[str, str] = {}
    for _ in range(rounds):
        for value in values:
            if value in errors:
                continue
            with env_set(name, value):
                try:
                    turns[value].append(timed())
                except Exception as exc:  # one failing setting must not hide the others' numbers
                    errors[value] = f"{type(exc).__name__}: {exc}"[:300]
    out = []
    for value in values:
        r = dict(row, setting=f"{name}={value}")
        if value in errors:
            r["error"] = errors[value]
        else:
            r.update(turns_s=turns[value], cold_s=statistics.median(turns[value]))
        out.append(r)
    return out


def ratios(rows: list[dict]) -> list[dict]:
    """Each timed row with ``x_cublas``: cuBLAS bf16's time at the same linear and rows over the row's (> 1: faster).

    Example:
        >>> r = ratios([dict(linear="o", M=32, kind="cublas_bf16", cold_s=2.0), dict(linear="o", M=32, kind="w", cold_s=1.0)])
        >>> [x["x_cublas"] for x in r]
        [1.0, 2.0]
    """

    def key(r: dict) -> tuple:
        return r.get("model"), r["linear"], r["M"], r.get("setting")

    base = {key(r): r["cold_s"] for r in rows if r["kind"] == "cublas_bf16" and "cold_s" in r}
    out = []
    for r in rows:
        b = base.get(key(r))
        out.append(dict(r, x_cublas=b / r["cold_s"]) if b and "cold_s" in r else dict(r))
    return out


def _cell(r: dict | None) -> str:
    """A timed row as the summary prints it: us (x cuBLAS bf16[, x its read floor]).

    Example:
        >>> _cell(dict(cold_s=2e-5, x_cublas=0.75, x_read_floor=1.5)), _cell(dict(cold_s=1e-5, x_cublas=1.0)), _cell(None)
        ('20.0(0.75, 1.50x floor)', '10.0(1.00)', '-')
    """
    if r is None or "cold_s" not in r:
        return "-"
    floor = f", {r['x_read_floor']:.2f}x floor" if "x_read_floor" in r else ""
    return f"{1e6 * r['cold_s']:.1f}({r.get('x_cublas', float('nan')):.2f}{floor})"


def summary_lines(result: dict) -> list[str]:
    lines = [f"checks: {sum(check_passed(c) for c in result['checks'])} of {len(result['checks'])} passed"]
    if result.get("ablation"):
        lines.append(f"ablated wide kernels ({ablation_name(result['ablation'])}): times of parts, products not checked")
    for c in result["checks"]:
        if not check_passed(c):
            lines.append(f"  FAILED {c}")
    if result.get("programmatic_launch", "1") != "0":
        lines.append(
            f"$SPECDEC_PDL={result.get('programmatic_launch', '1')}: the CUDA GEMMs of a chain start while the call before "
            "ends (overlapped throughput; Triton and cuBLAS do not take part), not what a call costs in a step"
        )
    lines.append("model linear M: " + " ".join(f"{k}(us, x cuBLAS)" for k in result["kernels"]))
    keys = sorted({(r["model"], r["linear"], r["M"], r.get("setting") or "") for r in result["timings"]})
    for model, lname, m, setting in keys:
        cells = []
        for kind in result["kernels"]:
            r = next(
                (
                    r
                    for r in result["timings"]
                    if (r["model"], r["linear"], r["M"], r["kind"], r.get("setting") or "") == (model, lname, m, kind, setting)
                ),
                None,
            )
            cells.append(_cell(r))
        lines.append(f"{model} {lname} {m}{' ' + setting if setting else ''}: " + " ".join(cells))
    return lines


def plot(result: dict, path: Path) -> str | None:
    try:
        plt = agg_pyplot()
    except ImportError:
        return "no matplotlib: no plot"
    linears = sorted({(r["model"], r["linear"]) for r in result["timings"]})
    if not linears:
        return "no timings: no plot"
    cols = min(5, len(linears))
    fig, axes = plt.subplots(-(-len(linears) // cols), cols, figsize=(4 * cols, 3.2 * -(-len(linears) // cols)), squeeze=False)
    for ax, (model, lname) in zip(axes.flat, linears):
        settings = sorted({r.get("setting") or "" for r in result["timings"]})
        for kind in result["kernels"]:
            for setting in settings:
                pts = sorted(
                    (r["M"], r["x_cublas"])
                    for r in result["timings"]
                    if (r["model"], r["linear"], r["kind"], r.get("setting") or "") == (model, lname, kind, setting)
                    and "x_cublas" in r
                )
                if pts and kind != "cublas_bf16":
                    ax.plot(*zip(*pts), marker="o", label=f"{kind} {setting}".strip())
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.axhline(4 / 3, color="gray", lw=0.8, ls=":")
        ax.set_title(f"{model} {lname}", fontsize=9)
        ax.set_xlabel("rows")
        ax.set_ylabel("x cuBLAS bf16 (cold)")
    for ax in list(axes.flat)[len(linears) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"wide W12 / Q kernels vs cuBLAS bf16, {result['device']} (dotted: the W12 byte limit 4/3)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "wide_w12.json"))
    ap.add_argument("--smoke", action="store_true", help="CPU: reference paths, tiny shapes")
    ap.add_argument("--checks-only", action="store_true", help="the checks only (for compute-sanitizer)")
    ap.add_argument("--models", default="qwen3-8b,qwen3-32b")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated row counts to time")
    ap.add_argument("--kernels", default=",".join(KERNELS), help=f"comma-separated, of {','.join(KERNELS)}")
    ap.add_argument("--calls", type=int, default=20, help="calls per CUDA graph (at least the copies)")
    ap.add_argument("--reps", type=int, default=10, help="graph replays (median)")
    ap.add_argument("--l2-factor", type=float, default=3.0, help="cold copies span this many times the L2")
    ap.add_argument("--budget-s", type=float, default=80.0, help="no new case starts after this many seconds")
    ap.add_argument(
        "--read-floor",
        action="store_true",
        help="also time the read floor of each kernel's weight bytes (read_floor.py): x_read_floor on every timed row",
    )
    add_alternate_arguments(ap, "every kernel timed")
    ap.add_argument("--plot-only", default=None, help="redraw the PNG of an existing JSON and exit")
    args = ap.parse_args(argv)
    if args.plot_only:
        return redraw(plot, args.plot_only)
    args.alternate = alternate_of(ap, args)
    args.kernels = tuple(k.strip() for k in args.kernels.split(",") if k.strip())
    unknown = [k for k in args.kernels if k not in KERNELS]
    if unknown or "cublas_bf16" not in args.kernels:
        ap.error(f"--kernels: expected names of {KERNELS} including cublas_bf16, got {unknown or args.kernels}")
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    device = cold_weight_device(args, ap)
    if args.smoke:
        args.kernels = tuple(k for k in args.kernels if not k.startswith("triton"))  # no Triton off the GPU
    from specdec.kernels.cuda import ops

    args.ablation = library_ablation(ops, device)
    if args.ablation:
        print(f"a library built with SPECDEC_WIDE_ABLATE={args.ablation}: {ablation_name(args.ablation)}; no checks", flush=True)
    gen = torch.Generator(device=device).manual_seed(0)
    t_start = time.time()
    checks = []
    if not args.ablation:
        checks = [decode_check(ops, n, k, r, gen, device) for n, k, r in (SMOKE_CHECK_SHAPES if args.smoke else CHECK_SHAPES)]
        checks += [
            product_check(ops, 72 if args.smoke else 300, 256 if args.smoke else 4096, m, gen, device)
            for m in (SMOKE_PRODUCT_ROWS if args.smoke else PRODUCT_ROWS)
        ]
    for c in checks:
        print(("ok     " if check_passed(c) else "FAILED ") + str(c), flush=True)
    timings, not_run, read_floors = [], [], []
    if not args.checks_only:
        ms = SMOKE_ROWS if args.smoke else tuple(int(v) for v in args.rows.split(","))
        shapes = (
            {"smoke": {"a": (72, 128), "b": (40, 256)}} if args.smoke else {m: linear_shapes(m) for m in args.models.split(",")}
        )
        for model, lins in shapes.items():
            for lname, (n, k) in lins.items():
                if time.time() - t_start > args.budget_s:
                    not_run.append(f"{model}/{lname}")
                    continue
                case = time_case(ops, model, lname, n, k, ms, args, gen, device)
                if args.read_floor:
                    read_floors += attach_read_floors(case, args, gen, device, model=model, linear=lname, N=n, K=k)
                timings += case
                print(f"{model} {lname}: done ({time.time() - t_start:.0f} s)", flush=True)
    sync(device)
    failed = [r for r in timings if "error" in r]
    result = dict(
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (reference paths)",
        weights="random Gaussian, std 0.02 (bf16), W12 encoded from them; checks on planted weights",
        copy_bandwidth_bytes_per_s=copy_bandwidth(device),
        l2_bytes=args.l2_bytes,
        l2_factor=args.l2_factor,
        calls_per_graph=args.calls,
        reps=args.reps,
        programmatic_launch=pdl_mode(),
        ablation=args.ablation,
        alternate=None
        if args.alternate is None
        else dict(name=args.alternate[0], values=args.alternate[1], rounds=args.alternate_rounds),
        kernels=list(args.kernels),
        checks=checks,
        timings=ratios(timings),
        read_floors=read_floors,
        not_run=not_run,
        errors=len(failed),
        wall_s=time.time() - t_start,
    )
    report(args.out, result, prov, plot, summary_lines)
    for r in failed:
        print(f"FAILED {r['kind']} {r['linear']} M={r['M']}: {r['error']}")
    return 1 if failed or not all(check_passed(c) for c in checks) else 0


if __name__ == "__main__":
    raise SystemExit(main())
