"""AgentSpecDrafter: output equals AR (greedy, torch.equal) and keeps the target law (sampling, exact
enumeration); drafts come from the request's own (agent, query, block) partition."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import specdec as sd
from specdec.contracts import SamplingConfig
from specdec.drafters import AgentSpecDrafter
from specdec.drafters.agentspec import StructureSpec, TokenPieces
from specdec.testing import tiny_target
from specdec.testing.laws import autoregressive_law, chain_round, speculative_law, total_variation
from specdec.testing.tokenizers import tiny_tokenizer

GREEDY = SamplingConfig()
TINY_TABLE = TokenPieces.from_tokenizer(tiny_tokenizer())
# single-letter delimiters, so random token ids open and close blocks all the time
TINY_SPEC = StructureSpec.of([("quote", "e", "e"), ("paren", "a", "o")])


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, max_seq_len=512)


def propose(drafter, context, k=4):
    return drafter.propose(torch.tensor(context), k, sampling=GREEDY, generator=None).tokens.tolist()


def test_multi_turn_requests_equal_ar_and_draft_from_earlier_turns(target):
    drafter = AgentSpecDrafter(TINY_TABLE, TINY_SPEC, min_ngram=1)
    prompt = torch.tensor([[3, 17, 40, 3, 17, 40, 8, 9]])
    accepted = []
    for turn in range(3):
        drafter.begin_request(agent="coder", query=0)
        ar = sd.generate(target, prompt, 40)
        out = sd.generate(target, prompt, 40, drafter=drafter, num_draft_tokens=5)
        assert torch.equal(out.tokens, ar.tokens), turn
        accepted.append(out.stats.mean_accepted)
        prompt = torch.cat([prompt, ar.tokens, torch.tensor([[5, 6]])], dim=1)
    # the target repeats itself across turns: later turns accept drafts
    assert max(accepted) > 0.5


def test_a_batch_of_prompts_equals_ar(target):
    drafter = AgentSpecDrafter(TINY_TABLE, TINY_SPEC)
    drafter.begin_request(agent=1, query="q")
    prompts = [torch.tensor([1, 2, 3, 1, 2]), torch.tensor([50, 51, 50, 51, 50]), torch.tensor([7])]
    out = sd.generate(target, prompts, 30, drafter=drafter, num_draft_tokens=4)
    ar = sd.generate(target, prompts, 30)
    assert all(torch.equal(a, b) for a, b in zip(out.tokens, ar.tokens))
    assert len(drafter.index.streams) == 3


@given(
    st.lists(st.integers(0, 96), min_size=1, max_size=6),
    st.integers(1, 4),
    st.integers(0, 3),
    st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2)), min_size=1, max_size=3),
    st.booleans(),
    st.integers(1, 6),
)
def test_hypothesis_requests_equal_ar(target, pattern, repeats, noise, keys, isolate, k):
    """Repetitive prompts over the whole vocabulary (blocks open and close at random), several requests."""
    drafter = AgentSpecDrafter(TINY_TABLE, TINY_SPEC, min_ngram=1, max_ngram=4, isolate=isolate, alpha=k)
    for agent, query in keys:
        drafter.begin_request(agent=agent, query=query)
        prompt = torch.tensor([(pattern * repeats + [noise])[:60]])
        out = sd.generate(target, prompt, 24, drafter=drafter, num_draft_tokens=k)
        assert torch.equal(out.tokens, sd.generate(target, prompt, 24).tokens)


def test_sampled_rounds_keep_the_target_law():
    """Exact enumeration on a 4-token vocabulary: rounds of the drafter's deterministic drafts emit the AR law."""
    pieces = TokenPieces([b"<", b">", b"a", b"b"])
    spec = StructureSpec.of([("tag", "<", ">")])
    drafter = AgentSpecDrafter(pieces, spec, min_ngram=1, max_ngram=3)
    drafter.add_history(torch.tensor([0, 2, 3, 1, 2, 2, 3, 0, 2, 3, 3, 1]), agent=0, query=0)
    drafter.add_history(torch.tensor([2, 3, 3, 2, 0, 3, 3, 1]), agent=0, query=1)
    drafter.begin_request(agent=0, query=0)
    drafter.reset()

    def logits(ctx):
        table = torch.tensor(
            [[0.3, -0.2, 1.1, 0.0], [0.9, 0.1, -0.4, 0.2], [-0.5, 0.6, 0.0, 1.3], [0.2, 0.2, 0.7, -1.0]], dtype=torch.float64
        )
        return table[ctx[-1]] + 0.1 * len(ctx)

    drafted = []

    def tokens(ctx):
        out = drafter.propose(torch.tensor(ctx), 3, sampling=SamplingConfig(temperature=1.0), generator=None)
        assert out.draft_probs is None
        drafted.append(out.num_tokens)
        return out.tokens.tolist()

    for sampling in [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_k=3)]:
        spec_law = speculative_law(chain_round(logits, num_draft=3, sampling=sampling, draft_tokens=tokens), (0, 2), 5)
        assert total_variation(spec_law, autoregressive_law(logits, (0, 2), 5, sampling=sampling)) < 1e-12
    assert sum(drafted) > len(drafted)  # the drafter did draft, often more than one token


def test_drafts_come_from_the_requests_own_block():
    spec = StructureSpec.of([("code", "x", "z")])
    drafter = AgentSpecDrafter(TINY_TABLE, spec, min_ngram=2)
    x, z = TINY_TABLE.pieces.index(b"x"), TINY_TABLE.pieces.index(b"z")
    # the same two tokens (5, 6) are followed by 7 7 in plain text and by 8 8 inside the block
    drafter.add_history(torch.tensor([5, 6, 7, 7, 1, x, 5, 6, 8, 8, z, 1]), agent=0, query=0)
    drafter.begin_request(agent=0, query=0)
    drafter.reset()
    assert propose(drafter, [2, x, 3, 5, 6], 2) == [8, 8]
    drafter.reset()
    assert propose(drafter, [2, 3, 5, 6], 2) == [7, 7]
    # a continuation stops where its block ends (after the closing token)
    drafter.reset()
    assert propose(drafter, [2, x, 5, 6], 6) == [8, 8, z]


def test_other_queries_are_isolated_and_the_global_index_is_the_fallback():
    history = torch.tensor([5, 6, 7, 8, 9])
    for isolate, fallback, other_query_sees, own_partition_only in [
        (True, True, [7, 8, 9], False),
        (True, False, [], True),
        (False, False, [7, 8, 9], False),
    ]:
        drafter = AgentSpecDrafter(TINY_TABLE, TINY_SPEC, min_ngram=1, isolate=isolate, fallback=fallback)
        drafter.add_history(history, agent=0, query=0)
        drafter.begin_request(agent=0, query=1)
        drafter.reset()
        assert propose(drafter, [1, 5, 6], 3) == other_query_sees, (isolate, fallback)
        assert (drafter.fallback_rounds == 0) == (own_partition_only or not isolate)


def test_earlier_turns_of_the_query_feed_later_ones_but_not_their_prompts():
    drafter = AgentSpecDrafter(TINY_TABLE, TINY_SPEC, min_ngram=1, fallback=False)
    drafter.begin_request(agent=0, query=0)
    drafter.reset()
    propose(drafter, [10, 11, 12, 20])  # prompt 10 11 12, then the first generated token 20
    drafter.observe(torch.tensor([10, 11, 12, 20, 21, 22]))
    drafter.reset()
    assert propose(drafter, [30, 20], 3) == [21, 22]
    assert propose(drafter, [30, 20, 21, 22, 10], 3) == []  # 10 -> 11 was in a prompt only


def test_rollback_equals_a_fresh_drafter():
    def fresh():
        d = AgentSpecDrafter(TINY_TABLE, TINY_SPEC, min_ngram=1)
        d.add_history(torch.tensor([4, 5, 6, 40, 4, 5, 7, 16]), agent=0, query=0)
        d.begin_request(agent=0, query=0)
        d.reset()
        return d

    moved = fresh()
    propose(moved, [40, 16, 4, 5, 6, 16, 40, 4, 5])
    # a context that diverges early (a different request without reset, or an enumeration)
    assert propose(moved, [40, 16, 4, 5, 7, 16, 4]) == propose(fresh(), [40, 16, 4, 5, 7, 16, 4])
    assert moved.index.streams[-1].tokens == [40, 16, 4, 5, 7, 16, 4]


def test_bad_contexts_and_arguments_are_refused():
    drafter = AgentSpecDrafter(TINY_TABLE, TINY_SPEC)
    with pytest.raises(ValueError, match=r"context: expected token ids in \[0, 97\)"):
        propose(drafter, [1, 97])
    with pytest.raises(TypeError, match="context"):
        drafter.propose(torch.tensor([1.0, 2.0]), 2, sampling=GREEDY, generator=None)
    with pytest.raises(TypeError, match="agent"):
        drafter.begin_request(agent=[0], query=0)
    with pytest.raises(TypeError, match="pieces"):
        AgentSpecDrafter([b"a"])
    with pytest.raises(ValueError, match="max_candidates"):
        AgentSpecDrafter(TINY_TABLE, max_candidates=0)
    assert propose(drafter, [1, 2, 1], 0) == []


@pytest.mark.real_model
@pytest.mark.slow
def test_smollm2_tool_call_turns_equal_ar():
    from specdec.data import smollm2_target, smollm2_tokenizer

    tok = smollm2_tokenizer()
    target = smollm2_target(progress=False, max_seq_len=1024)
    drafter = AgentSpecDrafter(TokenPieces.from_tokenizer(tok))
    messages = [
        {
            "role": "user",
            "content": 'Call the tool as <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call> '
            "then show the code in a ```python block.",
        }
    ]
    for _ in range(2):
        drafter.begin_request(agent="coder", query=0)
        ids = tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), return_tensors="pt").input_ids
        out = sd.generate(target, ids, 48, drafter=drafter, num_draft_tokens=6)
        ar = sd.generate(target, ids, 48)
        assert torch.equal(out.tokens, ar.tokens)
        messages += [{"role": "assistant", "content": tok.decode(ar.tokens[0])}, {"role": "user", "content": "Again, fix it."}]


def test_tokens_a_second_draft_saw_but_nobody_emitted_do_not_become_history():
    """The two-level verifier drafts again after its Q chain: that context's tail was never verified; at reset the
    stream is cut to what two proposals in a row shared (always emitted), and observe() keeps every emitted token."""
    from specdec.testing.laws import MarkovLaw, MarkovTarget
    from specdec.verify.two_level import TwoLevelVerifier

    pieces = TokenPieces([bytes([97 + i]) for i in range(5)])
    target = MarkovTarget(
        MarkovLaw(5, order=1, seed=0, scale=4.0), max_seq_len=256, q_law=MarkovLaw(5, order=1, seed=100, scale=4.0)
    )
    prompt = torch.tensor([[0, 1, 2, 0, 1, 2, 0, 1]])
    drafter = AgentSpecDrafter(pieces, min_ngram=1)
    drafter.begin_request(agent="a", query=0)
    out = sd.generate(target, prompt, 20, drafter=drafter, verifier=TwoLevelVerifier(8, 8, gate="always"), num_draft_tokens=6)
    drafter.reset()
    emitted = prompt[0].tolist() + out.tokens[0].tolist()
    history = drafter.index.streams[0].tokens
    assert history == emitted[: len(history)] and len(history) >= len(emitted) - 8  # no Q chain token
    observed = AgentSpecDrafter(pieces, min_ngram=1)
    observed.begin_request(agent="a", query=0)
    sd.generate(target, prompt, 20, drafter=observed, verifier=TwoLevelVerifier(8, 8, gate="always"), num_draft_tokens=6)
    observed.observe(torch.tensor(emitted))
    observed.reset()
    assert observed.index.streams[0].tokens == emitted
