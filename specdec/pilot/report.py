"""The pilot's output folder: the final spec, the memory, a Markdown report with plots, the raw rounds as JSON."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from specdec.forcing.report import finite_json
from specdec.pilot.loop import PilotResult
from specdec.pilot.memory import Memory

__all__ = ["write_outputs"]


def _plot_gaps(result: PilotResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(result.rounds)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, record in zip(axes[0], result.rounds):
        stages = [s for s, _ in record.gaps]
        lost = [max(0.0, v) if math.isfinite(v) else 0.0 for _, v in record.gaps]
        bottoms = [record.speedup + sum(lost[:i]) for i in range(len(lost))]
        ax.bar(["now"], [record.speedup], color="tab:gray")
        ax.bar(stages, lost, bottom=bottoms, color="tab:orange")
        ax.set_title(f"round {record.index}: gap waterfall")
        ax.set_ylabel("speedup over AR (x)")
        ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_speedup(result: PilotResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4))
    rounds = [r.index for r in result.rounds]
    ax.plot(rounds, [r.speedup for r in result.rounds], "o-", label="modelled, start of round")
    gated = [max((c.verdict.speedup for c in r.candidates if c.accepted), default=float("nan")) for r in result.rounds]
    ax.plot(rounds, gated, "s--", label="best gated gain in the round")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("round")
    ax.set_ylabel("x")
    ax.set_xticks(rounds)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_candidates(result: PilotResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for record in result.rounds:
        for c in record.candidates:
            if c.verdict is None:
                continue
            color = "tab:green" if c.accepted else ("tab:red" if not c.verdict.forcing_passed else "tab:gray")
            ax.scatter(c.raw_speedup, c.verdict.speedup, color=color, s=30)
            ax.annotate(f"r{record.index} {c.direction}", (c.raw_speedup, c.verdict.speedup), fontsize=6)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("explorer's raw speedup (dev prompts)")
    ax.set_ylabel("gated speedup (sealed prompts)")
    ax.set_title("green accepted, red forcing failed, gray not significant", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(x: float) -> str:
    return f"{x:.3f}" if isinstance(x, float) and math.isfinite(x) else str(x)


def _markdown(result: PilotResult, header: dict[str, Any]) -> str:
    lines = ["# Pilot report", ""]
    for key, value in header.items():
        lines.append(f"- **{key}**: {value}")
    lines += ["", "## Final system", "", "```json", json.dumps(result.final.to_dict(), indent=2, sort_keys=True), "```", ""]
    diff = result.final.diff(result.initial)
    lines += [f"Changed from the start: `{json.dumps(diff, sort_keys=True)}`" if diff else "The system did not change.", ""]
    lines += [
        "## Plots",
        "",
        "![gap waterfall](gaps.png)",
        "",
        "![speedup per round](speedup.png)",
        "",
        "![candidates](candidates.png)",
        "",
    ]
    for record in result.rounds:
        lines += [f"## Round {record.index}", "", f"Modelled speedup at the start: {_fmt(record.speedup)}x.", ""]
        lines += ["| gap | lost speedup (x) |", "|---|---|"] + [f"| {s} | {_fmt(v)} |" for s, v in record.gaps] + [""]
        lines += [
            "| direction | agent | change | raw (x) | gated (x) | 95% CI | forcing | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for c in record.candidates:
            if c.verdict is None:
                lines.append(f"| {c.direction} | {c.agent} | - | - | - | - | - | no candidate: {c.error} |")
                continue
            v = c.verdict
            why = "accepted" if v.accepted else "rejected: " + "; ".join(v.reasons).replace("|", "/")
            lines.append(
                f"| {c.direction} | {c.agent} | `{json.dumps(c.spec_diff, sort_keys=True)}` | {_fmt(c.raw_speedup)} | {_fmt(v.speedup)} | "
                f"[{_fmt(v.ci95[0])}, {_fmt(v.ci95[1])}] | {'PASS' if v.forcing_passed else 'FAIL'} | {why} |"
            )
        lines.append("")
        if record.integration is not None:
            v = record.integration
            lines.append(
                f"Stack of winners: gated {_fmt(v.speedup)}x, 95% CI [{_fmt(v.ci95[0])}, {_fmt(v.ci95[1])}], {'accepted' if v.accepted else 'rejected'}."
            )
        lines.append(f"Integrated: {', '.join(record.integrated) if record.integrated else 'nothing'}.")
        lines.append("")
    return "\n".join(lines)


def write_outputs(
    result: PilotResult, memory: Memory, out_dir: str | os.PathLike, *, header: dict[str, Any] | None = None
) -> dict[str, Path]:
    """Write ``spec.json``, ``memory.json`` (the memory's entries; its SQLite file stays where it lives),
    ``rounds.json``, ``report.md`` and its plots into ``out_dir``; returns the paths by name.

    Example:
        >>> import tempfile
        >>> from specdec.pilot.spec import SystemSpec
        >>> paths = write_outputs(PilotResult(SystemSpec(), SystemSpec(), []), Memory(), tempfile.mkdtemp())
        >>> sorted(paths)
        ['memory', 'report', 'rounds', 'spec']
    """
    if not isinstance(result, PilotResult):
        raise TypeError(f"result: expected a PilotResult, got {type(result).__name__}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "spec": out / "spec.json",
        "memory": memory.export_json(out / "memory.json"),
        "rounds": out / "rounds.json",
        "report": out / "report.md",
    }
    paths["spec"].write_text(json.dumps(result.final.to_dict(), indent=2, sort_keys=True))
    # strict JSON: a candidate that could not run has a NaN speed-up, a gap may be infinite (written as text)
    paths["rounds"].write_text(json.dumps(finite_json(result.to_dict()), indent=2, default=str, allow_nan=False))
    if result.rounds:
        for name, plot in (("gaps", _plot_gaps), ("speedup", _plot_speedup), ("candidates", _plot_candidates)):
            paths[name] = out / f"{name}.png"
            plot(result, paths[name])
    paths["report"].write_text(_markdown(result, header or {}))
    return paths
