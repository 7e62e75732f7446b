"""Engine on a hybrid (Gated DeltaNet + attention) target: every request's tokens equal ``generate`` alone.

* fp32 greedy, chain and tree verification (branching n-gram trees), n-gram drafter: each request's tokens (and its rounds) are
  ``torch.equal`` to :func:`specdec.generate` of that request alone on the batch-1 hybrid target, for
  prompts of different lengths, any arrival order and batch size (hypothesis);
* a request joining between steps and a cancelled companion change nobody's tokens;
* layout ``"packed"`` (one GEMM per linear layer over all requests' rows): fp32 greedy, chain and tree, every
  request's tokens (and rounds) are ``torch.equal`` to its tokens alone on the same packed target, for any
  companions and arrival order (hypothesis), also when every tree round accepts a second branch; and to
  ``generate`` alone on the batch-1 target (the packed logits differ from it in the last float32 bits only);
* the engine builds a ``RaggedHybridTarget`` for a ``HybridTarget`` in either layout and refuses unknown ones.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specdec as sd
from specdec.contracts import DraftProposal, SamplingConfig
from specdec.drafters import ModelDrafter, NGramDrafter
from specdec.engine import Engine
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.testing import tiny_target
from specdec.verify import ChainVerifier, TreeVerifier

SEQ = 64
TARGET = tiny_target("qwen3_5_text", seed=0, max_seq_len=SEQ)
VERIFIERS = {"chain": ChainVerifier, "tree": lambda: TreeVerifier(budget=6)}
# tree rounds get branching n-gram trees (up to 3 merged continuations), so commits follow non-first paths
DRAFTERS = {"chain": lambda: NGramDrafter(max_ngram=2), "tree": lambda: NGramDrafter(max_ngram=2, max_paths=3)}


class DetourDrafter:
    """A tree whose first branch is a miss and whose second is the target's greedy continuation.

    Greedy verification then accepts the second branch, so every commit keeps a path that is not the
    tree's first one: the GDN state must follow it (a per-request drafter: it keeps a copy of the target).
    """

    vocab_size = None

    def __init__(self):
        self._oracle = ModelDrafter(copy.deepcopy(TARGET))

    def reset(self) -> None:
        self._oracle.reset()

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        if max_tokens < 2:
            return DraftProposal(tokens=torch.zeros(0, dtype=torch.long))
        truth = self._oracle.propose(context, max_tokens - 1, sampling=SamplingConfig(), generator=None).tokens
        miss = (truth[:1] + 1) % TARGET.vocab_size
        parents = torch.tensor([-1, -1] + list(range(1, truth.numel())))
        return DraftProposal(tokens=torch.cat([miss, truth]), parents=parents)


def prompts_of(lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    # a small alphabet makes the n-gram drafter find matches, so rounds accept several tokens
    return [torch.randint(0, 6, (n,), generator=gen) * 7 for n in lengths]


def alone(prompt, verifier, max_new_tokens):
    return sd.generate(
        TARGET, prompt[None], max_new_tokens=max_new_tokens, drafter=DRAFTERS[verifier](), verifier=VERIFIERS[verifier]()
    )


PACKED = RaggedHybridTarget(TARGET, slots=3, layout="packed")


def alone_on(ragged, prompt, drafter, verifier, max_new_tokens):
    """``prompt`` as the only request of an engine over ``ragged``: its tokens and its request state."""
    engine = Engine(ragged, drafter, verifier, max_batch=1)
    rid = engine.add_request(prompt, max_new_tokens=max_new_tokens)
    return engine.run()[rid], engine.request(rid)


def assert_same_rounds(state, out):
    stats = out.per_request[0]
    assert (state.rounds, state.accepted) == (stats.rounds, sum(n * c for n, c in enumerate(stats.accepted_histogram)))


@pytest.mark.parametrize("layout", ["per_request", "packed"])
@settings(max_examples=5, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=3),
    max_batch=st.integers(1, 3),
    verifier=st.sampled_from(sorted(VERIFIERS)),
    seed=st.integers(0, 10_000),
)
def test_each_request_on_a_hybrid_target_equals_generate_alone(layout, lengths, max_batch, verifier, seed):
    prompts = prompts_of(lengths, seed)
    news = [6 + (seed + i) % 9 for i in range(len(prompts))]
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed)).tolist()
    engine = Engine(TARGET, DRAFTERS[verifier](), VERIFIERS[verifier](), max_batch=max_batch, layout=layout)
    assert isinstance(engine.target, RaggedHybridTarget) and engine.target.layout == layout
    ids = {i: engine.add_request(prompts[i], max_new_tokens=news[i]) for i in order}
    outputs = engine.run()
    for i, prompt in enumerate(prompts):
        expected = alone(prompt, verifier, news[i])
        assert torch.equal(outputs[ids[i]], expected.tokens[0]), (
            f"request {i} (prompt length {prompt.numel()}) differs from alone"
        )
        assert_same_rounds(engine.request(ids[i]), expected)
        if layout == "packed":  # and from the same request alone on a packed target of the same weights
            tokens, state = alone_on(PACKED, prompt, DRAFTERS[verifier](), VERIFIERS[verifier](), news[i])
            assert torch.equal(outputs[ids[i]], tokens)
            assert (engine.request(ids[i]).rounds, engine.request(ids[i]).accepted) == (state.rounds, state.accepted)


@pytest.mark.parametrize("layout", ["per_request", "packed"])
@pytest.mark.parametrize("verifier", sorted(VERIFIERS))
def test_a_late_request_and_a_cancelled_companion_change_nothing_on_a_hybrid_target(verifier, layout):
    prompts = prompts_of([9, 3, 12], seed=1)
    engine = Engine(TARGET, DRAFTERS[verifier](), VERIFIERS[verifier](), max_batch=2, layout=layout)
    first = engine.add_request(prompts[0], max_new_tokens=16)
    doomed = engine.add_request(prompts[1], max_new_tokens=16)
    engine.step()
    engine.step()
    engine.cancel(doomed)
    late = engine.add_request(prompts[2], max_new_tokens=12)
    outputs = engine.run()
    assert torch.equal(outputs[first], alone(prompts[0], verifier, 16).tokens[0])
    assert torch.equal(outputs[late], alone(prompts[2], verifier, 12).tokens[0])
    if layout == "packed":
        assert torch.equal(outputs[first], alone_on(PACKED, prompts[0], DRAFTERS[verifier](), VERIFIERS[verifier](), 16)[0])
        assert torch.equal(outputs[late], alone_on(PACKED, prompts[2], DRAFTERS[verifier](), VERIFIERS[verifier](), 12)[0])
    assert engine.status(doomed) == "cancelled"


def test_engine_hybrid_target_selection_errors():
    with pytest.raises(ValueError, match=r"layout: expected one of \('per_request', 'packed'\), got 'paged'"):
        Engine(TARGET, NGramDrafter(), max_batch=2, layout="paged")
    packed = Engine(TARGET, NGramDrafter(), max_batch=2, layout="packed").target
    assert isinstance(packed, RaggedHybridTarget) and packed.layout == "packed"
    ragged = RaggedHybridTarget(TARGET, slots=2)
    with pytest.raises(ValueError, match="max_batch: expected at most the target's 2 slots, got 3"):
        Engine(ragged, NGramDrafter(), max_batch=3)
    with pytest.raises(ValueError, match="layout: the RaggedHybridTarget given runs layout 'per_request', got 'packed'"):
        Engine(ragged, NGramDrafter(), max_batch=2, layout="packed")
    assert Engine(ragged, NGramDrafter(), max_batch=2).target is ragged


@pytest.mark.parametrize("layout", ["per_request", "packed"])
def test_tree_rounds_that_accept_a_second_branch_equal_generate_alone(layout):
    prompts = prompts_of([7, 2, 10], seed=3)
    engine = Engine(TARGET, DetourDrafter, TreeVerifier(budget=6), max_batch=3, layout=layout)
    ids = [engine.add_request(p, max_new_tokens=12 + i) for i, p in enumerate(prompts)]
    outputs = engine.run()
    for i, prompt in enumerate(prompts):
        expected = sd.generate(
            TARGET, prompt[None], max_new_tokens=12 + i, drafter=DetourDrafter(), verifier=TreeVerifier(budget=6)
        )
        assert torch.equal(outputs[ids[i]], expected.tokens[0])
        assert_same_rounds(engine.request(ids[i]), expected)
        assert engine.request(ids[i]).accepted >= 6  # the second branch was accepted in most rounds
        if layout == "packed":
            tokens, state = alone_on(PACKED, prompt, DetourDrafter(), TreeVerifier(budget=6), 12 + i)
            assert torch.equal(outputs[ids[i]], tokens)
            assert (engine.request(ids[i]).rounds, engine.request(ids[i]).accepted) == (state.rounds, state.accepted)
