"""Decode-step benchmark: AR step (M = 1) and verify steps (M = 4..64) of Qwen3-8B/32B-shaped targets.

Random bf16 weights at the real shapes (the time does not depend on training). Every step runs as a
CUDA-graph replay of the lean runtime. Printed beside the weight-read floor: non-embedding weight bytes
over the device-to-device copy bandwidth measured in the same run.

    python benchmarks/decode/bench_ar.py --out $OUT/bench_ar.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import specdec as sd  # noqa: E402
from specdec.models import SHAPES, empty_target, random_target  # noqa: E402


def copy_bandwidth(nbytes: int = 2 << 30, iters: int = 20) -> float:
    """Device-to-device copy, bytes read + written per second (median)."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(iters + 3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return 2 * nbytes / statistics.median(times[3:])


def weight_bytes(target) -> int:
    """Bytes a decode step must read: every linear weight (lm_head included), not the embedding gather."""
    return sum(m.weight.numel() * m.weight.element_size() for m in target.modules() if isinstance(m, torch.nn.Linear))


def time_steps(target, m: int, prefix: int, iters: int) -> dict:
    tokens = torch.randint(0, target.vocab_size, (1, m), device="cuda")
    for _ in range(3):
        target(tokens)
        target.truncate(prefix)
    torch.cuda.synchronize()
    # (a) back-to-back replays: GPU time per step
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        target(tokens)
        target.truncate(prefix)
    end.record()
    torch.cuda.synchronize()
    gpu_ms = start.elapsed_time(end) / iters
    # (b) as in a decode loop: one host sync per step to read the argmax
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        target(tokens).logits[0, -1].argmax().item()
        target.truncate(prefix)
        samples.append((time.perf_counter() - t0) * 1e3)
    return {"m": m, "step_ms": gpu_ms, "step_ms_with_sync": statistics.median(samples)}


def check_graph_against_eager(target, prefix_ids) -> dict:
    """Error budget (flash-attention style): the graph path's bf16 logits may differ from a float32
    reference of the same weights by at most twice what the eager bf16 path differs by."""
    rows = torch.randint(0, target.vocab_size, (1, 8), device="cuda")
    n = prefix_ids.shape[1]

    def logits_of(model, graphs_on: bool):
        saved = model._graphs
        if not graphs_on:
            model._graphs = None
        model.reset()
        model(prefix_ids)
        model.commit(n)
        out = model(rows).logits.float()
        model.truncate(n)
        model._graphs = saved
        return out

    eager = logits_of(target, False)
    graph = logits_of(target, True)
    reference = empty_target(target.config, dtype=torch.float32, device="cuda", max_seq_len=target.max_seq_len)
    reference.load_state_dict({k: v.float() for k, v in target.state_dict().items()})
    ref = logits_of(reference, False)
    del reference
    torch.cuda.empty_cache()

    def rel(a):
        return ((a - ref).norm() / ref.norm()).item()

    err_eager, err_graph = rel(eager), rel(graph)
    agree = (graph.argmax(-1) == ref.argmax(-1)).float().mean().item()
    agree_eager = (eager.argmax(-1) == ref.argmax(-1)).float().mean().item()
    return {"rel_l2_graph_vs_fp32": err_graph, "rel_l2_eager_vs_fp32": err_eager, "argmax_agreement": agree,
            "argmax_agreement_eager": agree_eager, "ok": err_graph <= 2 * err_eager + 1e-6}


def run_model(name: str, ms: list[int], prefix: int, iters: int, max_seq_len: int, bandwidth: float, ar_tokens: int,
              compile: bool = False) -> dict:
    cfg = SHAPES[name]
    t0 = time.perf_counter()
    target = random_target(cfg, dtype=torch.bfloat16, device="cuda", max_seq_len=max_seq_len)
    target.enable_cuda_graphs(buckets=sorted(set(ms)), compile=compile)
    build_s = time.perf_counter() - t0
    nbytes = weight_bytes(target)
    floor_ms = nbytes / bandwidth * 1e3
    prefix_ids = torch.randint(0, cfg.vocab_size, (1, prefix), device="cuda")
    check = check_graph_against_eager(target, prefix_ids)
    result = {"model": name, "compile": compile, "weight_bytes": nbytes, "floor_ms": floor_ms, "build_s": build_s, "check": check, "steps": []}
    if not check["ok"]:
        print(f"{name}: graph/eager check FAILED {check}; not reporting times", flush=True)
        return result
    target.reset()
    target(prefix_ids)
    target.commit(prefix)
    for m in ms:
        row = time_steps(target, m, prefix, iters)
        row["x_floor"] = row["step_ms"] / floor_ms
        result["steps"].append(row)
        print(f"{name}{' compiled' if compile else ''} M={m:3d}: {row['step_ms']:.3f} ms ({row['x_floor']:.2f}x floor), with host sync {row['step_ms_with_sync']:.3f} ms", flush=True)
    m1 = result["steps"][0]["step_ms"]
    for row in result["steps"]:
        row["x_m1"] = row["step_ms"] / m1
    if ar_tokens:
        prompt = prefix_ids[:, :64]
        sd.generate(target, prompt, 8)
        torch.cuda.synchronize()
        out = sd.generate(target, prompt, ar_tokens)
        result["generate"] = {"tokens": ar_tokens, "tokens_per_s": out.stats.tokens_per_second, "ms_per_token": 1e3 / out.stats.tokens_per_second}
    del target
    torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="qwen3-8b,qwen3-32b")
    parser.add_argument("--ms", default="1,4,8,16,32,64")
    parser.add_argument("--prefix", type=int, default=512, help="committed tokens before each timed step")
    parser.add_argument("--max-seq-len", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--ar-tokens", type=int, default=128, help="tokens of an end-to-end sd.generate AR run")
    parser.add_argument("--compile", action="store_true", help="torch.compile the graph body (fused element-wise work)")
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_ar.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_ar.py needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    bandwidth = copy_bandwidth()
    ms = [int(x) for x in args.ms.split(",")]
    results = {
        "gpu": torch.cuda.get_device_name(),
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "command": " ".join(sys.argv),
        "copy_bandwidth_Bps": bandwidth,
        "models": [run_model(n, ms, args.prefix, args.iters, args.max_seq_len, bandwidth, args.ar_tokens, args.compile) for n in args.models.split(",")],
    }
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\ncopy bandwidth {bandwidth / 1e12:.2f} TB/s (read + write)")
    print(f"{'model':10} {'M':>4} {'step ms':>9} {'x floor':>8} {'x M=1':>7} {'sync ms':>8}")
    for res in results["models"]:
        print(f"{res['model'] + (' (compiled)' if res['compile'] else ''):10} floor {res['floor_ms']:.3f} ms ({res['weight_bytes'] / 1e9:.2f} GB); check {res['check']}")
        for row in res["steps"]:
            print(f"{'':10} {row['m']:4d} {row['step_ms']:9.3f} {row['x_floor']:8.2f} {row['x_m1']:7.2f} {row['step_ms_with_sync']:8.3f}")
        if "generate" in res:
            print(f"{'':10} sd.generate AR: {res['generate']['tokens_per_s']:.1f} tok/s ({res['generate']['ms_per_token']:.2f} ms/token)")


if __name__ == "__main__":
    main()
