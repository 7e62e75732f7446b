"""The SASS report names each staged kernel by its variant (bulk copies from one producer warp: v5, four: v6; TMA: W12 v7, Q v2);
the built kernels keep their shared loads settled before a release, signal once, and (the wide ones) multiply with wgmma
and wait for it before the next decode."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.kernels.cuda import sass_report

BULK_ONE = "_ZN12_GLOBAL__N_115w12_bulk_kernelILi1EEEvNS_6ParamsEPfPj"
BULK_FOUR = "_ZN12_GLOBAL__N_115w12_bulk_kernelILi4EEEvNS_6ParamsEPfPj"
# the tensor-map kernel's instantiations, named as nvcc mangles them inside the file's anonymous namespace
TMA_W12 = "_ZN47_GLOBAL__N__4f1b1fa3_14_skinny_gemm_cu_17e8135d15tma_gemm_kernelILi1EEEvNS_6ParamsEPfPj14CUtensorMap_stS4_S4_"
TMA_Q = "_ZN47_GLOBAL__N__4f1b1fa3_14_skinny_gemm_cu_17e8135d15tma_gemm_kernelILi2EEEvNS_6ParamsEPfPj14CUtensorMap_stS4_S4_"


def test_staged_instantiations_are_reported_by_variant(tmp_path, monkeypatch, capsys):
    loop = [
        "/*0000*/ HMMA.16816.F32.BF16 R0, R4, R8, R0 ;",
        "/*0010*/ UBLKCP.S.G [UR4], [UR6], UR8 ;",
        "/*0020*/ UTMALDG.2D [UR8], [UR4] ;",
        "/*0030*/ @P0 BRA 0x0 ;",
    ]
    dump = "".join(f"Function : {name}\n" + "\n".join(loop) + "\n" for name in (BULK_FOUR, BULK_ONE, TMA_W12, TMA_Q))
    text = tmp_path / "sass.txt"
    text.write_text(dump)
    monkeypatch.setattr(sys, "argv", ["sass_report", "--text", str(text)])
    sass_report.main()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("w12_", "q_"))]
    assert [line.split()[0] for line in lines] == ["w12_v6", "w12_v5", "w12_v7", "q_v2"]
    # 4 instructions over 2 chunks x 2 rows x 16 weights per lane; the tensor-map W12 kernel's warps take one chunk a
    # stage (two halves of consumer warps), so the same loop is 4 instructions over 32 weights a lane there
    per_weight = {"w12_v6": "0.06", "w12_v5": "0.06", "w12_v7": "0.12", "q_v2": "0.06"}
    assert all(f"loop 4 instr, 1 HMMA, {per_weight[line.split()[0]]} instr/weight/lane" in line for line in lines), lines
    assert all("UBLKCP 1" in line and "UTMALDG 1" in line for line in lines), lines


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (TMA_W12, ("w12_v7", "1")),
        (TMA_Q, ("q_v2", "1")),
        (TMA_Q.replace("ILi2E", "ILi0E"), ("bf16_v2", "1")),
        (TMA_Q.replace("15tma_gemm_kernelILi2E", "19tma_stream_k_kernelILi0E"), ("bf16_v3", "1")),
        (TMA_Q.replace("ILi2E", "ILi3E"), None),
        (BULK_ONE, ("w12_v5", "1")),
        (BULK_FOUR, ("w12_v6", "1")),
        ("_ZN12_GLOBAL__N_117w12_split_kernelILb0EEEvNS_6ParamsEPfPj", ("w12_v4", "0")),
        ("_ZN12_GLOBAL__N_118w12_stream_kernelILb1EEEvNS_6ParamsE", ("w12_v3", "1")),
        ("_ZN12_GLOBAL__N_118skinny_gemm_kernelILi2ELb0EEEvNS_6ParamsE", ("2", "0")),
        ("_ZN12_GLOBAL__N_111zero_kernelEPfi", None),
        (TMA_W12.replace("15tma_gemm_kernelILi1EE", "15tma_rows_kernelILi1ELi8EE"), ("w12_v9", "1")),
        (TMA_W12.replace("15tma_gemm_kernelILi1EE", "15tma_rows_kernelILi2ELi16EE"), ("q_v4", "1")),
        (TMA_W12.replace("15tma_gemm_kernelILi1EE", "15tma_rows_kernelILi3ELi8EE"), None),
        (TMA_W12.replace("15tma_gemm_kernelILi1EE", "15tma_wide_kernelILi1ELi2ELb0ELi1ELi2EE"), ("w12_wide", "1")),
        (TMA_W12.replace("15tma_gemm_kernelILi1EE", "15tma_wide_kernelILi2ELi4ELb1ELi1ELi1EE"), ("q_wide", "1")),
    ],
    ids=[
        "tma-w12",
        "tma-q",
        "tma-bf16",
        "stream-k-bf16",
        "tma-unknown-kind",
        "bulk-one",
        "bulk-four",
        "split",
        "stream",
        "skinny-q",
        "unknown",
    ]
    + ["rows-w12", "rows-q", "rows-unknown-kind", "wide-w12", "wide-q"],
)
def test_kernel_kind_of_each_mangled_name(name, kind):
    assert sass_report.kernel_kind(name) == kind


def test_wide_loops_are_reported_by_form_with_their_pipes(tmp_path, monkeypatch, capsys):
    loop = [
        "/*0000*/ LDS R4, [R2] ;",
        "/*0010*/ SHF.R.W.U32 R5, R4, R6, R4 ;",
        "/*0020*/ LOP3.LUT R5, R5, 0x7f007f0, R7, 0xf8, !PT ;",
        "/*0030*/ IMAD R8, R4, R9, RZ ;",
        "/*0040*/ HGMMA.64x32x16.F32.BF16 R24, R56, gdesc[UR4], R24, gsb0 ;",
        "/*0050*/ @!P0 BRA 0x0 ;",
    ]
    one = TMA_W12.replace("15tma_gemm_kernelILi1EE", "15tma_wide_kernelILi1ELi2ELb0ELi1ELi2EE")
    piped = TMA_W12.replace("15tma_gemm_kernelILi1EE", "15tma_wide_kernelILi2ELi1ELb1ELi1ELi1EE")
    text = tmp_path / "sass.txt"
    text.write_text("".join(f"Function : {name}\n" + "\n".join(loop) + "\n" for name in (one, piped)))
    monkeypatch.setattr(sys, "argv", ["sass_report", "--text", str(text)])
    sass_report.main()
    out = capsys.readouterr().out.splitlines()
    # 6 instructions over the 32 weights a lane of one stage; the pipelined loop's body holds two stages
    assert any(line.startswith("w12_wide NB=2 pipelined=0 ctas=1 groups=2: loop 6 instr, 1 HMMA, 0.19 ") for line in out), out
    assert any(line.startswith("q_wide NB=1 pipelined=1 ctas=1 groups=1: loop 6 instr, 1 HMMA, 0.09 ") for line in out), out
    assert out.count("    by pipe: alu 2, fma 1, memory 1, other 2") == 2, out


def test_the_wide_decode_keeps_the_sign_off_the_integer_alu():
    # the sign bits through an IMAD (a per-lane multiplier), not a funnel shift: the one-set loop at 33-64 tokens keeps
    # its integer-ALU instructions a stage at W12 130 and Q 94 (146 and 110 with the shift; benchmarks/NOTES.md)
    pipes = {}
    for name, lines in _library_sass().items():
        match = re.search(r"tma_wide_kernelILi(\d)ELi2ELb0ELi1ELi1ELb0E", name)
        if match:
            pipes[match.group(1)] = sass_report.analyse_kernel(lines, 32)["pipes"]
    assert sorted(pipes) == ["1", "2"], sorted(pipes)
    assert pipes["1"]["alu"] <= 134 and pipes["1"]["fma"] >= 48, pipes["1"]
    assert pipes["2"]["alu"] <= 98 and pipes["2"]["fma"] >= 44, pipes["2"]


def _stage_loops(lines: list[str], mmas_a_stage: int) -> list[tuple[int, list[tuple[int, str, str]]]]:
    # (stages, body) of each loop (a backward branch, no EXIT in it) whose body holds HGMMAs
    ins = sass_report.parse(lines)
    at = {a: i for i, (a, _, _) in enumerate(ins)}
    loops = []
    for i, (addr, op, rest) in enumerate(ins):
        target = re.search(r"0x([0-9a-f]+)", rest) if op == "BRA" else None
        t = int(target.group(1), 16) if target else None
        if t is None or t >= addr or t not in at:
            continue
        body = ins[at[t] : i + 1]
        mmas = sum(o.startswith("HGMMA") for _, o, _ in body)
        if mmas and not any(o == "EXIT" for _, o, _ in body):
            loops.append((mmas // mmas_a_stage, body))
    return loops


def test_unrolled_wide_loops_keep_their_descriptors_uniform_and_wait_before_each_decode():
    kernels = _wide_kernels()
    for (kind, nb, ctas, groups, unrolled), lines in kernels.items():
        if not unrolled:
            continue
        mmas_a_stage = 4 * _wide_mmas_a_step(kind, nb)
        rolled = _stage_loops(kernels[(kind, nb, ctas, groups, 0)], mmas_a_stage)
        loops = _stage_loops(lines, mmas_a_stage)
        # a loop a group (one with one group), each over a pass of the group's ring slots (4-8 stages)
        assert len(rolled) == 1 and rolled[0][0] == 1 and len(loops) == groups, (kind, nb, groups, len(loops))
        per_stage = len(rolled[0][1])
        for stages, body in loops:
            assert 3 <= stages <= 8 and len(body) <= 0.9 * stages * per_stage, (kind, nb, groups, stages, len(body), per_stage)
            # the descriptors are uniform values: at most one move to a uniform register a stage (the rolled loop: two an MMA)
            assert sum(o == "R2UR" for _, o, _ in body) <= stages, (kind, nb, groups)
        code = [line for line in lines if re.match(r"\s*/\*[0-9a-f]{4,}\*/", line)]
        assert not any(re.search(r"\b(LDL|STL)\b", line) for line in code), (kind, nb, groups)
        assert _a_registers_written_in_flight(code) == [], (kind, nb, groups)


def _cuobjdump() -> str:
    # the toolkit's, else the copy Triton's wheel ships
    import shutil

    import triton

    found = shutil.which("cuobjdump")
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if found:
        return found
    assert bundled.is_file(), f"no cuobjdump on PATH nor at {bundled}"
    return str(bundled)


def _library_sass() -> dict[str, list[str]]:
    # each kernel's cuobjdump -sass lines of the built library, by mangled name
    from specdec.kernels.cuda import KernelLibraryError, build, load_library

    try:
        load_library()
    except KernelLibraryError as err:  # no nvcc and no built library on this machine
        pytest.skip(f"CUDA kernel library unavailable: {err}")
    dump = subprocess.run([_cuobjdump(), "-sass", str(build.library_path())], capture_output=True, text=True, check=True).stdout
    return {block.split("\n", 1)[0].strip(): block.split("\n") for block in dump.split("Function : ")[1:]}


def test_no_ring_consumer_releases_a_stage_with_a_shared_load_in_flight():
    released = {}
    for name, lines in _library_sass().items():
        releases, unsafe = sass_report.loads_in_flight_at_release(lines)
        if releases:
            released[name] = unsafe
    # every ring kernel (bulk-copy, tensor-map split-K, persistent and row-tile: W12, Q and bf16 at 8 and 16 tokens; the
    # Q view's row tiles at 8 tokens also with two consumer stage groups; the wide W12 and Q kernels at 1-4 n-tiles of 32,
    # each with and without its decode pipelined, and at 1-2 n-tiles for two CTAs an SM and for two stage groups; their
    # one-set loop unrolled over a pass of the ring at 1-4 n-tiles and, with two groups, at 1-2; the persistent wide
    # W12 and Q kernels at 1-4 n-tiles, their loop rolled and unrolled)
    assert len(released) == 73, sorted(released)
    assert sum("tma_wide_kernel" in name for name in released) == 36
    assert sum("tma_wide_stream_k_kernel" in name for name in released) == 16
    assert not any(released.values()), {name: n for name, n in released.items() if n}


def test_every_tensor_map_gemm_signals_once_its_weights_are_read():
    # specdec.kernels.launch: the split-K and row-tile kernels signal once, every thread after the K loop (unpredicated);
    # the persistent kernel's producer lane once it has issued its last copy (predicated on being that lane), and its
    # other threads after their last segment
    signals = {
        name: sass_report.programmatic_signals(lines)
        for name, lines in _library_sass().items()
        if re.search(r"tma_(gemm|stream_k|rows|wide|wide_stream_k)_kernel", name)
    }
    # three kernels x three kinds x 8 and 16 tokens, Q's two-group row tiles, the wide W12 and Q kernels at 1-4 n-tiles
    # (two forms each, a third at 1-2 for two CTAs an SM and a fourth at 1-2 for two stage groups; the unrolled loop of
    # one group at 1-4 and of two at 1-2), the persistent wide W12 and Q kernels at 1-4 n-tiles, rolled and unrolled
    assert len(signals) == 71, sorted(signals)
    persistent = {name: n for name, n in signals.items() if "stream_k_kernel" in name}
    assert len(persistent) == 22 and all(n == (1, 1) for n in persistent.values()), persistent
    assert all(n == (0, 1) for name, n in signals.items() if name not in persistent), signals


def test_a_release_with_a_load_in_flight_is_found_after_a_loop():
    def ins(addr: int, text: str, control: int) -> list[str]:
        return [f"/*{addr:04x}*/ {text} ;", f"/* 0x{control << 41:016x} */"]

    lds = 0 << 5 | 7 << 8  # sets scoreboard 0
    waits_0 = 7 << 5 | 7 << 8 | 1 << 11  # waits for scoreboard 0
    idle = 7 << 5 | 7 << 8
    release = "SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R16+URZ], RZ"
    body = (
        ins(0x10, "LDS.128 R8, [R2]", lds) + ins(0x20, release, idle) + ins(0x30, "HMMA.16816.F32.BF16 R4, R8, R10, R4", waits_0)
    )
    assert sass_report.loads_in_flight_at_release(body) == (1, 1)
    settled = ins(0x10, "LDS.128 R8, [R2]", lds) + ins(0x18, "STS [R3], R4", waits_0) + ins(0x20, release, idle)
    assert sass_report.loads_in_flight_at_release(settled) == (1, 0)
    # the producer's arrivals (with a transaction count) are not releases
    producer = ins(0x10, "LDS.128 R8, [R2]", lds) + ins(0x20, "SYNCS.ARRIVE.TRANS64 RZ, [UR9], R2", idle)
    assert sass_report.loads_in_flight_at_release(producer) == (0, 0)


def test_two_stage_groups_double_the_row_tile_consumers_and_keep_their_loops():
    """The two-group row-tile kernel (the Q view's at one MMA n-tile of tokens, the only one built) runs eight consumer
    warps (each waits on its own stages' barriers) with a loop no longer than the one-group kernel's, and no kernel
    spills registers."""
    loops = {}
    for name, lines in _library_sass().items():
        found = re.search(r"tma_rows_kernelILi(\d)ELi(\d+)ELi(\d)E", name)
        if found:
            kind, tok, groups = found.groups()
            loops[(kind, tok, groups)] = sass_report.analyse_kernel(lines, 1)["loop_instructions"]
            assert not any(re.search(r"\b(STL|LDL)\b", line) for line in lines), name
    one_group = [(k, t, "1") for k in "012" for t in ("8", "16")]
    assert sorted(loops) == sorted([*one_group, ("2", "8", "2")]), sorted(loops)  # kinds: 0 bf16, 1 W12, 2 Q
    one, two = loops[("2", "8", "1")], loops[("2", "8", "2")]
    assert 0 < two <= one + 4, (one, two)


def _wide_kernels(pipelined: bool = False) -> dict[tuple[int, int, int, int, int], list[str]]:
    # (kind, NB, CTAs an SM, stage groups, unrolled) -> SASS lines of the wide kernels with or without the pipelined loop
    found = {}
    for name, lines in _library_sass().items():
        match = re.search(r"tma_wide_kernelILi(\d)ELi(\d)ELb(\d)ELi(\d)ELi(\d)ELb(\d)E", name)
        if match and int(match.group(3)) == pipelined:
            key = (int(match.group(1)), int(match.group(2)), int(match.group(4)), int(match.group(5)), int(match.group(6)))
            found[key] = lines
    return found


def _wide_mma_n(kind: int, nb: int) -> int:
    """The n of the wide kernel's MMAs: the Q kernel (kind 2) one of n = 32 nb a k16 step, W12 (kind 1) nb of 32."""
    return 32 * nb if kind == 2 else 32


def _wide_mmas_a_step(kind: int, nb: int) -> int:
    return 1 if kind == 2 else nb


def _a_registers_written_in_flight(code: list[str]) -> list[str]:
    """Instructions that write a register an issued, unretired ``HGMMA`` reads as its A operand (four from the one named).

    A group ends at the MMA marked ``gsb0``; ``WARPGROUP.DEPBAR.LE gsb0, 0xN`` retires all but the newest N groups. The
    code is walked in order, with the body of its one backward branch around MMAs walked a second time, so that a write
    in the next iteration before the wait that retires this iteration's MMAs is seen (the barrier waits' retry stubs,
    after the last MMA, branch back too: they only spin).
    """
    last_mma = max((i for i, line in enumerate(code) if "HGMMA" in line), default=-1)
    at = {re.match(r"\s*/\*([0-9a-f]+)\*/", line).group(1).lstrip("0") or "0": i for i, line in enumerate(code)}
    back = []
    for i, line in enumerate(code):
        jump = re.search(r"\bBRA 0x([0-9a-f]+)", line)
        t = at.get(jump.group(1).lstrip("0") or "0") if jump else None
        if t is not None and t < i < last_mma and any("HGMMA" in c for c in code[t:i]):
            back.append((i, t))
    assert len(back) <= 1, back
    order = list(range(len(code)))
    if back:
        branch, target = back[0]
        order = list(range(branch + 1)) + list(range(target, len(code)))
    groups: list[list[int]] = []  # A registers of each unretired group, oldest first
    current: list[int] = []
    bad = []
    for i in order:
        line = code[i]
        if "HGMMA" in line:
            first = int(re.search(r"BF16 R\d+, R(\d+),", line).group(1))
            current += range(first, first + 4)
            if "gsb0" in line:
                groups.append(current)
                current = []
            continue
        wait = re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x(\d+)", line)
        if wait:
            keep = int(wait.group(1), 16)
            groups = groups[len(groups) - keep :] if keep else []
            continue
        dest = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?[A-Z0-9_.]+\s+R(\d+)", line)
        if dest and any(int(dest.group(1)) in g for g in groups):
            bad.append(line.strip())
    return bad


def test_pipelined_wide_kernels_decode_the_next_stage_into_other_registers_while_a_stage_s_mmas_run():
    """``SPECDEC_WIDE_PIPELINE=1``: each stage's MMAs are one group; the warpgroup waits until one group is left
    (``DEPBAR.LE gsb0, 0x1``) before releasing a stage, and no register an unretired MMA reads is written meanwhile."""
    kernels = _wide_kernels(pipelined=True)
    assert sorted(kernels) == [(kind, nb, 1, 1, 0) for kind in (1, 2) for nb in (1, 2, 3, 4)]
    for (kind, nb, _, _, _), lines in kernels.items():
        code = [line for line in lines if re.match(r"\s*/\*[0-9a-f]{4}\*/", line)]
        mmas = [i for i, line in enumerate(code) if f"HGMMA.64x{_wide_mma_n(kind, nb)}x16.F32.BF16" in line]
        # a stage's MMAs (four k16 steps) in the first stage, the loop's two stages (one a register set) and the odd
        # last stage
        assert len(mmas) == 4 * 4 * _wide_mmas_a_step(kind, nb), (kind, nb, len(mmas))
        waits = [re.search(r"DEPBAR\.LE gsb0, 0x(\d)", line).group(1) for line in code if "WARPGROUP.DEPBAR" in line]
        assert waits.count("1") == 3 and waits[-1] == "0", (kind, nb, waits)
        assert not any(re.search(r"\b(LDL|STL)\b", line) for line in code), (kind, nb)
        sets = {int(re.search(r"BF16 R\d+, R(\d+),", code[i]).group(1)) for i in mmas}
        assert len(sets) >= 8, (kind, nb, sorted(sets))  # at least two sets of four k16 fragments
        assert _a_registers_written_in_flight(code) == [], (kind, nb)


def test_the_in_flight_check_finds_a_write_to_an_a_register_before_its_wait():
    def ins(addr: int, text: str) -> str:
        return f"        /*{addr:04x}*/ {text} ;"

    safe = [
        ins(0x10, "HGMMA.64x32x16.F32.BF16 R24, R56, gdesc[UR4], R24, gsb0"),
        ins(0x20, "LOP3.LUT R60, R1, R2, R3, 0xf8, !PT"),  # the other set
        ins(0x30, "HGMMA.64x32x16.F32.BF16 R24, R60, gdesc[UR4], R24, gsb0"),
        ins(0x40, "WARPGROUP.DEPBAR.LE gsb0, 0x1"),
        ins(0x50, "LOP3.LUT R56, R1, R2, R3, 0xf8, !PT"),  # the first group is retired
    ]
    assert _a_registers_written_in_flight(safe) == []
    early = safe[:2] + [ins(0x28, "IADD3 R57, R1, R2, RZ")] + safe[2:]
    assert _a_registers_written_in_flight(early) == [early[2].strip()]
    # a loop whose next iteration writes the set of this iteration's MMAs before the wait that retires them
    loop = [
        ins(0x10, "LOP3.LUT R56, R1, R2, R3, 0xf8, !PT"),
        ins(0x20, "HGMMA.64x32x16.F32.BF16 R24, R56, gdesc[UR4], R24, gsb0"),
        ins(0x30, "WARPGROUP.DEPBAR.LE gsb0, 0x1"),
        ins(0x40, "@!P1 BRA 0x10"),
        ins(0x50, "HGMMA.64x32x16.F32.BF16 R24, R60, gdesc[UR4], R24, gsb0"),  # an odd last stage
    ]
    assert _a_registers_written_in_flight(loop) == [loop[0].strip()]


def test_wide_kernels_multiply_with_wgmma_and_wait_before_the_next_decode():
    kernels = _wide_kernels()
    # one CTA an SM at 1-4 n-tiles, two at 1-2, one with two stage groups at 1-2; the unrolled loop (checked below)
    rolled = {key: lines for key, lines in kernels.items() if not key[4]}
    assert sorted(kernels) == sorted(
        [(kind, nb, 1, 1, unrolled) for kind in (1, 2) for nb in (1, 2, 3, 4) for unrolled in (0, 1)]
        + [(kind, nb, 2, 1, 0) for kind in (1, 2) for nb in (1, 2)]
        + [(kind, nb, 1, 2, unrolled) for kind in (1, 2) for nb in (1, 2) for unrolled in (0, 1)]
    )
    for (kind, nb, _, _, _), lines in rolled.items():
        code = [line for line in lines if re.match(r"\s*/\*[0-9a-f]{4}\*/", line)]
        n = _wide_mma_n(kind, nb)
        mmas = [i for i, line in enumerate(code) if f"HGMMA.64x{n}x16.F32.BF16" in line]
        # a stage's four k16 steps times the MMAs of a step (each warpgroup runs the same code), A from registers (a
        # register, not a descriptor, second)
        assert len(mmas) == 4 * _wide_mmas_a_step(kind, nb), (kind, nb, len(mmas))
        assert all(re.search(rf"HGMMA\.64x{n}x16\.F32\.BF16 R\d+, R\d+, gdesc", code[i]) for i in mmas)
        assert not any(re.search(r"\b(LDL|STL)\b", line) for line in code), (kind, nb)  # no local memory
        # the group's last MMA closes it (gsb0); the next warpgroup instruction waits for it to complete, before the
        # stage is released and before any register an MMA read as A is written again
        last = mmas[-1]
        assert "gsb0" in code[last]
        wait = next(i for i in range(last + 1, len(code)) if "WARPGROUP" in code[i])
        assert "WARPGROUP.DEPBAR.LE gsb0, 0x0" in code[wait], code[wait]
        for i in mmas:  # no register an issued MMA reads as A is written before the wait
            first = int(re.search(r"BF16 R\d+, R(\d+),", code[i]).group(1))
            for line in code[i + 1 : wait]:
                dest = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?[A-Z0-9_.]+\s+R(\d+)", line)
                assert "HGMMA" in line or dest is None or not first <= int(dest.group(1)) < first + 4, (kind, nb, line)
