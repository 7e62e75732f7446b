import json

import pytest

from benchmarks.kernels import ncu_source

HEADER = (
    '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_long_sb","stall_long_sb (Not Issued)"'
)
EIGHT = f"""Kernel Name: tma_rows_kernel<1, 8, 1>
{HEADER}
"0x00","@!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R2], R3 ;","60","100","45","40"
"0x10","LDSM.16.M88.4 R4, [R5] ;","25","200","5","5"
"0x20","HMMA.16816.F32.BF16 R8, R4, R12, R8 ;","10","50","0","0"
"0x30","LDSM.16.M88.4 R6, [R7] ;","5","200","0","0"
"""
SIXTEEN = f"""Kernel Name: tma_rows_kernel<1, 16, 1>
{HEADER}
"0x00","HMMA.16816.F32.BF16 R8, R4, R12, R8 ;","1,000","7","0","0"
"""
SASS = EIGHT + EIGHT + SIXTEEN  # ncu prints each kernel's table twice

DETAILS = """"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"
"0","tma_rows_kernel<1, 8, 1>","Warp State Statistics","Warp Cycles Per Issued Instruction","cycle","9.5"
"0","tma_rows_kernel<1, 8, 1>","Speed Of Light","Duration","ns","57000"
"""


def test_opcodes_drop_predicates_and_modifiers():
    assert ncu_source.opcode("@!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R2], R3 ;") == "SYNCS"
    assert ncu_source.opcode("  EXIT ;") == "EXIT"
    assert ncu_source.opcode("") == ""


def test_tables_split_by_header_and_take_the_lines_before_as_label():
    tables = ncu_source.source_tables(SASS)
    assert [t["label"] for t in tables] == ["Kernel Name: tma_rows_kernel<1, 8, 1>", "Kernel Name: tma_rows_kernel<1, 16, 1>"]
    assert [len(t["instructions"]) for t in tables] == [4, 1]
    assert tables[1]["instructions"][0]["samples"]["Warp Stall Sampling (All Samples)"] == 1000.0
    assert tables[1]["instructions"][0]["executed"] == 7.0


def test_summary_shares_by_opcode_and_top_instructions():
    summary = ncu_source.summarize_table(ncu_source.source_tables(SASS)[0], top=2)
    assert summary["totals"]["Warp Stall Sampling (All Samples)"] == 100.0
    shares = {r["opcode"]: r["share"] for r in summary["by_opcode"]}
    assert shares == pytest.approx({"SYNCS": 0.60, "LDSM": 0.30, "HMMA": 0.10})
    assert [r["instructions"] for r in summary["by_opcode"]] == [1, 2, 1]
    assert [r["executed"] for r in summary["by_opcode"]] == [100.0, 400.0, 50.0]
    assert summary["executed"] == 550.0
    assert summary["reasons"] == pytest.approx({"stall_long_sb": 0.50})  # the "(Not Issued)" column is not a reason
    assert [(w["index"], w["executed"]) for w in summary["try_waits"]] == [(0, 100.0)]
    assert summary["try_waits"][0]["share"] == 0.0  # no branch follows it in the fixture
    assert [t["address"] for t in summary["top"]] == ["0x00", "0x10"]


def test_a_try_wait_takes_the_samples_of_the_branch_that_reads_its_predicate():
    text = f"""{HEADER}
"0x00","SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R9+URZ], R8 ;","1","10","0","0"
"0x10","IADD3 R17, R49, R5, R16 ;","2","10","0","0"
"0x20","@!P0 BRA 0x90 ;","7","10","7","7"
"""
    summary = ncu_source.summarize_table(ncu_source.source_tables(text)[0])
    assert summary["try_waits"][0]["share"] == pytest.approx(0.7)


def test_details_keep_warp_state_rows_only():
    metrics = ncu_source.details_metrics(DETAILS)
    assert metrics == {"0 tma_rows_kernel<1, 8, 1>": {"Warp Cycles Per Issued Instruction": "9.5 cycle"}}


def test_main_writes_json_and_refuses_a_csv_without_a_table(tmp_path, capsys):
    sass, details, out = tmp_path / "s.csv", tmp_path / "d.csv", tmp_path / "o.json"
    sass.write_text(SASS)
    details.write_text(DETAILS)
    ncu_source.main(["--sass", str(sass), "--details", str(details), "--out", str(out)])
    data = json.loads(out.read_text())
    assert [k["label"] for k in data["kernels"]][1].endswith("<1, 16, 1>")
    assert "SYNCS" in capsys.readouterr().out
    sass.write_text("==ERROR== no source\n")
    with pytest.raises(SystemExit, match="Address and Source"):
        ncu_source.main(["--sass", str(sass)])
