"""Engine: batch invariance against ``specdec.generate`` alone, continuous batching, cancellation, errors.

* every request's tokens from the Engine are ``torch.equal`` to ``generate`` of that request alone: fp32
  greedy and T > 0 with per-request seeds, chain and tree verification, n-gram and model drafters,
  prompts of different lengths, any arrival order, any companions and batch size (hypothesis);
* requests joining between steps and a cancelled companion change nobody's tokens;
* one target forward per step, over every running request;
* bad requests raise before they are stored; the engine's other requests are unaffected.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_drafters import TargetOracle

import specdec as sd
from specdec.contracts import DraftProposal, SamplingConfig, Tree
from specdec.drafters import ModelDrafter, NGramDrafter
from specdec.drafters.block import DFlashDrafter
from specdec.drafters.block.fixtures import fixture_config, random_block_model
from specdec.engine import Engine, RequestFailed
from specdec.models.ragged import RaggedDenseTarget
from specdec.testing import tiny_target
from specdec.verify import ChainVerifier, TreeVerifier, TwoLevelVerifier

VOCAB = 97
SEQ = 64
TARGET = tiny_target(seed=0, max_seq_len=SEQ)
HYBRID_TARGET = tiny_target("qwen3_5_text", seed=0, max_seq_len=SEQ)
DRAFT_MODELS: list = []


def model_drafter() -> ModelDrafter:
    """A fresh ModelDrafter per request; the draft models are built once and reused when free."""
    for drafter in DRAFT_MODELS:
        if not drafter.busy:
            drafter.busy = True
            return drafter
    drafter = ModelDrafter(tiny_target(seed=1, max_seq_len=SEQ))
    drafter.busy = True
    DRAFT_MODELS.append(drafter)
    return drafter


def free_drafters() -> None:
    for drafter in DRAFT_MODELS:
        drafter.busy = False


DRAFTERS = {"ngram": lambda: NGramDrafter(max_ngram=2), "model": model_drafter}
VERIFIERS = {"chain": ChainVerifier, "tree": lambda: TreeVerifier(budget=6)}


def alone(prompt, drafter, verifier, *, max_new_tokens, temperature=0.0, seed=None, **kwargs):
    return alone_run(
        prompt, drafter, verifier, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, **kwargs
    ).tokens[0]


def assert_same_rounds(state, out):
    """The request ran the rounds it runs alone: same number, same accepted drafts (so the same proposals)."""
    stats = out.per_request[0]
    assert (state.rounds, state.accepted) == (stats.rounds, sum(n * c for n, c in enumerate(stats.accepted_histogram)))


def alone_run(prompt, drafter, verifier, *, max_new_tokens, temperature=0.0, seed=None, **kwargs):
    free_drafters()
    out = sd.generate(
        TARGET,
        prompt[None],
        max_new_tokens=max_new_tokens,
        drafter=DRAFTERS[drafter](),
        verifier=VERIFIERS[verifier](),
        temperature=temperature,
        seed=seed,
        **kwargs,
    )
    free_drafters()
    return out


def prompts_of(lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    # a small alphabet makes the n-gram drafter find matches, so rounds accept several tokens
    return [torch.randint(0, 6, (n,), generator=gen) * 7 for n in lengths]


@settings(max_examples=10)
@given(
    lengths=st.lists(st.integers(1, 14), min_size=1, max_size=4),
    max_batch=st.integers(1, 3),
    drafter=st.sampled_from(sorted(DRAFTERS)),
    verifier=st.sampled_from(sorted(VERIFIERS)),
    temperature=st.sampled_from([0.0, 1.0]),
    seed=st.integers(0, 10_000),
)
def test_each_request_equals_generate_alone(lengths, max_batch, drafter, verifier, temperature, seed):
    prompts = prompts_of(lengths, seed)
    news = [6 + (seed + i) % 9 for i in range(len(prompts))]
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed)).tolist()
    free_drafters()
    engine = Engine(TARGET, DRAFTERS[drafter], VERIFIERS[verifier](), max_batch=max_batch)
    ids = {}
    for i in order:
        ids[i] = engine.add_request(prompts[i], max_new_tokens=news[i], temperature=temperature, seed=seed + i)
    outputs = engine.run()
    for i, prompt in enumerate(prompts):
        expected = alone_run(prompt, drafter, verifier, max_new_tokens=news[i], temperature=temperature, seed=seed + i)
        assert torch.equal(outputs[ids[i]], expected.tokens[0]), (
            f"request {i} (prompt length {prompt.numel()}) differs from alone"
        )
        assert_same_rounds(engine.request(ids[i]), expected)


@pytest.mark.parametrize("verifier", sorted(VERIFIERS))
def test_a_drafter_reading_target_features_gets_its_own_rows(verifier):
    config = fixture_config("DFlashDraftModel", TARGET, num_layers=2, target_layer_ids=[0, 1], block_size=5)
    model = random_block_model(config, TARGET, seed=3)
    prompts = prompts_of([6, 11, 3], seed=7)
    engine = Engine(TARGET, lambda: DFlashDrafter(model, TARGET), VERIFIERS[verifier](), max_batch=2)
    ids = [engine.add_request(p, max_new_tokens=9 + i, temperature=0.0 if i else 1.0, seed=i) for i, p in enumerate(prompts)]
    outputs = engine.run()
    for i, prompt in enumerate(prompts):
        expected = sd.generate(
            TARGET,
            prompt[None],
            max_new_tokens=9 + i,
            drafter=DFlashDrafter(model, TARGET),
            verifier=VERIFIERS[verifier](),
            temperature=0.0 if i else 1.0,
            seed=i,
        )
        assert torch.equal(outputs[ids[i]], expected.tokens[0])
        assert_same_rounds(engine.request(ids[i]), expected)


@pytest.mark.parametrize("verifier", sorted(VERIFIERS))
def test_requests_joining_between_steps_and_a_cancelled_companion_change_nothing(verifier):
    prompts = prompts_of([9, 3, 12, 5], seed=1)
    free_drafters()
    engine = Engine(TARGET, model_drafter, VERIFIERS[verifier](), max_batch=3)
    first = engine.add_request(prompts[0], max_new_tokens=20, temperature=1.0, seed=0)
    doomed = engine.add_request(prompts[1], max_new_tokens=20, temperature=1.0, seed=1)
    engine.step()
    engine.step()
    late = engine.add_request(prompts[2], max_new_tokens=14, temperature=1.0, seed=2)
    engine.step()
    engine.cancel(doomed)
    assert engine.status(doomed) == "cancelled" and doomed not in engine.running
    later = engine.add_request(prompts[3], max_new_tokens=10, temperature=1.0, seed=3)
    outputs = engine.run()
    assert doomed not in outputs
    partial = engine.output(doomed)
    assert torch.equal(outputs[first], alone(prompts[0], "model", verifier, max_new_tokens=20, temperature=1.0, seed=0))
    assert torch.equal(outputs[late], alone(prompts[2], "model", verifier, max_new_tokens=14, temperature=1.0, seed=2))
    assert torch.equal(outputs[later], alone(prompts[3], "model", verifier, max_new_tokens=10, temperature=1.0, seed=3))
    full = alone(prompts[1], "model", verifier, max_new_tokens=20, temperature=1.0, seed=1)
    assert 0 < partial.numel() < full.numel() and torch.equal(partial, full[: partial.numel()])


def test_prefix_dependent_sampling_equals_generate_alone():
    """Repetition penalty: each verify row's law depends on its own prefix (the tree path), as in generate."""
    prompts = prompts_of([5, 10], seed=9)
    for temperature in (0.0, 0.8):
        engine = Engine(TARGET, NGramDrafter(max_ngram=2, max_paths=2, depth=2), TreeVerifier(budget=6), max_batch=2)
        sampling = SamplingConfig(temperature=temperature, repetition_penalty=1.3)
        ids = [engine.add_request(p, max_new_tokens=12, sampling=sampling, seed=i) for i, p in enumerate(prompts)]
        outputs = engine.run()
        for i, prompt in enumerate(prompts):
            expected = sd.generate(
                TARGET,
                prompt[None],
                max_new_tokens=12,
                drafter=NGramDrafter(max_ngram=2, max_paths=2, depth=2),
                verifier=TreeVerifier(budget=6),
                temperature=temperature,
                repetition_penalty=1.3,
                seed=i,
            )
            assert torch.equal(outputs[ids[i]], expected.tokens[0])


def test_one_target_forward_per_step_over_every_running_request(monkeypatch):
    ragged = RaggedDenseTarget(TARGET, slots=3)
    calls = []
    forward = ragged.forward
    monkeypatch.setattr(ragged, "forward", lambda rows, **kw: calls.append(sorted(r.slot for r in rows)) or forward(rows, **kw))
    engine = Engine(ragged, NGramDrafter(), max_batch=3)
    for n in (4, 8, 16):
        engine.add_request(torch.arange(1, 6), max_new_tokens=n)
    steps = 0
    while engine.has_work:
        running = len(engine.running) + len(engine.waiting)
        engine.step()
        steps += 1
        assert len(calls) == steps and len(calls[-1]) == min(running, 3)
    assert engine.target_passes == steps


def test_streaming_gives_each_request_its_tokens_in_order():
    streamed: dict[int, list] = {0: [], 1: []}
    engine = Engine(TARGET, NGramDrafter(), TreeVerifier(budget=4), max_batch=2)
    for i, p in enumerate(prompts_of([6, 10], seed=3)):
        engine.add_request(p, max_new_tokens=11, request_id=i, on_tokens=streamed[i].append)
    stepped: dict[int, list] = {0: [], 1: []}
    while engine.has_work:
        for rid, new in engine.step().items():
            stepped[rid].append(new)
    for rid in (0, 1):
        assert torch.equal(torch.cat(streamed[rid]), engine.output(rid))
        assert torch.equal(torch.cat(stepped[rid]), engine.output(rid))
        assert engine.output(rid).numel() == 11


def test_eos_stops_a_request_as_generate_does():
    prompt = prompts_of([8], seed=4)[0]
    free = alone(prompt, "ngram", "chain", max_new_tokens=20)
    eos = int(free[5])
    expected = alone(prompt, "ngram", "chain", max_new_tokens=20, eos_token_id=eos)
    engine = Engine(TARGET, NGramDrafter(max_ngram=2), max_batch=2)
    rid = engine.add_request(prompt, max_new_tokens=20, eos_token_id=eos)
    other = engine.add_request(prompts_of([3], seed=5)[0], max_new_tokens=20)
    outputs = engine.run()
    assert torch.equal(outputs[rid], expected) and int(outputs[rid][-1]) == eos
    assert torch.equal(outputs[other], alone(prompts_of([3], seed=5)[0], "ngram", "chain", max_new_tokens=20))


def test_a_stop_inside_a_round_counts_the_accepted_drafts_as_generate_does():
    prompt = prompts_of([6], seed=2)[0]
    free = alone(prompt, "ngram", "chain", max_new_tokens=20).tolist()
    pos = next(i for i in range(3, len(free)) if free[i] not in free[:i])  # an EOS there ends the output there
    assert pos < 9, "the EOS must land inside the first round (positions 1..9)"
    # a drafter with the target's own weights: every draft accepted, so the EOS lands inside a round
    same = tiny_target(seed=0, max_seq_len=SEQ)
    engine = Engine(TARGET, lambda: ModelDrafter(same), num_draft_tokens=8, max_batch=1)
    rid = engine.add_request(prompt, max_new_tokens=20, eos_token_id=free[pos])
    out = engine.run()[rid]
    state = engine.request(rid)
    assert out.tolist() == free[: pos + 1]
    assert state.rounds == 1 and state.accepted == pos - 1  # the drafts after the EOS are not counted
    alone_out = sd.generate(TARGET, prompt[None], 20, drafter=ModelDrafter(same), num_draft_tokens=8, eos_token_id=free[pos])
    assert_same_rounds(state, alone_out)


def test_bad_requests_raise_before_they_are_stored_and_others_are_unaffected():
    engine = Engine(TARGET, NGramDrafter(), max_batch=2)
    keep = engine.add_request(torch.arange(1, 6), max_new_tokens=9, request_id="keep")
    engine.step()
    cases = [
        (dict(prompt=torch.arange(SEQ), max_new_tokens=1), ValueError, "prompt: length 64 \\+ max_new_tokens 1 exceeds"),
        (dict(prompt=torch.arange(3), max_new_tokens=1, request_id="keep"), ValueError, "request_id: 'keep' is already in use"),
        (dict(prompt=torch.tensor([1.0, 2.0]), max_new_tokens=1), TypeError, "prompt: expected a 1-D int64 or int32 tensor"),
        (dict(prompt=torch.tensor([1, 2], dtype=torch.int16), max_new_tokens=1), TypeError, "prompt: expected a 1-D int64"),
        (dict(prompt=torch.tensor([1, VOCAB]), max_new_tokens=1), ValueError, r"prompt: expected token ids in \[0, 97\)"),
        (dict(prompt=torch.tensor([], dtype=torch.long), max_new_tokens=1), ValueError, "prompt: expected at least one token"),
        (dict(prompt=torch.arange(3), max_new_tokens=0), ValueError, "max_new_tokens: expected an int >= 1, got 0"),
        (dict(prompt=torch.arange(3), max_new_tokens=2, temperature=-1.0), ValueError, "temperature"),
        (dict(prompt=torch.arange(3), max_new_tokens=2, request_id=[1]), TypeError, "request_id: expected a hashable id"),
        (dict(prompt=[1.7, 2.9], max_new_tokens=1), TypeError, r"prompt: expected integer token ids, got 1.7 \(float\)"),
        (dict(prompt=[True, False], max_new_tokens=1), TypeError, r"prompt: expected integer token ids, got True \(bool\)"),
        (dict(prompt=[1, 2], max_new_tokens=1, seed=2**70), ValueError, r"seed: expected an int in \[-2\*\*63, 2\*\*64\)"),
        (dict(prompt=[1, 2], max_new_tokens=1, eos_token_id=3.0), ValueError, "eos_token_id: expected an int or a list"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            engine.add_request(**kwargs)
        assert engine.running == ("keep",) and engine.waiting == ()
    assert engine.add_request([1, 2], max_new_tokens=1, eos_token_id=np.int64(3)) == 0  # refused requests took no id
    assert torch.equal(engine.run()["keep"], alone(torch.arange(1, 6), "ngram", "chain", max_new_tokens=9))
    assert engine.status(keep) == "finished"
    with pytest.raises(KeyError, match="request_id: no request 'nope'"):
        engine.output("nope")


class RecordingDrafter:
    """A drafter with feature taps that records the ``target_hidden`` rows it receives.

    It drafts the target's greedy continuation (two tokens, from a private copy of the target); with
    ``decoy`` the proposal is a tree whose first path is a wrong guess and whose second path is the
    continuation, so accepted paths skip rows and the rows kept for the features are not a prefix.
    """

    target_layer_ids = (0, 2)
    vocab_size = VOCAB

    def __init__(self, decoy: bool):
        self.decoy = decoy
        self.oracle = ModelDrafter(tiny_target(seed=0, max_seq_len=SEQ))
        self.received = []

    def reset(self):
        self.oracle.reset()

    def propose(self, context, max_tokens, *, sampling, generator, target_hidden=None):
        self.received.append(target_hidden)
        truth = self.oracle.propose(context, min(2, max_tokens), sampling=SamplingConfig(), generator=None).tokens
        if not self.decoy or max_tokens < 4:
            return DraftProposal(truth)
        decoy = (truth + 1) % VOCAB
        return DraftProposal(decoy, tree=Tree.from_paths([decoy.tolist(), truth.tolist()]))


@pytest.mark.parametrize("verifier", sorted(VERIFIERS))
def test_a_tapped_drafter_receives_the_features_it_receives_alone(verifier):
    prompts = prompts_of([9, 4, 13], seed=8)
    made = []
    decoy = verifier == "tree"
    engine = Engine(TARGET, lambda: made.append(RecordingDrafter(decoy)) or made[-1], VERIFIERS[verifier](), max_batch=2)
    for i, p in enumerate(prompts):
        engine.add_request(p, max_new_tokens=16, temperature=0.0 if i else 1.0, seed=i)
    engine.run()
    assert sum(engine.request(i).accepted for i in range(3)) > 6  # rounds accept drafts, so kept rows matter
    for i, prompt in enumerate(prompts):
        drafter = RecordingDrafter(decoy)
        sd.generate(
            TARGET,
            prompt[None],
            max_new_tokens=16,
            drafter=drafter,
            verifier=VERIFIERS[verifier](),
            temperature=0.0 if i else 1.0,
            seed=i,
        )
        assert len(made[i].received) == len(drafter.received)
        for got, expected in zip(made[i].received, drafter.received):
            assert torch.equal(got, expected)


class TappedDrafter(NGramDrafter):
    target_layer_ids = (1, 5)


class WrongVocabDrafter(NGramDrafter):
    vocab_size = VOCAB + 1


class GreedyDrafter(NGramDrafter):
    """Proposes one token too many: the engine raises before the target pass."""

    def propose(self, context, max_tokens, *, sampling, generator):
        return DraftProposal(torch.zeros(max_tokens + 1, dtype=torch.long))


def test_engine_argument_errors():
    with pytest.raises(
        TypeError, match="verifier: expected a ChainVerifier, a TreeVerifier or a TwoLevelVerifier, got NGramDrafter"
    ):
        Engine(TARGET, NGramDrafter(), NGramDrafter(), max_batch=1)
    assert isinstance(Engine(TARGET, NGramDrafter(), TwoLevelVerifier(), max_batch=1).verifier, TwoLevelVerifier)
    with pytest.raises(ValueError, match=r"drafter: target_layer_ids expected indices in \[0, 2\], got 5"):
        Engine(TARGET, TappedDrafter(), max_batch=1)
    with pytest.raises(ValueError, match="drafter: vocabulary size 98 differs from the target's 97"):
        Engine(TARGET, WrongVocabDrafter(), max_batch=1)
    with pytest.raises(TypeError, match="drafter: expected a Drafter or a callable"):
        Engine(TARGET, 3, max_batch=1)
    with pytest.raises(ValueError, match="max_batch: expected an int >= 1, got 0"):
        Engine(TARGET, NGramDrafter(), max_batch=0)
    with pytest.raises(ValueError, match="max_batch: expected at most the target's 2 slots, got 3"):
        Engine(RaggedDenseTarget(TARGET, slots=2), NGramDrafter(), max_batch=3)
    with pytest.raises(ValueError, match="layout: the RaggedDenseTarget given runs layout 'per_request', got 'packed'"):
        Engine(RaggedDenseTarget(TARGET, slots=2), NGramDrafter(), max_batch=2, layout="packed")
    with pytest.raises(TypeError, match="target: expected a DenseTarget or a RaggedDenseTarget"):
        Engine(object(), NGramDrafter(), max_batch=1)
    engine = Engine(TARGET, TappedDrafter, max_batch=1)
    with pytest.raises(ValueError, match="drafter: target_layer_ids expected indices"):
        engine.add_request(torch.arange(3), max_new_tokens=2)
    assert not engine.has_work


def test_a_failing_request_leaves_and_its_companions_decode_as_alone():
    made = []

    def factory():
        made.append(GreedyDrafter() if len(made) == 1 else NGramDrafter(max_ngram=2))
        return made[-1]

    prompts = prompts_of([7, 4, 9], seed=6)
    engine = Engine(TARGET, factory, max_batch=3)
    ids = [engine.add_request(p, max_new_tokens=12, temperature=1.0, seed=i) for i, p in enumerate(prompts)]
    engine.step()
    with pytest.raises(RequestFailed, match="request 1 failed: ValueError: drafter: proposed 5 tokens") as failed:
        engine.step()
    assert isinstance(failed.value.__cause__, ValueError) and set(failed.value.emitted) == {0, 2}
    assert engine.status(1) == "failed" and engine.running == (0, 2) and engine.output(1).numel() == 1
    outputs = engine.run()
    for i in (0, 2):
        assert torch.equal(outputs[ids[i]], alone(prompts[i], "ngram", "chain", max_new_tokens=12, temperature=1.0, seed=i))


def test_a_factory_sharing_one_draft_model_between_requests_is_refused_naming_the_drafter():
    shared = tiny_target(seed=1, max_seq_len=SEQ)
    engine = Engine(TARGET, lambda: ModelDrafter(shared), max_batch=2)
    first = engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=6)
    with pytest.raises(ValueError, match="drafter: the factory gave request 0's draft model to this request too"):
        engine.add_request(torch.tensor([4, 5, 6]), max_new_tokens=6)
    assert engine.waiting == (first,)
    outputs = engine.run()
    expected = sd.generate(TARGET, torch.tensor([[1, 2, 3]]), 6, drafter=ModelDrafter(tiny_target(seed=1, max_seq_len=SEQ)))
    assert torch.equal(outputs[first], expected.tokens[0])
    engine.add_request(torch.tensor([4, 5, 6]), max_new_tokens=6)  # the first has finished: its model is free again


def test_every_request_failing_in_a_step_is_reported():
    engine = Engine(TARGET, lambda: GreedyDrafter(), max_batch=3)
    for p in prompts_of([5, 6, 7], seed=2):
        engine.add_request(p, max_new_tokens=6)
    engine.step()  # the prompts' prefill: no drafting yet
    with pytest.raises(RequestFailed, match=r"request 0 failed: .* \(and 2 more: \[1, 2\]\)") as failed:
        engine.step()
    assert [r for r, _ in failed.value.failures] == [0, 1, 2]
    assert all(isinstance(e, ValueError) for _, e in failed.value.failures)


@pytest.mark.parametrize("layout", ["dense", "hybrid"])
def test_a_companion_cancelled_from_a_streaming_callback_is_cancelled_and_the_rest_decode_as_alone(layout):
    """on_tokens of request 0 cancels request 1 after the shared forward and before request 1's round is finished."""
    prompts = prompts_of([5, 6], seed=3)
    target = TARGET if layout == "dense" else HYBRID_TARGET
    engine = Engine(target, NGramDrafter(), max_batch=2)
    seen = []

    def cancel_the_other(tokens):
        seen.append(tokens)
        if len(seen) == 2:
            engine.cancel(1)

    engine.add_request(prompts[0], max_new_tokens=12, on_tokens=cancel_the_other)
    engine.add_request(prompts[1], max_new_tokens=12)
    outputs = engine.run()
    assert engine.status(1) == "cancelled" and 1 not in outputs
    expected = sd.generate(target, prompts[0][None], max_new_tokens=12, drafter=NGramDrafter()).tokens[0]
    assert torch.equal(outputs[0], expected)


def test_pop_frees_the_id_and_only_for_finished_requests():
    engine = Engine(TARGET, NGramDrafter(), max_batch=1)
    engine.add_request(torch.arange(1, 4), max_new_tokens=3, request_id="a")
    with pytest.raises(ValueError, match="request_id: request 'a' is waiting"):
        engine.pop("a")
    engine.run()
    assert engine.pop("a").numel() == 3
    engine.add_request(torch.arange(1, 4), max_new_tokens=2, request_id="a")
    assert engine.run()["a"].numel() == 2


def test_a_request_that_fills_its_slot_exactly_runs_and_one_token_more_is_refused():
    prompt = torch.tensor([1, 2, 3, 4])
    engine = Engine(TARGET, NGramDrafter(), max_batch=1, num_draft_tokens=4)
    with pytest.raises(ValueError, match=rf"prompt: length 4 \+ max_new_tokens {SEQ - 3} exceeds a slot's max_seq_len {SEQ}"):
        engine.add_request(prompt, max_new_tokens=SEQ - 3)
    request = engine.add_request(prompt, max_new_tokens=SEQ - 4)
    out = engine.run()[request]
    TARGET.reset()
    assert torch.equal(out, sd.generate(TARGET, prompt[None], SEQ - 4).tokens[0])


class ResetFails(NGramDrafter):
    def reset(self):
        raise RuntimeError("reset failed")


class FinishFails(NGramDrafter):
    """Like SSD when its pre-draft job raised: ``finish()`` raises the job's error."""

    def finish(self):
        raise RuntimeError("pre-draft job failed")


class ProposeAndFinishFail(FinishFails):
    def propose(self, context, max_tokens, **kwargs):
        raise ValueError("drafter bug")


def test_a_drafter_that_fails_to_start_fails_its_request_alone_and_frees_its_slot():
    made = iter([NGramDrafter(max_ngram=2), ResetFails(), *[NGramDrafter(max_ngram=2) for _ in range(2)]])
    engine = Engine(TARGET, lambda: next(made), max_batch=2)
    prompt = prompts_of([5], seed=3)[0]
    a = engine.add_request(prompt, max_new_tokens=8)
    engine.step()
    b = engine.add_request(prompts_of([4], seed=4)[0], max_new_tokens=8)
    with pytest.raises(RequestFailed, match="request 1 failed: RuntimeError: reset failed") as info:
        engine.step()
    assert a in info.value.emitted  # the companion's round ran
    assert engine.status(b) == "failed" and engine.request(b).slot is None and engine.running == (a,)
    c, d = (engine.add_request(prompts_of([3], seed=s)[0], max_new_tokens=4) for s in (5, 6))
    outputs = engine.run()  # the failed request's slot serves the next ones
    assert set(outputs) == {a, c, d} and torch.equal(outputs[a], alone(prompt, "ngram", "chain", max_new_tokens=8))


def test_a_drafter_hook_that_raises_at_cancel_still_cancels_the_request():
    engine = Engine(TARGET, lambda: FinishFails(max_ngram=2), max_batch=2)
    a = engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=20)
    b = engine.add_request(torch.tensor([4, 5, 6]), max_new_tokens=20)
    engine.step()
    with pytest.raises(RuntimeError, match="pre-draft job failed"):
        engine.cancel(a)
    assert engine.status(a) == "cancelled" and engine.running == (b,) and engine.request(a).slot is None
    engine.cancel(a)  # already cancelled: nothing to do
    assert engine.pop(a).numel() == 1


def test_a_failing_request_whose_hook_also_raises_fails_alone():
    made = iter([ProposeAndFinishFail(max_ngram=2), NGramDrafter(max_ngram=2)])
    engine = Engine(TARGET, lambda: next(made), max_batch=2)
    a = engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=20)
    b = engine.add_request(torch.tensor([4, 5, 6]), max_new_tokens=6)
    engine.step()  # the prefills
    with pytest.raises(RequestFailed, match="request 0 failed: ValueError: drafter bug") as info:
        engine.step()
    assert "end-of-request hook raised RuntimeError: pre-draft job failed" in "".join(info.value.error.__notes__)
    assert engine.status(a) == "failed" and engine.running == (b,) and b in info.value.emitted
    assert torch.equal(engine.run()[b], alone(torch.tensor([4, 5, 6]), "ngram", "chain", max_new_tokens=6))


def test_a_factory_that_shares_one_draft_model_is_refused_inside_an_ssd_drafter_too():
    from specdec.drafters import SpeculativeSpeculationDrafter

    shared = tiny_target(seed=1, max_seq_len=SEQ)
    engine = Engine(TARGET, lambda: SpeculativeSpeculationDrafter(ModelDrafter(shared)), max_batch=2)
    engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=4)
    with pytest.raises(ValueError, match="drafter: the factory gave request 0's draft model to this request too"):
        engine.add_request(torch.tensor([4, 5]), max_new_tokens=4)


def test_a_prompt_id_past_int64_is_named():
    engine = Engine(TARGET, NGramDrafter(), max_batch=1)
    with pytest.raises(ValueError, match=rf"prompt: expected token ids in \[0, {VOCAB}\), got {2**63}"):
        engine.add_request([1, 2**63], max_new_tokens=2)


class ParentsTreeDrafter(TargetOracle):
    """Proposes the target's next two tokens as the path root -> t1 -> t2 of a tree given as parents, with a wrong
    child of the root numbered between them: ``tokens [t1, wrong, t2]``, ``parents [-1, -1, 0]``."""

    def __init__(self):
        super().__init__(SEQ)

    def propose(self, context, max_tokens, *, sampling, generator):
        truth = self.truth(context, min(2, max_tokens))
        if max_tokens < 3:
            return DraftProposal(truth)
        t1, t2 = truth.tolist()
        return DraftProposal(torch.tensor([t1, (t1 + 1) % self.vocab_size, t2]), parents=torch.tensor([-1, -1, 0]))


def test_a_chain_verifier_in_the_engine_checks_a_tree_s_first_root_to_leaf_path():
    engine = Engine(TARGET, ParentsTreeDrafter, ChainVerifier(), max_batch=1, num_draft_tokens=3)
    rid = engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=12)
    engine.run()
    state = engine.request(rid)
    # the prefill's token, three rounds of both path tokens and a bonus (9), a last round of one draft and a bonus;
    # checked as the node list [t1, wrong, t2] a round accepts one draft: 5 rounds, 6 drafts
    assert (state.rounds, state.accepted) == (4, 7)
    assert torch.equal(engine.output(rid), sd.generate(TARGET, torch.tensor([[1, 2, 3]]), max_new_tokens=12).tokens[0])


class Int32Drafter(NGramDrafter):
    """The n-gram drafter's ids as int32: not the int64 the proposal contract asks for."""

    def propose(self, context, max_tokens, *, sampling, generator):
        return DraftProposal(super().propose(context, max_tokens, sampling=sampling, generator=generator).tokens.int())


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_a_proposal_of_int32_ids_fails_the_request_on_every_path(temperature):
    """The greedy host path decides rounds without validate: it must refuse them as generate does, whatever the
    sampling."""
    engine = Engine(TARGET, lambda: Int32Drafter(max_ngram=2), max_batch=1)
    rid = engine.add_request(torch.tensor([5, 6, 7, 5, 6, 7]), max_new_tokens=8, temperature=temperature, seed=0)
    with pytest.raises(RequestFailed, match=r"request 0 failed: TypeError: proposal.tokens: expected int64 token ids"):
        engine.run()
    assert engine.request(rid).status == "failed"
    with pytest.raises(TypeError, match=r"proposal.tokens: expected int64 token ids, got torch.int32"):
        sd.generate(TARGET, torch.tensor([[5, 6, 7, 5, 6, 7]]), 8, drafter=Int32Drafter(max_ngram=2))


def test_an_int32_prompt_is_taken_as_generate_takes_it():
    engine = Engine(TARGET, lambda: NGramDrafter(max_ngram=2), max_batch=1)
    rid = engine.add_request(torch.tensor([1, 2, 3, 1, 2], dtype=torch.int32), max_new_tokens=8)
    engine.run()
    want = sd.generate(TARGET, torch.tensor([[1, 2, 3, 1, 2]], dtype=torch.int32), 8).tokens[0]
    assert torch.equal(engine.output(rid), want) and engine.request(rid).prompt.dtype == torch.long
