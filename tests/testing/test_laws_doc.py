"""docs/laws.md: the worked example runs and prints what the page says."""

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "laws.md"


def test_worked_example_prints_what_the_doc_shows():
    section = DOC.read_text().split("## Worked example", 1)[1]
    code = re.search(r"```python\n(.+?)\n```", section, flags=re.S).group(1)
    shown = re.search(r"```text\n(.+?)\n```", section, flags=re.S).group(1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(DOC), "exec"), {"__name__": "laws_doc"})
    assert printed.getvalue().strip() == shown.strip()
