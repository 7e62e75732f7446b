"""CITATION.cff is valid CFF 1.2.0 metadata that agrees with the package and with the README's BibTeX entry."""

from __future__ import annotations

import datetime
import re
import tomllib
from pathlib import Path

import pytest
import yaml

import specdec

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = ("cff-version", "message", "title", "authors")


@pytest.fixture(scope="module")
def citation() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


@pytest.fixture(scope="module")
def bibtex() -> dict[str, str]:
    readme = (ROOT / "README.md").read_text()
    section = re.search(r"^## Cite\n(.*?)^## ", readme, re.DOTALL | re.MULTILINE)
    assert section, "README.md: expected a '## Cite' section followed by another section"
    entry = re.search(r"```bibtex\n(@software\{specdec,\n.*?\n\})\n```", section[1], re.DOTALL)
    assert entry, "README.md Cite section: expected one @software{specdec, ...} entry in a bibtex block"
    return dict(re.findall(r"^\s*(\w+)\s*=\s*(.+?),?$", entry[1], re.MULTILINE))


def test_cff_has_the_required_fields(citation):
    missing = [key for key in REQUIRED if key not in citation]
    assert not missing, f"CITATION.cff: missing {missing}"
    assert citation["cff-version"] == "1.2.0"
    assert citation["title"] == "specdec"
    assert citation["license"] == "Apache-2.0"
    assert citation["authors"] == [{"name": "The specdec developers"}]


def test_cff_date_is_an_iso_date(citation):
    # CFF's schema wants a YYYY-MM-DD date; YAML may read an unquoted one as a date object
    assert str(citation["date-released"]) == "2026-12-01"
    datetime.date.fromisoformat(str(citation["date-released"]))


def test_cff_has_no_placeholder(citation):
    text = (ROOT / "CITATION.cff").read_text()
    assert "repository-code" not in citation
    assert not re.search(r"TODO|TBD|example\.com|<[^>]+>|XXX", text), "CITATION.cff: placeholder text"


def test_versions_agree(citation):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert str(citation["version"]) == specdec.__version__ == pyproject


def test_readme_bibtex_matches_the_cff(citation, bibtex):
    assert bibtex["title"] == "{" + citation["title"] + "}"
    assert bibtex["author"] == "{{" + citation["authors"][0]["name"] + "}}"
    assert bibtex["version"] == "{" + str(citation["version"]) + "}"
    assert bibtex["date"] == "{" + str(citation["date-released"]) + "}"
    assert bibtex["year"] == "{" + str(citation["date-released"])[:4] + "}"
    assert bibtex["license"] == "{" + citation["license"] + "}"


def test_cite_section_comes_just_before_license():
    headings = re.findall(r"^## (.+)$", (ROOT / "README.md").read_text(), re.MULTILINE)
    assert headings[-2:] == ["Cite", "License"]
