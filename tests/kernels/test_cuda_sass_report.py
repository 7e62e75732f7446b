"""The SASS report names each bulk-copy kernel instantiation by its variant (one producer warp: v5, four: v6)."""

from __future__ import annotations

import sys

from specdec.kernels.cuda import sass_report


def test_bulk_copy_instantiations_are_reported_as_v5_and_v6(tmp_path, monkeypatch, capsys):
    loop = ["/*0000*/ HMMA.16816.F32.BF16 R0, R4, R8, R0 ;", "/*0010*/ UBLKCP.S.G [UR4], [UR6], UR8 ;", "/*0020*/ @P0 BRA 0x0 ;"]
    dump = "".join(
        f"Function : _ZN12_GLOBAL__N_115w12_bulk_kernelILi{warps}EEEvNS_6ParamsEPfPj\n" + "\n".join(loop) + "\n"
        for warps in (4, 1)
    )
    text = tmp_path / "sass.txt"
    text.write_text(dump)
    monkeypatch.setattr(sys, "argv", ["sass_report", "--text", str(text)])
    sass_report.main()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("w12_")]
    assert [line.split()[0] for line in lines] == ["w12_v6", "w12_v5"]
    assert all("loop 3 instr, 1 HMMA, 0.05 instr/weight/lane" in line and "UBLKCP 1" in line for line in lines)
