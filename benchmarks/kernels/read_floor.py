"""The read floor of a weight-streaming call: the fastest kernel that only reads the same bytes.

A GEMM at decode sizes reads its weights once and writes almost nothing, so no kernel of it can beat a kernel
that reads the same bytes and does nothing else. Dividing bytes by the copy bandwidth (measured over 1 GiB) leaves
out what a single call of a few tens of MB pays whatever it computes: the launch, the first loads' DRAM latency,
the ramp until every SM has requests in flight, and the last wave's tail. Timed the way the GEMMs are (cold copies
cycled through a CUDA graph, ``bench_fixed_cost``), the read floor is what the hardware leaves to a call of those
bytes, and a GEMM's time over it is the part a better kernel could still remove.

Forms (the floor is the fastest): ``triton_<W>``: one program a ``W``-word block (int32 words, 16-byte loads), each
program's sum (int64) stored to its own slot; ``torch_sum``: ``torch.sum`` of the bytes as int32 words (one
reduction kernel). Every form's sum is checked against the bytes' sum (mod 2^32) before it is timed, so each byte
was read exactly once.

``bench_fixed_cost`` times the floor beside the kernels, at their byte counts. Run alone, this script times it over
a range of sizes (``--mb``), each fitted as ``fixed + bytes / rate``: ``python3 -m benchmarks.kernels.read_floor``
(GPU, ~20 s; writes JSON and a PNG). CPU smoke: ``--smoke`` (the torch form, small sizes; times mean nothing there).

Example (CPU: the torch form only):
    >>> buf = torch.arange(64, dtype=torch.uint8)
    >>> forms = read_forms(torch.device("cpu"))
    >>> list(forms), checked_sum(forms["torch_sum"](buf)) == word_sum(buf)
    (['torch_sum'], True)
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from benchmarks.common import Cycle, agg_pyplot, copy_bandwidth, provenance, provenance_line, redraw, report
from benchmarks.kernels.bench_roofline import time_per_call

TRITON_BLOCKS = (2048, 8192)  # int32 words a program: 8 KB and 32 KB
DEFAULT_L2_BYTES = 50 * 2**20
MBS = (4, 8, 16, 25, 32, 48, 64, 96, 128, 256, 512)
SMOKE_MBS = (0.01, 0.02, 0.04)


def word_sum(buf: torch.Tensor) -> int:
    """The wrapped int32 sum of ``buf``'s bytes read as little-endian int32 words (the reference every form matches)."""
    words = buf.view(torch.int32).to(torch.int64)
    return int(words.sum().item()) % 2**32


def _torch_sum(buf: torch.Tensor) -> torch.Tensor:
    return buf.view(torch.int32).sum(dtype=torch.int64)


def _triton_forms() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    import triton
    import triton.language as tl

    @triton.jit
    def read_sum_kernel(words_ptr, partial_ptr, n_words, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        w = tl.load(words_ptr + offs, mask=offs < n_words, other=0, eviction_policy="evict_first")
        tl.store(partial_ptr + pid, tl.sum(w.to(tl.int64), axis=0))

    def form(block: int) -> Callable[[torch.Tensor], torch.Tensor]:
        def run(buf: torch.Tensor) -> torch.Tensor:
            words = buf.view(torch.int32)
            n = words.numel()
            grid = triton.cdiv(n, block)
            partial = torch.empty(grid, dtype=torch.int64, device=buf.device)
            read_sum_kernel[(grid,)](words, partial, n, BLOCK=block, num_warps=8)
            return partial

        return run

    return {f"triton_{b}": form(b) for b in TRITON_BLOCKS}


def read_forms(device: torch.device) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """name -> ``read(buf)`` for a ``uint8`` buffer whose size is a multiple of 4: returns int64 partial sums
    (one or more) that add up, mod 2^32, to :func:`word_sum`. The Triton forms on CUDA only."""
    forms = {"torch_sum": _torch_sum}
    if device.type == "cuda":
        forms.update(_triton_forms())
    return forms


def checked_sum(partials: torch.Tensor) -> int:
    """A form's partial sums added up, mod 2^32 (compared with :func:`word_sum`)."""
    return int(partials.to(torch.int64).sum().item()) % 2**32


def fit_line(nbytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``seconds = a + nbytes / b``: returns ``(a, b)``, ``a`` in seconds, ``b`` in bytes per second.

    ``b`` is ``inf`` when the fitted slope is not positive (time that does not grow with bytes).

    Example:
        >>> a, b = fit_line([1e6, 2e6, 4e6], [3e-6 + 1e6 / 2e12, 3e-6 + 2e6 / 2e12, 3e-6 + 4e6 / 2e12])
        >>> round(a * 1e6, 6), round(b / 1e12, 6)
        (3.0, 2.0)
    """
    if len(nbytes) != len(seconds) or len(nbytes) < 2:
        raise ValueError(f"nbytes, seconds: expected two equal lengths >= 2, got {len(nbytes)} and {len(seconds)}")
    n = len(nbytes)
    mx, my = sum(nbytes) / n, sum(seconds) / n
    sxx = sum((x - mx) ** 2 for x in nbytes)
    if sxx == 0:
        raise ValueError("nbytes: expected at least two different values")
    slope = sum((x - mx) * (y - my) for x, y in zip(nbytes, seconds)) / sxx
    return my - slope * mx, (1.0 / slope if slope > 0 else math.inf)


def weight_copies(nbytes: int, l2_bytes: int, factor: float = 3.0, most: int = 64) -> int:
    """Identical weight copies a graph cycles through so that they span ``factor`` times the L2 (at most ``most``).

    Example:
        >>> weight_copies(32 << 20, 50 << 20), weight_copies(1 << 30, 50 << 20), weight_copies(1 << 10, 50 << 20)
        (5, 1, 64)
    """
    if nbytes <= 0:
        raise ValueError(f"nbytes: expected > 0, got {nbytes}")
    return max(1, min(most, math.ceil(factor * l2_bytes / nbytes)))


def cold_weight_device(args, parser, *, load_kernels: bool = True) -> torch.device:
    """The device of a cold-weight benchmark, with the L2 its copies must span in ``args.l2_bytes``: the CPU for
    ``args.smoke`` (2 calls a graph, 2 replays, the H200's 50 MB of L2), else CUDA (``parser.error`` without it),
    with the CUDA kernel library loaded first where ``load_kernels``."""
    if args.smoke:
        args.calls, args.reps, args.l2_bytes = 2, 2, DEFAULT_L2_BYTES
        return torch.device("cpu")
    if not torch.cuda.is_available():
        parser.error("needs CUDA; use --smoke on a CPU")
    device = torch.device("cuda")
    if load_kernels:
        from specdec.kernels.cuda.build import load_library

        load_library()
    args.l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
    return device


def read_floor_row(nbytes: int, args, gen, device) -> dict:
    """The read floor of ``nbytes`` (rounded up to whole int32 words): each form of ``read_floor.read_forms`` checked
    (its partial sums add up to the bytes' word sum) and timed cold; ``cold_s`` is the fastest form's.

    Example (CPU, times mean nothing there):
        >>> import argparse
        >>> args = argparse.Namespace(l2_bytes=1 << 12, l2_factor=3.0, calls=2, reps=1)
        >>> row = read_floor_row(1000, args, torch.Generator().manual_seed(0), torch.device("cpu"))
        >>> row["kind"], row["weight_bytes"], row["copies"], row["form"], row["cold_s"] > 0
        ('read_floor', 1000, 13, 'torch_sum', True)
    """
    padded = -(-nbytes // 4) * 4
    copies = weight_copies(padded, args.l2_bytes, args.l2_factor)
    first = torch.randint(0, 256, (padded,), generator=gen, device=device, dtype=torch.uint8)
    bufs = [first] + [first.clone() for _ in range(copies - 1)]
    expected = word_sum(first)
    row = dict(kind="read_floor", M=0, weight_bytes=nbytes, copies=copies, forms={})
    for name, read in read_forms(device).items():
        try:
            got = checked_sum(read(first))
            if got != expected:
                raise AssertionError(f"read {got} as the word sum, expected {expected}: not every byte read once")
            cold = Cycle(lambda i, read=read: read(bufs[i]), copies)
            row["forms"][name] = time_per_call(cold, device, calls=max(args.calls, copies), reps=args.reps)
        except Exception as exc:  # a form that fails is recorded; the others still give the floor
            row.setdefault("form_errors", {})[name] = f"{type(exc).__name__}: {exc}"[:300]
    if row["forms"]:
        row["form"], row["cold_s"] = min(row["forms"].items(), key=lambda item: item[1])
    else:
        row["error"] = "no read form ran"
    bufs.clear()  # the copies go before the next size is allocated
    return row


def attach_read_floors(rows: list[dict], args, gen, device, **fields) -> list[dict]:
    """The read floor of every byte count among ``rows`` (:func:`read_floor_row`, each also given ``fields``), and
    each timed row its own bytes' floor (``read_floor_s``) and its cold time over it (``x_read_floor``). Returns the
    floor rows, smallest first.

    Example (CPU, times mean nothing there):
        >>> import argparse
        >>> args = argparse.Namespace(l2_bytes=1 << 12, l2_factor=3.0, calls=2, reps=1)
        >>> rows = [dict(weight_bytes=1000, cold_s=1.0), dict(weight_bytes=1000), dict(weight_bytes=500, cold_s=1.0)]
        >>> floors = attach_read_floors(rows, args, torch.Generator().manual_seed(0), torch.device("cpu"), N=1)
        >>> [f["weight_bytes"] for f in floors], [f["N"] for f in floors], ["x_read_floor" in r for r in rows]
        ([500, 1000], [1, 1], [True, False, True])
    """
    floors = {}
    for nbytes in sorted({r["weight_bytes"] for r in rows}):
        floors[nbytes] = read_floor_row(nbytes, args, gen, device)
        floors[nbytes].update(fields)
    for r in rows:
        floor = floors[r["weight_bytes"]].get("cold_s")
        if floor and "cold_s" in r:
            r["read_floor_s"], r["x_read_floor"] = floor, r["cold_s"] / floor
    return list(floors.values())


def plot(result: dict, path: Path) -> str | None:
    """Cold time against MB read: every form (points), the floor's fit, and bytes over the copy bandwidth."""
    rows = [r for r in result["rows"] if "cold_s" in r]
    if not rows:
        return "no plot: no rows"
    try:
        plt = agg_pyplot()
    except ImportError as exc:
        return f"no plot: {exc}"
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [r["weight_bytes"] / 1e6 for r in rows]
    for i, form in enumerate(dict.fromkeys(f for r in rows for f in r["forms"])):
        pts = [(r["weight_bytes"] / 1e6, r["forms"][form] * 1e6) for r in rows if form in r["forms"]]
        ax.plot(*zip(*pts), "o", color=f"C{i}", label=form, alpha=0.7)
    fit = result.get("fit")
    line = sorted(xs)
    if fit:
        ax.plot(
            line,
            [(fit["fixed_s"] + x * 1e6 / fit["rate_bytes_per_s"]) * 1e6 for x in line],
            "-",
            color="k",
            alpha=0.5,
            label=f"floor fit: {fit['fixed_s'] * 1e6:.1f} us + bytes / {fit['rate_bytes_per_s'] / 1e12:.2f} TB/s",
        )
    bw = result["copy_bandwidth_bytes_per_s"]
    if bw == bw:
        ax.plot(line, [x * 1e12 / bw for x in line], "k--", label=f"bytes / copy bandwidth ({bw / 1e12:.2f} TB/s)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("MB read (cold)")
    ax.set_ylabel("us per call")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"read floor, {result.get('device', '?')}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def summary_lines(result: dict) -> list[str]:
    bw = result["copy_bandwidth_bytes_per_s"]
    lines = [f"copy {bw / 1e12:.2f} TB/s; read floor cold, in a CUDA graph"]
    fit = result.get("fit")
    if fit:
        lines.append(f"fit: {fit['fixed_s'] * 1e6:.2f} us + bytes / {fit['rate_bytes_per_s'] / 1e12:.2f} TB/s")
    lines.append("    MB   floor us   bytes/copy us   ratio   fastest form")
    for r in result["rows"]:
        if "cold_s" in r:
            ideal = r["weight_bytes"] / bw
            lines.append(
                f"{r['weight_bytes'] / 1e6:6.1f}   {r['cold_s'] * 1e6:8.2f}   {ideal * 1e6:13.2f}   {r['cold_s'] / ideal:5.2f}   {r['form']}"
            )
        else:
            lines.append(f"{r['weight_bytes'] / 1e6:6.1f}   FAILED {r.get('error')} {r.get('form_errors')}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "read_floor.json"))
    ap.add_argument("--smoke", action="store_true", help="CPU: the torch form, small sizes")
    ap.add_argument("--mb", default=",".join(str(m) for m in MBS), help="comma-separated sizes in MB (1e6 bytes)")
    ap.add_argument("--calls", type=int, default=20, help="calls per CUDA graph (at least the copies)")
    ap.add_argument("--reps", type=int, default=10, help="graph replays (median)")
    ap.add_argument("--l2-factor", type=float, default=3.0, help="cold copies span this many times the L2")
    ap.add_argument("--plot-only", default=None, help="redraw the PNG of an existing JSON and exit")
    args = ap.parse_args(argv)
    if args.plot_only:
        return redraw(plot, args.plot_only)
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    if args.smoke:
        args.calls, args.reps, args.mb = 2, 2, ",".join(str(m) for m in SMOKE_MBS)
    try:
        sizes = [int(float(m) * 1e6) for m in args.mb.split(",")]
    except ValueError:
        ap.error(f"--mb: expected comma-separated numbers, got {args.mb!r}")
    if not sizes or min(sizes) < 4:
        ap.error(f"--mb: expected sizes of at least 4 bytes, got {args.mb!r}")
    device = cold_weight_device(args, ap, load_kernels=False)
    gen = torch.Generator(device=device).manual_seed(0)
    t_start = time.time()
    rows = [read_floor_row(n, args, gen, device) for n in sizes]
    timed = [r for r in rows if "cold_s" in r]
    result = dict(
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (torch form)",
        data="random bytes",
        copy_bandwidth_bytes_per_s=copy_bandwidth(device),
        l2_bytes=args.l2_bytes,
        l2_factor=args.l2_factor,
        calls_per_graph=args.calls,
        reps=args.reps,
        rows=rows,
        errors=len(rows) - len(timed),
        wall_s=time.time() - t_start,
    )
    if len({r["weight_bytes"] for r in timed}) >= 2:
        a, b = fit_line([r["weight_bytes"] for r in timed], [r["cold_s"] for r in timed])
        result["fit"] = dict(fixed_s=a, rate_bytes_per_s=b)
    report(args.out, result, prov, plot, summary_lines)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
