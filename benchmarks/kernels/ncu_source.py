"""Where a kernel's warps wait, by instruction: Nsight Compute's source page (SASS with each instruction's warp-state
samples) summed by instruction kind, with the details page's warp-state metrics beside it.

``run_h200_ncu_source.sh`` profiles a kernel with the SourceCounters and WarpStateStats sections into a report and
exports two CSVs: ``ncu --import R --page source --print-source sass --csv`` (a table a profiled kernel: each SASS
instruction's address, text and sample columns such as "Warp Stall Sampling (All Samples)") and ``--page details
--csv`` (one row a kernel and metric). This module reads both: for each kernel, its samples summed by opcode (the
first word of the instruction, predicate and modifiers dropped: ``@!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT`` counts as
``SYNCS``), the instructions that gather the most samples, and the warp-state metrics of its details rows.

Run: ``python3 -m benchmarks.kernels.ncu_source --sass S.csv [--details D.csv] [--launch L.json] [--out F.json]`` (CPU,
seconds; ``--launch``: the profiled program's JSON, whose provenance names the GPU run).

Example:
    >>> opcode("@!P1 HMMA.16816.F32.BF16 R4, R8, R12, R4 ;")
    'HMMA'
    >>> text = '"Address","Source","Warp Stall Sampling (All Samples)"\\n"0x10","LDS R1, [R2]","3"\\n'
    >>> [ins["samples"] for ins in source_tables(text)[0]["instructions"]]
    [{'Warp Stall Sampling (All Samples)': 3.0}]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from collections import defaultdict
from pathlib import Path

from benchmarks.common import provenance, provenance_line, write_json
from benchmarks.kernels.profile_ncu import parse_number

ALL_SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
TOP_INSTRUCTIONS = 25
WAIT_BRANCH_WINDOW = 8  # instructions after a try-wait searched for the branch that reads its predicate


def opcode(sass: str) -> str:
    """The instruction's opcode without predicate or modifiers (``"@P0 LDSM.16.M88.4 R0, [R1]"`` -> ``"LDSM"``);
    an empty string for a line that holds no instruction."""
    words = sass.strip().split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0].rstrip(";") if words else ""


def source_tables(text: str) -> list[dict]:
    """Each table of a source-page CSV: ``{"label", "instructions": [{"address", "source", "samples": {column:
    count}}]}``. A table starts at a header row with "Address" and "Source" columns; the non-table lines before it
    (the kernel's name, where the export prints one) are its label. Sample columns are the numeric columns whose names
    say "Sampl" or "stall", and each instruction's "Instructions Executed" (warp-level) is kept as ``executed``. Equal
    tables in a row are kept once."""
    tables, label_lines, header, current = [], [], None, None
    for row in csv.reader(io.StringIO(text)):
        if not row or not any(cell.strip() for cell in row):
            continue
        if "Address" in row and "Source" in row:
            header = row
            current = dict(label=" ".join(label_lines).strip() or f"kernel {len(tables) + 1}", instructions=[])
            tables.append(current)
            label_lines = []
            continue
        if header is None or len(row) != len(header):
            label_lines.append(", ".join(cell.strip() for cell in row if cell.strip()))
            continue
        cells = dict(zip(header, row, strict=True))
        samples = {}
        for name, cell in cells.items():
            if "Sampl" in name or "stall" in name.lower():
                value = parse_number(cell)
                if value is not None:
                    samples[name] = value
        executed = parse_number(cells.get(EXECUTED, ""))
        current["instructions"].append(
            dict(address=cells["Address"], source=cells["Source"], samples=samples, executed=executed or 0.0)
        )
    # ncu 2025.3 prints each profiled kernel's table twice, identically: keep one of each run of equal tables
    return [t for i, t in enumerate(tables) if i == 0 or t != tables[i - 1]]


def summarize_table(table: dict, top: int = TOP_INSTRUCTIONS) -> dict:
    """One kernel's samples: totals by sample column, the stall reasons' shares (the ``stall_*`` columns over the main
    column: "All Samples" where present, else the first), by opcode (instructions in the code, warp instructions
    executed, each sample column and the share of the main one), the ``top`` instructions by the main column, and each
    mbarrier try-wait (``try_waits``: its index in the code, executed count and the share of the branch that reads its predicate)."""
    instructions = table["instructions"]
    columns = sorted({name for ins in instructions for name in ins["samples"]})
    main = ALL_SAMPLES if ALL_SAMPLES in columns else (columns[0] if columns else None)
    totals = {name: sum(ins["samples"].get(name, 0.0) for ins in instructions) for name in columns}
    by_opcode: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    counts: dict[str, int] = defaultdict(int)
    executed: dict[str, float] = defaultdict(float)
    for ins in instructions:
        op = opcode(ins["source"])
        counts[op] += 1
        executed[op] += ins.get("executed", 0.0)
        for name, value in ins["samples"].items():
            by_opcode[op][name] += value
    whole = totals.get(main, 0.0) if main else 0.0
    opcodes = sorted(
        (
            dict(
                opcode=op,
                instructions=counts[op],
                executed=executed[op],
                share=(sums.get(main, 0.0) / whole if whole else 0.0),
                samples=dict(sums),
            )
            for op, sums in by_opcode.items()
        ),
        key=lambda r: -r["share"],
    )
    reasons = {
        name: value / whole for name, value in totals.items() if name.startswith("stall_") and "Not Issued" not in name and whole
    }
    ranked = sorted(instructions, key=lambda ins: -ins["samples"].get(main, 0.0))[:top] if main else []

    # mbarrier try-waits: where a ring's consumers wait for a full stage and its producer for a free one; the sampled
    # stall lands on the branch that reads the try-wait's predicate (the first branch within WAIT_BRANCH_WINDOW
    # instructions after it), the executed count says how often the wait ran (out-of-line retry loops: how often it
    # had to retry)
    def branch_share(i: int) -> float:
        for ins in instructions[i + 1 : i + 1 + WAIT_BRANCH_WINDOW]:
            if opcode(ins["source"]) == "BRA":
                return ins["samples"].get(main, 0.0) / whole if whole else 0.0
        return 0.0

    try_waits = [
        dict(index=i, address=ins["address"], executed=ins.get("executed", 0.0), share=branch_share(i))
        for i, ins in enumerate(instructions)
        if "TRYWAIT" in ins["source"]
    ]
    return dict(
        label=table["label"],
        try_waits=try_waits,
        instructions=len(instructions),
        main_column=main,
        totals=totals,
        executed=sum(executed.values()),
        reasons=dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
        by_opcode=opcodes,
        top=[
            dict(
                address=ins["address"],
                source=ins["source"].strip(),
                share=ins["samples"].get(main, 0.0) / whole if whole else 0.0,
            )
            for ins in ranked
        ],
    )


WARP_STATE = r"stall|warp cycles|issued|eligible|active"  # metric names kept from the details page, any case


def details_metrics(text: str) -> dict[str, dict[str, str]]:
    """The details page's warp-state and source-counter metrics by kernel: ``{"<ID> <kernel name>": {metric: value
    with its unit}}`` (rows whose section is Warp State Statistics or Source Counters, or whose metric name speaks of
    stalls, warp cycles, issue, eligible or active warps)."""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for row in csv.DictReader(io.StringIO(text)):
        name, section = row.get("Metric Name") or "", row.get("Section Name") or ""
        if not name:
            continue
        if section in ("Warp State Statistics", "Source Counters") or re.search(WARP_STATE, name, re.I):
            kernel = f"{row.get('ID', '')} {row.get('Kernel Name', '')}".strip()
            unit = row.get("Metric Unit") or ""
            out[kernel][name] = f"{row.get('Metric Value', '')} {unit}".strip()
    return dict(out)


def report(summaries: list[dict], opcodes: int = 12) -> str:
    """Each kernel's opcodes by share of its samples, then its top instructions."""
    lines = []
    for s in summaries:
        samples = s["totals"].get(s["main_column"], 0)
        lines.append(
            f"=== {s['label']}: {s['instructions']} instructions, {s['executed'] / 1e6:.2f} M executed, {samples:.0f} samples"
        )
        lines.append("  " + " ".join(f"{name[6:]} {100 * share:.1f} %" for name, share in s["reasons"].items() if share >= 0.005))
        for r in s["by_opcode"][:opcodes]:
            lines.append(
                f"  {r['opcode']:10s} {r['instructions']:5d} instr {r['executed'] / 1e6:7.3f} M executed {100 * r['share']:5.1f} %"
            )
        lines.append("  top instructions:")
        for t in s["top"][:12]:
            lines.append(f"  {t['address']:>8s} {100 * t['share']:5.1f} %  {t['source'][:90]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sass", type=Path, required=True, help="ncu --page source --print-source sass --csv output")
    parser.add_argument("--details", type=Path, default=None, help="ncu --page details --csv output")
    parser.add_argument(
        "--launch", type=Path, default=None, help="the profiled program's JSON (profile_ncu --launch --out), kept whole"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON output (default: print only)")
    args = parser.parse_args(argv)
    prov = provenance(seed=None)
    print(provenance_line(prov))
    tables = source_tables(args.sass.read_text(errors="replace"))
    if not tables:
        raise SystemExit(f"--sass: expected a table with Address and Source columns in {args.sass}, found none")
    summaries = [summarize_table(t) for t in tables]
    details = details_metrics(args.details.read_text(errors="replace")) if args.details else {}
    print(report(summaries))
    for kernel, metrics in details.items():
        print(f"=== {kernel}")
        for name, value in metrics.items():
            print(f"  {name}: {value}")
    launch = json.loads(args.launch.read_text()) if args.launch else None
    result = dict(sass=str(args.sass), launch=launch, kernels=summaries, details=details)
    if args.out:
        write_json(args.out, result, prov, indent=1)
    return dict(provenance=prov, **result)


if __name__ == "__main__":
    main()
