"""RaggedHybridTarget: several requests' rows over one hybrid target, each bitwise equal to the batch-1 HybridTarget.

* every request's logits (and hidden taps) are ``torch.equal`` to the batch-1 forward of the same rows, for
  prefills, chain and tree rows, any companions and any order (hypothesis), across commits of tree paths
  (the GDN states follow the accepted path exactly as on the batch-1 target);
* commits, resets and truncations touch only their slot; the hybrid target's own cache is left as it was;
* bad rows raise before any work and leave every slot as it was; layouts other than ``"per_request"`` are refused;
* the Qwen3-Next layout (sparse MoE MLPs) is batch-invariant too;
* a slot is a batch-1 Target: ``generate`` on it equals ``generate`` on the hybrid target.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specdec as sd
from specdec.contracts import Tree, VerifyPlan, check_target
from specdec.drafters import NGramDrafter
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


def test_bad_rows_raise_before_any_work():
    ragged = RaggedHybridTarget(HYBRID, slots=2, max_seq_len=8)
    ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))])
    ragged.commit(0, 3)
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
    with pytest.raises(ValueError, match=r"layout: a hybrid target runs only \('per_request',\).*got 'packed'"):
        RaggedHybridTarget(HYBRID, slots=1, layout="packed")


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
