"""AgentSpecBatchDrafter: draft lengths within the batch budget and the engine's caps, one history shared by
every slot (a finished request's output is history for the next), bad per-request arguments refused."""

import pytest
import torch

from specdec.contracts import SamplingConfig
from specdec.drafters import AgentSpecDrafter
from specdec.drafters.agentspec import AgentSpecBatchDrafter, StructureSpec, TokenPieces
from specdec.testing.tokenizers import tiny_tokenizer

GREEDY = SamplingConfig()
TINY_TABLE = TokenPieces.from_tokenizer(tiny_tokenizer())
# one history line per agent; suffix [1, 2] is followed by 10 distinct tokens in each
HISTORY = {"a": [1, 2, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29], "b": [1, 2, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49]}


def batch_with_history(alpha, slots=3, **kwargs):
    """A batch drafter whose agents "a" and "b" each have ONE candidate after [1, 2]: n = 1, c = 1, |CT*| = 0, g = g_min."""
    drafter = AgentSpecDrafter(TINY_TABLE, min_ngram=1, alpha=alpha, g_min=0.5, **kwargs)
    for agent, tokens in HISTORY.items():
        drafter.add_history(torch.tensor(tokens), agent=agent, query=0)
    return drafter.batched(slots=slots)


def start(batch, slot, agent):
    batch.reset(slot)
    batch.begin_request(slot, agent=agent, query=0)


def propose(batch, slots, contexts, caps):
    out = batch.propose_batch(
        slots,
        [torch.tensor(c) for c in contexts],
        caps,
        samplings=[GREEDY] * len(slots),
        generators=[None] * len(slots),
        target_hiddens=[None] * len(slots),
    )
    return [p.tokens.tolist() for p in out]


def test_alone_a_request_gets_the_whole_budget():
    batch = batch_with_history(alpha=16)
    start(batch, 0, "a")
    # B_t = 16 / 1; the lone request's share is all of it, cut by the 10-token continuation
    assert propose(batch, [0], [[7, 1, 2]], [12]) == [HISTORY["a"][2:12]]


def test_equal_scores_split_the_batch_budget():
    batch = batch_with_history(alpha=16)
    start(batch, 0, "a")
    start(batch, 1, "b")
    # B_t = floor(16 / 2) = 8, equal scores: floor(8 * 1/2) = 4 each
    drafts = propose(batch, [0, 1], [[7, 1, 2], [9, 1, 2]], [12, 12])
    assert drafts == [HISTORY["a"][2:6], HISTORY["b"][2:6]]
    assert batch.last_lengths == {0: 4, 1: 4}


def test_proportional_shares_never_exceed_the_batch_budget():
    batch = batch_with_history(alpha=10)
    for slot, agent in enumerate(["a", "b", "a"]):
        start(batch, slot, agent)
    drafts = propose(batch, [0, 1, 2], [[7, 1, 2], [9, 1, 2], [8, 1, 2]], [12, 12, 12])
    # B_t = floor(10 / 3) = 3, three equal scores: floor(3 / 3) = 1 each (|CT*| = 0: no floor above it)
    assert [len(d) for d in drafts] == [1, 1, 1]
    assert sum(map(len, drafts)) <= 10 // 3


def test_caps_from_the_engine_are_never_exceeded():
    batch = batch_with_history(alpha=64)
    start(batch, 0, "a")
    start(batch, 1, "b")
    # shares of 16 each; caps 3 and 0
    drafts = propose(batch, [0, 1], [[7, 1, 2], [9, 1, 2]], [3, 0])
    assert drafts == [HISTORY["a"][2:5], []]


def test_a_request_with_no_room_takes_no_share():
    batch = batch_with_history(alpha=16)
    start(batch, 0, "a")
    start(batch, 1, "b")
    # slot 1 may draft nothing: slot 0 is the batch's only drafting request, B_t = 16
    assert propose(batch, [0, 1], [[7, 1, 2], [9, 1, 2]], [12, 0])[0] == HISTORY["a"][2:12]


def test_each_slot_drafts_from_its_own_agent():
    batch = batch_with_history(alpha=64)
    start(batch, 0, "b")
    start(batch, 1, "a")
    drafts = propose(batch, [0, 1], [[7, 1, 2], [9, 1, 2]], [3, 3])
    assert drafts == [HISTORY["b"][2:5], HISTORY["a"][2:5]]


def test_a_finished_request_is_history_for_the_next_one_of_its_agent():
    drafter = AgentSpecDrafter(TINY_TABLE, min_ngram=1)
    batch = drafter.batched(slots=2)
    start(batch, 0, "a")
    assert propose(batch, [0], [[3, 4, 60]], [4]) == [[]]  # prompt [3, 4], first token 60; nothing indexed yet
    batch.end_request(0, torch.tensor([3, 4, 60, 61, 62, 63, 64]))
    start(batch, 1, "a")
    assert propose(batch, [1], [[5, 60]], [4]) == [[61, 62, 63, 64]]
    # the prompt of a finished request is not history (the next turn's prompt repeats it)
    start(batch, 0, "a")
    assert propose(batch, [0], [[8, 3]], [4]) == [[]]
    # with a fresh drafter (empty history) the same request drafts nothing
    fresh = AgentSpecDrafter(TINY_TABLE, min_ngram=1).batched(slots=1)
    start(fresh, 0, "a")
    assert propose(fresh, [0], [[5, 60]], [4]) == [[]]


def test_a_request_that_never_drafted_is_history_from_its_one_generated_token():
    batch = AgentSpecDrafter(TINY_TABLE, min_ngram=1).batched(slots=2)
    start(batch, 0, "a")
    batch.end_request(0, torch.tensor([3, 4, 60]))  # prompt [3, 4], ended at its first token
    start(batch, 1, "a")
    assert propose(batch, [1], [[9, 4]], [4]) == [[60]]  # the generated token follows its prompt's last
    assert propose(batch, [1], [[9, 4, 7, 3]], [4]) == [[]]  # the prompt itself is not offered


def test_a_request_cancelled_before_its_first_token_leaves_nothing_searchable():
    batch = AgentSpecDrafter(TINY_TABLE, min_ngram=1).batched(slots=2)
    start(batch, 0, "a")
    batch.end_request(0, torch.tensor([3, 4, 60]), prompt_len=3)  # the engine's call: the prompt alone
    start(batch, 1, "a")
    assert propose(batch, [1], [[9, 4]], [4]) == [[]]  # not 60, the prompt's last token
    with pytest.raises(ValueError, match=r"prompt_len: expected an int in \[1, 3\]"):
        start(batch, 0, "a")
        batch.end_request(0, torch.tensor([3, 4, 60]), prompt_len=4)


def test_the_batched_form_shares_the_drafters_history():
    drafter = AgentSpecDrafter(TINY_TABLE, min_ngram=1)
    batch = drafter.batched(slots=1)
    assert batch.drafter is drafter and isinstance(batch, AgentSpecBatchDrafter)
    drafter.add_history(torch.tensor([4, 5, 6, 7]), agent="x", query=1)
    batch.reset(0)
    batch.begin_request(0, agent="x", query=1)
    assert propose(batch, [0], [[1, 4, 5]], [4]) == [[6, 7]]


def test_requests_running_together_draft_from_each_other():
    batch = AgentSpecDrafter(TINY_TABLE, min_ngram=1).batched(slots=2)
    start(batch, 0, "a")
    start(batch, 1, "a")
    propose(batch, [0, 1], [[3, 70, 71, 72, 73], [9]], [4, 4])
    assert propose(batch, [1], [[9, 70]], [4]) == [[71, 72, 73]]


def test_reset_ends_the_request_left_in_a_slot():
    batch = AgentSpecDrafter(TINY_TABLE, min_ngram=1).batched(slots=1)
    start(batch, 0, "a")
    propose(batch, [0], [[3, 80]], [4])  # prompt [3], first token 80
    propose(batch, [0], [[3, 80, 81, 82]], [4])
    start(batch, 0, "a")
    assert propose(batch, [0], [[5, 80]], [4]) == [[81, 82]]


def test_bad_requests_and_slots_raise():
    batch = AgentSpecDrafter(TINY_TABLE).batched(slots=2)
    with pytest.raises(TypeError, match="drafter_request: unknown argument 'querry'"):
        batch.check_request(agent=0, querry=1)
    with pytest.raises(TypeError, match="query: expected a hashable id, got list"):
        batch.check_request(query=[1])
    with pytest.raises(TypeError, match="spec: expected a StructureSpec or None, got str"):
        batch.check_request(spec="```")
    batch.check_request(agent=0, query=1, spec=StructureSpec.agent_default())
    with pytest.raises(ValueError, match=r"slot: expected an int in \[0, 2\), got 2"):
        batch.reset(2)
    with pytest.raises(ValueError, match="slot: slot 1 has no request"):
        batch.begin_request(1, agent=0)
    with pytest.raises(ValueError, match="slot: slot 1 has no request to end"):
        batch.end_request(1, torch.tensor([1, 2]))
    batch.reset(0)
    propose(batch, [0], [[1, 2]], [2])
    with pytest.raises(ValueError, match="already drafted"):
        batch.begin_request(0, agent=1)
    with pytest.raises(ValueError, match="slots: slot 1 has no request"):
        propose(batch, [1], [[1, 2]], [2])
    with pytest.raises(ValueError, match=r"max_tokens\[0\]: expected an int >= 0"):
        propose(batch, [0], [[1, 2]], [-1])
    with pytest.raises(ValueError, match="layout: expected 'packed' or 'per_request'"):
        AgentSpecDrafter(TINY_TABLE).batched(slots=1, layout="ragged")
    with pytest.raises(ValueError, match="slots: expected an int >= 1"):
        AgentSpecDrafter(TINY_TABLE).batched(slots=0)
