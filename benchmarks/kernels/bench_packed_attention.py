"""Packed verify rows' attention, one layer: SDPA over padded slots vs FlexAttention (compiled) over the long KV.

The attention of :class:`specdec.models.ragged.RaggedDenseTarget`'s ``"packed"`` layout, alone, at Qwen3-8B's
head shapes (32 query heads, 8 KV heads, head_dim 128): ``n`` requests (16 and 24), each with a committed
prefix of 128-1024 tokens and 1-16 new rows under the ancestor mask of a random draft tree; slots of
``max_seq_len = 2048`` positions plus the scratch slot. Variants, with the functions the target runs:

- ``sdpa``: :func:`~specdec.models.packed_attention.slot_mask` + ``sdpa_over_slots`` (each request's rows
  scattered into its slot, one masked SDPA over ``[n + 1, 8, 4 * Tb, Lb]``, ``Lb`` the longest attended
  length rounded up to 64 as the static path does);
- ``flex``: ``packed_block_mask`` (128-row blocks) + ``flex_over_slots`` (``flex_attention`` compiled on
  CUDA) of the packed queries ``[1, 32, R, 128]`` over the long KV ``[1, 8, (n + 1) * 2048, 128]``;
- ``flex-q32``: the same with 32-row blocks (``kernel_options={"BLOCK_M": 32}``), so a block of rows spans
  fewer requests' slots.

Per case and variant: ``mask_ms`` (building the mask, once per forward), ``attn_ms`` (the attention, once per
layer; median over ``--reps`` calls between CUDA events), ``forward_ms = mask_ms + 36 * attn_ms`` (36 layers),
and the first call's seconds (``first_call_s``: flex compiles there). Correctness before timing: every
variant's output is compared with a float32 reference computed one request at a time (its own prefix and tree
mask, plain SDPA); ``passed`` when its max abs error is at most twice SDPA-over-slots' own error plus 1e-3
(bf16), or 1e-4 (float32). A failed check is reported and not timed. The float32 cases are checks of the
same paths in full precision (timed too). Cases run in priority order and none starts past ``--budget-s``; the
JSON is rewritten after every case, so a cut run keeps what it measured.

Run: ``python3 -m benchmarks.kernels.bench_packed_attention [--out bench_packed_attention.json]``.
CPU smoke (tiny heads and slots, eager flex, same functions): ``python3 -m benchmarks.kernels.bench_packed_attention --smoke``.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import torch

from benchmarks.common import median_time_ms, provenance, provenance_line, write_json
from specdec.contracts import Tree, VerifyPlan
from specdec.models.packed_attention import (
    flex_over_slots,
    long_kv_view,
    packed_block_mask,
    sdpa_over_slots,
    slot_major_cache,
    slot_mask,
)

LAYERS = 36  # Qwen3-8B
SPAN_STEP = 64


@dataclass(frozen=True)
class Shape:
    """Heads, slot size and the ranges requests are drawn from."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_seq_len: int
    prefix: tuple[int, int]
    rows: tuple[int, int]
    requests: tuple[int, ...]


QWEN3_8B = dict(num_heads=32, num_kv_heads=8, head_dim=128, max_seq_len=2048, prefix=(128, 1024), rows=(1, 16), requests=(16, 24))
SMOKE = dict(num_heads=4, num_kv_heads=2, head_dim=16, max_seq_len=48, prefix=(4, 30), rows=(1, 6), requests=(3, 4))
VARIANTS = {
    "sdpa": None,
    "flex": dict(block_size=128, kernel_options=None),
    "flex-q32": dict(block_size=(32, 128), kernel_options={"BLOCK_M": 32}),
}


def random_requests(num_requests: int, shape: Shape, gen: torch.Generator) -> list[dict]:
    """Per request: its slot, committed length and the ``[T, T]`` ancestor mask of ``T - 1`` random tree nodes under a root."""
    requests = []
    for slot in range(num_requests):
        length = int(torch.randint(shape.prefix[0], shape.prefix[1] + 1, (), generator=gen))
        rows = int(torch.randint(shape.rows[0], shape.rows[1] + 1, (), generator=gen))
        parents = [-1] + [int(torch.randint(-1, i, (), generator=gen)) for i in range(1, rows - 1)]
        tree = Tree(tokens=[0] * (rows - 1), parents=parents[: rows - 1])
        plan = VerifyPlan.for_tree(torch.tensor([0]), tree, prefix_len=length)
        mask = torch.tril(torch.ones(rows, rows, dtype=torch.bool)) if plan.mask is None else plan.mask
        requests.append({"slot": slot, "length": length, "rows": rows, "mask": mask})
    return requests


def pack(requests: list[dict], device: torch.device) -> dict[str, torch.Tensor]:
    """The packed index buffers the target's forward builds: row -> slot, index in request, committed length; ``local``."""
    per_request = max(r["rows"] for r in requests)
    row_slot, row_index, row_len, local = [], [], [], []
    for r in requests:
        for i in range(r["rows"]):
            row_slot.append(r["slot"])
            row_index.append(i)
            row_len.append(r["length"])
            row = torch.zeros(per_request, dtype=torch.bool)
            row[: r["rows"]] = r["mask"][i]
            local.append(row)
    as_long = dict(dtype=torch.long, device=device)
    return {
        "row_slot": torch.tensor(row_slot, **as_long),
        "row_index": torch.tensor(row_index, **as_long),
        "row_len": torch.tensor(row_len, **as_long),
        "local": torch.stack(local).to(device),
    }


def reference(queries: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, requests: list[dict]) -> torch.Tensor:
    """float32 ``[R, H, D]``: each request alone, plain SDPA over its prefix and its rows under its tree mask."""
    outs, start = [], 0
    for r in requests:
        length, rows = r["length"], r["rows"]
        q = queries[:, :, start : start + rows].float()  # [1, H, T, D]
        k = k_cache[r["slot"] : r["slot"] + 1, :, : length + rows].float()  # [1, Hkv, length + T, D]
        v = v_cache[r["slot"] : r["slot"] + 1, :, : length + rows].float()
        mask = torch.cat([torch.ones(rows, length, dtype=torch.bool), r["mask"]], dim=1).to(queries.device)  # [T, length + T]
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # [1, H, T, D]
        outs.append(out[0].transpose(0, 1))
        start += rows
    return torch.cat(outs)


def run_case(
    num_requests: int,
    dtype: torch.dtype,
    variants: list[str],
    shape: Shape,
    reps: int,
    warmup: int,
    device: torch.device,
    seed: int,
) -> dict:
    gen = torch.Generator().manual_seed(seed + num_requests)
    requests = random_requests(num_requests, shape, gen)
    buf = pack(requests, device)
    num_slots, num_rows = num_requests + 1, buf["row_slot"].numel()
    cache_shape = (num_slots, shape.num_kv_heads, shape.max_seq_len, shape.head_dim)
    k_cache = slot_major_cache(*cache_shape, dtype=dtype, device=device)
    v_cache = slot_major_cache(*cache_shape, dtype=dtype, device=device)
    k_cache.copy_(torch.randn(cache_shape, generator=gen))
    v_cache.copy_(torch.randn(cache_shape, generator=gen))
    # the SDPA path's target keeps its cache slot-first in memory
    k_slots, v_slots = k_cache.contiguous(), v_cache.contiguous()
    queries = torch.randn(1, shape.num_heads, num_rows, shape.head_dim, generator=gen).to(device, dtype)
    want = reference(queries, k_cache, v_cache, requests)
    max_len = max(r["length"] + r["rows"] for r in requests)
    span = min(shape.max_seq_len, -(-max_len // SPAN_STEP) * SPAN_STEP)
    group = shape.num_heads // shape.num_kv_heads
    row_slot, row_index, row_len, local = buf["row_slot"], buf["row_index"], buf["row_len"], buf["local"]

    def sdpa_mask():
        return slot_mask(row_slot, row_index, row_len, local, span, num_slots=num_slots, group=group)

    def run_sdpa(mask):
        return sdpa_over_slots(queries, k_slots[:, :, :span], v_slots[:, :, :span], row_slot, row_index, mask)

    case = {
        "requests": num_requests,
        "dtype": dtype,
        "rows": num_rows,
        "rows_per_request": [r["rows"] for r in requests],
        "prefix_lengths": [r["length"] for r in requests],
        "span": span,
        "variants": {},
    }
    sdpa_error = (run_sdpa(sdpa_mask()).float() - want).abs().max().item()
    for name in variants:
        row = {}
        try:
            if VARIANTS[name] is None:
                build_mask, attend = sdpa_mask, run_sdpa
            else:
                options = VARIANTS[name]

                def build_mask(options=options):
                    return packed_block_mask(
                        row_slot,
                        row_len,
                        local,
                        num_slots=num_slots,
                        max_seq_len=shape.max_seq_len,
                        block_size=options["block_size"],
                    )

                def attend(block_mask, options=options):
                    long_k, long_v = long_kv_view(k_cache), long_kv_view(v_cache)
                    return flex_over_slots(queries, long_k, long_v, block_mask, kernel_options=options["kernel_options"])

            t0 = time.perf_counter()
            mask = build_mask()
            out = attend(mask)
            if device.type == "cuda":
                torch.cuda.synchronize()
            row["first_call_s"] = time.perf_counter() - t0
            row["max_abs_error"] = (out.float() - want).abs().max().item()
            bound = 2 * sdpa_error + 1e-3 if dtype != torch.float32 else 1e-4
            row["error_bound"] = bound
            row["passed"] = bool(out.shape == want.shape and row["max_abs_error"] <= bound)
            if row["passed"]:
                row["mask_ms"] = median_time_ms(build_mask, reps, device=device, warmup=warmup)
                row["attn_ms"] = median_time_ms(lambda: attend(mask), reps, device=device, warmup=warmup)
                row["forward_ms"] = row["mask_ms"] + LAYERS * row["attn_ms"]
        except Exception as error:  # a variant that cannot run here is reported, the others still run
            row = {"passed": False, "error": f"{type(error).__name__}: {error}"[:500]}
        case["variants"][name] = row
    return case


def plan_jobs(shape: Shape, smoke: bool) -> list[tuple[int, torch.dtype, list[str]]]:
    """Cases in priority order: bf16 sdpa vs flex at each request count, a float32 check, then 32-row flex blocks."""
    half = torch.float32 if smoke else torch.bfloat16
    jobs = [(n, half, ["sdpa", "flex"]) for n in shape.requests]
    if half != torch.float32:
        jobs.append((shape.requests[0], torch.float32, ["sdpa", "flex"]))
    jobs += [(n, half, ["flex-q32"]) for n in shape.requests]
    return jobs


def summary(cases: list[dict]) -> list[str]:
    lines = [
        f"{'n':>3} {'dtype':>9} {'rows':>5} {'span':>5} {'variant':>9} {'err':>9} {'mask ms':>8} {'attn ms':>8} {'fwd ms':>8} {'vs sdpa':>8}"
    ]
    sdpa_ms = {(c["requests"], c["dtype"]): c["variants"]["sdpa"].get("forward_ms") for c in cases if "sdpa" in c["variants"]}
    for case in cases:
        sdpa = sdpa_ms.get((case["requests"], case["dtype"]))
        for name, row in case["variants"].items():
            head = f"{case['requests']:>3} {str(case['dtype']).replace('torch.', ''):>9} {case['rows']:>5} {case['span']:>5} {name:>9}"
            if "error" in row:
                lines.append(f"{head} ERROR {row['error'][:80]}")
            elif not row["passed"]:
                lines.append(f"{head} {row['max_abs_error']:>9.2e} CHECK FAILED (bound {row['error_bound']:.2e}): not timed")
            else:
                ratio = f"{sdpa / row['forward_ms']:>7.2f}x" if sdpa else f"{'-':>8}"
                lines.append(
                    f"{head} {row['max_abs_error']:>9.2e} {row['mask_ms']:>8.3f} {row['attn_ms']:>8.3f} {row['forward_ms']:>8.2f} {ratio}"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_packed_attention.json"))
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--budget-s", type=float, default=80.0, help="start no new case past this many seconds")
    parser.add_argument("--smoke", action="store_true", help="CPU, 4 heads over 2 KV heads, head_dim 16, 3 and 4 requests")
    args = parser.parse_args(argv)
    seed = 0
    prov = provenance(seed)
    print(provenance_line(prov), flush=True)
    if args.smoke:
        device, shape, reps, warmup = torch.device("cpu"), Shape(**SMOKE), 2, 1
    else:
        if not torch.cuda.is_available():
            parser.error("needs CUDA; use --smoke on a CPU")
        device, shape, reps, warmup = torch.device("cuda"), Shape(**QWEN3_8B), args.reps, 3
    start = time.perf_counter()
    cases, skipped = [], []
    result = {"device": str(device), "shape": shape.__dict__, "layers": LAYERS, "reps": reps, "budget_s": args.budget_s}
    for num_requests, dtype, variants in plan_jobs(shape, args.smoke):
        if time.perf_counter() - start > args.budget_s:
            skipped.append({"requests": num_requests, "dtype": dtype, "variants": variants})
            continue
        cases.append(run_case(num_requests, dtype, variants, shape, reps, warmup, device, seed))
        print(f"done: {num_requests} requests, {dtype}, {variants} at {time.perf_counter() - start:.1f} s", flush=True)
        write_json(args.out, {**result, "passed": None, "cases": cases, "skipped": skipped}, prov)
    passed = bool(cases) and all(row["passed"] for case in cases for row in case["variants"].values())
    path = write_json(args.out, {**result, "passed": passed, "cases": cases, "skipped": skipped}, prov)
    print(f"wrote {path}; skipped past the budget: {len(skipped)} case(s)")
    print(
        f"one layer's attention, {shape.num_heads} q / {shape.num_kv_heads} kv heads, head_dim {shape.head_dim}, on {device}; "
        f"fwd = mask + {LAYERS} x attn"
    )
    for line in summary(cases):
        print(line)
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
