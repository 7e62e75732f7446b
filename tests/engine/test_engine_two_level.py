"""Engine with a TwoLevelVerifier: every request's tokens and draws equal ``generate`` alone.

* fp32 greedy and T > 0 with per-request seeds: each request's tokens, its rounds, its two-level counters
  and the generator state at every drafter call are those of ``specdec.generate(..., verifier=TwoLevelVerifier)``
  alone, for n-gram and model drafters, gates "always", "never" and alternating (mixed batches: some requests
  one-level, some two-level in the same step), any arrival order and companions (hypothesis);
* the same on the hybrid target (hypothesis: arrival orders, companions, gates, greedy and seeded T > 0);
* greedy output equals autoregressive decoding on the dense target in both layouts and on the hybrid target, also
  on the packed hybrid's fixed-shape (graph) body, whose Q and exact passes run in buckets of their own views;
* with batched drafting, draft 2 is one ``propose_batch`` call for the step's two-level requests, and the
  per-request layout keeps every request equal to ``generate`` alone;
* a drafter with feature taps gets the Q features for its second draft and the exact ones after the commit;
* a deliberately bad Q view leaves every output exact (agreement drops);
* mutants: accepting from the Q logits breaks equality; a Q row cannot be committed on a ragged target;
* one Q forward and one exact forward per step; ``verify_budget`` with a two-level verifier is refused.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specdec as sd
import specdec.models.weight_views as views_mod
from specdec.contracts import DraftProposal
from specdec.drafters import ModelDrafter, NGramDrafter
from specdec.drafters.block import DFlashDrafter
from specdec.drafters.block.fixtures import fixture_config, random_block_model
from specdec.engine import Engine
from specdec.engine.two_level import TwoLevelRounds
from specdec.models.ragged import RaggedDenseTarget, RequestRows
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.testing import tiny_target
from specdec.verify import TreeVerifier, TwoLevelVerifier
from specdec.verify.two_level_gate import TwoLevelGate

SEQ = 64
TARGET = tiny_target(seed=0, max_seq_len=SEQ)
HYBRID = tiny_target("qwen3_5_text", seed=0, max_seq_len=SEQ)
# a ModelDrafter decodes into its draft model's cache: one draft model per concurrent request, one for alone
DRAFT_MODELS = [tiny_target(seed=1, max_seq_len=SEQ) for _ in range(4)]
GATES = {
    "always": lambda: "always",
    "never": lambda: "never",
    # alternates two-level / one-level round by round (never leaves its warm-up): requests in different
    # phases make mixed batches, deterministically
    "alternate": lambda: TwoLevelGate(warmup=10_000),
}


class Recording:
    """A drafter that records the generator state at every call (draft 1 and draft 2): draws match call for call."""

    def __init__(self, inner):
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.states = []

    def reset(self) -> None:
        self.inner.reset()

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        self.states.append(None if generator is None else generator.get_state())
        return self.inner.propose(context, max_tokens, sampling=sampling, generator=generator)


def make_drafter(kind: str, index: int = 3):
    if kind == "ngram":
        return Recording(NGramDrafter(max_ngram=2, max_paths=2))
    return Recording(ModelDrafter(DRAFT_MODELS[index]))


def verifier(gate: str) -> TwoLevelVerifier:
    return TwoLevelVerifier(budget=8, q_budget=6, gate=GATES[gate]())


def prompts_of(lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    # a small alphabet makes the n-gram drafter find matches, so rounds accept several tokens
    return [torch.randint(0, 6, (n,), generator=gen) * 7 for n in lengths]


def counters(stats) -> dict:
    out = stats.as_dict()
    del out["seconds"]
    return out


@settings(max_examples=8, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=3),
    max_batch=st.integers(1, 3),
    drafter=st.sampled_from(["ngram", "model"]),
    gate=st.sampled_from(sorted(GATES)),
    temperature=st.sampled_from([0.0, 1.0]),
    seed=st.integers(0, 10_000),
)
def test_each_request_equals_generate_alone_draw_for_draw(lengths, max_batch, drafter, gate, temperature, seed):
    prompts = prompts_of(lengths, seed)
    news = [6 + (seed + i) % 9 for i in range(len(prompts))]
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed)).tolist()
    drafters = {}

    def factory():
        d = make_drafter(drafter, len(drafters))
        drafters[len(drafters)] = d
        return d

    engine = Engine(TARGET, factory, verifier(gate), max_batch=max_batch)
    ids = {i: engine.add_request(prompts[i], max_new_tokens=news[i], temperature=temperature, seed=seed + i) for i in order}
    outputs = engine.run()
    for k, i in enumerate(order):
        v, d = verifier(gate), make_drafter(drafter)
        out = sd.generate(TARGET, prompts[i][None], news[i], drafter=d, verifier=v, temperature=temperature, seed=seed + i)
        state = engine.request(ids[i])
        assert torch.equal(outputs[ids[i]], out.tokens[0]), f"request {i} differs from alone"
        stats = out.per_request[0]
        assert (state.rounds, state.accepted) == (stats.rounds, sum(n * c for n, c in enumerate(stats.accepted_histogram)))
        assert counters(state.two_level.stats) == counters(v.stats)
        engine_states = drafters[k].states
        assert len(engine_states) == len(d.states)
        assert all(a is None and b is None or torch.equal(a, b) for a, b in zip(engine_states, d.states))


def test_mixed_batches_run_one_level_and_two_level_requests_in_the_same_step():
    prompts = prompts_of([7, 4, 10], seed=3)
    engine = Engine(TARGET, lambda: NGramDrafter(max_ngram=2), verifier("alternate"), max_batch=3)
    ids = [engine.add_request(prompts[0], max_new_tokens=20)]
    engine.step()  # its prefill; the others join at the next step, one round behind it
    ids += [engine.add_request(p, max_new_tokens=20) for p in prompts[1:]]
    mixed = 0
    while engine.has_work:
        engine.step()
        kinds = {engine.request(rid).two_level.last_round.two_level for rid in engine.running if engine.request(rid).rounds}
        mixed += kinds == {True, False}
    assert mixed > 0
    for rid, p in zip(ids, prompts):
        assert torch.equal(engine.output(rid), sd.generate(TARGET, p[None], 20).tokens[0])


@pytest.mark.parametrize("layout", ["per_request", "packed"])
@pytest.mark.parametrize("gate", ["always", "alternate"])
def test_greedy_outputs_equal_autoregressive_in_both_layouts(layout, gate):
    prompts = prompts_of([5, 9, 2, 12], seed=11)
    engine = Engine(TARGET, lambda: NGramDrafter(max_ngram=2, max_paths=2), verifier(gate), max_batch=3, layout=layout)
    ids = [engine.add_request(p, max_new_tokens=14 + i) for i, p in enumerate(prompts)]
    outputs = engine.run()
    for i, (rid, p) in enumerate(zip(ids, prompts)):
        assert torch.equal(outputs[rid], sd.generate(TARGET, p[None], 14 + i).tokens[0])
    assert engine.two_level.q_passes > 0


@settings(max_examples=4, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 10), min_size=1, max_size=3),
    max_batch=st.integers(1, 3),
    gate=st.sampled_from(sorted(GATES)),
    seed=st.integers(0, 10_000),
)
def test_hybrid_requests_in_any_order_and_company_equal_generate_alone(lengths, max_batch, gate, seed):
    prompts = prompts_of(lengths, seed)
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed)).tolist()
    engine = Engine(HYBRID, lambda: NGramDrafter(max_ngram=2, max_paths=2), verifier(gate), max_batch=max_batch)
    ids = {i: engine.add_request(prompts[i], max_new_tokens=10, temperature=float(i % 2), seed=seed + i) for i in order}
    outputs = engine.run()
    for i, p in enumerate(prompts):
        v = verifier(gate)
        alone = sd.generate(
            HYBRID,
            p[None],
            10,
            drafter=NGramDrafter(max_ngram=2, max_paths=2),
            verifier=v,
            temperature=float(i % 2),
            seed=seed + i,
        )
        assert torch.equal(outputs[ids[i]], alone.tokens[0]), f"request {i} differs from alone"
        assert counters(engine.request(ids[i]).two_level.stats) == counters(v.stats)


@pytest.mark.parametrize("gate", ["always", "alternate"])
def test_hybrid_target_requests_equal_generate_alone_and_autoregressive(gate):
    prompts = prompts_of([6, 3, 9], seed=5)
    engine = Engine(HYBRID, lambda: NGramDrafter(max_ngram=2, max_paths=2), verifier(gate), max_batch=2)
    assert isinstance(engine.target, RaggedHybridTarget)
    ids = [engine.add_request(p, max_new_tokens=12, temperature=float(i % 2), seed=i) for i, p in enumerate(prompts)]
    outputs = engine.run()
    for i, (rid, p) in enumerate(zip(ids, prompts)):
        v = verifier(gate)
        alone = sd.generate(
            HYBRID, p[None], 12, drafter=NGramDrafter(max_ngram=2, max_paths=2), verifier=v, temperature=float(i % 2), seed=i
        )
        assert torch.equal(outputs[rid], alone.tokens[0])
        assert counters(engine.request(rid).two_level.stats) == counters(v.stats)
        if i % 2 == 0:
            assert torch.equal(outputs[rid], sd.generate(HYBRID, p[None], 12).tokens[0])


def test_graphed_packed_hybrid_runs_q_and_exact_passes_on_its_fixed_shape_body():
    # the body CUDA graphs capture, run eagerly: one bucket per weight view, Q rows discarded, exact rows committed
    ragged = RaggedHybridTarget(HYBRID, slots=2, layout="packed")
    ragged.enable_static_path()
    prompts = prompts_of([6, 3, 9], seed=7)
    engine = Engine(ragged, lambda: NGramDrafter(max_ngram=2, max_paths=2), verifier("always"), max_batch=2)
    ids = [engine.add_request(p, max_new_tokens=12) for p in prompts]
    outputs = engine.run()
    for rid, p in zip(ids, prompts):
        assert torch.equal(outputs[rid], sd.generate(HYBRID, p[None], 12).tokens[0])
    assert {key[-1] for key in ragged.static_keys} == {"exact", "q"} and engine.two_level.q_passes > 0


def test_a_tapped_drafter_gets_q_features_for_draft_two_as_alone():
    config = fixture_config("DFlashDraftModel", TARGET, num_layers=1, target_layer_ids=[0, 1], block_size=5)
    model = random_block_model(config, TARGET, seed=3)
    prompts = prompts_of([6, 11], seed=7)
    engine = Engine(TARGET, lambda: DFlashDrafter(model, TARGET), verifier("always"), max_batch=2)
    ids = [engine.add_request(p, max_new_tokens=10, temperature=float(i), seed=i) for i, p in enumerate(prompts)]
    outputs = engine.run()
    for i, (rid, p) in enumerate(zip(ids, prompts)):
        v = verifier("always")
        alone = sd.generate(TARGET, p[None], 10, drafter=DFlashDrafter(model, TARGET), verifier=v, temperature=float(i), seed=i)
        assert torch.equal(outputs[rid], alone.tokens[0])
        assert counters(engine.request(rid).two_level.stats) == counters(v.stats)


def test_a_bad_q_view_leaves_every_output_exact(monkeypatch):
    prompts = prompts_of([7, 5, 9], seed=2)
    ar = [sd.generate(TARGET, p[None], 16).tokens[0] for p in prompts]
    agreement = {}
    for name in ("q", "noise"):
        target = tiny_target(seed=0, max_seq_len=SEQ)  # its own Q view, built at first use
        if name == "noise":
            gen = torch.Generator().manual_seed(0)
            monkeypatch.setattr(views_mod, "q_view_weight", lambda w, **_: torch.randn(w.shape, generator=gen, dtype=w.dtype))
        engine = Engine(target, lambda: NGramDrafter(max_ngram=2), verifier("always"), max_batch=3)
        ids = [engine.add_request(p, max_new_tokens=16) for p in prompts]
        outputs = engine.run()
        for rid, expected, p in zip(ids, ar, prompts):
            assert torch.equal(outputs[rid], expected), name
            v = verifier("always")  # the same target, so the same (bad) Q view: the same rounds alone
            alone = sd.generate(target, p[None], 16, drafter=NGramDrafter(max_ngram=2), verifier=v)
            assert torch.equal(alone.tokens[0], expected), name
            assert counters(engine.request(rid).two_level.stats) == counters(v.stats), name
        stats = [engine.request(rid).two_level.stats for rid in ids]
        agreement[name] = sum(s.chain_agreed for s in stats) / sum(s.chain_tokens for s in stats)
    assert agreement["noise"] < agreement["q"]


def test_mutant_accepting_from_the_q_logits_breaks_equality(monkeypatch):
    """The Q forward's logits handed to acceptance in place of the exact pass's: outputs leave the AR output."""
    gen = torch.Generator().manual_seed(0)
    target = tiny_target(seed=0, max_seq_len=SEQ)
    monkeypatch.setattr(views_mod, "q_view_weight", lambda w, **_: w + 0.05 * torch.randn(w.shape, generator=gen, dtype=w.dtype))
    accept = TwoLevelRounds.accept
    engines = []

    def accept_q_logits(self, state, pending, logits):
        if pending["two_level"]:
            ragged, rows = engines[0].target, RequestRows.from_plan(state.slot, pending["plan"])
            q_logits = ragged.forward([rows], view="q")[0].logits[0]
            ragged.discard(state.slot)
            ragged.forward([rows])  # the exact rows again, so the commit goes through
            logits = q_logits
        return accept(self, state, pending, logits)

    monkeypatch.setattr(TwoLevelRounds, "accept", accept_q_logits)
    prompts = prompts_of([7, 5, 9], seed=2)
    engines.append(Engine(target, lambda: NGramDrafter(max_ngram=2), verifier("always"), max_batch=3))
    engine = engines[0]
    ids = [engine.add_request(p, max_new_tokens=16) for p in prompts]
    outputs = engine.run()
    ar = [sd.generate(TARGET, p[None], 16).tokens[0] for p in prompts]
    assert any(not torch.equal(outputs[rid], expected) for rid, expected in zip(ids, ar))


@pytest.mark.parametrize(
    "ragged", [RaggedDenseTarget(TARGET, slots=2), RaggedHybridTarget(HYBRID, slots=2)], ids=["dense", "hybrid"]
)
def test_ragged_q_forward_equals_the_batch_one_q_view_and_its_rows_are_never_committed(ragged):
    batch1 = ragged.target
    tokens = torch.tensor([[3, 1, 4, 1, 5]])
    ragged.reset(1)
    ragged.forward([RequestRows(1, tokens[:, :3])])
    ragged.commit(1, 3)
    batch1.reset()
    batch1(tokens[:, :3])
    batch1.commit(3)
    q = ragged.forward([RequestRows(1, tokens[:, 3:])], view="q")[0]
    assert torch.equal(q.logits, batch1(tokens[:, 3:], view="q").logits)
    batch1.discard()
    with pytest.raises(RuntimeError, match="never committed"):
        ragged.commit(1, 1)
    ragged.discard(1)
    exact = ragged.forward([RequestRows(1, tokens[:, 3:])])[0]  # the committed state was only read
    assert torch.equal(exact.logits, batch1(tokens[:, 3:]).logits)
    assert not torch.equal(exact.logits, q.logits)
    ragged.commit(1, 2)
    assert ragged.length(1) == 5
    with pytest.raises(ValueError, match="view: expected one of \\('exact', 'q'\\).*got 'w4'"):
        ragged.forward([RequestRows(0, tokens)], view="w4")


def test_one_q_forward_and_one_exact_forward_per_step(monkeypatch):
    ragged = RaggedDenseTarget(TARGET, slots=3)
    calls = []
    forward = ragged.forward
    monkeypatch.setattr(ragged, "forward", lambda rows, **kw: calls.append(kw.get("view", "exact")) or forward(rows, **kw))
    engine = Engine(ragged, NGramDrafter(max_ngram=2), verifier("always"), max_batch=3)
    for n in (4, 8, 16):
        engine.add_request(torch.arange(1, 6), max_new_tokens=n)
    steps = 0
    while engine.has_work:
        before = len(calls)
        engine.step()
        steps += 1
        assert calls[before:] in (["exact"], ["q", "exact"])
    assert engine.target_passes == steps == calls.count("exact")
    assert engine.two_level.q_passes == calls.count("q") > 0


def test_two_level_engine_argument_errors():
    with pytest.raises(ValueError, match="verify_budget: .*TwoLevelVerifier.*verify_budget=8.*verifier=TwoLevelVerifier"):
        Engine(TARGET, NGramDrafter(), TwoLevelVerifier(), max_batch=1, verify_budget=8)

    class Subclass(TwoLevelVerifier):
        pass

    with pytest.raises(TypeError, match="verifier: expected a ChainVerifier, a TreeVerifier or a TwoLevelVerifier, got Subclass"):
        Engine(TARGET, NGramDrafter(), Subclass(), max_batch=1)
    with pytest.raises(TypeError, match="verifier: expected .* got str"):
        Engine(TARGET, NGramDrafter(), "tree", max_batch=1)
    engine = Engine(TARGET, NGramDrafter(), TreeVerifier(), max_batch=1)
    assert engine.two_level is None


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_batched_drafting_drafts_twice_per_round_as_the_drafter_alone(temperature):
    """One ``propose_batch`` call per draft (first and second) for all requests; the per-request layout is exact."""
    batch = ModelDrafter(DRAFT_MODELS[0]).batched(slots=2, layout="per_request")
    calls = []
    propose_batch = batch.propose_batch
    batch.propose_batch = lambda slots, *a, **kw: calls.append(len(slots)) or propose_batch(slots, *a, **kw)
    prompts = prompts_of([6, 9, 4], seed=9)
    engine = Engine(TARGET, batch, verifier("alternate"), max_batch=2, batched_drafting=True)
    ids = [engine.add_request(p, max_new_tokens=11, temperature=temperature, seed=i) for i, p in enumerate(prompts)]
    per_step = []
    while engine.has_work:
        before = len(calls)
        engine.step()
        per_step.append(len(calls) - before)
    assert max(per_step) == 2  # draft 1 for every drafting request, then draft 2 for the two-level ones
    outputs = {rid: engine.output(rid) for rid in ids}
    for i, (rid, p) in enumerate(zip(ids, prompts)):
        v = verifier("alternate")
        alone = sd.generate(
            TARGET, p[None], 11, drafter=ModelDrafter(DRAFT_MODELS[3]), verifier=v, temperature=temperature, seed=i
        )
        assert torch.equal(outputs[rid], alone.tokens[0])
        assert counters(engine.request(rid).two_level.stats) == counters(v.stats)


def test_a_verifier_that_measured_rounds_before_gives_each_engine_request_its_gate_as_given():
    """The engine's requests start from the gate as given, as generate's do (start_request), not from what the
    verifier's own gate measured on earlier requests: a seeded request's draws depend on the gate's choices."""
    v = TwoLevelVerifier(8, 6, gate=TwoLevelGate(warmup=10_000))  # alternates two- and one-level rounds
    prompt = torch.tensor([0, 7, 14, 0, 7, 14, 0, 7])
    kw = dict(temperature=1.0, seed=5)
    alone = sd.generate(TARGET, prompt[None], 7, drafter=NGramDrafter(max_ngram=2, max_paths=2), verifier=v, **kw)
    assert v.gate.two_level.rounds + v.gate.one_level.rounds > 0  # it measured rounds
    engine = Engine(TARGET, lambda: NGramDrafter(max_ngram=2, max_paths=2), v, max_batch=1)
    rid = engine.add_request(prompt, max_new_tokens=7, **kw)
    assert torch.equal(engine.run()[rid], alone.tokens[0])
    state = engine.request(rid).two_level
    assert state.stats.rounds == state.gate.two_level.rounds + state.gate.one_level.rounds  # its own rounds only
