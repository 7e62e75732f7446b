"""RaggedHybridTarget: several requests' rows over one hybrid target, each bitwise equal to the batch-1 HybridTarget.

* every request's logits (and hidden taps) are ``torch.equal`` to the batch-1 forward of the same rows, for
  prefills, chain and tree rows, any companions and any order (hypothesis), across commits of tree paths
  (the GDN states follow the accepted path exactly as on the batch-1 target);
* a prompt in chunks (chunked prefill) continues from the slot's committed length and GDN states, in both
  layouts: bitwise the batch-1 target's chunks and states (per_request), the whole prompt's to rounding;
* commits, resets and truncations touch only their slot; the hybrid target's own cache is left as it was;
* bad rows raise before any work and leave every slot as it was (both layouts); unknown layouts are refused;
* the Qwen3-Next layout (sparse MoE MLPs) is batch-invariant too;
* a slot is a batch-1 Target: ``generate`` on it equals ``generate`` on the hybrid target;
* layout ``"packed"``: logits, taps and committed GDN states agree with ``"per_request"`` to float32 rounding over
  rounds of prefills, chains, trees and 1-row requests with different prefix lengths, random accepted paths and
  truncations (hypothesis), a prefill longer than the padded GDN call, the ``"q"`` view and the MoE layout; every
  linear layer runs once per forward over all rows and each GDN layer's kernel once for the short requests.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specdec as sd
from specdec.contracts import Tree, VerifyPlan, check_target
from specdec.drafters import NGramDrafter
from specdec.models import ragged_hybrid_packed
from specdec.models.ragged import RequestRows
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.testing import tiny_target
from specdec.verify import TreeVerifier

VOCAB = 97
SEQ = 48
HYBRID = tiny_target("qwen3_5_text", seed=0, max_seq_len=SEQ)
ALONE = tiny_target("qwen3_5_text", seed=0, max_seq_len=SEQ)


def random_tree(gen: torch.Generator, nodes: int) -> Tree:
    parents = [-1] + [int(torch.randint(-1, i, (), generator=gen)) for i in range(1, nodes)]
    return Tree(tokens=torch.randint(0, VOCAB, (nodes,), generator=gen).tolist(), parents=parents[:nodes])


def root_path(tree: Tree, node: int) -> torch.Tensor:
    """Verify-window rows from the root row 0 down to tree node ``node`` (``-1`` = the root row alone)."""
    rows = []
    while node >= 0:
        rows.append(node + 1)
        node = int(tree.parents[node])
    return torch.tensor([0] + rows[::-1])


def replay(alone, history):
    """``alone`` after the same forwards and commits as a slot (its GDN states then hold the same path)."""
    alone.reset()
    for rows, accepted in history:
        alone(rows.tokens, rows.positions, rows.mask)
        alone.commit(accepted)
    return alone


@settings(max_examples=8, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    nodes=st.lists(st.integers(0, 5), min_size=3, max_size=3),
    seed=st.integers(0, 1000),
)
def test_per_request_logits_equal_the_batch1_hybrid_forward(lengths, nodes, seed):
    gen = torch.Generator().manual_seed(seed)
    ragged = RaggedHybridTarget(HYBRID, slots=4)
    slots = torch.randperm(4, generator=gen)[: len(lengths)].tolist()
    prompts = [torch.randint(0, VOCAB, (n,), generator=gen) for n in lengths]
    taps = (0, 1, HYBRID.config.num_layers)
    outs = ragged.forward([RequestRows(s, p[None]) for s, p in zip(slots, prompts)], hidden_layers=taps)
    histories = []
    for s, p, out in zip(slots, prompts, outs):
        ref = replay(ALONE, [])(p[None], hidden_layers=taps)
        assert torch.equal(out.logits, ref.logits)
        assert all(torch.equal(a, b) for a, b in zip(out.hidden, ref.hidden))
        ragged.commit(s, p.numel())
        histories.append([(RequestRows(s, p[None]), p.numel())])
    for round_nodes in (nodes, nodes[::-1], nodes):
        order = torch.randperm(len(slots), generator=gen).tolist()
        plans = {}
        for j in order:
            tree = random_tree(gen, round_nodes[j % 3])
            root = torch.randint(0, VOCAB, (1,), generator=gen)
            plans[j] = VerifyPlan.for_tree(root, tree, prefix_len=ragged.length(slots[j]))
        outs = ragged.forward([RequestRows.from_plan(slots[j], plans[j]) for j in order])
        for j, out in zip(order, outs):
            plan = plans[j]
            ref = replay(ALONE, histories[j]).run_plan(plan)
            assert torch.equal(out.logits, ref.logits), f"request {j} (slot {slots[j]}) differs from its batch-1 forward"
            # any root-to-node path of the tree, not only the first children: the GDN state must follow it
            node = int(torch.randint(-1, plan.tree.num_nodes, (), generator=gen))
            rows = root_path(plan.tree, node)
            ragged.commit(slots[j], rows)
            histories[j].append((RequestRows.from_plan(slots[j], plan), rows))
            assert ragged.length(slots[j]) == ALONE.length + rows.numel()
    # after the last commits, one more chain row per request still matches (the committed states are the same)
    outs = ragged.forward([RequestRows(s, torch.tensor([[5]])) for s in slots])
    for j, out in enumerate(outs):
        ref = replay(ALONE, histories[j])(torch.tensor([[5]]))
        assert torch.equal(out.logits, ref.logits)
        assert torch.equal(ragged.recurrent_states(slots[j]), ALONE.recurrent_states)
        assert torch.equal(ragged.conv_states(slots[j]), ALONE.conv_states)


def test_the_hybrid_targets_own_cache_is_left_as_it_was():
    target = tiny_target("qwen3_5_text", seed=0, max_seq_len=SEQ)
    target(torch.tensor([[1, 2, 3]]))
    target.commit(3)
    states = target.recurrent_states.clone()
    ref = ALONE
    ref.reset()
    ref(torch.tensor([[1, 2, 3]]))
    ref.commit(3)
    expected = ref(torch.tensor([[9, 4]])).logits
    ragged = RaggedHybridTarget(target, slots=2)
    ragged.forward([RequestRows(0, torch.tensor([[7, 7, 7, 7]])), RequestRows(1, torch.tensor([[8]]))])
    ragged.commit(0, 4)
    ragged.reset(1)
    assert target.length == 3 and torch.equal(target.recurrent_states, states)
    assert torch.equal(target(torch.tensor([[9, 4]])).logits, expected)


@pytest.mark.parametrize("layout", ["per_request", "packed"])
def test_a_prompt_in_chunks_continues_from_the_slots_committed_states(layout):
    """A slot holding a prompt's earlier chunks takes the next one from its committed length and GDN states
    (chunked prefill), beside another request's verify rows: the chunks' logits are the whole prompt's to
    rounding (per_request: bitwise the batch-1 target's over the same chunks), and so are the states after."""
    gen = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, VOCAB, (1, 40), generator=gen)
    ragged = RaggedHybridTarget(HYBRID, slots=2, layout=layout)
    ragged.forward([RequestRows(0, torch.tensor([[3, 1, 4, 1, 5]]))])
    ragged.commit(0, 5)
    chunked, alone = [], replay(ALONE, [])
    for a, b in ((0, 7), (7, 20), (20, 39), (39, 40)):
        _, out = ragged.forward([RequestRows(0, torch.tensor([[9, 2]])), RequestRows(1, prompt[:, a:b])])
        ragged.discard(0)
        ragged.commit(1, b - a)
        chunked.append(out.logits)
        if layout == "per_request":
            assert torch.equal(out.logits, alone(prompt[:, a:b]).logits)
            alone.commit(b - a)
    if layout == "per_request":
        assert torch.equal(ragged.recurrent_states(1), alone.recurrent_states)
        assert torch.equal(ragged.conv_states(1), alone.conv_states)
    whole = replay(ALONE, [])(prompt).logits
    ALONE.commit(40)
    assert ragged.length(1) == 40
    torch.testing.assert_close(torch.cat(chunked, dim=1), whole, rtol=0, atol=1e-5)
    torch.testing.assert_close(ragged.recurrent_states(1), ALONE.recurrent_states, rtol=0, atol=1e-5)
    torch.testing.assert_close(ragged.conv_states(1), ALONE.conv_states, rtol=0, atol=1e-5)
    after = ragged.forward([RequestRows(1, torch.tensor([[8, 6]]))])[0].logits
    torch.testing.assert_close(after, ALONE(torch.tensor([[8, 6]])).logits, rtol=0, atol=1e-5)


def test_commit_reset_and_truncate_touch_only_their_slot():
    ragged = RaggedHybridTarget(HYBRID, slots=3)
    ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3, 4]])), RequestRows(2, torch.tensor([[5, 6]]))])
    ragged.commit(0, 4)
    ragged.commit(2, 2)
    before_rec, before_k = ragged.recurrent[2].clone(), [k.clone() for k in ragged.k_caches]
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    ragged.forward([RequestRows(0, torch.tensor([[7, 8, 9]]), mask=mask)])
    ragged.commit(0, torch.tensor([0, 2]))
    assert ragged.lengths == [6, 0, 2]
    assert torch.equal(ragged.recurrent[2], before_rec)
    for k, old in zip(ragged.k_caches, before_k):
        assert torch.equal(k[2], old[2]) and torch.equal(k[0, :, :4], old[0, :, :4])
    ragged.truncate(0, 4)  # the state ring still holds length 4
    ragged.reset(2)
    assert ragged.lengths == [4, 0, 0]
    # slot 0 after the truncation decodes as a batch-1 target holding the same 4 tokens
    after = ragged.forward([RequestRows(0, torch.tensor([[3]]))])[0].logits
    assert torch.equal(after, replay(ALONE, [(RequestRows(0, torch.tensor([[1, 2, 3, 4]])), 4)])(torch.tensor([[3]])).logits)
    ragged.discard(0)
    with pytest.raises(ValueError, match="length: a hybrid target can only roll back to a length whose recurrent state"):
        ragged.truncate(0, 2)
    with pytest.raises(ValueError, match=r"accepted: expected 0 <= n <= 0"):
        ragged.commit(1, 1)
    with pytest.raises(ValueError, match="accepted: expected a root-to-node path"):
        ragged.forward([RequestRows(1, torch.tensor([[7, 8, 9]]), mask=mask)])
        ragged.commit(1, torch.tensor([1, 2]))


@pytest.mark.parametrize("layout", ["per_request", "packed"])
def test_bad_rows_raise_before_any_work(layout):
    ragged = RaggedHybridTarget(HYBRID, slots=2, max_seq_len=8, layout=layout)
    ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))])
    ragged.commit(0, 3)
    ragged.recurrent_states(0)  # a packed forward's commits are written when a slot is read next
    caches = [k.clone() for k in ragged.k_caches]
    recurrent = ragged.recurrent.clone()
    good = RequestRows(1, torch.tensor([[4, 5]]))
    not_a_tree = torch.tensor([[1, 0, 0], [0, 1, 0], [1, 1, 1]], dtype=torch.bool)  # row 2 sees two roots
    cases = [
        ([good, RequestRows(1, torch.tensor([[6]]))], ValueError, "slot 1 appears twice"),
        ([good, RequestRows(2, torch.tensor([[6]]))], ValueError, r"requests\[1\].slot: expected an int in \[0, 2\)"),
        ([good, RequestRows(0, torch.arange(6)[None])], ValueError, r"requests\[1\] \(slot 0\): tokens: 6 new rows do not fit"),
        ([good, RequestRows(0, torch.tensor([[1.0]]))], TypeError, r"requests\[1\] \(slot 0\): tokens: expected an int64"),
        ([good, RequestRows(0, torch.tensor([[1, 2, 3]]), mask=not_a_tree)], ValueError, "mask: expected the ancestor-or-self"),
        ([good, RequestRows(0, torch.tensor([[1]]), positions=torch.tensor([[1, 2]]))], ValueError, "positions"),
        ([good], ValueError, r"^hidden_layers: expected indices in \[0, 2\], got 9"),
        ([], ValueError, "requests: expected a non-empty list"),
    ]
    for rows, error, message in cases:
        with pytest.raises(error, match=message):
            ragged.forward(rows, hidden_layers=(9,) if "hidden" in message else ())
        assert ragged.lengths == [3, 0]
        assert all(s["_last_rows"] == 0 and s["_stash"] is None for s in ragged._states)
        assert all(torch.equal(a, b) for a, b in zip(ragged.k_caches, caches)) and torch.equal(ragged.recurrent, recurrent)


def test_constructor_errors():
    with pytest.raises(TypeError, match="target: expected a specdec HybridTarget, got DenseTarget"):
        RaggedHybridTarget(tiny_target(seed=0), slots=2)
    with pytest.raises(ValueError, match="slots: expected an int >= 1, got 0"):
        RaggedHybridTarget(HYBRID, slots=0)
    with pytest.raises(ValueError, match="state_slots: expected an int >= 2, got 1"):
        RaggedHybridTarget(HYBRID, slots=1, state_slots=1)
    with pytest.raises(ValueError, match=r"layout: expected one of \('per_request', 'packed'\), got 'paged'"):
        RaggedHybridTarget(HYBRID, slots=1, layout="paged")


def test_a_slot_is_a_batch1_target_that_generates_like_the_hybrid_target():
    ragged = RaggedHybridTarget(HYBRID, slots=3)
    ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))])
    ragged.commit(0, 3)
    slot = check_target(ragged.slot_target(2))
    prompt = torch.tensor([[5, 6, 7, 5, 6]])
    kwargs = dict(max_new_tokens=10, drafter=NGramDrafter(), verifier=TreeVerifier(budget=4))
    assert torch.equal(sd.generate(slot, prompt, **kwargs).tokens, sd.generate(ALONE, prompt, **kwargs).tokens)
    assert ragged.length(0) == 3
    with pytest.raises(ValueError, match="view: expected one of"):
        slot.forward(torch.tensor([[1]]), view="q")


def test_qwen3_next_layout_with_moe_layers_is_batch_invariant_too():
    target, alone = (tiny_target("qwen3_next", seed=4, max_seq_len=SEQ) for _ in range(2))
    ragged = RaggedHybridTarget(target, slots=2)
    prompts = [torch.tensor([[3, 1, 4, 1, 5]]), torch.tensor([[9, 2]])]
    outs = ragged.forward([RequestRows(1, prompts[1]), RequestRows(0, prompts[0])])
    ragged.commit(1, 2)
    ragged.commit(0, 5)
    plan = VerifyPlan.for_tree(torch.tensor([6]), Tree(tokens=[7, 8, 9], parents=[-1, -1, 1]), prefix_len=5)
    tree_out = ragged.forward([RequestRows.from_plan(0, plan), RequestRows(1, torch.tensor([[2, 6]]))])[0]
    ragged.commit(0, torch.tensor([0, 2, 3]))
    last = ragged.forward([RequestRows(0, torch.tensor([[1]]))])[0]
    assert torch.equal(outs[1].logits, alone(prompts[0]).logits)
    alone.commit(5)
    assert torch.equal(tree_out.logits, alone.run_plan(plan).logits)
    alone.commit(torch.tensor([0, 2, 3]))
    assert torch.equal(last.logits, alone(torch.tensor([[1]])).logits)


def assert_close(got, want, what):
    # packed GEMMs change a row's last float32 bits; a wrong state or slot moves logits by far more than this
    torch.testing.assert_close(got, want, rtol=0.0, atol=1e-4, msg=lambda m: f"{what}: {m}")


def pair(**kwargs):
    """A packed target and the per_request reference over the same weights."""
    return RaggedHybridTarget(HYBRID, layout="packed", **kwargs), RaggedHybridTarget(HYBRID, **kwargs)


@settings(max_examples=8, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    nodes=st.lists(st.integers(0, 5), min_size=3, max_size=3),
    seed=st.integers(0, 1000),
)
def test_packed_logits_and_states_agree_with_per_request(lengths, nodes, seed):
    gen = torch.Generator().manual_seed(seed)
    packed, ref = pair(slots=4, state_slots=3)
    slots = torch.randperm(4, generator=gen)[: len(lengths)].tolist()
    prompts = [torch.randint(0, VOCAB, (n,), generator=gen) for n in lengths]
    taps = (0, 1, HYBRID.config.num_layers)
    rows = [RequestRows(s, p[None]) for s, p in zip(slots, prompts)]
    for j, (got, want) in enumerate(zip(packed.forward(rows, hidden_layers=taps), ref.forward(rows, hidden_layers=taps))):
        assert_close(got.logits, want.logits, f"prefill of request {j}")
        for tap, a, b in zip(taps, got.hidden, want.hidden):
            assert_close(a, b, f"tap {tap} of request {j}")
    committed = {s: [p.numel()] for s, p in zip(slots, prompts)}
    for s, p in zip(slots, prompts):
        packed.commit(s, p.numel())
        ref.commit(s, p.numel())
    for round_nodes in (nodes, nodes[::-1], nodes):
        # a random non-empty subset of the requests in a random order: the others sit idle this round
        order = torch.randperm(len(slots), generator=gen).tolist()[: int(torch.randint(1, len(slots) + 1, (), generator=gen))]
        plans = {}
        for j in order:
            tree = random_tree(gen, round_nodes[j % 3])  # 0 nodes: the root row alone
            root = torch.randint(0, VOCAB, (1,), generator=gen)
            plans[j] = VerifyPlan.for_tree(root, tree, prefix_len=packed.length(slots[j]))
        rows = [RequestRows.from_plan(slots[j], plans[j]) for j in order]
        for j, got, want in zip(order, packed.forward(rows), ref.forward(rows)):
            assert_close(got.logits, want.logits, f"request {j} (slot {slots[j]}, prefix {packed.length(slots[j])})")
        for j in order:
            path = root_path(plans[j].tree, int(torch.randint(-1, plans[j].tree.num_nodes, (), generator=gen)))
            packed.commit(slots[j], path)
            ref.commit(slots[j], path)
            committed[slots[j]].append(packed.length(slots[j]))
        assert packed.lengths == ref.lengths
        for s in slots:
            assert_close(packed.recurrent_states(s), ref.recurrent_states(s), f"recurrent states of slot {s}")
            assert_close(packed.conv_states(s), ref.conv_states(s), f"conv states of slot {s}")
    # back to the length before each slot's last commit (still in its 3-entry ring), then one chain row each
    for s in slots:
        back = committed[s][-2] if len(committed[s]) > 1 else 0
        packed.truncate(s, back)
        ref.truncate(s, back)
    rows = [RequestRows(s, torch.tensor([[5]])) for s in slots]
    for s, got, want in zip(slots, packed.forward(rows), ref.forward(rows)):
        assert_close(got.logits, want.logits, f"slot {s} after its truncation")


def test_packed_prefill_longer_than_the_padded_gdn_call_runs_its_own_call(monkeypatch):
    calls = []
    gdn_tree = ragged_hybrid_packed.gdn_tree

    def counted(q, *args, **kwargs):
        calls.append(tuple(q.shape[:2]))
        return gdn_tree(q, *args, **kwargs)

    monkeypatch.setattr(ragged_hybrid_packed, "gdn_tree", counted)
    packed, ref = pair(slots=3, max_seq_len=96)
    gen = torch.Generator().manual_seed(0)
    rows = [RequestRows(s, torch.randint(0, VOCAB, (1, n), generator=gen)) for s, n in ((0, 3), (1, 70), (2, 1))]
    for j, (got, want) in enumerate(zip(packed.forward(rows), ref.forward(rows))):
        assert_close(got.logits, want.logits, f"request {j}")
    # per GDN layer: the two short requests padded to 3 rows in one call, the 70-row prefill alone
    assert calls == [(2, 3), (1, 70)] * len(HYBRID.config.gdn_layers)
    for req in rows:
        packed.commit(req.slot, req.tokens.shape[1])
        ref.commit(req.slot, req.tokens.shape[1])
    rows = [RequestRows(s, torch.tensor([[s + 1, 4]])) for s in (2, 1, 0)]
    for j, (got, want) in enumerate(zip(packed.forward(rows), ref.forward(rows))):
        assert_close(got.logits, want.logits, f"request {j} after the commits")


def test_packed_runs_every_linear_layer_once_over_all_rows():
    rows_seen = defaultdict(list)
    linears = [(name, m) for name, m in HYBRID.named_modules() if isinstance(m, torch.nn.Linear)]
    hooks = [
        m.register_forward_hook(lambda mod, args, out, name=name: rows_seen[name].append(args[0].shape[-2]))
        for name, m in linears
    ]
    packed, ref = pair(slots=3)
    rows = [
        RequestRows(2, torch.tensor([[1, 2, 3]])),
        RequestRows(0, torch.tensor([[4]])),
        RequestRows(1, torch.tensor([[5, 6]])),
    ]
    try:
        packed.forward(rows)
        once = dict(rows_seen)
        rows_seen.clear()
        ref.forward(rows)
    finally:
        for hook in hooks:
            hook.remove()
    assert once == {name: [6] for name, _ in linears}
    assert dict(rows_seen) == {name: [3, 1, 2] for name, _ in linears}


def test_packed_q_view_agrees_and_its_rows_are_never_committed():
    packed, ref = pair(slots=2)
    for target in (packed, ref):
        target.forward([RequestRows(1, torch.tensor([[1, 2, 3, 4]]))])
        target.commit(1, 4)
    rows = [RequestRows(0, torch.tensor([[5, 6]])), RequestRows(1, torch.tensor([[7]]))]
    for j, (got, want) in enumerate(zip(packed.forward(rows, view="q"), ref.forward(rows, view="q"))):
        assert_close(got.logits, want.logits, f"q view of request {j}")
    with pytest.raises(RuntimeError, match="commit: the last forward ran the 'q' weight view"):
        packed.commit(1, 1)
    packed.discard(1)
    assert packed.lengths == [0, 4]


def test_packed_qwen3_next_layout_with_moe_layers_agrees_with_per_request():
    target = tiny_target("qwen3_next", seed=4, max_seq_len=SEQ)
    packed, ref = RaggedHybridTarget(target, slots=2, layout="packed"), RaggedHybridTarget(target, slots=2)
    plan = VerifyPlan.for_tree(torch.tensor([6]), Tree(tokens=[7, 8, 9], parents=[-1, -1, 1]), prefix_len=5)
    rounds = [
        ([RequestRows(1, torch.tensor([[9, 2]])), RequestRows(0, torch.tensor([[3, 1, 4, 1, 5]]))], {1: 2, 0: 5}),
        ([RequestRows.from_plan(0, plan), RequestRows(1, torch.tensor([[2, 6]]))], {0: torch.tensor([0, 2, 3]), 1: 1}),
        ([RequestRows(0, torch.tensor([[1]])), RequestRows(1, torch.tensor([[8]]))], {}),
    ]
    for rows, accepted in rounds:
        for j, (got, want) in enumerate(zip(packed.forward(rows), ref.forward(rows))):
            assert_close(got.logits, want.logits, f"request {j}")
        for slot, n in accepted.items():
            packed.commit(slot, n)
            ref.commit(slot, n)


@pytest.mark.parametrize("gdn_method", ["naive", "wy"])
def test_packed_gdn_call_over_padded_trees_agrees_for_each_gdn_method(gdn_method):
    target = tiny_target("qwen3_5_text", seed=0, max_seq_len=SEQ)
    target.gdn_method = gdn_method  # the sequential reference, or the dense WY solve over the padded [B, Tb] trees
    packed, ref = RaggedHybridTarget(target, slots=3, layout="packed"), RaggedHybridTarget(target, slots=3)
    plan = VerifyPlan.for_tree(torch.tensor([6]), Tree(tokens=[7, 8, 9, 4], parents=[-1, -1, 1, 0]), prefix_len=4)
    rounds = [
        ([RequestRows(2, torch.tensor([[9]])), RequestRows(0, torch.tensor([[3, 1, 4, 1]]))], {2: 1, 0: 4}),
        (
            [RequestRows(1, torch.tensor([[5, 2]])), RequestRows.from_plan(0, plan), RequestRows(2, torch.tensor([[2]]))],
            {0: torch.tensor([0, 2, 3]), 2: 1},
        ),
        ([RequestRows(0, torch.tensor([[1]])), RequestRows(2, torch.tensor([[8, 7, 6]]))], {}),
    ]
    for rows, accepted in rounds:
        for j, (got, want) in enumerate(zip(packed.forward(rows), ref.forward(rows))):
            assert_close(got.logits, want.logits, f"request {j}")
        for slot, n in accepted.items():
            packed.commit(slot, n)
            ref.commit(slot, n)
            assert_close(packed.recurrent_states(slot), ref.recurrent_states(slot), f"recurrent states of slot {slot}")


@pytest.mark.parametrize("layout", ["per_request", "packed"])
@pytest.mark.parametrize("refused", ["forward", "truncate", "slot_forward"])
def test_a_refused_call_keeps_a_slots_uncommitted_rows(layout, refused):
    ragged = RaggedHybridTarget(HYBRID, slots=2, max_seq_len=16, layout=layout)
    reference = RaggedHybridTarget(HYBRID, slots=2, max_seq_len=16, layout=layout)
    for target in (ragged, reference):
        target.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))])
    with pytest.raises((TypeError, ValueError)):
        if refused == "forward":
            ragged.forward([RequestRows(0, torch.tensor([[4]])), RequestRows(1, torch.tensor([[999]]))])
        elif refused == "truncate":
            ragged.truncate(0, 5)
        else:
            ragged.slot_target(0).forward(torch.tensor([[1.0]]))
    ragged.commit(0, 3)
    reference.commit(0, 3)
    got = ragged.forward([RequestRows(0, torch.tensor([[7]]))])[0].logits
    assert torch.equal(got, reference.forward([RequestRows(0, torch.tensor([[7]]))])[0].logits)


def test_a_commit_without_the_forwards_recurrent_inputs_names_the_cause():
    target = tiny_target("qwen3_5_text", seed=0)
    target.forward(torch.tensor([[1, 2]]))
    target._stash = None
    with pytest.raises(RuntimeError, match="commit: the last forward's recurrent inputs are gone"):
        target.commit(2)
