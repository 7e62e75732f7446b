"""A prompt chunk among verify rows, one layer's attention: what the chunk costs the packed SDPA and what it could cost.

In the engine's passes that carry a joining request's prompt chunk (~130-190 rows) beside 16 requests verifying a
few rows each, the 8B forward takes 2-3 ms more than a pass of the same 256 rows whose tallest request has 32
rows (`bench_engine ... --split-forward`, `passes_by_bucket`). This times, at Qwen3-8B's heads (32 query, 8 KV,
head_dim 128), bf16, 16 verify requests (1-16 tree rows over prefixes of 128-300) plus one chunk of ``T`` rows
(causal, over a prefix of ``P``), one layer's attention as:

- ``slots``: the target's path, :func:`~specdec.models.packed_attention.slot_mask` + ``sdpa_over_slots`` over the
  17 slots, every slot's query block ``bucket(T)`` rows tall (mask built once a forward, timed apart);
- ``slots_verify_only``: the same without the chunk (blocks of 16 rows): the verify requests' own cost;
- ``chunk_masked/<backend>``: the chunk alone over its slot's first ``Lb`` positions under a boolean mask (``[1, 8,
  4 T, Lb]`` queries, as one would attend it apart), with SDPA's backend forced (cuDNN, memory-efficient, math);
- ``chunk_causal``: the chunk alone over exactly its ``P + T`` positions with a lower-right causal bias
  (``torch.nn.attention.bias.causal_lower_right``: no mask tensor, masked blocks skipped), the best a kernel given
  the exact lengths can do (the graph buckets' padded shapes cannot give it these lengths).

Every variant's rows are checked against a float32 reference (each request alone, plain SDPA) before timing:
``passed`` when the max abs error is at most twice ``slots``' own plus 1e-3. Per variant: ``attn_us``, one call's
device time as the target's graphs run it (on CUDA ten calls captured in one CUDA graph, the median of ``--reps``
replays between CUDA events, divided by ten; eager host time on a CPU) and ``pass_ms = 36 * attn_us`` (36 layers);
the mask's ``mask_us`` once a forward, timed alike. A variant that raises (a backend refusing the shape, or the
capture) is recorded with its error, not timed.

Run (GPU, ~20 s): ``python3 -m benchmarks.kernels.bench_chunk_attention --out $OUT/chunk_attention.json``.
CPU smoke (tiny heads, the math backend only): ``python3 -m benchmarks.kernels.bench_chunk_attention --smoke``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from benchmarks.common import capture_cuda_graph, median_time_ms, provenance, provenance_line, write_json
from benchmarks.kernels.bench_packed_attention import LAYERS, SPAN_STEP, Shape, pack, random_requests, reference
from specdec.models.graphs import pick_bucket
from specdec.models.packed_attention import sdpa_over_slots, slot_mask
from specdec.models.ragged import ROW_BUCKETS

QWEN3_8B = dict(num_heads=32, num_kv_heads=8, head_dim=128, max_seq_len=1024, prefix=(128, 300), rows=(1, 16), requests=(16,))
SMOKE = dict(num_heads=4, num_kv_heads=2, head_dim=16, max_seq_len=96, prefix=(4, 20), rows=(1, 4), requests=(3,))
CHUNKS = ((32, 0), (128, 0), (192, 0), (128, 128))  # (T rows, P committed before it)
SMOKE_CHUNKS = ((12, 0), (12, 8))
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


def call_us(call, reps: int, device: torch.device, calls: int = 10) -> float:
    """Microseconds of one ``call()``: on CUDA ``calls`` of them captured in one graph, replayed ``reps`` times."""
    if device.type != "cuda":
        return 1e3 * median_time_ms(call, reps, device=device)
    replay = capture_cuda_graph(lambda: [call() for _ in range(calls)], warmup=3)
    return 1e3 * median_time_ms(replay, reps, device=device) / calls


def run_case(chunk_rows: int, chunk_prefix: int, shape: Shape, reps: int, device: torch.device, backends: list[str]) -> dict:
    gen = torch.Generator().manual_seed(chunk_rows * 1000 + chunk_prefix)
    verify = random_requests(shape.requests[0], shape, gen)
    chunk = {
        "slot": len(verify),
        "length": chunk_prefix,
        "rows": chunk_rows,
        "mask": torch.tril(torch.ones(chunk_rows, chunk_rows, dtype=torch.bool)),
    }
    requests = [*verify, chunk]
    num_slots, group = len(requests) + 1, shape.num_heads // shape.num_kv_heads
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    cache_shape = (num_slots, shape.num_kv_heads, shape.max_seq_len, shape.head_dim)
    k_cache = torch.randn(cache_shape, generator=gen).to(device, dtype)
    v_cache = torch.randn(cache_shape, generator=gen).to(device, dtype)
    total = sum(r["rows"] for r in requests)
    queries = torch.randn(1, shape.num_heads, total, shape.head_dim, generator=gen).to(device, dtype)
    want = reference(queries, k_cache, v_cache, requests)
    span = -(-max(r["length"] + r["rows"] for r in requests) // SPAN_STEP) * SPAN_STEP
    chunk_span = -(-(chunk_prefix + chunk_rows) // SPAN_STEP) * SPAN_STEP
    verify_rows = total - chunk_rows
    case = {"chunk_rows": chunk_rows, "chunk_prefix": chunk_prefix, "span": span, "verify_rows": verify_rows, "variants": {}}

    def slots_call(reqs, q):
        buf = pack(reqs, device)
        tb = pick_bucket(ROW_BUCKETS, max(r["rows"] for r in reqs))
        local = torch.zeros(buf["local"].shape[0], tb, dtype=torch.bool, device=device)
        local[:, : buf["local"].shape[1]] = buf["local"]
        args = (buf["row_slot"], buf["row_index"], buf["row_len"], local, span)

        def mask():
            return slot_mask(*args, num_slots=num_slots, group=group)

        built = mask()
        keys, values = k_cache[:, :, :span], v_cache[:, :, :span]
        return mask, lambda: sdpa_over_slots(q, keys, values, buf["row_slot"], buf["row_index"], built)

    q_chunk = queries[:, :, verify_rows:]  # [1, H, T, D]
    q_folded = q_chunk.reshape(1, shape.num_kv_heads, group * chunk_rows, shape.head_dim)
    k_chunk, v_chunk = k_cache[chunk["slot"] : chunk["slot"] + 1], v_cache[chunk["slot"] : chunk["slot"] + 1]
    rel = torch.arange(chunk_span, device=device)[None] - chunk_prefix - torch.arange(chunk_rows, device=device)[:, None]
    chunk_mask = (rel <= 0)[None, None].repeat(1, 1, group, 1)  # [1, 1, G * T, Lb]: prefix and causal own rows

    def chunk_masked():
        out = F.scaled_dot_product_attention(
            q_folded, k_chunk[:, :, :chunk_span], v_chunk[:, :, :chunk_span], attn_mask=chunk_mask
        )
        return out.reshape(shape.num_heads, chunk_rows, shape.head_dim).transpose(0, 1)

    length = chunk_prefix + chunk_rows
    bias = causal_lower_right(chunk_rows, length)

    def chunk_causal():
        out = F.scaled_dot_product_attention(
            q_chunk, k_chunk[:, :, :length], v_chunk[:, :, :length], attn_mask=bias, enable_gqa=True
        )
        return out[0].transpose(0, 1)

    slots_mask, slots = slots_call(requests, queries)
    verify_mask, verify_only = slots_call(verify, queries[:, :, :verify_rows])
    variants = {"slots": (slots, want, slots_mask), "slots_verify_only": (verify_only, want[:verify_rows], verify_mask)}
    for name in backends:
        variants[f"chunk_masked/{name}"] = (chunk_masked, want[verify_rows:], None, BACKENDS[name])
    variants["chunk_causal"] = (chunk_causal, want[verify_rows:], None)
    base_error = (slots().float() - want).abs().max().item()
    for name, (call, expect, mask_call, *backend) in variants.items():
        row = {}
        try:
            with sdpa_kernel(backend) if backend else contextlib.nullcontext():
                out = call()
                row["max_abs_error"] = (out.float() - expect).abs().max().item()
                row["passed"] = bool(out.shape == expect.shape and row["max_abs_error"] <= 2 * base_error + 1e-3)
                if row["passed"]:
                    row["attn_us"] = call_us(call, reps, device)
                    row["pass_ms"] = LAYERS * row["attn_us"] / 1e3
                    if mask_call is not None:
                        row["mask_us"] = call_us(mask_call, reps, device)
        except RuntimeError as err:  # a backend that does not take this shape or mask
            row = {"passed": None, "error": str(err).splitlines()[0][:200]}
        case["variants"][name] = row
    return case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "chunk_attention.json"))
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny heads, the math backend")
    args = parser.parse_args(argv)
    if args.reps < 1:
        raise ValueError(f"--reps: expected >= 1, got {args.reps}")
    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    if args.smoke:
        device, shape, chunks, backends, reps = torch.device("cpu"), Shape(**SMOKE), SMOKE_CHUNKS, ["math"], 2
    else:
        if not torch.cuda.is_available():
            parser.error("needs CUDA; use --smoke on a CPU")
        device, shape, chunks, backends, reps = torch.device("cuda"), Shape(**QWEN3_8B), CHUNKS, list(BACKENDS), args.reps
    start = time.perf_counter()
    cases = [run_case(t, p, shape, reps, device, backends) for t, p in chunks]
    failed = [(c["chunk_rows"], c["chunk_prefix"], n) for c in cases for n, v in c["variants"].items() if v["passed"] is False]
    result = dict(device=str(device), shape=shape.__dict__, layers=LAYERS, reps=reps, cases=cases, failed=failed)
    result["wall_s"] = time.perf_counter() - start
    path = write_json(args.out, result, prov)
    print(f"wrote {path}")
    print(f"one layer's attention (us; x {LAYERS} layers = ms a pass), 16 verify requests + one causal prompt chunk")
    print(f"{'T':>4s} {'P':>4s} {'span':>5s}  " + "  ".join(f"{n:>22s}" for n in cases[0]["variants"]))
    for c in cases:
        cells = []
        for v in c["variants"].values():
            cells.append(
                f"{v['attn_us']:9.1f} ({v['pass_ms']:5.2f} ms)"
                if "attn_us" in v
                else f"{'error' if v['passed'] is None else 'FAILED':>22s}"
            )
        print(f"{c['chunk_rows']:4d} {c['chunk_prefix']:4d} {c['span']:5d}  " + "  ".join(f"{s:>22s}" for s in cells))
    print(f"mask build once a forward (us): {[round(c['variants']['slots'].get('mask_us', float('nan')), 1) for c in cases]}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
