import json

import pytest

from specdec.pilot.memory import Memory, MemoryEntry, preconditions_of
from specdec.pilot.spec import SystemSpec


def _entry(mechanism, spec, low, accepted=True, verdict="PASS"):
    return MemoryEntry(
        mechanism,
        preconditions_of(spec),
        {"num_draft_tokens": 6},
        low + 0.1,
        low,
        low + 0.2,
        verdict,
        accepted,
        [] if accepted else ["token forcing failed"],
    )


def test_entries_persist_and_a_new_deployment_retrieves_matching_ones_best_first(tmp_path):
    cpu, gpu = SystemSpec(), SystemSpec(device="cuda")
    mem = Memory(tmp_path / "m.sqlite")
    mem.add(_entry("draft_length", cpu, 1.1))
    mem.add(_entry("tree_verifier", cpu, 1.3))
    mem.add(_entry("cuda_graphs", gpu, 1.5))
    mem.add(_entry("accept_all", cpu, 2.0, accepted=False, verdict="FAIL"))
    mem.close()
    again = Memory(tmp_path / "m.sqlite")
    assert [e.mechanism for e in again.retrieve(cpu.with_changes(num_draft_tokens=8))] == ["tree_verifier", "draft_length"]
    assert [e.mechanism for e in again.retrieve(gpu)] == ["cuda_graphs"]
    everything = [e.mechanism for e in again.retrieve(cpu, accepted_only=False)]
    assert everything[0] == "accept_all" and len(everything) == 3
    assert again.entries()[3].failure_modes == ["token forcing failed"] and again.entries()[3].accepted is False


def test_json_export_holds_every_field(tmp_path):
    mem = Memory()
    mem.add(_entry("draft_length", SystemSpec(), 1.1))
    data = json.loads(mem.export_json(tmp_path / "memory.json").read_text())
    assert len(data) == 1
    assert set(data[0]) == {
        "mechanism",
        "preconditions",
        "spec_diff",
        "gain",
        "ci_low",
        "ci_high",
        "forcing_verdict",
        "accepted",
        "failure_modes",
        "machine",
        "date",
    }
    assert data[0]["preconditions"] == {"architecture": "dense", "device": "cpu", "regime": "c1", "drafter_kind": "ngram"}


def test_bad_entries_raise():
    mem = Memory()
    with pytest.raises(ValueError, match="forcing_verdict"):
        mem.add(_entry("x", SystemSpec(), 1.0, verdict="maybe"))
    with pytest.raises(TypeError, match="MemoryEntry"):
        mem.add({"mechanism": "x"})


def test_a_gain_that_is_not_a_finite_number_is_refused_and_the_file_stays_usable(tmp_path):
    mem = Memory(tmp_path / "m.sqlite")
    spec = SystemSpec()
    with pytest.raises(ValueError, match="entry.gain: expected a finite number, got nan"):
        mem.add(_entry("draft_length", spec, float("nan")))
    mem.add(_entry("draft_length", spec, 0.5))
    assert [e.ci_low for e in mem.retrieve(spec, accepted_only=False)] == [0.5]
