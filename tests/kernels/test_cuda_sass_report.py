"""The SASS report names each staged kernel by its variant (bulk copies from one producer warp: v5, four: v6; TMA: W12 v7, Q v2)."""

from __future__ import annotations

import sys

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
        (TMA_Q.replace("ILi2E", "ILi0E"), None),
        (BULK_ONE, ("w12_v5", "1")),
        (BULK_FOUR, ("w12_v6", "1")),
        ("_ZN12_GLOBAL__N_117w12_split_kernelILb0EEEvNS_6ParamsEPfPj", ("w12_v4", "0")),
        ("_ZN12_GLOBAL__N_118w12_stream_kernelILb1EEEvNS_6ParamsE", ("w12_v3", "1")),
        ("_ZN12_GLOBAL__N_118skinny_gemm_kernelILi2ELb0EEEvNS_6ParamsE", ("2", "0")),
        ("_ZN12_GLOBAL__N_111zero_kernelEPfi", None),
        (TMA_W12.replace("15tma_gemm_kernelILi1EE", "15tma_rows_kernelILi1ELi8EE"), ("w12_v9", "1")),
        (TMA_W12.replace("15tma_gemm_kernelILi1EE", "15tma_rows_kernelILi2ELi16EE"), ("q_v4", "1")),
        (TMA_W12.replace("15tma_gemm_kernelILi1EE", "15tma_rows_kernelILi3ELi8EE"), None),
    ],
    ids=["tma-w12", "tma-q", "tma-unknown-kind", "bulk-one", "bulk-four", "split", "stream", "skinny-q", "unknown"]
    + ["rows-w12", "rows-q", "rows-unknown-kind"],
)
def test_kernel_kind_of_each_mangled_name(name, kind):
    assert sass_report.kernel_kind(name) == kind
