"""The benchmarks as code: importable on a CPU without side effects, public names only, provenance everywhere.

Nothing here runs a benchmark; the GPU parts are only imported.
"""

import ast
import datetime
import importlib
import json
import re
from pathlib import Path

import pytest
import torch

import specdec
from benchmarks import common
from benchmarks.common import PROVENANCE_FIELDS, median_time_ms, provenance, provenance_line, source_digest, write_json

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCH.rglob("*.py") if p.name not in ("__init__.py", "common.py"))
MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in BENCH.rglob("*.py"))

# Private drafter names still read by the drafter benchmark while the drafter modules are reorganised.
# This list may only shrink: an entry that is no longer used must be removed (checked below).
ALLOWED_PRIVATE = {
    ("benchmarks/decode/bench_drafters.py", "_block_hidden"),
    ("benchmarks/decode/bench_drafters.py", "_draft"),
    ("benchmarks/decode/bench_drafters.py", "_graph_head"),
    ("benchmarks/decode/bench_drafters.py", "_graph_out"),
    ("benchmarks/decode/bench_drafters.py", "_graphs"),
    ("benchmarks/decode/bench_drafters.py", "_ingest"),
    # the step's Triton kernels themselves, compiled for sm_90 to read their registers and shared memory
    ("benchmarks/kernels/step_kernel_resources.py", "_combine_kernel"),
    ("benchmarks/kernels/step_kernel_resources.py", "_qk_norm_rope_kernel"),
    ("benchmarks/kernels/step_kernel_resources.py", "_rms_norm_kernel"),
    ("benchmarks/kernels/step_kernel_resources.py", "_silu_mul_kernel"),
    ("benchmarks/kernels/step_kernel_resources.py", "_split_kernel"),
}
# Attribute chains rooted here belong to other libraries (e.g. torch._scaled_mm), not to specdec.
FOREIGN_ROOTS = {"torch", "triton", "tl", "F"}


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def private_uses(path: Path) -> set[tuple[str, str]]:
    """(file, name) of every private attribute read or written and every private name imported."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in FOREIGN_ROOTS):
                found.add((rel(path), node.attr))
        elif isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            names = [a.name for a in node.names]
            found.update((rel(path), n) for n in parts + names if n.startswith("_") and not n.startswith("__"))
    return found


@pytest.mark.parametrize("module", MODULES)
def test_every_benchmark_module_imports_on_the_cpu(module, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{module} parsed its command line at import")

    monkeypatch.setattr("argparse.ArgumentParser.parse_args", refuse)
    importlib.import_module(module)


@pytest.mark.parametrize("path", SCRIPTS, ids=rel)
def test_importing_a_benchmark_starts_no_work(path):
    """Module level holds only imports, definitions, constants and the main guard."""
    tree = ast.parse(path.read_text())
    guards = [n for n in tree.body if isinstance(n, ast.If)]
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # docstring
        allowed = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign, ast.If)
        assert isinstance(node, allowed), f"{rel(path)}:{node.lineno}: {type(node).__name__} runs at import"
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
            names = {ast.unparse(c.func) for c in calls}
            assert names <= {"TargetConfig", "HybridConfig", "dict", "tuple", "range", "time.perf_counter"}, (
                f"{rel(path)}:{node.lineno}: module-level call {names}"
            )
    assert [ast.unparse(g.test) for g in guards] == ["__name__ == '__main__'"], rel(path)


def test_no_benchmark_file_touches_sys_path():
    offenders = [rel(p) for p in BENCH.rglob("*") if p.is_file() and "sys.path" in p.read_text(errors="replace")]
    assert offenders == []


def test_benchmarks_use_only_public_specdec_names():
    used = set().union(*(private_uses(p) for p in BENCH.rglob("*.py")))
    assert used - ALLOWED_PRIVATE == set(), "private names outside the allow-list"
    assert ALLOWED_PRIVATE - used == set(), "allow-list entries no longer used: remove them"


def test_the_private_name_scan_finds_private_names(tmp_path):
    sample = BENCH / "decode" / "bench_drafters.py"
    assert ("benchmarks/decode/bench_drafters.py", "_draft") in private_uses(sample)
    probe = BENCH / "_probe_for_test.py"
    try:
        probe.write_text("from specdec.models.dense import _rotate_half\ntarget._run(1)\ntorch._scaled_mm(1)\n")
        assert private_uses(probe) == {
            ("benchmarks/_probe_for_test.py", "_rotate_half"),
            ("benchmarks/_probe_for_test.py", "_run"),
        }
    finally:
        probe.unlink()


@pytest.mark.parametrize("path", SCRIPTS, ids=rel)
def test_every_benchmark_writes_and_prints_provenance(path):
    source = path.read_text()
    tree = ast.parse(source)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    # write_json and provenance_line directly, or benchmarks.common.report, which calls both
    assert "provenance" in names and ({"provenance_line", "write_json"} <= names or "report" in names), rel(path)
    calls = {ast.unparse(c.func) for c in ast.walk(tree) if isinstance(c, ast.Call)}
    assert not calls & {"json.dump", "open"}, f"{rel(path)} writes files without write_json"
    assert not any(c.endswith(".write_text") for c in calls), f"{rel(path)} writes files without write_json"


def test_provenance_has_every_field(monkeypatch):
    monkeypatch.setenv("SPECDEC_PDL", "gemm")
    prov = provenance(seed=7)
    assert tuple(prov) == PROVENANCE_FIELDS
    assert set(PROVENANCE_FIELDS) == {
        "specdec",
        "git_commit",
        "git_dirty",
        "source_sha256",
        "gpu",
        "driver",
        "torch",
        "triton",
        "transformers",
        "cuda",
        "seed",
        "command",
        "date_utc",
        "env",
    }
    assert prov["specdec"] == specdec.__version__ and prov["torch"] == torch.__version__ and prov["seed"] == 7
    assert prov["triton"] and prov["transformers"] and prov["command"]
    assert datetime.datetime.fromisoformat(prov["date_utc"]).utcoffset() == datetime.timedelta(0)
    if prov["git_commit"] is not None:
        assert re.fullmatch(r"[0-9a-f]{40}", prov["git_commit"]) and isinstance(prov["git_dirty"], bool)
    assert prov["env"]["SPECDEC_PDL"] == "gemm"
    line = provenance_line(prov)
    assert line.startswith("# specdec ") and "seed 7" in line and prov["date_utc"] in line
    assert " SPECDEC_PDL=gemm" in line.rsplit("|", 1)[1]
    with pytest.raises(TypeError, match="seed"):
        provenance(seed="0")


def test_the_source_digest_names_the_files_on_disk(tmp_path):
    for rel, text in {"specdec/a.py": "x = 1\n", "benchmarks/run.sh": "echo\n", "benchmarks/results/r.py": "1\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "specdec/notes.md").write_text("not source\n")
    first = source_digest(tmp_path / ".")
    assert re.fullmatch(r"[0-9a-f]{64}", first) and source_digest(tmp_path) == first  # one root, however spelled
    (tmp_path / "benchmarks/results/r.py").write_text("2\n")  # results are not source
    (tmp_path / "specdec/notes.md").write_text("other\n")
    assert source_digest(common._source_digest.cache_clear() or tmp_path) == first
    (tmp_path / "specdec/a.py").write_text("x = 2\n")
    assert source_digest(common._source_digest.cache_clear() or tmp_path) != first
    (tmp_path / "specdec/a.py").write_text("x = 1\n")
    (tmp_path / "specdec/a.py").rename(tmp_path / "specdec/b.py")  # the same bytes under another name
    assert source_digest(common._source_digest.cache_clear() or tmp_path) != first
    assert provenance(seed=None)["source_sha256"] == source_digest()


def test_write_json_always_carries_provenance(tmp_path):
    prov = provenance(seed=None)
    path = write_json(tmp_path / "deep" / "r.json", {"rows": [1, 2], "dtype": torch.float32}, prov)
    data = json.loads(path.read_text())
    assert data["provenance"] == prov and data["rows"] == [1, 2] and data["dtype"] == "torch.float32"
    incomplete = {k: v for k, v in prov.items() if k != "git_commit"}
    with pytest.raises(ValueError, match="git_commit"):
        write_json(tmp_path / "x.json", {}, incomplete)
    with pytest.raises(ValueError, match="provenance"):
        write_json(tmp_path / "x.json", {"provenance": 1}, prov)


def test_median_time_on_the_cpu():
    calls = []
    assert median_time_ms(lambda: calls.append(1), 4, device="cpu", warmup=2) >= 0
    assert len(calls) == 6
    with pytest.raises(ValueError, match="reps"):
        median_time_ms(lambda: None, 0, device="cpu")


RUNNERS = sorted(BENCH.glob("run_*.sh"))
LIMIT_S = 600


def runner_commands(text: str) -> list[tuple[str, int]]:
    """Each python command line of a runner with how often it runs: the item count of its ``for V in ...; do`` loop, else 1."""
    commands, runs = [], 1
    for line in text.splitlines():
        loop = re.match(r"^\s*for \w+ in ([^;]+); do\s*$", line)
        if loop:
            runs = len(loop[1].split())
        elif re.match(r"^\s*done\b", line):
            runs = 1
        elif re.search(r"\bpython3?\b", line) and not line.startswith("#"):
            commands.append((line, runs))
    return commands


def test_commands_inside_a_loop_count_once_per_item():
    text = 'timeout 5 python3 -m benchmarks.a\nfor v in v5 v6 v7; do\n  timeout 30 python3 -m benchmarks.b "$v"\ndone\n'
    assert [runs for _, runs in runner_commands(text)] == [1, 3]


@pytest.mark.parametrize("runner", RUNNERS, ids=rel)
def test_runners_state_their_time_and_run_modules_within_one_call(runner):
    text = runner.read_text()
    assert re.search(r"^# Expected time on one H200: ~\d", text, re.M), f"{rel(runner)}: no expected time"
    commands = runner_commands(text)
    assert commands, rel(runner)
    caps = []
    for line, runs in commands:
        # `timeout [-s SIGNAL] [-k SECONDS] CAP [compute-sanitizer OPTIONS | ncu ARGS] python3 -m benchmarks...`, maybe indented
        found = re.search(
            r"^\s*timeout (?:-s \w+ )?(?:-k \d+ )?(\d+) (?:compute-sanitizer (?:--?[\w-]+ \w+ )*|ncu (?:\S+ )*?)?python3? -m (benchmarks(?:\.\w+)+)\b",
            line,
        )
        assert found, f"{rel(runner)}: expected 'timeout N python3 -m benchmarks...', got {line!r}"
        caps.extend([int(found[1])] * runs)
        assert found[2] in MODULES, f"{rel(runner)}: no module {found[2]}"
    assert sum(caps) <= LIMIT_S - 30, f"{rel(runner)}: caps {caps} exceed one {LIMIT_S}-s call"


def runner_flags(text: str) -> list[tuple[str, str]]:
    """``(module, --flag)`` of every option a runner passes to a ``python3 -m benchmarks...`` command (continued
    lines joined; up to the command's first redirection, pipe or separator).

    Example:
        >>> runner_flags('timeout 5 python3 -m benchmarks.a --x 1 \\\n  --y-z "$OUT/f" > "$LOGS/l" 2>&1\n')
        [('benchmarks.a', '--x'), ('benchmarks.a', '--y-z')]
    """
    flags = []
    for line in text.replace("\\\n", " ").splitlines():
        found = re.search(r"python3? -m (benchmarks(?:\.\w+)+)(.*)", line)
        if found and not line.lstrip().startswith("#"):
            command = re.split(r"\s(?:\d?>|\||&&|;)", found[2])[0]
            flags += [(found[1], flag) for flag in re.findall(r"(?<!\S)(--[a-z][\w-]*)", command)]
    return flags


class _Parsed(Exception):
    pass


def module_options(module: str, monkeypatch) -> set[str]:
    """The option strings of a benchmark module's argument parser: its ``main`` runs up to its parse, no further."""
    import argparse
    import inspect
    import sys

    seen: set[str] = set()

    def record(self, args=None, namespace=None):
        seen.update(self._option_string_actions)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", record)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", record)
    main = importlib.import_module(module).main
    monkeypatch.setattr(sys, "argv", [module])
    with pytest.raises(_Parsed):
        main([]) if inspect.signature(main).parameters else main()
    return seen


@pytest.mark.parametrize("runner", RUNNERS, ids=rel)
def test_every_option_a_runner_passes_is_one_its_module_takes(runner, monkeypatch):
    """A misspelt or removed option would fail the GPU call at its first command; this finds it on the CPU."""
    wanted: dict[str, set[str]] = {}
    for module, flag in runner_flags(runner.read_text()):
        wanted.setdefault(module, set()).add(flag)
    for module, flags in wanted.items():
        unknown = flags - module_options(module, monkeypatch)
        assert not unknown, f"{rel(runner)}: {module} takes no option {sorted(unknown)}"


def test_an_option_a_module_does_not_take_is_found(monkeypatch):
    text = "timeout 5 python3 -m benchmarks.kernels.bench_wide_w12 --checks-only --no-such-flag 3 > log 2>&1\n"
    wanted = {flag for _, flag in runner_flags(text)}
    assert wanted == {"--checks-only", "--no-such-flag"}
    assert wanted - module_options("benchmarks.kernels.bench_wide_w12", monkeypatch) == {"--no-such-flag"}


def test_report_writes_the_json_and_the_plot_and_prints_provenance(tmp_path, capsys):
    from benchmarks.common import provenance, report

    prov = provenance(seed=3)
    drawn = []

    def plot(result, png):
        drawn.append((result["x"], png))
        return None

    path = report(tmp_path / "r.json", {"x": 1}, prov, plot, lambda result: [f"x = {result['x']}"])
    assert json.loads(path.read_text())["provenance"]["seed"] == 3 and drawn == [(1, tmp_path / "r.png")]
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("wrote ") and "# specdec" in out[1] and out[2] == "x = 1"
