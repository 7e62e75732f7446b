"""Plots for docs/results.md from the committed benchmark JSON (``python docs/make_plots.py``)."""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
IMG = ROOT / "docs" / "img"


def decode_steps() -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, label in (
        ("bench_ar_graph_h200_2026-12-02.json", "CUDA graph"),
        ("bench_ar_compile_h200_2026-12-02.json", "CUDA graph + torch.compile"),
    ):
        model = json.loads((RESULTS / name).read_text())["models"][0]
        ms = [row["m"] for row in model["steps"]]
        ax.plot(ms, [row["step_ms"] for row in model["steps"]], "o-", label=label)
        floor = model["floor_ms"]
    ax.axhline(floor, color="k", ls="--", label=f"weight-read floor {floor:.2f} ms")
    ax.axhline(1.15 * floor, color="gray", ls=":", label="goal: 1.15x floor")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rows per step (M)")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(0, None)
    ax.set_title("Qwen3-8B shape, bf16, H200")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "decode_steps_h200.png", dpi=120)


def acceptance_histogram() -> None:
    systems = json.loads((RESULTS / "tree_real_cpu_2026-11-29.json").read_text())["totals"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    names = list(systems)
    tpp = [systems[n]["tokens_per_target_pass"] for n in names]
    left.bar(names, tpp, color="tab:blue")
    left.set_ylabel("tokens per target pass")
    left.set_title("tokens per pass (all outputs == AR)", fontsize=9)
    for i, v in enumerate(tpp):
        left.text(i, v + 0.02, f"{v:.2f}", ha="center", fontsize=8)
    for name in ("chain", "tree-64"):
        hist = systems[name]["hist"]
        total = sum(hist)
        right.plot(range(len(hist)), [h / total for h in hist], "o-", label=name)
    right.set_yscale("log")
    right.set_xlabel("draft tokens accepted in a round")
    right.set_ylabel("fraction of rounds")
    right.set_title("accepted-length histogram", fontsize=9)
    right.legend(fontsize=8)
    fig.suptitle("SmolLM2-135M-Instruct, HumanEval 0-5, n-gram drafter, greedy fp32 (CPU)", fontsize=10)
    fig.tight_layout()
    fig.savefig(IMG / "tree_vs_chain_smollm2.png", dpi=120)


def w12() -> None:
    rows = json.loads((RESULTS / "w12_h200_2026-11-29.json").read_text())["gpu"]["rows"]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for key, label in (("w12_exact_s", "W12 exact"), ("q_view_s", "Q view"), ("cublas_fp8_s", "cuBLAS fp8 (reference)")):
        pts = [(r["M"], r["cublas_bf16_s"] / r[key]) for r in rows if r.get(key) and r["M"] <= 64]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=label, s=12)
    ax.axhline(1.30, color="tab:blue", ls=":", label="goal W12 1.30x")
    ax.axhline(1.85, color="tab:orange", ls=":", label="goal Q 1.85x")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("speed-up over cuBLAS bf16")
    ax.set_title("W12 linears, Qwen3-8B/32B shapes, H200")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "w12_speedup_h200.png", dpi=120)


def gdn_tree() -> None:
    sizes = json.loads((RESULTS / "gdn_tree_h200_2026-11-29_v2.json").read_text())["sizes"]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    families = (
        ("dense", "dense tree-WY (fp32-level, refined)"),
        ("path", "path"),
        ("wy", "blocked WY (tf32)"),
        ("snapshot", "per-node snapshots"),
    )
    for kind, label in families:
        pts = []
        for n, size in sorted(sizes.items(), key=lambda kv: int(kv[0])):
            ok = {
                k: v
                for k, v in size["variants"].items()
                if v.get("correct")
                and v.get("kind") == kind
                and (kind != "dense" or k.endswith("refine"))
                and (kind != "wy" or k.endswith("tf32"))
            }
            if ok and not (kind == "dense" and int(n) > 64):  # the dense kernel serves up to 64 rows
                pts.append((int(n), min(v["graph_us"] for v in ok.values())))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    ax.axhline(30, color="k", ls=":", label="goal: 64 nodes <= 30 us")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tree nodes")
    ax.set_ylabel("us per GDN layer (best config)")
    ax.set_title("GDN along tree paths, Qwen3.5-27B heads, H200")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "gdn_tree_h200.png", dpi=120)


def drafter_steps() -> None:
    summary = json.loads((RESULTS / "bench_drafters_h200_2026-11-29.json").read_text())["summary"]
    steps, ar = summary["draft_step_ms_5_new_rows"], summary["ar_step_ms"]["compiled_graph_run1"]
    names = list(steps)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    width = 0.27
    for i, (key, label) in enumerate((("eager", "eager"), ("graph", "CUDA graph"), ("floor", "byte floor"))):
        ax.bar([x + (i - 1) * width for x in range(len(names))], [steps[n][key] for n in names], width=width, label=label)
    ax.axhline(ar, color="k", ls="--", label=f"target AR step {ar:.2f} ms")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("draft step, 5 new context rows (ms)")
    ax.set_title("Block drafters at Qwen3-8B shape, bf16, H200")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "drafter_steps_h200.png", dpi=120)


def two_level_stages() -> None:
    """Per-round stage times of two-level rounds (synchronised run), one bar per acceptance profile."""
    run = json.loads((RESULTS / "bench_two_level_fp32_h200_2026-12-02.json").read_text())
    rows = [r for r in run["rows"] if r["system"] == "two-level always"]
    stages = (("draft 1", None), ("Q pass", "q_pass"), ("draft 2", "draft2"), ("exact pass", "exact"), ("commit", "commit"))
    fig, ax = plt.subplots(figsize=(7.2, 3.8))
    labels = [r["profile"] for r in rows]
    left = [0.0] * len(rows)
    for name, key in stages:
        ms = [
            1e3 * (r["draft1_seconds_synced_run"] if key is None else r["stage_seconds_synced"][key]) / r["stats"]["rounds"]
            for r in rows
        ]
        ax.barh(labels, ms, left=left, label=name)
        left = [a + b for a, b in zip(left, ms)]
    ax.set_xlabel("ms per round (mean)")
    ax.set_title("Two-level round by stage\nQwen3-8B shape, float32, H200, simulated acceptance", fontsize=9)
    ax.legend(fontsize=8, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    fig.tight_layout()
    fig.savefig(IMG / "two_level_stages_h200.png", dpi=120)


if __name__ == "__main__":
    IMG.mkdir(parents=True, exist_ok=True)
    decode_steps()
    acceptance_histogram()
    w12()
    gdn_tree()
    drafter_steps()
    two_level_stages()
    print("wrote", sorted(p.name for p in IMG.glob("*.png")))
