"""The result tables in docs/*.md are the ones docs/tables.py renders from benchmarks/results/*.json."""

from __future__ import annotations

import difflib
import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))


def _load_tables():
    spec = importlib.util.spec_from_file_location("docs_tables", ROOT / "docs" / "tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tables = _load_tables()


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_doc_tables_match_the_results_json(path):
    text = path.read_text()
    rendered = tables.render(text)
    diff = "\n".join(difflib.unified_diff(text.splitlines(), rendered.splitlines(), "doc", "from JSON", lineterm=""))
    assert rendered == text, f"{path.name}: tables differ from benchmarks/results (run python docs/tables.py):\n{diff}"


def test_every_table_appears_in_a_doc():
    used = {name for path in DOCS for name in tables.table_names(path.read_text())}
    assert used == set(tables.TABLES), f"unused tables: {set(tables.TABLES) - used}"


def test_a_number_edited_by_hand_fails():
    doc = (ROOT / "docs" / "tree.md").read_text()
    assert "| tree, budget 64 | 1.994 |" in doc
    edited = doc.replace("| tree, budget 64 | 1.994 |", "| tree, budget 64 | 2.130 |")
    assert tables.render(edited) == doc != edited


def test_a_changed_result_changes_the_doc(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(tables.RESULTS, results)
    path = results / "tree_real_cpu_2026-11-29.json"
    data = json.loads(path.read_text())
    data["totals"]["chain"]["tokens_per_target_pass"] = 1.5
    path.write_text(json.dumps(data))
    doc = (ROOT / "docs" / "tree.md").read_text()
    rendered = tables.render(doc, tables.Results(results))
    assert "| chain (`NGramDrafter` + `ChainVerifier`) | 1.500 |" in rendered
    assert rendered != doc


def test_a_kernel_that_failed_its_check_in_the_run_is_an_error_not_a_missing_row(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(tables.RESULTS, results)
    path = results / tables.ROOFLINE_RUN
    data = json.loads(path.read_text())
    row = next(r for r in data["rows"] if r["M"] <= 8)
    kind = next(k.removesuffix("_vs_cublas_bf16") for k in row if k.startswith("cuda_q") and k.endswith("_vs_cublas_bf16"))
    for key in [k for k in row if k.startswith(kind + "_")]:
        del row[key]
    row[f"{kind}_check"] = "FAILED"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=rf"{kind} failed its check or raised at M = {row['M']}"):
        tables.cuda_roofline(tables.Results(results))


def test_text_outside_the_markers_is_kept():
    text = "Above.\n<!-- table: tree-real -->\nold\n<!-- /table -->\nBelow, with | pipes |.\n"
    rendered = tables.render(text)
    assert rendered.startswith("Above.\n<!-- table: tree-real -->\n| system |")
    assert rendered.endswith("<!-- /table -->\nBelow, with | pipes |.\n")


@pytest.mark.parametrize(
    "text, match",
    [
        ("<!-- table: no-such-table -->\n<!-- /table -->\n", "table name"),
        ("<!-- table: tree-real -->\nnever closed\n", "table markers"),
    ],
    ids=["unknown-name", "unclosed"],
)
def test_bad_markers_raise(text, match):
    with pytest.raises(ValueError, match=match):
        tables.render(text)


def test_missing_results_file_raises(tmp_path):
    with pytest.raises(ValueError, match="results file"):
        tables.render("<!-- table: tree-real -->\n<!-- /table -->\n", tables.Results(tmp_path))


def test_check_mode_reports_a_stale_doc(tmp_path, monkeypatch, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "stale.md").write_text("<!-- table: tree-real -->\n| hand | written |\n<!-- /table -->\n")
    monkeypatch.setattr(tables, "DOCS", docs)
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    assert tables.main(["--check"]) == 1
    assert "stale.md" in capsys.readouterr().out
    assert tables.main([]) == 0
    assert tables.main(["--check"]) == 0


def _copy_of_results(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(tables.RESULTS, results)
    return results


def test_two_level_systems_come_from_run2_with_older_rows_only_where_run2_has_none(tmp_path):
    results = _copy_of_results(tmp_path)
    path = results / "bench_two_level_hybrid_h200_2026-12-02_run2.json"
    data = json.loads(path.read_text())
    kept = [r for r in data["rows"] if (r["system"], r["profile"]) != ("chain", "specpilot-one-level")]
    assert len(kept) == len(data["rows"]) - 1
    data["rows"] = kept
    path.write_text(json.dumps(data))
    doc = (ROOT / "docs" / "two_level.md").read_text()
    assert "(first run)" not in doc
    rendered = tables.render(doc, tables.Results(results))
    older_chain = (
        "| Qwen3.5-4B hybrid | `fp32-dense` | `specpilot-one-level` | chain (first run) | 5.05 |  | 2.12x | yes | 19 | 0 |"
    )
    assert older_chain in rendered
    assert rendered.count("(first run)") == 1  # the older W12 tree row stays hidden behind run2's


def test_engine_table_reads_every_run3_row(tmp_path):
    results = _copy_of_results(tmp_path)
    path = results / "bench_engine_h200_2026-12-02_run3.json"
    data = json.loads(path.read_text())
    goal = next(r for r in data["rows"] if (r["layout"], r["concurrency"], r["system"]) == ("packed", 16, "spec, budget auto"))
    goal["speedup_vs_ar"] = 4.25
    goal["mismatches_vs_alone"] = 3
    path.write_text(json.dumps(data))
    rendered = tables.render((ROOT / "docs" / "engine.md").read_text(), tables.Results(results))
    assert "| packed | 16 | spec, budget auto | 541 | 4.25x | 1.34 s | 2.04 | 3 |" in rendered
    assert "budget auto: 4.25x AR, goal >= 4.0x met" in rendered


def test_ncu_table_refuses_an_unattributed_range(tmp_path):
    results = _copy_of_results(tmp_path)
    path = results / "ncu_profile_h200_2026-12-02_run4.json"
    data = json.loads(path.read_text())
    data["records"][0]["attributed"] = False
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="cublas_bf16\\|8b_o"):
        tables.render("<!-- table: cuda-ncu -->\n<!-- /table -->\n", tables.Results(results))


def test_rows_x_table_refuses_a_library_run_without_a_timed_call(tmp_path):
    results = _copy_of_results(tmp_path)
    path = results / tables.ROWS_X_RUNS["without x's box"][1]
    data = json.loads(path.read_text())
    data["shapes"] = [r for r in data["shapes"] if (r["linear"], r["M"], r["kind"]) != ("o", 8, "cuda_q_v5")]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="without x's box: qwen3-8b o M=8 cuda_q_v5: expected a time in each of 2 runs, got 1"):
        tables.cuda_rows_x_h100(tables.Results(results))


def test_a_traced_call_is_read_as_persistent_by_its_own_flag_not_its_label(tmp_path):
    results = _copy_of_results(tmp_path)
    split = tables.stream_k_trace_table(tables.Results(results), {"a label": tables.STREAM_K_TRACES["split-K"]})
    persistent = tables.stream_k_trace_table(tables.Results(results), {"a label": tables.STREAM_K_TRACES["persistent"]})
    assert all(row.endswith("| 1 |") for row in split.splitlines()[2:])
    assert not any(row.endswith("| 1 |") for row in persistent.splitlines()[2:])
