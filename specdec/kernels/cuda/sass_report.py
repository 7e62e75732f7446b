"""Static SASS report of the skinny GEMM kernels: main-loop instruction mix and instructions per weight.

Reads ``cuobjdump -sass`` text of ``build/specdec_cuda_kernels.so``, finds in each kernel the loop whose body
holds the unrolled batch (the backward branch whose body has the most ``HMMA`` or ``HGMMA`` and no ``EXIT``), and
prints per kernel the load widths, the opcode counts of that body, its instructions by pipe (the integer ALU's, the FMA
pipe's, shared/global memory's) and the instructions per weight per thread (body length / weights per lane per batch). Run where a ``cuobjdump`` exists (the CUDA toolkit, or the one
in Triton's wheel)::

    python -m specdec.kernels.cuda.sass_report --cuobjdump PATH/cuobjdump build/specdec_cuda_kernels.so

Example (on a saved dump)::

    >>> report = analyse_kernel(["/*0000*/ HMMA.16816.F32.BF16 R0, R4, R8, R0 ;", "/*0010*/ @P0 BRA 0x0 ;"], 8)
    >>> report["loop_instructions"], report["instructions_per_weight"], report["barriers"]
    (2, 0.25, 0)
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import Counter

# Weights one lane handles per unrolled batch (kUnroll = 4 chunks, rows g and g + 8); the W12 streaming kernel
# kernels (w12_stream_kernel ``w12_v3``, w12_split_kernel ``w12_v4``) unroll their ring of kStreamDepth = 3 chunks; the
# bulk-copy kernels (w12_bulk_kernel: ``w12_v5`` with one producer warp, ``w12_v6`` with four) and the TMA kernels
# (tma_gemm_kernel<1>: W12 ``w12_v7``, <2>: Q ``q_v2``, <0>: bf16 ``bf16_v2``; their persistent forms
# tma_stream_k_kernel<1> ``w12_v8``, <2> ``q_v3`` and <0> ``bf16_v3``) consume one stage of 2 chunks per iteration.
WEIGHTS_PER_LANE_PER_BATCH = {
    "0": 4 * 2 * 8,
    "1": 4 * 2 * 16,
    "2": 4 * 2 * 16,
    "w12_v3": 3 * 2 * 16,
    "w12_v4": 3 * 2 * 16,
    "w12_v5": 2 * 2 * 16,
    "w12_v6": 2 * 2 * 16,
    "w12_v7": 1 * 2 * 16,  # two halves of consumer warps: one 64-weight chunk a warp a stage
    "q_v2": 2 * 2 * 16,
    "w12_v8": 1 * 2 * 16,
    "q_v3": 2 * 2 * 16,
    "bf16_v2": 2 * 2 * 16,
    "bf16_v3": 2 * 2 * 16,
    # the row-tile kernel (tma_rows_kernel<1> ``w12_v9``, <2> ``q_v4``, <0> ``bf16_v4``): one 64-weight chunk of every
    # stage a warp (two of 32 for bf16)
    "w12_v9": 1 * 2 * 16,
    "q_v4": 1 * 2 * 16,
    "bf16_v4": 2 * 2 * 8,
    # the wide kernels (tma_wide_kernel<1> W12, <2> Q): a warp decodes 16 rows x 64 k of a stage, 32 weights a lane; the
    # pipelined loop's body holds two stages (main doubles it)
    "w12_wide": 32,
    "q_wide": 32,
}
# Printed names of the skinny kernel's template kinds; the W12 and Q variants print as their kind.
KIND_NAMES = {"0": "bf16", "1": "w12", "2": "q"}
# The tensor-map kernel's template kind (1 W12, 2 Q, as the skinny kernel's) -> its report name.
TMA_KINDS = {"0": "bf16_v2", "1": "w12_v7", "2": "q_v2"}
# The same for the persistent tensor-map kernel (tma_stream_k_kernel).
STREAM_K_KINDS = {"0": "bf16_v3", "1": "w12_v8", "2": "q_v3"}
# The same for the row-tile kernel (tma_rows_kernel).
ROW_TILE_KINDS = {"0": "bf16_v4", "1": "w12_v9", "2": "q_v4"}
# The same for the wide kernel (tma_wide_kernel<KIND, NB, PIPE, CTAS, GROUPS>).
WIDE_KINDS = {"1": "w12_wide", "2": "q_wide"}
_WIDE = re.compile(r"tma_wide_kernelILi(\d)ELi(\d)ELb(\d)ELi(\d)ELi(\d)E")
# Base opcodes by the pipe that issues them (Hopper): the integer ALU (16 lanes a scheduler: a warp instruction every
# second cycle), the FMA pipe (IMAD among them), and the memory pipes (shared and global loads and stores).
ALU_OPCODES = frozenset(
    {"LOP3", "SHF", "IADD3", "VIADD", "VIMNMX", "LEA", "ISETP", "SEL", "MOV", "PRMT", "IMNMX", "BMSK", "SGXT"}
)
FMA_OPCODES = frozenset({"IMAD", "FFMA", "FMUL", "FADD", "HFMA2"})
MEMORY_OPCODES = frozenset({"LDS", "STS", "LDG", "STG", "LDSM", "LDL", "STL"})
# Whole-kernel opcodes of the copy pipelines: the bulk copies, the TMA tensor copies and the mbarrier operations.
ASYNC_OPCODES = ("UBLKCP", "UTMALDG", "SYNCS")
_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*?);")


def parse(lines: list[str]) -> list[tuple[int, str, str]]:
    """SASS text lines -> ``(address, opcode, operands)`` per instruction."""
    out = []
    for line in lines:
        m = _LINE.search(line)
        if m:
            out.append((int(m.group(1), 16), m.group(3), m.group(4)))
    return out


def pipes_of(mix: Counter | dict) -> dict[str, int]:
    """Instructions of an opcode mix by pipe: ``alu``, ``fma``, ``memory`` (by base opcode) and ``other``.

    Example::

        >>> pipes_of({"LOP3.LUT": 3, "SHF.R.W.U32": 2, "IMAD.MOV.U32": 1, "LDS.64": 2, "HGMMA.64x32x16.F32.BF16": 1})
        {'alu': 5, 'fma': 1, 'memory': 2, 'other': 1}
    """
    out = {"alu": 0, "fma": 0, "memory": 0, "other": 0}
    for op, n in mix.items():
        base = op.split(".")[0]
        key = "alu" if base in ALU_OPCODES else "fma" if base in FMA_OPCODES else "memory" if base in MEMORY_OPCODES else "other"
        out[key] += n
    return out


def analyse_kernel(lines: list[str], weights_per_batch: int) -> dict:
    """Opcode mix of the innermost loop with the most MMAs (``HMMA``, or the wide kernels' ``HGMMA``) and its
    instructions per weight (per lane); ``hmma`` counts either kind.

    Innermost: a loop around another loop with MMAs (a persistent kernel's loop over row blocks around its K loop)
    is not counted.
    """
    ins = parse(lines)
    addr_index = {a: i for i, (a, _, _) in enumerate(ins)}
    loops = []  # (first index, last index, HMMA count)
    for i, (addr, op, rest) in enumerate(ins):
        if op != "BRA":
            continue
        target = re.search(r"0x([0-9a-f]+)", rest)
        if not target:
            continue
        t = int(target.group(1), 16)
        if t > addr or t not in addr_index:
            continue
        body = ins[addr_index[t] : i + 1]
        if any(o == "EXIT" for _, o, _ in body):  # a jump back from an out-of-line path (a retry), not a loop
            continue
        hmma = sum(o.startswith(("HMMA", "HGMMA")) for _, o, _ in body)
        if hmma:
            loops.append((addr_index[t], i, hmma))
    innermost = [(lo, hi, h) for lo, hi, h in loops if not any(lo <= a and b <= hi and (a, b) != (lo, hi) for a, b, _ in loops)]
    best = None
    for lo, hi, hmma in innermost:
        if best is None or hmma > best[0]:
            best = (hmma, ins[lo : hi + 1])
    if best is None:
        return {"loop_instructions": 0}
    body = best[1]
    mix = Counter(o for _, o, _ in body)
    return {
        "loop_instructions": len(body),
        "hmma": best[0],
        "instructions_per_weight": len(body) / weights_per_batch,
        "barriers": sum(o.startswith(("BAR", "UCGABAR")) for _, o, _ in body),
        "mix": dict(mix.most_common()),
        "pipes": pipes_of(mix),
        "async_in_kernel": {p: sum(o.startswith(p) for _, o, _ in ins) for p in ASYNC_OPCODES},
    }


_CONTROL_WORD = re.compile(r"^\s*/\* 0x([0-9a-f]{16}) \*/\s*$")
# A consumer warp's release of a ring stage (mbarrier.arrive without a transaction count); the producer's arrivals carry one.
RELEASE_OPCODE = "SYNCS.ARRIVE.TRANS64.A1T0"


def loads_in_flight_at_release(lines: list[str]) -> tuple[int, int]:
    """``(releases, releases issued with a shared-memory load still in flight)`` of one kernel's ``cuobjdump -sass`` text.

    Each instruction's second 64-bit word holds its scheduling control: the scoreboard its result will set (bits
    46-48; 7: none) and the scoreboards it waits for before it issues (bits 52-57). A shared load (``LDS``) sets one;
    the first instruction that waits for it clears it. A consumer's release of a ring stage (``RELEASE_OPCODE``) issued
    while a load's scoreboard is set may let the producer's next copy overwrite the stage before the load has read it.
    The walk follows addresses in order (a loop's back edge carries its state into the next pass only where the body
    repeats in order), which is how ptxas lays out the rings' consumer loops.

    Example::

        >>> lds = ["/*0010*/ LDS.128 R8, [R2] ;", "/* 0x000e220000000c00 */"]
        >>> arrive = ["/*0020*/ SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R16+URZ], RZ ;", "/* 0x0005e80008100030 */"]
        >>> loads_in_flight_at_release(lds + arrive)
        (1, 1)
        >>> waits = ["/*0018*/ HMMA.16816.F32.BF16 R4, R8, R10, R4 ;", "/* 0x001fe20000041804 */"]
        >>> loads_in_flight_at_release(lds + waits + arrive)
        (1, 0)
    """
    pending: set[int] = set()
    releases = unsafe = 0
    for i, line in enumerate(lines):
        m = _LINE.search(line)
        control = _CONTROL_WORD.match(lines[i + 1]) if m and i + 1 < len(lines) else None
        if control is None:
            continue
        bits = int(control.group(1), 16) >> 41
        sets, waits = (bits >> 5) & 7, (bits >> 11) & 0x3F
        pending = {b for b in pending if not (waits >> b) & 1}
        op = m.group(3)
        if op == RELEASE_OPCODE:
            releases += 1
            unsafe += bool(pending)
        if op.startswith("LDS") and sets < 6:
            pending.add(sets)
    return releases, unsafe


# griddepcontrol.launch_dependents (programmatic dependent launch: the kernel after this one may start).
SIGNAL_OPCODE = "PREEXIT"


def programmatic_signals(lines: list[str]) -> tuple[int, int]:
    """``(predicated, unpredicated)`` counts of ``griddepcontrol.launch_dependents`` (``SIGNAL_OPCODE``) in one
    kernel's SASS. The split-K and row-tile GEMMs have one unpredicated (every thread's, after the K loop); the
    persistent one also a predicated one (its producer lane's, once its last copy is issued).

    Example::

        >>> programmatic_signals(["/*4bd0*/ @P0 PREEXIT ;", "/*4c20*/ PREEXIT ;", "/*4c30*/ ACQBULK ;"])
        (1, 1)
    """
    predicated = unpredicated = 0
    for line in lines:
        m = _LINE.search(line)
        if m and m.group(3) == SIGNAL_OPCODE:
            if m.group(2):
                predicated += 1
            else:
                unpredicated += 1
    return predicated, unpredicated


def kernel_kind(name: str) -> tuple[str, str] | None:
    """``(kind, vec16)`` of a mangled kernel name: a key of ``WEIGHTS_PER_LANE_PER_BATCH`` and the 16-byte-load flag.

    The variants' own kernels are matched first (their template arguments may look like the skinny kernel's);
    ``None`` for a kernel the report does not know.

    Example::

        >>> kernel_kind("_ZN12_GLOBAL__N_118skinny_gemm_kernelILi1ELb1EEEvNS_6ParamsE")
        ('1', '1')
        >>> kernel_kind("_ZN12_GLOBAL__N_115w12_bulk_kernelILi4EEEvNS_6ParamsEPfPj")
        ('w12_v6', '1')
        >>> kernel_kind("_ZN12_GLOBAL__N_115tma_gemm_kernelILi2EEEvNS_6ParamsEPfPj14CUtensorMap_stS3_S3_")
        ('q_v2', '1')
        >>> kernel_kind("_ZN12_GLOBAL__N_119tma_stream_k_kernelILi1ELi8EEEvNS_6ParamsEPfPj14CUtensorMap_stS3_S3_")
        ('w12_v8', '1')
        >>> kernel_kind("_ZN12_GLOBAL__N_115tma_rows_kernelILi0ELi16EEEvNS_6ParamsE14CUtensorMap_stS2_S2_")
        ('bf16_v4', '1')
        >>> kernel_kind("_ZN12_GLOBAL__N_115tma_wide_kernelILi1ELi2ELb0ELi1ELi2EEEvNS_6ParamsEPfPj14CUtensorMap_stS3_S3_")
        ('w12_wide', '1')
    """
    wide = _WIDE.search(name)
    if wide:
        return (WIDE_KINDS[wide.group(1)], "1") if wide.group(1) in WIDE_KINDS else None
    tma = re.search(r"tma_gemm_kernelILi(\d)E", name)
    if tma:
        return (TMA_KINDS[tma.group(1)], "1") if tma.group(1) in TMA_KINDS else None
    stream_k = re.search(r"tma_stream_k_kernelILi(\d)E", name)
    if stream_k:
        return (STREAM_K_KINDS[stream_k.group(1)], "1") if stream_k.group(1) in STREAM_K_KINDS else None
    rows = re.search(r"tma_rows_kernelILi(\d)E", name)
    if rows:
        return (ROW_TILE_KINDS[rows.group(1)], "1") if rows.group(1) in ROW_TILE_KINDS else None
    bulk = re.search(r"w12_bulk_kernelILi(\d)E", name)
    if bulk:
        return ("w12_v5" if bulk.group(1) == "1" else "w12_v6"), "1"
    stream = re.search(r"w12_stream_kernelILb(\d)E", name)
    if stream:
        return "w12_v3", stream.group(1)
    split = re.search(r"w12_split_kernelILb(\d)E", name)
    if split:
        return "w12_v4", split.group(1)
    skinny = re.search(r"kernelILi(\d)ELb(\d)E", name)
    if skinny:
        return skinny.group(1), skinny.group(2)
    return None


def main() -> None:
    """Command line: print the per-kernel SASS counts of a built library (``python -m specdec.kernels.cuda.sass_report LIB``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("library", help="the .so (or a text file of cuobjdump -sass output with --text)")
    parser.add_argument("--cuobjdump", default="cuobjdump")
    parser.add_argument("--text", action="store_true", help="the argument is already SASS text")
    args = parser.parse_args()
    if args.text:
        text = open(args.library).read()
    else:
        text = subprocess.run([args.cuobjdump, "-sass", args.library], capture_output=True, text=True, check=True).stdout
    loads = Counter(re.findall(r"\b(LDG[A-Z0-9_.]*|LDL[A-Z0-9_.]*|STL[A-Z0-9_.]*)", text))
    print("loads/local memory in the whole library:", dict(loads))
    for block in text.split("Function : ")[1:]:
        found = kernel_kind(block.split("\n", 1)[0].strip())
        if found is None:
            continue
        kind, vec16 = found
        wide = _WIDE.search(block.split("\n", 1)[0])
        stages_a_loop = 2 if wide and wide.group(3) == "1" else 1  # the pipelined wide loop: two stages an iteration
        rep = analyse_kernel(block.split("\n"), WEIGHTS_PER_LANE_PER_BATCH[kind] * stages_a_loop)
        releases, unsafe = loads_in_flight_at_release(block.split("\n"))
        label = f"{KIND_NAMES.get(kind, kind):5s} vec16={vec16}"
        if wide:
            label = f"{kind} NB={wide.group(2)} pipelined={wide.group(3)} ctas={wide.group(4)} groups={wide.group(5)}"
        print(
            f"{label}: loop {rep['loop_instructions']} instr, {rep.get('hmma')} HMMA, "
            f"{rep.get('instructions_per_weight', float('nan')):.2f} instr/weight/lane, "
            f"{rep.get('barriers', 0)} barrier instructions in the loop, in the kernel "
            + ", ".join(f"{k} {v}" for k, v in rep.get("async_in_kernel", {}).items())
            + (f", stage releases {releases} ({unsafe} with shared loads in flight)" if releases else "")
        )
        print("   ", ", ".join(f"{k} {v}" for k, v in list(rep.get("mix", {}).items())[:14]))
        if "pipes" in rep:
            print("    by pipe:", ", ".join(f"{k} {v}" for k, v in rep["pipes"].items()))


if __name__ == "__main__":
    main()
