"""Per-request drafter arguments through the Engine, and AgentSpec's batched form inside it.

* ``add_request(..., drafter_request=...)`` reaches a RequestAwareDrafter's ``check_request`` at once and its
  ``begin_request(slot, ...)`` when the request joins; ``end_request(slot, prompt + output)`` follows when it
  finishes, is cancelled or fails; a drafter that takes no per-request arguments, or a bad mapping, raises
  before the request is stored, and the other requests run as if it had never been given;
* with ``AgentSpecDrafter`` batched, every request's greedy fp32 output equals ``generate`` alone, whatever
  the batch size and companions; a second request of the same agent and query accepts more drafts than with
  an empty history, and more than without structure isolation when another agent's history disagrees.
"""

from __future__ import annotations

import pytest
import torch

import specdec as sd
from specdec.drafters import AgentSpecDrafter, NGramDrafter
from specdec.drafters.agentspec import TokenPieces
from specdec.engine import Engine
from specdec.engine.drafting import LoopDrafter, RequestAwareDrafter
from specdec.testing import tiny_target
from specdec.testing.tokenizers import tiny_tokenizer

SEQ = 160
TARGET = tiny_target(seed=0, max_seq_len=SEQ)
PIECES = TokenPieces.from_tokenizer(tiny_tokenizer())
PROMPTS = [[3, 17, 40, 3, 17, 40, 8], [50, 51, 52, 50, 51, 52], [7], [9, 9, 9, 9, 2, 9, 9]]


class SpyDrafter(LoopDrafter):
    """An n-gram LoopDrafter that takes a ``tag`` per request and records the engine's calls."""

    def __init__(self, slots):
        super().__init__(NGramDrafter(), slots=slots)
        self.calls = []

    def check_request(self, **request):
        if set(request) - {"tag"}:
            raise TypeError(f"drafter_request: unknown argument {sorted(set(request) - {'tag'})[0]!r}")
        if not isinstance(request.get("tag", ""), str):
            raise ValueError(f"tag: expected a str, got {request['tag']!r}")

    def reset(self, slot):
        super().reset(slot)
        self.calls.append(("reset", slot))

    def begin_request(self, slot, **request):
        self.calls.append(("begin", slot, request))

    def end_request(self, slot, tokens, *, prompt_len):
        self.calls.append(("end", slot, tokens.tolist()))
        assert 1 <= prompt_len <= tokens.numel()


def ar(prompt, n):
    return sd.generate(TARGET, torch.tensor([prompt]), n).tokens[0]


def test_spy_is_request_aware_and_plain_loop_is_not():
    assert isinstance(SpyDrafter(1), RequestAwareDrafter)
    assert not isinstance(LoopDrafter(NGramDrafter(), slots=1), RequestAwareDrafter)


def test_arguments_reach_begin_request_after_reset_and_outputs_reach_end_request():
    spy = SpyDrafter(2)
    engine = Engine(TARGET, spy, max_batch=2, batched_drafting=True)
    a = engine.add_request(torch.tensor(PROMPTS[0]), max_new_tokens=6, drafter_request={"tag": "x"})
    b = engine.add_request(torch.tensor(PROMPTS[1]), max_new_tokens=9)
    out = engine.run()
    assert spy.calls[:4] == [("reset", 0), ("begin", 0, {"tag": "x"}), ("reset", 1), ("begin", 1, {})]
    ends = {call[1]: call[2] for call in spy.calls if call[0] == "end"}
    assert ends == {0: PROMPTS[0] + out[a].tolist(), 1: PROMPTS[1] + out[b].tolist()}
    assert torch.equal(out[a], ar(PROMPTS[0], 6)) and torch.equal(out[b], ar(PROMPTS[1], 9))


def test_cancel_calls_end_request_with_the_tokens_so_far():
    spy = SpyDrafter(1)
    engine = Engine(TARGET, spy, max_batch=1, batched_drafting=True)
    a = engine.add_request(torch.tensor(PROMPTS[0]), max_new_tokens=20, drafter_request={"tag": "y"})
    engine.step()
    engine.step()
    engine.cancel(a)
    assert spy.calls[-1] == ("end", 0, PROMPTS[0] + engine.output(a).tolist())
    queued = engine.add_request(torch.tensor(PROMPTS[2]), max_new_tokens=3)
    engine.cancel(queued)  # never ran: the drafter never saw it
    assert sum(call[0] == "end" for call in spy.calls) == 1


def test_bad_drafter_requests_raise_before_anything_is_stored_and_others_run_unaffected():
    spy = SpyDrafter(2)
    engine = Engine(TARGET, spy, max_batch=2, batched_drafting=True)
    good = engine.add_request(torch.tensor(PROMPTS[0]), max_new_tokens=8, drafter_request={"tag": "ok"})
    with pytest.raises(TypeError, match="drafter_request: unknown argument 'agent'"):
        engine.add_request(torch.tensor(PROMPTS[1]), max_new_tokens=8, drafter_request={"agent": 1})
    with pytest.raises(ValueError, match="tag: expected a str, got 3"):
        engine.add_request(torch.tensor(PROMPTS[1]), max_new_tokens=8, drafter_request={"tag": 3})
    with pytest.raises(TypeError, match="drafter_request: expected a mapping"):
        engine.add_request(torch.tensor(PROMPTS[1]), max_new_tokens=8, drafter_request=[("tag", "x")])
    with pytest.raises(TypeError, match="drafter_request: expected a mapping"):
        engine.add_request(torch.tensor(PROMPTS[1]), max_new_tokens=8, drafter_request={1: "x"})
    assert engine.waiting == (good,) and spy.calls == []
    other = engine.add_request(torch.tensor(PROMPTS[1]), max_new_tokens=8)
    out = engine.run()
    assert set(out) == {good, other}
    assert torch.equal(out[good], ar(PROMPTS[0], 8)) and torch.equal(out[other], ar(PROMPTS[1], 8))


@pytest.mark.parametrize("batched", [False, True])
def test_a_drafter_without_per_request_arguments_refuses_them(batched):
    engine = Engine(TARGET, NGramDrafter(), max_batch=2, batched_drafting=batched)
    with pytest.raises(TypeError, match=r"drafter_request: the engine's drafter \(NGramDrafter\) takes no per-request"):
        engine.add_request(torch.tensor(PROMPTS[0]), max_new_tokens=4, drafter_request={"agent": 0})
    assert engine.waiting == () and not engine.has_work


@pytest.mark.parametrize("max_batch", [1, 3])
@pytest.mark.parametrize("isolate", [True, False])
def test_agentspec_in_the_engine_equals_generate_alone(max_batch, isolate):
    engine = Engine(TARGET, AgentSpecDrafter(PIECES, min_ngram=1, isolate=isolate), max_batch=max_batch, batched_drafting=True)
    ids = []
    for _ in range(2):
        for i, prompt in enumerate(PROMPTS):
            request = {"agent": i % 2, "query": i} if i != 2 else None
            ids.append((engine.add_request(torch.tensor(prompt), max_new_tokens=24 + 4 * i, drafter_request=request), prompt, i))
    out = engine.run()
    for rid, prompt, i in ids:
        assert torch.equal(out[rid], ar(prompt, 24 + 4 * i)), (rid, prompt)
    assert sum(engine.request(rid).accepted for rid, _, _ in ids) > 0


def second_turn_accepted(drafter, prompt, n, *, first=True, distractor=None):
    """Accepted drafts of a request of agent "a", query 0, run after (``first``) the same request finished."""
    engine = Engine(TARGET, drafter, max_batch=2, batched_drafting=True, num_draft_tokens=6)
    request = {"agent": "a", "query": 0}
    if first:
        engine.add_request(torch.tensor(prompt), max_new_tokens=n, drafter_request=request)
        engine.run()
    if distractor is not None:
        drafter.add_history(distractor, agent="b", query=0)
    rid = engine.add_request(torch.tensor(prompt), max_new_tokens=n, drafter_request=request)
    out = engine.run()[rid]
    assert torch.equal(out, ar(prompt, n))
    return engine.request(rid).accepted


def test_history_from_a_finished_request_lengthens_the_next_ones_accepted_drafts():
    prompt, n = PROMPTS[1], 48
    answer = ar(prompt, n)
    # another agent's history after the same context, three times, with every third token changed; short
    # suffixes (max_ngram=2) match it as often as the true history, and its three copies outvote it
    wrong = answer.clone()
    wrong[3::3] = (wrong[3::3] + 1) % 97
    distractor = torch.cat([torch.tensor(prompt), wrong])

    def make(isolate=True):
        return AgentSpecDrafter(PIECES, min_ngram=1, max_ngram=2, isolate=isolate)

    shared = second_turn_accepted(make(), prompt, n)
    empty = second_turn_accepted(make(), prompt, n, first=False)
    isolated, not_isolated = make(), make(isolate=False)
    with_distractor = [
        second_turn_accepted(d, prompt, n, distractor=torch.cat([distractor] * 3)) for d in (isolated, not_isolated)
    ]
    assert shared > empty
    assert with_distractor[0] > with_distractor[1]
    assert with_distractor[0] >= n // 2  # the first request's answer, drafted back almost whole
