"""A packed forward's longest request attending its own slot apart (a prompt chunk among verify rows).

Every slot's query block in the slots' SDPA is as tall as the forward's longest request, so a long request among
short ones would pad them all; it attends in a second SDPA call over its own slot instead. These tests hold the
packed forward with that split to the per-request layout (every op on each request alone) and to the packed
forward without it, through tree masks, positions, commits and the static (bucketed) path.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.contracts import Tree, VerifyPlan
from specdec.models.ragged import LONG_REQUEST_PADDING, LONG_REQUEST_ROWS, RaggedDenseTarget, RequestRows
from specdec.testing import tiny_target

VOCAB, SEQ = 64, 96
DENSE = tiny_target(seed=0, max_seq_len=SEQ)
QWEN3 = tiny_target("qwen3", seed=2, max_seq_len=SEQ)
NEVER = None


def random_tree(gen: torch.Generator, nodes: int) -> Tree:
    parents = [-1] + [int(torch.randint(-1, i, (), generator=gen)) for i in range(1, nodes)]
    return Tree(tokens=torch.randint(0, VOCAB, (nodes,), generator=gen).tolist(), parents=parents[:nodes])


def targets(dense, *, apart_from: int | None, buckets=None):
    split = RaggedDenseTarget(dense, slots=5, layout="packed")
    split.long_request_rows, split.long_request_padding = apart_from, 1  # tiny spans: any padding counts
    joint = RaggedDenseTarget(dense, slots=5, layout="packed")
    joint.long_request_rows = NEVER
    exact = RaggedDenseTarget(dense, slots=5)
    if buckets is not None:
        split.enable_static_path(buckets, span_step=8)
        joint.enable_static_path(buckets, span_step=8)
    return split, joint, exact


def check_round(requests, split, joint, exact):
    outs = [t.forward(requests, hidden_layers=(1,)) for t in (split, joint, exact)]
    for a, b, c in zip(*outs):
        torch.testing.assert_close(a.logits, c.logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a.logits, b.logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a.hidden[0], c.hidden[0], rtol=1e-5, atol=1e-5)
        assert torch.equal(a.logits.argmax(-1), c.logits.argmax(-1))


@settings(max_examples=10, deadline=None)
@given(
    long_rows=st.integers(8, 24),
    short=st.lists(st.integers(1, 2), min_size=1, max_size=3),
    nodes=st.integers(0, 2),
    tree_prompt=st.booleans(),
    seed=st.integers(0, 1000),
    qwen=st.booleans(),
    bucketed=st.booleans(),
)
def test_a_request_attending_apart_matches_every_request_alone(long_rows, short, nodes, tree_prompt, seed, qwen, bucketed):
    dense = QWEN3 if qwen else DENSE
    gen = torch.Generator().manual_seed(seed)
    split, joint, exact = targets(dense, apart_from=8, buckets=(1, 2, 4, 8, 16, 32, 64) if bucketed else None)
    slots = torch.randperm(5, generator=gen)[: len(short) + 1].tolist()
    # the short requests hold committed prefixes, then verify a few rows while the long one is prefilled
    for s, n in zip(slots[1:], short):
        prompt = [RequestRows(s, torch.randint(0, VOCAB, (1, 3 + n), generator=gen))]
        for t in (split, joint, exact):
            t.forward(prompt)
            t.commit(s, 3 + n)
    requests = []
    for s, n in zip(slots[1:], short):
        tree = random_tree(gen, min(nodes, n - 1) if n > 1 else 0)
        requests.append(
            RequestRows.from_plan(
                s, VerifyPlan.for_tree(torch.randint(0, VOCAB, (1,), generator=gen), tree, prefix_len=exact.length(s))
            )
        )
    tokens = torch.randint(0, VOCAB, (1, long_rows), generator=gen)
    if tree_prompt:  # the long request's own rows under a tree mask and explicit positions
        plan = VerifyPlan.for_tree(tokens[0, :1], random_tree(gen, long_rows - 1), prefix_len=0)
        long_request = RequestRows.from_plan(slots[0], plan)
    else:
        long_request = RequestRows(slots[0], tokens)
    requests.insert(int(torch.randint(0, len(requests) + 1, (), generator=gen)), long_request)
    check_round(requests, split, joint, exact)
    if bucketed:
        assert any(key[3] > 0 for key in split.static_keys)  # the forward ran a bucket with a request apart
        assert all(key[3] == 0 for key in joint.static_keys)
    # its K/V went to its own slot: the next round attends the committed prefix alike in all three
    for t in (split, joint, exact):
        for rows in requests:
            t.commit(rows.slot, 1)
    again = [RequestRows(rows.slot, torch.randint(0, VOCAB, (1, 2), generator=gen)) for rows in requests]
    check_round(again, split, joint, exact)


def test_the_split_applies_from_long_request_rows_and_four_times_the_others():
    ragged = RaggedDenseTarget(DENSE, slots=3, layout="packed")  # 4 slots with the scratch one
    assert (ragged.long_request_rows, ragged.long_request_padding) == (LONG_REQUEST_ROWS, LONG_REQUEST_PADDING)
    ragged.long_request_rows, ragged.long_request_padding = 64, 4 * 48 * 100
    assert ragged._attends_apart(2, 64, 16, 100) and not ragged._attends_apart(2, 64, 16, 99)  # the padding's edge
    assert not ragged._attends_apart(2, 63, 8, 10**4)  # under long_request_rows
    assert not ragged._attends_apart(2, 64, 17, 10**4)  # under four times the next request
    assert not ragged._attends_apart(1, 256, 1, 10**4)  # alone in the forward: its own slot is the whole SDPA
    ragged.long_request_padding = None
    assert not ragged._attends_apart(2, 256, 1, 10**4)  # turned off
    ragged.enable_static_path((1, 2, 4, 8, 16, 64, 128), span_step=8)
    ragged.long_request_rows, ragged.long_request_padding = 8, 1
    gen = torch.Generator().manual_seed(0)
    prompts = [
        RequestRows(0, torch.randint(0, VOCAB, (1, 40), generator=gen)),
        RequestRows(1, torch.randint(0, VOCAB, (1, 3), generator=gen)),
    ]
    ragged.forward(prompts)
    assert ragged.static_keys == [(64, 4, 40, 64, ())]  # (Rb, Tb of the others, Lb, Tl of the one apart)
    flex = RaggedDenseTarget(DENSE, slots=3, layout="packed", attention="flex")
    flex.long_request_rows, flex.long_request_padding = 8, 1
    assert not flex._attends_apart(2, 64, 1, 64)  # flex attends the packed rows, no slot blocks to pad


@pytest.mark.parametrize("apart", [True, False])
def test_outputs_come_back_in_the_callers_order(apart):
    split, _, exact = targets(DENSE, apart_from=8 if apart else NEVER)
    gen = torch.Generator().manual_seed(4)
    requests = [
        RequestRows(3, torch.randint(0, VOCAB, (1, 2), generator=gen)),
        RequestRows(1, torch.randint(0, VOCAB, (1, 20), generator=gen)),
        RequestRows(0, torch.randint(0, VOCAB, (1, 1), generator=gen)),
    ]
    outs = split.forward(requests)
    assert [o.logits.shape[1] for o in outs] == [2, 20, 1]
    for out, ref in zip(outs, exact.forward(requests)):
        torch.testing.assert_close(out.logits, ref.logits, rtol=1e-5, atol=1e-5)
