"""Batched drafting: one drafter call per round for every running request of an ``Engine``.

* ``BatchedModelDrafter`` (layout ``"per_request"``) proposes exactly what ``ModelDrafter`` proposes alone,
  round after round with per-request rollback: tokens, draft laws and scores ``torch.equal``, at T = 0 and
  T > 0 with per-request generators;
* with it, every request's engine tokens equal ``generate`` alone with a ``ModelDrafter`` (hypothesis: chain and
  tree, greedy and seeded T > 0, any companions and arrival order);
* the default ``"packed"`` form (one GEMM per layer over all requests' rows) has float32 logits that differ
  from the unbatched drafter's in the last bits, so its drafts are not guaranteed bitwise equal; outputs
  still equal autoregressive decoding in fp32 greedy (hypothesis, chain and tree);
* the draft model runs one forward per draft step for all requests (not one per request per step);
* drafters without a forward (n-gram) keep their per-request calls; bad arguments raise;
* block drafters (DFlash here) draft with one block forward per round for all requests; in the
  ``"per_request"`` layout every request's tokens equal ``generate`` alone with the unbatched drafter's
  static path (hypothesis, chain and tree, greedy and seeded T > 0), and by default (``"packed"``) outputs
  equal autoregressive decoding in fp32 greedy.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specdec as sd
from specdec.contracts import SamplingConfig
from specdec.drafters import ModelDrafter, NGramDrafter
from specdec.drafters.block import BatchedBlockDrafter, BlockDraftModel, DFlashDrafter, fixture_config, random_block_model
from specdec.engine import Engine
from specdec.engine.drafting import BatchDrafter, BatchedModelDrafter, LoopDrafter
from specdec.testing import tiny_target
from specdec.verify import ChainVerifier, TreeVerifier

SEQ = 64
TARGET = tiny_target(seed=0, max_seq_len=SEQ)
DRAFT = tiny_target(seed=1, max_seq_len=SEQ)
VERIFIERS = {"chain": ChainVerifier, "tree": lambda: TreeVerifier(budget=6)}


def prompts_of(lengths, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 97, (n,), generator=gen) for n in lengths]


def test_batched_model_drafter_proposes_what_model_drafter_proposes_alone():
    """Three rounds of three requests; each round extends each context by a part of its drafts and a new token."""
    gen = torch.Generator().manual_seed(0)
    contexts = [torch.randint(0, 97, (n,), generator=gen) for n in (1, 5, 11)]
    samplings = [SamplingConfig(), SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.8, top_k=20)]
    sizes = [[4, 2, 0], [3, 4, 1], [1, 4, 4]]
    batched = BatchedModelDrafter(DRAFT, slots=4, layout="per_request")
    alone = [ModelDrafter(tiny_target(seed=1, max_seq_len=SEQ)) for _ in contexts]
    slots = [3, 0, 1]
    for slot, drafter in zip(slots, alone):
        batched.reset(slot)
        drafter.reset()
    gens_batched = [torch.Generator().manual_seed(10 + i) for i in range(3)]
    gens_alone = [torch.Generator().manual_seed(10 + i) for i in range(3)]
    for round_sizes in sizes:
        props = batched.propose_batch(
            slots, contexts, round_sizes, samplings=samplings, generators=gens_batched, target_hiddens=[None] * 3
        )
        for i, (prop, drafter) in enumerate(zip(props, alone)):
            ref = drafter.propose(contexts[i], round_sizes[i], sampling=samplings[i], generator=gens_alone[i])
            assert torch.equal(prop.tokens, ref.tokens)
            for name in ("draft_probs", "tree_logprobs"):
                got, want = getattr(prop, name), getattr(ref, name)
                assert (got is None and want is None) or torch.equal(got, want), name
            # accept about half the drafts, then a token of the target's own
            kept = prop.tokens[: prop.tokens.numel() // 2]
            contexts[i] = torch.cat([contexts[i], kept, torch.randint(0, 97, (1,), generator=gen)])


@settings(max_examples=8, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    max_batch=st.integers(1, 3),
    verifier=st.sampled_from(sorted(VERIFIERS)),
    temperature=st.sampled_from([0.0, 1.0]),
    seed=st.integers(0, 10_000),
)
def test_each_request_equals_generate_alone_with_batched_drafting(lengths, max_batch, verifier, temperature, seed):
    prompts = prompts_of(lengths, seed)
    news = [5 + (seed + i) % 9 for i in range(len(prompts))]
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed)).tolist()
    drafter = BatchedModelDrafter(DRAFT, slots=max_batch, layout="per_request")
    engine = Engine(TARGET, drafter, VERIFIERS[verifier](), max_batch=max_batch, batched_drafting=True)
    ids = {i: engine.add_request(prompts[i], max_new_tokens=news[i], temperature=temperature, seed=seed + i) for i in order}
    outputs = engine.run()
    for i, prompt in enumerate(prompts):
        alone = sd.generate(
            TARGET,
            prompt[None],
            max_new_tokens=news[i],
            drafter=ModelDrafter(DRAFT),
            verifier=VERIFIERS[verifier](),
            temperature=temperature,
            seed=seed + i,
        )
        assert torch.equal(outputs[ids[i]], alone.tokens[0]), f"request {i} differs from alone"
        stats = alone.per_request[0]
        state = engine.request(ids[i])
        assert (state.rounds, state.accepted) == (stats.rounds, sum(n * c for n, c in enumerate(stats.accepted_histogram)))


@settings(max_examples=8, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    max_batch=st.integers(1, 4),
    verifier=st.sampled_from(sorted(VERIFIERS)),
    seed=st.integers(0, 10_000),
)
def test_packed_batched_drafting_equals_autoregressive_greedy(lengths, max_batch, verifier, seed):
    prompts = prompts_of(lengths, seed)
    news = [5 + (seed + i) % 9 for i in range(len(prompts))]
    engine = Engine(TARGET, lambda: ModelDrafter(DRAFT), VERIFIERS[verifier](), max_batch=max_batch, batched_drafting=True)
    assert isinstance(engine._batch_drafter, BatchedModelDrafter) and engine._batch_drafter.layout == "packed"
    ids = [engine.add_request(p, max_new_tokens=n) for p, n in zip(prompts, news)]
    outputs = engine.run()
    for i, prompt in enumerate(prompts):
        ar = sd.generate(TARGET, prompt[None], max_new_tokens=news[i])
        assert torch.equal(outputs[ids[i]], ar.tokens[0]), f"request {i} differs from autoregressive decoding"


def test_packed_drafts_agree_to_rounding_only():
    """The packed draft forward batches GEMMs over requests: scores agree to rounding, and are not bitwise equal here."""
    gen = torch.Generator().manual_seed(0)
    contexts = [torch.randint(0, 97, (n,), generator=gen) for n in (1, 3, 7, 12, 20, 2, 5, 9)]
    batched = BatchedModelDrafter(DRAFT, slots=8)
    for slot in range(8):
        batched.reset(slot)
    props = batched.propose_batch(
        list(range(8)), contexts, [4] * 8, samplings=[SamplingConfig()] * 8, generators=[None] * 8, target_hiddens=[None] * 8
    )
    alone = ModelDrafter(DRAFT)
    bitwise = []
    for context, prop in zip(contexts, props):
        alone.reset()
        ref = alone.propose(context, 4, sampling=SamplingConfig(), generator=None)
        torch.testing.assert_close(prop.tree_logprobs, ref.tree_logprobs, rtol=0, atol=1e-4)
        bitwise.append(torch.equal(prop.tree_logprobs, ref.tree_logprobs))
    assert not all(bitwise)


@pytest.mark.parametrize("batched_drafting", [False, True])
def test_one_draft_forward_per_draft_step_for_all_requests(batched_drafting):
    calls = []

    def drafter():  # a model a request (per-request drafting keeps each request's cache in its model)
        draft = tiny_target(seed=1, max_seq_len=SEQ)
        draft.embed.register_forward_hook(lambda module, args, out: calls.append(args[0].shape))
        return ModelDrafter(draft)

    k, running = 3, 3
    engine = Engine(TARGET, drafter, max_batch=running, num_draft_tokens=k, batched_drafting=batched_drafting)
    for p in ([1, 2, 3], [9], [4, 5]):
        engine.add_request(torch.tensor(p), max_new_tokens=20)
    engine.step()  # the prefills: no drafting yet
    calls.clear()
    engine.step()
    assert len(engine.running) == running
    assert len(calls) == (k if batched_drafting else k * running)


def test_ngram_drafter_keeps_its_per_request_calls_and_outputs():
    prompts = [torch.tensor([5, 6, 7, 5, 6]), torch.tensor([9, 3, 9, 3])]
    engine = Engine(TARGET, NGramDrafter(max_ngram=2), TreeVerifier(budget=6), max_batch=2, batched_drafting=True)
    assert engine._batch_drafter is None
    ids = [engine.add_request(p, max_new_tokens=10, temperature=1.0, seed=i) for i, p in enumerate(prompts)]
    outputs = engine.run()
    for i, p in enumerate(prompts):
        alone = sd.generate(
            TARGET,
            p[None],
            max_new_tokens=10,
            drafter=NGramDrafter(max_ngram=2),
            verifier=TreeVerifier(budget=6),
            temperature=1.0,
            seed=i,
        )
        assert torch.equal(outputs[ids[i]], alone.tokens[0])


def test_loop_drafter_is_a_batch_drafter_over_per_request_drafters():
    prompts = [torch.tensor([5, 6, 7, 5, 6]), torch.tensor([9, 3, 9, 3])]
    loop = LoopDrafter(lambda: NGramDrafter(max_ngram=2), slots=2)
    assert isinstance(loop, BatchDrafter)
    engine = Engine(TARGET, loop, max_batch=2, batched_drafting=True)
    ids = [engine.add_request(p, max_new_tokens=10) for p in prompts]
    outputs = engine.run()
    for i, p in enumerate(prompts):
        alone = sd.generate(TARGET, p[None], max_new_tokens=10, drafter=NGramDrafter(max_ngram=2))
        assert torch.equal(outputs[ids[i]], alone.tokens[0])


class FailingBatchDrafter(LoopDrafter):
    def propose_batch(self, *args, **kwargs):
        raise RuntimeError("draft model out of memory")


def test_a_failing_batch_drafter_fails_the_drafting_requests_only():
    engine = Engine(TARGET, FailingBatchDrafter(NGramDrafter(), slots=2), max_batch=2, batched_drafting=True)
    a = engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=5)
    engine.step()
    b = engine.add_request(torch.tensor([4, 5]), max_new_tokens=5)
    with pytest.raises(sd.engine.RequestFailed, match="draft model out of memory") as info:
        engine.step()
    assert engine.status(a) == "failed" and engine.status(b) == "running"
    assert info.value.emitted[b].numel() == 1


def test_batched_drafting_argument_errors():
    with pytest.raises(ValueError, match="pass batched_drafting=True, got batched_drafting=False"):
        Engine(TARGET, BatchedModelDrafter(DRAFT, slots=2), max_batch=2)
    with pytest.raises(ValueError, match="at least max_batch=3 slots, got 2"):
        Engine(TARGET, BatchedModelDrafter(DRAFT, slots=2), max_batch=3, batched_drafting=True)
    with pytest.raises(TypeError, match="batched_drafting: expected a bool, got str"):
        Engine(TARGET, NGramDrafter(), max_batch=2, batched_drafting="yes")
    with pytest.raises(ValueError, match=r"vocab_size: expected the draft model's own \(97\), got 50"):
        BatchedModelDrafter(DRAFT, slots=2, vocab_size=50)
    with pytest.raises(ValueError, match="drafter: vocabulary size 50 differs from the target's 97"):
        Engine(TARGET, BatchedModelDrafter(tiny_target(seed=1, vocab_size=50), slots=2), max_batch=2, batched_drafting=True)
    with pytest.raises(TypeError, match="model: expected a specdec DenseTarget for batched drafting, got str"):
        BatchedModelDrafter("gpt2", slots=2)
    with pytest.raises(ValueError, match="layout: expected one of"):
        BatchedModelDrafter(DRAFT, slots=2, layout="flat")
    drafter = BatchedModelDrafter(DRAFT, slots=2)
    drafter.reset(0)
    ctx = [torch.tensor([1, 2])]
    kw = dict(samplings=[SamplingConfig()], generators=[None], target_hiddens=[None])
    with pytest.raises(ValueError, match=r"slots\[0\]: expected an int in \[0, 2\), got 5"):
        drafter.propose_batch([5], ctx, [2], **kw)
    with pytest.raises(ValueError, match=r"max_tokens\[0\]: expected an int >= 0, got -1"):
        drafter.propose_batch([0], ctx, [-1], **kw)
    with pytest.raises(ValueError, match=r"max_tokens: expected one entry per slot \(1\), got 2"):
        drafter.propose_batch([0], ctx, [1, 2], **kw)
    with pytest.raises(TypeError, match=r"contexts\[0\]: expected a non-empty 1-D int64 tensor, got torch.float32"):
        drafter.propose_batch([0], [torch.tensor([1.0])], [1], **kw)


def dflash_drafter(target=TARGET, model=None):
    if model is None:
        cfg = fixture_config("DFlashDraftModel", target, num_layers=2, target_layer_ids=[0, 1], block_size=5)
        model = random_block_model(cfg, target, seed=3)
    return DFlashDrafter(model, target)


@settings(max_examples=6, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    max_batch=st.integers(1, 3),
    verifier=st.sampled_from(sorted(VERIFIERS)),
    temperature=st.sampled_from([0.0, 1.0]),
    seed=st.integers(0, 10_000),
)
def test_block_drafter_batched_per_request_equals_generate_alone(lengths, max_batch, verifier, temperature, seed):
    prompts = prompts_of(lengths, seed)
    news = [5 + (seed + i) % 9 for i in range(len(prompts))]
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed)).tolist()
    head = dflash_drafter()
    batch = head.batched(slots=max_batch, layout="per_request", max_context=SEQ)
    engine = Engine(TARGET, batch, VERIFIERS[verifier](), max_batch=max_batch, batched_drafting=True)
    ids = {i: engine.add_request(prompts[i], max_new_tokens=news[i], temperature=temperature, seed=seed + i) for i in order}
    outputs = engine.run()
    for i, prompt in enumerate(prompts):
        alone_drafter = dflash_drafter(model=head.model)
        alone_drafter.enable_static_cache(SEQ)
        alone = sd.generate(
            TARGET,
            prompt[None],
            max_new_tokens=news[i],
            drafter=alone_drafter,
            verifier=VERIFIERS[verifier](),
            num_draft_tokens=4,
            temperature=temperature,
            seed=seed + i,
        )
        assert torch.equal(outputs[ids[i]], alone.tokens[0]), f"request {i} differs from alone"
        assert engine.request(ids[i]).rounds == alone.per_request[0].rounds


def test_block_drafter_packed_by_default_one_block_forward_per_round(monkeypatch):
    forwards = []
    original = BlockDraftModel.block_forward_slots

    def counting(self, noise, *args, **kw):
        forwards.append(noise.shape[0])
        return original(self, noise, *args, **kw)

    monkeypatch.setattr(BlockDraftModel, "block_forward_slots", counting)
    model = dflash_drafter().model
    engine = Engine(TARGET, lambda: dflash_drafter(model=model), max_batch=3, batched_drafting=True)
    assert isinstance(engine._batch_drafter, BatchedBlockDrafter) and engine._batch_drafter.layout == "packed"
    prompts = prompts_of([3, 9, 5], seed=1)
    ids = [engine.add_request(p, max_new_tokens=12) for p in prompts]
    engine.step()  # the prefills
    forwards.clear()
    engine.step()
    assert forwards == [3]  # one block forward of three requests' blocks
    outputs = engine.run()
    for i, prompt in enumerate(prompts):
        ar = sd.generate(TARGET, prompt[None], max_new_tokens=12)
        assert torch.equal(outputs[ids[i]], ar.tokens[0]), f"request {i} differs from autoregressive decoding"


@pytest.mark.parametrize("verifier", sorted(VERIFIERS))
def test_block_drafter_on_its_static_path_equals_autoregressive_greedy(verifier):
    batch = dflash_drafter().batched(slots=3, max_context=SEQ)
    batch.enable_static_path((0, 4, 8))  # padded rounds, and prompts projected eagerly first
    engine = Engine(TARGET, batch, VERIFIERS[verifier](), max_batch=3, batched_drafting=True)
    prompts = prompts_of([3, 9, 5, 12, 1], seed=4)
    ids = [engine.add_request(p, max_new_tokens=14) for p in prompts]
    outputs = engine.run()
    for i, prompt in enumerate(prompts):
        ar = sd.generate(TARGET, prompt[None], max_new_tokens=14)
        assert torch.equal(outputs[ids[i]], ar.tokens[0]), f"request {i} differs from autoregressive decoding"
    assert sum(engine.request(i).accepted for i in ids) > 0


@pytest.mark.parametrize("batched", [True, False])
def test_a_request_longer_than_the_draft_model_gets_shorter_drafts_and_its_companion_is_unaffected(batched):
    """A 40-token prompt on a draft model of 32 positions: drafting stops for it (with one warning), never the batch."""
    short_draft = tiny_target(seed=1, max_seq_len=32)
    factory = (lambda: ModelDrafter(short_draft)) if batched else (lambda: ModelDrafter(tiny_target(seed=1, max_seq_len=32)))
    engine = Engine(TARGET, factory, max_batch=2, batched_drafting=batched)
    prompts = [torch.tensor([1, 2, 3]), torch.arange(40) % 97]
    ids = [engine.add_request(p, max_new_tokens=n) for p, n in zip(prompts, (8, 20))]
    with pytest.warns(UserWarning, match="Drafter: a context of 4[01] tokens and 4 draft tokens overflow"):
        outputs = engine.run()
    for rid, prompt, n in zip(ids, prompts, (8, 20)):
        assert engine.status(rid) == "finished"
        assert torch.equal(outputs[rid], sd.generate(TARGET, prompt[None], n).tokens[0])


def test_generate_with_a_draft_model_shorter_than_the_request_stays_lossless():
    drafter = ModelDrafter(tiny_target(seed=0, max_seq_len=16))  # the target's own weights: drafts while they fit
    prompt = torch.tensor([[1, 2, 3, 1, 2]])
    with pytest.warns(UserWarning, match="overflow the draft model's max_seq_len 16"):
        out = sd.generate(TARGET, prompt, 30, drafter=drafter)
    assert torch.equal(out.tokens, sd.generate(TARGET, prompt, 30).tokens)
    assert sum(n * c for n, c in enumerate(out.stats.accepted_histogram)) > 0  # it drafted before the cache filled


def test_a_loop_drafter_from_a_factory_reports_its_drafters_taps_and_vocabulary():
    from specdec.drafters import NGramDrafter
    from specdec.drafters.block import DFlashDrafter
    from specdec.drafters.block.fixtures import fixture_config, random_block_model
    from specdec.testing import tiny_target

    target = tiny_target(seed=0, max_seq_len=64)
    model = random_block_model(
        fixture_config("DFlashDraftModel", target, num_layers=2, target_layer_ids=[0, 1], block_size=5), target, seed=3
    )
    loop = LoopDrafter(lambda: DFlashDrafter(model, target), slots=2)
    assert loop.target_layer_ids == DFlashDrafter(model, target).target_layer_ids and loop.vocab_size == target.vocab_size

    class OtherVocab(NGramDrafter):
        vocab_size = 98

    made = iter([NGramDrafter(), OtherVocab()])
    mixed = LoopDrafter(lambda: next(made), slots=2)
    with pytest.raises(ValueError, match=r"drafter: the factory's drafters must agree on vocab_size and target_layer_ids"):
        mixed.reset(0)
