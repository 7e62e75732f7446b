"""What each Triton kernel of a decode step holds on an SM: registers a thread, spill stack, shared memory and
threads a CTA, compiled for sm_90 on any machine (no GPU: Triton compiles to a cubin and its bundled ``cuobjdump``
reads the registers back).

Under programmatic launch a kernel's CTAs start beside the GEMM before it, so whether they fit next to that GEMM's
CTAs (registers, shared memory, threads of an SM) decides whether they start early or queue. The kernels are
compiled with the constants their launchers pass at the lean Qwen3-8B target's shapes (hidden 4096, FFN 12288, head
dim 128, 4 query heads a KV head, a cache of ``--slots`` slots) for each step width in ``--rows``; ``room`` then says
how many CTAs of each fit on an SM beside a GEMM's resident CTAs.

Run: ``python3 -m benchmarks.kernels.step_kernel_resources [--rows 1,16] [--out F.json]`` (CPU, ~1 min: a compile
a kernel and width).

Example (no compile):
    >>> gemm = Footprint(threads=192, registers=64, shared=63 * 1024)
    >>> room(gemm, 3, Footprint(threads=256, registers=64, shared=32))
    1
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import subprocess
import tempfile
from pathlib import Path

import torch
import triton

from benchmarks.common import provenance, provenance_line, write_json

SM_REGISTERS = 65536
SM_SHARED = 228 * 1024
SM_THREADS = 2048
SM_CTAS = 32
CTA_RESERVED_SHARED = 1024  # the shared memory the hardware reserves a resident CTA
REGISTER_GRANULE = 256  # registers are allocated a warp at a time, in units of 256


@dataclasses.dataclass(frozen=True)
class Footprint:
    """One CTA's claim on an SM: ``threads``, ``registers`` a thread, ``shared`` bytes (static + dynamic),
    ``stack`` bytes a thread of spills and calls."""

    threads: int
    registers: int
    shared: int
    stack: int = 0

    def warp_registers(self) -> int:
        return -(-self.registers * 32 // REGISTER_GRANULE) * REGISTER_GRANULE


def held(cta: Footprint, count: int) -> tuple[int, int, int]:
    """Registers, shared bytes and threads that ``count`` resident CTAs of ``cta`` hold on one SM."""
    warps = -(-cta.threads // 32)
    return (
        count * warps * cta.warp_registers(),
        count * (cta.shared + CTA_RESERVED_SHARED),
        count * cta.threads,
    )


def room(gemm: Footprint, gemm_ctas: int, other: Footprint) -> int:
    """How many CTAs of ``other`` fit on an SM that holds ``gemm_ctas`` CTAs of ``gemm``.

    Example:
        >>> room(Footprint(192, 80, 52 * 1024), 4, Footprint(256, 64, 32))  # 61,440 registers held: 4,096 left
        0
    """
    if gemm_ctas < 0:
        raise ValueError(f"gemm_ctas: expected >= 0, got {gemm_ctas}")
    regs, shared, threads = held(gemm, gemm_ctas)
    one_regs, one_shared, one_threads = held(other, 1)
    fits = [
        (SM_REGISTERS - regs) // one_regs,
        (SM_SHARED - shared) // one_shared,
        (SM_THREADS - threads) // one_threads,
        SM_CTAS - gemm_ctas,
    ]
    return max(0, min(fits))


def cuobjdump() -> Path:
    """Triton's bundled ``cuobjdump``."""
    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not path.is_file():
        raise FileNotFoundError(f"cuobjdump: expected Triton's bundled binary at {path}")
    return path


def parse_res_usage(text: str) -> dict[str, int]:
    """``REG``, ``STACK``, ``SHARED`` and ``LOCAL`` of the one function in ``cuobjdump -res-usage`` output.

    Example:
        >>> parse_res_usage(" Function k:\\n  REG:64 STACK:8 SHARED:1024 LOCAL:0 CONSTANT[0]:600")
        {'REG': 64, 'STACK': 8, 'SHARED': 1024, 'LOCAL': 0}
    """
    lines = [line for line in text.splitlines() if "REG:" in line]
    if len(lines) != 1:
        raise ValueError(f"cuobjdump -res-usage: expected one function's line, got {len(lines)}")
    found = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", lines[0]))
    return {key: int(found[key]) for key in ("REG", "STACK", "SHARED", "LOCAL")}


def compile_footprint(jit_fn, constants: dict, types: dict[str, str], options: dict) -> Footprint:
    """``jit_fn`` compiled for sm_90 with ``constants`` (its ``tl.constexpr`` arguments), ``types`` (the other
    arguments' Triton types; unnamed ones: ``*bf16`` for ``*_ptr``, ``fp32`` for ``eps`` and ``scale``, else ``i32``)
    and the launch's compile ``options`` (``num_warps``; ``num_stages``, Triton's 3 where not given; any other)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if not isinstance(jit_fn, triton.runtime.jit.JITFunction):
        raise RuntimeError(f"{jit_fn.fn.__name__}: defined for the interpreter; unset TRITON_INTERPRET to compile it")
    signature = {}
    for name in inspect.signature(jit_fn.fn).parameters:
        if name in constants:
            signature[name] = "constexpr"
        elif name in types:
            signature[name] = types[name]
        elif name.endswith("_ptr"):
            signature[name] = "*bf16"
        elif name in ("eps", "scale"):
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
    source = ASTSource(fn=jit_fn, signature=signature, constexprs=constants)
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_stages": 3, **options})
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        run = subprocess.run([str(cuobjdump()), "-res-usage", str(cubin)], check=True, capture_output=True, text=True)
    usage = parse_res_usage(run.stdout)
    return Footprint(
        threads=kernel.metadata.num_warps * 32,
        registers=usage["REG"],
        shared=usage["SHARED"] + kernel.metadata.shared,
        stack=usage["STACK"],
    )


def step_kernels(
    rows: int, slots: int, hidden: int = 4096, ffn: int = 12288, head_dim: int = 128, group: int = 4, kv_heads: int = 8
) -> dict:
    """The decode step's Triton kernels at ``rows`` tokens, each as ``(jit function, constants, types, options)``
    with the constants and compile options their launchers pass (``specdec.kernels``: rms, swiglu, rotary, split_kv;
    ``tests/benchmarks/test_step_kernel_resources.py`` checks them against the launchers' own launches), the split
    count from :func:`~specdec.kernels.attention.split_kv.default_splits` for an H100's or H200's 132 SMs."""
    from specdec.kernels.act import swiglu
    from specdec.kernels.attention import split_kv
    from specdec.kernels.norm import rms
    from specdec.kernels.rope import rotary

    if rows < 1 or slots < 1:
        raise ValueError(f"rows, slots: expected >= 1, got {rows}, {slots}")
    splits = split_kv.default_splits(kv_heads, slots, 64, torch.device("cuda"), sms=132)
    n_splits = triton.cdiv(slots, triton.cdiv(triton.cdiv(slots, 64), splits) * 64)
    fp32 = {"m_ptr": "*fp32", "l_ptr": "*fp32", "acc_ptr": "*fp32"}
    rope_types = {"cos_ptr": "*fp32", "sin_ptr": "*fp32", "slot_ptr": "*i64", "pos_ptr": "*i64", "q_index_ptr": "*i64"}
    return {
        "rms_norm (residual add)": (
            rms._rms_norm_kernel,
            dict(BLOCK=triton.next_power_of_2(hidden), GATED=False, SCALED=True, ADD=True, PDL=1),
            {},
            dict(num_warps=4 if hidden <= 1024 else 8),
        ),
        "silu_mul": (
            swiglu._silu_mul_kernel,
            dict(BLOCK=min(triton.next_power_of_2(ffn), 1024), ACCURATE_EXP=True, PDL=1),
            {},
            dict(num_warps=4),
        ),
        "qk_norm_rope": (
            rotary._qk_norm_rope_kernel,
            dict(BLOCK=triton.next_power_of_2(head_dim // 2), NORM=True, CACHE=True, SLOTS=False, Q_SCATTER=False, PDL=1),
            rope_types,
            dict(num_warps=1 if head_dim // 2 <= 64 else 2, **rotary.LAUNCH_OPTIONS),
        ),
        "split_kv split": (
            split_kv._split_kernel,
            dict(
                BLOCK_R=max(16, triton.next_power_of_2(group * rows)),
                BLOCK_N=64,
                D=head_dim,
                UPCAST=False,
                PRECISION="tf32",
                PDL=1,
            ),
            {**fp32, "mask_ptr": "*fp32"},
            dict(num_warps=4),
        ),
        "split_kv combine": (
            split_kv._combine_kernel,
            dict(BLOCK_S=min(32, triton.next_power_of_2(n_splits)), D=head_dim, PDL=1),
            fp32,
            dict(num_warps=4),
        ),
    }


# The W12 row-tile CTAs of a 16-token call as built and how many an SM holds: ring/row_tiles.cuh's 4 or 3 stages at 9-16
# tokens under a launch bound of 4 or 5 (benchmarks/NOTES.md, "Three stages at 9-16 tokens under a launch bound of
# 5"): 192 threads, the registers ptxas gave them, and make_rows_plan's shared bytes: stages x (16 x 256 weight bytes
# + 16 x 128 exponent bytes + 16 x 256 x 2 of x) + 4 x 16 x 16 x 4 of sums + 3,456 of escapes + 128 of alignment.
W12_ROWS16_SHARED = {stages: stages * (4096 + 2048 + 8192) + 4096 + 3456 + 128 for stages in (3, 4)}


def w12_rows16_builds() -> dict[str, tuple[Footprint, int]]:
    """The four builds of the W12 16-token row tiles: their CTA and how many an SM holds, by name."""
    return {
        "4 stages, bound 4": (Footprint(192, 80, W12_ROWS16_SHARED[4]), 3),
        "4 stages, bound 5": (Footprint(192, 64, W12_ROWS16_SHARED[4]), 3),
        "3 stages, bound 4": (Footprint(192, 80, W12_ROWS16_SHARED[3]), 4),
        "3 stages, bound 5": (Footprint(192, 64, W12_ROWS16_SHARED[3]), 4),
    }


def room_rows(records: list[dict], builds: dict[str, tuple[Footprint, int]] | None = None) -> list[dict]:
    """For each record of ``main`` and each GEMM build (its CTA and how many an SM holds; default
    :func:`w12_rows16_builds`), how many of the record's CTAs fit beside them on one SM."""
    builds = w12_rows16_builds() if builds is None else builds
    fields = {f.name for f in dataclasses.fields(Footprint)}
    out = []
    for r in records:
        cta = Footprint(**{k: v for k, v in r.items() if k in fields})
        out.append(dict(kernel=r["kernel"], rows=r["rows"], room={b: room(g, n, cta) for b, (g, n) in builds.items()}))
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,16", help="step widths, comma-separated (default 1,16)")
    parser.add_argument("--slots", type=int, default=256, help="cache slots the attention splits (default 256)")
    parser.add_argument("--kernels", default="", help="only these kernels (comma-separated names), default all")
    parser.add_argument("--out", type=Path, default=None, help="JSON output (default: print only)")
    args = parser.parse_args(argv)
    prov = provenance(seed=None)
    print(provenance_line(prov))
    widths = [int(r) for r in args.rows.split(",")]
    wanted = [k for k in args.kernels.split(",") if k]
    records = []
    for rows in widths:
        kernels = step_kernels(rows, args.slots)
        unknown = sorted(set(wanted) - set(kernels))
        if unknown:
            raise SystemExit(f"--kernels: expected names from {sorted(kernels)}, got {unknown}")
        for name, (fn, constants, types, options) in kernels.items():
            if wanted and name not in wanted:
                continue
            f = compile_footprint(fn, constants, types, options)
            records.append(dict(kernel=name, rows=rows, **dataclasses.asdict(f)))
            print(
                f"{name:24s} rows {rows:3d}: {f.threads:4d} threads, {f.registers:3d} registers, {f.stack:4d} B stack, {f.shared:6d} B shared"
            )
    rooms = room_rows(records)
    for r in rooms:
        print(f"{r['kernel']:24s} rows {r['rows']:3d}: CTAs an SM beside W12 16-token row tiles: {r['room']}")
    result = dict(slots=args.slots, kernels=records, room=rooms)
    if args.out:
        write_json(args.out, result, prov, indent=1)
    return dict(provenance=prov, **result)


if __name__ == "__main__":
    main()
