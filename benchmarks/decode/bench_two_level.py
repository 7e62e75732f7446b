"""Two-level verification against chain and tree verification, Qwen3-8B shape, random bf16 weights.

Question: how many tokens does one exact target pass emit with :class:`specdec.TwoLevelVerifier`, what
does a round cost stage by stage, and is it faster than one-level verification with the same drafter?

Acceptance is simulated (:class:`specdec.OracleDrafter`: the target's own greedy continuation with
misses drawn from a published profile), since random weights give a real drafter nothing to learn;
the Q pass is real: the target's 8-bit A+E weight view, whose argmax agreement with the exact weights
decides how far the Q chain reaches. Two Q-view storages: ``packed`` (the 8-bit plane read by the
W12 Q kernel, 0.5 of the bf16 bytes) and ``dense`` (the same values as bf16 weights read by cuBLAS:
the algorithm's gain without the byte saving).

Every configuration's output must equal plain greedy decoding token for token (bf16 on one GPU:
same kernels, same batch shapes per row count are not guaranteed, so equality is checked and
reported, and a mismatch is counted, not hidden). Times are wall clock of whole ``sd.generate``
calls after a warm-up call (CUDA graphs captured); stage times come from a separate run with
``sync_stages=True``.

Run on a GPU machine: ``python -m benchmarks.decode.bench_two_level`` (writes ``$OUT/bench_two_level.json``).
CPU smoke test: ``python -m benchmarks.decode.bench_two_level --tiny``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

import specdec as sd
from benchmarks.common import median_time_ms, provenance, provenance_line, write_json
from specdec.contracts import Tree, VerifyPlan
from specdec.models import QWEN3_8B, DenseTarget
from specdec.models.config import TargetConfig

TINY = TargetConfig(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    qk_norm=True,
    model_type="qwen3",
)


def build_target(cfg: TargetConfig, device, dtype, max_seq_len: int, storage: str, graphs: bool) -> DenseTarget:
    torch.manual_seed(0)
    target = DenseTarget(cfg, max_seq_len=max_seq_len, dtype=dtype, device=device).eval().requires_grad_(False)
    target.set_q_view_storage(storage)
    if graphs:
        target.enable_cuda_graphs()
    return target


def run(target, prompt, tokens, *, drafter=None, verifier=None, k=0):
    """``(output, seconds)`` of one ``sd.generate`` call (synchronised)."""
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    extra = dict(drafter=drafter, verifier=verifier, num_draft_tokens=k) if drafter is not None else {}
    out = sd.generate(target, prompt, tokens, **extra)
    if target.device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def pass_times(target, prompt, rows: int, reps: int) -> dict:
    """Median ms of one forward of a ``rows``-row chain plan with the exact weights and with the Q view."""
    target.reset()
    target(prompt)
    target.commit(prompt.shape[1])
    plan = VerifyPlan.for_tree(prompt[0, -1:], Tree.chain(prompt[0, : rows - 1]), prefix_len=target.length)

    def timed(view):
        def call():
            target.run_plan(plan, view=view)
            target.discard()

        return median_time_ms(call, reps, device=target.device)

    exact, q = timed("exact"), timed("q")
    return dict(rows=rows, exact_ms=exact, q_ms=q, q_over_exact=q / exact)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test on a tiny float32 model")
    ap.add_argument("--tokens", type=int, default=128, help="new tokens per generate call")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--profiles", default="specpilot-one-level,dspark-qwen3-8b-gsm8k")
    ap.add_argument("--budget", type=int, default=64, help="exact-pass tree nodes (two-level) / tree budget (tree)")
    ap.add_argument("--storages", default="packed,dense", help="Q-view storages to measure")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="target dtype on the GPU")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_two_level.json"))
    args = ap.parse_args()

    prov = provenance(seed=0)
    print(provenance_line(prov), flush=True)
    cuda = torch.cuda.is_available() and not args.tiny
    device = torch.device("cuda" if cuda else "cpu")
    cfg, dtype = (QWEN3_8B, getattr(torch, args.dtype)) if cuda else (TINY, torch.float32)
    max_seq_len = args.prompt_len + args.tokens + 2 * args.budget + 64
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, cfg.vocab_size, (1, args.prompt_len), generator=gen).to(device)
    result = dict(model="qwen3-8b" if cuda else "tiny", dtype=str(dtype), device=str(device), label=sd.OracleDrafter.label)
    rows = []
    for storage in args.storages.split(","):
        target = build_target(cfg, device, dtype, max_seq_len, storage, graphs=cuda)
        run(target, prompt, args.tokens)  # warm-up: graphs captured
        ar, ar_s = run(target, prompt, args.tokens)
        reference = torch.cat([prompt[0], ar.tokens[0]]).cpu()
        timing = pass_times(target, prompt, 16, args.reps)
        timing["byte_ratio"] = 0.5 if storage == "packed" and cuda and dtype == torch.bfloat16 else 1.0
        print(
            f"[{storage}] AR {args.tokens / ar_s:.1f} tok/s; 16-row pass exact {timing['exact_ms']:.3f} ms, "
            f"Q {timing['q_ms']:.3f} ms (x{timing['q_over_exact']:.2f}, byte ratio {timing['byte_ratio']})",
            flush=True,
        )
        for name in args.profiles.split(","):
            profile = sd.drafters.oracle.PRESETS[name]
            k = profile.num_drafts

            def oracle():
                return sd.OracleDrafter(profile, references=[reference], vocab_size=cfg.vocab_size, seed=1)

            systems = {
                "chain": lambda: sd.ChainVerifier(),
                "tree": lambda: sd.TreeVerifier(args.budget),
                "two-level always": lambda: sd.TwoLevelVerifier(args.budget, max(args.budget, k), gate="always"),
                "two-level auto": lambda: sd.TwoLevelVerifier(args.budget, max(args.budget, k), gate="auto"),
            }
            if storage != args.storages.split(",")[0]:
                systems = {key: v for key, v in systems.items() if key.startswith("two-level")}
            for sys_name, make in systems.items():
                run(target, prompt, args.tokens, drafter=oracle(), verifier=make(), k=k)  # warm-up
                verifier = make()
                out, secs = run(target, prompt, args.tokens, drafter=oracle(), verifier=verifier, k=k)
                row = dict(
                    storage=storage,
                    profile=name,
                    profile_tokens_per_round=profile.tokens_per_round,
                    system=sys_name,
                    equal_to_ar=bool(torch.equal(out.tokens.cpu(), ar.tokens.cpu())),
                    new_tokens=int(out.stats.new_tokens),
                    exact_passes=int(out.stats.target_passes) - 1,
                    tokens_per_exact_pass=out.stats.new_tokens / max(1, out.stats.target_passes - 1),
                    seconds=secs,
                    speedup_vs_ar=ar_s / secs,
                )
                if isinstance(verifier, sd.TwoLevelVerifier):
                    staged = sd.TwoLevelVerifier(args.budget, max(args.budget, k), gate=verifier.gate.mode, sync_stages=True)
                    out2, _ = run(target, prompt, args.tokens, drafter=oracle(), verifier=staged, k=k)
                    row["stats"] = verifier.stats.as_dict()
                    row["stage_seconds_synced"] = staged.stats.seconds
                    row["draft1_seconds_synced_run"] = out2.stats.draft_s
                rows.append(row)
                print(
                    f"[{storage}] {name:28s} {sys_name:18s} tok/pass {row['tokens_per_exact_pass']:5.2f}  "
                    f"x AR {row['speedup_vs_ar']:.2f}  equal {row['equal_to_ar']}",
                    flush=True,
                )
        result.setdefault("pass_times", []).append(dict(storage=storage, **timing))
        result.setdefault("ar_seconds", {})[storage] = ar_s
        del target
        if cuda:
            torch.cuda.empty_cache()
        result["rows"] = rows
        write_json(args.out, result, prov)  # after each storage: a run cut short keeps what it measured
    for row in rows:
        if row["system"].startswith("two-level"):
            same = [r for r in rows if r["profile"] == row["profile"] and r["system"] in ("chain", "tree")]
            for base in same:
                row[f"tokens_per_pass_over_{base['system']}"] = row["tokens_per_exact_pass"] / base["tokens_per_exact_pass"]
                row[f"speedup_over_{base['system']}"] = base["seconds"] / row["seconds"]
    write_json(args.out, result, prov)
    print("\nsystem                     profile                     storage  tok/pass  vs chain  x tree (time)")
    for row in rows:
        print(
            f"{row['system']:26s} {row['profile']:27s} {row['storage']:7s}  {row['tokens_per_exact_pass']:7.2f}  "
            f"{row.get('tokens_per_pass_over_chain', 1.0):7.2f}  {row.get('speedup_over_tree', 1.0):7.2f}"
        )


if __name__ == "__main__":
    main()
