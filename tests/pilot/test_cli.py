import json

import pytest
import torch

from specdec.__main__ import main as specdec_main
from specdec.pilot.memory import MemoryEntry
from specdec.pilot.spec import SystemSpec


def test_pilot_cli_writes_spec_memory_and_report_on_the_tiny_target(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "pilot",
        "--target",
        "tiny",
        "--drafter",
        "ngram",
        "--prompts",
        "humaneval",
        "--rounds",
        "1",
        "--budget-minutes",
        "1",
        "--timer",
        "passes",
        "--dev-prompts",
        "1",
        "--sealed-prompts",
        "1",
        "--max-new-tokens",
        "12",
        "--evaluations",
        "2",
        "--directions",
        "draft_length,ngram_order",
        "--out",
        str(out),
    ]
    assert specdec_main(argv) == 0
    spec = SystemSpec.from_json((out / "spec.json").read_text())
    assert spec.target == {"kind": "tiny", "seed": 0} and spec.drafter["kind"] == "ngram"
    memory = json.loads((out / "memory.json").read_text())
    assert all(MemoryEntry(**entry) for entry in memory)
    rounds = json.loads((out / "rounds.json").read_text())["rounds"]
    assert len(rounds) == 1 and {c["direction"] for c in rounds[0]["candidates"]} == {"draft_length", "ngram_order"}
    report = (out / "report.md").read_text()
    assert "## Round 0" in report and "![gap waterfall](gaps.png)" in report
    for png in ("gaps.png", "speedup.png", "candidates.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert "final spec" in capsys.readouterr().out


def test_pilot_cli_rejects_bad_arguments(tmp_path):
    with pytest.raises(SystemExit, match="--rounds"):
        specdec_main(["pilot", "--rounds", "0", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--drafter"):
        specdec_main(["pilot", "--drafter", "eagle", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--target"):
        specdec_main(["pilot", "--target", str(tmp_path / "missing"), "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"--device: expected a torch device \(cpu, cuda or cuda:N\), got 'foo'"):
        specdec_main(["pilot", "--device", "foo", "--out", str(tmp_path)])
    # a drafter that does not fit the target: refused while setting up, naming both, before any round
    with pytest.raises(SystemExit, match=r"--drafter 'smollm2' on --target 'tiny': hidden_size"):
        specdec_main(["pilot", "--target", "tiny", "--drafter", "smollm2", "--rounds", "1", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"--dev-prompts, --sealed-prompts: expected at most 164 together"):
        specdec_main(["pilot", "--dev-prompts", "400", "--out", str(tmp_path)])
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="--device: 'cuda' asked for, but torch sees no CUDA device here"):
            specdec_main(["pilot", "--device", "cuda", "--out", str(tmp_path)])
    # options only building the system can refuse come back as messages, not tracebacks
    with pytest.raises(SystemExit, match="python -m specdec pilot: .*nonexistent_direction"):
        specdec_main(["pilot", "--target", "tiny", "--directions", "nonexistent_direction", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--drafter: expected dspark:FOLDER with a config.json in FOLDER"):
        specdec_main(["pilot", "--target", "tiny", "--drafter", f"dspark:{tmp_path / 'none'}", "--out", str(tmp_path)])
    for empty in ("", "draft_length,", " , "):  # not read as every direction
        with pytest.raises(SystemExit, match="--directions: expected comma-separated direction names, got an empty name"):
            specdec_main(["pilot", "--target", "tiny", "--directions", empty, "--out", str(tmp_path)])


def test_the_starting_system_leaves_room_for_its_own_drafts(tmp_path):
    """--num-draft-tokens past 30 needs room the gate checks for every candidate (else each 'could not run')."""
    from specdec.pilot import cli

    args = cli._parser().parse_args(
        ["--target", "tiny", "--num-draft-tokens", "40", "--sealed-prompts", "1", "--dev-prompts", "1", "--out", str(tmp_path)]
    )
    pilot, memory, bar, dev, sealed, out = cli._setup(args)
    bar.close()
    longest = max(p.numel() for p in [*dev, *sealed])
    assert pilot.spec.max_seq_len >= longest + args.max_new_tokens + 40 + 2
    verdict = pilot.gate.judge(pilot.spec.with_changes(num_draft_tokens=8), pilot.spec)  # no room error
    assert verdict is not None
    memory.close()


def test_rounds_json_is_strict_json_with_a_candidate_that_could_not_run(tmp_path):
    from specdec.pilot.loop import CandidateRecord, PilotResult, RoundRecord
    from specdec.pilot.memory import Memory
    from specdec.pilot.report import write_outputs

    spec = SystemSpec()
    record = RoundRecord(
        0,
        spec,
        spec,
        {},
        [("acceptance", float("inf"))],
        1.0,
        candidates=[CandidateRecord("draft_length", "search", {}, float("nan"), None, "nothing proposed")],
    )
    paths = write_outputs(PilotResult(spec, spec, [record]), Memory(), tmp_path)

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    rounds = json.loads(paths["rounds"].read_text(), parse_constant=refuse)
    assert rounds["rounds"][0]["candidates"][0]["raw_speedup"] == "nan"


def test_the_last_line_says_unchanged_when_the_pilot_changed_nothing():
    from specdec.pilot.cli import final_spec_line

    assert final_spec_line({}) == "final spec: unchanged"
    assert final_spec_line({"drafter": {"kind": "ngram"}}) == 'final spec: {"drafter": {"kind": "ngram"}}'
