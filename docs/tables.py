"""Result tables of docs/*.md, rendered from the committed benchmark JSON in benchmarks/results/.

A doc marks a generated table with a pair of HTML comments, which Markdown does not show::

    <!-- table: tree-real -->
    | system | tokens / target pass | ... |
    ...
    <!-- /table -->

``python docs/tables.py`` rewrites everything between each pair from the JSON; ``--check`` changes no
file and exits 1 naming every doc whose tables differ from the JSON (``tests/docs/test_docs_tables.py``
runs the same check). To change a number, change the JSON (re-run the benchmark), never the doc.

Example:
    >>> text = "Before.\\n<!-- table: tree-real -->\\nstale\\n<!-- /table -->\\nAfter.\\n"
    >>> render(text).splitlines()[2]
    '| system | tokens / target pass | mean accepted / round |'
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs"

MARKER = re.compile(r"<!-- table: (?P<name>[a-z0-9-]+) -->\n(?P<body>.*?)<!-- /table -->", re.DOTALL)
OPENING = re.compile(r"<!-- table: (?P<name>[^>]*?) -->")


class Results:
    """Reads ``benchmarks/results/*.json`` (or another folder with the same files, for tests)."""

    def __init__(self, folder: Path = RESULTS):
        self.folder = Path(folder)

    def __call__(self, name: str) -> dict:
        path = self.folder / name
        if not path.is_file():
            raise ValueError(f"results file: expected {path} to exist, found nothing")
        return json.loads(path.read_text())


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, one line per row, every cell as given.

    Example:
        >>> print(markdown_table(["a", "b"], [["1", "2"]]))
        | a | b |
        |---|---|
        | 1 | 2 |
    """
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"rows: expected {len(header)} cells per row, got {len(row)} in {row}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def sci(value: float, digits: int = 0) -> str:
    """``3.1e-07`` -> ``3e-7``: scientific notation without the exponent's padding."""
    mantissa, exponent = f"{value:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


DECODE_STEP_GOAL = 1.15


def against_goal(ratio: float, goal: float) -> str:
    """``1.62x (not met)``: a ratio that should be at most ``goal``."""
    return f"{ratio:.2f}x ({'met' if ratio <= goal else 'not met'})"


def decode_steps(results: Results) -> str:
    rows = []
    for name, body in (
        ("bench_ar_graph_h200_2026-12-02.json", "CUDA graph"),
        ("bench_ar_compile_h200_2026-12-02.json", "CUDA graph + torch.compile"),
    ):
        model = results(name)["models"][0]
        steps = {step["m"]: step for step in model["steps"]}
        rows.append(
            [
                body,
                f"{steps[1]['step_ms']:.2f} ms",
                against_goal(steps[1]["x_floor"], DECODE_STEP_GOAL),
                against_goal(steps[16]["x_m1"], DECODE_STEP_GOAL),
                f"{model['generate']['tokens_per_s']:.0f} tok/s",
            ]
        )
    header = [
        "body",
        "M = 1",
        f"x floor (goal <= {DECODE_STEP_GOAL}x)",
        f"M = 16 / M = 1 (goal <= {DECODE_STEP_GOAL}x)",
        "`sd.generate` AR",
    ]
    return markdown_table(header, rows)


def forcing_gpu(results: Results) -> str:
    # the run of 2026-11-29 (no provenance block) gave the same verdicts
    return forcing_table(results("forcing_gpu_h200_2026-12-01.json"))


def forcing_w12_gpu_h100(results: Results) -> str:
    """The token-forcing checker on the lean 8B target in W12 with up to 15 n-gram drafts a round
    (``run_h200_forcing_w12.sh``, one H100 call): the verdicts, then the verify passes by rows."""
    run = results("forcing_gpu_h100_2026-12-07_724b274_qwen3-8b_w12.json")
    if run["target"]["weight_format"] != "w12":
        raise ValueError("forcing_gpu_h100_2026-12-07_724b274_qwen3-8b_w12.json: expected a W12 target")
    by_rows = {int(rows): n for rows, n in run["speculative_verify_passes_by_rows"].items()}
    spans = (("1 (no draft)", 1, 1), ("2-8", 2, 8), ("9-15", 9, 15), ("16", 16, 16))
    counts = [sum(n for rows, n in by_rows.items() if lo <= rows <= hi) for _, lo, hi in spans]
    passes = markdown_table([f"verify passes of {label} rows" for label, _, _ in spans], [[str(n) for n in counts]])
    return forcing_table(run) + "\n\n" + passes


def forcing_table(run: dict) -> str:
    """A forcing_gpu run's two candidates: mismatch rate (and the late stratum's where it failed), null rate,
    large-margin events, verdict."""
    after = run["settings"]["after"]
    same = run["speculative_vs_ar"]
    identical = f"{same['identical_sequences']}/{same['of']} sequences identical to AR in bf16"
    fault = f"`LogitBiasFault(+{run['settings']['bias']:g}, every {run['settings']['every']}th id, after {after})`"
    rows = []
    for key, label in (
        ("lossless_report", f"n-gram speculative (lossless; {identical})"),
        ("faulty_report", f"same + {fault}"),
    ):
        report = run[key]
        late = report["by_bucket"][f"pos >= {after}"]
        rate = sci(report["mismatch_rate"], 2)
        if late["rate_failed"]:
            rate += f" ({sci(late['rate'], 2)} after {after})"
        rows.append(
            [
                label,
                rate,
                sci(report["null_rate"], 2),
                str(report["num_large_margin_events"]),
                "PASS" if report["passed"] else "FAIL",
            ]
        )
    return markdown_table(["candidate", "mismatch rate", "null rate", "large-margin events", "verdict"], rows)


def gdn_tree(results: Results) -> str:
    sizes = results("gdn_tree_h200_2026-12-02.json")["sizes"]
    rows = []
    for nodes, size in sorted(sizes.items(), key=lambda item: int(item[0])):
        variants = size["variants"]
        # the default dense kernel is the fp32-level (refined) one; it serves trees of up to 64 rows
        refined = [v for name, v in variants.items() if v["kind"] == "dense" and name.endswith("_refine") and v["correct"]]
        if int(nodes) <= 64 and refined:
            best = min(refined, key=lambda v: v["graph_us"])
            dense = f"{best['graph_us']:.1f} us ({sci(best['max_rel_err'])})"
            if int(nodes) == 64:
                dense = f"**{best['graph_us']:.1f} us** ({sci(best['max_rel_err'])})"
        else:
            dense = "(not used above 64)"
        rows.append(
            [
                nodes,
                dense,
                f"{variants[size['best']['path']]['graph_us']:.1f} us",
                f"{variants[size['best']['wy']]['graph_us']:.1f} us",
                f"{variants[size['best']['snapshot']]['graph_us']:.1f} us",
            ]
        )
    header = ["nodes", "dense tree-WY (default for <= 64 rows)", "path", "blocked WY (tf32)", "per-node snapshots"]
    return markdown_table(header, rows)


SMOLLM2_EVAL = "eval_smollm2_drafter_graphs_h200_2026-11-29.json"


def _drafter_rows(results: Results, systems: list[tuple[str, str, bool]]) -> list[list[str]]:
    """One row per ``(results key, label, bold tokens per pass)``; the fastest system's speed-up in bold."""
    measured = results(SMOLLM2_EVAL)["eval"]["results"]
    fastest = max(measured[key]["speedup_vs_ar"] for key, _, _ in systems)
    rows = []
    for key, label, bold in systems:
        run = measured[key]
        tpp, speedup = f"{run['tokens_per_target_pass']:.2f}", f"{run['speedup_vs_ar']:.2f}x"
        if bold:
            tpp = f"**{tpp}**"
        if run["speedup_vs_ar"] == fastest:
            speedup = f"**{speedup}**"
        rows.append([label, tpp, speedup, run["identical_to_ar"]])
    return rows


def smollm2_drafter_summary(results: Results) -> str:
    rows = _drafter_rows(
        results,
        [
            ("n-gram chain (k=6)", "n-gram chain", False),
            ("trained chain (k=7), graph", "trained chain, CUDA-graph draft step", True),
            ("trained tree (32 nodes), graph", "trained best-first tree (up to 64 nodes), CUDA-graph draft step", True),
        ],
    )
    return markdown_table(["drafter", "tokens per target pass", "speed-up over AR", "== AR"], rows)


def smollm2_drafter_eval(results: Results) -> str:
    rows = _drafter_rows(
        results,
        [
            ("n-gram chain (k=6)", "n-gram, chain (k = 6)", False),
            ("n-gram tree (4 paths)", "n-gram, tree (4 paths)", False),
            ("trained chain (k=7)", "trained, chain (k = 7), eager draft step", False),
            ("trained tree (32 nodes)", "trained, best-first tree (up to 64 nodes), eager", False),
            ("trained chain (k=7), graph", "trained, chain (k = 7), CUDA-graph draft step", True),
            ("trained tree (32 nodes), graph", "trained, best-first tree (up to 64 nodes), CUDA-graph draft step", True),
        ],
    )
    return markdown_table(["drafter", "tokens per target pass", "speed-up over AR (wall clock)", "output == AR"], rows)


def smollm2_training(results: Results) -> str:
    run = results("train_smollm2_h200_2026-11-29.json")
    data, training = run["data"], run["training"]
    rows = [
        [
            "training data",
            f"{data['sequences']:,} sequences, {data['response_tokens']:,} response tokens in {data['seconds']:.0f} s",
        ],
        ["trainable parameters", f"{training['parameters'] / 1e6:.1f}M"],
        ["steps (wall-clock budget)", f"{training['steps']:,} in {training['seconds']:.0f} s"],
        ["loss", f"{training['first_loss']:.1f} -> {training['final_loss']:.2f}"],
        ["per-row accuracy, training blocks", " / ".join(f"{a:.2f}" for a in training["position_accuracy"])],
    ]
    return markdown_table(["measured", "H200, float32 (`train_smollm2_h200_2026-11-29.json`)"], rows)


def tree_real(results: Results) -> str:
    totals = results("tree_real_cpu_2026-11-29.json")["totals"]
    labels = {"chain": "chain (`NGramDrafter` + `ChainVerifier`)"}
    rows = []
    for system, total in totals.items():
        label = labels.get(system) or f"tree, budget {system.removeprefix('tree-')}"
        rows.append([label, f"{total['tokens_per_target_pass']:.3f}", f"{total['mean_accepted']:.3f}"])
    return markdown_table(["system", "tokens / target pass", "mean accepted / round"], rows)


DRAFTER_LABELS = {"dflash-b16": "DFlash b16", "dflash2-b8": "DFlash2 b8", "dspark-b7": "DSpark b7"}


def drafter_steps(results: Results) -> str:
    run = results("bench_drafters_h200_2026-11-29.json")["run1"]
    rows = []
    for name, drafter in run["drafters"].items():
        label = DRAFTER_LABELS[name] + (" (head still eager in this run)" if name == "dspark-b7" else "")
        rows.append(
            [
                label,
                f"{drafter['step_ms/eager']:.2f} ms",
                f"{drafter['step_ms/graph']:.2f} ms",
                f"{drafter['floor_ms']:.2f} ms",
                f"{drafter['step_ms/graph'] / run['ar_step_ms']:.2f}",
            ]
        )
    return markdown_table(["drafter", "eager", "CUDA graph", "bytes / bandwidth floor", "graph / AR step"], rows)


def drafter_runs(results: Results) -> str:
    run = results("bench_drafters_h200_2026-11-29.json")["run2"]
    rows = []
    for key, label in (
        ("spec/oracle", "oracle alone"),
        ("spec/oracle+dspark-b7", "oracle + DSpark, graph"),
        ("spec/oracle+dspark-b7/eager", "oracle + DSpark, eager"),
        ("spec/oracle+dflash-b16", "oracle + DFlash b16, graph"),
        ("spec/oracle+dflash2-b8", "oracle + DFlash2 b8, graph"),
    ):
        spec = run[key]
        if not spec["valid"] or spec["unmatched_rounds"]:
            raise ValueError(f"{key}: expected a valid run with every round at the oracle's plan, got {spec}")
        ratio = f"{spec['ratio']:.2f}"
        if key == "spec/oracle+dspark-b7":
            ratio = f"**{ratio}**"
        rows.append([label, f"{spec['speedup_over_ar']:.2f}x", f"{spec['round_in_ar_steps']:.2f}", ratio])
    return markdown_table(["run", "speed-up over AR", "round in AR steps", "speed-up / tokens per pass"], rows)


def forcing_power(results: Results) -> str:
    points = results("forcing_power_cpu_2026-11-29.json")["tokens_needed"]
    rises = sorted({p["rise"] for p in points})
    null_rates = sorted({p["null_rate"] for p in points})
    tokens = {(p["null_rate"], p["rise"]): p["tokens"] for p in points}
    rows = []
    for null_rate in null_rates:
        label = "0 (float32)" if null_rate == 0 else sci(null_rate)
        rows.append([label] + [f"{tokens[null_rate, rise]:,}" for rise in rises])
    return markdown_table(["null rate \\ rise"] + [f"+{sci(rise)}" for rise in rises], rows)


def hybrid_graphs(results: Results) -> str:
    run = results("bench_hybrid_graphs_h200_2026-12-01.json")
    t = run["timings"]
    exact = all(all(v for k, v in check.items() if k.endswith(("logits", "commit"))) for check in run["checks"].values())
    rows = [
        [
            "AR (1 row + commit)",
            f"{t['ar_eager_ms']:.2f} ms",
            f"{t['ar_graphed_ms']:.2f} ms",
            f"{t['weight_read_floor_ms']:.2f} ms",
            f"{t['ar_graphed_ms'] / t['weight_read_floor_ms']:.2f}x",
        ],
        [
            "tree-64 verify + commit",
            f"{t['tree64_eager_ms']:.2f} ms",
            f"{t['tree64_graphed_ms']:.2f} ms",
            "",
            f"{t['tree64_over_ar']:.2f}x the graphed AR step",
        ],
    ]
    header = ["step", "eager", "CUDA graph", "weight-read floor", "graphed vs floor / AR"]
    return markdown_table(header, rows) + f"\n\ngraphed == static path == eager, exactly: {'yes' if exact else 'NO'}"


def two_level(results: Results) -> str:
    real = results("bench_two_level_real_cpu_2026-12-02.json")
    gpu = results("bench_two_level_fp32_h200_2026-12-02.json")
    rows = []
    for name, t in real["totals"].items():
        if name == "AR":
            continue
        agreement = f"{t['agreement']:.2f}" if "agreement" in t else ""
        # wall times of that run shared two cores with other jobs: tokens per pass only
        rows.append(
            ["SmolLM2-135M, CPU, float32, held-out HumanEval", name, f"{t['tokens_per_exact_pass']:.2f}", agreement, "not timed"]
        )
    for r in gpu["rows"]:
        stats = r.get("stats")
        agreement = f"{stats['agreement']:.2f}" if stats else ""
        rows.append(
            [
                f"Qwen3-8B shape, H200, float32, `{r['profile']}` (simulated)",
                r["system"],
                f"{r['tokens_per_exact_pass']:.2f}",
                agreement,
                f"{r['speedup_vs_ar']:.2f}x",
            ]
        )
    header = ["target, machine", "system", "tokens / exact pass", "Q/exact agreement on the Q chain", "speed-up vs AR"]
    return markdown_table(header, rows)


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "NO"


TWO_LEVEL_SHAPE_RUNS = (
    # (shape, newest run, older run): a row of the older run stays only where the newest has none of its kind
    ("Qwen3-8B", "bench_two_level_w12_h200_2026-12-02_run2.json", "bench_two_level_w12_h200_2026-12-02.json"),
    ("Qwen3.5-4B hybrid", "bench_two_level_hybrid_h200_2026-12-02_run2.json", "bench_two_level_hybrid_h200_2026-12-02.json"),
)
OLDER_RUN_MARK = " (first run)"


def newest_rows(newest: list[dict], older: list[dict], kind: Callable[[dict], tuple]) -> list[tuple[dict, bool]]:
    """The rows of ``newest``, then those of ``older`` whose ``kind`` no row of ``newest`` has, each with
    whether it comes from ``older``.

    Example:
        >>> rows = newest_rows([{"system": "tree", "x": 2}], [{"system": "tree", "x": 1}, {"system": "chain", "x": 1}],
        ...                    lambda r: (r["system"],))
        >>> [(r["system"], r["x"], old) for r, old in rows]
        [('tree', 2, False), ('chain', 1, True)]
    """
    seen = {kind(r) for r in newest}
    return [(r, False) for r in newest] + [(r, True) for r in older if kind(r) not in seen]


def _two_level_pass_rows(results: Results) -> list[list[str]]:
    rows = []
    for shape, name, older_name in TWO_LEVEL_SHAPE_RUNS:
        passes = newest_rows(results(name)["pass_times"], results(older_name)["pass_times"], lambda p: (p["variant"], p["rows"]))
        rows += [
            [
                shape,
                f"`{p['variant']}`",
                str(p["rows"]) + (OLDER_RUN_MARK if old else ""),
                f"{p['exact_ms']:.2f}",
                f"{p['q_ms']:.2f}",
                f"{p['q_over_exact']:.2f}",
                f"{p['byte_ratio']:.2f}",
            ]
            for p, old in passes
        ]
    return rows


def _two_level_system_rows(results: Results) -> list[list[str]]:
    rows = []
    for shape, name, older_name in TWO_LEVEL_SHAPE_RUNS:
        systems = newest_rows(
            results(name)["rows"], results(older_name)["rows"], lambda r: (r["variant"], r["profile"], r["system"])
        )
        for r, old in systems:
            agreement = r.get("stats", {}).get("agreement")
            rows.append(
                [
                    shape,
                    f"`{r['variant']}`",
                    f"`{r['profile']}`",
                    r["system"] + (OLDER_RUN_MARK if old else ""),
                    f"{r['tokens_per_exact_pass']:.2f}",
                    "" if agreement is None else f"{agreement:.2f}",
                    f"{r['speedup_vs_ar']:.2f}x",
                    _yes_no(r["equal_to_ar"]),
                    str(r["rounds"]),
                    str(r["unmatched_rounds"]),
                ]
            )
    return rows


TWO_LEVEL_H100_RUNS = (
    "two_level_wide_h100_2026-12-06_auto_shared.json",
    "two_level_wide_h100_2026-12-06_auto_shared_q_triton.json",
)


def two_level_h100(results: Results) -> str:
    """The lean 8B target's exact and Q-view passes under graphs on the default kernels (H100), with the Q view's 32-
    and 65-row passes on Triton from a second call, then the decoding systems of the first call."""
    run, triton = (results(name) for name in TWO_LEVEL_H100_RUNS)
    if triton["provenance"]["env"].get("SPECDEC_WIDE_GEMM") != "exact" or run["provenance"]["env"].get("SPECDEC_WIDE_GEMM"):
        raise ValueError(f"{TWO_LEVEL_H100_RUNS}: expected the default routing, then SPECDEC_WIDE_GEMM=exact")
    on_triton = {(p["variant"], p["rows"]): p["q_ms"] for p in triton["pass_times"]}
    passes = [
        [
            f"`{p['variant']}`",
            str(p["rows"]),
            f"{p['exact_ms']:.2f}",
            f"{p['q_ms']:.2f}",
            f"{on_triton[(p['variant'], p['rows'])]:.2f}" if (p["variant"], p["rows"]) in on_triton else "",
            f"{p['q_over_exact']:.2f}",
            f"{p['byte_ratio']:.2f}",
        ]
        for p in run["pass_times"]
    ]
    systems = [
        [
            f"`{r['variant']}`",
            f"`{r['profile']}`",
            r["system"],
            f"{r['tokens_per_exact_pass']:.2f}",
            f"{r['round_ms']:.2f}",
            f"{r['speedup_vs_ar']:.2f}x",
        ]
        for r in run["rows"]
    ]
    return "\n\n".join(
        [
            markdown_table(
                ["variant", "rows", "exact ms", "Q ms (default)", "Q ms (Triton)", "Q / exact", "Q / exact weight bytes"],
                passes,
            ),
            markdown_table(["variant", "profile", "system", "tokens / exact pass", "ms a round", "x AR"], systems),
        ]
    )


def two_level_h200_extra(results: Results) -> str:
    real = results("bench_two_level_real_h200_2026-12-02.json")["totals"]
    ar_seconds = real["AR"]["seconds"]
    real_rows = [
        [
            name,
            f"{t['tokens_per_exact_pass']:.2f}",
            f"{t['seconds']:.2f}",
            f"{ar_seconds / t['seconds']:.2f}x",
            _yes_no(t["all_equal"]),
        ]
        for name, t in real.items()
    ]
    forcing = results("forcing_two_level_gpu_h200_2026-12-02.json")
    same = forcing["two_level_vs_ar"]
    forcing_rows = [
        [
            f"two-level, every round ({same['identical_sequences']}/{same['of']} sequences identical to AR in bf16)",
            sci(forcing["lossless_report"]["mismatch_rate"], 2),
            forcing["lossless_report"]["verdict"],
        ],
        [
            "same + exact pass reusing the Q logits (`QChainHandOff`)",
            sci(forcing["faulty_report"]["mismatch_rate"], 2),
            forcing["faulty_report"]["verdict"],
        ],
    ]
    return "\n\n".join(
        [
            markdown_table(["system", "tokens / exact pass", "wall s", "x AR", "== AR"], real_rows),
            markdown_table(
                ["shape", "variant", "rows", "exact ms", "Q ms", "Q / exact", "Q / exact weight bytes"],
                _two_level_pass_rows(results),
            ),
            markdown_table(
                [
                    "shape",
                    "variant",
                    "profile",
                    "system",
                    "tokens / exact pass",
                    "Q/exact agreement",
                    "x AR",
                    "== AR",
                    "rounds",
                    "unmatched rounds",
                ],
                _two_level_system_rows(results),
            ),
            markdown_table(["candidate", "mismatch rate", "verdict"], forcing_rows),
        ]
    )


ROOFLINE_KERNELS = {
    "cuda_w12": "CUDA W12 exact",
    "cuda_w12_v3": "CUDA W12 exact, streaming (v3)",
    "cuda_w12_v4": "CUDA W12 exact, split K over CTAs (v4)",
    "cuda_w12_v5": "CUDA W12 exact, bulk-copy pipeline (v5)",
    "cuda_w12_v6": "CUDA W12 exact, bulk copies from four producer warps (v6)",
    "cuda_w12_v7": "CUDA W12 exact, tensor-map pipeline (v7)",
    "cuda_w12_v8": "CUDA W12 exact, v7 in persistent CTAs where split K needs several waves (v8)",
    "cuda_w12_v9": "CUDA W12 exact, v7's stages in CTAs of one 16-row tile over the whole of K (v9)",
    "cuda_w12_v10": "CUDA W12 exact, v9 where the row tiles pay (`rows_pay` at the run's commit), else v8 (v10, the default)",
    "cuda_q": "CUDA Q view",
    "cuda_q_v2": "CUDA Q view, tensor-map pipeline (v2)",
    "cuda_q_v3": "CUDA Q view, v2 in persistent CTAs where split K needs several waves (v3)",
    "cuda_q_v4": "CUDA Q view in row-tile CTAs (v4)",
    "cuda_q_v5": "CUDA Q view, v4 where the row tiles pay (`rows_pay` at the run's commit), else v2 (v5, the default)",
    "cuda_bf16": "CUDA bf16, register kernel (v1)",
    "cuda_bf16_v2": "CUDA bf16, tensor-map pipeline (v2)",
    "cuda_bf16_v3": "CUDA bf16, v2 in persistent CTAs where split K needs several waves (v3)",
    "cuda_bf16_v4": "CUDA bf16 in row-tile CTAs (v4)",
    "cuda_bf16_v5": "CUDA bf16, v4 where the row tiles pay (`rows_pay` at the run's commit), else v3 (v5, the default)",
    "triton_w12": "Triton W12 exact",
    "triton_q": "Triton Q view",
    "cublas_fp8": "cuBLAS fp8",
    "cublas_bf16": "cuBLAS bf16",
}


# The kernels the roofline times at 16 tokens: the references and the tensor-map kernels (two MMA n-tiles).
ROOFLINE_TWO_TILE_KERNELS = (
    "cuda_w12_v7",
    "cuda_w12_v8",
    "cuda_q_v2",
    "cuda_q_v3",
    "cuda_bf16_v2",
    "cuda_bf16_v3",
    "triton_w12",
    "triton_q",
    "cublas_fp8",
    "cublas_bf16",
)


ROOFLINE_RUN = "roofline_h200_2026-12-04_stream_k3.json"

AR_STEP_RUN = "ar_step_h200_2026-12-04_stream_k3_default.json"  # the same device call as ROOFLINE_RUN


def cuda_roofline(results: Results) -> str:
    run = results(ROOFLINE_RUN)
    narrow = [r for r in run["rows"] if r["M"] <= 8]
    wide = [r for r in run["rows"] if r["M"] > 8]

    def kernel_rows(group: list[dict], kernels: dict) -> list[list[str]]:
        rows = []
        for key, label in kernels.items():
            failed = [r for r in group if r.get(f"{key}_check") == "FAILED" or f"{key}_error" in r]
            if failed:  # a wrong or failing kernel is not a missing row of the table
                raise ValueError(f"{ROOFLINE_RUN}: {key} failed its check or raised at M = {failed[0]['M']}; no table of it")
            if key in run["kernels_left_out"] or f"{key}_vs_cublas_bf16" not in group[0]:  # not timed in this run
                continue
            ratios = [r[f"{key}_vs_cublas_bf16"] for r in group]
            fractions = [r[f"{key}_frac_of_copy"] for r in group]
            rows.append([label, f"{min(ratios):.2f}-{max(ratios):.2f}x", f"{min(fractions):.2f}-{max(fractions):.2f}"])
        return rows

    def header(group: list[dict]) -> list[str]:
        ms = sorted({r["M"] for r in group})
        return [f"kernel ({len(group)} rows: M = {', '.join(map(str, ms))})", "vs cuBLAS bf16", "fraction of copy bandwidth"]

    two_tile = {key: label for key, label in ROOFLINE_KERNELS.items() if key in ROOFLINE_TWO_TILE_KERNELS}
    step = results(AR_STEP_RUN)
    step_rows = [
        ["bf16", f"{step['bf16_step_s'] * 1e3:.2f} ms", f"{step['bf16_floor_s'] * 1e3:.2f} ms", f"{step['bf16_x_floor']:.2f}x"],
        [
            f"W12 (`{step['w12_linear_path']}` linears)",
            f"{step['w12_step_s'] * 1e3:.2f} ms",
            f"{step['w12_floor_s'] * 1e3:.2f} ms",
            f"{step['w12_x_floor']:.2f}x",
        ],
        ["W12 (`triton` linears)", f"{step['w12_triton_step_s'] * 1e3:.2f} ms", "", ""],
    ]
    left_out = ", ".join(f"`{k}`" for k in run["kernels_left_out"]) or "none"
    summary = (
        f"copy bandwidth {run['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s; kernels left out of this run: {left_out}; "
        "decode checked bit for bit: "
        f"{_yes_no(run['decode_checks_passed'])}. AR step W12 / bf16: {step['w12_vs_bf16_step']:.2f}x; "
        f"greedy tokens W12 == bf16 ({step['tokens']} tokens): {_yes_no(step['greedy_tokens_equal'])}. Verify step of "
        f"{step['verify_rows']} rows: bf16 {step['bf16_verify_s'] * 1e3:.2f} ms = {step['bf16_verify_x_step']:.2f}x its one-token "
        f"step; W12 {step['w12_verify_s'] * 1e3:.2f} ms = {step['w12_verify_x_step']:.2f}x (its linears at "
        f"{step['verify_rows']} rows run `{step['w12_verify_linear_path']}`)"
    )
    return "\n\n".join(
        [
            markdown_table(header(narrow), kernel_rows(narrow, ROOFLINE_KERNELS)),
            markdown_table(header(wide), kernel_rows(wide, two_tile)),
            markdown_table(["Qwen3-8B AR step", "step", "weight-read floor", "x floor"], step_rows),
            summary,
        ]
    )


NCU_KERNELS = (
    "cublas_bf16",
    "cuda_bf16",
    "cuda_w12",
    "cuda_w12_v3",
    "cuda_w12_v4",
    "cuda_w12_v5",
    "cuda_w12_v6",
    "cuda_w12_v7",
    "cuda_q",
)


def _span(values: list[float], digits: int = 0) -> str:
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else f"{low:.{digits}f}-{high:.{digits}f}"


def cuda_ncu(results: Results) -> str:
    run = results("ncu_profile_h200_2026-12-02_run4.json")
    records = run["records"]
    unattributed = [r["range"] for r in records if not r["attributed"]]
    if unattributed:
        raise ValueError(f"ncu records: expected every range attributed to its kernels, got none for {unattributed}")
    rows = []
    for r in records:
        stall, share = r["top_stalls"][0]
        limiter = r["limiter"] + (f" (also {', '.join(r['also'])})" if r["also"] else "")
        rows.append(
            [
                f"`{r['kernel']}` {r['shape']} {r['N']}x{r['K']}, M = {r['M']}",
                f"{r['duration_s'] * 1e6:.1f}",
                f"{r['dram_bytes_per_s'] / 1e12:.2f}",
                f"{r['frac_of_copy']:.2f}",
                f"{r['dram_pct']:.0f}",
                f"{r['occupancy_pct']:.0f}",
                f"{r['issue_pct']:.0f}",
                f"{r['waves']:.2f}",
                f"{r['registers']:.0f}",
                f"{stall} ({share:.2f})",
                limiter,
            ]
        )
    header = [
        "range",
        "us",
        "TB/s",
        "of copy",
        "DRAM %",
        "occupancy %",
        "issue %",
        "waves",
        "regs",
        "top stall (share)",
        "limiter",
    ]
    summary = []
    for kernel in NCU_KERNELS:
        mine = [r for r in records if r["kernel"] == kernel]
        if not mine:
            raise ValueError(f"ncu records: expected ranges of kernel {kernel!r}, found none")
        barrier = sorted({f"{r['shape']} M = {r['M']}" for r in mine if r["top_stalls"][0][0] == "barrier"})
        summary.append(
            [
                f"`{kernel}`",
                _span([r["dram_pct"] for r in mine]),
                _span([r["occupancy_pct"] for r in mine]),
                _span([r["issue_pct"] for r in mine]),
                _span([r["waves"] for r in mine], 2),
                _span([r["dram_pct"] for r in mine if r["shape"] == "8b_lm_head"]),
                ", ".join(barrier) or "none",
            ]
        )
    summary_header = ["kernel", "DRAM %", "occupancy %", "issue %", "waves", "DRAM % on lm_head", "`barrier` the top stall on"]
    scale = f"copy bandwidth {run['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s ({run['copy_bandwidth_source']})"
    return "\n\n".join([markdown_table(header, rows), markdown_table(summary_header, summary), scale])


def _ncu_kernel_rows(records: list[dict], kernels: tuple[str, ...]) -> list[list[str]]:
    order = {k: i for i, k in enumerate(kernels)}
    rows = []
    for r in sorted(records, key=lambda r: (r["shape"], r["M"], order[r["kernel"]])):
        stall, share = r["top_stalls"][0]
        rows.append(
            [
                f"{r['shape']} {r['N']}x{r['K']}, M = {r['M']}",
                f"`{r['kernel']}`",
                f"{r['duration_s'] * 1e6:.1f}",
                f"{r['frac_of_copy']:.2f}",
                f"{r['dram_pct']:.0f}",
                f"{r['occupancy_pct']:.0f}",
                f"{r['issue_pct']:.0f}",
                f"{r['waves']:.2f}",
                f"{stall} ({share:.2f})",
                r["limiter"],
            ]
        )
    return rows


NCU_HEADER = ["shape", "kernel", "us", "of copy", "DRAM %", "occupancy %", "issue %", "waves", "top stall (share)", "limiter"]


def cuda_ncu_bf16_h100(results: Results) -> str:
    """cuBLAS and the bf16 tensor-map kernels (split-K v2, persistent v3) on the 32B qkv at 1, 8 and 16 tokens under
    Nsight Compute, one launch each (``run_h200_ncu.sh bf16_16`` on an H100, clocks not locked)."""
    run = results("ncu_profile_h100_2026-12-07_bf16_16.json")
    kernels = ("cublas_bf16", "cuda_bf16_v2", "cuda_bf16_v3")
    records = [r for r in run["records"] if r["kernel"] in kernels and r["attributed"]]
    if len(records) != 9:
        raise ValueError(f"ncu bf16_16: expected 9 attributed ranges (3 kernels x 3 token counts), got {len(records)}")
    note = f"copy bandwidth {run['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s ({run['copy_bandwidth_source']})"
    return markdown_table(NCU_HEADER, _ncu_kernel_rows(records, kernels)) + "\n\n" + note


def cuda_ncu_tensor_map(results: Results) -> str:
    """The tensor-map kernels (W12 v7, Q v2, bf16 v2) beside cuBLAS under Nsight Compute (run5)."""
    run = results("ncu_profile_h200_2026-12-02_run5.json")
    kernels = ("cublas_bf16", "cuda_bf16_v2", "cuda_w12_v7", "cuda_q_v2")
    records = [r for r in run["records"] if r["kernel"] in kernels and r["attributed"]]
    missing = set(kernels) - {r["kernel"] for r in records}
    if missing:
        raise ValueError(f"ncu run5: expected attributed ranges of {sorted(missing)}, found none")
    skipped = ", ".join(results("ncu_launch_h200_2026-12-02_run5.json")["skipped"]) or "none"
    note = (
        f"copy bandwidth {run['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s ({run['copy_bandwidth_source']}); "
        f"shapes not reached in the launch budget: {skipped}"
    )
    return markdown_table(NCU_HEADER, _ncu_kernel_rows(records, kernels)) + "\n\n" + note


def cuda_ncu_w12(results: Results) -> str:
    """The three tensor-map kernels on 8B down, o and lm_head under Nsight Compute, with instructions per weight."""
    run = results("ncu_profile_h200_2026-12-03_w12.json")
    kernels = ("cuda_bf16_v2", "cuda_w12_v7", "cuda_q_v2")
    records = [r for r in run["records"] if r["kernel"] in kernels and r["attributed"]]
    missing = set(kernels) - {r["kernel"] for r in records}
    if missing:
        raise ValueError(f"ncu w12 run: expected attributed ranges of {sorted(missing)}, found none")
    per_kweight = {(r["kernel"], r["shape"], r["M"]): 1e3 * r["warp_instructions"] / (r["N"] * r["K"]) for r in records}

    def span(kernel: str) -> str:
        values = [v for (k, _, _), v in per_kweight.items() if k == kernel]
        return f"{min(values):.0f}-{max(values):.0f}"

    note = (
        f"copy bandwidth {run['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s ({run['copy_bandwidth_source']}); warp "
        f"instructions per 1,000 weights: W12 v7 {span('cuda_w12_v7')}, Q v2 {span('cuda_q_v2')}, bf16 v2 "
        f"{span('cuda_bf16_v2')}"
    )
    return markdown_table(NCU_HEADER, _ncu_kernel_rows(records, kernels)) + "\n\n" + note


STREAM_LAYOUT_RUN = "stream_layout_h200_2026-12-03_escape_warp2.json"
STREAM_LAYOUTS = ("rows_w12", "rows_q", "rows_bf16", "tiled_w12", "tiled_bf16")
STREAM_GEMMS = ("cuda_w12_v7", "cuda_q_v2", "cuda_bf16_v2", "cublas_bf16")


def cuda_stream_layout(results: Results) -> str:
    """The tensor-map ring without math by stage layout beside the GEMMs, fractions of the copy bandwidth, M = 1, cold."""
    run = results(STREAM_LAYOUT_RUN)
    rows = []
    for shape in dict.fromkeys(r["shape"] for r in run["probe"]):
        plan = {r["layout"]: r for r in run["probe"] if r["shape"] == shape and r["why"] == "plan" and "s" in r}
        gemm = {g["kind"]: g for g in run["gemms"] if g["shape"] == shape and "cold_s" in g}
        splits = plan["rows_w12"]["k_splits"] if "rows_w12" in plan else "?"
        rows.append(
            [f"{shape} ({splits} splits)"]
            + [f"{plan[k]['frac_of_copy']:.2f}" if k in plan else "" for k in STREAM_LAYOUTS]
            + [f"{gemm[k]['frac_of_copy']:.2f}" if k in gemm else "" for k in STREAM_GEMMS]
        )
    header = ["shape (W12 splits)", *STREAM_LAYOUTS, "GEMM W12 v7", "GEMM Q v2", "GEMM bf16 v2", "cuBLAS bf16"]
    note = f"\n\ncopy bandwidth {run['copy_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s; probe checks passed {run['checks_passed']}\n"
    return markdown_table(header, rows) + note


def _ssd_rows(systems: dict, label: str) -> list[list[str]]:
    ar_seconds = systems["ar"]["seconds"]
    rows = []
    for name, s in systems.items():
        speedup = ar_seconds / s["seconds"]
        hit_rate = f"{s['hit_rate']:.2f}" if "hit_rate" in s else ""
        rows.append(
            [
                label,
                name,
                f"{s['tokens_per_pass']:.2f}",
                f"{s['round_ms']:.1f}",
                f"{speedup:.2f}x",
                f"{speedup / s['tokens_per_pass']:.2f}",
                hit_rate,
                _yes_no(s["equal_to_ar"]),
            ]
        )
    return rows


def ssd_h200(results: Results) -> str:
    sim = results("bench_ssd_sim_h200_2026-12-02.json")
    real = results("bench_ssd_real_h200_2026-12-02.json")
    eager = results("bench_ssd_sim_drafter_eager_h200_2026-12-02.json")
    if eager["drafter_graphs"] != "off":
        raise ValueError(f"bench_ssd_sim_drafter_eager: expected drafter_graphs 'off', got {eager['drafter_graphs']!r}")
    eager2 = results("bench_ssd_sim_drafter_eager_h200_2026-12-02_run2.json")
    thread = results("bench_ssd_sim_thread_h200_2026-12-02.json")
    if thread["overlap_transport"] != "worker thread, default stream":
        raise ValueError(f"bench_ssd_sim_thread: expected the one-stream transport, got {thread['overlap_transport']!r}")
    rows = _ssd_rows(sim["rows"], "Qwen3-8B shape, simulated")
    rows += _ssd_rows(eager["rows"], "Qwen3-8B shape, simulated, cost drafter eager")
    rows += _ssd_rows(eager2["rows"], "Qwen3-8B shape, simulated, cost drafter eager (second run)")
    rows += _ssd_rows(thread["rows"], "Qwen3-8B shape, simulated, graphs, worker thread on one stream")
    for prompt in real["per_prompt"]:
        rows += _ssd_rows(prompt, "SmolLM2 + DFlash, real")
    header = ["run", "system", "tokens / pass", "ms / round", "x AR", "x AR / tokens per pass", "pre-draft hit rate", "== AR"]
    return markdown_table(header, rows)


def agentspec_h200(results: Results) -> str:
    rows = []
    for name, machine in (
        ("bench_agentspec_h200_2026-12-02_run2.json", "H200"),
        ("bench_agentspec_h200_c16_2026-12-02.json", "H200"),
        ("bench_agentspec_cpu_c16_2026-12-02.json", "CPU"),
    ):
        run = results(name)
        concurrency = run.get("concurrency", 1)
        for arm, a in run["arms"].items():
            per_request = a.get("tokens_per_request_pass", a["tokens_per_pass"])
            rows.append(
                [
                    machine,
                    str(concurrency),
                    arm,
                    f"{per_request:.2f}",
                    f"{a['speedup_vs_ar_wall']:.2f}x",
                    _yes_no(a["equal_to_ar"]),
                ]
            )
    return markdown_table(["machine", "concurrency", "system", "tokens / request pass", "x AR (wall)", "== AR"], rows)


def _pilot_rows(comparison: dict, label: str) -> list[list[str]]:
    systems = {"pilot": comparison["pilot"]} | {f"hand: {name}": run for name, run in comparison["hand"].items()}
    rows = []
    for name, run in systems.items():
        if run is None:
            rows.append([label, name, "not measured", "", "", ""])
            continue
        low, high = run["ci95"]
        rows.append(
            [
                label,
                name,
                f"{run['speedup_vs_ar']:.2f}x",
                f"{low:.2f}-{high:.2f}",
                "PASS" if run["forcing_passed"] else "FAIL",
                _yes_no(run["equal_to_ar"]),
            ]
        )
    return rows


def _second_deployment_rows(second: dict, label: str) -> list[list[str]]:
    rows = []
    for key, name in (("from_memory", "pilot from memory"), ("from_empty_memory", "pilot from empty memory")):
        run = second[key]
        if run is None:
            rows.append([label, name, "not measured", "", "", ""])
            continue
        final = run["final"]
        low, high = final["ci95"]
        rounds = run["rounds_to_final"]
        rows.append(
            [
                label,
                f"{name} (final after {rounds} round{'s' if rounds != 1 else ''})",
                f"{final['speedup_vs_ar']:.2f}x",
                f"{low:.2f}-{high:.2f}",
                "PASS" if final["forcing_passed"] else "FAIL",
                _yes_no(final["equal_to_ar"]),
            ]
        )
    return rows


def pilot_h200(results: Results) -> str:
    sim = results("pilot_sim_h200_2026-12-02_run2/pilot_sim.json")
    real = results("pilot_real_h200_2026-12-02/pilot_real.json")
    second = sim["deployment2"]
    rows = _pilot_rows(sim["deployment1"]["comparison"], "Qwen3-8B shape, random weights, simulated")
    rows += _second_deployment_rows(second, f"second deployment: {second['target']['shape']} shape, random weights, simulated")
    rows += _pilot_rows(real["deployment1"]["comparison"], "SmolLM2-135M, real")
    table = markdown_table(["target", "system", "x AR", "95% CI", "forcing", "== AR"], rows)
    goals = []
    for label, run in (("simulated", sim), ("real", real)):
        comparison = run["deployment1"]["comparison"]
        met = "met" if comparison["goal_pilot_at_least_best_hand"] else "not met"
        goals.append(
            f"{label}: pilot / best hand ({comparison['best_hand']}) {comparison['pilot_over_best_hand']:.2f}x, goal >= 1 {met}"
        )
    if second["from_empty_memory"] is not None:
        same = second["from_memory"]["final_spec"] == second["from_empty_memory"]["final_spec"]
        goals.append(
            f"second deployment: best reached in fewer rounds from memory than from empty memory: "
            f"{_yes_no(second['memory_reached_best_in_fewer_rounds'])}; the same final system both ways: {_yes_no(same)}"
        )
    return table + "\n\n" + "; ".join(goals)


ENGINE_GOAL = 4.0  # speculative over batched AR, packed layout, budget auto, concurrency 16
ENGINE_SWEEP = "bench_engine_h200_2026-12-03.json"  # the newest full sweep under continuous batching
# The goal cases with each pass split into the target forward and the rest (--split-forward), before and after the
# dense layers' one-launch RMSNorm.
ENGINE_SPLIT_RUNS = (
    ("bench_engine_h200_2026-12-03_split.json", "reference RMSNorm (six kernels a norm)"),
    ("bench_engine_h200_2026-12-03_split_run2.json", "one-launch RMSNorm"),
    (
        "bench_engine_h200_2026-12-03_elementwise_reference.json",
        "all PyTorch references (`--elementwise torch`, same call as the next row)",
    ),
    ("bench_engine_h200_2026-12-03_elementwise.json", "norm, RoPE + cache write, SwiGLU, add + norm kernels"),
    ("bench_engine_h200_2026-12-03_apart.json", "the same, and a prompt chunk attending apart (reverted: slower)"),
    ("bench_engine_h200_2026-12-04_goal_split.json", "the kernels of 2026-12-04 (first call)"),
    ("bench_engine_h200_2026-12-04_goal_split2.json", "the kernels of 2026-12-04 (second call, same engine)"),
)


def engine_h200(results: Results) -> str:
    """The bf16 run on planted weights (one closed batch), and the sweep under continuous batching beside it."""
    table = _engine_table(results("bench_engine_h200_2026-12-02_run5.json"))
    goal = results(ENGINE_SWEEP)
    rows = []
    for r in sorted(goal["rows"], key=lambda r: (-r["concurrency"], r["system"])):
        accepted = f"{r['accepted_per_round']:.2f}" if r["system"] != "AR" else ""
        nodes = "" if r.get("budget_nodes_per_pass") is None else f"{r['budget_nodes_per_pass']:.1f}"
        rows.append(
            [
                str(r["concurrency"]),
                r["system"],
                f"{r['tokens_per_s']:.0f}",
                f"{r['speedup_vs_ar']:.2f}x",
                f"{r['ms_per_pass']:.2f}",
                accepted,
                nodes,
                str(r["eager_passes"]),
            ]
        )
    header = ["concurrency", "system", "tok/s", "x AR", "ms a pass", "accepted / round", "budget nodes a pass", "eager passes"]
    intro = (
        f"Under continuous batching (`{ENGINE_SWEEP}`, commit {goal['provenance']['git_commit'][:7]}: {goal['waves']} x c "
        "requests through c slots, c = 4 to 24; c = 1 decodes "
        "each prompt alone; "
        f"`--max-pass-rows {goal['max_pass_rows_arg']}`: a forward capped at the largest graph bucket where it holds "
        "every round, prompts fed in chunks under it"
        + (f"; not run (wall budget): {', '.join(goal['skipped'])}" if goal.get("skipped") else "")
        + "):"
    )
    return table + "\n\n" + intro + "\n\n" + markdown_table(header, rows)


def engine_h200_split(results: Results) -> str:
    """Where a pass goes at c = 16 and 24: the forward between device syncs, the rest, and the kernels of five steps."""
    rows = []
    for name, label in ENGINE_SPLIT_RUNS:
        run = results(name)
        for r in sorted(run["rows"], key=lambda r: (r["concurrency"], r["system"] != "AR", r["system"])):
            if r["system"] == "spec, budget off":
                continue
            kp = r["warmup_kernel_profile"]
            # a graph captured in the profiled warm-up steps adds its capture's kernels to theirs
            captured = " (a graph capture during the warm-up steps)" if kp.get("graphs_captured") else ""
            rows.append(
                [
                    label,
                    str(r["concurrency"]),
                    r["system"],
                    f"{r['tokens_per_s']:.0f}",
                    f"{r['speedup_vs_ar']:.2f}x",
                    f"{r['ms_per_pass']:.2f}",
                    f"{r['forward_ms_per_pass']:.2f}",
                    f"{r['outside_forward_ms_per_pass']:.2f}",
                    f"{kp['gemm_ms']:.2f} / {kp['attention_ms']:.2f} / {kp['other_ms']:.2f}{captured}",
                    f"{kp['kernels_per_step']:.0f}",
                ]
            )
    header = [
        "dense element-wise work",
        "concurrency",
        "system",
        "tok/s",
        "x AR",
        "ms a pass",
        "forward ms",
        "rest ms",
        "kernels ms: GEMM / attention / other",
        "launches a step",
    ]
    return markdown_table(header, rows)


FIXED_COST_RUN = "fixed_cost_h200_2026-12-05_row_tile.json"
FIXED_COST_KERNELS = ("cublas_bf16", "cuda_bf16_v5", "cuda_w12_v10", "cuda_q_v5", "read_floor")  # the defaults and the floor


def cuda_fixed_cost(results: Results) -> str:
    """Each default kernel's cold time fitted as fixed + bytes / rate beside the read floor's, and on the 8B shapes its
    cold ratio to cuBLAS and to the read floor of its own bytes."""
    run = results(FIXED_COST_RUN)
    copy = run["copy_bandwidth_bytes_per_s"]
    fit_rows = [
        [
            f["kind"],
            str(f["N"]),
            str(f["M"]) if f["M"] else "-",
            f"{f['fixed_s'] * 1e6:.1f}",
            f"{f['rate_frac_of_copy']:.2f}",
            f"{f['max_rel_residual']:.0%}",
        ]
        for f in run["fits"]
        if f["kind"] in FIXED_COST_KERNELS
    ]
    shapes = {(r["model"], r["linear"], r["M"], r["kind"]): r for r in run["shapes"]}
    ratio_rows = []
    for (model, linear, m, kind), r in shapes.items():
        if model != "qwen3-8b" or kind not in FIXED_COST_KERNELS[1:-1] or m == 16:
            continue
        base = shapes[model, linear, m, "cublas_bf16"]
        ratio_rows.append(
            [
                linear,
                str(m),
                kind,
                f"{base['cold_s'] / r['cold_s']:.2f}x",
                f"{r['weight_bytes'] / r['cold_s'] / copy:.2f}",
                f"{r['x_read_floor']:.2f}",
                f"{r['cold_s'] / r['warm_s']:.2f}",
            ]
        )
    # what the copies of each timed row span, read from the rows (a run asks for l2_factor; copies sized from another
    # format's bytes span less)
    spans = [r["copies"] * r["weight_bytes"] / run["l2_bytes"] for r in run["shapes"] if r["kind"] != "read_floor"]
    summary = (
        f"copy bandwidth {copy / 1e12:.2f} TB/s; an empty kernel takes {run['empty_launch_s'] * 1e6:.2f} us a launch in a "
        f"CUDA graph; cold = identical weight copies cycled through the graph, spanning {min(spans):.1f}-{max(spans):.1f}x "
        f"the L2 (asked: {run['l2_factor']:.0f}x)"
    )
    return "\n\n".join(
        [
            markdown_table(["kernel", "N", "M", "fixed us", "rate, of copy", "max residual"], fit_rows),
            markdown_table(
                ["Qwen3-8B linear", "M", "kernel", "x cuBLAS bf16 (cold)", "of copy (cold)", "x its read floor", "cold / warm"],
                ratio_rows,
            ),
            summary,
        ]
    )


def cuda_read_floor(results: Results) -> str:
    """Per linear shape: every default kernel's cold time over the read floor of its bytes (M = 1 / 16), and what the
    floor leaves to W12 and the Q view against cuBLAS bf16 (cuBLAS cold over the format's floor)."""
    run = results(FIXED_COST_RUN)
    copy = run["copy_bandwidth_bytes_per_s"]
    shapes = {(r["model"], r["linear"], r["M"], r["kind"]): r for r in run["shapes"]}
    floors = {(r["model"], r["linear"], r["weight_bytes"]): r for r in run["shapes"] if r["kind"] == "read_floor"}
    rows = []
    for model, linear in dict.fromkeys((r["model"], r["linear"]) for r in run["shapes"]):
        cells = [f"{model.removeprefix('qwen3-').upper()} {linear}"]
        bf16_floor = floors[model, linear, shapes[model, linear, 1, "cublas_bf16"]["weight_bytes"]]
        cells.append(f"{bf16_floor['weight_bytes'] / copy / bf16_floor['cold_s']:.3f}")  # beside the 0.90 goal: 3 digits
        for kind in FIXED_COST_KERNELS[:-1]:
            cells.append(" / ".join(f"{shapes[model, linear, m, kind]['x_read_floor']:.2f}" for m in (1, 16)))
        for kind in ("cuda_w12_v10", "cuda_q_v5"):
            now = [shapes[model, linear, m, "cublas_bf16"]["cold_s"] / shapes[model, linear, m, kind]["cold_s"] for m in (1, 16)]
            ceiling = [
                shapes[model, linear, m, "cublas_bf16"]["cold_s"] / shapes[model, linear, m, kind]["read_floor_s"]
                for m in (1, 16)
            ]
            cells.append(f"{now[0]:.2f} / {now[1]:.2f} ({ceiling[0]:.2f} / {ceiling[1]:.2f})")
        rows.append(cells)
    fits = sorted((f for f in run["fits"] if f["kind"] == "read_floor"), key=lambda f: f["N"])
    summary = (
        "read floor, fitted cold over the sweep: "
        + "; ".join(f"N = {f['N']}: {f['fixed_s'] * 1e6:.2f} us + bytes / {f['rate_bytes_per_s'] / 1e12:.2f} TB/s" for f in fits)
        + f" (copy bandwidth {copy / 1e12:.2f} TB/s, read and written bytes counted)"
    )
    return "\n\n".join(
        [
            markdown_table(
                [
                    "shape",
                    "bf16 floor, of copy",
                    "cuBLAS x floor (M 1 / 16)",
                    "bf16 v5",
                    "W12 v10",
                    "Q v5",
                    "W12 x cuBLAS (at its floor)",
                    "Q x cuBLAS (at its floor)",
                ],
                rows,
            ),
            summary,
        ]
    )


def engine_real_h200(results: Results) -> str:
    """The real SmolLM2 pair: each system's ratio to batched AR (budget auto / off) and its round time, per concurrency."""
    run = results("bench_engine_real_h200_2026-12-02_run5.json")
    rows = {(r["concurrency"], r["system"]): r for r in run["rows"]}
    systems = [name for name in run["systems"]]
    levels = sorted({r["concurrency"] for r in run["rows"]}, key=lambda c: (c < 16, c if c >= 16 else -c))
    body = []
    for c in levels:
        ar = rows[c, "AR"]
        cells = [str(c), f"{ar['tokens_per_s']:.0f} tok/s, {ar['ms_per_pass']:.2f} ms"]
        for name in systems:
            auto, off = rows.get((c, f"{name}, budget auto")), rows.get((c, f"{name}, budget off"))
            ratio = " / ".join("not run" if r is None else f"{r['speedup_vs_ar']:.2f}x" for r in (auto, off))
            ms = " / ".join("-" if r is None else f"{r['ms_per_pass']:.1f}" for r in (auto, off))
            cells.append(f"{ratio} ({ms} ms)")
        body.append(cells)
    labels = {"trained chain": "trained chain (batched, CUDA graphs)", "trained tree": "trained tree (batched, CUDA graphs)"}
    header = ["requests", "batched AR", *(labels.get(name, name) for name in systems)]
    note = (
        "x batched AR with the verify budget auto / off (ms a round in brackets); "
        f"{run['dtype'].removeprefix('torch.')}, {run['new_tokens']} new tokens, {run['waves']} x c requests through c slots; "
        f"mismatches vs batched AR: chains {max(r['mismatches_vs_batched_ar'] for r in run['rows'] if 'chain' in r['system'])}, "
        f"trained tree up to {max(r['mismatches_vs_batched_ar'] for r in run['rows'] if 'tree' in r['system'])} "
        "(bf16 near-ties under other row counts)"
    )
    return markdown_table(header, body) + "\n\n" + note


HYBRID_ENGINE_RUNS = (
    ("bench_engine_hybrid_h200_2026-12-02.json", "eager, per-request commits"),
    ("bench_engine_hybrid_h200_2026-12-03.json", "batched commits, one attention call a layer"),
    ("bench_engine_hybrid_h200_2026-12-03_run2.json", "forward under CUDA graphs"),
    ("bench_engine_hybrid_h200_2026-12-03_run3.json", "commits under CUDA graphs"),
    ("bench_engine_hybrid_h200_2026-12-03_run4.json", "prefill chunks of at most 64 rows (every pass graphed)"),
    ("bench_engine_hybrid_h200_2026-12-03_run5.json", "one-launch RMSNorms"),
)


ENGINE_CEILING = "engine_ceiling_2026-12-03.json"


def engine_ceiling(results: Results) -> str:
    """The speedup ceiling of batched speculation per time model of a pass (no host work, prefill or tails)."""
    run = results(ENGINE_CEILING)
    labels = {
        "forward": "measured forward (step-time table)",
        "cublas_gemms": "cuBLAS GEMMs only, the rest free",
        "floor": "H200 floor: bytes / copy rate, FLOPs / peak",
    }
    rows = []
    for c, models in run["ceilings"].items():
        goal = run["goals"].get(c, [None])[0]
        for name, m in models.items():
            best = next(e for e in m["by_k"] if e["k"] == m["best_k"])
            rows.append(
                [
                    c,
                    labels[name],
                    f"{m['best_k']} ({m['best_rows']} rows)",
                    f"{best['ms'] / m['ar_ms']:.2f}",
                    f"{best['tokens']:.2f}",
                    f"{m['best_speedup']:.2f}x",
                    "" if goal is None else f"{goal:.1f}x: {'within' if m['best_speedup'] >= goal else 'above'} the ceiling",
                ]
            )
    header = ["concurrency", "time model of a pass", "best k", "pass / AR pass", "tokens a round", "ceiling", "goal"]
    return markdown_table(header, rows)


ELEMENTWISE_RUN = "elementwise_h200_2026-12-03.json"
ELEMENTWISE_AR_STEP_RUN = "ar_step_h200_2026-12-03_elementwise.json"


def elementwise_h200(results: Results) -> str:
    """The dense layers' element-wise kernels against their PyTorch references: checks, op times, a layer, the AR step."""
    run = results(ELEMENTWISE_RUN)
    checks = run["checks"]
    must = [c for c in checks if c["must_be_bitwise"]]
    ops = {}
    for o in run["ops"]:
        ops.setdefault(o["op"], {})[o["rows"]] = o
    row_counts = sorted({o["rows"] for o in run["ops"]})
    op_rows = [
        [op] + [f"{by_rows[r]['kernel_us']:.1f} / {by_rows[r]['reference_us']:.1f}" for r in row_counts]
        for op, by_rows in ops.items()
    ]
    layer_rows = [
        [
            str(entry["rows"]),
            f"{entry['kernels_ms']:.3f}",
            f"{entry['reference_ms']:.3f}",
            f"{entry['speedup']:.2f}x",
            f"{entry['kernels_profile']['kernels_per_step']:.0f} / {entry['reference_profile']['kernels_per_step']:.0f}",
            f"{entry['max_abs_diff']:.3g}",
        ]
        for entry in run["layer"]
    ]
    step = results(ELEMENTWISE_AR_STEP_RUN)
    kernels, reference = step["bf16_step_kernels"], step["bf16_reference_elementwise_step_kernels"]
    step_rows = [
        [
            label,
            f"{seconds * 1e3:.2f} ms",
            f"{seconds / floor:.2f}x",
            f"{prof['gemm_ms']:.2f} / {prof['attention_ms']:.2f} / {prof['other_ms']:.2f}",
            f"{prof['kernels_per_step']:.0f}",
        ]
        for label, seconds, floor, prof in (
            ("bf16, PyTorch element-wise references", step["bf16_reference_elementwise_step_s"], step["bf16_floor_s"], reference),
            ("bf16, element-wise kernels", step["bf16_step_s"], step["bf16_floor_s"], kernels),
            # W12 reads its own bytes: 0.75x bf16's, so its own floor
            ("W12 (`cuda` linears), element-wise kernels", step["w12_step_s"], step["w12_floor_s"], step["w12_step_kernels"]),
        )
    ]
    summary = (
        f"Checks on the GPU: {len(checks)} outputs, {sum(c['differ'] == 0 for c in must)} of {len(must)} that must be "
        f"bitwise are, {len(run['failed'])} failures. Weight-read floor of the bf16 step {step['bf16_floor_s'] * 1e3:.2f} "
        f"ms; verify step of {step['verify_rows']} rows {step['bf16_verify_s'] * 1e3:.2f} ms = "
        f"{step['bf16_verify_x_step']:.2f}x the one-token step (bf16), {step['w12_verify_x_step']:.2f}x (W12); W12 step / bf16 "
        f"step {step['w12_vs_bf16_step']:.2f}x; greedy tokens W12 == bf16: {_yes_no(step['greedy_tokens_equal'])}."
    )
    return "\n\n".join(
        [
            markdown_table(["op (us: kernel / reference)"] + [f"{r} rows" for r in row_counts], op_rows),
            markdown_table(
                ["Qwen3-8B layer, rows", "kernels ms", "references ms", "speedup", "launches", "max |diff|"], layer_rows
            ),
            markdown_table(
                ["Qwen3-8B AR step", "step", "x its floor", "kernels ms: GEMM / attention / other", "launches"], step_rows
            ),
            summary,
        ]
    )


CHUNK_FORWARD_RUNS = ("chunk_forward_h200_2026-12-03_rule_prefix200.json", "chunk_forward_h200_2026-12-03_rule_prefix900.json")
CHUNK_VARIANTS = {
    "apart": "apart, always",
    "joint": "one padded SDPA, always",
    "default": "the target's rule",
}


def chunk_forward(results: Results) -> str:
    """A prompt chunk beside verify rows: the packed forward with the chunk attending apart against one padded SDPA."""
    rows = []
    for name in CHUNK_FORWARD_RUNS:
        run = results(name)
        for case in run["cases"]:
            for variant, v in case["variants"].items():
                k = v["kernels"]
                rows.append(
                    [
                        str(run["prefix"]),
                        str(case["chunk_rows"]),
                        CHUNK_VARIANTS[variant]
                        + (f" (chose {'apart' if case['default_apart'] else 'padded'})" if variant == "default" else ""),
                        f"{v['forward_ms']:.3f}",
                        f"{k['gemm_ms']:.2f} / {k['attention_ms']:.2f} / {k['other_ms']:.2f}",
                        f"{k['kernels_per_step']:.0f}",
                        f"{case['apart_minus_joint_ms_36_layers']:+.2f} ms" if variant == "apart" else "",
                    ]
                )
    header = [
        "prefix",
        "chunk rows",
        "chunk attends",
        "forward ms (6 layers)",
        "kernels ms: GEMM / attention / other",
        "launches",
        "apart - padded, 36 layers",
    ]
    return markdown_table(header, rows)


ENGINE_LONG_RUNS = (
    ("bench_engine_h200_2026-12-03_long_default.json", "on (default)"),
    ("bench_engine_h200_2026-12-03_long_none.json", "off (`--long-request-rows none`)"),
)


def engine_long_prompts(results: Results) -> str:
    """The engine at 900-token prompts with the tall-request rule on and off: throughput, passes and full prompt passes."""
    rows = []
    for name, label in ENGINE_LONG_RUNS:
        for r in results(name)["rows"]:
            full = [b for b in r["passes_by_bucket"] if b["bucket"] == 256 and b["request_bucket"] == 256]
            rows.append(
                [
                    label,
                    r["system"],
                    f"{r['tokens_per_s']:.0f}",
                    f"{r['speedup_vs_ar']:.2f}x",
                    str(r["target_passes"]),
                    f"{r['ms_per_pass']:.2f}",
                    f"{full[0]['passes']} at {full[0]['forward_ms']:.2f} ms" if full else "none",
                    f"{r['mismatches_vs_alone']} / {r['mismatches_vs_batched_ar']}",
                ]
            )
    header = [
        "tall-request rule",
        "system",
        "tok/s",
        "x AR",
        "passes",
        "ms a pass",
        "256-row prompt passes (forward)",
        "mismatches vs alone / AR",
    ]
    return markdown_table(header, rows)


HYBRID_ENGINE_LONG = "bench_engine_hybrid_long_h200_2026-12-03.json"


def engine_hybrid_h200(results: Results) -> str:
    """The packed hybrid engine's last run per concurrency, then each change's effect at concurrency 16."""
    last = results(HYBRID_ENGINE_RUNS[-1][0])
    rows = []
    for r in sorted(last["rows"], key=lambda r: (-r["concurrency"], r["system"])):
        rows.append(
            [
                str(r["concurrency"]),
                r["system"],
                f"{r['tokens_per_s']:.0f}",
                f"{r['speedup_vs_ar']:.2f}x",
                f"{r['ms_per_pass']:.1f}",
                f"{r['accepted_per_round']:.2f}" if r["system"] != "AR" else "",
                str(r["mismatches_vs_alone"]),
            ]
        )
    header = ["concurrency", "system", "tok/s", "x AR", "ms a pass", "accepted / round", "mismatches vs alone"]
    steps = []
    for name, change in HYBRID_ENGINE_RUNS:
        run = {r["system"]: r for r in results(name)["rows"] if r["concurrency"] == 16}
        commit = (results(name)["provenance"]["git_commit"] or "")[:7]
        steps.append(
            [
                change,
                commit,
                f"{run['AR']['ms_per_pass']:.1f}",
                f"{run['AR']['tokens_per_s']:.0f}",
                f"{run['spec, budget auto']['speedup_vs_ar']:.2f}x / {run['spec, budget off']['speedup_vs_ar']:.2f}x",
            ]
        )
    note = (
        f"{last['dtype'].removeprefix('torch.')}, planted successor rule, {last['new_tokens']} new tokens a request, oracle "
        f"`{last['profile']}`, graphs: {last['graphs']['mode']} (replay equal to the static path: "
        f"{_yes_no(last['graphs']['check_equal'])}); prefill passes included in the ms a pass."
    )
    step_header = ["change", "commit", "AR ms a pass (c = 16)", "AR tok/s", "spec / AR, budget auto / off"]
    long = {(r["concurrency"], r["system"]): r for r in results(HYBRID_ENGINE_LONG)["rows"]}
    longer = "With {} new tokens a request (`{}`): ".format(
        results(HYBRID_ENGINE_LONG)["new_tokens"], HYBRID_ENGINE_LONG
    ) + "; ".join(
        f"c = {c}: AR {long[c, 'AR']['tokens_per_s']:.0f} tok/s, spec {long[c, 'spec, budget auto']['speedup_vs_ar']:.2f}x "
        f"(budget auto) / {long[c, 'spec, budget off']['speedup_vs_ar']:.2f}x (off"
        + (
            ", uncapped and eager: its rounds exceed the largest bucket)"
            if long[c, "spec, budget off"]["max_pass_rows"] is None
            else ")"
        )
        for c in sorted({c for c, _ in long})
    )
    return markdown_table(header, rows) + "\n\n" + note + "\n\n" + markdown_table(step_header, steps) + "\n\n" + longer + "."


def engine_h200_float32(results: Results) -> str:
    return _engine_table(results("bench_engine_h200_2026-12-02_run3.json"))


def _engine_table(run: dict) -> str:
    rows = []
    for r in sorted(run["rows"], key=lambda r: (r["layout"], r["concurrency"], r["system"])):
        accepted = f"{r['accepted_per_round']:.2f}" if r["system"] != "AR" else ""
        rows.append(
            [
                r["layout"],
                str(r["concurrency"]),
                r["system"],
                f"{r['tokens_per_s']:.0f}",
                f"{r['speedup_vs_ar']:.2f}x",
                f"{r['latency_s_median']:.2f} s",
                accepted,
                str(r["mismatches_vs_alone"]),
            ]
        )
    header = ["layout", "concurrency", "system", "tok/s", "x AR", "latency median", "accepted / round", "mismatches vs alone"]
    goal = next(r for r in run["rows"] if (r["layout"], r["concurrency"], r["system"]) == ("packed", 16, "spec, budget auto"))
    met = "met" if goal["speedup_vs_ar"] >= ENGINE_GOAL else "not met"
    notes = [
        f"{run['dtype'].removeprefix('torch.')}"
        + (", planted successor rule" if run.get("weights") == "planted" else "")
        + f", {run['new_tokens']} new tokens, oracle profile `{run['profile']}`: {run['profile_tokens_per_round']:.1f} tokens per round",
        f"every output equal to batched AR: {_yes_no(all(r['equal_to_batched_ar'] for r in run['rows']))}",
        f"equal to its warm-up: {_yes_no(all(r['equal_to_warmup'] for r in run['rows']))}",
        f"packed, concurrency 16, budget auto: {goal['speedup_vs_ar']:.2f}x AR, goal >= {ENGINE_GOAL}x {met}",
        "not run (wall budget): " + (", ".join(f"`{case}`" for case in run["skipped"]) or "none"),
    ]
    return markdown_table(header, rows) + "\n\n" + "; ".join(notes)


def forcing_engine_h200(results: Results) -> str:
    run = results("forcing_engine_h200_2026-12-02.json")
    rows = []
    for name, c in run["candidates"].items():
        rep = c["report"]
        rows.append(
            [
                name,
                str(rep["num_tokens"]),
                str(rep["num_mismatches"]),
                f"{rep['mismatch_rate']:.2e}",
                f"{rep['null_rate']:.2e}",
                str(rep["num_large_margin_events"]),
                f"{c['identical_to_stock']}/{len(c['slots'])}",
                rep["verdict"],
                _yes_no(run["verdict_as_expected"][name]),
            ]
        )
    s = run["settings"]
    header = [
        "candidate",
        "tokens",
        "mismatches",
        "rate",
        "null rate",
        "large-margin events",
        "identical to alone",
        "verdict",
        "as expected",
    ]
    summary = (
        f"{s['num_prompts']} requests x {s['max_new_tokens']} tokens, {s['shape']} {s['dtype']} random weights (logit std "
        f"{s['logit_std']:g}), packed engine, n-gram k = {s['num_draft_tokens']}; fault: +{s['bias']:g} on every {s['every']}th id "
        f"of slot {s['fault_slot']}'s logits from position {s['after']}; expected outcome: {_yes_no(run['expected_outcome'])}"
    )
    return markdown_table(header, rows) + "\n\n" + summary


PDL_RUN = "h200_2026-12-03_pdl"  # suffix of ar_step_pdl_{mode}_*.json and fixed_cost_pdl_{mode}_*.json, one device call
PDL_MASK_RUN = "ar_step_h200_2026-12-03_additive_mask.json"  # the dense runtime's mask made additive once, PDL on


def cuda_pdl(results: Results) -> str:
    """The AR step and the GEMMs' fixed cost with programmatic dependent launch by ``$SPECDEC_PDL`` mode, one run."""
    modes = {"0": "`0` (plain launches)", "gemm": "`gemm` (GEMMs only)", "1": "`1` (GEMMs, norms and SwiGLU)"}
    steps = {mode: results(f"ar_step_pdl_{mode}_{PDL_RUN}.json") for mode in modes}
    off = steps["0"]
    step_rows = [
        [
            label,
            f"{step['bf16_step_s'] * 1e3:.3f} ms ({step['bf16_x_floor']:.2f}x floor)",
            f"{step['w12_step_s'] * 1e3:.3f} ms",
            f"{step['w12_vs_bf16_step']:.3f}x",
            f"{step['w12_verify_s'] * 1e3:.2f} ms",
            _yes_no(step["greedy_tokens_bf16"] == off["greedy_tokens_bf16"]),
        ]
        for (mode, label), step in zip(modes.items(), steps.values())
    ]
    masked = results(PDL_MASK_RUN)
    step_rows.append(
        [
            f"`1`, additive mask once a forward (a later run, commit {masked['provenance']['git_commit'][:7]})",
            f"{masked['bf16_step_s'] * 1e3:.3f} ms ({masked['bf16_x_floor']:.2f}x floor)",
            f"{masked['w12_step_s'] * 1e3:.3f} ms",
            f"{masked['w12_vs_bf16_step']:.3f}x",
            f"{masked['w12_verify_s'] * 1e3:.2f} ms",
            _yes_no(masked["greedy_tokens_bf16"] == off["greedy_tokens_bf16"]),
        ]
    )
    fixed = {mode: results(f"fixed_cost_pdl_{mode}_{PDL_RUN}.json") for mode in ("0", "gemm")}
    fits = [{(f["kind"], f["N"], f["M"]): f for f in fixed[mode]["fits"]} for mode in ("0", "gemm")]
    fit_rows = [
        [
            kind,
            str(n),
            f"{f['fixed_s'] * 1e6:.2f} -> {fits[1][kind, n, m]['fixed_s'] * 1e6:.2f}",
            f"{f['rate_frac_of_copy']:.2f} -> {fits[1][kind, n, m]['rate_frac_of_copy']:.2f}",
        ]
        for (kind, n, m), f in fits[0].items()
        if m == 1
    ]
    summary = (
        f"Fixed cost: at least {fixed['0']['calls_per_graph']} cold calls of one GEMM back to back in a CUDA graph,"
        " each fitted as fixed + bytes / rate over K = 1k-16k at M = 1 "
        "(`0` -> `gemm`). The AR step's greedy bf16 tokens are compared with the `0` run's."
    )
    return "\n\n".join(
        [
            markdown_table(
                ["`$SPECDEC_PDL`", "bf16 step", "W12 step", "W12 / bf16", "W12 verify (16 rows)", "same greedy tokens"],
                step_rows,
            ),
            markdown_table(["kernel", "N", "fixed us", "rate, of copy"], fit_rows),
            summary,
        ]
    )


DECODE_ATTENTION_RUN = "decode_attention_h200_2026-12-04_spread.json"
STEP_SPREAD_RUNS = tuple(f"ar_step_h200_2026-12-04_spread_{i}.json" for i in (1, 2, 3))  # one device call with the above
DECODE_ATTENTION_WARPS_RUN = "decode_attention_h100_2026-12-07_423c2b6_warps.json"
W12_STEP_GOAL = 0.80  # the W12 step over the bf16 step
VERIFY_STEP_GOAL = 1.10  # the 16-row verify step over the one-token step


def decode_attention_warps_h100(results: Results) -> str:
    """The split-KV Triton attention at 4 warps a split program (the default) and at 8 (``num_warps=8``), us a call in
    a graph of the benchmark's calls, one H100 run, by new tokens and cache slots."""
    run = results(DECODE_ATTENTION_WARPS_RUN)
    cells = {(r["rows"], r["span"], r["variant"]): r.get("us") for r in run["rows"]}
    rows = []
    for n_rows, span in sorted({(r["rows"], r["span"]) for r in run["rows"]}):
        four = cells[n_rows, span, "split-KV Triton (additive mask)"]
        eight = cells[n_rows, span, "split-KV Triton, 8 warps a split"]
        rows.append([str(n_rows), str(span), str(4 * n_rows), f"{four:.2f}", f"{eight:.2f}", f"{eight / four:.3f}"])
    header = ["new tokens", "cache slots", "query rows a KV head", "4 warps us", "8 warps us", "8 / 4 warps"]
    return markdown_table(header, rows)


def decode_attention(results: Results) -> str:
    """The dense runtime's cached attention by kernel (one run), then the lean AR step three times in the same call."""
    run = results(DECODE_ATTENTION_RUN)
    cells = {(r["rows"], r["span"], r["variant"]): r for r in run["rows"]}
    variants = ("SDPA (bool mask)", "cudnn (additive mask)", "split-KV Triton (additive mask)")
    cases = sorted({(r["rows"], r["span"]) for r in run["rows"]})
    rows = []
    for n_rows, span in cases:
        us = [cells[n_rows, span, v].get("us") for v in variants]
        cudnn, split = us[1], us[2]
        rows.append([str(n_rows), str(span), *(f"{u:.1f}" if u is not None else "-" for u in us), f"{cudnn / split:.1f}x"])
    attention = markdown_table(
        ["new tokens", "cache slots", "SDPA, bool mask (us)", "cuDNN, additive mask (us)", "split-KV (us)", "cuDNN / split-KV"],
        rows,
    )
    steps = [results(name) for name in STEP_SPREAD_RUNS]
    step_rows = []
    for i, step in enumerate(steps, 1):
        step_rows.append(
            [
                str(i),
                f"{step['bf16_step_s'] * 1e3:.3f} ms ({step['bf16_x_floor']:.2f}x floor)",
                f"{step['bf16_sdpa_step_s'] * 1e3:.3f} ms",
                f"{step['w12_step_s'] * 1e3:.3f} ms",
                against_goal(step["w12_vs_bf16_step"], W12_STEP_GOAL),
                against_goal(step["bf16_verify_x_step"], VERIFY_STEP_GOAL),
                against_goal(step["w12_verify_x_step"], VERIFY_STEP_GOAL),
            ]
        )
    step_table = markdown_table(
        [
            "run",
            "bf16 step (split-KV)",
            "bf16 step (SDPA)",
            "W12 step",
            f"W12 / bf16 (goal <= {W12_STEP_GOAL}x)",
            f"bf16 verify 16 / step (goal <= {VERIFY_STEP_GOAL}x)",
            f"W12 verify 16 / step (goal <= {VERIFY_STEP_GOAL}x)",
        ],
        step_rows,
    )
    prov = run["provenance"]
    summary = (
        f"Qwen3-8B heads ({run['heads']['num_heads']} query, {run['heads']['num_kv_heads']} KV, head dim "
        f"{run['heads']['head_dim']}), {run['tensors']} tensors, half the slots committed; us a call in a CUDA graph of "
        f"{run.get('calls', 36)} calls (the benchmark's default before it recorded it). The steps: the lean Qwen3-8B-shaped target "
        f"(random weights, graphs, `$SPECDEC_PDL` 1), commit {prov['git_commit'][:7]}, one device call."
    )
    return "\n\n".join([attention, step_table, summary])


W12_TOKENS_RUNS = (
    # (label, file suffix): the bisect's libraries (one device call), then the shared-memory escape warp (a later call)
    ("escape warp with register sums (shipped before)", "shipped_gaussian"),
    ("epilogue escapes at 16 tokens (`esc8`)", "esc8_gaussian"),
    ("epilogue escapes always (`esc0`)", "esc0_gaussian"),
    ("one half of consumers (`halves1`)", "halves1_gaussian"),
    ("escape warp with shared-memory sums (now)", "escape_warp_smem_gaussian"),
    ("escape warp with register sums, planted weights", "shipped_planted"),
    ("escape warp with shared-memory sums, planted weights", "escape_warp_smem_planted"),
)


def w12_tokens(results: Results) -> str:
    """W12 v7 at 1, 8 and 16 tokens by build and by escape-warp form (CUDA graphs, us a call)."""
    rows = []
    shapes: list[str] = []
    for label, suffix in W12_TOKENS_RUNS:
        run = results(f"w12_timing_h200_2026-12-04_{suffix}.json")
        times = {(r["linear"], r["M"]): r["time_s"] for r in run["ranges"] if r["kernel"] == "cuda_w12_v7"}
        shapes = shapes or list(dict.fromkeys(linear for linear, _ in times))
        cells = []
        for linear in shapes:
            ms = sorted(m for lin, m in times if lin == linear)
            cells.append(" / ".join(f"{times[linear, m] * 1e6:.1f}" for m in ms) if ms else "-")
        rows.append([f"{label} ({run['provenance']['git_commit'][:7]})", *cells])
    header = ["W12 v7, us at M = 1 / 8 / 16", *(f"Qwen3-8B {s}" for s in shapes)]
    return markdown_table(header, rows)


# (label, run) of the AR step before the row tiles and with them, from one device call
ROW_TILE_STEP_RUNS = (
    ("W12 v8, bf16 v3 (the defaults before)", "ar_step_h200_2026-12-05_row_tile_v8.json"),
    ("W12 v10, bf16 v5 (row tiles where they pay)", "ar_step_h200_2026-12-05_row_tile_default.json"),
)


def cuda_row_tile_steps(results: Results) -> str:
    """The Qwen3-8B AR step with the tensor-map defaults before the row tiles and with them, from one device call."""
    rows = []
    for label, name in ROW_TILE_STEP_RUNS:
        r = results(name)
        rows.append(
            [
                label,
                f"{r['w12_step_s'] * 1e3:.3f} ms ({r['w12_x_floor']:.2f}x its floor)",
                f"{r['w12_vs_bf16_step']:.2f}x",
                f"{r['w12_verify_s'] * 1e3:.3f} ms ({r['w12_verify_x_step']:.2f}x)",
                f"{r['bf16_skinny_step_s'] * 1e3:.3f} ms ({r['bf16_skinny_x_floor']:.2f}x its floor)",
                f"{r['bf16_step_s'] * 1e3:.3f} ms",
            ]
        )
    header = [
        "kernels",
        "W12 step",
        "W12 / bf16 (cuBLAS) step",
        "W12 verify, 16 rows",
        "bf16 step, skinny linears",
        "bf16 step, cuBLAS",
    ]
    return markdown_table(header, rows)


WIDE_RUN = "wide_w12_h200_2026-12-05.json"
WIDE_STEP_RUNS = (
    ("W12 at 17-128 rows: Triton (`$SPECDEC_WIDE_GEMM=0`)", "ar_step_verify64_h200_2026-12-05_wide0.json"),
    ("W12 at 17-128 rows: the wide kernel (the default now)", "ar_step_verify64_h200_2026-12-05_wide1.json"),
)
WIDE_KINDS = (
    ("cuda_w12_wide", "W12 wide"),
    ("cuda_w12_two_calls", "W12, two 16-row calls"),
    ("triton_w12", "W12 Triton"),
    ("cuda_q_wide", "Q wide"),
    ("triton_q", "Q Triton"),
)


def verify_step_cells(run: dict) -> list[str]:
    """The W12 and bf16 verify steps of a ``bench_roofline --ar-step --verify-rows`` run: time (W12 also over its
    one-token step)."""
    return [
        f"{run['w12_verify_s'] * 1e3:.2f} ms ({run['w12_verify_x_step']:.2f}x its step)",
        f"{run['bf16_verify_s'] * 1e3:.2f} ms",
    ]


def cuda_wide(results: Results) -> str:
    """The wide W12 / Q kernels against the paths they replace at 17-128 rows (x cuBLAS bf16, cold, same call), each
    kind's range over a model's five linears; then the 8B AR step's 64-row verify pass with W12 linears either way."""
    run = results(WIDE_RUN)
    timed = [r for r in run["timings"] if "x_cublas" in r]
    rows = []
    for model in dict.fromkeys(r["model"] for r in timed):
        for m in sorted({r["M"] for r in timed if r["model"] == model}):
            cells = [f"{model.removeprefix('qwen3-').upper()}", str(m)]
            for kind, _ in WIDE_KINDS:
                got = [r["x_cublas"] for r in timed if (r["model"], r["M"], r["kind"]) == (model, m, kind)]
                cells.append(f"{min(got):.2f}-{max(got):.2f}" + ("" if len(got) == 5 else f" ({len(got)} of 5)") if got else "-")
            rows.append(cells)
    steps = []
    for label, name in WIDE_STEP_RUNS:
        r = results(name)
        steps.append([label, *verify_step_cells(r), f"{r['w12_step_s'] * 1e3:.3f} ms ({r['w12_vs_bf16_step']:.3f}x bf16's)"])
    return "\n\n".join(
        [
            markdown_table(["model", "rows", *(label for _, label in WIDE_KINDS)], rows),
            markdown_table(["linears", "W12 verify, 64 rows", "bf16 verify, 64 rows", "W12 step, one token"], steps),
        ]
    )


WIDE_EPILOGUE_RUNS = (
    ("before (2d68b25)", "wide_mma_h100_2026-12-05_base_pipe0.json"),
    ("float4 epilogue, NB MMAs", "wide_mma_h100_2026-12-05_nb_mmas_pipe0.json"),
    ("float4 epilogue, one MMA", "wide_mma_h100_2026-12-05_one_mma_pipe0.json"),
)
WIDE_EPILOGUE_STEPS = (
    ("before (2d68b25)", "ar_step_verify64_h100_2026-12-05_pipe0.json"),
    ("float4 epilogue, one MMA", "ar_step_verify64_h100_2026-12-05_one_mma_pipe0.json"),
)


def cuda_wide_epilogue_h100(results: Results) -> str:
    """The wide W12 and Q kernels on the 8B linears in three builds of one H100 call (one-set loop): us a call and x
    cuBLAS bf16 (cold, same call) at each row count, W12 in every build and Q in the two float4 ones; then the 64-row
    W12 verify step before and after (two calls)."""
    runs = [(label, results(name)) for label, name in WIDE_EPILOGUE_RUNS]
    columns = [(f"W12, {label}", run, "cuda_w12_wide") for label, run in runs]
    columns += [(f"Q, {label}", run, "cuda_q_wide") for label, run in runs[1:]]
    keys = [(r["linear"], r["M"]) for r in runs[0][1]["timings"] if r["kind"] == "cuda_w12_wide" and r["model"] == "qwen3-8b"]
    rows = []
    for linear, m in keys:
        cells = [linear, str(m)]
        for _, run, kind in columns:
            (r,) = [r for r in run["timings"] if (r["model"], r["linear"], r["M"], r["kind"]) == ("qwen3-8b", linear, m, kind)]
            cells.append(f"{r['cold_s'] * 1e6:.1f} us ({r['x_cublas']:.2f}x)")
        rows.append(cells)
    return "\n\n".join(
        [
            markdown_table(["8B linear", "rows", *(label for label, _, _ in columns)], rows),
            verify_steps_table(results, dict(WIDE_EPILOGUE_STEPS), "wide kernels"),
        ]
    )


WIDE_CTAS_RUNS = {
    "chain": ("wide_ctas_h100_2026-12-06_ctas1.json", "wide_ctas_h100_2026-12-06_ctas2.json"),
    "no PDL": ("wide_isolated_h100_2026-12-06_ctas1.json", "wide_isolated_h100_2026-12-06_ctas2.json"),
}
WIDE_CTAS_IN_STEP = ("verify_linears_h100_2026-12-06_ctas1.json", "verify_linears_h100_2026-12-06_ctas2.json")
WIDE_CTAS_ALONE = ("verify_linears_only_h100_2026-12-06_pdl0_ctas1.json", "verify_linears_only_h100_2026-12-06_pdl0_ctas2.json")
WIDE_CTAS_STEPS = {
    "PDL on": ("ar_step_verify64_h100_2026-12-06_pdl1_ctas1.json", "ar_step_verify64_h100_2026-12-06_pdl1_ctas2.json"),
    "PDL off": ("ar_step_verify64_h100_2026-12-06_pdl0_ctas1.json", "ar_step_verify64_h100_2026-12-06_pdl0_ctas2.json"),
}


def cuda_wide_ctas_h100(results: Results) -> str:
    """One against two wide CTAs an SM on the 8B linears (H100): us a call in chains of identical calls with and
    without programmatic launch and, at 64 rows, inside the captured W12 verify step and in a graph of the step's
    linears alone (no programmatic launch); then the 64-row verify steps."""

    def us(name: str, linear: str, m: int, kind: str) -> str:
        (r,) = [
            r for r in results(name)["timings"] if (r["model"], r["linear"], r["M"], r["kind"]) == ("qwen3-8b", linear, m, kind)
        ]
        return f"{r['cold_s'] * 1e6:.1f}"

    in_step = [results(name) for name in WIDE_CTAS_IN_STEP]
    alone = [results(name) for name in WIDE_CTAS_ALONE]
    if any(run["rows"] != 64 for run in in_step + alone) or not all(run["linears_only"] for run in alone):
        raise ValueError(f"{WIDE_CTAS_IN_STEP + WIDE_CTAS_ALONE}: expected 64-row runs, the last two of the linears alone")
    rows = []
    for kind, label in (("cuda_w12_wide", "W12"), ("cuda_q_wide", "Q")):
        for linear in ("qkv", "o", "gate_up", "down", "lm_head"):
            for m in (32, 64):
                cells = [label, linear, str(m)]
                cells += [" / ".join(us(name, linear, m, kind) for name in pair) for pair in WIDE_CTAS_RUNS.values()]
                step = kind == "cuda_w12_wide" and m == 64
                for runs in (in_step, alone):
                    cells.append(" / ".join(f"{run['mean_us'][linear]:.1f}" for run in runs) if step else "-")
                rows.append(cells)
    steps = [
        [label, *(f"{results(name)['w12_verify_s'] * 1e3:.2f} ms" for name in pair)] for label, pair in WIDE_CTAS_STEPS.items()
    ]
    return "\n\n".join(
        [
            markdown_table(
                [
                    "8B",
                    "linear",
                    "rows",
                    *(f"{label}: 1 / 2 CTAs (us)" for label in WIDE_CTAS_RUNS),
                    "in the verify step: 1 / 2 CTAs (us)",
                    "the step's linears alone: 1 / 2 CTAs (us)",
                ],
                rows,
            ),
            markdown_table(["W12 verify step, 64 rows", "one CTA an SM", "two CTAs an SM"], steps),
        ]
    )


WIDE_GROUPS_RUNS = ("wide_groups_h100_2026-12-06_groups1.json", "wide_groups_h100_2026-12-06_groups2.json")
WIDE_GROUPS_STEPS = ("ar_step_verify64_h100_2026-12-06_groups1.json", "ar_step_verify64_h100_2026-12-06_groups2.json")


def cuda_wide_groups_h100(results: Results) -> str:
    """One against two consumer stage groups in the wide kernels (H100, one call, no programmatic launch): us a call and
    x cuBLAS bf16 of the same call, 8B and 32B linears at 32 and 64 rows; then the 64-row W12 verify step."""
    runs = [results(name) for name in WIDE_GROUPS_RUNS]
    if [run["provenance"]["env"].get("SPECDEC_WIDE_GROUPS") for run in runs] != ["1", "2"]:
        raise ValueError(f"{WIDE_GROUPS_RUNS}: expected the runs of SPECDEC_WIDE_GROUPS 1 and 2")

    def cell(run: dict, model: str, linear: str, m: int, kind: str) -> str:
        (r,) = [r for r in run["timings"] if (r["model"], r["linear"], r["M"], r["kind"]) == (model, linear, m, kind)]
        return f"{r['cold_s'] * 1e6:.1f} ({r['x_cublas']:.2f}x)"

    rows = []
    for model in ("qwen3-8b", "qwen3-32b"):
        for linear in ("qkv", "o", "gate_up", "down", "lm_head"):
            for m in (32, 64):
                cells = [model, linear, str(m)]
                for kind in ("cuda_w12_wide", "cuda_q_wide"):
                    cells.append(" -> ".join(cell(run, model, linear, m, kind) for run in runs))
                rows.append(cells)
    steps = [results(name) for name in WIDE_GROUPS_STEPS]
    step_row = ["W12 verify step, 64 rows", " -> ".join(f"{run['w12_verify_s'] * 1e3:.2f} ms" for run in steps)]
    return "\n\n".join(
        [
            markdown_table(["model", "linear", "rows", "W12 wide: one -> two groups", "Q wide: one -> two groups"], rows),
            markdown_table(["lean 8B", "one -> two groups"], [step_row]),
        ]
    )


WIDE_RING_RUNS = ("stream_layout_h100_2026-12-06_wide.json", "wide_stream_gemms_h100_2026-12-06.json")


def cuda_wide_ring_h100(results: Results) -> str:
    """The wide kernels' ring without math beside the wide GEMMs of the same call (H100): the probe's time and fraction
    of copy at the wide plan's K split (W12 and Q boxes, 64 weights a row; W12 with 128), then the GEMMs at 64 rows and
    how many times their own ring's time they take."""
    probe, gemms = (results(name) for name in WIDE_RING_RUNS)
    ring = {
        (r["shape"], r["layout"]): r
        for r in probe["probe"]
        if r.get("why") == "plan" and "s" in r and r["layout"].startswith("wide")
    }
    timed = {(r["linear"], r["kind"]): r["cold_s"] for r in gemms["timings"] if r["M"] == 64 and "cold_s" in r}
    rows = []
    for linear in ("qkv", "o", "gate_up", "down", "lm_head"):
        shape = f"8b_{linear}"
        w12, q, w12_128 = (ring[(shape, layout)] for layout in ("wide_w12", "wide_q", "wide128_w12"))
        rows.append(
            [
                linear,
                f"{w12['s'] * 1e6:.1f} ({w12['frac_of_copy']:.2f})",
                f"{w12_128['frac_of_copy']:.2f}",
                f"{q['s'] * 1e6:.1f} ({q['frac_of_copy']:.2f})",
                f"{timed[(linear, 'cuda_w12_wide')] * 1e6:.1f} ({timed[(linear, 'cuda_w12_wide')] / w12['s']:.2f}x)",
                f"{timed[(linear, 'cuda_q_wide')] * 1e6:.1f} ({timed[(linear, 'cuda_q_wide')] / q['s']:.2f}x)",
                f"{timed[(linear, 'cublas_bf16')] * 1e6:.1f}",
            ]
        )
    return markdown_table(
        [
            "8B linear",
            "W12 ring: us (of copy)",
            "W12 ring, 128-weight stages (of copy)",
            "Q ring: us (of copy)",
            "W12 wide GEMM, 64 rows: us (x its ring)",
            "Q wide GEMM: us (x its ring)",
            "cuBLAS bf16 (us)",
        ],
        rows,
    )


WIDE_Q_ROUTE_RUN = "wide_q_route_h100_2026-12-06.json"


def cuda_wide_q_route_h100(results: Results) -> str:
    """The Q view at 17-128 rows: the wide Q kernel against the Triton Q kernel (H100, one call, cuBLAS bf16 in it):
    each linear's us as wide / Triton with the wide kernel's x cuBLAS bf16, and a layer's four linears summed."""
    run = results(WIDE_Q_ROUTE_RUN)
    us = {(r["model"], r["linear"], r["M"], r["kind"]): r["cold_s"] * 1e6 for r in run["timings"] if "cold_s" in r}
    linears = ("qkv", "o", "gate_up", "down", "lm_head")
    rows = []
    for model in ("qwen3-8b", "qwen3-32b"):
        for m in sorted({key[2] for key in us if key[0] == model}):
            cells = [model, str(m)]
            for linear in linears:
                wide, triton, cublas = (us[(model, linear, m, kind)] for kind in ("cuda_q_wide", "triton_q", "cublas_bf16"))
                cells.append(f"{wide:.1f} / {triton:.1f} ({cublas / wide:.2f}x)")
            layer = [sum(us[(model, linear, m, kind)] for linear in linears[:4]) for kind in ("cuda_q_wide", "triton_q")]
            cells.append(f"{layer[0]:.0f} / {layer[1]:.0f}")
            rows.append(cells)
    return markdown_table(
        ["model", "rows", *(f"{linear}: wide / Triton us (wide x cuBLAS)" for linear in linears), "a layer's four (us)"],
        rows,
    )


SPLIT_WORKSPACE_RUNS = {
    mode: (f"split_workspace_h100_2026-12-06_{mode}_ar_step.json", f"split_workspace_h100_2026-12-06_{mode}_w12_64.json")
    for mode in ("per-layout", "shared")
}


def split_workspace_h100(results: Results) -> str:
    """One split-K workspace per plan layout against one a device for every launch (H100, one call): each W12 linear's
    us in the lean 8B target's 64-row verify step, the step's GEMM kernels, the verify and one-token steps."""
    runs = {mode: [results(name) for name in names] for mode, names in SPLIT_WORKSPACE_RUNS.items()}
    for mode, (step, linears) in runs.items():
        if step["provenance"]["env"].get("SPECDEC_SPLIT_WORKSPACE") != mode or linears["rows"] != 64:
            raise ValueError(f"{SPLIT_WORKSPACE_RUNS[mode]}: expected 64-row runs with SPECDEC_SPLIT_WORKSPACE={mode}")

    def pair(value) -> str:
        return " -> ".join(value(*runs[mode]) for mode in SPLIT_WORKSPACE_RUNS)

    rows = [
        [f"{linear} (us)", pair(lambda step, lin, n=linear: f"{lin['mean_us'][n]:.1f}")]
        for linear in ("qkv", "o", "gate_up", "down", "lm_head")
    ]
    rows += [
        ["GEMM kernels a verify step", pair(lambda step, lin: f"{statistics.mean(lin['gemm_us_per_step']) / 1e3:.3f} ms")],
        ["W12 verify step, 64 rows", pair(lambda step, lin: f"{step['w12_verify_s'] * 1e3:.3f} ms")],
        ["bf16 verify step, 64 rows", pair(lambda step, lin: f"{step['bf16_verify_s'] * 1e3:.3f} ms")],
        ["W12 one-token step", pair(lambda step, lin: f"{step['w12_step_s'] * 1e3:.3f} ms")],
        ["bf16 one-token step", pair(lambda step, lin: f"{step['bf16_step_s'] * 1e3:.3f} ms")],
    ]
    return markdown_table(["lean 8B, W12 linears at 64 rows", "per layout -> one a device"], rows)


GOALS_RUN = "goals_h100_2026-12-08_3d8a0e7.json"


def cuda_goals_h100(results: Results) -> str:
    """Every goal of the weight-streaming GEMMs from one call (``benchmarks/kernels/goals.py``): each band of rows'
    worst and best linear on the kernel the library runs there, its kernels' time over their read floors, what they
    would reach at those floors (the bound of any kernel reading the same bytes) and the cases short even there, and
    the steps' ratios."""
    run = results(GOALS_RUN)

    def span(values) -> str:
        return "-" if values is None else f"{values[0]:.2f} - {values[1]:.2f}"

    rows = []
    for goal in run["linear_goals"]:
        for band in goal["bands"]:
            short = band.get("short_at_read_floor")
            rows.append(
                [
                    f"{goal['goal']} >= {goal['target']:.2f}",
                    band["rows"],
                    "-" if band["worst"] is None else f"{band['worst']:.2f} - {band['best']:.2f}",
                    band["worst_case"] or "not timed",
                    span(band["x_read_floor"]),
                    span(band.get("at_read_floor")),
                    "-" if band.get("at_read_floor") is None else f"{len(short)}: {', '.join(short)}" if short else "0",
                    "yes" if band["met"] else "no",
                ]
            )
    for goal in run["step_goals"]:
        sense = ">=" if goal["higher_is_better"] else "<="
        rows.append(
            [
                f"{goal['goal']} {sense} {goal['target']:.2f}",
                "",
                f"{goal['value']:.3f}",
                "",
                "",
                "",
                "",
                "yes" if goal["met"] else "no",
            ]
        )
    head = ["goal", "rows", "worst - best", "worst linear (kernel)", "time over read floor", "at the read floor"]
    return markdown_table([*head, "short even at the floor", "met"], rows)


WIDE_TRACE_PHASES = ("loop", "wait_warps", "sums", "partial", "count", "reduce", "store")


def verify_steps_table(results: Results, steps: dict[str, str], what: str) -> str:
    """The 64-row verify steps of ``bench_roofline --ar-step`` runs (label -> JSON), W12 and bf16, labelled by ``what``."""
    step_rows = [[label, *verify_step_cells(results(name))] for label, name in steps.items()]
    return markdown_table([what, "W12 verify, 64 rows", "bf16 verify, 64 rows"], step_rows)


def wide_trace_and_steps(results: Results, traces: dict[str, str], steps: dict[str, str], what: str) -> list[str]:
    """Two tables of a change to the wide kernels: the 8B o, gate_up and lm_head at 64 rows from ``wide_trace.py``
    runs (label -> JSON; the CTA that ends last, us a phase of ``WIDE_TRACE_PHASES``, then the call's tail and span),
    and the 64-row verify steps of ``bench_roofline --ar-step`` runs (label -> JSON), labelled by ``what``."""
    rows = []
    for label, name in traces.items():
        for r in results(name)["rows"]:
            if r["M"] == 64 and r["linear"] in ("o", "gate_up", "lm_head"):
                cells = [f"{r['linear']} {r['kind'].upper()}, {label}"]
                cells += ["-" if r["critical"][ph] is None else f"{r['critical'][ph] / 1e3:.1f}" for ph in WIDE_TRACE_PHASES]
                rows.append(cells + [f"{r['tail'] / 1e3:.1f}", f"{r['span'] / 1e3:.1f}"])
    return [
        markdown_table(["64 rows, build", *WIDE_TRACE_PHASES, "tail", "span"], rows),
        verify_steps_table(results, steps, what),
    ]


ROUND_TRIP_PASSES = {
    "shipped": ("wide_epilogue_h100_2026-12-06_shipped1.json", "wide_epilogue_h100_2026-12-06_shipped2.json"),
    "one round trip": ("wide_epilogue_h100_2026-12-06_flagged1.json", "wide_epilogue_h100_2026-12-06_flagged2.json"),
}
ROUND_TRIP_TRACES = {
    "shipped": "wide_trace_h100_2026-12-06_epilogue0.json",
    "one round trip": "wide_trace_h100_2026-12-06_epilogue1.json",
}
ROUND_TRIP_STEPS = {
    "shipped": "ar_step_verify64_h100_2026-12-06_epilogue0.json",
    "one round trip": "ar_step_verify64_h100_2026-12-06_epilogue1.json",
}


def cuda_wide_round_trip_h100(results: Results) -> str:
    """The wide kernels' split epilogue before and after it took one L2 round trip (one H100 call): each 8B linear's
    cold time (us, mean of two alternated passes) at 32 and 64 rows by build, then the trace of the CTA that ends last
    at 64 rows (us a phase), then the 64-row W12 verify step."""
    passes = {label: [results(name) for name in names] for label, names in ROUND_TRIP_PASSES.items()}

    def mean_us(runs: list[dict], linear: str, m: int, kind: str) -> float:
        got = [
            r["cold_s"]
            for run in runs
            for r in run["timings"]
            if (r["model"], r["linear"], r["M"], r["kind"]) == ("qwen3-8b", linear, m, kind) and "cold_s" in r
        ]
        if len(got) != len(runs):
            raise ValueError(f"qwen3-8b {linear} M={m} {kind}: expected a time in each of {len(runs)} passes, got {len(got)}")
        return 1e6 * statistics.mean(got)

    rows = []
    for linear in ("qkv", "o", "gate_up", "down", "lm_head"):
        for m in (32, 64):
            cells = [linear, str(m)]
            for kind in ("cuda_w12_wide", "cuda_q_wide"):
                before, after = (mean_us(runs, linear, m, kind) for runs in passes.values())
                cells.append(f"{before:.1f} -> {after:.1f}")
            rows.append(cells)
    return "\n\n".join(
        [
            markdown_table(["8B linear", "rows", "W12 us", "Q us"], rows),
            *wide_trace_and_steps(results, ROUND_TRIP_TRACES, ROUND_TRIP_STEPS, "epilogue"),
        ]
    )


TOKEN_MAJOR_PASSES = {
    "one escape warp, [128][65] tile": "wide_token_major_h100_2026-12-06_base.json",
    "token-major tile, an escape warp a 32-token block": "wide_token_major_h100_2026-12-06_this.json",
}
TOKEN_MAJOR_TRACES = {
    "one escape warp (earlier call)": "wide_trace_h100_2026-12-06_epilogue1.json",
    "an escape warp a 32-token block": "wide_trace_h100_2026-12-06_token_major.json",
}
TOKEN_MAJOR_STEPS = {
    "one escape warp, [128][65] tile": "ar_step_verify64_h100_2026-12-06_token_major0.json",
    "token-major tile, an escape warp a 32-token block": "ar_step_verify64_h100_2026-12-06_token_major1.json",
}


def wide_pass_pair_rows(
    before: dict,
    after: dict,
    rows_of: tuple[int, ...] = (32, 64),
    linears: tuple[str, ...] = ("qkv", "o", "gate_up", "down", "lm_head"),
) -> list[list[str]]:
    """Rows of two ``bench_wide_w12`` runs side by side: each 8B and 32B linear of ``linears`` at ``rows_of`` rows,
    the W12 and Q wide kernels' cold us (x cuBLAS bf16 of the same run) as ``before -> after``."""

    def timing(run: dict, model: str, linear: str, m: int, kind: str) -> dict:
        got = [
            r
            for r in run["timings"]
            if (r["model"], r["linear"], r["M"], r["kind"]) == (model, linear, m, kind) and "cold_s" in r
        ]
        if len(got) != 1:
            raise ValueError(f"{model} {linear} M={m} {kind}: expected one timing, got {len(got)}")
        return got[0]

    rows = []
    for model in ("qwen3-8b", "qwen3-32b"):
        for linear in linears:
            for m in rows_of:
                cells = [model, linear, str(m)]
                for kind in ("cuda_w12_wide", "cuda_q_wide"):
                    a, b = (timing(run, model, linear, m, kind) for run in (before, after))
                    cells.append(
                        f"{1e6 * a['cold_s']:.1f} ({a['x_cublas']:.2f}x) -> {1e6 * b['cold_s']:.1f} ({b['x_cublas']:.2f}x)"
                    )
                rows.append(cells)
    return rows


def cuda_wide_token_major_h100(results: Results) -> str:
    """The wide kernels with a token-major sums' tile and an escape warp a 32-token block against the library before
    them (one H100 call, two libraries): each linear's cold time at 32 and 64 rows (us, x cuBLAS bf16 of the same pass),
    the trace of the CTA that ends last at 64 rows (us a phase; the earlier build's trace from the call before, on
    another H100), then the 64-row verify step."""
    rows = wide_pass_pair_rows(*(results(name) for name in TOKEN_MAJOR_PASSES.values()))
    return "\n\n".join(
        [
            markdown_table(["model", "linear", "rows", "W12 us (x cuBLAS)", "Q us (x cuBLAS)"], rows),
            *wide_trace_and_steps(results, TOKEN_MAJOR_TRACES, TOKEN_MAJOR_STEPS, "library"),
        ]
    )


STREAM_K_PASSES = {
    "split-K": "wide_stream_k_h100_2026-12-06_d2f5342_off.json",
    "persistent": "wide_stream_k_h100_2026-12-06_d2f5342_on.json",
}
STREAM_K_STEPS = {
    "split-K": "ar_step_verify64_h100_2026-12-06_stream_k_int_off.json",
    "persistent on every call": "ar_step_verify64_h100_2026-12-06_stream_k_int_on.json",
}


def cuda_wide_stream_k_h100(results: Results) -> str:
    """The persistent wide kernel (every wide call persistent) against the split-K one, one H100 call: each linear's
    cold time at 32 and 64 rows (us, x cuBLAS bf16 of the same run); then, from an earlier call with the kernel of
    f0358b6, the 64-row verify step with the split-K kernel and with the persistent one on every call."""
    rows = wide_pass_pair_rows(*(results(name) for name in STREAM_K_PASSES.values()))
    return "\n\n".join(
        [
            markdown_table(["model", "linear", "rows", "W12 us (x cuBLAS)", "Q us (x cuBLAS)"], rows),
            verify_steps_table(results, STREAM_K_STEPS, "wide kernel"),
        ]
    )


STREAM_K_AUTO_PASSES = {
    "split-K": "wide_stream_k_h100_2026-12-06_8f902f5_rows_off.json",
    "auto": "wide_stream_k_h100_2026-12-06_8f902f5_rows_auto.json",
}
STREAM_K_AUTO_Q_PASSES = {
    "split-K, call 1 (c10307c)": "q_pass64_h100_2026-12-06_c10307c_stream_k_off.json",
    "auto, call 1 (c10307c)": "q_pass64_h100_2026-12-06_c10307c_stream_k_auto.json",
    "split-K, call 2 (d2f5342)": "q_pass64_h100_2026-12-06_d2f5342_stream_k_off.json",
    "auto, call 2 (d2f5342)": "q_pass64_h100_2026-12-06_d2f5342_stream_k_auto.json",
}
STREAM_K_AUTO_Q_ALTERNATED = "q_pass64_h100_2026-12-06_8f902f5_alternate.json"


def alternated_pass_rows(run: dict, rows: int, labels: dict[str, str]) -> list[list[str]]:
    """A ``bench_two_level --alternate`` run's passes of ``rows`` rows, one table row a value of its variable (labels:
    value -> label, in the table's order): the median over its turns of the exact and Q passes (ms), each turn's Q
    pass, and Q / exact of the medians."""
    out = []
    for value, label in labels.items():
        turns = [p for p in run["alternated"] if p["rows"] == rows and p["value"] == value]
        if not turns:
            raise ValueError(f"no {rows}-row passes under {value!r} in the alternated run")
        exact = statistics.median(p["exact_ms"] for p in turns)
        q = statistics.median(p["q_ms"] for p in turns)
        each = " ".join(f"{p['q_ms']:.3f}" for p in sorted(turns, key=lambda p: p["round"]))
        out.append([label, f"{exact:.3f}", f"{q:.3f} ({each})", f"{q / exact:.2f}"])
    return out


def cuda_wide_stream_k_auto_h100(results: Results) -> str:
    """The default persistent rule (``$SPECDEC_WIDE_STREAM_K=auto``) against split-K only, one H100 call: the gate_up
    calls (the ones it changes) at 17, 96 and 128 rows (us, x cuBLAS bf16 of the same run), then the 8B target's
    64-row Q-view pass beside its exact pass: two earlier calls, one process a rule, then both rules taken in turn
    three times in one process (the median and each turn's Q pass)."""
    rows = wide_pass_pair_rows(
        *(results(name) for name in STREAM_K_AUTO_PASSES.values()), rows_of=(17, 96, 128), linears=("gate_up",)
    )
    passes = []
    for label, name in STREAM_K_AUTO_Q_PASSES.items():
        (p,) = [p for p in results(name)["pass_times"] if p["rows"] == 64]
        passes.append([label, f"{p['exact_ms']:.3f}", f"{p['q_ms']:.3f}", f"{p['q_over_exact']:.2f}"])
    passes += alternated_pass_rows(
        results(STREAM_K_AUTO_Q_ALTERNATED), 64, {"0": "split-K, in turn (8f902f5)", "auto": "auto, in turn (8f902f5)"}
    )
    return "\n\n".join(
        [
            markdown_table(["model", "linear", "rows", "W12 us (x cuBLAS)", "Q us (x cuBLAS)"], rows),
            markdown_table(["persistent rule", "exact pass, 64 rows (ms)", "Q pass, 64 rows (ms)", "Q / exact"], passes),
        ]
    )


STREAM_K_TRACES = {
    "split-K": "wide_trace_stream_k_h100_2026-12-06_a4f4096_0.json",
    "persistent": "wide_trace_stream_k_h100_2026-12-06_a4f4096_1.json",
}
SPLIT_EPILOGUE = ("sums", "partial", "count", "reduce", "store")


def stream_k_trace_table(results: Results, traces: dict[str, str]) -> str:
    """Traced wide calls (``wide_trace.py`` runs, label -> JSON): for each call at 64 rows, the CTAs that ran, the
    call's span and a CTA's median K loop, wait for its other warps and epilogue (us; split-K: its sums, partial tile,
    count, reduction and store; persistent: summed over its segments, with their count)."""
    rows = []
    for how, name in traces.items():
        for r in results(name)["rows"]:
            med = r["median"]
            if r["persistent"]:
                epilogue, segments = med["epilogue"], f"{med['segments']:g}"
            else:
                epilogue, segments = sum(med[ph] or 0 for ph in SPLIT_EPILOGUE), "1"
            ctas = statistics.median(c["ctas"] for c in r["calls"])  # the CTAs that ran
            cells = [r["span"], med["loop"], med["wait_warps"], epilogue]
            rows.append(
                [r["linear"], str(r["M"]), r["kind"].upper(), how, f"{ctas:g}"] + [f"{v / 1e3:.1f}" for v in cells] + [segments]
            )
    header = ["linear", "rows", "kind", "kernel", "CTAs", "span us", "loop us", "wait us", "epilogue us", "segments"]
    return markdown_table(header, rows)


def cuda_wide_stream_k_trace_h100(results: Results) -> str:
    """The persistent wide kernel's phases against the split-K one's (one H100 call, builds with
    ``-DSPECDEC_WIDE_TRACE=1``; ``stream_k_trace_table``)."""
    return stream_k_trace_table(results, STREAM_K_TRACES)


EPILOGUE_TID_TRACES = {
    "persistent, index kept from the start": "wide_trace_stream_k_h100_2026-12-07_7cf86ba_1.json",
    "persistent, index read in the epilogue": "wide_trace_stream_k_h100_2026-12-07_7cf86ba_flagged.json",
}
EPILOGUE_TID_PASSES = {
    "persistent forced": (
        "wide_build_ab_stream_k1_h100_2026-12-07_7cf86ba_shipped1.json",
        "wide_build_ab_stream_k1_h100_2026-12-07_7cf86ba_flagged1.json",
    ),
    "auto": ("wide_build_ab_h100_2026-12-07_7cf86ba_shipped1.json", "wide_build_ab_h100_2026-12-07_7cf86ba_flagged1.json"),
}
EPILOGUE_TID_STEPS = {
    "persistent forced, index kept": "wide_build_ab_stream_k1_h100_2026-12-07_7cf86ba_ar_step_shipped.json",
    "persistent forced, index read": "wide_build_ab_stream_k1_h100_2026-12-07_7cf86ba_ar_step_flagged.json",
    "auto, index kept": "wide_build_ab_h100_2026-12-07_7cf86ba_ar_step_shipped.json",
    "auto, index read (the library now)": "wide_build_ab_h100_2026-12-07_7cf86ba_ar_step_flagged.json",
}


def cuda_wide_epilogue_tid_h100(results: Results) -> str:
    """The persistent W12 kernels with their store loops' thread index read in each segment's epilogue (no spills in
    the unrolled ones) against the index kept from the kernel's start (three H100 calls): the traced 64-row calls
    (persistent forced), each linear's cold time at 64 rows (us, x cuBLAS bf16 of the same pass) with the persistent
    kernel forced and under ``auto``, then the 64-row verify steps."""
    tables = [stream_k_trace_table(results, EPILOGUE_TID_TRACES)]
    for how, (before, after) in EPILOGUE_TID_PASSES.items():
        rows = wide_pass_pair_rows(results(before), results(after), rows_of=(64,))
        tables.append(markdown_table(["model", "linear", "rows", f"W12 us, {how} (x cuBLAS)", "Q us (x cuBLAS)"], rows))
    tables.append(verify_steps_table(results, EPILOGUE_TID_STEPS, "library, rule"))
    return "\n\n".join(tables)


def rows_ab_runs(prefix: str, libraries: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """``run_h200_rows_ab.sh``'s two alternated runs of each library of one call, by label: ``libraries`` maps a label
    to the runner's name for the library (``shipped``, or its flags' label), ``prefix`` is the call's file prefix.

    Example:
        >>> rows_ab_runs("rows_ab_x", {"shipped": "shipped"})
        {'shipped': ('rows_ab_x_shipped1.json', 'rows_ab_x_shipped2.json')}
    """
    return {label: tuple(f"{prefix}_{name}{run}.json" for run in (1, 2)) for label, name in libraries.items()}


def rows_ab_step_runs(prefix: str, libraries: dict[str, str]) -> dict[str, str]:
    """``run_h200_rows_ab.sh``'s AR-step run of each library of one call, by label (as ``rows_ab_runs``).

    Example:
        >>> rows_ab_step_runs("rows_ab_x", {"shipped": "shipped"})
        {'shipped': 'rows_ab_x_ar_step_shipped.json'}
    """
    return {label: f"{prefix}_ar_step_{name}.json" for label, name in libraries.items()}


ROWS_X_RUNS = rows_ab_runs(
    "rows_ab_h100_2026-12-07_7cf86ba",
    {"shipped": "shipped", "without x's box": "wide_ablate_64", "clusters of two": "rows_cluster_2"},
)
ROWS_X_KINDS = {"cuda_w12_v10": "W12", "cuda_q_v5": "Q", "cuda_bf16_v5": "bf16"}
MODEL_SIZES = {"qwen3-8b": "8B", "qwen3-32b": "32B"}


def rows_ab_table(
    results: Results,
    runs_of: dict[str, tuple[str, ...]],
    linears: tuple[str, ...],
    models: tuple[str, ...] = ("qwen3-8b",),
    kinds: dict[str, str] = ROWS_X_KINDS,
) -> str:
    """The ``models``' ``linears`` at 1, 8 and 16 tokens by kind (``kinds``: kind -> its name in the table), cold us,
    the mean over each label's runs (``run_h200_rows_ab.sh``'s alternated processes of one library); a run without one
    of the calls raises."""
    runs = {label: [results(name) for name in names] for label, names in runs_of.items()}

    def mean_us(label: str, model: str, linear: str, m: int, kind: str) -> float:
        key = (model, linear, m, kind)
        got = [r["cold_s"] for run in runs[label] for r in run["shapes"] if (r["model"], r["linear"], r["M"], r["kind"]) == key]
        if len(got) != len(runs[label]):
            raise ValueError(
                f"{label}: {model} {linear} M={m} {kind}: expected a time in each of {len(runs[label])} runs, got {len(got)}"
            )
        return 1e6 * statistics.mean(got)

    rows = []
    for model in models:
        for linear in linears:
            for kind, name in kinds.items():
                for m in (1, 8, 16):
                    cells = (f"{mean_us(label, model, linear, m, kind):.1f}" for label in runs)
                    rows.append([*([MODEL_SIZES[model]] if len(models) > 1 else []), linear, name, str(m), *cells])
    head = ["model", "linear"] if len(models) > 1 else [f"{MODEL_SIZES[models[0]]} linear"]
    return markdown_table([*head, "kind", "tokens", *(f"{label} us" for label in runs)], rows)


def cuda_rows_x_h100(results: Results) -> str:
    """The 1-16 token row tiles with x's box left out (``-DSPECDEC_WIDE_ABLATE=64``, products wrong) and launched in
    clusters of two that copied x once (``-DSPECDEC_ROWS_CLUSTER=2``, since removed), against the shipped library (one
    H100 call, ``run_h200_rows_ab.sh``): the 8B qkv, o and down at 1-16 tokens, cold us, the mean of two alternated
    processes a library (the Q down at 16 tokens is not a row-tile call: alike in all three)."""
    return rows_ab_table(results, ROWS_X_RUNS, ("qkv", "o", "down"))


ROWS_EXTRA_COPY_RUNS = rows_ab_runs(
    "rows_ab_h100_2026-12-07_9070564", {"shipped": "shipped", "one more copy a stage": "rows_extra_copy_1"}
)


def cuda_rows_extra_copy_h100(results: Results) -> str:
    """The 1-16 token row tiles with one more copy a stage (``-DSPECDEC_ROWS_EXTRA_COPY=1``, 16 bytes that nothing
    reads, since removed) against the shipped library (one H100 call, ``run_h200_rows_ab.sh``): the 8B qkv, o, gate_up
    and down, cold us, the mean of two alternated processes a library (W12 and bf16 gate_up run the tensor-map kernel,
    which the switch left alone)."""
    return rows_ab_table(results, ROWS_EXTRA_COPY_RUNS, ("qkv", "o", "gate_up", "down"))


TENSOR_MAP_ABLATIONS_RUNS = rows_ab_runs(
    "rows_ab_h100_2026-12-07_d05e129_call1",
    {"shipped": "shipped", "no x box (128)": "wide_ablate_128", "no bank conflicts (256)": "wide_ablate_256"},
)


def cuda_tensor_map_ablations_h100(results: Results) -> str:
    """The 1-16 token kernels with x's box left out of the 64-row tensor-map kernels (``-DSPECDEC_WIDE_ABLATE=128``)
    and with every 64-row tensor-map and row-tile consumer's stage loads moved off their bank conflicts (``256``),
    products wrong in both, against the shipped library (one H100 call, ``run_h200_rows_ab.sh`` with the 32B linears):
    the 8B and 32B qkv and o, cold us, the mean of two alternated processes a library."""
    return rows_ab_table(results, TENSOR_MAP_ABLATIONS_RUNS, ("qkv", "o"), models=("qwen3-8b", "qwen3-32b"))


ROWS_X_RESIDENT_RUNS = rows_ab_runs(
    "rows_ab_h100_2026-12-07_d05e129_call2", {"shipped": "shipped", "x resident": "rows_x_resident_1"}
)


def cuda_rows_x_resident_h100(results: Results) -> str:
    """The Q view's row tiles with all of x copied into shared memory at the call's start (``-DSPECDEC_ROWS_X_RESIDENT=1``,
    since removed: it took the Q view at one token only, of 1, 8 and 16) against the shipped library (one H100 call,
    ``run_h200_rows_ab.sh``): the 8B and 32B qkv, o, gate_up and down, cold us, the mean of two alternated processes a
    library."""
    return rows_ab_table(
        results, ROWS_X_RESIDENT_RUNS, ("qkv", "o", "gate_up", "down"), models=("qwen3-8b", "qwen3-32b"), kinds={"cuda_q_v5": "Q"}
    )


WEIGHT_L2_RUNS = rows_ab_runs(
    "rows_ab_h100_2026-12-07_ec3b00e",
    {"shipped": "shipped", "evict-normal weights": "weight_l2_policy_1", "128-byte promotion": "weight_l2_promotion_128"},
)


def cuda_weight_l2_h100(results: Results) -> str:
    """The 1-16 token kernels with their weights loaded evict-normal instead of evict-first
    (``-DSPECDEC_WEIGHT_L2_POLICY=1``) and with the weight planes' tensor maps promoting 128 bytes to the L2 instead of
    256 (``-DSPECDEC_WEIGHT_L2_PROMOTION=128``), both since removed, against the shipped library (one H100 call,
    ``run_h200_rows_ab.sh`` with the 32B linears): the 8B and 32B qkv, gate_up and lm_head, cold us, the mean of two
    alternated processes a library."""
    return rows_ab_table(results, WEIGHT_L2_RUNS, ("qkv", "gate_up", "lm_head"), models=("qwen3-8b", "qwen3-32b"))


PERSISTENT_TRACES = {
    "shipped": (
        "persistent_trace_h100_2026-12-07_e516342_shipped_qwen3-32b_qkv.json",
        "persistent_trace_h100_2026-12-07_e516342_shipped_qwen3-8b_gate_up.json",
    ),
    "count at end + loads at once": (
        "persistent_trace_h100_2026-12-07_e516342_flagged_qwen3-32b_qkv.json",
        "persistent_trace_h100_2026-12-07_e516342_flagged_qwen3-8b_gate_up.json",
    ),
    "loads at once (the library now; a later call)": (
        "persistent_trace_h100_2026-12-07_f0f2970_shipped_qwen3-32b_qkv.json",
        "persistent_trace_h100_2026-12-07_f0f2970_shipped_qwen3-8b_gate_up.json",
    ),
}


def cuda_persistent_trace_h100(results: Results) -> str:
    """The 1-16 token persistent tensor-map kernel's phases (two H100 calls, builds with ``-DSPECDEC_WIDE_TRACE=1``,
    ``run_h200_persistent_trace.sh``): for each traced call the span and tail, then per CTA its K loops, its segments'
    epilogues and the sums it owes after its run (median CTA / the CTA that ends last, us), and when its producer
    issued its last copy; the library before, with the pieces counted after the run and the owed sums' loads at once
    (one call), and the library with the loads at once (a later call)."""
    rows = []
    for how, names in PERSISTENT_TRACES.items():
        for name in names:
            for r in results(name)["rows"]:
                med, crit = r["median"], r["critical"]

                def pair(ph, med=med, crit=crit):
                    return f"{med[ph] / 1e3:.1f} / {crit[ph] / 1e3:.1f}"

                model = MODEL_SIZES[r["model"]]
                cells = [
                    f"{r['span'] / 1e3:.1f}",
                    f"{r['tail'] / 1e3:.1f}",
                    *(pair(ph) for ph in ("loop", "epilogue", "finish", "issued")),
                ]
                rows.append([f"{model} {r['linear']}", str(r["M"]), r["kind"], how, *cells])
    header = [
        "linear",
        "tokens",
        "entry point",
        "library",
        "span us",
        "tail us",
        "loop us",
        "epilogues us",
        "finish us",
        "issued us",
    ]
    return markdown_table(header, rows)


EPILOGUE_PARTS_TRACES = (
    "persistent_trace_h100_2026-12-07_e24b60e_shipped_qwen3-32b_qkv.json",
    "persistent_trace_h100_2026-12-07_e24b60e_shipped_qwen3-8b_gate_up.json",
)


def cuda_persistent_epilogue_parts_h100(results: Results) -> str:
    """The 1-16 token persistent kernel's segment epilogues split (one H100 call, a build with
    ``-DSPECDEC_WIDE_TRACE=1``, ``run_h200_persistent_trace.sh``): summed over a CTA's run, median CTA / the CTA that
    ends last, us: all of them, the halves' and escape sums, the partial tiles' stores, and the rest (the fence and
    count, or a whole block's rows)."""
    rows = []
    for name in EPILOGUE_PARTS_TRACES:
        for r in results(name)["rows"]:
            med, crit = r["median"], r["critical"]
            cells = (f"{med[ph] / 1e3:.1f} / {crit[ph] / 1e3:.1f}" for ph in ("epilogue", "epi_sums", "epi_store", "epi_rest"))
            rows.append([f"{MODEL_SIZES[r['model']]} {r['linear']}", str(r["M"]), r["kind"], *cells])
    return markdown_table(["linear", "tokens", "entry point", "epilogues us", "sums us", "partial stores us", "rest us"], rows)


COUNT_AT_END_RUNS = rows_ab_runs(
    "rows_ab_h100_2026-12-07_e516342",
    {
        "shipped": "shipped",
        "count at end": "stream_k_count_at_end_1",
        "count at end + loads at once": "stream_k_count_at_end_1_stream_k_finish_loads_1",
    },
)


def cuda_count_at_end_h100(results: Results) -> str:
    """The persistent kernel with its pieces counted after its run (``-DSPECDEC_STREAM_K_COUNT_AT_END=1``, since
    removed) and with that and the last sums' loads at once, against the library before both (one H100 call,
    ``run_h200_rows_ab.sh`` with the 32B linears): the 8B and 32B qkv and gate_up, cold us, the mean of two alternated
    processes a library."""
    return rows_ab_table(results, COUNT_AT_END_RUNS, ("qkv", "gate_up"), models=("qwen3-8b", "qwen3-32b"))


FINISH_LOADS_RUNS = rows_ab_runs(
    "rows_ab_h100_2026-12-07_e49ecc4", {"value after value": "shipped", "loads at once (the library now)": "finish_loads_1"}
)


def cuda_finish_loads_h100(results: Results) -> str:
    """A row block's last sum with each thread's loads of four partial tiles issued together (``sum_partial_tiles``,
    the library's since) against value after value (one H100 call, ``run_h200_rows_ab.sh`` with the 32B linears,
    ``-DSPECDEC_FINISH_LOADS=1``): the 8B and 32B qkv, o, gate_up and down, cold us, the mean of two alternated processes
    a library."""
    return rows_ab_table(results, FINISH_LOADS_RUNS, ("qkv", "o", "gate_up", "down"), models=("qwen3-8b", "qwen3-32b"))


ACQ_REL_COUNTS_RUNS = rows_ab_runs(
    "rows_ab_h100_2026-12-07_fc6db86",
    {"fences (before)": "shipped", "acquire-release adds (the library now)": "acq_rel_counts_1"},
)


def cuda_acq_rel_counts_h100(results: Results) -> str:
    """The 1-16 token kernels' partial tiles counted with one thread's acquire-release add after the CTA's barrier (the
    library's since) against a fence in every thread before the count and before the last sum (one H100 call,
    ``run_h200_rows_ab.sh`` with the 32B linears, ``-DSPECDEC_ACQ_REL_COUNTS=1``): cold us, the mean of two
    alternated processes a library."""
    return rows_ab_table(results, ACQ_REL_COUNTS_RUNS, ("qkv", "o", "gate_up", "down"), models=("qwen3-8b", "qwen3-32b"))


STEP_TREES_RUNS = {
    "before": (
        "step_trees_h100_2026-12-07_a251610_before_fc6db86_1.json",
        "step_trees_h100_2026-12-07_a251610_before_fc6db86_2.json",
    ),
    "after": ("step_trees_h100_2026-12-07_a251610_after_1.json", "step_trees_h100_2026-12-07_a251610_after_2.json"),
}
STEP_TREES_STEPS = {
    "bf16, cuBLAS linears": ("bf16_step_s", "bf16_verify_s"),
    "bf16, skinny linears": ("bf16_skinny_step_s", "bf16_skinny_verify_s"),
    "W12": ("w12_step_s", "w12_verify_s"),
}


def cuda_verify_attention_h100(results: Results) -> str:
    """The lean 8B target's one-token and 16-row verify steps with the attention's output transposed by a copy (the
    package at fc6db86) and written token-major by the split-KV kernel (a251610), the same library, two alternated
    processes a tree in one H100 call (``run_h200_step_trees.sh``): ms, each process's, and the verify step over the
    one-token step of the mean."""
    return step_trees_table(results, STEP_TREES_RUNS)


ATTENTION_ROWS_RUNS = {
    "before (one program a batch-head and split)": (
        "step_trees_h100_2026-12-07_6168c96_before_933f389_1.json",
        "step_trees_h100_2026-12-07_6168c96_before_933f389_2.json",
    ),
    "programs of 16 rows": ("step_trees_h100_2026-12-07_6168c96_after_1.json", "step_trees_h100_2026-12-07_6168c96_after_2.json"),
}
X_FIRST_RUNS = rows_ab_runs("rows_ab_h100_2026-12-07_6168c96", {"shipped": "shipped", "x first": "rows_x_first_1"})
X_FIRST_STEPS = rows_ab_step_runs("rows_ab_h100_2026-12-07_6168c96", {"shipped": "shipped", "x first": "rows_x_first_1"})


def cuda_attention_rows_x_first_h100(results: Results) -> str:
    """Two changes measured level and reverted (H100, 2026-12-07): the split-KV attention's first launch in programs of
    16 query rows, timed against the package at 933f389 (``run_h200_step_trees.sh``, the same library, two alternated
    processes a tree), and a 9-16 token row-tile stage's x copied before its weights (``-DSPECDEC_ROWS_X_FIRST=1``,
    ``run_h200_rows_ab.sh``: the 8B linears at 16 tokens, cold us, the mean of two alternated processes a library, then
    the W12 steps, a process each)."""
    attention = step_trees_table(results, ATTENTION_ROWS_RUNS)
    linears = rows_ab_table(results, X_FIRST_RUNS, ("qkv", "o", "gate_up", "down", "lm_head"))
    return attention + "\n\n" + linears + "\n\n" + rows_ab_w12_steps(results, X_FIRST_STEPS)


def rows_ab_w12_steps(results: Results, steps_of: dict[str, str]) -> str:
    """``run_h200_rows_ab.sh``'s AR-step runs by library (``steps_of``: label -> its JSON): the W12 one-token and
    16-row verify steps, ms, and their ratio."""
    rows = []
    for label, name in steps_of.items():
        run = results(name)
        step, verify = run["w12_step_s"] * 1e3, run["w12_verify_s"] * 1e3
        rows.append([label, f"{step:.3f}", f"{verify:.3f}", f"{verify / step:.3f}"])
    return markdown_table(["library", "W12 one-token step ms", "W12 16-row verify step ms", "verify / step"], rows)


def step_trees_table(results: Results, runs_of: dict[str, tuple[str, ...]]) -> str:
    """``run_h200_step_trees.sh``'s steps by tree (``runs_of``: label -> its processes' JSON): each process's one-token
    and 16-row verify step ms, and the verify step over the one-token step of the means."""
    runs = {label: [results(name) for name in names] for label, names in runs_of.items()}
    rows = []
    for name, (step_key, verify_key) in STEP_TREES_STEPS.items():
        cells = [name]
        for label in runs:
            steps = [run[step_key] * 1e3 for run in runs[label]]
            verifies = [run[verify_key] * 1e3 for run in runs[label]]
            cells += [
                " / ".join(f"{v:.3f}" for v in steps),
                " / ".join(f"{v:.3f}" for v in verifies),
                f"{statistics.mean(verifies) / statistics.mean(steps):.3f}",
            ]
        rows.append(cells)
    header = ["step"]
    for label in runs:
        header += [f"{label}: one token ms", f"{label}: 16 rows ms", f"{label}: 16 rows / one token"]
    return markdown_table(header, rows)


W12_FAMILY_STEP_RUNS = {
    "16 rows, programmatic launch": "step_alternate_h100_2026-12-07_680cc61.json",
    "8 rows, programmatic launch": "step_alternate_h100_2026-12-07_680cc61_r8.json",
    "16 rows, without it": "step_alternate_h100_2026-12-07_680cc61_nopdl.json",
}
W12_FAMILY_NAMES = {
    "v10": "v10 (the rule before: persistent 8B gate_up and lm_head)",
    "v8": "v8 (persistent everywhere)",
    "v9": "v9 (row tiles everywhere: the rule now on the 8B)",
}


def cuda_w12_family_step_h100(results: Results) -> str:
    """The lean 8B W12 target's one-token and verify steps with each W12 kernel family, alternated in one process
    (``run_h200_step_alternate.sh SPECDEC_W12_CUDA_VARIANT``, three turns a family; two H100 calls): the median ms of
    the turns and the verify step over the one-token step."""
    rows = []
    for setting, name in W12_FAMILY_STEP_RUNS.items():
        run = results(name)
        if not run.get("alternated"):
            raise ValueError(f"{name}: expected alternated turns")
        for value in dict.fromkeys(t["value"] for t in run["alternated"]):
            turns = [t for t in run["alternated"] if t["value"] == value]
            step = statistics.median(t["step_s"] for t in turns) * 1e3
            verify = statistics.median(t["verify_s"] for t in turns) * 1e3
            rows.append([setting, W12_FAMILY_NAMES[value], f"{step:.3f}", f"{verify:.3f}", f"{verify / step:.3f}"])
    return markdown_table(["verify step", "W12 kernels", "one-token step ms", "verify step ms", "verify / step"], rows)


ROWS_X_RING_RUNS = rows_ab_runs(
    "rows_ab_h100_2026-12-07_724b274",
    {"shipped": "shipped", "x ring of 2": "rows_x_stages_2", "x ring of 3": "rows_x_stages_3"},
)
ROWS_X_RING_STEPS = rows_ab_step_runs(
    "rows_ab_h100_2026-12-07_724b274",
    {"shipped": "shipped", "x ring of 2": "rows_x_stages_2", "x ring of 3": "rows_x_stages_3"},
)


def cuda_rows_x_ring_h100(results: Results) -> str:
    """The 9-16 token row tiles with x in a ring of its own of 2 or 3 slots and deeper weight rings
    (``-DSPECDEC_ROWS_X_STAGES``, since removed) against the shipped library (one H100 call, ``run_h200_rows_ab.sh``):
    the 8B linears, cold us, the mean of two alternated processes a library, then the lean 8B W12 target's one-token
    and 16-row verify steps with each library (a process each)."""
    linears = rows_ab_table(results, ROWS_X_RING_RUNS, ("qkv", "o", "gate_up", "down", "lm_head"))
    return linears + "\n\n" + rows_ab_w12_steps(results, ROWS_X_RING_STEPS)


ROWS_NCU_RUN = "ncu_rows16_h100_2026-12-07_8b380c5.json"
ROWS_NCU_KERNELS = {"cuda_w12_v9": "W12", "cuda_q_v4": "Q"}
ROWS_TILE32_RUNS = rows_ab_runs("rows_ab_h100_2026-12-07_8b380c5", {"shipped": "shipped", "32-row CTAs": "rows_tile32_1"})
ROWS_TILE32_STEPS = rows_ab_step_runs("rows_ab_h100_2026-12-07_8b380c5", {"shipped": "shipped", "32-row CTAs": "rows_tile32_1"})


def rows_ncu_table(results: Results, name: str) -> str:
    """The row-tile kernels under ncu (``run_h200_ncu.sh rows_16``): each profiled range's time, the DRAM's rate as a
    fraction of the copy's, the L2's bytes, busy and hit shares and the issue rate; a range without the L2's counters
    raises."""
    rows = []
    for r in results(name)["records"]:
        if r.get("l2_bytes") is None or r.get("l2_pct") is None:
            raise ValueError(f"{name}: {r['range']}: expected the L2's counters (lts__t_bytes, lts__throughput)")
        rows.append(
            [
                r["shape"].removeprefix("8b_"),
                ROWS_NCU_KERNELS[r["kernel"]],
                str(r["M"]),
                f"{r['duration_s'] * 1e6:.1f}",
                f"{r['frac_of_copy']:.2f}",
                f"{r['l2_bytes'] / 1e6:.0f}",
                f"{r['l2_pct']:.0f} %",
                f"{r['l2_hit_pct']:.0f} %",
                f"{r['issue_pct']:.0f} %",
            ]
        )
    header = ["8B linear", "kind", "tokens", "us (ncu)", "DRAM of copy", "L2 MB", "L2 busy", "L2 hit", "issue active"]
    return markdown_table(header, rows)


def cuda_rows_tile32_h100(results: Results) -> str:
    """The row tiles at 1, 8 and 16 tokens under ncu (one H100 call), then CTAs of two 16-row tiles at 9-16 tokens
    (``-DSPECDEC_ROWS_TILE32=1``, since removed) against the shipped library (the same call, ``run_h200_rows_ab.sh``):
    the 8B linears, cold us, the mean of two alternated processes a library, then the W12 steps, a process each."""
    ncu = rows_ncu_table(results, ROWS_NCU_RUN)
    linears = rows_ab_table(results, ROWS_TILE32_RUNS, ("qkv", "o", "gate_up", "down", "lm_head"))
    return ncu + "\n\n" + linears + "\n\n" + rows_ab_w12_steps(results, ROWS_TILE32_STEPS)


ROWS_BY_SM_RUNS = tuple(
    f"persistent_trace_rows_h100_2026-12-07_9aa2b78_qwen3-8b_{linear}.json" for linear in ("qkv", "o", "down")
)
ROWS_BY_SM_KINDS = {"w12_v9": "W12", "q_v4": "Q", "bf16_v4": "bf16"}
RELEASE_STAGES_LIBRARIES = {
    "shipped": "shipped",
    "released on its loads": "release_on_loads_1",
    "3 stages at 9-16 tokens": "rows_stages16_3",
}
RELEASE_STAGES_RUNS = rows_ab_runs("rows_ab_h100_2026-12-07_9aa2b78", RELEASE_STAGES_LIBRARIES)
RELEASE_STAGES_STEPS = rows_ab_step_runs("rows_ab_h100_2026-12-07_9aa2b78", RELEASE_STAGES_LIBRARIES)


def rows_by_sm_table(results: Results, names: tuple[str, ...]) -> str:
    """The traced row tiles' K-loop ends by SM (``wide_trace.sm_effect`` over each case's calls): the correlation of the
    SMs' means between the even and the odd calls, the spread of the SMs' means against one SM's own CTAs' spread, and
    the mean loop end of the SMs by how many CTAs they ran (us); a case without the by-SM record raises."""
    rows = []
    for name in names:
        for r in results(name)["rows"]:
            e = r.get("sm_effect")
            if e is None:
                raise ValueError(f"{name}: {r['linear']} M={r['M']} {r['kind']}: expected the loop ends by SM (sm_effect)")
            by_ctas = ", ".join(f"{n}: {v / 1e3:.2f}" for n, v in e["by_ctas"].items())
            rows.append(
                [
                    r["linear"],
                    ROWS_BY_SM_KINDS[r["kind"]],
                    str(r["M"]),
                    str(r["ctas"]),
                    f"{r['span'] / 1e3:.1f}",
                    f"{e['split_half_r']:.2f}",
                    f"{e['sm_spread'] / 1e3:.1f}",
                    f"{e['within_spread'] / 1e3:.1f}",
                    by_ctas,
                ]
            )
    header = ["8B linear", "kind", "tokens", "CTAs", "span us", "split-half r", "SMs' means spread us"]
    header += ["within an SM us", "loop end by CTAs an SM (us)"]
    return markdown_table(header, rows)


def cuda_rows_release_stages_h100(results: Results) -> str:
    """The row tiles' K-loop ends by SM (one H100 call, ``KERNEL=rows run_h200_persistent_trace.sh``), then a stage
    released once its loads have landed (``-DSPECDEC_RELEASE_ON_LOADS=1``) and three row-tile stages at 9-16 tokens
    (``-DSPECDEC_ROWS_STAGES16=3``), both since removed, against the shipped library (the same call,
    ``run_h200_rows_ab.sh``): the 8B linears, cold us, the mean of two alternated processes a library, then the W12
    steps, a process each."""
    by_sm = rows_by_sm_table(results, ROWS_BY_SM_RUNS)
    linears = rows_ab_table(results, RELEASE_STAGES_RUNS, ("qkv", "o", "gate_up", "down", "lm_head"))
    return by_sm + "\n\n" + linears + "\n\n" + rows_ab_w12_steps(results, RELEASE_STAGES_STEPS)


STAGES16_LIBRARIES = {
    "shipped (4 stages)": ("shipped", "build/specdec_cuda_kernels.so"),
    "3 stages at 9-16 tokens": ("stages16_3", "build/rows_ab_rows_stages16_3.so"),
}
STAGES16_STEP_RUNS = {
    (library, mode): f"step_kernels_h100_2026-12-07_dd7c595_{name}_pdl_{mode}.json"
    for library, (name, _) in STAGES16_LIBRARIES.items()
    for mode in ("0", "gemm", "default")
}
PDL_MODE_NAMES = {
    "0": "off",
    "gemm": "GEMMs only",
    "elementwise": "element-wise kernels only",
    "default": "every kernel (the default)",
}
STAGES_PDL_STEP_RUNS = {
    (library, mode): f"step_kernels_h100_2026-12-07_423c2b6_{name}_pdl_{mode}.json"
    for library, (name, _) in STAGES16_LIBRARIES.items()
    for mode in ("0", "gemm", "elementwise", "default")
}
STAGES_PDL_PAIRS = tuple(
    {
        "shipped (4 stages)": (f"ar_step_repeat_h100_2026-12-07_423c2b6_shipped_{i}.json", "default"),
        "3 stages at 9-16 tokens": (f"ar_step_repeat_h100_2026-12-07_423c2b6_stages16_3_elementwise_{i}.json", "elementwise"),
    }
    for i in (1, 2, 3)
)


def checked_step_run(results: Results, name: str, library: str, mode: str) -> dict:
    """The AR-step run ``name``, checked to have run ``library`` (a key of ``STAGES16_LIBRARIES``) under ``$SPECDEC_PDL``
    ``mode`` ("default": unset); another library or mode raises."""
    run = results(name)
    env = run["provenance"].get("env", {})
    so = STAGES16_LIBRARIES[library][1]
    if env.get("SPECDEC_PDL", "default") != mode or env.get("SPECDEC_CUDA_KERNELS") != so:
        raise ValueError(f"{name}: expected $SPECDEC_PDL {mode} and the library {so}, got {env}")
    return run


def stages16_step_table(results: Results, runs: dict[tuple[str, str], str], element_wise: bool) -> str:
    """One row a (library, mode) run: the W12 one-token and 16-row verify steps, ms, their ratio and the verify step's
    GEMMs as torch.profiler times them (with ``element_wise``, its other kernels too: the element-wise ones)."""
    rows = []
    for (library, mode), name in runs.items():
        run = checked_step_run(results, name, library, mode)
        step, verify = run["w12_step_s"] * 1e3, run["w12_verify_s"] * 1e3
        kernels = run["w12_verify_kernels"]
        row = [library, PDL_MODE_NAMES[mode], f"{step:.3f}", f"{verify:.3f}", f"{verify / step:.3f}", f"{kernels['gemm_ms']:.3f}"]
        rows.append(row + ([f"{kernels['other_ms']:.3f}"] if element_wise else []))
    header = ["library", "programmatic launch", "W12 one-token step ms", "W12 16-row verify step ms", "verify / step"]
    header.append("the verify step's GEMMs ms (profiled)")
    return markdown_table(header + (["its other kernels ms (profiled)"] if element_wise else []), rows)


NCU_SOURCE_ROWS_RUN = "ncu_source_rows_h100_2026-12-07_b64ce57.json"
NCU_SOURCE_OPCODES = ("BRA", "SYNCS", "LDS", "HMMA", "IMAD", "LOP3", "SHF", "VIMNMX", "ISETP", "FADD", "LDC", "S2R")
NCU_SOURCE_REASONS = ("stall_long_sb", "stall_short_sb", "stall_wait", "stall_barrier", "stall_selected", "stall_dispatch")


LOAD_RELEASE_PREFIX = "rows_ab_h100_2026-12-07_928194b"
LOAD_RELEASE_LIBRARIES = {
    "shipped": "shipped",
    "released on its loads' words": "release_on_load_words_1",
    "x's loads early": "x_loads_early_1",
}
LOAD_RELEASE_RUNS = {label: (f"{LOAD_RELEASE_PREFIX}_call3_{name}1.json",) for label, name in LOAD_RELEASE_LIBRARIES.items()}
LOAD_RELEASE_STEPS = {
    f"call {call}, round {r}: {label}": f"{LOAD_RELEASE_PREFIX}_call{call}_ar_step_{LOAD_RELEASE_LIBRARIES[label]}_{r}.json"
    for call, switch in ((1, "released on its loads' words"), (2, "x's loads early"))
    for r in (1, 2)
    for label in ("shipped", switch)
} | {f"call 3: {label}": f"{LOAD_RELEASE_PREFIX}_call3_ar_step_{name}.json" for label, name in LOAD_RELEASE_LIBRARIES.items()}


def cuda_rows_load_release_h100(results: Results) -> str:
    """A 16-token W12 / Q row-tile stage released once its loads' words have landed
    (``-DSPECDEC_RELEASE_ON_LOAD_WORDS=1``) and x's loads issued before the decode (``-DSPECDEC_X_LOADS_EARLY=1``),
    both since removed, against the shipped library (three H100 calls, ``run_h200_rows_ab.sh``: two short calls of
    one switch each, then both with one round of the linears): the 8B linears, cold us, one process a library, then
    every W12 step, a process each."""
    linears = rows_ab_table(results, LOAD_RELEASE_RUNS, ("qkv", "o", "gate_up", "down", "lm_head"))
    return linears + "\n\n" + rows_ab_w12_steps(results, LOAD_RELEASE_STEPS)


ROWS_AB_LINEARS = ("qkv", "o", "gate_up", "down", "lm_head")


def rows_ab_call_tables(
    results: Results, prefix: str, libraries: dict[str, str], stepped: tuple[str, ...] = (), step_rounds: int = 1
) -> str:
    """One ``run_h200_rows_ab.sh`` call of one round of the linears (``prefix``: its results' names before the
    library's; ``libraries``: label -> the library's name in them): the 8B linears, cold us, one process a library,
    then the W12 steps of the ``stepped`` labels (all when empty), a process each, ``step_rounds`` rounds
    (``STEP_ROUNDS``; past one, each round's processes in turn)."""
    runs = {label: (f"{prefix}_{name}1.json",) for label, name in libraries.items()}
    stepped = stepped or tuple(libraries)
    if step_rounds == 1:
        steps = {label: f"{prefix}_ar_step_{libraries[label]}.json" for label in stepped}
    else:
        steps = {
            f"round {r}: {label}": f"{prefix}_ar_step_{libraries[label]}_{r}.json"
            for r in range(1, step_rounds + 1)
            for label in stepped
        }
    return rows_ab_table(results, runs, ROWS_AB_LINEARS) + "\n\n" + rows_ab_w12_steps(results, steps)


RING_ALONE_PREFIX = "rows_ab_h100_2026-12-07_97822a0"
RING_ALONE_LIBRARIES = {"shipped": "shipped", "ring alone": "wide_ablate_1024", "lane offsets": "lane_offsets_1"}


def cuda_rows_ring_alone_h100(results: Results) -> str:
    """The 1-16 token kernels' ring without their consumers' loads, decode and MMAs (``-DSPECDEC_WIDE_ABLATE=1024``,
    products wrong) and the consumers' lane offsets kept in registers at every token count
    (``-DSPECDEC_LANE_OFFSETS=1``, the build that value then named) against the shipped library (one H100 call,
    ``run_h200_rows_ab.sh``, one round): the 8B linears, cold us, one process a library, then the W12 steps of the
    shipped and lane-offset libraries, a process each."""
    return rows_ab_call_tables(results, RING_ALONE_PREFIX, RING_ALONE_LIBRARIES, ("shipped", "lane offsets"))


LANE_SPLIT_PREFIX = "rows_ab_h100_2026-12-07_05f92f1"
LANE_SPLIT_LIBRARIES = {
    "shipped": "shipped",
    "lane offsets at 1-8 tokens": "lane_offsets_8",
    "token split at 9-16 tokens": "rows_token_split16_2",
}


def cuda_rows_lane_split_h100(results: Results) -> str:
    """The consumers' lane offsets kept in registers at 1-8 tokens only (``-DSPECDEC_LANE_OFFSETS=8``) and the 9-16
    token row tiles' two n-tiles of tokens in two warps (``-DSPECDEC_ROWS_TOKEN_SPLIT16=2``, since removed) against the
    shipped library (one H100 call, ``run_h200_rows_ab.sh``, one round): the 8B linears, cold us, one process a
    library, then each library's W12 steps, a process each."""
    return rows_ab_call_tables(results, LANE_SPLIT_PREFIX, LANE_SPLIT_LIBRARIES)


OPAQUE_BASE_PREFIX = "rows_ab_h100_2026-12-08_3d8a0e7_call1"
OPAQUE_BASE_LIBRARIES = {
    "shipped": "shipped",
    "opaque base": "rows_opaque_base_1",
    "opaque base, lane offsets at 1-8 tokens": "rows_opaque_base_1_lane_offsets_8",
}


def cuda_rows_opaque_base_h100(results: Results) -> str:
    """The row tiles' shared-memory base kept opaque to nvcc (``-DSPECDEC_ROWS_OPAQUE_BASE=1``), alone and with the
    consumers' lane offsets kept in registers at 1-8 tokens (``-DSPECDEC_LANE_OFFSETS=8``; both since on by default),
    against the library shipped before them (one H100 call, ``ROUNDS=1 STEP_ROUNDS=2 run_h200_rows_ab.sh``): the 8B
    linears, cold us, one process a library, then each library's W12 steps, a process each, two rounds."""
    return rows_ab_call_tables(results, OPAQUE_BASE_PREFIX, OPAQUE_BASE_LIBRARIES, step_rounds=2)


FMA_SHIFTS_PREFIX = "rows_ab_h100_2026-12-08_3d8a0e7_call2"
FMA_SHIFTS_LIBRARIES = {"shipped": "shipped", "right shifts on the FMA pipe": "fma_shifts_1"}


def cuda_rows_fma_shifts_h100(results: Results) -> str:
    """The decode's right shifts by a constant written as ``mul.hi.u32`` (IMAD.HI on the FMA pipe;
    ``-DSPECDEC_FMA_SHIFTS=1``, since removed) against the library then shipped (one H100 call, ``ROUNDS=1
    STEP_ROUNDS=2 run_h200_rows_ab.sh``): the 8B linears, cold us, one process a library, then each library's W12
    steps, a process each, two rounds."""
    return rows_ab_call_tables(results, FMA_SHIFTS_PREFIX, FMA_SHIFTS_LIBRARIES, step_rounds=2)


def cuda_ncu_source_rows_h100(results: Results) -> str:
    """The W12 row tiles (cuda_w12_v9) on the 8B gate_up at 8 and 16 tokens under Nsight Compute's warp-state
    sampling (one H100 call, ``run_h200_ncu_source.sh``): warp instructions executed (M) and the share of the samples,
    by opcode, then the stall reasons' shares; a kernel other than the row tiles at 8 and 16 tokens raises."""
    run = results(NCU_SOURCE_ROWS_RUN)
    kernels = run["kernels"]
    if len(kernels) != 2 or not all(f"(int){tok}, (int)1>" in k["label"] for k, tok in zip(kernels, (8, 16), strict=True)):
        raise ValueError(f"{NCU_SOURCE_ROWS_RUN}: expected the row tiles at 8 and 16 tokens, got {[k['label'] for k in kernels]}")
    ops = [{r["opcode"]: r for r in k["by_opcode"]} for k in kernels]
    rows = [["all", *(f"{k['executed'] / 1e6:.2f} / 100.0" for k in kernels)]]
    for op in NCU_SOURCE_OPCODES:
        rows.append([op, *(f"{o[op]['executed'] / 1e6:.3f} / {100 * o[op]['share']:.1f}" for o in ops)])
    for reason in NCU_SOURCE_REASONS:
        rows.append([f"stall: {reason[6:]}", *(f"{100 * k['reasons'][reason]:.1f} %" for k in kernels)])
    busiest = [max(k["try_waits"], key=lambda w: w["share"]) for k in kernels]
    rows.append(["the busiest try-wait's branch", *(f"{100 * w['share']:.1f} %" for w in busiest)])
    rows.append(["try-waits executed (all)", *(f"{sum(w['executed'] for w in k['try_waits']):,.0f}" for k in kernels)])
    return markdown_table(["opcode", "8 tokens: M executed / % samples", "16 tokens: M executed / % samples"], rows)


def cuda_rows_stages16_step_h100(results: Results) -> str:
    """The lean 8B W12 target's steps with the shipped library and with three row-tile stages at 9-16 tokens
    (``-DSPECDEC_ROWS_STAGES16=3``), by programmatic launch mode (``$SPECDEC_PDL``; one H100 call,
    ``run_h200_step_kernels.sh 16`` a library and one ``bench_roofline --ar-step`` process a library with ``gemm``): the
    one-token and 16-row verify steps, ms, and the verify step's GEMMs as torch.profiler times them (with programmatic
    launch a GEMM's time runs from its early start); a run of another library or mode raises."""
    return stages16_step_table(results, STAGES16_STEP_RUNS, element_wise=False)


def cuda_stages16_pdl_modes_h100(results: Results) -> str:
    """Two H100 calls at 423c2b6 (the launch bound of 5): ``MODES="0 gemm elementwise default"
    run_h200_step_kernels.sh 16`` with the shipped library and with ``-DSPECDEC_ROWS_STAGES16=3`` (the steps and the
    verify step's GEMMs and other kernels as profiled), then three alternated pairs of ``bench_roofline --ar-step``
    processes: the shipped library under the default launch against the 3-stage one with only the element-wise kernels
    launched programmatically; a run of another library or mode raises."""
    modes = stages16_step_table(results, STAGES_PDL_STEP_RUNS, element_wise=True)
    rows = []
    for i, pair in enumerate(STAGES_PDL_PAIRS, 1):
        runs = {label: checked_step_run(results, name, label, mode) for label, (name, mode) in pair.items()}
        cells = [f"{run['w12_step_s'] * 1e3:.3f} / {run['w12_verify_s'] * 1e3:.3f}" for run in runs.values()]
        rows.append([str(i), *cells])
    labels = [f"{label}, {PDL_MODE_NAMES[mode]}: one-token / verify ms" for label, (_, mode) in STAGES_PDL_PAIRS[0].items()]
    return modes + "\n\n" + markdown_table(["pair", *labels], rows)


BOUND_SWIZZLE_PREFIX = "rows_ab_h100_2026-12-07_07df64f"
BOUND_LIBRARIES = {
    "shipped (bound 4)": "shipped",
    "3 stages, bound 5": "rows_stages16_3_rows_bound16_5",
    "bound 5 (the default since)": "rows_bound16_5",
}
BOUND_RUNS = rows_ab_runs(f"{BOUND_SWIZZLE_PREFIX}_call1", BOUND_LIBRARIES)
BOUND_STEPS = {
    **{f"{label}, call 1": name for label, name in rows_ab_step_runs(f"{BOUND_SWIZZLE_PREFIX}_call1", BOUND_LIBRARIES).items()},
    **{
        f"{label}, call 3 run {run}": f"ar_step_repeat_h100_2026-12-07_07df64f_{name}_{run}.json"
        for run in (1, 2)
        for label, name in (("shipped (bound 4)", "shipped"), ("bound 5 (the default since)", "rows_bound16_5"))
    },
}
SWIZZLE_LIBRARIES = {"shipped (CTA i: tile i)": "shipped", "swizzled (tile 97 i mod tiles)": "rows_swizzle_97"}
SWIZZLE_RUNS = rows_ab_runs(f"{BOUND_SWIZZLE_PREFIX}_call2", SWIZZLE_LIBRARIES)
SWIZZLE_STEPS = rows_ab_step_runs(f"{BOUND_SWIZZLE_PREFIX}_call2", SWIZZLE_LIBRARIES)
SWIZZLE_TRACES = {
    label: tuple(
        f"persistent_trace_rows_h100_2026-12-07_07df64f_{label}_qwen3-8b_{linear}.json" for linear in ("qkv", "o", "down")
    )
    for label in ("shipped", "flagged")
}


def rows_by_sm_pair_table(results: Results, traces: dict[str, tuple[str, ...]]) -> str:
    """The traced row tiles' K-loop ends by SM of two builds side by side (``traces``: ``shipped`` and ``flagged``, each
    its cases' JSON in the same order): each case's span, the split-half correlation of the SMs' means and their spread
    (us), shipped -> flagged; cases that differ between the builds raise."""
    rows = []
    for shipped_name, flagged_name in zip(traces["shipped"], traces["flagged"], strict=True):
        for a, b in zip(results(shipped_name)["rows"], results(flagged_name)["rows"], strict=True):
            if (a["linear"], a["kind"], a["M"]) != (b["linear"], b["kind"], b["M"]):
                raise ValueError(f"{shipped_name} / {flagged_name}: the cases differ: {a['linear']} {a['kind']} {a['M']}")
            ea, eb = a["sm_effect"], b["sm_effect"]
            rows.append(
                [
                    a["linear"],
                    ROWS_BY_SM_KINDS[a["kind"]],
                    str(a["M"]),
                    f"{a['span'] / 1e3:.1f} -> {b['span'] / 1e3:.1f}",
                    f"{ea['split_half_r']:.2f} -> {eb['split_half_r']:.2f}",
                    f"{ea['sm_spread'] / 1e3:.1f} -> {eb['sm_spread'] / 1e3:.1f}",
                ]
            )
    return markdown_table(["8B linear", "kind", "tokens", "span us", "split-half r", "SMs' means spread us"], rows)


def cuda_rows_bound_swizzle_h100(results: Results) -> str:
    """Three H100 calls at 07df64f: the 9-16 token row tiles under a launch bound of 5, with 4 stages (made the default)
    and with 3 (``-DSPECDEC_ROWS_BOUND16=5``, ``-DSPECDEC_ROWS_STAGES16=3``), against the bound of 4 (call 1,
    ``run_h200_rows_ab.sh``: the 8B linears at 16 tokens, cold us, the mean of two alternated processes a library);
    the W12 steps of call 1 and of call 3 (two more alternated ``bench_roofline --ar-step`` processes a library); then
    the CTA-to-tile swizzle (``-DSPECDEC_ROWS_SWIZZLE=97``, since removed; call 2): the traced loop ends by SM,
    shipped -> swizzled, the 8B linears at 1-16 tokens, and the W12 steps."""
    bound = rows_ab_table(results, BOUND_RUNS, ("qkv", "o", "gate_up", "down", "lm_head"))
    by_sm = rows_by_sm_pair_table(results, SWIZZLE_TRACES)
    swizzle = rows_ab_table(results, SWIZZLE_RUNS, ("qkv", "o", "gate_up", "down", "lm_head"))
    parts = [bound, rows_ab_w12_steps(results, BOUND_STEPS), by_sm, swizzle, rows_ab_w12_steps(results, SWIZZLE_STEPS)]
    return "\n\n".join(parts)


BF16_FAMILY_STEP_RUN = "step_alternate_h100_2026-12-07_724b274_bf16_skinny.json"
BF16_FAMILY_NAMES = {
    "v5": "v5 (the rule before: persistent or split-K 8B gate_up and lm_head)",
    "v3": "v3 (persistent everywhere)",
    "v4": "v4 (row tiles everywhere: the rule now on the 8B)",
}
Q_FAMILY_PASS_RUN = "pass_alternate_h100_2026-12-07_724b274.json"
Q_FAMILY_NAMES = {
    "v5": "v5 (the rule: row tiles up to 8 waves; at 9-16 rows only where K <= 8192)",
    "v2": "v2 (split-K 64-row blocks everywhere)",
    "v4": "v4 (row tiles everywhere)",
}


def cuda_family_step_pass_h100(results: Results) -> str:
    """The bf16 kernel families in the lean 8B target's steps with the skinny linears (``run_h200_step_alternate.sh
    SPECDEC_BF16_CUDA_VARIANT v5,v3,v4 8 bf16_skinny``) and the Q view's in the two-level verifier's Q-view passes
    (``run_h200_pass_alternate.sh SPECDEC_Q_CUDA_VARIANT v5,v2,v4``), each alternated in one process, three turns a
    value (one H100 call): the median ms of the turns."""
    run = results(BF16_FAMILY_STEP_RUN)
    if run.get("alternate_target") != "bf16_skinny" or not run.get("alternated"):
        raise ValueError(f"{BF16_FAMILY_STEP_RUN}: expected turns of the bf16 target with the skinny linears")
    rows = []
    for value, name in BF16_FAMILY_NAMES.items():
        turns = [t for t in run["alternated"] if t["value"] == value]
        step = statistics.median(t["step_s"] for t in turns) * 1e3
        verify = statistics.median(t["verify_s"] for t in turns) * 1e3
        rows.append([name, f"{step:.3f}", f"{verify:.3f}"])
    bf16 = markdown_table(["bf16 kernels", "one-token step ms", f"{run['verify_rows']}-row verify step ms"], rows)
    passes = results(Q_FAMILY_PASS_RUN)["alternated"]
    rows = []
    for value, name in Q_FAMILY_NAMES.items():
        cells = []
        for n in (1, 8, 16):
            turns = [t for t in passes if t["value"] == value and t["rows"] == n]
            if not turns:
                raise ValueError(f"{Q_FAMILY_PASS_RUN}: no {value} turn at {n} rows")
            cells.append(f"{statistics.median(t['q_ms'] for t in turns):.3f}")
        rows.append([name, *cells])
    q = markdown_table(["Q kernels", "Q pass, 1 row ms", "8 rows ms", "16 rows ms"], rows)
    return bf16 + "\n\n" + q


WIDE_PARTS_RUNS = {
    "shipped": "wide_parts_h100_2026-12-06_token_major_0.json",
    "3: no decode, no MMAs": "wide_parts_h100_2026-12-06_token_major_3.json",
    "7: and no x": "wide_parts_h100_2026-12-06_token_major_7.json",
    "11: x, no epilogue": "wide_parts_h100_2026-12-06_token_major_11.json",
    "15: none of the four": "wide_parts_h100_2026-12-06_token_major_15.json",
}


def cuda_wide_parts_h100(results: Results) -> str:
    """The wide kernels part by part on the library of the token-major tile and the escape warps a 32-token block
    (one H100 call): each linear's cold us, W12 / Q, with the library built with ``SPECDEC_WIDE_ABLATE`` leaving out
    the named parts (their products wrong by design), and cuBLAS bf16 of the shipped library's pass."""
    runs = {label: results(name) for label, name in WIDE_PARTS_RUNS.items()}
    expected = [0, 3, 7, 11, 15]
    if [run["ablation"] for run in runs.values()] != expected:
        raise ValueError(f"{list(WIDE_PARTS_RUNS.values())}: expected the ablations {expected}")

    def us(run: dict, model: str, linear: str, m: int, kind: str) -> str:
        got = [r["cold_s"] for r in run["timings"] if (r["model"], r["linear"], r["M"], r["kind"]) == (model, linear, m, kind)]
        return f"{got[0] * 1e6:.1f}" if got else "-"

    rows = []
    for model, linear in (
        ("qwen3-8b", "o"),
        ("qwen3-8b", "gate_up"),
        ("qwen3-8b", "lm_head"),
        ("qwen3-32b", "o"),
        ("qwen3-32b", "gate_up"),
    ):
        for m in (32, 64):
            cells = [f"{model} {linear}", str(m)]
            cells += [
                f"{us(run, model, linear, m, 'cuda_w12_wide')} / {us(run, model, linear, m, 'cuda_q_wide')}"
                for run in runs.values()
            ]
            rows.append(cells + [us(runs["shipped"], model, linear, m, "cublas_bf16")])
    return markdown_table(["linear", "rows", *(f"{label}: W12 / Q us" for label in runs), "cuBLAS bf16 us"], rows)


Q_PASS_RUNS = {
    ("wide", 32): "q_pass_linears_h100_2026-12-06_token_major_1_32.json",
    ("Triton", 32): "q_pass_linears_h100_2026-12-06_token_major_exact_32.json",
    ("wide", 64): "q_pass_linears_h100_2026-12-06_token_major_1_64.json",
    ("Triton", 64): "q_pass_linears_h100_2026-12-06_token_major_exact_64.json",
}


def q_pass_linears_h100(results: Results) -> str:
    """Each linear of the lean 8B target's Q-view pass (the two-level verifier's first pass, captured) with the Q
    view's wide calls and with Triton's (one H100 call): us a call, mean over 36 layers x 3 replays, and the pass's GEMM
    kernels."""
    runs = {key: results(name) for key, name in Q_PASS_RUNS.items()}
    for (route, m), run in runs.items():
        if run["rows"] != m or run["view"] != "q" or run["linears_only"]:
            raise ValueError(f"{Q_PASS_RUNS[(route, m)]}: expected the {m}-row Q-view pass, not the linears alone")
    rows = []
    for m in (32, 64):
        wide, triton = runs[("wide", m)], runs[("Triton", m)]
        cells = [str(m)]
        cells += [
            f"{wide['mean_us'][lin]:.1f} / {triton['mean_us'][lin]:.1f}" for lin in ("qkv", "o", "gate_up", "down", "lm_head")
        ]
        gemm = (statistics.mean(run["gemm_us_per_step"]) / 1e3 for run in (wide, triton))
        rows.append(cells + [" / ".join(f"{v:.3f}" for v in gemm)])
    return markdown_table(["rows", "qkv", "o", "gate_up", "down", "lm_head", "GEMM kernels a pass (ms)"], rows)


STEP_LINEARS_RUNS = {
    "W12": "step_linears_h100_2026-12-06_w12.json",
    "bf16, cuBLAS": "step_linears_h100_2026-12-06_bf16.json",
    "bf16, CUDA skinny GEMM": "step_linears_h100_2026-12-06_bf16_skinny.json",
}


def step_linears_h100(results: Results) -> str:
    """Each linear of the lean 8B target's captured one-token step (H100, no programmatic launch): us a call, mean over
    36 layers x 3 replays, and x its read floor (weight bytes over the same run's copy bandwidth), by weight format."""
    runs = {label: results(name) for label, name in STEP_LINEARS_RUNS.items()}
    if any(run["rows"] != 1 or run["linears_only"] for run in runs.values()):
        raise ValueError(f"{list(STEP_LINEARS_RUNS.values())}: expected one-token steps, not the linears alone")
    rows = [
        [linear, *(f"{run['mean_us'][linear]:.1f} ({run['x_floor'][linear]:.2f}x)" for run in runs.values())]
        for linear in ("qkv", "o", "gate_up", "down", "lm_head")
    ]
    rows.append(["GEMM kernels a step", *(f"{statistics.mean(run['gemm_us_per_step']) / 1e3:.3f} ms" for run in runs.values())])
    return markdown_table(["8B linear", *(f"{label}: us (x floor)" for label in runs)], rows)


TABLES: dict[str, Callable[[Results], str]] = {
    "two-level-h200-extra": two_level_h200_extra,
    "cuda-roofline": cuda_roofline,
    "cuda-ncu": cuda_ncu,
    "cuda-ncu-tensor-map": cuda_ncu_tensor_map,
    "cuda-ncu-w12": cuda_ncu_w12,
    "ssd-h200": ssd_h200,
    "agentspec-h200": agentspec_h200,
    "pilot-h200": pilot_h200,
    "engine-h200": engine_h200,
    "engine-h200-split": engine_h200_split,
    "engine-ceiling": engine_ceiling,
    "chunk-forward": chunk_forward,
    "cuda-stream-layout": cuda_stream_layout,
    "engine-long-prompts": engine_long_prompts,
    "elementwise-h200": elementwise_h200,
    "cuda-fixed-cost": cuda_fixed_cost,
    "cuda-read-floor": cuda_read_floor,
    "cuda-row-tile-steps": cuda_row_tile_steps,
    "cuda-wide": cuda_wide,
    "cuda-wide-epilogue-h100": cuda_wide_epilogue_h100,
    "cuda-wide-ctas-h100": cuda_wide_ctas_h100,
    "step-linears-h100": step_linears_h100,
    "cuda-wide-groups-h100": cuda_wide_groups_h100,
    "cuda-wide-q-route-h100": cuda_wide_q_route_h100,
    "two-level-h100": two_level_h100,
    "split-workspace-h100": split_workspace_h100,
    "cuda-goals-h100": cuda_goals_h100,
    "cuda-wide-round-trip-h100": cuda_wide_round_trip_h100,
    "cuda-wide-token-major-h100": cuda_wide_token_major_h100,
    "cuda-wide-stream-k-h100": cuda_wide_stream_k_h100,
    "cuda-wide-stream-k-auto-h100": cuda_wide_stream_k_auto_h100,
    "cuda-wide-stream-k-trace-h100": cuda_wide_stream_k_trace_h100,
    "cuda-wide-epilogue-tid-h100": cuda_wide_epilogue_tid_h100,
    "cuda-rows-x-h100": cuda_rows_x_h100,
    "cuda-rows-extra-copy-h100": cuda_rows_extra_copy_h100,
    "cuda-tensor-map-ablations-h100": cuda_tensor_map_ablations_h100,
    "cuda-ncu-bf16-h100": cuda_ncu_bf16_h100,
    "cuda-rows-x-resident-h100": cuda_rows_x_resident_h100,
    "cuda-weight-l2-h100": cuda_weight_l2_h100,
    "cuda-persistent-trace-h100": cuda_persistent_trace_h100,
    "cuda-persistent-epilogue-parts-h100": cuda_persistent_epilogue_parts_h100,
    "cuda-count-at-end-h100": cuda_count_at_end_h100,
    "cuda-finish-loads-h100": cuda_finish_loads_h100,
    "cuda-acq-rel-counts-h100": cuda_acq_rel_counts_h100,
    "cuda-verify-attention-h100": cuda_verify_attention_h100,
    "cuda-w12-family-step-h100": cuda_w12_family_step_h100,
    "cuda-rows-x-ring-h100": cuda_rows_x_ring_h100,
    "cuda-rows-tile32-h100": cuda_rows_tile32_h100,
    "cuda-rows-release-stages-h100": cuda_rows_release_stages_h100,
    "cuda-rows-stages16-step-h100": cuda_rows_stages16_step_h100,
    "cuda-stages16-pdl-modes-h100": cuda_stages16_pdl_modes_h100,
    "cuda-ncu-source-rows-h100": cuda_ncu_source_rows_h100,
    "cuda-rows-load-release-h100": cuda_rows_load_release_h100,
    "cuda-rows-ring-alone-h100": cuda_rows_ring_alone_h100,
    "cuda-rows-lane-split-h100": cuda_rows_lane_split_h100,
    "cuda-rows-opaque-base-h100": cuda_rows_opaque_base_h100,
    "cuda-rows-fma-shifts-h100": cuda_rows_fma_shifts_h100,
    "cuda-rows-bound-swizzle-h100": cuda_rows_bound_swizzle_h100,
    "cuda-attention-rows-x-first-h100": cuda_attention_rows_x_first_h100,
    "cuda-family-step-pass-h100": cuda_family_step_pass_h100,
    "cuda-wide-parts-h100": cuda_wide_parts_h100,
    "q-pass-linears-h100": q_pass_linears_h100,
    "cuda-wide-ring-h100": cuda_wide_ring_h100,
    "cuda-pdl": cuda_pdl,
    "decode-attention": decode_attention,
    "decode-attention-warps-h100": decode_attention_warps_h100,
    "w12-tokens": w12_tokens,
    "engine-h200-float32": engine_h200_float32,
    "engine-hybrid-h200": engine_hybrid_h200,
    "engine-real-h200": engine_real_h200,
    "forcing-engine-h200": forcing_engine_h200,
    "two-level": two_level,
    "hybrid-graphs": hybrid_graphs,
    "decode-steps": decode_steps,
    "forcing-gpu": forcing_gpu,
    "forcing-w12-gpu-h100": forcing_w12_gpu_h100,
    "gdn-tree": gdn_tree,
    "smollm2-drafter-summary": smollm2_drafter_summary,
    "smollm2-drafter-eval": smollm2_drafter_eval,
    "smollm2-training": smollm2_training,
    "tree-real": tree_real,
    "drafter-steps": drafter_steps,
    "drafter-runs": drafter_runs,
    "forcing-power": forcing_power,
}


def table_names(text: str) -> list[str]:
    """Names of the generated tables in a doc, in order of appearance."""
    return [match["name"] for match in MARKER.finditer(text)]


def render(text: str, results: Results | None = None) -> str:
    """``text`` with every marked table replaced by the one rendered from the JSON.

    Raises:
        ValueError: a marker names no known table, or an opening marker has no closing one.
    """
    results = results or Results()
    openings = [match["name"] for match in OPENING.finditer(text)]
    closed = table_names(text)
    if openings != closed:
        raise ValueError(
            f"table markers: expected every '<!-- table: NAME -->' closed by '<!-- /table -->', "
            f"opened {openings}, closed {closed}"
        )
    for name in closed:
        if name not in TABLES:
            raise ValueError(f"table name: expected one of {sorted(TABLES)}, got {name!r}")

    def replace(match: re.Match) -> str:
        return f"<!-- table: {match['name']} -->\n{TABLES[match['name']](results)}\n<!-- /table -->"

    return MARKER.sub(replace, text)


def doc_paths() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a doc differs from the JSON")
    args = parser.parse_args(argv)
    stale = []
    for path in doc_paths():
        text = path.read_text()
        rendered = render(text)
        if rendered != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(rendered)
    verb = "differ from" if args.check else "rewritten from"
    for path in stale:
        print(f"{path}: tables {verb} benchmarks/results/")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
