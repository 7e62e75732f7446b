"""The memory side of the tensor-map GEMMs alone: their ring with consumers that do no math, by stage layout and K split.

What a GEMM's ring reaches when its consumers do no math is the memory side's ceiling for that stage layout; the
gap between a GEMM and its ring is what its consumers and its epilogue cost. On the one-wave 8B shapes (o, qkv, down:
4096-6144 rows, K split four ways) that gap was W12's escape pass (``docs/w12.md``, "What held W12 on the one-wave
shapes"). ``stream_probe.cu`` (beside this file) runs the same ring (64-row CTAs, stages of 128 weights a row, 6 stages,
one producer thread, eight consumer warps, two CTAs an SM, K split over ``gridDim.y``) with consumers that only read
each stage from shared memory and sum it. Stage layouts:

* ``rows_w12`` / ``rows_q`` / ``rows_bf16``: the GEMMs' tensor-map boxes over the row-major planes (W12: a [64][128]
  box of ``ae`` and a [64][64] box of ``nib``; Q: the ``ae`` box; bf16: a [64][256-byte] box);
* ``tiled_w12`` / ``tiled_bf16``: the same bytes stored stage after stage, one contiguous bulk copy a stage;
* ``rows16_w12`` / ``rows16_q`` / ``rows16_bf16``: the row-tile kernels' ring (``tma_rows_kernel``: 16-row CTAs over the
  whole of K, stages of 256 weights a row, four consumer warps, five CTAs an SM) over their boxes (W12: [16][256] of
  ``ae`` and [16][128] of ``nib``; Q: the ``ae`` box; bf16: [16][256] values, 512-byte row pieces);
* ``tiled16_w12`` / ``tiled16_q`` / ``tiled16_bf16``: that ring over the same bytes stored stage after stage;
* ``wide_w12`` / ``wide_q``: the wide kernels' ring (``tma_wide_kernel``: 128-row CTAs, stages of 64 weights a row,
  eight consumer warps, one CTA an SM, 7 stages) over their boxes (W12: [128][64] of ``ae`` and [128][32] of ``nib``,
  row pieces of 64 and 32 bytes; Q: the ``ae`` box), at the wide plan's K split for 64 rows; the GEMM's ``x`` box (from
  the L2) is not read;
* ``wide128_w12``: that ring with stages of 128 weights a row ([128][128] ``ae``, [128][64] ``nib``).

If the rows layouts stream near the copy rate here, the GEMMs' consumers or epilogue hold them; if the rows layouts are
slow and the tiled ones fast, the row pieces are. Each shape also times the GEMMs themselves (cuBLAS bf16 and the
tensor-map kernels bf16 v2, W12 v7, Q v2 and the row tiles W12 v9, Q v4, bf16 v4) at M = 1 in the same run, with the
read floor of each of their byte counts (``read_floor.py``), all on cold weights (copies spanning 3x the L2, as
``bench_fixed_cost``). Every probe launch is checked first: the sum of the 32-bit words it read equals the sum of
the planes' words (every byte read exactly once). Probe planes are random bytes (labelled so): a ring that does no
math does not look at them.

Usage (repository root, GPU): ``python3 -m benchmarks.kernels.bench_stream_layout --out $OUT/stream_layout.json``
(~40 s after torch start on one H200; builds ``build/stream_probe.so`` with nvcc when it is missing: delete it after a
change to ``stream_probe.cu`` or the library source it includes, ``skinny_gemm.cu`` and its headers).
CPU: ``--smoke`` prints the cases and exits (the probe is CUDA only).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import time
from pathlib import Path

import torch

from benchmarks.common import REPO_ROOT, agg_pyplot, copy_bandwidth, provenance, provenance_line, redraw, report

SOURCE_NAME = "stream_probe.cu"  # beside this file
LIBRARY_NAME = "stream_probe.so"  # under build/ at the repository root
ROW_TILE = "whole K"  # the row tiles' K split: none
# name -> (layout id in stream_probe.cu, bytes a weight, the GEMM whose launch plan gives its K split, or ROW_TILE)
LAYOUTS = {
    "rows_w12": (0, 1.5, "w12_v7"),
    "rows_q": (1, 1.0, "q_v2"),
    "rows_bf16": (2, 2.0, "bf16_v2"),
    "tiled_w12": (3, 1.5, "w12_v7"),
    "tiled_bf16": (4, 2.0, "bf16_v2"),
    "rows16_w12": (5, 1.5, ROW_TILE),
    "rows16_q": (6, 1.0, ROW_TILE),
    "rows16_bf16": (7, 2.0, ROW_TILE),
    "tiled16_w12": (8, 1.5, ROW_TILE),
    "tiled16_q": (9, 1.0, ROW_TILE),
    "tiled16_bf16": (10, 2.0, ROW_TILE),
    "wide_w12": (11, 1.5, "w12_wide"),
    "wide_q": (12, 1.0, "q_wide"),
    "wide128_w12": (13, 1.5, "w12_wide"),
}
WIDE_ROWS = 64  # the rows of the wide plan whose K split the wide layouts take
SHAPES = {
    "8b_qkv": (6144, 4096),
    "8b_o": (4096, 4096),
    "8b_down": (4096, 12288),
    "8b_gate_up": (24576, 4096),
    "8b_lm_head": (151936, 4096),
}
SWEEP_SPLITS = (1, 2, 4, 8, 16)
SWEEP_LAYOUTS = ("rows_w12", "tiled_w12")
PROMOTIONS = {0: "none", 1: "128B", 2: "256B"}
GEMM_PROMOTION = 2
GEMMS = ("cublas_bf16", "cuda_bf16_v2", "cuda_w12_v7", "cuda_q_v2", "cuda_w12_v9", "cuda_q_v4", "cuda_bf16_v4")


def cases(shapes: dict[str, tuple[int, int]], plan_splits) -> list[dict]:
    """The probe cases of every shape: each layout at its GEMM's K split (the row tiles' layouts unsplit); the split
    sweep of ``SWEEP_LAYOUTS`` on shapes of one row-block wave (N <= 8192); W12's row boxes under each L2 promotion.
    ``plan_splits(gemm, n, k)`` gives a GEMM's K split.

    Example:
        >>> cs = cases({"o": (4096, 4096)}, lambda gemm, n, k: 4)
        >>> len(cs), cs[0]
        (21, {'shape': 'o', 'N': 4096, 'K': 4096, 'layout': 'rows_w12', 'k_splits': 4, 'promotion': 2, 'why': 'plan'})
    """
    out = []
    for name, (n, k) in shapes.items():
        seen = set()

        def add(layout, ks, promo, why):
            key = (layout, ks, promo)
            if key not in seen and 1 <= ks <= k // 128:
                seen.add(key)
                out.append(dict(shape=name, N=n, K=k, layout=layout, k_splits=ks, promotion=promo, why=why))

        for layout, (_, _, gemm) in LAYOUTS.items():
            add(layout, 1 if gemm == ROW_TILE else plan_splits(gemm, n, k), GEMM_PROMOTION, "plan")
        if n <= 8192:
            for layout in SWEEP_LAYOUTS:
                for ks in SWEEP_SPLITS:
                    add(layout, ks, GEMM_PROMOTION, "splits")
        for promo in PROMOTIONS:
            add("rows_w12", plan_splits("w12_v7", n, k), promo, "promotion")
    return out


def word_sum(buf: torch.Tensor) -> int:
    """The sum of ``buf``'s bytes read as little-endian unsigned 32-bit words (what the probe's consumers add up).

    Example:
        >>> word_sum(torch.tensor([1, 0, 0, 0, 255, 255, 255, 255], dtype=torch.uint8))
        4294967296
    """
    words = buf.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return int(words.sum().item())


def load_probe() -> ctypes.CDLL:
    """``build/stream_probe.so``, built with nvcc for sm_90a first when it is missing."""
    library = REPO_ROOT / "build" / LIBRARY_NAME
    if not library.exists():
        library.parent.mkdir(parents=True, exist_ok=True)
        from specdec.kernels.cuda.build import build_command

        subprocess.run(build_command(library, source=Path(__file__).with_name(SOURCE_NAME)), check=True)
    lib = ctypes.CDLL(str(library))
    lib.specdec_probe_stream.restype = ctypes.c_int
    ptr, i32 = ctypes.c_void_p, ctypes.c_int
    lib.specdec_probe_stream.argtypes = [i32, ptr, ptr, i32, i32, i32, i32, ptr, ptr]
    lib.specdec_probe_error.restype = ctypes.c_char_p
    return lib


class Probe:
    """One probe case over ``copies`` cold copies carved from ``pool``: ``self(i)`` launches it on copy ``i``."""

    def __init__(self, lib, case: dict, pool: torch.Tensor, copies: int, total: torch.Tensor):
        self.lib, self.case, self.total = lib, case, total
        n, k = case["N"], case["K"]
        self.layout = LAYOUTS[case["layout"]][0]
        self.nbytes = int(n * k * LAYOUTS[case["layout"]][1])
        self.copies = []
        for i in range(copies):
            chunk = pool[i * self.nbytes : (i + 1) * self.nbytes]
            w12_rows = ("rows_w12", "rows16_w12", "wide_w12", "wide128_w12")
            second = chunk[n * k :] if case["layout"] in w12_rows else chunk  # the nib plane after ae
            self.copies.append((chunk, second))
        self.i = 0

    def launch(self, i: int) -> None:
        a, b = self.copies[i]
        c = self.case
        rc = self.lib.specdec_probe_stream(
            self.layout,
            a.data_ptr(),
            b.data_ptr(),
            c["N"],
            c["K"],
            c["k_splits"],
            c["promotion"],
            self.total.data_ptr(),
            torch.cuda.current_stream().cuda_stream,
        )
        if rc != 0:
            raise RuntimeError(f"probe {c}: {self.lib.specdec_probe_error().decode()}")

    def __call__(self) -> None:
        self.launch(self.i)
        self.i = (self.i + 1) % len(self.copies)

    def check(self) -> bool:
        """One launch on copy 0: the words it summed equal the copy's words."""
        self.total.zero_()
        self.launch(0)
        torch.cuda.synchronize()
        return int(self.total.item()) == word_sum(self.copies[0][0])


def time_gemms(name: str, n: int, k: int, args, gen, device, copy_bw: float) -> list[dict]:
    """The GEMMs of ``GEMMS`` at M = 1 on cold copies of one random weight, with the read floor of each of their byte
    counts (``bench_fixed_cost.time_shape``, kind ``read_floor``)."""
    from benchmarks.kernels.bench_fixed_cost import time_shape
    from specdec.kernels.cuda import ops

    rows = time_shape(
        n, k, (1,), argparse.Namespace(**vars(args), kernels=GEMMS, read_floor=True, ablation=0), gen, device, ops, warm=False
    )
    for r in rows:
        r["shape"] = name
        if "cold_s" in r:
            r["frac_of_copy"] = r["weight_bytes"] / r["cold_s"] / copy_bw
    return rows


def plot(result: dict, path: Path) -> str | None:
    """Fraction of the copy bandwidth per shape: the GEMMs (hatched) beside the probe's layouts at the GEMMs' splits."""
    rows = [r for r in result["probe"] if r.get("why") == "plan" and "s" in r]
    if not rows:
        return "no plot: no probe rows"
    try:
        plt = agg_pyplot()
    except ImportError as exc:
        return f"no plot: {exc}"
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    names = list(LAYOUTS) + list(GEMMS)
    fig, ax = plt.subplots(figsize=(12, 4.8))
    width = 0.8 / len(names)
    for j, name in enumerate(names):
        vals = []
        for s in shapes:
            if name in LAYOUTS:
                r = next((r for r in rows if r["shape"] == s and r["layout"] == name), None)
            else:
                r = next((g for g in result["gemms"] if g["shape"] == s and g["kind"] == name and "frac_of_copy" in g), None)
            vals.append(r["frac_of_copy"] if r else 0.0)
        xs = [i + (j - len(names) / 2) * width for i in range(len(shapes))]
        ax.bar(xs, vals, width, label=name, color=f"C{j % 10}", hatch="//" if name in GEMMS else None)
    ax.axhline(1.0, color="k", ls="--", lw=0.8)
    ax.set_xticks(range(len(shapes)), shapes)
    ax.set_ylabel("weight bytes / s, of copy bandwidth")
    ax.set_title(f"ring without math (probe layouts) vs the GEMMs, M = 1, cold; {result.get('device', '?')} (random bytes)")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def summary_lines(result: dict) -> list[str]:
    """The probe cases, then the GEMMs, as fractions of the copy bandwidth."""
    lines = [f"copy {result['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s; probe checks passed {result['checks_passed']}"]
    lines.append("shape        layout      splits promo  why        us     of copy")
    for r in result["probe"]:
        if "s" in r:
            lines.append(
                f"{r['shape']:12s} {r['layout']:11s} {r['k_splits']:5d}  {PROMOTIONS[r['promotion']]:5s} {r['why']:9s}"
                f" {r['s'] * 1e6:7.1f}   {r['frac_of_copy']:5.2f}"
            )
    lines.append("shape        gemm (M = 1)     us     of copy")
    for g in result["gemms"]:
        if "cold_s" in g:
            lines.append(f"{g['shape']:12s} {g['kind']:14s} {g['cold_s'] * 1e6:7.1f}   {g['frac_of_copy']:5.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "stream_layout.json"))
    ap.add_argument("--smoke", action="store_true", help="CPU: print the cases and exit")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--calls", type=int, default=20, help="calls per CUDA graph (at least the copies)")
    ap.add_argument("--reps", type=int, default=10, help="graph replays (median)")
    ap.add_argument("--l2-factor", type=float, default=3.0, help="cold copies span this many times the L2")
    ap.add_argument("--no-gemms", action="store_true", help="the probe alone")
    ap.add_argument("--plot-only", default=None, help="redraw the PNG of an existing JSON and exit")
    args = ap.parse_args(argv)
    if args.plot_only:
        return redraw(plot, args.plot_only)
    shapes = {s: SHAPES[s] for s in args.shapes.split(",")}
    if args.smoke:
        for c in cases(shapes, lambda gemm, n, k: 4):
            print(c)
        return 0
    if not torch.cuda.is_available():
        ap.error("needs CUDA; --smoke prints the cases on a CPU")
    from benchmarks.kernels.bench_fixed_cost import weight_copies
    from benchmarks.kernels.bench_roofline import time_per_call
    from specdec.kernels.cuda import ops
    from specdec.kernels.cuda.build import load_library

    load_library()
    device = torch.device("cuda")
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    lib = load_probe()
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    args.l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    copy_bw = copy_bandwidth(device)

    def plan_splits(gemm: str, n: int, k: int) -> int:
        if gemm.endswith("_wide"):
            return ops.wide_plan(gemm.removesuffix("_wide"), WIDE_ROWS, n, k, sms)["k_splits"]
        return ops.launch_plan(gemm, 1, n, k, sms)["k_splits"]

    all_cases = cases(shapes, plan_splits)
    gen = torch.Generator(device=device).manual_seed(0)
    total = torch.zeros(1, dtype=torch.int64, device=device)
    t0 = time.time()
    probe_rows, gemm_rows, checks = [], [], []
    for name, (n, k) in shapes.items():
        mine = [c for c in all_cases if c["shape"] == name]
        sizes = [int(n * k * LAYOUTS[c["layout"]][1]) for c in mine]
        need = max(b * weight_copies(b, args.l2_bytes, args.l2_factor) for b in sizes)
        pool = torch.randint(0, 256, (need,), dtype=torch.uint8, device=device, generator=gen)
        for c, nbytes in zip(mine, sizes):
            copies = weight_copies(nbytes, args.l2_bytes, args.l2_factor)
            row = dict(c, bytes=nbytes, copies=copies)
            try:
                probe = Probe(lib, c, pool, copies, total)
                row["check"] = probe.check()
                checks.append(row["check"])
                if row["check"]:
                    row["s"] = time_per_call(probe, device, calls=max(args.calls, copies), reps=args.reps)
                    row["frac_of_copy"] = nbytes / row["s"] / copy_bw
            except Exception as exc:  # one failing case must not hide the others
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                checks.append(False)
            probe_rows.append(row)
        del pool
        torch.cuda.empty_cache()
        if not args.no_gemms:
            gemm_rows.extend(time_gemms(name, n, k, args, gen, device, copy_bw))
        print(f"{name}: done ({time.time() - t0:.0f} s)", flush=True)
    result = dict(
        device=torch.cuda.get_device_name(device),
        copy_bandwidth_bytes_per_s=copy_bw,
        weights="random bytes (probe), Gaussian std 0.02 (GEMMs)",
        checks_passed=f"{sum(checks)}/{len(checks)}",
        probe=probe_rows,
        gemms=gemm_rows,
        wall_s=time.time() - t0,
    )
    report(args.out, result, prov, plot, summary_lines)
    return 0 if all(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
