"""Guards on the repository itself: the README's commands and CI's script stay the same."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Set-up (two commands)", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_setup_commands():
    commands = _readme_commands()
    assert len(commands) == 2
    assert commands[0].endswith("python -m specdec demo")
    assert "pytest" in commands[1] and "TRITON_INTERPRET=1" in commands[1]
    assert "ruff check ." in commands[1] and "ruff format --check ." in commands[1]


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _readme_commands()[1] in ci


def test_requirements_pin_the_ci_stack():
    pins = dict(line.split("==") for line in (ROOT / "requirements-ci.txt").read_text().splitlines() if "==" in line)
    assert pins["torch"] == "2.13.0" and pins["triton"] == "3.7.1" and pins["transformers"] == "5.24.0"


def test_tests_mirror_the_package():
    """Every folder of tests/ names a package or module of specdec (or the docs and benchmarks it tests)."""
    import specdec

    package = Path(specdec.__file__).parent
    outside = {"docs", "benchmarks"}
    for folder in sorted(p for p in (ROOT / "tests").rglob("*") if p.is_dir() and p.name != "__pycache__"):
        rel = folder.relative_to(ROOT / "tests")
        if rel.parts[0] in outside:
            continue
        mirrored = package.joinpath(*rel.parts)
        assert mirrored.is_dir() or mirrored.with_suffix(".py").is_file(), f"tests/{rel} mirrors nothing under specdec/"


BANNER = re.compile(r"^\s*# ?(-{4,}|={4,})|# -{3,} .* -{3,}")


def _python_sources() -> list[Path]:
    return sorted(p for folder in ("specdec", "tests", "benchmarks", "examples", "docs") for p in (ROOT / folder).rglob("*.py"))


def test_no_section_banners():
    """House style: no section banners (comment lines of dashes or equals signs, or a title framed by dashes); make a module."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _python_sources()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if BANNER.search(line)
    ]
    assert not found, "section banners:\n" + "\n".join(found)
