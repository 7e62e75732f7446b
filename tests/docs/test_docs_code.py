"""Every ```python block of docs/*.md and README.md runs (on the CPU, with the tiny models of specdec.testing).

The blocks of one file run in order in one namespace, as a reader would paste them, from a scratch
working directory. A block that cannot run here (a real checkpoint, a CUDA GPU) carries the comment
``<!-- no-run: REASON -->`` on the line just above its fence; it must still compile, and the list of
such blocks is pinned below so that it cannot grow unnoticed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

# (file, first code line) of every block that is compiled but not run; keep it short.
NO_RUN = {
    ("docs/drafters.md", "import torch, specdec as sd"),
}

FENCE = re.compile(r"^```python\n(?P<code>.*?)^```$", re.DOTALL | re.MULTILINE)
NO_RUN_MARKER = re.compile(r"<!-- no-run: (?P<reason>[^>]+?) -->\n$")


@dataclass(frozen=True)
class CodeBlock:
    path: str
    line: int
    code: str
    no_run_reason: str | None

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0] if self.code.strip() else ""


def code_blocks(text: str, path: str) -> list[CodeBlock]:
    """The ```python blocks of a Markdown text, with the reason of a ``no-run`` marker just above."""
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()]
        marker = NO_RUN_MARKER.search(before)
        blocks.append(CodeBlock(path, before.count("\n") + 1, match["code"], marker["reason"] if marker else None))
    opened = len(re.findall(r"^```python$", text, re.MULTILINE))
    if opened != len(blocks):
        raise ValueError(f"{path}: expected every ```python fence closed by ```, found {opened} fences and {len(blocks)} blocks")
    return blocks


def run_blocks(blocks: list[CodeBlock]) -> None:
    """Run the blocks in order in one namespace; no-run blocks are only compiled."""
    namespace: dict = {"__name__": "__docs__"}
    for block in blocks:
        compiled = compile(block.code, f"{block.path}:{block.line}", "exec")
        if block.no_run_reason is None:
            exec(compiled, namespace)


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


ALL_BLOCKS = {_relative(path): code_blocks(path.read_text(), _relative(path)) for path in FILES}


@pytest.mark.parametrize("path", [p for p, blocks in ALL_BLOCKS.items() if blocks])
def test_doc_code_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_blocks(ALL_BLOCKS[path])


def test_no_run_blocks_are_the_pinned_few():
    marked = {(block.path, block.first_line) for blocks in ALL_BLOCKS.values() for block in blocks if block.no_run_reason}
    assert marked == NO_RUN, f"blocks marked no-run changed: added {marked - NO_RUN}, removed {NO_RUN - marked}"


def test_readme_first_block_runs_first():
    """The README's opening example is the library's first impression: it runs, unmarked."""
    first = ALL_BLOCKS["README.md"][0]
    assert first.no_run_reason is None and "sd.generate" in first.code


def test_runner_fails_on_a_failing_block():
    text = "Intro.\n\n```python\nx = 1\n```\n\n```python\nassert x == 2, 'doc claim is false'\n```\n"
    with pytest.raises(AssertionError, match="doc claim is false"):
        run_blocks(code_blocks(text, "fake.md"))


def test_no_run_block_is_compiled():
    text = "<!-- no-run: needs a CUDA GPU -->\n```python\nx = (\n```\n"
    blocks = code_blocks(text, "fake.md")
    assert blocks[0].no_run_reason == "needs a CUDA GPU"
    with pytest.raises(SyntaxError):
        run_blocks(blocks)


def test_no_run_marker_applies_only_to_the_next_block():
    text = "<!-- no-run: needs a CUDA GPU -->\n```python\nx = 1\n```\n\nText.\n\n```python\nraise RuntimeError('ran')\n```\n"
    blocks = code_blocks(text, "fake.md")
    assert [block.no_run_reason for block in blocks] == ["needs a CUDA GPU", None]
    with pytest.raises(RuntimeError, match="ran"):
        run_blocks(blocks)


def test_unclosed_fence_is_an_error():
    with pytest.raises(ValueError, match="fake.md"):
        code_blocks("```python\nx = 1\n", "fake.md")
