"""The forcing report as a reader sees it: verdict first, coverage per stratum, events as text."""

from __future__ import annotations

import json

import pytest
import torch

import specdec as sd
from specdec.forcing import TokenForcingChecker
from specdec.testing import tiny_target
from specdec.testing.faults import LogitBiasFault

NEW_TOKENS = 96
EDGE = 48


class LetterTokenizer:
    """Decodes id ``i`` as one letter, so decoded text can be checked against the ids."""

    def decode(self, ids):
        return "".join(chr(ord("a") + i % 26) for i in ids)


@pytest.fixture(scope="module")
def stock():
    return tiny_target(seed=0, max_seq_len=160, vocab_size=256, hidden_size=64, intermediate_size=96, num_kv_heads=4)


@pytest.fixture(scope="module")
def prompts(stock):
    return torch.randint(0, stock.vocab_size, (3, 8), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def ar_out(stock, prompts):
    return sd.generate(stock, prompts, NEW_TOKENS).tokens


@pytest.fixture(scope="module")
def fault_report(stock, prompts, ar_out):
    out = sd.generate(LogitBiasFault(stock, bias=2.0, every=7, after=EDGE), prompts, NEW_TOKENS).tokens
    return TokenForcingChecker(stock, bucket_edges=(EDGE,)).check(prompts, out, null=ar_out), out


def test_failing_report_states_its_verdict_first(fault_report):
    report, _ = fault_report
    lines = report.table().splitlines()
    assert report.verdict == "FAIL"
    assert lines[0].startswith("VERDICT: FAIL") and f"{len(report.failures)} rule" in lines[0]
    # the reasons follow the verdict, before any table row
    assert lines[1 : 1 + len(report.failures)] == [f"  - {reason}" for reason in report.failures]
    assert not any("PASS" in line for line in lines[: 1 + len(report.failures)])


def test_passing_report_states_its_verdict_first(stock, prompts, ar_out):
    spec = sd.generate(stock, prompts, NEW_TOKENS, drafter=sd.NGramDrafter()).tokens
    report = TokenForcingChecker(stock, bucket_edges=(EDGE,)).check(prompts, spec, null=ar_out)
    assert report.verdict == "PASS" and report.complete
    assert report.table().splitlines()[0].startswith("VERDICT: PASS")
    assert all(s.verdict == "PASS" for s in report.strata)


def test_a_fault_the_run_never_reaches_is_not_a_pass(stock, prompts, ar_out):
    # LogitBiasFault acts from position 2048 by default and the checker's late bucket starts there:
    # a 96-token run never gets there, so the late stratum was not judged
    out = sd.generate(LogitBiasFault(stock), prompts, NEW_TOKENS).tokens
    report = TokenForcingChecker(stock).check(prompts, out, null=ar_out)
    late = report.by_bucket["pos >= 2048"]
    assert late.num_tokens == 0 and not late.covered and late.verdict == "NOT COVERED"
    assert report.verdict == "INCOMPLETE" and report.uncovered == ("pos >= 2048",)
    lines = report.table().splitlines()
    assert lines[0].startswith("VERDICT: INCOMPLETE") and "pos >= 2048" in lines[0]
    assert any(line.startswith("  - NOT COVERED pos >= 2048") and f"reach {NEW_TOKENS - 1}" in line for line in lines)
    row = next(line for line in lines if line.startswith("pos >= 2048"))
    assert row.endswith("NOT COVERED") and "PASS" not in row
    data = json.loads(report.to_json())
    assert data["verdict"] == "INCOMPLETE" and data["by_bucket"]["pos >= 2048"]["verdict"] == "NOT COVERED"


def test_failing_report_also_names_uncovered_strata(stock, prompts, ar_out, fault_report):
    _, out = fault_report
    report = TokenForcingChecker(stock, bucket_edges=(EDGE, 1000)).check(prompts, out, null=ar_out)
    assert report.verdict == "FAIL" and report.uncovered == ("pos >= 1000",)
    assert "NOT covered" in report.table().splitlines()[0]


def test_large_margin_events_are_shown_as_text_with_ids_and_positions(prompts, fault_report):
    report, out = fault_report
    tokenizer = LetterTokenizer()
    table = report.table(tokenizer=tokenizer, max_events=3)
    event_lines = [line for line in table.splitlines() if line.startswith("  seq ")]
    assert len(event_lines) == 3
    for event, line in zip(report.large_margin_events, event_lines):
        full = torch.cat([prompts[event.sequence], out[event.sequence]])
        before = full[event.absolute_position - 8 : event.absolute_position].tolist()
        assert full[event.absolute_position] == event.emitted and event.context == tuple(before)
        assert f"seq {event.sequence} pos {event.position} (abs {event.absolute_position})" in line
        assert f"emitted {tokenizer.decode([event.emitted])!r} (id {event.emitted})" in line
        assert f"stock prefers {tokenizer.decode([event.stock_argmax])!r} (id {event.stock_argmax})" in line
        assert line.endswith(f"after ...{tokenizer.decode(before)!r}")
    listed = report.to_dict(tokenizer=tokenizer)["large_margin_events"][0]
    assert listed["emitted_text"] == tokenizer.decode([listed["emitted"]])


def test_table_rejects_a_tokenizer_without_decode(fault_report):
    with pytest.raises(TypeError, match="tokenizer: expected an object with decode"):
        fault_report[0].table(tokenizer=object())


def corrupted(ar_out, vocab_size: int, count: int, first: int = 10) -> torch.Tensor:
    """``ar_out`` with ``count`` tokens replaced by the next id (a stock mismatch each), spread over the rows."""
    out = ar_out.clone()
    for j in range(count):
        r, c = j % out.shape[0], first + 7 * j
        out[r, c] = (out[r, c] + 1) % vocab_size
    return out


def test_the_overall_row_judges_with_the_checkers_z(stock, prompts, ar_out):
    # one changed token (a few mismatches after it): z = 1 (a 68 % interval) fails the overall rate rule where the
    # default z does not, and the overall row says so too
    checker = TokenForcingChecker(stock, bucket_edges=(EDGE,), z=1.0, tau_floor=1e6)
    report = checker.check(prompts, corrupted(ar_out, stock.vocab_size, 1), null=ar_out)
    assert any(f.startswith("all:") for f in report.failures)
    assert report.strata[0].name == "all" and report.strata[0].verdict == "FAIL"
    assert "68.3% CI" in report.failures[0] and "68.3% CI" in report.table()
    default = TokenForcingChecker(stock, bucket_edges=(EDGE,), tau_floor=1e6)
    assert not any(
        f.startswith("all:") for f in default.check(prompts, corrupted(ar_out, stock.vocab_size, 1), null=ar_out).failures
    )


def test_tolerated_large_margin_events_do_not_fail_a_stratum(stock, prompts, ar_out):
    out = corrupted(ar_out, stock.vocab_size, 1)
    tolerant = TokenForcingChecker(stock, bucket_edges=(EDGE,), max_large_margin_events=5).check(prompts, out, null=ar_out)
    assert len(tolerant.large_margin_events) >= 1 and tolerant.verdict == "PASS"
    assert {s.verdict for s in tolerant.strata} == {"PASS"}
    strict = TokenForcingChecker(stock, bucket_edges=(EDGE,)).check(prompts, out, null=ar_out)
    assert strict.verdict == "FAIL" and strict.strata[0].verdict == "FAIL"


def test_an_infinite_margin_is_counted_and_written_as_strict_json(fault_report):
    report = fault_report[0]
    first = report.mismatches[0]
    infinite = type(first)(**{**first.__dict__, "margin": float("inf")})
    report = type(report)(**{**report.__dict__, "mismatches": (infinite, *report.mismatches[1:])})
    hist = report.to_dict()["margin_histogram"]["candidate"]
    assert sum(hist) == len(report.mismatches) and hist[-1] >= 1
    text = report.to_json()
    assert "Infinity" not in text and json.loads(text)["mismatches"][0]["margin"] == "inf"
