"""Engine greedy rounds: one device read per round for all requests, nothing but views, one cat and one argmax.

Counted with :mod:`round_counts` (device work outside the target forward, by data flow from the
forward's outputs and the prompts) at concurrency 16 on the tiny Qwen3-shape target: AR (no drafts) and
an oracle drafter (chain, greedy). Also: a bad host proposal still fails its request with the message
of :meth:`DraftProposal.validate`, greedy and sampled requests mixed in one engine each keep their
``generate`` output, and a greedy chain round's new tokens, cut at an EOS inside the round, are the
request's output and copies of it.
"""

from __future__ import annotations

import pytest
import torch
from round_counts import engine_rounds, tiny_engine

import specdec as sd
from specdec.contracts import DraftProposal
from specdec.drafters import NGramDrafter
from specdec.drafters.oracle import AcceptanceProfile, OracleDrafter
from specdec.engine import Engine, RequestFailed
from specdec.testing import tiny_target

VIEWS = {"select", "slice", "unsqueeze", "view", "alias", "squeeze", "expand"}
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def ar_rounds():
    engine, ragged, prompts = tiny_engine(concurrency=16, spec=False, max_new_tokens=NEW_TOKENS)
    return engine_rounds(engine, ragged, prompts, max_new_tokens=NEW_TOKENS, per_op=True), engine


@pytest.fixture(scope="module")
def spec_rounds():
    engine, ragged, prompts = tiny_engine(concurrency=16, spec=True, max_new_tokens=NEW_TOKENS)
    return engine_rounds(engine, ragged, prompts, max_new_tokens=NEW_TOKENS, per_op=True), engine


@pytest.mark.parametrize("case", ["ar_rounds", "spec_rounds"])
def test_a_greedy_round_reads_the_device_once(case, request):
    rounds, _ = request.getfixturevalue(case)
    assert rounds[0][0] == 16 and len(rounds) > 2
    for running, _, reads, per_op in rounds:
        assert running >= 1 and reads == 1, (running, reads, per_op)
        launched = {op: n for op, n in per_op.items() if op not in VIEWS}
        assert launched == {"cat": 1, "argmax": 1}, launched


def test_the_oracle_rounds_accept_drafts_and_equal_ar(ar_rounds, spec_rounds):
    (ar, ar_engine), (spec, spec_engine) = ar_rounds, spec_rounds
    assert len(spec) < len(ar)  # drafts were accepted: fewer rounds for the same tokens
    for rid in range(16):
        assert torch.equal(spec_engine.output(rid), ar_engine.output(rid))


class OutOfRange:
    """A drafter proposing one token id past the vocabulary, on the host."""

    vocab_size = None
    host_context = True

    def reset(self):
        pass

    def propose(self, context, max_tokens, *, sampling, generator):
        return DraftProposal(tokens=torch.tensor([97]))


def test_a_bad_host_proposal_fails_its_request_with_the_validate_message():
    target = tiny_target(seed=0, max_seq_len=64)
    made = []

    def factory():
        made.append(OutOfRange() if len(made) == 1 else NGramDrafter(max_ngram=2))
        return made[-1]

    engine = Engine(target, factory, max_batch=2)
    engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=8)
    engine.add_request(torch.tensor([4, 5]), max_new_tokens=8)
    engine.step()
    with pytest.raises(
        RequestFailed,
        match=r"request 1 failed: ValueError: proposal.tokens: expected token ids in \[0, 97\), got tokens\[0\] = 97",
    ):
        engine.step()
    assert engine.status(1) == "failed"


@pytest.mark.parametrize(
    "tokens, error, message",
    [
        (torch.tensor([-1]), ValueError, r"expected token ids in \[0, 97\), got tokens\[0\] = -1"),
        (torch.tensor([1.0]), TypeError, "proposal.tokens: expected an integer dtype, got torch.float32"),
        (torch.tensor([True]), TypeError, "proposal.tokens: expected an integer dtype, got torch.bool"),
        (torch.tensor([[1, 2]]), ValueError, r"proposal.tokens: expected a 1-D tensor, got shape \(1, 2\)"),
    ],
    ids=["negative", "float", "bool", "2-D"],
)
@pytest.mark.parametrize("budget", [None, 4])
def test_a_host_proposal_the_host_check_refuses_fails_with_the_validate_message(tokens, error, message, budget):
    class Bad(OutOfRange):
        def propose(self, context, max_tokens, *, sampling, generator):
            return DraftProposal(tokens=tokens)

    engine = Engine(tiny_target(seed=0, max_seq_len=64), lambda: Bad(), max_batch=1, verify_budget=budget)
    engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=8)
    engine.step()
    with pytest.raises(RequestFailed, match=message) as failed:
        engine.step()
    assert isinstance(failed.value.error, error)


def test_greedy_and_sampled_requests_mixed_keep_their_generate_output():
    target = tiny_target(seed=0, max_seq_len=64)
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 97, (n,), generator=gen) for n in (5, 3, 8, 4)]
    temperatures = [0.0, 1.0, 0.0, 0.7]
    engine = Engine(target, NGramDrafter(max_ngram=2), max_batch=4)
    for i, (p, t) in enumerate(zip(prompts, temperatures)):
        engine.add_request(p, max_new_tokens=12, temperature=t, seed=i)
    outputs = engine.run()
    for i, (p, t) in enumerate(zip(prompts, temperatures)):
        alone = sd.generate(target, p[None], max_new_tokens=12, drafter=NGramDrafter(max_ngram=2), temperature=t, seed=i)
        assert torch.equal(outputs[i], alone.tokens[0])


def test_a_greedy_tree_round_reads_the_device_once_and_keeps_the_generate_output():
    from specdec.models.ragged import RaggedDenseTarget
    from specdec.verify import TreeVerifier

    target = tiny_target(seed=0, max_seq_len=64)
    ragged = RaggedDenseTarget(target, slots=4, layout="packed")
    gen = torch.Generator().manual_seed(5)
    # repetitive prompts: the n-gram drafter finds several continuations, so its trees branch
    prompts = [torch.randint(1, 6, (n,), generator=gen) for n in (9, 6, 12, 7)]
    engine = Engine(
        ragged, NGramDrafter(max_ngram=2, max_paths=3), verifier=TreeVerifier(budget=6), max_batch=4, num_draft_tokens=4
    )
    rounds = engine_rounds(engine, ragged, prompts, max_new_tokens=12, per_op=True)
    for _, _, reads, per_op in rounds:
        assert reads == 1 and {op: n for op, n in per_op.items() if op not in VIEWS} == {"cat": 1, "argmax": 1}, per_op
    assert any(engine.request(i).accepted for i in range(4))
    for i, p in enumerate(prompts):
        alone = sd.generate(
            target, p[None], max_new_tokens=12, drafter=NGramDrafter(max_ngram=2, max_paths=3), verifier=TreeVerifier(budget=6)
        )
        assert torch.equal(engine.output(i), alone.tokens[0])


def test_a_greedy_chain_round_hands_out_copies_of_its_tokens_cut_at_an_eos_inside_it():
    target = tiny_target(seed=0, max_seq_len=64)
    prompt = torch.tensor([3, 1, 4, 1, 5])
    free = sd.generate(target, prompt[None], max_new_tokens=20).tokens[0]
    # every round accepts its 4 drafts and emits 5 tokens after the prefill's one: tokens 1-5, 6-10, ...;
    # an EOS first seen at a position that does not end a round cuts its round short
    position = next(i for i in range(2, 20) if i % 5 and int(free[i]) not in free[:i].tolist())
    eos = int(free[position])
    expected = sd.generate(target, prompt[None], max_new_tokens=20, eos_token_id=eos).tokens[0]
    assert expected.numel() == position + 1
    always = OracleDrafter(AcceptanceProfile((1.0,) * 4, source="test"), references=[torch.cat([prompt, free])], vocab_size=97)
    engine = Engine(target, always, max_batch=1, num_draft_tokens=4)
    streamed: list[torch.Tensor] = []
    rid = engine.add_request(prompt, max_new_tokens=20, eos_token_id=eos, on_tokens=streamed.append)
    stepped = []
    while engine.has_work:
        stepped += engine.step().values()
    assert torch.equal(torch.cat(streamed), expected) and torch.equal(torch.cat(stepped), expected)
    assert torch.equal(engine.output(rid), expected)
    # each round accepts its 4 drafts; of the last, only those before the EOS count (its last token is the bonus's place)
    assert engine.request(rid).accepted == 4 * (len(stepped) - 2) + len(stepped[-1]) - 1 < 4 * (len(stepped) - 1)
    for tokens in stepped:
        tokens.fill_(-1)
    assert torch.equal(engine.output(rid), expected)  # what went out were copies


def _block_engine(concurrency: int, wrap=None, budget=None):
    from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model

    target = tiny_target(seed=0, max_seq_len=64)
    cfg = fixture_config("DFlashDraftModel", target, num_layers=1, target_layer_ids=[0, 1], block_size=5)
    batch = DFlashDrafter(random_block_model(cfg, target, seed=3), target).batched(slots=concurrency, max_context=64)
    batch.enable_static_path()
    drafter = batch if wrap is None else wrap(batch)
    engine = Engine(target, drafter, max_batch=concurrency, batched_drafting=True, verify_budget=budget)
    gen = torch.Generator().manual_seed(1)
    return engine, target, [torch.randint(0, 97, (n,), generator=gen) for n in (3, 7, 5, 9, 4, 6, 8, 2)[:concurrency]]


@pytest.mark.parametrize("budget", [None, 12], ids=["no-budget", "budget"])
@pytest.mark.parametrize("together", [True, False], ids=["together", "broken-on-purpose"])
def test_device_proposals_of_a_round_are_checked_and_read_in_one_device_read(together, budget, monkeypatch):
    """A block drafter's chains (ids, scores on the device): one read for every request's ids, checks and,
    under a verify budget, the path scores its gains and its observation read."""
    if not together:  # mutation: each request's proposal checked and read alone
        monkeypatch.setattr(Engine, "_read_device_chains", lambda self, states: None)
    engine, target, prompts = _block_engine(8, budget=budget)
    rounds = engine_rounds(engine, engine.target, prompts, max_new_tokens=12)
    full = [reads for running, _, reads in rounds[1:] if running == 8]
    assert full, rounds
    if together:
        assert all(reads == 2 for reads in full), full  # the proposals, then the forward's argmaxes
    else:
        assert all(reads > 8 for reads in full), full
    for i, prompt in enumerate(prompts):
        assert torch.equal(engine.output(i), sd.generate(target, prompt[None], max_new_tokens=12).tokens[0])


def test_a_bad_device_proposal_among_good_ones_fails_its_request_alone():
    class OneBad:
        """The batched block drafter, with request 2's first draft pushed past the vocabulary."""

        def __init__(self, batch):
            self.batch, self.slots, self.vocab_size = batch, batch.slots, batch.vocab_size
            self.target_layer_ids = batch.target_layer_ids

        def reset(self, slot):
            self.batch.reset(slot)

        def propose_batch(self, slots, *args, **kw):
            props = self.batch.propose_batch(slots, *args, **kw)
            for i, slot in enumerate(slots):
                if slot == 2 and props[i].tokens.numel():
                    props[i] = DraftProposal(tokens=props[i].tokens + 97, tree_logprobs=props[i].tree_logprobs)
            return props

    engine, target, prompts = _block_engine(4, wrap=OneBad)
    ids = [engine.add_request(p, max_new_tokens=10) for p in prompts]
    engine.step()
    with pytest.raises(RequestFailed, match=r"request 2 failed: ValueError: proposal.tokens: expected token ids in \[0, 97\)"):
        engine.step()
    assert [engine.status(i) for i in ids] == ["running", "running", "failed", "running"]
    outputs = engine.run()
    for i in (0, 1, 3):
        assert torch.equal(outputs[ids[i]], sd.generate(target, prompts[i][None], max_new_tokens=10).tokens[0])
