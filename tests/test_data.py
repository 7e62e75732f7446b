"""specdec.data: the offline cache folder and the HumanEval prompts by index."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec import data


def test_an_empty_cache_variable_means_the_default_folder_not_the_current_one(monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", "")  # Path("") is "."
    assert data.cache_dir() == Path.home() / ".cache" / "specdec"
    monkeypatch.setenv("SPECDEC_CACHE", "/tmp/specdec-elsewhere")
    assert data.cache_dir() == Path("/tmp/specdec-elsewhere")


@pytest.mark.parametrize("bad", [-1, 164, True])
def test_humaneval_prompts_refuse_an_index_outside_the_problems(bad):
    # -1 read HumanEval/163's prompt without a word
    with pytest.raises(ValueError, match=rf"indices: expected problem indices in \[0, 164\), got {bad!r}"):
        data.humaneval_prompts([0, bad])
    assert "def has_close_elements(" in data.humaneval_prompts([0])[0]
