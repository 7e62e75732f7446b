"""Roofline of the weight-streaming GEMMs at decode sizes: achieved weight bytes/s against the copy bandwidth.

Per Qwen3-8B / Qwen3-32B linear shape (random weights, ``specdec/models/shapes.py``) and M in {1, 2, 4, 8}:
cuBLAS bf16 (``F.linear``), cuBLAS fp8 with one scale per tensor (``torch._scaled_mm``, M padded to 16; the
lossy reference), the Triton W12 exact and Q-view kernels (``specdec.formats.w12_linear`` / ``q_linear``)
and the CUDA kernels of ``specdec/kernels/cuda`` (``specdec::skinny_gemm_bf16``, ``specdec::w12_gemm_small_m``,
``specdec::q_gemm_small_m``; ``cuda_bf16``, ``cuda_w12`` and ``cuda_q`` pinned to the register kernels,
``SPECDEC_BF16_CUDA_VARIANT=v1``, ``SPECDEC_W12_CUDA_VARIANT=v1`` and ``SPECDEC_Q_CUDA_VARIANT=v1``, the other variants in
columns of their own). Time per call: a CUDA graph of
``--calls`` (20) calls, median of ``--reps`` replays. Reported: time, weight bytes/s (the bytes each kernel must
read: bf16 2, fp8 1, W12 its planes, Q its AE plane and bases), ratio to cuBLAS bf16 and to the copy bandwidth of the
same run.

Correctness first, in the same run:
* decoded weights bit-exact: the CUDA W12 kernel on one-hot rows of x (output column n of row m is then
  exactly the weight ``W[n, k0 + m]``) over every column of three shapes with planted escapes (subnormals,
  weights far below the window, outliers, a crowded escape tile, signed zeros, zero rows and columns), one
  with K % 16 = 8 and N % 16 != 0; the same for the Q kernel against ``q_view()``; recorded for bf16;
* the W12 kernel gives the same bits twice (its reductions run in a fixed order);
* the same two checks for the streaming W12 kernel (``cuda_w12_v3``: ``SPECDEC_W12_CUDA_VARIANT=v3``), plus one
  shape of its own that uses 16-CTA clusters;
* the same two checks for the W12 kernel with K split over independent CTAs (``cuda_w12_v4``:
  ``SPECDEC_W12_CUDA_VARIANT=v4``), plus shapes of its own whose plans use many uneven splits, at M = 8 and, with
  one-hot single-token calls, at M = 1 (every call reuses the workspace, so these also check that each launch
  leaves its counters at zero);
* the same two checks for the W12 kernel fed by bulk copies into shared-memory stages (``cuda_w12_v5``:
  ``SPECDEC_W12_CUDA_VARIANT=v5``; K % 32 != 0 runs the v4 kernel), plus shapes of its own with K % 32 == 0: many
  uneven splits and a last stage that ends inside K, at M = 8 and with one-hot single-token calls at M = 1;
* the same checks, on the same shapes, for that kernel with four producer warps issuing the copies (``cuda_w12_v6``:
  ``SPECDEC_W12_CUDA_VARIANT=v6``), for that pipeline fed by 2-D TMA copies through tensor maps (``cuda_w12_v7``:
  ``SPECDEC_W12_CUDA_VARIANT=v7``) and for v7's pipeline in persistent CTAs (``cuda_w12_v8``:
  ``SPECDEC_W12_CUDA_VARIANT=v8``: each CTA a run of equal length over row blocks x stages);
* the same two checks, on the same shapes, for the Q view on that tensor-map pipeline (``cuda_q_v2``:
  ``SPECDEC_Q_CUDA_VARIANT=v2``; K % 32 != 0 runs the register Q kernel) against ``q_view()``, and for plain bf16
  weights on it (``cuda_bf16_v2``: ``SPECDEC_BF16_CUDA_VARIANT=v2``; one-hot rows give the weights back exactly), and
  both in the persistent CTAs of v8 (``cuda_q_v3``, ``cuda_bf16_v3``: ``..._VARIANT=v3``); the same checks for W12,
  Q and bf16 in CTAs of one 16-row tile over the whole of K (``cuda_w12_v9``, ``cuda_q_v4``, ``cuda_bf16_v4``);
* every timed kernel's output against the fp32 reference ``x.float() @ W.float().T`` (Q: of ``q_view()``)
  within ``2 * (cuBLAS bf16's max error) + |y_ref| * 2^-7`` per element; a kernel that fails is not timed.

    python -m benchmarks.kernels.bench_roofline --out $OUT/roofline.json     # GPU; PNG beside the JSON
    python -m benchmarks.kernels.bench_roofline --smoke                      # CPU, reference paths, tiny shapes
    compute-sanitizer --tool memcheck python -m benchmarks.kernels.bench_roofline --sanitize
    python -m benchmarks.kernels.bench_roofline --probe v5 --out $OUT/v5_probe.json   # one staged kernel alone, first
    python -m benchmarks.kernels.bench_roofline --skip-variant v5 ...        # any mode above without it (repeatable)
    (--probe and --skip-variant take v5 to v9, q_v2 to q_v4 and bf16_v2 to bf16_v4)
    python -m benchmarks.kernels.bench_roofline --plot-only roofline.json    # redraw the PNG from a JSON
    python -m benchmarks.kernels.bench_roofline --ar-step --out $OUT/ar_step.json   # GPU; add --smoke on a CPU

The AR-step part (``--ar-step``): the Qwen3-8B-shaped lean target (random bf16 weights, ``random_target``) and
the same weights converted to W12 (``specdec.formats.convert``), both running their one-token decode step as
CUDA-graph replays (CPU smoke: the same static path without capture, tiny shapes). Reported per target: time
per step against the weight-read floor (linear weight bytes / copy bandwidth), the verify step of
``VERIFY_ROWS`` (16) rows against the one-token step (the goal: <= 1.10x), the W12 step with the Triton
path forced (``SPECDEC_W12_CUDA=0``) for comparison, and, teacher-forced along the bf16 target's greedy
tokens, whether the W12 target picks the same 32 tokens and the largest ``|logit difference|`` (W12 holds the
same weights, but its GEMMs reduce in another order, so the logits need not be bitwise equal). On CUDA each target's
one-token step and its verify step are also profiled (``torch.profiler``, 5 replays): GPU time a step in GEMM,
attention and other kernels, and the top kernels (``<target>_step_kernels``, ``<target>_verify_kernels``). With
``--alternate NAME=V1,V2`` (``--alternate-rounds``, default 3) the W12 target's step and verify step (with
``--alternate-target bf16_skinny`` the bf16 target's with the skinny linears) are timed
again under each value of the environment variable in turn in the same process, graphs captured again for each turn
(``alternated`` in the JSON, ``alternated_steps``): a kernel setting's effect on the step without the spread between
processes, e.g. ``--ar-step --verify-rows 64 --alternate SPECDEC_WIDE_STREAM_K=0,auto``. ``--ar-model qwen3-32b
--ar-layers 24`` builds the target at another model's shape, with fewer of its layers where both targets of all of
them would not fit the GPU (the 32B's 64 layers: ~65 GB of bf16 weights beside ~49 GB of W12).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.common import (
    Cycle,
    add_alternate_arguments,
    agg_pyplot,
    alternate_of,
    copy_bandwidth,
    env_set,
    provenance,
    provenance_line,
    redraw,
    report,
    write_json,
)
from specdec.models.shapes import SHAPES

MS = (1, 2, 4, 8)
# Verify widths past the register kernels' 8 tokens: timed for the kernels that take them (TWO_TILE_KERNELS).
WIDE_MS = (16,)
MODELS = ("qwen3-8b", "qwen3-32b")
SMOKE_SHAPES = {"smoke": {"a": (40, 64), "b": (24, 136)}}
# Shapes of the one-hot decode check: (N, K); the second has K % 16 = 8, K % 64 != 0 and N % 16 != 0; the
# third splits its 33 W12 / Q chunks unevenly over an 8-CTA cluster (shares of 4 and 5 chunks).
DECODE_SHAPES = ((520, 2048), (300, 1032), (520, 2056))
SMOKE_DECODE_SHAPES = ((24, 64), (20, 40))
# compute-sanitizer shapes: K % 16 = 8 without K splits (W12), and uneven 8-CTA K splits with escapes
SANITIZE_SHAPES = ((300, 1032), (520, 2056))
# The streaming W12 kernel (SPECDEC_W12_CUDA_VARIANT=v3) also on a shape whose plan uses 16-CTA clusters with
# uneven K shares (65 chunks), K % 16 = 8 and a partial last 64-row block.
V3_DECODE_SHAPES = ((130, 4104),)
SMOKE_V3_DECODE_SHAPES = ((20, 48),)
# The W12 kernel with K split over independent CTAs (SPECDEC_W12_CUDA_VARIANT=v4): (N, K, M of the one-hot calls).
# 72 x 25608 at M = 8: 30 uneven splits of 401 chunks (13-14 each), K % 16 = 8, a partial second 64-row block;
# 72 x 4104 at M = 1: 16 uneven splits of 65 chunks (4-5 each).
V4_DECODE_SHAPES = ((72, 25608, 8), (72, 4104, 1))
SMOKE_V4_DECODE_SHAPES = ((20, 48, 8), (24, 64, 1))
# The W12 kernel fed by bulk copies (SPECDEC_W12_CUDA_VARIANT=v5; stages of 128 k): (N, K, M of the one-hot calls).
# 72 x 25632 at M = 8: 60 uneven splits of 201 stages (3-4 each), the last stage 32 k long, a partial second
# 64-row block; 72 x 4128 at M = 1: 16 uneven splits of 33 stages (2-3 each), the last 32 k long.
V5_DECODE_SHAPES = ((72, 25632, 8), (72, 4128, 1))
SMOKE_V5_DECODE_SHAPES = ((20, 96, 8), (24, 64, 1))
# compute-sanitizer shapes of the v5 kernel alone (K % 32 == 0; the shared ones above run its v4 path): 9 stages,
# the last 32 k long, 4 uneven splits at M = 1 and 2 at M = 8, a partial last 64-row block, escapes.
V5_SANITIZE_SHAPES = ((300, 1056),)
# The v5 probe, run on its own before the main run (a kernel that faults or never finishes must not take the
# other kernels' results with it): (N, K, M), against the fp32 product with the timed run's tolerance.
V5_PROBE_CASES = ((520, 2048, 8), (300, 1056, 1), (300, 1056, 8), (4096, 4096, 8))
SMOKE_V5_PROBE_CASES = ((24, 64, 1), (20, 96, 8))
# The W12 kernels fed by copies into shared-memory stages: bulk copies from one producer warp (v5) and from four (v6),
# 2-D TMA copies through tensor maps (v7), v7's pipeline in persistent CTAs (v8) and in CTAs of one 16-row tile over the
# whole of K (v9).
BULK_VARIANTS = ("v5", "v6", "v7", "v8", "v9")
# Those, the Q view and plain bf16 weights on the tensor-map pipeline (SPECDEC_Q_CUDA_VARIANT=v2,
# SPECDEC_BF16_CUDA_VARIANT=v2) and in its persistent CTAs (v3): each runs v5's check, sanitizer and probe shapes and
# can be probed alone (--probe) and left out (--skip-variant).
PROBE_VARIANTS = (*BULK_VARIANTS, "q_v2", "bf16_v2", "q_v3", "bf16_v3", "q_v4", "bf16_v4")
KERNELS = (
    "cublas_bf16",
    "cublas_fp8",
    "triton_w12",
    "triton_q",
    "cuda_bf16",
    "cuda_w12",
    "cuda_q",
    "cuda_w12_v3",
    "cuda_w12_v4",
    "cuda_w12_v5",
    "cuda_w12_v6",
    "cuda_w12_v7",
    "cuda_q_v2",
    "cuda_bf16_v2",
    "cuda_w12_v8",
    "cuda_q_v3",
    "cuda_bf16_v3",
    "cuda_w12_v9",
    "cuda_q_v4",
    "cuda_bf16_v4",
)
# The tensor-map kernels (their probes also run 16 tokens, and the sanitizer runs them at M = 16 on its staged shapes).
TENSOR_MAP_VARIANTS = ("v7", "q_v2", "bf16_v2", "v8", "q_v3", "bf16_v3", "v9", "q_v4", "bf16_v4")
# The kernels that take 9..16 tokens: the references and the tensor-map kernels (two MMA n-tiles), by their columns.
TWO_TILE_KERNELS = ("cublas_bf16", "cublas_fp8", "triton_w12", "triton_q") + tuple(
    f"cuda_{v}" if "_" in v else f"cuda_w12_{v}"
    for v in TENSOR_MAP_VARIANTS  # Q and bf16 variants carry their kind
)
# The tensor-map kernels' own one-hot checks with a second n-tile of tokens: (N, K, M), K % 32 == 0 and K % M == 0;
# 130 x 2112 at M = 12: a partial last 64-row block and tokens 8..11 in the second tile; 72 x 4128 at M = 16.
TWO_TILE_DECODE_SHAPES = ((130, 2112, 12), (72, 4128, 16))
SMOKE_TWO_TILE_DECODE_SHAPES = ((20, 96, 12), (24, 64, 16))
# The persistent kernels run only where the split-K plan needs more than one wave of CTAs: their own checks,
# probes and sanitizer runs also take a tall, short shape (321 row blocks of 2.25 stages: runs of 2-3 stages across
# blocks, a partial last block, a last stage 32 long). (N, K); probes and checks at M = 1, 8 and 16.
PERSISTENT_VARIANTS = ("v8", "q_v3", "bf16_v3")
STREAM_K_SHAPES = ((20500, 288),)
SMOKE_STREAM_K_SHAPES = ((40, 96),)
TWO_TILE_PROBE_CASE = (300, 1056, 16)
# A crowded call for the tensor-map probes (GPU only): 16 tokens over 1,536 row tiles of 16 stages, several CTAs an SM
# for several waves. A consumer that releases a stage before its loads have landed gives wrong or changing outputs
# here (bf16 at 16 tokens did, on the H200, before consume_segment waited for them), not on the small cases.
CROWDED_PROBE_CASE = (24576, 4096, 16)
# 13 tokens: x's rows short of the 16-token kernels' 16 (their x boxes and slots are M rows), over 8 stages.
ODD_TOKENS_PROBE_CASE = (520, 2048, 13)
SMOKE_TWO_TILE_PROBE_CASE = (20, 96, 16)


def probe_cases(variant: str, smoke: bool) -> tuple[tuple[int, int, int], ...]:
    """The ``(N, K, M)`` cases of ``--probe variant``: v5's, plus 16 tokens for a tensor-map kernel (and on the GPU 13
    tokens and its crowded call, ``ODD_TOKENS_PROBE_CASE`` and ``CROWDED_PROBE_CASE``), plus the persistent kernels'
    own shapes (``STREAM_K_SHAPES``) at 1 and 16 tokens.

    Example:
        >>> probe_cases("v5", False)[-1], probe_cases("q_v2", False)[-3:], probe_cases("q_v2", True)[-1]
        ((4096, 4096, 8), ((300, 1056, 16), (520, 2048, 13), (24576, 4096, 16)), (20, 96, 16))
    """
    cases = SMOKE_V5_PROBE_CASES if smoke else V5_PROBE_CASES
    if variant in TENSOR_MAP_VARIANTS:
        cases += (SMOKE_TWO_TILE_PROBE_CASE,) if smoke else (TWO_TILE_PROBE_CASE, ODD_TOKENS_PROBE_CASE, CROWDED_PROBE_CASE)
    if variant in PERSISTENT_VARIANTS:
        cases += tuple((n, k, m) for n, k in (SMOKE_STREAM_K_SHAPES if smoke else STREAM_K_SHAPES) for m in (1, 16))
    return cases


def w12_variant(ops, variant: str, x: torch.Tensor, *planes: torch.Tensor) -> torch.Tensor:
    """``ops.w12_gemm_small_m`` with ``SPECDEC_W12_CUDA_VARIANT=variant`` for this call (the previous value restored)."""
    with env_set(ops.W12_VARIANT_ENV, variant):
        return ops.w12_gemm_small_m(x, *planes)


def q_variant(ops, variant: str, x: torch.Tensor, ae: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """``ops.q_gemm_small_m`` with ``SPECDEC_Q_CUDA_VARIANT=variant`` for this call (the previous value restored)."""
    with env_set(ops.Q_VARIANT_ENV, variant):
        return ops.q_gemm_small_m(x, ae, base)


def bf16_variant(ops, variant: str, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``ops.skinny_gemm_bf16`` with ``SPECDEC_BF16_CUDA_VARIANT=variant`` for this call (the previous value restored)."""
    with env_set(ops.BF16_VARIANT_ENV, variant):
        return ops.skinny_gemm_bf16(x, weight)


def w12_v3(ops, x: torch.Tensor, *planes: torch.Tensor) -> torch.Tensor:
    """The streaming W12 kernel (v3)."""
    return w12_variant(ops, "v3", x, *planes)


def w12_v4(ops, x: torch.Tensor, *planes: torch.Tensor) -> torch.Tensor:
    """The W12 kernel with K split over independent CTAs (v4)."""
    return w12_variant(ops, "v4", x, *planes)


def w12_v5(ops, x: torch.Tensor, *planes: torch.Tensor) -> torch.Tensor:
    """The W12 kernel fed by bulk copies from one producer warp (v5)."""
    return w12_variant(ops, "v5", x, *planes)


def w12_v6(ops, x: torch.Tensor, *planes: torch.Tensor) -> torch.Tensor:
    """The W12 kernel fed by bulk copies from four producer warps (v6)."""
    return w12_variant(ops, "v6", x, *planes)


def w12_v7(ops, x: torch.Tensor, *planes: torch.Tensor) -> torch.Tensor:
    """The W12 kernel fed by 2-D TMA copies through tensor maps (v7)."""
    return w12_variant(ops, "v7", x, *planes)


def w12_v8(ops, x: torch.Tensor, *planes: torch.Tensor) -> torch.Tensor:
    """v7's pipeline in persistent CTAs over a stream of stages (v8)."""
    return w12_variant(ops, "v8", x, *planes)


def w12_v9(ops, x: torch.Tensor, *planes: torch.Tensor) -> torch.Tensor:
    """v7's stages in CTAs of one 16-row tile over the whole of K (v9)."""
    return w12_variant(ops, "v9", x, *planes)


def bulk_call(variant: str) -> Callable[..., torch.Tensor]:
    """The call of a staged W12 kernel by its name in ``BULK_VARIANTS``: ``bulk_call("v6") is w12_v6``."""
    return {"v5": w12_v5, "v6": w12_v6, "v7": w12_v7, "v8": w12_v8, "v9": w12_v9}[variant]


def probe_call(ops, variant: str) -> Callable[[torch.Tensor, object], torch.Tensor]:
    """``(x, w12) -> y`` with the kernel ``variant`` of ``PROBE_VARIANTS`` (``"q_v2"``, ``"q_v3"``: the Q view of
    ``w12``; ``"bf16_v2"``, ``"bf16_v3"``: ``w12.to_bf16()``, decoded once per ``w12``)."""
    if variant.startswith("q_"):
        return lambda x, w12: q_variant(ops, variant.removeprefix("q_"), x, w12.ae, w12.base)
    if variant.startswith("bf16_"):
        decoded: dict[int, tuple[object, torch.Tensor]] = {}

        def bf16_call(x, w12):
            if id(w12) not in decoded:
                decoded[id(w12)] = (w12, w12.to_bf16())  # the W12Tensor kept alive so its id is not reused
            return bf16_variant(ops, variant.removeprefix("bf16_"), x, decoded[id(w12)][1])

        return bf16_call
    return lambda x, w12: bulk_call(variant)(ops, x, *w12_planes(w12))


def column(variant: str) -> str:
    """The timed column of a kernel of ``PROBE_VARIANTS``.

    Example:
        >>> column("v5"), column("q_v2"), column("bf16_v2")
        ('cuda_w12_v5', 'cuda_q_v2', 'cuda_bf16_v2')
    """
    return f"cuda_{variant}" if variant.startswith(("q_", "bf16_")) else f"cuda_w12_{variant}"


def w12_planes(w12) -> tuple[torch.Tensor, ...]:
    """The planes of a ``W12Tensor`` in the order of ``ops.w12_gemm_small_m``."""
    return (w12.ae, w12.nib, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits)


def linear_shapes(model: str) -> dict[str, tuple[int, int]]:
    """name -> (N, K) of the dense decoder's linears of ``model`` (a key of ``specdec.models.shapes.SHAPES``).

    Example:
        >>> linear_shapes("qwen3-8b")["qkv"]
        (6144, 4096)
    """
    cfg = SHAPES[model]
    hd = cfg.head_dim
    return {
        "qkv": ((cfg.num_heads + 2 * cfg.num_kv_heads) * hd, cfg.hidden_size),
        "o": (cfg.hidden_size, cfg.num_heads * hd),
        "gate_up": (2 * cfg.intermediate_size, cfg.hidden_size),
        "down": (cfg.hidden_size, cfg.intermediate_size),
        "lm_head": (cfg.vocab_size, cfg.hidden_size),
    }


def planted_weight(n: int, k: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """Gaussian bf16 ``[n, k]`` (std 0.02) with escapes and zeros planted at fixed places (every kind the format has)."""
    w = torch.randn(n, k, generator=gen, device=device) * 0.02
    w[3, :] = 0.0  # zero row
    w[:, 5] = 0.0  # zero column
    w[1, 7] = -0.0
    w[2, 9] = 2.0**-130  # subnormal
    w[4, 11] = -(2.0**-133)
    w[6, 13] = 1e-30  # far below the window
    w[n - 1, k - 1] = 300.0  # outlier above the window
    w[n // 2, k // 2] = -5e-25
    w[min(n - 1, 17) : min(n, 40), 256 + 3 : 256 + 60 : 7] = 1e-28  # a crowded escape tile (rows 17..39, tile col 1)
    return w.to(torch.bfloat16).contiguous()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_per_call(fn: Callable[[], object], device: torch.device, *, calls: int, reps: int) -> float:
    """Seconds per call: a CUDA graph of ``calls`` calls replayed ``reps`` times (median); CPU: the same sequence timed on the host.

    A :class:`~benchmarks.common.Cycle` over weight copies gets ``calls`` rounded up to whole cycles: with a part of
    one, a replay's first calls would read the copies its last calls read a few calls before (warm in the L2). The
    calls run once before the capture, so that such a call has met every copy first: a copy's first call may build
    what it caches (the Triton W12 path's escape index reads the device, which a capture refuses)."""
    if isinstance(fn, Cycle):
        calls = -(-calls // fn.copies) * fn.copies
    if device.type == "cuda":
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(max(2, calls)):
                fn()
        torch.cuda.current_stream(device).wait_stream(stream)
        sync(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        graph.replay()
        sync(device)
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3 / calls)
        del graph
        return statistics.median(times)
    times = []
    fn()
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def zero_sign(t: torch.Tensor) -> torch.Tensor:
    """bf16 bits with -0 as +0 (a GEMM's sum of one product and zeros drops the sign of zero).

    On the CPU also every subnormal as +0: there the kernels fall back to the reference's ``F.linear``, which
    oneDNN runs with subnormals flushed to zero on CPUs with AMX / AVX512-BF16 (for more than one row). The
    CUDA kernels keep subnormals and are checked with them.
    """
    bits = t.contiguous().view(torch.int16).clone()
    if bits.device.type == "cpu":
        bits[(bits & 0x7F80) == 0] = 0  # exponent 0: zero or subnormal
    bits[bits == -32768] = 0
    return bits


def one_hot_columns(
    op: Callable[[torch.Tensor], torch.Tensor], n: int, k: int, device: torch.device, rows: int = 8
) -> torch.Tensor:
    """The weight ``[n, k]`` read back through ``op(x)`` with one-hot x rows, ``rows`` (a divisor of ``k``) columns per call."""
    cols = []
    for k0 in range(0, k, rows):
        x = torch.zeros(rows, k, dtype=torch.bfloat16, device=device)
        x[torch.arange(rows), k0 + torch.arange(rows)] = 1.0
        cols.append(op(x).T)  # [n, rows]
    return torch.cat(cols, dim=1)


def decode_checks(
    shapes,
    gen: torch.Generator,
    device: torch.device,
    ops,
    v3_shapes=(),
    v4_shapes=(),
    v5_shapes=(),
    bulk=BULK_VARIANTS,
    q_v2=True,
    bf16_v2=True,
    q_v3=True,
    bf16_v3=True,
    q_v4=True,
    bf16_v4=True,
    two_tile_shapes=(),
    stream_k_shapes=(),
) -> list[dict]:
    """One-hot decode check of the W12 (every variant), Q (both) and bf16 kernels on planted weights (bit-exact; -0 as +0).

    ``v3_shapes``: further ``(N, K)`` checked with the streaming W12 kernel only; ``v4_shapes`` / ``v5_shapes``:
    further ``(N, K, M)`` checked with the split-K / staged kernels only (``v5_shapes`` with every variant of
    ``bulk`` and the Q tensor-map kernel), with ``M`` one-hot rows per call. ``bulk``: the staged W12 variants (of
    ``BULK_VARIANTS``) to check; the others are not called at all (no ``w12_<variant>_*`` keys). ``q_v2``: whether
    the Q tensor-map kernel (``SPECDEC_Q_CUDA_VARIANT=v2``) is checked (``q_v2_*`` keys) or not called at all;
    ``bf16_v2`` the same for the bf16 tensor-map kernel (``bf16_v2_*`` keys, on ``v5_shapes``), ``q_v3`` and
    ``bf16_v3`` for their persistent forms (``q_v3_*``, ``bf16_v3_*`` keys, on ``v5_shapes``), ``q_v4`` and ``bf16_v4``
    for their row-tile forms. ``two_tile_shapes``: further ``(N, K, M)`` with ``M`` of
    9..16 for the tensor-map kernels (W12 ``"v7"`` to ``"v9"`` if in ``bulk``, Q and bf16 where checked), whose second
    MMA n-tile holds tokens 8.. . ``stream_k_shapes``: further ``(N, K)`` at M = 1, 8 and 16 for the persistent
    kernels checked (W12 ``"v8"`` if in ``bulk``, Q and bf16 ``v3``).
    """
    from specdec.formats.w12 import W12Tensor

    out = []
    for n, k in shapes:
        w = planted_weight(n, k, gen, device)
        w12 = W12Tensor.from_bf16(w)
        planes = w12_planes(w12)
        wq = w12.q_view()
        row = dict(N=n, K=k, escapes=w12.num_escapes)
        got = one_hot_columns(lambda x: w12_variant(ops, "v1", x, *planes), n, k, device)
        row["w12_decode_exact"] = bool(torch.equal(zero_sign(got), zero_sign(w)))
        got_v3 = one_hot_columns(lambda x: w12_v3(ops, x, *planes), n, k, device)
        row["w12_v3_decode_exact"] = bool(torch.equal(zero_sign(got_v3), zero_sign(w)))
        got_v4 = one_hot_columns(lambda x: w12_v4(ops, x, *planes), n, k, device)
        row["w12_v4_decode_exact"] = bool(torch.equal(zero_sign(got_v4), zero_sign(w)))
        got_bulk = {}
        for v in bulk:
            got_bulk[v] = one_hot_columns(lambda x, v=v: bulk_call(v)(ops, x, *planes), n, k, device)
            row[f"w12_{v}_decode_exact"] = bool(torch.equal(zero_sign(got_bulk[v]), zero_sign(w)))
        got_q = one_hot_columns(lambda x: q_variant(ops, "v1", x, w12.ae, w12.base), n, k, device)
        row["q_decode_exact"] = bool(torch.equal(zero_sign(got_q), zero_sign(wq)))
        if q_v2:
            got_q2 = one_hot_columns(lambda x: q_variant(ops, "v2", x, w12.ae, w12.base), n, k, device)
            row["q_v2_decode_exact"] = bool(torch.equal(zero_sign(got_q2), zero_sign(wq)))
        got_b = one_hot_columns(lambda x: bf16_variant(ops, "v1", x, w), n, k, device)
        row["bf16_one_hot_exact"] = bool(torch.equal(zero_sign(got_b), zero_sign(w)))
        x = torch.randn(8, k, generator=gen, device=device).to(torch.bfloat16)
        # fixed-order reductions (warps, then cluster ranks, then escapes): the same bits on every run
        row["w12_deterministic"] = bool(torch.equal(w12_variant(ops, "v1", x, *planes), w12_variant(ops, "v1", x, *planes)))
        row["w12_v3_deterministic"] = bool(torch.equal(w12_v3(ops, x, *planes), w12_v3(ops, x, *planes)))
        row["w12_v4_deterministic"] = bool(torch.equal(w12_v4(ops, x, *planes), w12_v4(ops, x, *planes)))
        for v in bulk:
            row[f"w12_{v}_deterministic"] = bool(torch.equal(bulk_call(v)(ops, x, *planes), bulk_call(v)(ops, x, *planes)))
        if q_v2:
            q2 = probe_call(ops, "q_v2")
            row["q_v2_deterministic"] = bool(torch.equal(q2(x, w12), q2(x, w12)))
        if not row["w12_decode_exact"]:
            bad = (zero_sign(got) != zero_sign(w)).nonzero()[:5].tolist()
            row["w12_first_mismatches"] = bad
        if not row["w12_v3_decode_exact"]:
            row["w12_v3_first_mismatches"] = (zero_sign(got_v3) != zero_sign(w)).nonzero()[:5].tolist()
        if not row["w12_v4_decode_exact"]:
            row["w12_v4_first_mismatches"] = (zero_sign(got_v4) != zero_sign(w)).nonzero()[:5].tolist()
        for v in bulk:
            if not row[f"w12_{v}_decode_exact"]:
                row[f"w12_{v}_first_mismatches"] = (zero_sign(got_bulk[v]) != zero_sign(w)).nonzero()[:5].tolist()
        if q_v2 and not row["q_v2_decode_exact"]:
            row["q_v2_first_mismatches"] = (zero_sign(got_q2) != zero_sign(wq)).nonzero()[:5].tolist()
        out.append(row)
        print(
            f"decode check N={n} K={k} escapes={w12.num_escapes}: w12 {row['w12_decode_exact']} "
            f"q {row['q_decode_exact']} bf16 {row['bf16_one_hot_exact']} deterministic {row['w12_deterministic']} "
            f"w12_v3 {row['w12_v3_decode_exact']} deterministic {row['w12_v3_deterministic']} "
            f"w12_v4 {row['w12_v4_decode_exact']} deterministic {row['w12_v4_deterministic']} "
            + " ".join(
                f"{name} {row.get(f'{name}_decode_exact', 'not run')} deterministic {row.get(f'{name}_deterministic', 'not run')}"
                for name in (*(f"w12_{v}" for v in BULK_VARIANTS), "q_v2")
            ),
            flush=True,
        )
    for n, k in v3_shapes:
        w = planted_weight(n, k, gen, device)
        w12 = W12Tensor.from_bf16(w)
        planes = (w12.ae, w12.nib, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits)
        row = dict(N=n, K=k, escapes=w12.num_escapes, only="w12_v3")
        got = one_hot_columns(lambda x: w12_v3(ops, x, *planes), n, k, device)
        row["w12_v3_decode_exact"] = bool(torch.equal(zero_sign(got), zero_sign(w)))
        x = torch.randn(8, k, generator=gen, device=device).to(torch.bfloat16)
        row["w12_v3_deterministic"] = bool(torch.equal(w12_v3(ops, x, *planes), w12_v3(ops, x, *planes)))
        if not row["w12_v3_decode_exact"]:
            row["w12_v3_first_mismatches"] = (zero_sign(got) != zero_sign(w)).nonzero()[:5].tolist()
        out.append(row)
        print(
            f"decode check N={n} K={k} escapes={w12.num_escapes}: w12_v3 {row['w12_v3_decode_exact']} "
            f"deterministic {row['w12_v3_deterministic']}",
            flush=True,
        )
    # (key prefix, call (x, w12) -> y, shapes, whether it computes the Q view)
    own = [("w12_v4", lambda x, w12: w12_v4(ops, x, *w12_planes(w12)), v4_shapes, False)]
    own += [(f"w12_{v}", probe_call(ops, v), v5_shapes, False) for v in bulk]
    staged = [("q_v2", q_v2, True), ("bf16_v2", bf16_v2, False), ("q_v3", q_v3, True), ("bf16_v3", bf16_v3, False)]
    staged += [("q_v4", q_v4, True), ("bf16_v4", bf16_v4, False)]
    own += [(name, probe_call(ops, name), v5_shapes, q_view) for name, kept, q_view in staged if kept]
    wide = [("w12_v7", "v7" in bulk, False), ("w12_v8", "v8" in bulk, False), ("w12_v9", "v9" in bulk, False), *staged]
    own += [(name, probe_call(ops, name.removeprefix("w12_")), two_tile_shapes, q_view) for name, kept, q_view in wide if kept]
    persistent = [("w12_v8", "v8" in bulk, False), ("q_v3", q_v3, True), ("bf16_v3", bf16_v3, False)]
    tall = [(n, k, m) for n, k in stream_k_shapes for m in (1, 8, 16)]
    own += [(name, probe_call(ops, name.removeprefix("w12_")), tall, q_view) for name, kept, q_view in persistent if kept]
    for name, call, only_shapes, q_view in own:
        for n, k, m in only_shapes:
            w = planted_weight(n, k, gen, device)
            w12 = W12Tensor.from_bf16(w)
            expected = w12.q_view() if q_view else w
            row = dict(N=n, K=k, M=m, escapes=w12.num_escapes, only=name)
            got = one_hot_columns(lambda x: call(x, w12), n, k, device, rows=m)
            row[f"{name}_decode_exact"] = bool(torch.equal(zero_sign(got), zero_sign(expected)))
            x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
            row[f"{name}_deterministic"] = bool(torch.equal(call(x, w12), call(x, w12)))
            if not row[f"{name}_decode_exact"]:
                row[f"{name}_first_mismatches"] = (zero_sign(got) != zero_sign(expected)).nonzero()[:5].tolist()
            out.append(row)
            print(
                f"decode check N={n} K={k} M={m} escapes={w12.num_escapes}: {name} "
                f"{row[f'{name}_decode_exact']} deterministic {row[f'{name}_deterministic']}",
                flush=True,
            )
    return out


def decode_checks_passed(checks: list[dict]) -> bool:
    """Every ``*_decode_exact`` and ``*_deterministic`` check of ``decode_checks`` holds (the register bf16 kernel's
    ``bf16_one_hot_exact`` is only recorded).

    Example:
        >>> decode_checks_passed([dict(w12_decode_exact=True, w12_v7_deterministic=True, bf16_one_hot_exact=False)])
        True
        >>> decode_checks_passed([dict(q_decode_exact=True), dict(w12_v6_decode_exact=False)])
        False
    """
    return all(passed for c in checks for key, passed in c.items() if key.endswith(("_decode_exact", "_deterministic")))


def weight_bytes(kind: str, n: int, k: int, w12) -> int:
    if kind == "cublas_bf16" or kind.startswith("cuda_bf16"):
        return 2 * n * k
    if kind == "cublas_fp8":
        return n * k
    if kind == "triton_w12" or kind.startswith("cuda_w12"):  # every CUDA W12 variant reads all planes
        return int(w12.nbytes)
    return int(w12.ae.numel() + w12.base.numel())  # Q view (triton_q, cuda_q and its variants): AE plane and bases


def bench_shape(
    model: str, lname: str, n: int, k: int, args, gen: torch.Generator, device: torch.device, ops, t_start
) -> list[dict]:
    from specdec.formats.w12 import W12Tensor, q_linear, w12_linear

    rows = []
    w = (torch.randn(n, k, generator=gen, device=device) * 0.02).to(torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    wq = w12.q_view()
    planes = w12_planes(w12)
    w8 = w.to(torch.float8_e4m3fn)
    one = torch.ones((), device=device)
    # the Triton columns run Triton even where "auto" would pick the CUDA small-M kernel (reference on CPU)
    triton_backend = "triton" if device.type == "cuda" else "torch"
    for m in args.ms:
        if time.time() - t_start > args.budget_s:
            print(f"budget reached: {model}/{lname} M={m} and later cases not run", flush=True)
            break
        x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
        y32 = x.float() @ w.float().T
        yq32 = x.float() @ wq.float().T
        err_cublas = (F.linear(x, w).float() - y32).abs().max().item()
        err_cublas_q = (F.linear(x, wq).float() - yq32).abs().max().item()
        row = dict(
            model=model,
            linear=lname,
            N=n,
            K=k,
            M=m,
            escape_fraction=w12.escape_fraction,
            w12_bits_per_weight=w12.bits_per_weight,
            cublas_err=err_cublas,
        )
        fns = {
            "cublas_bf16": (lambda: F.linear(x, w), y32, err_cublas),
            "triton_w12": (lambda: w12_linear(x, w12, backend=triton_backend), y32, err_cublas),
            "triton_q": (lambda: q_linear(x, w12, backend=triton_backend), yq32, err_cublas_q),
            "cuda_bf16": (lambda: bf16_variant(ops, "v1", x, w), y32, err_cublas),
            "cuda_bf16_v2": (lambda: bf16_variant(ops, "v2", x, w), y32, err_cublas),
            "cuda_bf16_v3": (lambda: bf16_variant(ops, "v3", x, w), y32, err_cublas),
            "cuda_bf16_v4": (lambda: bf16_variant(ops, "v4", x, w), y32, err_cublas),
            "cuda_w12": (lambda: w12_variant(ops, "v1", x, *planes), y32, err_cublas),
            "cuda_q": (lambda: q_variant(ops, "v1", x, w12.ae, w12.base), yq32, err_cublas_q),
            "cuda_w12_v3": (lambda: w12_v3(ops, x, *planes), y32, err_cublas),
            "cuda_w12_v4": (lambda: w12_v4(ops, x, *planes), y32, err_cublas),
            **{f"cuda_w12_{v}": (lambda v=v: bulk_call(v)(ops, x, *planes), y32, err_cublas) for v in BULK_VARIANTS},
            "cuda_q_v2": (lambda: q_variant(ops, "v2", x, w12.ae, w12.base), yq32, err_cublas_q),
            "cuda_q_v3": (lambda: q_variant(ops, "v3", x, w12.ae, w12.base), yq32, err_cublas_q),
            "cuda_q_v4": (lambda: q_variant(ops, "v4", x, w12.ae, w12.base), yq32, err_cublas_q),
        }
        for kind in left_out(args):
            del fns[kind]
        if m > ops.MAX_TOKENS:  # the register and bulk-copy kernels take at most 8 tokens; the tensor-map ones need K % 32 == 0
            fns = {
                kind: fn for kind, fn in fns.items() if kind in TWO_TILE_KERNELS and (k % 32 == 0 or not kind.startswith("cuda"))
            }
        mp = max(16, (m + 15) // 16 * 16)
        x8 = torch.zeros(mp, k, device=device, dtype=torch.float8_e4m3fn)
        x8[:m] = x.to(torch.float8_e4m3fn)
        fns["cublas_fp8"] = (lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16), None, None)
        for kind, (fn, ref, err_ref) in fns.items():
            try:
                y = fn()
                if ref is not None:
                    err = (y.float() - ref).abs()
                    tol = 2 * err_ref + ref.abs() * 2**-7
                    row[f"{kind}_err"] = err.max().item()
                    if not bool((err <= tol).all()):
                        row[f"{kind}_check"] = "FAILED"
                        continue
                t = time_per_call(fn, device, calls=args.calls, reps=args.reps)
            except Exception as exc:  # one failing kernel must not hide the others' numbers
                row[f"{kind}_error"] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            nbytes = weight_bytes(kind, n, k, w12)
            row[f"{kind}_s"] = t
            row[f"{kind}_bytes_per_s"] = nbytes / t
        base = row.get("cublas_bf16_s")
        for kind in KERNELS:
            if f"{kind}_s" in row:
                if base:
                    row[f"{kind}_vs_cublas_bf16"] = base / row[f"{kind}_s"]
                if args.copy_bw == args.copy_bw:  # not nan
                    row[f"{kind}_frac_of_copy"] = row[f"{kind}_bytes_per_s"] / args.copy_bw
        rows.append(row)
        print(
            f"{model:9s} {lname:8s} M={m}  cublas {row.get('cublas_bf16_s', float('nan')) * 1e6:8.1f} us  "
            + "  ".join(
                f"{kind.removeprefix('cuda_')} {row.get(kind + '_vs_cublas_bf16', float('nan')):.2f}x" for kind in KERNELS[1:]
            ),
            flush=True,
        )
    return rows


def plot(result: dict, path: Path) -> str | None:
    """Achieved weight bytes/s against M per kernel (median over shapes, and per shape faint), copy bandwidth line."""
    try:
        plt = agg_pyplot()
    except ImportError as exc:
        return f"no plot: {exc}; redraw with --plot-only {path.with_suffix('.json')}"
    rows = [r for r in result["rows"] if "M" in r]
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, kind in enumerate(KERNELS):
        # ten colours in the cycle: the kernels past the tenth repeat a colour with dashed lines
        color, style = f"C{i % 10}", "-" if i < 10 else "--"
        for shape in sorted({(r["model"], r["linear"]) for r in rows}):
            pts = [
                (r["M"], r[f"{kind}_bytes_per_s"] / 1e12)
                for r in rows
                if (r["model"], r["linear"]) == shape and f"{kind}_bytes_per_s" in r
            ]
            if pts:
                ax.plot(*zip(*pts), color=color, ls=style, alpha=0.15, lw=0.8)
        med = []
        for m in sorted({r["M"] for r in rows}):
            vals = [r[f"{kind}_bytes_per_s"] / 1e12 for r in rows if r["M"] == m and f"{kind}_bytes_per_s" in r]
            if vals:
                med.append((m, statistics.median(vals)))
        if med:
            ax.plot(*zip(*med), color=color, ls=style, marker="o", label=kind)
    bw = result.get("copy_bandwidth_bytes_per_s")
    if bw and bw == bw:
        ax.axhline(bw / 1e12, color="k", ls="--", label=f"copy {bw / 1e12:.2f} TB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("weight bytes read / s (TB/s)")
    ax.set_title(f"weight streaming, {result.get('device', '?')}: median over shapes (faint: each shape)")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


AR_MODEL = "qwen3-8b"
AR_TOKENS = 32
AR_PROMPT = 16
VERIFY_ROWS = 16  # the verify step timed beside the one-token step: a chain of 15 drafts and its root


def linear_weight_bytes(target: torch.nn.Module) -> int:
    """Bytes a decode step reads from the linears' weights (W12: its planes; the embedding gather is not counted).

    Example:
        >>> linear_weight_bytes(torch.nn.Sequential(torch.nn.Linear(4, 2, bias=False)))
        32
    """
    from specdec.formats.w12 import W12Tensor

    total = 0
    for mod in target.modules():
        if isinstance(mod, torch.nn.Linear):
            w = mod.weight
            total += int(w.nbytes) if isinstance(w, W12Tensor) else w.numel() * w.element_size()
    return total


def _step_time_s(step: Callable[[], object], device: torch.device, iters: int) -> float:
    """Seconds per ``step()``: CUDA events around back-to-back replays on CUDA, wall clock on CPU."""
    step()
    if device.type == "cuda":
        from benchmarks.common import mean_time_ms

        return mean_time_ms(step, iters, warmup=2) / 1e3
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    return (time.perf_counter() - t0) / iters


def _use_step_graphs(target, device: torch.device, verify_rows: int = VERIFY_ROWS) -> None:
    # CUDA: graph replays of the one-row step and of the verify step; CPU: the same fixed-shape bodies, run eagerly.
    if device.type == "cuda":
        target.enable_cuda_graphs(buckets=(1, verify_rows))
    else:
        target.enable_static_path(buckets=(1, verify_rows))


# Kernel-name fragments of the GEMM kernels (cuBLAS, whose Hopper kernels are named nvjet_*, CUTLASS, the specdec CUDA and
# Triton weight-streaming kernels) and
# of the attention kernels, for the per-step breakdown of step_kernel_breakdown.
GEMM_KERNEL_MARKS = (
    "gemm",
    "gemv",
    "nvjet",
    "xmma",
    "cutlass",
    "splitk",
    "skinny",
    "tma_gemm",
    "tma_stream_k",
    "tma_wide",
    "tma_rows",
    "w12_",
    "_matmul",
)
ATTENTION_KERNEL_MARKS = ("attention", "flash", "fmha", "sdpa")


def kernel_category(name: str) -> str:
    """``"gemm"``, ``"attention"`` or ``"other"`` for a CUDA kernel name (case-insensitive fragments).

    Example:
        >>> names = ("nvjet_sm90_tst_192x8_64x8_2x1_v_bz_TNT", "fmha_cutlassF", "tma_gemm_kernel<1, 8>", "vectorized_elementwise")
        >>> [kernel_category(n) for n in names]
        ['gemm', 'attention', 'gemm', 'other']
    """
    low = name.lower()
    if any(mark in low for mark in ATTENTION_KERNEL_MARKS):
        return "attention"
    return "gemm" if any(mark in low for mark in GEMM_KERNEL_MARKS) else "other"


def step_kernel_breakdown(step: Callable[[], object], device: torch.device, steps: int = 5, top: int = 8) -> dict:
    """GPU time of ``step()`` by kernel category under ``torch.profiler`` (CUDA activities, graph replays included).

    Returns per-step milliseconds of ``gemm``, ``attention`` and ``other`` kernels, their sum (``kernels_ms``), the
    kernel launches a step (``kernels_per_step``) and the ``top`` kernels by time; an empty dict on CPU.
    """
    if device.type != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile

    step()
    sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        sync(device)
    totals: dict[str, float] = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    per_kernel: dict[str, float] = {}
    launches = 0
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = event.device_time_total if hasattr(event, "device_time_total") else event.cuda_time_total
        totals[kernel_category(event.name)] += us
        per_kernel[event.name] = per_kernel.get(event.name, 0.0) + us
        launches += 1
    ranked = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:top]
    out = {f"{key}_ms": v / 1e3 / steps for key, v in totals.items()}
    out["kernels_ms"] = sum(totals.values()) / 1e3 / steps
    out["kernels_per_step"] = launches / steps
    out["top"] = [[name[:120], us / 1e3 / steps] for name, us in ranked]
    return out


def reference_elementwise_step(target, prompt: torch.Tensor, token: torch.Tensor, device: torch.device, iters: int) -> dict:
    """The one-token step of ``target`` with the dense layers' element-wise work on the PyTorch references
    (``elementwise_kernels("torch")``, graphs captured again under it): its seconds and kernel breakdown."""
    from specdec.models.elementwise import elementwise_kernels

    with elementwise_kernels("torch"):
        target.disable_static_path()
        _use_step_graphs(target, device)
        target(prompt)
        target.commit(prompt.shape[1])

        def step():
            target(token)
            target.truncate(prompt.shape[1])

        out = {"bf16_reference_elementwise_step_s": _step_time_s(step, device, iters)}
        out["bf16_reference_elementwise_step_kernels"] = step_kernel_breakdown(step, device)
    target.disable_static_path()
    _use_step_graphs(target, device)  # the kernels' graphs again, for whatever runs next
    return out


def skinny_step(target, prompt: torch.Tensor, token: torch.Tensor, rows: torch.Tensor, device: torch.device, iters: int) -> dict:
    """The bf16 ``target``'s steps with its linears through the CUDA skinny GEMM (``specdec.models.use_skinny_linears``,
    swapped in place for good; graphs captured again): the one-token and the verify step's seconds, the one-token
    step's and the verify step's kernel breakdowns, and the largest difference of the next-token logits after the prompt from the cuBLAS
    linears' (another summation order)."""
    from specdec.models import use_skinny_linears

    target.reset()
    cublas = target(prompt).logits[0, -1].float()
    swapped = use_skinny_linears(target)
    target.disable_static_path()
    _use_step_graphs(target, device, rows.shape[1])
    target.reset()
    skinny = target(prompt).logits[0, -1].float()
    target.commit(prompt.shape[1])

    def step():
        target(token)
        target.truncate(prompt.shape[1])

    def verify():
        target(rows)
        target.truncate(prompt.shape[1])

    out = {
        "bf16_skinny_linears": swapped,
        "bf16_skinny_max_abs_logit_diff": (skinny - cublas).abs().max().item(),
        "bf16_skinny_argmax_equal": bool(skinny.argmax() == cublas.argmax()),
        "bf16_skinny_step_s": _step_time_s(step, device, iters),
    }
    out["bf16_skinny_step_kernels"] = step_kernel_breakdown(step, device, top=12)
    out["bf16_skinny_verify_s"] = _step_time_s(verify, device, iters)
    out["bf16_skinny_verify_kernels"] = step_kernel_breakdown(verify, device, top=12)
    return out


def attention_step(
    target, name: str, kernel: str, prompt: torch.Tensor, token: torch.Tensor, device: torch.device, iters: int
) -> dict:
    """The one-token step of ``target`` with its cached attention through ``kernel`` (``attention_kernel(kernel)``,
    graphs captured again under it; on the H200 the default runs the split-KV kernel, so ``"sdpa"`` is the other):
    seconds and kernel breakdown, under ``{name}_{kernel}_step_s`` / ``_kernels``; the graphs are captured again with
    the default afterwards."""
    from specdec.models.attention_kernel import attention_kernel

    out = {}
    with attention_kernel(kernel):
        target.disable_static_path()
        _use_step_graphs(target, device)
        target.reset()
        target(prompt)
        target.commit(prompt.shape[1])

        def step():
            target(token)
            target.truncate(prompt.shape[1])

        out[f"{name}_{kernel}_step_s"] = _step_time_s(step, device, iters)
        out[f"{name}_{kernel}_step_kernels"] = step_kernel_breakdown(step, device)
    target.disable_static_path()
    _use_step_graphs(target, device)
    return out


def alternated_steps(
    target, prompt, token, rows, device: torch.device, iters: int, name: str, values: list[str], rounds: int
) -> list[dict]:
    """``target``'s one-token step and verify step (``rows``' width) after ``prompt``, under each value of the
    environment variable ``name`` in turn, ``rounds`` times in this one process: one dict a turn (``value``,
    ``round``, ``step_s``, ``verify_s``). Each turn captures the step graphs again under its value (a setting read
    when a kernel is launched, such as ``$SPECDEC_WIDE_STREAM_K``, is the one its graph holds); after the last turn
    they are captured again under the environment as it was. Settings compared this way are free of the spread between
    processes (up to ~8 % on single calls, ``benchmarks/NOTES.md``)."""
    n_prompt = prompt.shape[1]

    def capture_and_prefill() -> None:
        target.disable_static_path()
        _use_step_graphs(target, device, rows.shape[1])
        target.reset()
        target(prompt)
        target.commit(n_prompt)

    def step() -> None:
        target(token)
        target.truncate(n_prompt)

    def verify() -> None:
        target(rows)
        target.truncate(n_prompt)

    turns = []
    for rnd in range(rounds):
        for value in values:
            with env_set(name, value):
                capture_and_prefill()
                turns.append(
                    dict(
                        value=value,
                        round=rnd,
                        step_s=_step_time_s(step, device, iters),
                        verify_s=_step_time_s(verify, device, iters),
                    )
                )
    capture_and_prefill()
    return turns


ALTERNATE_TARGETS = {"w12": "W12 target", "bf16_skinny": "bf16 target, skinny linears"}


def alternated_lines(result: dict) -> list[str]:
    """The alternated turns of an AR-step result (``alternated_steps``), one line a value: the medians of its step and
    verify step (ms), each turn's, and verify / step of the medians."""
    if not result.get("alternated"):
        return []
    target = ALTERNATE_TARGETS[result.get("alternate_target", "w12")]
    lines = [f"in one process, {result['alternate']} in turn ({target}): median ms (each turn's)"]
    for value in dict.fromkeys(t["value"] for t in result["alternated"]):
        turns = [t for t in result["alternated"] if t["value"] == value]
        step = statistics.median(t["step_s"] for t in turns)
        verify = statistics.median(t["verify_s"] for t in turns)
        each = lambda key: " ".join(f"{t[key] * 1e3:.3f}" for t in turns)  # noqa: E731
        lines.append(
            f"  {value}: step {step * 1e3:.3f} ({each('step_s')}), verify {verify * 1e3:.3f} ({each('verify_s')}), "
            f"verify / step {verify / step:.3f}"
        )
    return lines


def ar_step(args, device: torch.device, t_start: float) -> dict:
    """The decode step of the bf16 lean target and of its W12 conversion: time, floor, token and logit agreement."""
    import specdec.formats.w12 as w12_format
    from specdec.formats import convert
    from specdec.models import random_target

    if args.smoke:
        from specdec.testing import tiny_target

        cfg, max_seq_len, iters = tiny_target(seed=0).config, 128, 3
    else:
        cfg, max_seq_len, iters = SHAPES[args.ar_model], 256, 50
    if args.ar_layers is not None:
        cfg = dataclasses.replace(cfg, num_layers=args.ar_layers)
    n_verify = args.verify_rows
    result: dict = dict(
        model="tiny" if args.smoke else args.ar_model,
        layers=cfg.num_layers,
        tokens=AR_TOKENS,
        prompt=AR_PROMPT,
        verify_rows=n_verify,
    )

    def over_budget(what: str) -> bool:
        if time.time() - t_start > args.ar_budget_s:
            print(f"AR step: budget reached, not run: {what}", flush=True)
            result.setdefault("skipped", []).append(what)
            return True
        return False

    t0 = time.time()
    bf16 = random_target(cfg, dtype=torch.bfloat16, device=device, max_seq_len=max_seq_len, seed=0)
    w12 = random_target(cfg, dtype=torch.bfloat16, device=device, max_seq_len=max_seq_len, seed=0)
    report = convert(w12)
    result["build_s"] = time.time() - t0
    result["w12_bits_per_weight"] = report.bits_per_weight
    lm_head = w12.lm_head.weight
    probe = torch.zeros(1, lm_head.shape[1], dtype=torch.bfloat16, device=device)
    result["w12_linear_path"] = w12_format.linear_path(probe, lm_head)
    result["w12_cuda_variant"] = os.environ.get("SPECDEC_W12_CUDA_VARIANT") or "default (v10 where K % 32 == 0, else v1)"
    for name, target in (("bf16", bf16), ("w12", w12)):
        result[f"{name}_weight_bytes"] = linear_weight_bytes(target)
        result[f"{name}_floor_s"] = result[f"{name}_weight_bytes"] / args.copy_bw
        _use_step_graphs(target, device, n_verify)

    gen = torch.Generator(device=device).manual_seed(1)
    prompt = torch.randint(0, cfg.vocab_size, (1, AR_PROMPT), generator=gen, device=device)
    # Greedy along the bf16 target's tokens; the W12 target is fed the same tokens (teacher forcing), so its
    # free-running greedy output equals the bf16 one exactly when every step's argmax agrees.
    if not over_budget("greedy agreement"):
        for target in (bf16, w12):
            target.reset()
        outs = [target(prompt).logits[0, -1] for target in (bf16, w12)]
        for target in (bf16, w12):
            target.commit(AR_PROMPT)
        agree, max_diff, first_mismatch, tokens = [], 0.0, None, []
        # every step's logits bit for bit: equal digests across runs mean the same arithmetic in the same order,
        # whatever the launches overlapped ($SPECDEC_PDL)
        digests = [hashlib.sha256(), hashlib.sha256()]
        for i in range(AR_TOKENS):
            for digest, out in zip(digests, outs):
                digest.update(out.float().cpu().numpy().tobytes())
            tok_bf16, tok_w12 = outs[0].argmax(), outs[1].argmax()
            max_diff = max(max_diff, (outs[0].float() - outs[1].float()).abs().max().item())
            same = bool(tok_bf16 == tok_w12)
            agree.append(same)
            if not same and first_mismatch is None:
                first_mismatch = i
            tokens.append(int(tok_bf16))
            if i + 1 < AR_TOKENS:
                step_in = tok_bf16.view(1, 1)
                outs = [target(step_in).logits[0, -1] for target in (bf16, w12)]
                for target in (bf16, w12):
                    target.commit(1)
        result.update(
            greedy_tokens_equal=all(agree),
            greedy_first_mismatch=first_mismatch,
            greedy_tokens_bf16=tokens,
            max_abs_logit_diff=max_diff,
            bf16_greedy_logits_sha256=digests[0].hexdigest(),
            w12_greedy_logits_sha256=digests[1].hexdigest(),
        )
        print(
            f"AR step greedy {AR_TOKENS} tokens: W12 == bf16 {all(agree)} (first mismatch {first_mismatch}), "
            f"max |logit diff| {max_diff:.4g}; logits sha256 bf16 {digests[0].hexdigest()[:16]}, "
            f"W12 {digests[1].hexdigest()[:16]}",
            flush=True,
        )

    token = torch.zeros(1, 1, dtype=torch.long, device=device)
    rows = torch.zeros(1, n_verify, dtype=torch.long, device=device)
    result["w12_verify_linear_path"] = w12_format.linear_path(probe.expand(n_verify, -1), lm_head)
    for name, target in (("bf16", bf16), ("w12", w12)):
        if over_budget(f"{name} step time"):
            continue
        target.reset()
        target(prompt)
        target.commit(AR_PROMPT)

        def step(target=target, tokens=token):
            target(tokens)
            target.truncate(AR_PROMPT)

        result[f"{name}_step_s"] = _step_time_s(step, device, iters)
        result[f"{name}_x_floor"] = result[f"{name}_step_s"] / result[f"{name}_floor_s"]
        result[f"{name}_step_kernels"] = step_kernel_breakdown(step, device, top=12)
        print(f"AR step {name}: {result[f'{name}_step_s'] * 1e3:.3f} ms ({result[f'{name}_x_floor']:.2f}x its floor)", flush=True)
        if over_budget(f"{name} verify step time"):
            continue

        def verify(target=target, step=step):
            step(target, rows)

        result[f"{name}_verify_s"] = _step_time_s(verify, device, iters)
        result[f"{name}_verify_x_step"] = result[f"{name}_verify_s"] / result[f"{name}_step_s"]
        result[f"{name}_verify_kernels"] = step_kernel_breakdown(verify, device, top=12)
        print(
            f"verify step {name} ({n_verify} rows): {result[f'{name}_verify_s'] * 1e3:.3f} ms "
            f"({result[f'{name}_verify_x_step']:.2f}x its one-token step)",
            flush=True,
        )
    if "bf16_step_s" in result and "w12_step_s" in result:
        result["w12_vs_bf16_step"] = result["w12_step_s"] / result["bf16_step_s"]
    if (
        args.alternate_setting
        and args.alternate_target == "w12"
        and "w12_step_s" in result
        and not over_budget("w12 steps, alternated settings")
    ):
        name, values = args.alternate_setting
        result.update(alternate=args.alternate, alternate_target="w12")
        result["alternated"] = alternated_steps(w12, prompt, token, rows, device, iters, name, values, args.alternate_rounds)
        print("\n".join(alternated_lines(result)), flush=True)
    from specdec.models.attention_kernel import attention_choice

    probe = torch.empty(1, 1, 1, 128, device=device)
    result["attention_default"] = attention_choice(probe)[0]  # the dense layers' attention in the steps above
    other = "sdpa" if result["attention_default"] == "split_kv" else "split_kv"
    for name, target in (("bf16", bf16), ("w12", w12)):
        if f"{name}_step_s" in result and not over_budget(f"{name} step time, {other} attention"):
            try:
                result.update(attention_step(target, name, other, prompt, token, device, iters))
            except Exception as exc:  # recorded; the steps after it still run, with the default's graphs again
                result[f"{name}_{other}_error"] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"AR step {name} with {other} attention: {result[f'{name}_{other}_error']}", flush=True)
                target.disable_static_path()
                _use_step_graphs(target, device)
                continue
            print(
                f"AR step {name} with {other} attention: {result[f'{name}_{other}_step_s'] * 1e3:.3f} ms "
                f"({result['attention_default']}: {result[f'{name}_step_s'] * 1e3:.3f} ms)",
                flush=True,
            )
    if not over_budget("bf16 step time, reference element-wise"):
        result.update(reference_elementwise_step(bf16, prompt, token, device, iters))
        print(
            f"AR step bf16 with the PyTorch element-wise references: {result['bf16_reference_elementwise_step_s'] * 1e3:.3f} ms "
            f"(the kernels' step {result.get('bf16_step_s', float('nan')) * 1e3:.3f} ms)",
            flush=True,
        )
    if "bf16_step_s" in result and not over_budget("bf16 step time, skinny linears"):
        result.update(skinny_step(bf16, prompt, token, rows, device, iters))
        result["bf16_skinny_x_floor"] = result["bf16_skinny_step_s"] / result["bf16_floor_s"]
        result["bf16_skinny_verify_x_step"] = result["bf16_skinny_verify_s"] / result["bf16_skinny_step_s"]
        print(
            f"AR step bf16 with skinny linears: {result['bf16_skinny_step_s'] * 1e3:.3f} ms ({result['bf16_skinny_x_floor']:.2f}x "
            f"its floor; cuBLAS {result['bf16_step_s'] * 1e3:.3f} ms), verify ({n_verify} rows) {result['bf16_skinny_verify_s'] * 1e3:.3f} "
            f"ms; next-token logits off cuBLAS's by {result['bf16_skinny_max_abs_logit_diff']:.3g}, argmax equal "
            f"{result['bf16_skinny_argmax_equal']}",
            flush=True,
        )
        if args.alternate_setting and args.alternate_target == "bf16_skinny" and not over_budget("skinny steps, alternated"):
            name, values = args.alternate_setting
            result.update(alternate=args.alternate, alternate_target="bf16_skinny")
            result["alternated"] = alternated_steps(bf16, prompt, token, rows, device, iters, name, values, args.alternate_rounds)
            print("\n".join(alternated_lines(result)), flush=True)
    if not over_budget("w12 step time, Triton path"):
        with env_set(w12_format.CUDA_SMALL_M_ENV, "0"):
            w12.disable_static_path()
            _use_step_graphs(w12, device)  # captured again, now through Triton
            w12(prompt)
            w12.commit(AR_PROMPT)
            result["w12_triton_linear_path"] = w12_format.linear_path(probe, lm_head)

            def step_triton(target=w12):
                target(token)
                target.truncate(AR_PROMPT)

            result["w12_triton_step_s"] = _step_time_s(step_triton, device, iters)
            print(f"AR step w12 (Triton path): {result['w12_triton_step_s'] * 1e3:.3f} ms", flush=True)
    del bf16, w12
    if device.type == "cuda":
        torch.cuda.empty_cache()
    result["wall_s"] = time.time() - t_start
    return result


def ar_summary_lines(result: dict) -> list[str]:
    def ms(key):
        return f"{result[key] * 1e3:.3f} ms" if key in result else "n/a"

    def ratio(key):
        return f"{result[key]:.2f}x" if key in result else "n/a"

    return [
        f"AR step {result['model']} ({result.get('layers', 'all')} layers): W12 linears via {result.get('w12_linear_path')} (kernel {result.get('w12_cuda_variant')}), {result.get('w12_bits_per_weight', 0):.3f} bits/weight",
        f"{'target':18s} {'step':>12s} {'floor':>12s} {'x floor':>8s}",
        f"{'bf16':18s} {ms('bf16_step_s'):>12s} {ms('bf16_floor_s'):>12s} {ratio('bf16_x_floor'):>8s}",
        f"{'w12':18s} {ms('w12_step_s'):>12s} {ms('w12_floor_s'):>12s} {ratio('w12_x_floor'):>8s}",
        f"{'w12 (Triton path)':18s} {ms('w12_triton_step_s'):>12s}",
        f"{'bf16 (ref. elem.)':18s} {ms('bf16_reference_elementwise_step_s'):>12s}",
        f"{'bf16 (skinny)':18s} {ms('bf16_skinny_step_s'):>12s} {ms('bf16_floor_s'):>12s} {ratio('bf16_skinny_x_floor'):>8s}",
        f"verify step of {result.get('verify_rows')} rows: bf16 {ms('bf16_verify_s')} = {ratio('bf16_verify_x_step')} its step, "
        f"w12 {ms('w12_verify_s')} = {ratio('w12_verify_x_step')} (W12 linears at {result.get('verify_rows')} rows via "
        f"{result.get('w12_verify_linear_path')})",
        f"W12 step / bf16 step {ratio('w12_vs_bf16_step')}; greedy {result['tokens']} tokens equal: "
        f"{result.get('greedy_tokens_equal')}, max |logit diff| {result.get('max_abs_logit_diff')}",
        *(
            f"{name} step kernels (torch.profiler): GEMM {k['gemm_ms']:.3f} ms, attention {k['attention_ms']:.3f} ms, other "
            f"{k['other_ms']:.3f} ms in {k['kernels_per_step']:.0f} kernels"
            for name in ("bf16", "w12", "bf16_reference_elementwise", "bf16_skinny")
            if (k := result.get(f"{name}_step_kernels"))
        ),
        *(
            f"{name} verify step kernels: GEMM {k['gemm_ms']:.3f} ms, other {k['other_ms']:.3f} ms in "
            f"{k['kernels_per_step']:.0f} kernels; top: " + "; ".join(f"{kernel[:60]} {ms:.3f}" for kernel, ms in k["top"][:4])
            for name in ("bf16", "w12")
            if (k := result.get(f"{name}_verify_kernels"))
        ),
        *alternated_lines(result),
    ]


def summary_lines(result: dict) -> list[str]:
    """The table printed last: per kernel, its range against cuBLAS bf16 and of the copy bandwidth over the rows of
    M <= 8 (every kernel), then over the wider rows (M > 8: only ``TWO_TILE_KERNELS`` run there)."""
    rows = [r for r in result["rows"] if "M" in r and r["M"] <= 8]
    wide = [r for r in result["rows"] if "M" in r and r["M"] > 8]
    lines = [
        f"copy bandwidth {result['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s on {result['device']}; "
        f"decode checks: {result['decode_checks_passed']}; rows {len(rows)}"
        + (f"; left out: {', '.join(result['kernels_left_out'])}" if result.get("kernels_left_out") else "")
    ]
    lines.append(
        f"{'kernel':12s} {'vs cuBLAS bf16 min':>18s} {'max':>6s} {'frac of copy min':>17s} {'max':>6s} {'failed/missing':>15s}"
    )
    fmt = lambda v: f"{v:.2f}" if v is not None else "n/a"  # noqa: E731
    for group, kinds in ((rows, KERNELS), (wide, TWO_TILE_KERNELS)):
        if group is wide and wide:
            lines.append(f"M = {', '.join(str(m) for m in sorted({r['M'] for r in wide}))} ({len(wide)} rows):")
        for kind in kinds if group else ():
            sp = [r[f"{kind}_vs_cublas_bf16"] for r in group if f"{kind}_vs_cublas_bf16" in r]
            fc = [r[f"{kind}_frac_of_copy"] for r in group if f"{kind}_frac_of_copy" in r]
            missing = sum(f"{kind}_s" not in r for r in group)
            lines.append(
                f"{kind:12s} {fmt(min(sp) if sp else None):>18s} {fmt(max(sp) if sp else None):>6s} "
                f"{fmt(min(fc) if fc else None):>17s} {fmt(max(fc) if fc else None):>6s} {missing:>15d}"
            )
    return lines


def left_out(args) -> list[str]:
    """The kernels ``--skip-variant`` leaves out, as timed-column names in ``PROBE_VARIANTS`` order."""
    return [column(v) for v in PROBE_VARIANTS if v in args.skip_variants]


def kept_bulk(args) -> tuple[str, ...]:
    """The staged variants this run calls: ``BULK_VARIANTS`` less those of ``--skip-variant``."""
    return tuple(v for v in BULK_VARIANTS if v not in args.skip_variants)


def graph_calls_equal(call: Callable[[], torch.Tensor], want: torch.Tensor, calls: int = 3) -> bool:
    """Whether ``calls`` back-to-back ``call()`` captured in one CUDA graph (under programmatic launch, each kernel
    may start while the one before it finishes: ``specdec.kernels.launch``) all return exactly ``want`` on replay."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [call() for _ in range(calls)]
    for out in outs:
        out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return all(torch.equal(out, want) for out in outs)


def variant_probe(cases, gen: torch.Generator, device: torch.device, ops, variant: str) -> list[dict]:
    """Runs the kernel ``variant`` (one of ``PROBE_VARIANTS``) once per ``(N, K, M)`` case and checks it against the fp32 product.

    The product of the weight (``"q_v2"``: of its Q view); tolerance as in the timed run:
    ``2 * max|cuBLAS bf16 - y_fp32| + |y_fp32| * 2^-7`` per element. On CUDA, three calls captured back to back in
    one graph must then return that output bit for bit (``graph_equal``). Returns one dict per case (``ok``,
    ``max_err``); a case that raises is recorded with its error and ``ok=False``.
    """
    from specdec.formats.w12 import W12Tensor

    out = []
    for n, k, m in cases:
        row = dict(N=n, K=k, M=m)
        try:
            w = planted_weight(n, k, gen, device)
            w12 = W12Tensor.from_bf16(w)
            expected = w12.q_view() if variant.startswith("q_") else w
            x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
            y32 = x.float() @ expected.float().T
            err_ref = (F.linear(x, expected).float() - y32).abs().max().item()
            call = probe_call(ops, variant)  # one call for the check and the graph: bf16_v2 decodes its weight once, here
            y = call(x, w12)
            sync(device)
            err = (y.float() - y32).abs()
            row["max_err"] = err.max().item()
            row["ok"] = bool((err <= 2 * err_ref + y32.abs() * 2**-7).all())
            if device.type == "cuda":
                row["graph_equal"] = graph_calls_equal(lambda: call(x, w12), y)
                row["ok"] = row["ok"] and row["graph_equal"]
        except Exception as exc:  # recorded; the runner then leaves the kernel out of the main run
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            row["ok"] = False
        out.append(row)
        print(
            f"{variant} probe N={n} K={k} M={m}: {'ok' if row['ok'] else 'FAILED'} {row.get('max_err', row.get('error'))}",
            flush=True,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "roofline.json"))
    parser.add_argument("--smoke", action="store_true", help="CPU: reference paths only, tiny shapes")
    parser.add_argument("--sanitize", action="store_true", help="one small shape, every CUDA kernel once (for compute-sanitizer)")
    parser.add_argument(
        "--probe", choices=PROBE_VARIANTS, default=None, help="only run this staged kernel on a few shapes and check it"
    )
    parser.add_argument(
        "--skip-variant",
        dest="skip_variants",
        action="append",
        default=[],
        choices=PROBE_VARIANTS,
        help="leave this staged kernel out (timing, checks, sanitize); repeatable",
    )
    parser.add_argument("--plot-only", default=None, help="redraw the PNG of an existing JSON and exit")
    parser.add_argument("--budget-s", type=float, default=150.0, help="no new case starts after this many seconds")
    parser.add_argument("--calls", type=int, default=20, help="calls per CUDA graph")
    parser.add_argument("--reps", type=int, default=10, help="graph replays (median)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--ar-step", action="store_true", help="only the AR-step part (bf16 vs W12 lean target)")
    parser.add_argument("--ar-budget-s", type=float, default=55.0, help="AR step: no new phase starts after this")
    parser.add_argument(
        "--verify-rows", type=int, default=VERIFY_ROWS, help=f"AR step: rows of the verify step (default {VERIFY_ROWS})"
    )
    parser.add_argument(
        "--ar-model",
        choices=tuple(SHAPES),
        default=None,
        help=f"AR step: the lean target's shape (default {AR_MODEL}; the smoke's is the tiny target's)",
    )
    parser.add_argument(
        "--ar-layers", type=int, default=None, help="AR step: this many of the model's layers (default: all of them)"
    )
    add_alternate_arguments(parser, "AR step: the W12 target's step and verify step timed")
    parser.add_argument(
        "--alternate-target",
        choices=tuple(ALTERNATE_TARGETS),
        default="w12",
        help="whose step and verify step --alternate times: the W12 target (default) or the bf16 one with the skinny "
        "linears (after the skinny step's own timings)",
    )
    args = parser.parse_args(argv)
    if not 2 <= args.verify_rows <= 64:
        parser.error(f"--verify-rows: expected 2 to 64 rows, got {args.verify_rows}")
    if (args.ar_model is not None or args.ar_layers is not None) and not args.ar_step:
        parser.error("--ar-model / --ar-layers: shape the AR step's target; expected them with --ar-step")
    if args.ar_model is not None and args.smoke:
        parser.error(f"--ar-model: the smoke runs the tiny target; expected no --ar-model with --smoke, got {args.ar_model}")
    args.ar_model = args.ar_model or AR_MODEL
    if args.ar_layers is not None:
        if args.smoke:
            from specdec.testing import tiny_target

            most = tiny_target(seed=0).config.num_layers
        else:
            most = SHAPES[args.ar_model].num_layers
        if not 1 <= args.ar_layers <= most:
            parser.error(f"--ar-layers: expected 1 to {most} layers (the target's), got {args.ar_layers}")
    if args.alternate is not None and not args.ar_step:
        parser.error("--alternate: times the AR step's settings; expected it with --ar-step")
    if args.alternate_target != "w12" and args.alternate is None:
        parser.error(f"--alternate-target: picks whose steps --alternate times; got {args.alternate_target} without it")
    args.alternate_setting = alternate_of(parser, args)
    if args.plot_only:
        return redraw(plot, args.plot_only)
    seed = 0
    prov = provenance(seed)
    print(provenance_line(prov), flush=True)
    if args.smoke:
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            parser.error("needs CUDA; use --smoke on a CPU")
        device = torch.device("cuda")
    from specdec.kernels.cuda import ops  # registers the custom ops (CPU: reference paths)

    if device.type == "cuda":
        from specdec.kernels.cuda.build import library_path, load_library

        t0 = time.time()
        load_library()  # builds the default path with nvcc when missing
        print(f"CUDA kernels: {library_path()} ({time.time() - t0:.1f} s to load/build)", flush=True)
    gen = torch.Generator(device=device).manual_seed(seed)
    t_start = time.time()

    if args.probe:
        variant = args.probe
        probe = variant_probe(probe_cases(variant, args.smoke), gen, device, ops, variant)
        passed = all(c["ok"] for c in probe)
        record = {f"{variant}_probe": probe, f"{variant}_probe_passed": passed, "wall_s": time.time() - t_start}
        write_json(args.out, record, prov, indent=1)
        print(provenance_line(prov))
        print(f"{variant} probe: {'passed' if passed else 'FAILED'} ({len(probe)} cases)")
        return 0 if passed else 1

    if args.sanitize:
        from specdec.formats.w12 import W12Tensor

        staged = [v for v in PROBE_VARIANTS if v not in args.skip_variants]
        for n, k in SANITIZE_SHAPES:
            w = planted_weight(n, k, gen, device)
            w12 = W12Tensor.from_bf16(w)
            planes = w12_planes(w12)
            for m in (1, 8):
                x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
                bf16_variant(ops, "v1", x, w)
                w12_variant(ops, "v1", x, *planes)
                w12_v3(ops, x, *planes)
                w12_v4(ops, x, *planes)
                q_variant(ops, "v1", x, w12.ae, w12.base)
                for v in staged:
                    probe_call(ops, v)(x, w12)
            sync(device)
            print(f"sanitize: every kernel ran on N={n} K={k} M=1 and 8 with {w12.num_escapes} escapes")
        for v in staged:
            for n, k in V5_SANITIZE_SHAPES + (STREAM_K_SHAPES if v in PERSISTENT_VARIANTS else ()):
                w = planted_weight(n, k, gen, device)
                w12 = W12Tensor.from_bf16(w)
                ms = (1, 8, 16) if v in TENSOR_MAP_VARIANTS else (1, 8)
                for m in ms:
                    x = torch.randn(m, k, generator=gen, device=device).to(torch.bfloat16)
                    probe_call(ops, v)(x, w12)
                sync(device)
                print(f"sanitize: the {column(v)} kernel ran on N={n} K={k} M={ms} with {w12.num_escapes} escapes")
        return 0

    if args.ar_step:
        args.copy_bw = copy_bandwidth(device)
        result = ar_step(args, device, t_start)
        result.update(device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (static path, no graphs)")
        result["copy_bandwidth_bytes_per_s"] = args.copy_bw
        out = write_json(args.out, result, prov, indent=1)
        print(f"wrote {out}")
        print(provenance_line(prov))
        for line in ar_summary_lines(result):
            print(line)
        return 0

    args.ms = (1, 8, 16) if args.smoke else MS + WIDE_MS
    if args.smoke:
        args.calls, args.reps = 2, 2
    args.copy_bw = copy_bandwidth(device)
    checks = decode_checks(
        SMOKE_DECODE_SHAPES if args.smoke else DECODE_SHAPES,
        gen,
        device,
        ops,
        SMOKE_V3_DECODE_SHAPES if args.smoke else V3_DECODE_SHAPES,
        SMOKE_V4_DECODE_SHAPES if args.smoke else V4_DECODE_SHAPES,
        SMOKE_V5_DECODE_SHAPES if args.smoke else V5_DECODE_SHAPES,
        bulk=kept_bulk(args),
        q_v2="q_v2" not in args.skip_variants,
        bf16_v2="bf16_v2" not in args.skip_variants,
        q_v3="q_v3" not in args.skip_variants,
        bf16_v3="bf16_v3" not in args.skip_variants,
        q_v4="q_v4" not in args.skip_variants,
        bf16_v4="bf16_v4" not in args.skip_variants,
        two_tile_shapes=SMOKE_TWO_TILE_DECODE_SHAPES if args.smoke else TWO_TILE_DECODE_SHAPES,
        stream_k_shapes=SMOKE_STREAM_K_SHAPES if args.smoke else STREAM_K_SHAPES,
    )
    checks_passed = decode_checks_passed(checks)
    shapes = SMOKE_SHAPES if args.smoke else {model: linear_shapes(model) for model in args.models.split(",")}
    rows = []
    for model, lins in shapes.items():
        for lname, (n, k) in lins.items():
            if time.time() - t_start > args.budget_s:
                print(f"budget reached, not run: {model}/{lname}", flush=True)
                rows.append(dict(model=model, linear=lname, N=n, K=k, skipped="budget"))
                continue
            try:
                rows.extend(bench_shape(model, lname, n, k, args, gen, device, ops, t_start))
            except Exception as exc:  # keep the other shapes; the failure is recorded
                import traceback

                traceback.print_exc()
                rows.append(dict(model=model, linear=lname, N=n, K=k, error=f"{type(exc).__name__}: {exc}"[:500]))
            if device.type == "cuda":
                torch.cuda.empty_cache()
    result = dict(
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (reference paths)",
        copy_bandwidth_bytes_per_s=args.copy_bw,
        calls_per_graph=args.calls,
        reps=args.reps,
        tolerance="|y - y_fp32| <= 2 * max|cuBLAS bf16 - y_fp32| + |y_fp32| * 2^-7 per element (Q: against q_view's fp32 product)",
        decode_checks=checks,
        decode_checks_passed=checks_passed,
        kernels_left_out=left_out(args),
        wall_s=time.time() - t_start,
        rows=rows,
    )
    report(args.out, result, prov, plot, summary_lines)
    failed = failed_kernels(rows)
    for line in failed:
        print(f"FAILED {line}")
    return 0 if checks_passed and not failed else 1


def failed_kernels(rows: list[dict]) -> list[str]:
    """``"kind shape M: why"`` of every kernel whose product was off or that raised (a row keeps the others' times).

    Example:
        >>> failed_kernels([dict(model="qwen3-8b", linear="o", M=1, cuda_q_check="FAILED", cuda_q_err=0.5, cublas_bf16_s=1e-5)])
        ['cuda_q qwen3-8b o M=1: product off the float32 reference by 0.5']
    """
    out = []
    for row in rows:
        for key, value in row.items():
            if key.endswith("_check") and value == "FAILED":
                kind = key.removesuffix("_check")
                where = f"{row.get('model')} {row.get('linear')} M={row.get('M')}"
                out.append(f"{kind} {where}: product off the float32 reference by {row.get(f'{kind}_err')}")
            elif key.endswith("_error"):
                out.append(f"{key.removesuffix('_error')} {row.get('model')} {row.get('linear')} M={row.get('M')}: {value}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
