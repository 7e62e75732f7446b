"""SlotLogitBiasFault: one slot of a ragged target biased from its generated position ``after`` on, the others clean."""

from __future__ import annotations

import pytest
import torch

import specdec as sd
from specdec.engine import Engine
from specdec.forcing import TokenForcingChecker
from specdec.models.ragged import RaggedDenseTarget, RequestRows
from specdec.testing import tiny_target
from specdec.testing.faults import LogitBiasFault, SlotLogitBiasFault

NEW_TOKENS = 48
AFTER = 20


@pytest.fixture(scope="module")
def dense():
    return tiny_target(seed=0, max_seq_len=128)


@pytest.fixture(scope="module")
def prompts(dense):
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(0, dense.vocab_size, (n,), generator=gen) for n in (5, 9, 7)]


def test_only_the_faulted_slot_is_biased_and_only_from_after_on(dense):
    fault = SlotLogitBiasFault(dense, slots=3, slot=1, bias=2.0, every=7, after=3)
    clean = RaggedDenseTarget(dense, slots=3)
    prefill = [RequestRows(s, torch.arange(1, 1 + n)[None]) for s, n in ((0, 4), (1, 5), (2, 3))]
    for ragged in (fault, clean):
        ragged.forward(prefill)
        for req in prefill:
            ragged.commit(req.slot, req.tokens.shape[1])
    # slot 1: prompt of 5, committed 5; rows at positions 5..8 decide generated positions 1..4
    rows = [RequestRows(s, torch.tensor([[11, 12, 13, 14]])) for s in (2, 1, 0)]
    faulty, reference = fault.forward(rows), clean.forward(rows)
    assert torch.equal(faulty[0].logits, reference[0].logits) and torch.equal(faulty[2].logits, reference[2].logits)
    delta = faulty[1].logits - reference[1].logits  # [1, 4, V]
    ids = torch.arange(dense.vocab_size)
    for row, generated in enumerate(range(1, 5)):
        expected = torch.where((ids % 7 == 0) & (generated >= 3), 2.0, 0.0)
        torch.testing.assert_close(delta[0, row], expected, atol=1e-5, rtol=0)


def test_tree_positions_are_taken_from_the_rows(dense):
    """Rows with explicit positions (a tree's depths) are judged by those, not by their row index."""
    fault = SlotLogitBiasFault(dense, slots=1, slot=0, bias=2.0, every=7, after=1)
    clean = RaggedDenseTarget(dense, slots=1)
    for ragged in (fault, clean):
        ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))])
        ragged.commit(0, 3)
    # root at position 3 (decides generated position 1), two siblings at position 4 (position 2)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    rows = [RequestRows(0, torch.tensor([[4, 5, 6]]), positions=torch.tensor([[2, 3, 3]]), mask=mask)]
    delta = fault.forward(rows)[0].logits - clean.forward(rows)[0].logits
    biased = delta[0, :, 0].round()
    assert biased.tolist() == [0.0, 2.0, 2.0]


def test_reset_of_the_faulted_slot_takes_the_next_prefill_as_the_prompt(dense):
    fault = SlotLogitBiasFault(dense, slots=2, slot=0, bias=2.0, every=7, after=0)
    fault.forward([RequestRows(0, torch.tensor([[1, 2, 3, 4, 5, 6]]))])
    assert fault.prompt_len == 6
    fault.reset(1)  # another slot: the faulted slot's prompt length stays
    assert fault.prompt_len == 6
    fault.reset(0)
    out = fault.forward([RequestRows(0, torch.tensor([[1, 2]]))])[0]
    assert fault.prompt_len == 2
    clean = RaggedDenseTarget(dense, slots=2)
    ref = clean.forward([RequestRows(0, torch.tensor([[1, 2]]))])[0]
    # the new prompt's last row decides generated position 0, biased since after = 0; its first row is prompt
    assert (out.logits - ref.logits)[0, :, 0].round().tolist() == [0.0, 2.0]


def test_in_an_engine_the_faulted_request_is_logit_bias_fault_alone_and_its_companions_are_clean(dense, prompts):
    """per_request layout (batch-invariant): the faulted request decodes as ``LogitBiasFault`` batch-1, the others as AR."""
    fault = SlotLogitBiasFault(dense, slots=3, slot=1, bias=2.0, every=7, after=AFTER)
    engine = Engine(fault, sd.NGramDrafter(), max_batch=3, num_draft_tokens=4)
    ids = [engine.add_request(p, max_new_tokens=NEW_TOKENS) for p in prompts]
    outputs = engine.run()
    drafter = sd.NGramDrafter()
    alone = [sd.generate(dense, p[None], NEW_TOKENS, drafter=drafter, num_draft_tokens=4).tokens[0] for p in prompts]
    faulted_alone = sd.generate(
        LogitBiasFault(dense, bias=2.0, every=7, after=AFTER), prompts[1][None], NEW_TOKENS, drafter=drafter, num_draft_tokens=4
    ).tokens[0]
    assert torch.equal(outputs[ids[0]], alone[0]) and torch.equal(outputs[ids[2]], alone[2])
    assert torch.equal(outputs[ids[1]], faulted_alone)
    assert torch.equal(outputs[ids[1]][:AFTER], alone[1][:AFTER]) and not torch.equal(outputs[ids[1]], alone[1])


def test_the_checker_fails_the_faulted_engine_after_the_onset_only(dense, prompts):
    fault = SlotLogitBiasFault(dense, slots=3, slot=0, bias=2.0, every=7, after=AFTER, layout="packed")
    engine = Engine(fault, sd.NGramDrafter(), max_batch=3, num_draft_tokens=4)
    ids = [engine.add_request(p, max_new_tokens=NEW_TOKENS) for p in prompts]
    outputs = engine.run()
    checker = TokenForcingChecker(dense, bucket_edges=(AFTER,))
    report = checker.check(prompts, [outputs[i] for i in ids])
    assert not report.passed
    assert report.by_bucket[f"pos < {AFTER}"].passed and report.by_bucket[f"pos >= {AFTER}"].rate_failed
    assert {e.sequence for e in report.large_margin_events} == {0}
    assert all(e.position >= AFTER for e in report.large_margin_events)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(slot=2), ValueError, "slot: expected an int in \\[0, 2\\), got 2"),
        (dict(slot=True), ValueError, "slot"),
        (dict(slot=0, every=0), ValueError, "every: expected an int >= 1, got 0"),
        (dict(slot=0, after=-1), ValueError, "after: expected an int >= 0, got -1"),
        (dict(slot=0, bias=float("inf")), ValueError, "bias: expected a finite float, got inf"),
        (dict(slot=0, bias="2"), ValueError, "bias"),
        (dict(slot=0, layout="rows"), ValueError, "layout"),
    ],
)
def test_bad_arguments_raise_naming_them(dense, kwargs, error, match):
    with pytest.raises(error, match=match):
        SlotLogitBiasFault(dense, slots=2, **kwargs)


def test_a_non_dense_target_is_refused(dense):
    with pytest.raises(TypeError, match="target: expected a specdec DenseTarget"):
        SlotLogitBiasFault(LogitBiasFault(dense), slots=2, slot=0)
