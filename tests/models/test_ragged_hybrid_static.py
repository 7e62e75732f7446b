"""The fixed-shape packed forward of a RaggedHybridTarget (what CUDA graphs capture), run eagerly on the CPU.

* over rounds of chains, trees and one-row requests with different prefix lengths, random accepted paths and
  companions that sit out a round (hypothesis), the bucketed static forward's logits and committed GDN states
  agree with the ``"per_request"`` layout to float32 rounding; the buckets it ran in are the expected ones;
* a request of more than 64 rows (a prefill) sends the forward to the eager packed path, and the ``"q"`` view
  agrees too;
* the commits of a bucketed forward run at a bucketed shape (padding requests in the scratch slot, padding path
  entries moving nothing) and agree, K/V moves of tree paths included;
* padding rows run in the scratch slot: a body that puts them in a request's slot is caught; a commit body run
  twice (as a capture's warm-up does) writes what it writes once; a bucketed commit at the end of a slot stays in it;
* under graphs, a slot whose rows a later replay has overwritten refuses to commit; the enabling calls check
  their arguments.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec.contracts import Tree, VerifyPlan
from specdec.models import ragged_hybrid_static
from specdec.models.graphs import StaticGraphs
from specdec.models.ragged import RequestRows
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.testing import tiny_target

VOCAB = 97
HYBRID = tiny_target("qwen3_5_text", seed=0, max_seq_len=96)
BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def assert_close(got, want, what):
    # packed and padded GEMMs change a row's last float32 bits; a wrong state, slot or mask moves far more
    torch.testing.assert_close(got, want, rtol=0.0, atol=1e-4, msg=lambda m: f"{what}: {m}")


def pair(slots: int, **kwargs):
    static = RaggedHybridTarget(HYBRID, slots=slots, layout="packed", **kwargs)
    static.enable_static_path(BUCKETS, span_step=8)
    return static, RaggedHybridTarget(HYBRID, slots=slots, **kwargs)


def random_plan(gen: torch.Generator, nodes: int, prefix_len: int) -> VerifyPlan:
    parents = [-1] + [int(torch.randint(-1, i, (), generator=gen)) for i in range(1, nodes)]
    tree = Tree(tokens=torch.randint(0, VOCAB, (nodes,), generator=gen).tolist(), parents=parents[:nodes])
    return VerifyPlan.for_tree(torch.randint(0, VOCAB, (1,), generator=gen), tree, prefix_len=prefix_len)


def root_path(plan: VerifyPlan, node: int) -> torch.Tensor:
    rows = []
    while node >= 0:
        rows.append(node + 1)
        node = int(plan.tree.parents[node])
    return torch.tensor([0] + rows[::-1])


@settings(max_examples=6, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    nodes=st.lists(st.integers(0, 6), min_size=3, max_size=3),
    seed=st.integers(0, 1000),
)
def test_static_forwards_agree_with_per_request(lengths, nodes, seed):
    gen = torch.Generator().manual_seed(seed)
    static, ref = pair(slots=4)
    slots = torch.randperm(4, generator=gen)[: len(lengths)].tolist()
    rows = [RequestRows(s, torch.randint(0, VOCAB, (1, n), generator=gen)) for s, n in zip(slots, lengths)]
    taps = (1, HYBRID.config.num_layers)
    for j, (got, want) in enumerate(zip(static.forward(rows, hidden_layers=taps), ref.forward(rows, hidden_layers=taps))):
        assert_close(got.logits, want.logits, f"prefill of request {j}")
        for tap, a, b in zip(taps, got.hidden, want.hidden):
            assert_close(a, b, f"tap {tap} of request {j}")
    for s, n in zip(slots, lengths):
        static.commit(s, n)
        ref.commit(s, n)
    for round_nodes in (nodes, nodes[::-1]):
        order = torch.randperm(len(slots), generator=gen).tolist()[: int(torch.randint(1, len(slots) + 1, (), generator=gen))]
        plans = {j: random_plan(gen, round_nodes[j % 3], static.length(slots[j])) for j in order}
        rows = [RequestRows.from_plan(slots[j], plans[j]) for j in order]
        for j, got, want in zip(order, static.forward(rows), ref.forward(rows)):
            assert_close(got.logits, want.logits, f"request {j} (slot {slots[j]})")
        for j in order:
            path = root_path(plans[j], int(torch.randint(-1, plans[j].tree.num_nodes, (), generator=gen)))
            static.commit(slots[j], path)
            ref.commit(slots[j], path)
        for s in slots:
            assert_close(static.recurrent_states(s), ref.recurrent_states(s), f"recurrent states of slot {s}")
            assert_close(static.conv_states(s), ref.conv_states(s), f"conv states of slot {s}")
    rows = [RequestRows(s, torch.tensor([[5]])) for s in slots]
    for s, got, want in zip(slots, static.forward(rows), ref.forward(rows)):
        assert_close(got.logits, want.logits, f"slot {s}, last chain row")
    assert static.static_keys and all(key[-1] == "exact" for key in static.static_keys)


def test_buckets_and_the_eager_fallback_for_a_long_prefill():
    static, ref = pair(slots=3)
    gen = torch.Generator().manual_seed(1)
    rows = [RequestRows(s, torch.randint(0, VOCAB, (1, n), generator=gen)) for s, n in ((0, 3), (1, 70), (2, 5))]
    for j, (got, want) in enumerate(zip(static.forward(rows), ref.forward(rows))):
        assert_close(got.logits, want.logits, f"request {j}")
    assert static.static_keys == []  # 70 rows: past the 64-row trees of the batched GDN call
    for req in rows:
        static.commit(req.slot, req.tokens.shape[1])
        ref.commit(req.slot, req.tokens.shape[1])
    rows = [RequestRows(2, torch.tensor([[1, 2, 3]])), RequestRows(0, torch.tensor([[4]]))]
    for j, (got, want) in enumerate(zip(static.forward(rows), ref.forward(rows))):
        assert_close(got.logits, want.logits, f"request {j} after the prefill")
    # 4 rows of 2 requests, at most 3 a request, longest attended 5 + 3 = 8 (slot 2) -> (4, 2, 4, 8)
    assert static.static_keys == [(4, 2, 4, 8, (), "exact")]
    for target in (static, ref):
        for slot in (2, 0):
            target.discard(slot)
    q_rows = [RequestRows(1, torch.tensor([[7]]))]
    assert_close(static.forward(q_rows, view="q")[0].logits, ref.forward(q_rows, view="q")[0].logits, "q view")
    assert static.static_keys[-1] == (1, 1, 1, 72, (), "q")


def test_bucketed_commits_with_padding_requests_and_moved_kv_rows():
    static, ref = pair(slots=4)
    gen = torch.Generator().manual_seed(2)
    rows = [RequestRows(s, torch.randint(0, VOCAB, (1, 4 + s), generator=gen)) for s in range(3)]
    for target in (static, ref):
        target.forward(rows)
        for s in range(3):
            target.commit(s, 4 + s)
    tree = Tree(tokens=[5, 6, 7, 8], parents=[-1, -1, 0, 1])  # root -> 5 -> 7, root -> 6 -> 8
    plans = [VerifyPlan.for_tree(torch.tensor([s + 1]), tree, prefix_len=static.length(s)) for s in range(3)]
    rows = [RequestRows.from_plan(s, plan) for s, plan in enumerate(plans)]
    for target in (static, ref):
        target.forward(rows)
        for s, path in enumerate((torch.tensor([0, 2, 4]), torch.tensor([0, 1, 3]), torch.tensor([0, 2]))):
            target.commit(s, path)  # paths through the second root child move K/V rows
    static.recurrent_states(0)  # writes the commits: 3 requests in a bucket of 4, paths of up to 3 rows in 4
    assert [key for key in static._graphs._buffers if key[0] == "commit"][-1][2:] == (4, 4)
    for s in range(3):
        assert_close(static.recurrent_states(s), ref.recurrent_states(s), f"recurrent states of slot {s}")
        assert_close(static.conv_states(s), ref.conv_states(s), f"conv states of slot {s}")
    rows = [RequestRows(s, torch.tensor([[9]])) for s in range(3)]
    for s, got, want in zip(range(3), static.forward(rows), ref.forward(rows)):
        assert_close(got.logits, want.logits, f"slot {s} after its tree commit")


def test_padding_rows_in_a_request_slot_are_caught(monkeypatch):
    static, ref = pair(slots=2)
    rows = [RequestRows(0, torch.tensor([[1, 2, 3, 4, 5]])), RequestRows(1, torch.tensor([[6, 7]]))]
    for target in (static, ref):
        target.forward(rows)
        target.commit(0, 5)
        target.commit(1, 2)
    monkeypatch.setattr(ragged_hybrid_static, "scratch_slot", lambda ragged: 0)  # padding rows write slot 0's cache
    rows = [RequestRows(1, torch.tensor([[8, 9, 1]]))]  # 3 rows in a 4-row bucket: one padding row
    static.forward(rows)
    ref.forward(rows)
    for target in (static, ref):
        target.commit(1, 3)
    rows = [RequestRows(0, torch.tensor([[2]]))]
    worst = (static.forward(rows)[0].logits - ref.forward(rows)[0].logits).abs().max().item()
    assert worst > 1e-3


def test_a_rows_overwritten_by_a_later_graph_replay_refuse_to_commit(monkeypatch):
    static, _ = pair(slots=2)
    monkeypatch.setattr(RaggedHybridTarget, "uses_cuda_graphs", property(lambda self: True))
    static.forward([RequestRows(0, torch.tensor([[1, 2]])), RequestRows(1, torch.tensor([[3]]))])
    static.commit(0, 2)
    static.forward([RequestRows(0, torch.tensor([[4]]))])
    with pytest.raises(RuntimeError, match="commit: slot 1's last forward was a CUDA-graph replay"):
        static.commit(1, 1)
    static.commit(0, 1)  # the latest replay's rows are still there


def test_enabling_checks_its_arguments():
    per_request = RaggedHybridTarget(HYBRID, slots=2)
    with pytest.raises(ValueError, match="layout: static forwards and CUDA graphs need layout 'packed'"):
        per_request.enable_static_path()
    packed = RaggedHybridTarget(HYBRID, slots=2, layout="packed")
    with pytest.raises(ValueError, match="enable_cuda_graphs: expected a CUDA target, got device cpu"):
        packed.enable_cuda_graphs()
    with pytest.raises(ValueError, match=r"buckets: expected positive int row counts, got \(0, 4\)"):
        packed.enable_static_path((0, 4))
    with pytest.raises(ValueError, match="span_step: expected an int >= 1, got 0"):
        packed.enable_static_path(span_step=0)
    packed.enable_static_path((1, 8))
    assert packed.row_buckets == (1, 8) and not packed.uses_cuda_graphs
    packed.disable_static_path()
    assert packed.row_buckets == () and packed.static_keys == []


def test_bodies_run_twice_as_a_capture_warms_up_write_the_same(monkeypatch):
    # a graph capture runs each body on a side stream before capturing it: a commit that moved K/V rows within
    # the cache would move them twice
    real = StaticGraphs.run
    monkeypatch.setattr(StaticGraphs, "run", lambda self, key, body: (body(), real(self, key, body))[1])
    static, ref = pair(slots=2)
    tree = Tree(tokens=[5, 6, 7, 8, 9], parents=[-1, -1, 1, 2, 0])  # root -> 6 -> 7 -> 8: rows 2, 3, 4 move down
    for target in (static, ref):
        target.forward([RequestRows(0, torch.arange(1, 8)[None]), RequestRows(1, torch.tensor([[3]]))])
        target.commit(0, 7)
        target.commit(1, 1)
    plan = VerifyPlan.for_tree(torch.tensor([2]), tree, prefix_len=7)
    for target in (static, ref):
        target.forward([RequestRows.from_plan(0, plan)])
        target.commit(0, torch.tensor([0, 2, 3, 4]))
    rows = [RequestRows(0, torch.tensor([[4]]))]
    assert_close(static.forward(rows)[0].logits, ref.forward(rows)[0].logits, "after a tree commit run twice")


def test_a_bucketed_commit_near_the_end_of_a_slot_stays_inside_it():
    static, ref = pair(slots=2)
    gen = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, VOCAB, (1, 40), generator=gen)
    for target in (static, ref):
        for chunk in (prompt, prompt, torch.randint(0, VOCAB, (1, 10), generator=torch.Generator().manual_seed(4))):
            target.forward([RequestRows(0, chunk)])
            target.commit(0, chunk.shape[1])
    assert static.length(0) == 90 and static.max_seq_len == 96
    rows = [RequestRows(0, torch.tensor([[1, 2, 3, 4, 5]]))]  # a path of 5 in a bucket of 8: padding past position 96
    for target in (static, ref):
        target.forward(rows)
        target.commit(0, 5)
    assert_close(static.recurrent_states(0), ref.recurrent_states(0), "recurrent states after the last commit")
