"""The pilot's memory: validated (and rejected) mechanisms in SQLite, exported as JSON, retrieved by preconditions."""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sqlite3
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from specdec.forcing.report import finite_json
from specdec.pilot.spec import SystemSpec

__all__ = ["Memory", "MemoryEntry", "machine_name"]


def machine_name() -> str:
    """This machine in a few words: the GPU's name, or the CPU's architecture and core count.

    Example:
        >>> isinstance(machine_name(), str)
        True
    """
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"cpu {platform.machine()} x{os.cpu_count()}"


@dataclass
class MemoryEntry:
    """One mechanism tried on one system.

    Attributes:
        mechanism: the direction's name (or a stack of them, joined with ``+``).
        preconditions: ``{"architecture", "device", "regime", "drafter_kind"}`` of the system it was tried on.
        spec_diff: the spec fields it changed, with their new values.
        gain, ci_low, ci_high: gated speedup over the system it started from and its 95% interval.
        forcing_verdict: ``"PASS"`` or ``"FAIL"``.
        accepted: whether the gate accepted it.
        failure_modes: why it was rejected (empty when accepted).
        machine: :func:`machine_name`.
        date: ISO 8601 UTC.
    """

    mechanism: str
    preconditions: dict[str, Any]
    spec_diff: dict[str, Any]
    gain: float
    ci_low: float
    ci_high: float
    forcing_verdict: str
    accepted: bool
    failure_modes: list[str] = field(default_factory=list)
    machine: str = field(default_factory=machine_name)
    date: str = field(default_factory=lambda: datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))


def preconditions_of(spec: SystemSpec) -> dict[str, Any]:
    """The facts about ``spec`` memory entries are matched on.

    Example:
        >>> preconditions_of(SystemSpec())
        {'architecture': 'dense', 'device': 'cpu', 'regime': 'c1', 'drafter_kind': 'ngram'}
    """
    return {
        "architecture": spec.architecture,
        "device": "cuda" if spec.is_cuda else "cpu",
        "regime": spec.regime,
        "drafter_kind": spec.drafter["kind"],
    }


_COLUMNS = [
    ("mechanism", "TEXT"),
    ("preconditions", "TEXT"),
    ("spec_diff", "TEXT"),
    ("gain", "REAL"),
    ("ci_low", "REAL"),
    ("ci_high", "REAL"),
    ("forcing_verdict", "TEXT"),
    ("accepted", "INTEGER"),
    ("failure_modes", "TEXT"),
    ("machine", "TEXT"),
    ("date", "TEXT"),
]
_JSON_COLUMNS = ("preconditions", "spec_diff", "failure_modes")


class Memory:
    """A SQLite file of :class:`MemoryEntry` rows (``":memory:"`` for a throwaway one).

    Example:
        >>> mem = Memory(":memory:")
        >>> spec = SystemSpec()
        >>> mem.add(MemoryEntry("draft_length", preconditions_of(spec), {"num_draft_tokens": 6}, 1.3, 1.1, 1.5, "PASS", True))
        >>> [e.mechanism for e in mem.retrieve(spec)], mem.retrieve(spec.with_changes(device="cuda"))
        (['draft_length'], [])
    """

    def __init__(self, path: str | os.PathLike = ":memory:"):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path)
        columns = ", ".join(f"{name} {kind}" for name, kind in _COLUMNS)
        self._db.execute(f"CREATE TABLE IF NOT EXISTS entries (id INTEGER PRIMARY KEY AUTOINCREMENT, {columns})")
        self._db.commit()

    def add(self, entry: MemoryEntry) -> None:
        """Store one entry."""
        if not isinstance(entry, MemoryEntry):
            raise TypeError(f"entry: expected a MemoryEntry, got {type(entry).__name__}")
        if entry.forcing_verdict not in ("PASS", "FAIL"):
            raise ValueError(f"entry.forcing_verdict: expected 'PASS' or 'FAIL', got {entry.forcing_verdict!r}")
        for name in ("gain", "ci_low", "ci_high"):  # SQLite stores NaN as NULL, which retrieve() could not rank
            value = getattr(entry, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"entry.{name}: expected a finite number, got {value!r}")
        row = asdict(entry)
        values = [json.dumps(row[n], sort_keys=True) if n in _JSON_COLUMNS else row[n] for n, _ in _COLUMNS]
        values[[n for n, _ in _COLUMNS].index("accepted")] = int(entry.accepted)
        self._db.execute(
            f"INSERT INTO entries ({', '.join(n for n, _ in _COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})", values
        )
        self._db.commit()

    def entries(self) -> list[MemoryEntry]:
        """Every entry, oldest first."""
        rows = self._db.execute(f"SELECT {', '.join(n for n, _ in _COLUMNS)} FROM entries ORDER BY id").fetchall()
        out = []
        for row in rows:
            data = {n: (json.loads(v) if n in _JSON_COLUMNS else v) for (n, _), v in zip(_COLUMNS, row)}
            data["accepted"] = bool(data["accepted"])
            out.append(MemoryEntry(**data))
        return out

    def retrieve(self, spec: SystemSpec, *, accepted_only: bool = True) -> list[MemoryEntry]:
        """Entries whose preconditions match ``spec``'s, best gated gain (lower bound) first."""
        facts = preconditions_of(spec)
        found = [e for e in self.entries() if all(e.preconditions.get(k) == v for k, v in facts.items())]
        if accepted_only:
            found = [e for e in found if e.accepted]
        return sorted(found, key=lambda e: -e.ci_low)

    def export_json(self, path: str | os.PathLike) -> Path:
        """Write every entry to ``path`` as a JSON list; returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(finite_json([asdict(e) for e in self.entries()]), indent=2, sort_keys=True, allow_nan=False))
        return path

    def close(self) -> None:
        """Close the database."""
        self._db.close()
