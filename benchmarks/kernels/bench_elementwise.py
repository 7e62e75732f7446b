"""The dense layer's element-wise kernels on the GPU: checked against their references, then timed alone and in a layer.

Three one-launch Triton kernels carry a dense layer's element-wise work (``specdec.kernels.rope.qk_norm_rope``,
``specdec.kernels.act.silu_mul``, ``specdec.kernels.norm.add_scaled_rms_norm``). This script

1. checks each against its PyTorch reference on the GPU at the Qwen3-8B head and MLP shapes plus awkward ones, in
   float32, float16 and bfloat16, counting the elements that differ and the largest difference in units in the last
   place. Must be bitwise: RoPE without norm weights (alone, and with the K/V cache write of packed rows into
   heads-first caches, ``qk_norm_rope_cached``: q and both whole caches; and with q written into the per-slot
   layout of the packed attention), SwiGLU in float16 / bfloat16, the residual of add + norm.
   Counted only: the normed outputs (their sum of squares is a tree reduction) and float32 SwiGLU (libdevice
   ``exp`` flushes subnormals);
2. times each kernel and its reference at R = 1, 16, 96, 256 rows (20 calls in one CUDA graph, per call);
3. times one Qwen3-8B-shaped decoder layer (random weights, a 512-token prefix in its KV cache) at the same widths,
   graph-captured as the runtimes run it (``forward_normed``: the input already normed, the last add fused with the
   next layer's norm), with the kernels (``elementwise_kernels("auto")``) and with the references
   (``elementwise_kernels("torch")``), and counts its kernels by category under ``torch.profiler``.

Prints a table last and writes JSON and a plot (layer time against rows). Exit 1 when a must-be-bitwise check fails.

Usage (repository root, GPU): ``python3 -m benchmarks.kernels.bench_elementwise --out $OUT/elementwise.json`` (~40 s).
CPU smoke: ``TRITON_INTERPRET=1 python3 -m benchmarks.kernels.bench_elementwise --smoke`` (tiny shapes through the Triton
interpreter, which Triton reads when the kernels are defined, at import; no timing there).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from benchmarks.common import agg_pyplot, capture_cuda_graph, mean_time_ms, provenance, redraw, report

ROWS = (1, 16, 96, 256)
CALLS = 20  # kernel calls per CUDA graph when timing one op
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def ulp_diff(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int]:
    """``(elements that differ, largest difference in units in the last place)`` of two same-dtype tensors.

    Example:
        >>> one = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
        >>> ulp_diff(one, torch.nextafter(one, torch.full_like(one, 3.0)))
        (2, 1)
    """
    bits = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[a.dtype]
    top = 1 << (8 * a.element_size() - 1)

    def ordered(t):  # sign-magnitude bits -> integers in value order (+0 and -0 both 0)
        i = t.contiguous().view(bits).long()
        return torch.where(i < 0, -(i + top), i)

    d = (ordered(a) - ordered(b)).abs()
    return int((d > 0).sum()), int(d.max()) if d.numel() else 0


def rope_tables(rows: int, head_dim: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator):
    """RoPE ``cos, sin [1, 1, rows, head_dim]`` of random positions below 32k (theta 1e6)."""
    pos = torch.randint(0, 32768, (rows,), generator=gen, device=device).float()
    inv = 1.0 / (1e6 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    emb = torch.cat([pos[:, None] * inv] * 2, dim=-1)
    return emb.cos().to(dtype)[None, None], emb.sin().to(dtype)[None, None]


def op_cases(rows: int, heads: tuple[int, int, int], ffn: int, hidden: int, dtype, device, gen) -> dict:
    """The three ops' inputs at ``rows`` rows: ``{name: (kernel call, reference call)}``, outputs as tuples."""
    from specdec.kernels.act import silu_mul
    from specdec.kernels.act.naive import silu_mul_torch
    from specdec.kernels.norm import add_scaled_rms_norm
    from specdec.kernels.norm.naive import add_scaled_rms_norm_torch
    from specdec.kernels.rope import qk_norm_rope, qk_norm_rope_cached
    from specdec.kernels.rope.naive import qk_norm_rope_cached_torch, qk_norm_rope_torch

    h, hkv, d = heads
    qkv = (torch.randn(1, rows, (h + 2 * hkv) * d, generator=gen, device=device) * 3).to(dtype)
    q, k, v = qkv.split([h * d, hkv * d, hkv * d], dim=-1)
    q, k, v = q.view(1, rows, h, d), k.view(1, rows, hkv, d), v.view(1, rows, hkv, d)
    # the packed runtimes' caches: 4 request slots stored heads-first, each row its own entry
    slots = 4
    slot, pos = torch.arange(rows, device=device) % slots, torch.arange(rows, device=device) // slots
    q_slots = [torch.zeros(slots, h, rows // slots + 1, d, dtype=dtype, device=device) for _ in range(2)]  # per-slot q
    kv_caches = [torch.zeros(hkv, slots, rows // slots + 1, d, dtype=dtype, device=device).transpose(0, 1) for _ in range(4)]
    cos, sin = rope_tables(rows, d, dtype, device, gen)
    qw, kw = ((1 + 0.3 * torch.randn(d, generator=gen, device=device)).to(dtype) for _ in range(2))
    gate_up = (torch.randn(rows, 2 * ffn, generator=gen, device=device) * 4).to(dtype)
    x, delta = ((torch.randn(rows, hidden, generator=gen, device=device) * s).to(dtype) for s in (3, 1))
    w = (1 + 0.3 * torch.randn(hidden, generator=gen, device=device)).to(dtype)

    def contiguous(outs):  # the model's next op reads the reference's output laid out as the kernel writes it
        return tuple(t.contiguous() for t in outs)

    return {
        "rope": (
            lambda: qk_norm_rope(q, k, cos, sin, None, None, 1e-6, backend="triton"),
            lambda: contiguous(qk_norm_rope_torch(q, k, cos, sin, None, None, 1e-6)),
        ),
        "qk_norm_rope": (
            lambda: qk_norm_rope(q, k, cos, sin, qw, kw, 1e-6, backend="triton"),
            lambda: contiguous(qk_norm_rope_torch(q, k, cos, sin, qw, kw, 1e-6)),
        ),
        "rope_cache": (
            lambda: (
                qk_norm_rope_cached(q, k, v, cos, sin, None, None, 1e-6, *kv_caches[:2], pos, slot, backend="triton"),
                *kv_caches[:2],
            ),
            lambda: (
                qk_norm_rope_cached_torch(q, k, v, cos, sin, None, None, 1e-6, *kv_caches[2:], pos, slot).contiguous(),
                *kv_caches[2:],
            ),
        ),
        "rope_cache_slotted": (
            lambda: (
                qk_norm_rope_cached(
                    q, k, v, cos, sin, None, None, 1e-6, *kv_caches[:2], pos, slot, q_slots[0], pos, backend="triton"
                ),
                *kv_caches[:2],
            ),
            lambda: (
                qk_norm_rope_cached_torch(q, k, v, cos, sin, None, None, 1e-6, *kv_caches[2:], pos, slot, q_slots[1], pos),
                *kv_caches[2:],
            ),
        ),  # fmt: skip
        "silu_mul": (lambda: (silu_mul(gate_up, backend="triton"),), lambda: (silu_mul_torch(gate_up),)),
        "add_norm": (
            lambda: add_scaled_rms_norm(x, delta, w, 1e-6, backend="triton"),
            lambda: add_scaled_rms_norm_torch(x, delta, w, 1e-6),
        ),
    }


def must_be_bitwise(op: str, output: int, dtype: torch.dtype) -> bool:
    """Whether output ``output`` of ``op`` must equal the reference bit for bit in ``dtype`` (see the module).

    Example:
        >>> must_be_bitwise("rope", 1, torch.float32), must_be_bitwise("add_norm", 1, torch.float32)
        (True, False)
    """
    if op in ("rope", "rope_cache", "rope_cache_slotted"):
        return True
    if op == "silu_mul":
        return dtype != torch.float32
    return op == "add_norm" and output == 0


def check(shapes: list[tuple[int, tuple[int, int, int], int, int]], device, gen) -> tuple[list[dict], list[str]]:
    """Every op against its reference at ``shapes`` ``(rows, (H, Hkv, D), ffn, hidden)`` in every dtype."""
    rows_out, failed = [], []
    for dtype in DTYPES:
        for rows, heads, ffn, hidden in shapes:
            for op, (kernel, reference) in op_cases(rows, heads, ffn, hidden, dtype, device, gen).items():
                for i, (a, b) in enumerate(zip(kernel(), reference())):
                    differ, max_ulp = ulp_diff(a, b)
                    bitwise = must_be_bitwise(op, i, dtype)
                    row = dict(op=op, output=i, dtype=str(dtype), rows=rows, heads=heads, ffn=ffn, hidden=hidden)
                    row.update(elements=a.numel(), differ=differ, max_ulp=max_ulp, must_be_bitwise=bitwise)
                    rows_out.append(row)
                    if bitwise and differ:
                        failed.append(f"{op}[{i}] {dtype} rows={rows}: {differ} elements differ (max {max_ulp} ulp)")
    return rows_out, failed


def op_times(heads, ffn, hidden, rows_list, device, gen) -> list[dict]:
    """Per-call microseconds of each kernel and its reference (bf16), ``CALLS`` calls in one graph."""
    out = []
    for rows in rows_list:
        for op, pair in op_cases(rows, heads, ffn, hidden, torch.bfloat16, device, gen).items():
            row = dict(op=op, rows=rows)
            for name, fn in zip(("kernel", "reference"), pair):
                replay = capture_cuda_graph(lambda fn=fn: [fn() for _ in range(CALLS)])
                row[f"{name}_us"] = 1e3 * mean_time_ms(replay, 20, warmup=3) / CALLS
            out.append(row)
    return out


def layer_times(cfg, rows_list, device, prefix: int, reps: int) -> list[dict]:
    """One decoder layer's graph replay (ms) with the kernels and with the references, and its kernel counts."""
    from benchmarks.kernels.bench_roofline import step_kernel_breakdown
    from specdec.models.dense import DecoderLayer, prefix_attention_mask
    from specdec.models.elementwise import elementwise_kernels

    torch.manual_seed(0)
    layer = DecoderLayer(cfg).to(device=device, dtype=torch.bfloat16).eval().requires_grad_(False)
    for p in layer.parameters():  # init's uniform weights are too large for 36 layers; only the time matters here
        p.mul_(0.5)
    out = []
    for rows in rows_list:
        span = prefix + rows
        k_cache = torch.randn(1, cfg.num_kv_heads, span, cfg.head_dim, device=device, dtype=torch.bfloat16)
        v_cache = torch.randn_like(k_cache)
        x = torch.randn(1, rows, cfg.hidden_size, device=device, dtype=torch.bfloat16)
        cos, sin = rope_tables(rows, cfg.head_dim, torch.bfloat16, device, torch.Generator(device=device).manual_seed(1))
        slots = prefix + torch.arange(rows, device=device)
        mask = prefix_attention_mask(prefix, rows, None, device)
        row = dict(rows=rows)
        outputs = {}

        h = layer.attn_norm(x)

        def forward(mode):  # as the runtimes run a layer: its input normed, its output's add fused with the next norm
            outputs[mode] = layer.forward_normed(x, h, layer.attn_norm, cos, sin, k_cache, v_cache, slots, mask)[0]

        for mode in ("auto", "torch"):
            with elementwise_kernels(mode):
                replay = capture_cuda_graph(lambda mode=mode: forward(mode))
            replay()
            name = "kernels" if mode == "auto" else "reference"
            row[f"{name}_ms"] = mean_time_ms(replay, reps, warmup=3)
            row[f"{name}_profile"] = step_kernel_breakdown(replay, device, steps=5, top=6)
        diff = (outputs["auto"].float() - outputs["torch"].float()).abs().max().item()
        row["max_abs_diff"] = diff
        row["speedup"] = row["reference_ms"] / row["kernels_ms"]
        out.append(row)
        print(f"layer rows={rows}: kernels {row['kernels_ms']:.3f} ms, reference {row['reference_ms']:.3f} ms", flush=True)
    return out


def plot(result: dict, path: Path) -> str | None:
    layers = result.get("layer")
    if not layers:
        return "no layer timings to plot"
    plt = agg_pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = [r["rows"] for r in layers]
    for key, label in (("kernels_ms", "Triton kernels"), ("reference_ms", "PyTorch references")):
        ax.plot(rows, [r[key] for r in layers], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rows of the forward")
    ax.set_ylabel("ms per layer (CUDA graph replay)")
    ax.set_title(f"{result['model']} decoder layer, bf16, {result['device']}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def summary(result: dict) -> list[str]:
    lines = [f"checks: {len(result['checks'])} outputs, {len(result['failed'])} must-be-bitwise failures"]
    lines += [f"FAILED {f}" for f in result["failed"]]
    if result.get("ops"):
        lines.append(f"{'op':14s} {'rows':>5s} {'kernel us':>10s} {'reference us':>13s}")
        lines += [f"{r['op']:14s} {r['rows']:5d} {r['kernel_us']:10.2f} {r['reference_us']:13.2f}" for r in result["ops"]]
    if result.get("layer"):
        lines.append(f"{'layer rows':>10s} {'kernels ms':>11s} {'reference ms':>13s} {'speedup':>8s} {'launches':>14s}")
        for r in result["layer"]:
            launches = f"{r['kernels_profile'].get('kernels_per_step', 0):.0f} vs {r['reference_profile'].get('kernels_per_step', 0):.0f}"
            lines.append(f"{r['rows']:10d} {r['kernels_ms']:11.3f} {r['reference_ms']:13.3f} {r['speedup']:8.2f} {launches:>14s}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "elementwise.json"))
    ap.add_argument("--smoke", action="store_true", help="CPU: tiny shapes through the Triton interpreter")
    ap.add_argument("--plot-only", metavar="JSON", help="redraw the plot of a result JSON")
    args = ap.parse_args(argv)
    if args.plot_only:
        return redraw(plot, args.plot_only)
    if args.smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":
            ap.error("--smoke: expected TRITON_INTERPRET=1 in the environment (Triton reads it when the kernels are defined)")
        device = torch.device("cpu")
        shapes = [(3, (4, 2, 16), 24, 40)]
    else:
        if not torch.cuda.is_available():
            ap.error("needs CUDA; use --smoke on a CPU")
        device = torch.device("cuda")
        shapes = [(1, (32, 8, 128), 12288, 4096), (17, (40, 8, 128), 11008, 5120), (96, (32, 8, 128), 12288, 4096),
                  (5, (16, 4, 64), 1000, 1000)]  # fmt: skip
    from specdec.models.shapes import QWEN3_8B

    prov = provenance(seed=0)
    t0 = time.time()
    gen = torch.Generator(device=device).manual_seed(0)
    checks, failed = check(shapes, device, gen)
    print(f"checks: {len(checks)} outputs, {len(failed)} failures ({time.time() - t0:.0f} s)", flush=True)
    result = dict(
        model="qwen3-8b",
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        weights="random (layer: nn.Linear init x 0.5; ops: Gaussian inputs), labelled so",
        calls_per_graph=CALLS,
        checks=checks,
        failed=failed,
        ops=[],
        layer=[],
    )
    if device.type == "cuda":
        cfg = QWEN3_8B
        result["ops"] = op_times((cfg.num_heads, cfg.num_kv_heads, cfg.head_dim), cfg.intermediate_size, cfg.hidden_size,
                                 ROWS, device, gen)  # fmt: skip
        result["layer"] = layer_times(cfg, ROWS, device, prefix=512, reps=50)
    result["wall_s"] = time.time() - t0
    report(args.out, result, prov, plot, summary)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
