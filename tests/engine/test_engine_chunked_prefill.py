"""Engine with chunked prefill (``max_pass_rows``): no forward past the cap, and the same tokens.

* fp32 greedy: every request's tokens with the cap are ``torch.equal`` to its tokens without it and to
  :func:`specdec.generate` alone, on dense and hybrid ragged targets (``per_request`` and ``packed``, and for
  both a bucketed static path with the default ``"auto"`` cap), chain and tree verification, n-gram drafts and drafts
  that are always accepted, the verify budget off, an int and ``"auto"``, for caps down to the smallest each
  rule allows (prompts in 3 or more chunks);
* no forward holds more rows than the cap (every forward's rows counted); a prompt chunk that is not its
  last emits nothing; without a budget the prefill chunks fill exactly the rows the verify rows leave;
* under a budget the allocation sees the prefill chunks as fixed rows and keeps the draft nodes under the cap;
* a request cancelled between its chunks frees its slot; the others' tokens are unchanged;
* a drafter with feature taps gets every prompt row's features at its first round, as from one prefill;
* ``"auto"`` is the target's largest row bucket where the rules allow it, else no cap;
* a cap that cannot hold the roots, or without a budget ``max_batch`` full rounds, raises at construction;
* a graphed hybrid's prefill goes in chunks of at most its ``static_request_rows`` (64), so no forward runs eagerly.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import specdec as sd
from specdec.contracts import DraftProposal
from specdec.drafters import ModelDrafter, NGramDrafter
from specdec.engine import Engine
from specdec.engine import engine as engine_module
from specdec.engine.budget import StepTimeTable
from specdec.models import ragged_hybrid_packed
from specdec.models.ragged import ROW_BUCKETS, RaggedDenseTarget, RequestRows
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.testing import tiny_target
from specdec.verify import ChainVerifier, TreeVerifier, TwoLevelVerifier

SEQ = 96
DENSE = tiny_target(seed=0, max_seq_len=SEQ)
HYBRID = tiny_target("qwen3_5_text", seed=0, max_seq_len=SEQ)
MAX_BATCH = 3
K = 3
# longer than the small caps, so prompts take 3 or more chunks; 5 requests through 3 slots join mid-run
PROMPT_LENGTHS = (60, 6, 23, 13, 2)
NEW_TOKENS = (12, 9, 14, 10, 11)
TABLE = StepTimeTable(rows=(1, 8, 32), ms=(1.0, 1.3, 3.0))


def prompts_of(lengths, seed=4):
    gen = torch.Generator().manual_seed(seed)
    # a small alphabet makes the n-gram drafter find matches, so rounds verify drafts
    return [torch.randint(0, 6, (n,), generator=gen) * 7 for n in lengths]


PROMPTS = prompts_of(PROMPT_LENGTHS)


def ngram(base):
    return NGramDrafter(max_ngram=2)


def ngram_tree(base):
    return NGramDrafter(max_ngram=2, max_paths=3)


def oracle(base):
    """Drafts the target's own greedy continuation (a private copy of it), so rounds accept every draft."""
    return ModelDrafter(copy.deepcopy(base))


# name -> (verifier, drafter of a base target, verify_budget, step_time)
SYSTEMS = {
    "chain": (ChainVerifier, ngram, None, None),
    "oracle": (ChainVerifier, oracle, None, None),
    "tree": (lambda: TreeVerifier(budget=6), ngram_tree, None, None),
    "budget-int": (ChainVerifier, ngram, 4, None),
    "budget-auto": (ChainVerifier, oracle, "auto", TABLE),
}


def base_target(kind: str):
    return DENSE if kind.startswith("dense") else HYBRID


def ragged_target(kind: str):
    if kind == "dense":
        return RaggedDenseTarget(DENSE, slots=MAX_BATCH)
    if kind in ("dense-static", "dense-apart"):
        ragged = RaggedDenseTarget(DENSE, slots=MAX_BATCH, layout="packed")
        ragged.enable_static_path((1, 2, 4, 8, 16, 24))
        if kind == "dense-apart":  # a prompt chunk of 8+ rows among verify rows attends its own slot apart
            ragged.long_request_rows, ragged.long_request_padding = 8, 1
        return ragged
    if kind == "hybrid":
        return RaggedHybridTarget(HYBRID, slots=MAX_BATCH)
    ragged = RaggedHybridTarget(HYBRID, slots=MAX_BATCH, layout="packed")
    if kind == "hybrid-static":
        ragged.enable_static_path((1, 2, 4, 8, 16, 24))
    return ragged


def record_rows(ragged) -> list[list[int]]:
    """Every forward of ``ragged`` from now on, as its requests' row counts (the instance's forward wrapped)."""
    passes: list[list[int]] = []
    forward = ragged.forward

    def recording(requests, **kwargs):
        passes.append([r.tokens.shape[1] for r in requests])
        return forward(requests, **kwargs)

    ragged.forward = recording
    return passes


def run(kind: str, system: str, max_pass_rows):
    """Every prompt through one engine; ``(outputs, rows per forward, most silent chunks of a request, engine)``."""
    make_verifier, make_drafter, budget, table = SYSTEMS[system]
    ragged = ragged_target(kind)
    passes = record_rows(ragged)
    engine = Engine(
        ragged,
        functools.partial(make_drafter, base_target(kind)),
        make_verifier(),
        max_batch=MAX_BATCH,
        num_draft_tokens=K,
        verify_budget=budget,
        step_time=table,
        max_pass_rows=max_pass_rows,
    )
    ids = [engine.add_request(p, max_new_tokens=n) for p, n in zip(PROMPTS, NEW_TOKENS)]
    silent = dict.fromkeys(ids, 0)
    while engine.has_work:
        for rid, new in engine.step().items():
            silent[rid] += new.numel() == 0
    return [engine.output(i) for i in ids], passes, max(silent.values()), engine


@functools.cache
def unchunked(kind: str, system: str) -> tuple:
    return tuple(run(kind, system, None)[0])


@functools.cache
def alone(kind: str, system: str) -> tuple:
    make_verifier, make_drafter, _, _ = SYSTEMS[system]
    target = base_target(kind)
    return tuple(
        sd.generate(target, p[None], max_new_tokens=n, drafter=make_drafter(target), verifier=make_verifier()).tokens[0]
        for p, n in zip(PROMPTS, NEW_TOKENS)
    )


CASES = [
    # budget off: at least max_batch full rounds (3 x 4 chain rows, 3 x 7 tree rows); with a budget: the roots
    *[("dense", "chain", cap) for cap in (12, 13)],
    ("dense", "oracle", 14),
    *[("dense", "tree", cap) for cap in (21, 25)],
    *[("dense", "budget-int", cap) for cap in (3, 5)],
    *[("dense", "budget-auto", cap) for cap in (3, 10)],
    *[("dense-static", system, "auto") for system in SYSTEMS],
    *[("dense-apart", system, "auto") for system in ("chain", "tree", "budget-auto")],
    *[("hybrid", system, cap) for system, cap in (("oracle", 12), ("tree", 22), ("budget-int", 4), ("budget-auto", 5))],
    *[("hybrid-packed", system, cap) for system, cap in (("oracle", 13), ("budget-auto", 3))],
    *[("hybrid-static", system, "auto") for system in ("oracle", "tree", "budget-auto")],
]


@pytest.mark.parametrize(("kind", "system", "cap"), CASES, ids=[f"{k}-{s}-cap{c}" for k, s, c in CASES])
def test_chunked_prefill_keeps_every_forward_under_the_cap_and_every_token(kind, system, cap):
    outputs, passes, silent, engine = run(kind, system, cap)
    assert engine.max_pass_rows == (24 if cap == "auto" else cap)  # "auto": the largest of the target's buckets
    assert max(sum(rows) for rows in passes) <= engine.max_pass_rows
    assert silent >= 2  # the longest prompt took 3 or more chunks
    assert engine.prefill_rows == sum(PROMPT_LENGTHS)
    if kind == "dense-apart":
        assert any(key[3] > 0 for key in engine.target.static_keys)  # some chunk attended apart
    for i, (got, without, by_itself) in enumerate(zip(outputs, unchunked(kind, system), alone(kind, system))):
        assert torch.equal(got, without), f"request {i}: chunked prefill changed its tokens"
        assert torch.equal(got, by_itself), f"request {i}: differs from generate alone"


class FullDrafter:
    """Always proposes every draft token it may (zeros), so each round's rows are known in advance."""

    vocab_size = None

    def reset(self) -> None:
        pass

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        return DraftProposal(torch.zeros(max_tokens, dtype=torch.long))


def test_without_a_budget_prefill_chunks_fill_the_rows_the_verify_rows_leave():
    ragged = RaggedDenseTarget(DENSE, slots=2)
    passes = record_rows(ragged)
    engine = Engine(ragged, FullDrafter(), max_batch=2, num_draft_tokens=K, max_pass_rows=9)
    first = engine.add_request(PROMPTS[4], max_new_tokens=30)  # 2 prompt rows, then rounds of 1 + 3 rows
    engine.step()
    late = engine.add_request(PROMPTS[2], max_new_tokens=4)  # 23 prompt rows: chunks of 9 - 4 = 5
    outputs = [engine.step() for _ in range(5)]
    assert passes == [[2], [4, 5], [4, 5], [4, 5], [4, 5], [4, 3]]
    assert [out[late].numel() for out in outputs] == [0, 0, 0, 0, 1]  # the first token after the last chunk
    assert all(out[first].numel() >= 1 for out in outputs)  # the verifying request's rounds went on
    assert engine.request(late).prefilled == 23 and engine.prefill_rows == 25


def test_the_budget_sees_prefill_chunks_as_fixed_rows_and_fits_nodes_under_the_cap(monkeypatch):
    calls = []
    allocate = engine_module.allocate

    def recording(gains, **kwargs):
        counts = allocate(gains, **kwargs)
        calls.append((kwargs["fixed_rows"], kwargs["max_rows"], sum(counts)))
        return counts

    monkeypatch.setattr(engine_module, "allocate", recording)
    ragged = RaggedDenseTarget(DENSE, slots=2)
    passes = record_rows(ragged)
    engine = Engine(ragged, FullDrafter(), max_batch=2, num_draft_tokens=K, verify_budget=8, max_pass_rows=6)
    engine.add_request(PROMPTS[4], max_new_tokens=30)
    engine.step()
    engine.add_request(PROMPTS[3], max_new_tokens=4)  # 13 prompt rows: after the root, chunks of 5, 5 and 3
    for _ in range(4):
        engine.step()
    # fixed rows = prefill chunk + root + the first-node floor (when it fits); nodes only in what is left
    assert calls == [(6, 6, 0), (6, 6, 0), (5, 6, 1), (4, 6, 2)]
    assert passes == [[2], [1, 5], [1, 5], [3, 3], [3, 3]]  # every forward after the first fills the cap


def test_a_request_cancelled_between_chunks_frees_its_slot_for_the_next():
    engine = Engine(DENSE, NGramDrafter(max_ngram=2), max_batch=2, num_draft_tokens=K, max_pass_rows=8)
    first = engine.add_request(PROMPTS[4], max_new_tokens=10)
    cut = engine.add_request(PROMPTS[0], max_new_tokens=5)  # 60 prompt rows
    late = engine.add_request(PROMPTS[3], max_new_tokens=6)
    engine.step()
    engine.step()
    assert 0 < engine.request(cut).prefilled < 60 and engine.waiting == (late,)
    engine.cancel(cut)
    outputs = engine.run()
    assert engine.status(cut) == "cancelled" and engine.output(cut).numel() == 0
    for rid, p, n in ((first, PROMPTS[4], 10), (late, PROMPTS[3], 6)):
        assert torch.equal(
            outputs[rid], sd.generate(DENSE, p[None], max_new_tokens=n, drafter=NGramDrafter(max_ngram=2)).tokens[0]
        )


class TappedDrafter:
    """Records the ``target_hidden`` it receives; proposes nothing."""

    target_layer_ids = (0, 2)
    vocab_size = None

    def __init__(self):
        self.received = []

    def reset(self) -> None:
        pass

    def propose(self, context, max_tokens, *, sampling, generator, target_hidden=None) -> DraftProposal:
        self.received.append(target_hidden)
        return DraftProposal(torch.zeros(0, dtype=torch.long))


@pytest.mark.parametrize("cap", [None, 5])
def test_a_tapped_drafter_gets_every_prompt_rows_features_at_its_first_round(cap):
    drafters = []
    engine = Engine(
        DENSE, lambda: drafters.append(TappedDrafter()) or drafters[-1], max_batch=2, num_draft_tokens=1, max_pass_rows=cap
    )
    for p in PROMPTS[:2]:
        engine.add_request(p, max_new_tokens=3)
    engine.run()
    for drafter, p in zip(drafters, PROMPTS):
        whole = RaggedDenseTarget(DENSE, slots=1).forward([RequestRows(0, p[None])], hidden_layers=(0, 2))[0]
        expected = torch.stack([h[0] for h in whole.hidden], dim=1)  # [P, taps, H]
        first = drafter.received[0]
        assert first.shape == expected.shape
        # chunks round differently from one prefill: equal to rounding
        assert torch.allclose(first, expected, atol=1e-5) if cap else torch.equal(first, expected)
        assert drafter.received[1].shape[0] == 1  # the next round: the one committed row


def test_auto_is_the_largest_row_bucket_where_the_rules_allow_it():
    def cap(target, verifier=None, **kwargs):
        return Engine(target, NGramDrafter(), verifier, max_batch=3, **kwargs).max_pass_rows

    assert cap(DENSE) is None and cap(HYBRID) is None  # no buckets: every forward eager anyway
    packed = RaggedDenseTarget(DENSE, slots=3, layout="packed")
    assert cap(packed) is None
    packed.enable_static_path((1, 4, 16))
    assert cap(packed, num_draft_tokens=3) == 16  # 3 full rounds of 4 rows fit
    assert cap(packed, num_draft_tokens=5) is None  # 3 x 6 rows do not: no cap rather than a refusal
    assert cap(packed, num_draft_tokens=5, verify_budget=4) == 16  # the budget fits nodes under it
    assert cap(packed, TreeVerifier(budget=4), num_draft_tokens=2) == 16  # 3 x (1 + 4)
    assert cap(packed, TreeVerifier(budget=5), num_draft_tokens=2) is None  # 3 x (1 + 5)
    assert cap(packed, TwoLevelVerifier(4, 4), num_draft_tokens=2) is None
    assert Engine(packed, NGramDrafter(), TwoLevelVerifier(4, 4), max_batch=3).round_rows is None
    assert cap(packed, max_pass_rows=None) is None
    assert cap(RaggedDenseTarget(DENSE, slots=3, layout="packed"), max_pass_rows=ROW_BUCKETS[-1]) == ROW_BUCKETS[-1]
    packed.disable_static_path()
    assert cap(packed, num_draft_tokens=3) is None


def test_a_cap_that_cannot_hold_what_a_forward_must_hold_raises():
    for bad in (0, -3, 2.5, True, "bucket"):
        with pytest.raises(ValueError, match=rf"max_pass_rows: expected None, 'auto' or an int >= 1, got {bad!r}"):
            Engine(DENSE, NGramDrafter(), max_batch=3, max_pass_rows=bad)
    with pytest.raises(ValueError, match=r"max_pass_rows: expected at least max_batch=3 \(each running request's root"):
        Engine(DENSE, NGramDrafter(), max_batch=3, verify_budget=4, max_pass_rows=2)
    assert Engine(DENSE, NGramDrafter(), max_batch=3, verify_budget=4, max_pass_rows=3).max_pass_rows == 3
    with pytest.raises(ValueError, match=r"must hold max_batch=3 full rounds of 4 rows \(12 rows\), got 11"):
        Engine(DENSE, NGramDrafter(), max_batch=3, num_draft_tokens=3, max_pass_rows=11)
    assert Engine(DENSE, NGramDrafter(), max_batch=3, num_draft_tokens=3, max_pass_rows=12).max_pass_rows == 12
    with pytest.raises(ValueError, match=r"must hold max_batch=3 full rounds of 7 rows \(21 rows\), got 20"):
        Engine(DENSE, NGramDrafter(), TreeVerifier(budget=6), max_batch=3, num_draft_tokens=3, max_pass_rows=20)
    with pytest.raises(ValueError, match="max_pass_rows: a TwoLevelVerifier's exact rows are chosen after its Q pass"):
        Engine(DENSE, NGramDrafter(), TwoLevelVerifier(4, 4), max_batch=3, max_pass_rows=64)


def test_a_graphed_hybrid_prefills_in_chunks_of_at_most_its_static_request_rows(monkeypatch):
    ragged = RaggedHybridTarget(HYBRID, slots=2, layout="packed")
    ragged.enable_static_path((1, 2, 4, 8, 16, 32, 64, 128, 256))
    eager = []
    real = ragged_hybrid_packed._eager_forward
    monkeypatch.setattr(ragged_hybrid_packed, "_eager_forward", lambda *args: eager.append(1) or real(*args))
    passes = record_rows(ragged)
    engine = Engine(ragged, NGramDrafter(), ChainVerifier(), max_batch=2, num_draft_tokens=3)
    prompts = [torch.arange(80) % HYBRID.vocab_size, torch.arange(20) % 7]
    ids = [engine.add_request(p, max_new_tokens=4) for p in prompts]
    outputs = engine.run()
    assert engine.max_pass_rows == 256 and ragged.static_request_rows == 64
    assert max(max(rows) for rows in passes) == 64 and eager == []  # 80 prompt rows in chunks of 64 and 16
    for p, rid in zip(prompts, ids):
        assert torch.equal(outputs[rid], sd.generate(HYBRID, p[None], max_new_tokens=4).tokens[0])
