"""A packed forward carrying a prompt chunk beside verify rows: the chunk attending its own slot apart, or not.

The engine's passes that hold a joining request's prompt chunk cost 2-3 ms more on the 8B shape than passes of the
same rows without one (`passes_by_bucket`); one layer's attention alone (`bench_chunk_attention.py`) puts ~90 us of
it in the slots' SDPA, whose every query block is padded to the chunk's rows. This times the whole packed forward
of :class:`~specdec.models.ragged.RaggedDenseTarget` under CUDA graphs, as the engine runs it, on a Qwen3-8B-shaped
target cut to ``--layers`` layers (random weights, labelled so): 16 requests verifying ``(256 - T) / 16`` rows each
over ``--prefix``-token prefixes (200 by default) plus one request's ``T``-row prompt chunk: ``apart`` (the chunk
attends its own slot, ``long_request_rows`` 64 whatever the padding), ``joint`` (one SDPA over padded slots,
``long_request_rows=None``) and ``default`` (the target's rule: apart once the padding reaches
``LONG_REQUEST_PADDING``; ``default_apart`` says which it chose). Per variant and ``T``: the forward's median milliseconds between
device syncs (host work included, as the engine's `forward_ms`), its kernels under ``torch.profiler`` (GEMM /
attention / other ms, launches), and per layer the difference, scaled to the 8B's 36 layers. Both variants' logits
are compared (argmax equal, bf16 tolerance) before timing.

Run (GPU, ~1 min): ``python3 -m benchmarks.decode.bench_chunk_forward --out $OUT/chunk_forward.json``.
CPU smoke (tiny target, static path, no graphs): ``python3 -m benchmarks.decode.bench_chunk_forward --smoke``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import torch

from benchmarks.common import TINY_QWEN3, median_time_ms, provenance, provenance_line, write_json
from benchmarks.kernels.bench_roofline import step_kernel_breakdown
from specdec.models import QWEN3_8B, DenseTarget
from specdec.models.config import TargetConfig
from specdec.models.ragged import LONG_REQUEST_ROWS, RaggedDenseTarget, RequestRows

FULL_LAYERS = 36
VARIANTS = ("apart", "joint", "default")


def build(variant: str, base: DenseTarget, graphs: bool, long_rows: int) -> RaggedDenseTarget:
    ragged = RaggedDenseTarget(base, slots=17, layout="packed")
    if variant == "apart":  # whatever the padding
        ragged.long_request_rows, ragged.long_request_padding = long_rows, 1
    elif variant == "joint":
        ragged.long_request_rows = None
    if graphs:
        ragged.enable_cuda_graphs()
    else:
        ragged.enable_static_path()
    return ragged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "chunk_forward.json"))
    parser.add_argument("--layers", type=int, default=6, help="layers of the 8B shape built (random weights)")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--prefix", type=int, default=200, help="committed tokens of each verifying request (GPU)")
    parser.add_argument("--smoke", action="store_true", help="CPU: the tiny Qwen3, static path, no graphs")
    args = parser.parse_args(argv)
    if args.layers < 1 or args.reps < 1 or args.prefix < 1:
        raise ValueError(f"--layers, --reps, --prefix: expected >= 1, got {args.layers}, {args.reps}, {args.prefix}")
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    cuda = torch.cuda.is_available() and not args.smoke
    if not cuda and not args.smoke:
        parser.error("needs CUDA; use --smoke on a CPU")
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:
        cfg, dtype, prefix, chunks, long_rows, reps = (
            dataclasses.replace(QWEN3_8B, num_layers=args.layers),
            torch.bfloat16,
            args.prefix,
            (128, 192),
            LONG_REQUEST_ROWS,
            args.reps,
        )
    else:
        cfg, dtype, prefix, chunks, long_rows, reps = TargetConfig(**TINY_QWEN3), torch.float32, 12, (8, 12), 8, 2
    gen = torch.Generator().manual_seed(0)
    base = DenseTarget(cfg, max_seq_len=prefix + 256 + 64, dtype=dtype, device=device).eval().requires_grad_(False)
    start = time.perf_counter()
    result = dict(device=str(device), layers=cfg.num_layers, hidden=cfg.hidden_size, prefix=prefix, weights="random", cases=[])
    ok = True
    for chunk in chunks:
        verify = (16 * 16 - chunk) // 16 if cuda else 1
        targets = {v: build(v, base, cuda, long_rows) for v in VARIANTS}
        prompts = [torch.randint(0, cfg.vocab_size, (1, prefix), generator=gen) for _ in range(16)]
        rows = [RequestRows(s, torch.randint(0, cfg.vocab_size, (1, verify), generator=gen).to(device)) for s in range(16)]
        rows.append(RequestRows(16, torch.randint(0, cfg.vocab_size, (1, chunk), generator=gen).to(device)))
        case = dict(chunk_rows=chunk, verify_rows_each=verify, rows=16 * verify + chunk, variants={})
        outs = {}
        for name, ragged in targets.items():
            for s, p in enumerate(prompts):
                ragged.forward([RequestRows(s, p.to(device))])
                ragged.commit(s, prefix)
            outs[name] = ragged.forward(rows)
        for a, b in [*zip(outs["apart"], outs["joint"]), *zip(outs["default"], outs["joint"])]:
            same = torch.equal(a.logits.argmax(-1), b.logits.argmax(-1))
            close = torch.allclose(a.logits, b.logits, rtol=0.05, atol=0.05 if cuda else 1e-4)
            ok = ok and same and close
        case["equal_argmax_and_close"] = ok
        for name, ragged in targets.items():
            ms = median_time_ms(lambda r=ragged: r.forward(rows), reps, device=device)
            kernels = step_kernel_breakdown(lambda r=ragged: r.forward(rows), device, steps=5, top=6)
            case["variants"][name] = dict(forward_ms=ms, kernels=kernels, keys=[list(k[:4]) for k in ragged.static_keys])
        case["default_apart"] = any(key[3] > 0 for key in targets["default"].static_keys)
        a, j = case["variants"]["apart"], case["variants"]["joint"]
        per_layer = (a["forward_ms"] - j["forward_ms"]) / cfg.num_layers
        case["apart_minus_joint_ms_per_layer"] = per_layer
        case["apart_minus_joint_ms_36_layers"] = FULL_LAYERS * per_layer
        result["cases"].append(case)
        del targets
    result["wall_s"] = time.perf_counter() - start
    result["passed"] = ok
    path = write_json(args.out, result, prov)
    print(f"wrote {path}")
    print(f"packed forward, {cfg.num_layers} layers of hidden {cfg.hidden_size}, 16 requests verifying + one prompt chunk")
    print(" T  rows  variant  forward ms  kernels ms (GEMM / attention / other)  launches")
    for c in result["cases"]:
        for name, v in c["variants"].items():
            k = v["kernels"]
            split = f"{k['kernels_ms']:6.2f} ({k['gemm_ms']:.2f} / {k['attention_ms']:.2f} / {k['other_ms']:.2f})" if k else "n/a"
            launches = f"{k['kernels_per_step']:.0f}" if k else "n/a"
            print(f"{c['chunk_rows']:3d} {c['rows']:5d}  {name:7s} {v['forward_ms']:10.3f}  {split:38s} {launches}")
        print(
            f"    apart - joint: {c['apart_minus_joint_ms_per_layer'] * 1e3:+.1f} us a layer, "
            f"{c['apart_minus_joint_ms_36_layers']:+.2f} ms at 36 layers; the default rule chose "
            + ("apart" if c["default_apart"] else "joint")
        )
    print(f"logits agree (argmax equal, close): {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
