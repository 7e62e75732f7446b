"""RaggedDenseTarget: several requests' rows in one forward, each bitwise equal to the batch-1 DenseTarget.

* layout ``"per_request"``: every request's logits (and hidden taps) are ``torch.equal`` to the batch-1
  forward of the same rows, for prefills, chain and tree rows, any companions and any order
  (hypothesis), across commits of tree paths;
* layout ``"packed"``: one request alone is bitwise equal; several agree to rounding, prefills, tree rows
  over committed prefixes of different lengths and tree-path commits included (hypothesis);
* the bucketed static forward (what CUDA graphs capture; padding rows in a scratch slot, a longer attended
  span) agrees with the unpadded packed forward to rounding and is bitwise equal when the bucket is the
  forward's own shape; it leaves idle slots untouched;
* a prompt in chunks (chunked prefill) continues from the slot's committed length, beside other requests' rows,
  in every layout and on the static path: bitwise the batch-1 target's chunks (per_request), the whole prompt's
  logits to rounding;
* commits, resets and truncations touch only their slot; the weights are the dense target's own;
* bad rows raise before any work and leave every slot as it was;
* a slot is a batch-1 Target: ``generate`` on it equals ``generate`` on the dense target.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specdec as sd
from specdec.contracts import Tree, VerifyPlan, check_target
from specdec.drafters import NGramDrafter
from specdec.models.ragged import RaggedDenseTarget, RequestRows
from specdec.testing import tiny_target
from specdec.verify import TreeVerifier

VOCAB = 97
SEQ = 48
DENSE = tiny_target(seed=0, max_seq_len=SEQ)
ALONE = tiny_target(seed=0, max_seq_len=SEQ)
QWEN3 = tiny_target("qwen3", seed=2, max_seq_len=SEQ)
QWEN3_ALONE = tiny_target("qwen3", seed=2, max_seq_len=SEQ)


def random_tree(gen: torch.Generator, nodes: int) -> Tree:
    parents = [-1] + [int(torch.randint(-1, i, (), generator=gen)) for i in range(1, nodes)]
    return Tree(tokens=torch.randint(0, VOCAB, (nodes,), generator=gen).tolist(), parents=parents[:nodes])


def replay(alone, history):
    """``alone`` after the same forwards and commits as a slot: K/V rows depend on how they were computed
    (a row's K/V from a 9-row prefill is not bitwise the one from a 1-row forward), so the reference
    replays the slot's history."""
    alone.reset()
    for rows, accepted in history:
        alone(rows.tokens, rows.positions, rows.mask)
        alone.commit(accepted)
    return alone


@settings(max_examples=12)
@given(
    lengths=st.lists(st.integers(1, 10), min_size=1, max_size=4),
    nodes=st.lists(st.integers(0, 6), min_size=4, max_size=4),
    order_seed=st.integers(0, 1000),
    qwen=st.booleans(),
)
def test_per_request_logits_equal_the_batch1_forward(lengths, nodes, order_seed, qwen):
    dense, alone = (QWEN3, QWEN3_ALONE) if qwen else (DENSE, ALONE)
    gen = torch.Generator().manual_seed(order_seed)
    ragged = RaggedDenseTarget(dense, slots=5)
    slots = torch.randperm(5, generator=gen)[: len(lengths)].tolist()
    prompts = [torch.randint(0, VOCAB, (n,), generator=gen) for n in lengths]
    taps = (0, 1, dense.config.num_layers)
    outs = ragged.forward([RequestRows(s, p[None]) for s, p in zip(slots, prompts)], hidden_layers=taps)
    histories = []
    for s, p, out in zip(slots, prompts, outs):
        ref = replay(alone, [])(p[None], hidden_layers=taps)
        assert torch.equal(out.logits, ref.logits)
        assert all(torch.equal(a, b) for a, b in zip(out.hidden, ref.hidden))
        ragged.commit(s, p.numel())
        histories.append([(RequestRows(s, p[None]), p.numel())])
    for round_nodes in (nodes, nodes[::-1]):
        order = torch.randperm(len(slots), generator=gen).tolist()
        plans = {}
        for j in order:
            tree = random_tree(gen, round_nodes[j % 4])
            root = torch.randint(0, VOCAB, (1,), generator=gen)
            plans[j] = VerifyPlan.for_tree(root, tree, prefix_len=ragged.length(slots[j]))
        outs = ragged.forward([RequestRows.from_plan(slots[j], plans[j]) for j in order])
        for j, out in zip(order, outs):
            plan = plans[j]
            ref = replay(alone, histories[j]).run_plan(plan)
            assert torch.equal(out.logits, ref.logits), f"request {j} (slot {slots[j]}) differs from its batch-1 forward"
            # keep the first root path of the tree: the root row and the chain of first children
            rows = [0]
            for node in range(plan.tree.num_nodes):
                if int(plan.tree.parents[node]) + 1 == rows[-1]:
                    rows.append(node + 1)
            ragged.commit(slots[j], torch.tensor(rows))
            histories[j].append((RequestRows.from_plan(slots[j], plan), torch.tensor(rows)))
            assert ragged.length(slots[j]) == alone.length + len(rows)


def test_packed_layout_one_request_is_bitwise_and_several_agree_to_rounding():
    packed = RaggedDenseTarget(DENSE, slots=3, layout="packed")
    exact = RaggedDenseTarget(DENSE, slots=3)
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, VOCAB, (n,), generator=gen) for n in (7, 3, 11)]
    one = packed.forward([RequestRows(1, prompts[0][None])])[0]
    assert torch.equal(one.logits, replay(ALONE, [])(prompts[0][None]).logits)
    packed.reset(1)
    many = packed.forward([RequestRows(i, p[None]) for i, p in enumerate(prompts)])
    ref = exact.forward([RequestRows(i, p[None]) for i, p in enumerate(prompts)])
    for a, b in zip(many, ref):
        torch.testing.assert_close(a.logits, b.logits, rtol=1e-5, atol=1e-5)


@settings(max_examples=8)
@given(
    lengths=st.lists(st.integers(1, 10), min_size=1, max_size=4),
    nodes=st.lists(st.integers(0, 6), min_size=4, max_size=4),
    seed=st.integers(0, 1000),
    qwen=st.booleans(),
)
def test_packed_layout_follows_per_request_through_trees_and_commits(lengths, nodes, seed, qwen):
    """The batched attention of ``"packed"``: every request attends its own prefix under its own tree mask."""
    dense = QWEN3 if qwen else DENSE
    gen = torch.Generator().manual_seed(seed)
    packed = RaggedDenseTarget(dense, slots=5, layout="packed")
    exact = RaggedDenseTarget(dense, slots=5)
    slots = torch.randperm(5, generator=gen)[: len(lengths)].tolist()
    prompts = [RequestRows(s, torch.randint(0, VOCAB, (1, n), generator=gen)) for s, n in zip(slots, lengths)]
    for out, ref in zip(packed.forward(prompts), exact.forward(prompts)):
        torch.testing.assert_close(out.logits, ref.logits, rtol=1e-5, atol=1e-5)
    for rows in prompts:
        packed.commit(rows.slot, rows.tokens.shape[1])
        exact.commit(rows.slot, rows.tokens.shape[1])
    for round_nodes in (nodes, nodes[::-1]):
        order = torch.randperm(len(slots), generator=gen).tolist()
        requests = []
        for j in order:
            tree = random_tree(gen, round_nodes[j % 4])
            root = torch.randint(0, VOCAB, (1,), generator=gen)
            requests.append(RequestRows.from_plan(slots[j], VerifyPlan.for_tree(root, tree, prefix_len=exact.length(slots[j]))))
        for out, ref in zip(packed.forward(requests), exact.forward(requests)):
            torch.testing.assert_close(out.logits, ref.logits, rtol=1e-5, atol=1e-5)
        for rows in requests:
            keep = torch.tensor([0, 1]) if rows.tokens.shape[1] > 1 else torch.tensor([0])  # root, first node (a root child)
            packed.commit(rows.slot, keep)
            exact.commit(rows.slot, keep)


@settings(max_examples=8)
@given(
    lengths=st.lists(st.integers(1, 10), min_size=1, max_size=4),
    nodes=st.lists(st.integers(0, 6), min_size=4, max_size=4),
    seed=st.integers(0, 1000),
    qwen=st.booleans(),
)
def test_bucketed_static_forward_agrees_with_the_unpadded_packed_forward(lengths, nodes, seed, qwen):
    """Padding rows (scratch slot) and a longer attended span change no real row, no request's cache, no idle slot."""
    dense = QWEN3 if qwen else DENSE
    gen = torch.Generator().manual_seed(seed)
    static = RaggedDenseTarget(dense, slots=5, layout="packed")
    static.enable_static_path((1, 2, 4, 8, 16, 64), span_step=16)
    plain = RaggedDenseTarget(dense, slots=5, layout="packed")
    slots = torch.randperm(5, generator=gen)[: len(lengths)].tolist()
    idle = [s for s in range(5) if s not in slots]
    prompts = [RequestRows(s, torch.randint(0, VOCAB, (1, n), generator=gen)) for s, n in zip(slots, lengths)]
    taps = (0, 1, dense.config.num_layers)

    def check(requests):
        before = [k[idle].clone() for k in static.k_caches + static.v_caches]
        for out, ref in zip(static.forward(requests, hidden_layers=taps), plain.forward(requests, hidden_layers=taps)):
            assert out.logits.shape == ref.logits.shape
            torch.testing.assert_close(out.logits, ref.logits, rtol=1e-5, atol=1e-5)
            for a, b in zip(out.hidden, ref.hidden):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        assert all(torch.equal(k[idle], old) for k, old in zip(static.k_caches + static.v_caches, before))

    check(prompts)
    for rows in prompts:
        static.commit(rows.slot, rows.tokens.shape[1])
        plain.commit(rows.slot, rows.tokens.shape[1])
    for round_nodes in (nodes, nodes[::-1]):
        order = torch.randperm(len(slots), generator=gen).tolist()
        requests = []
        for j in order:
            tree = random_tree(gen, round_nodes[j % 4])
            root = torch.randint(0, VOCAB, (1,), generator=gen)
            requests.append(RequestRows.from_plan(slots[j], VerifyPlan.for_tree(root, tree, prefix_len=plain.length(slots[j]))))
        check(requests)
        for rows in requests:
            keep = torch.tensor([0, 1]) if rows.tokens.shape[1] > 1 else torch.tensor([0])
            static.commit(rows.slot, keep)
            plain.commit(rows.slot, keep)
        for s in slots:
            used = static.length(s)
            for a, b in zip(static.k_caches + static.v_caches, plain.k_caches + plain.v_caches):
                torch.testing.assert_close(a[s, :, :used], b[s, :, :used], rtol=1e-5, atol=1e-5)
    assert static.static_keys and all(key[0] in (1, 2, 4, 8, 16, 64) and key[2] % 16 == 0 for key in static.static_keys)


def test_static_forward_is_bitwise_the_unpadded_one_when_the_bucket_is_its_own_shape():
    gen = torch.Generator().manual_seed(3)
    prompts = [RequestRows(s, torch.randint(0, VOCAB, (1, n), generator=gen)) for s, n in ((2, 5), (0, 3))]
    static = RaggedDenseTarget(DENSE, slots=3, layout="packed")
    static.enable_static_path((5, 8), span_step=5)  # 8 rows, at most 5 per request, attended span 5
    plain = RaggedDenseTarget(DENSE, slots=3, layout="packed")
    for out, ref in zip(static.forward(prompts, hidden_layers=(1,)), plain.forward(prompts, hidden_layers=(1,))):
        assert torch.equal(out.logits, ref.logits) and torch.equal(out.hidden[0], ref.hidden[0])
    assert static.static_keys == [(8, 5, 5, 0, (1,))]  # (Rb, Tb, Lb, Tl: no request attends apart, hidden)
    assert all(torch.equal(a[:3], b[:3]) for a, b in zip(static.k_caches, plain.k_caches))
    assert static.row_buckets == (5, 8)
    static.disable_static_path()
    assert static.static_keys == [] and not static.uses_cuda_graphs and static.row_buckets == ()


CHUNKS = ((0, 7), (7, 20), (20, 29), (29, 30))


@pytest.mark.parametrize("layout", ["per_request", "packed", "static"])
def test_a_prompt_in_chunks_continues_from_the_slots_committed_length(layout):
    """A slot holding a prompt's earlier chunks takes the next one at positions ``length + i`` (chunked prefill),
    beside another request's verify rows: the chunks' logits are the whole prompt's to rounding (per_request:
    bitwise the batch-1 target's over the same chunks), and the slot then continues as after one prefill."""
    gen = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, VOCAB, (1, 30), generator=gen)
    ragged = RaggedDenseTarget(DENSE, slots=2, layout="per_request" if layout == "per_request" else "packed")
    if layout == "static":
        ragged.enable_static_path((1, 4, 16))  # every forward below fits the 16-row bucket
    ragged.forward([RequestRows(0, torch.tensor([[3, 1, 4, 1, 5]]))])
    ragged.commit(0, 5)
    chunked, alone = [], replay(ALONE, [])
    for a, b in CHUNKS:
        _, out = ragged.forward([RequestRows(0, torch.tensor([[9, 2]])), RequestRows(1, prompt[:, a:b])])
        ragged.discard(0)
        ragged.commit(1, b - a)
        chunked.append(out.logits)
        if layout == "per_request":
            assert torch.equal(out.logits, alone(prompt[:, a:b]).logits)
            alone.commit(b - a)
    whole = replay(ALONE, [])(prompt).logits
    assert ragged.length(1) == 30
    torch.testing.assert_close(torch.cat(chunked, dim=1), whole, rtol=0, atol=1e-5)
    after = ragged.forward([RequestRows(1, torch.tensor([[8, 6]]))])[0].logits
    alone = replay(ALONE, [(RequestRows(1, prompt), 30)])
    torch.testing.assert_close(after, alone(torch.tensor([[8, 6]])).logits, rtol=0, atol=1e-5)
    if layout == "static":
        assert max(key[0] for key in ragged.static_keys) == 16


def test_static_path_errors():
    with pytest.raises(ValueError, match="layout: static forwards and CUDA graphs need layout 'packed'"):
        RaggedDenseTarget(DENSE, slots=2).enable_static_path()
    packed = RaggedDenseTarget(DENSE, slots=2, layout="packed")
    with pytest.raises(ValueError, match="buckets: expected positive int row counts"):
        packed.enable_static_path((0, 4))
    with pytest.raises(ValueError, match="span_step: expected an int >= 1, got 0"):
        packed.enable_static_path((4,), span_step=0)
    with pytest.raises(ValueError, match="enable_cuda_graphs: expected a CUDA target, got device cpu"):
        packed.enable_cuda_graphs()


def test_commit_reset_and_truncate_touch_only_their_slot():
    ragged = RaggedDenseTarget(DENSE, slots=3)
    ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3, 4]])), RequestRows(2, torch.tensor([[5, 6]]))])
    ragged.commit(0, 4)
    ragged.commit(2, 2)
    before = [k.clone() for k in ragged.k_caches]
    fork = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)  # row 0, then two children of it
    ragged.forward([RequestRows(0, torch.tensor([[7, 8, 9]]), positions=torch.tensor([[4, 5, 5]]), mask=fork)])
    ragged.commit(0, torch.tensor([0, 2]))
    assert ragged.lengths == [6, 0, 2]
    for k, old in zip(ragged.k_caches, before):
        assert torch.equal(k[2], old[2]) and torch.equal(k[0, :, :4], old[0, :, :4])
    ragged.truncate(0, 1)
    ragged.reset(2)
    assert ragged.lengths == [1, 0, 0]
    with pytest.raises(ValueError, match="length: expected 0 <= length <= 1"):
        ragged.truncate(0, 2)
    with pytest.raises(ValueError, match=r"accepted: expected 0 <= n <= 0"):
        ragged.commit(1, 1)


def test_commit_refuses_rows_that_saw_other_rows_than_the_path_before_them():
    """Positions alone pass [0, 1, 3] of root -> 0 -> {1, 2}, 2 -> 3 (depths 0, 1, 1, 2), and n = 3 of siblings."""
    from specdec.kernels.gdn.meta import build_tree_meta

    parents = torch.tensor([-1, 0, 0, 2])
    slot = RaggedDenseTarget(DENSE, slots=2).slot_target(0)
    slot.forward(torch.tensor([[1, 2, 3, 4]]), tree_parents=parents)
    with pytest.raises(ValueError, match=r"row 3 \(accepted\[2\]\) attended rows \[0, 2, 3\], not \[0, 1, 3\]"):
        slot.commit(torch.tensor([0, 1, 3]))
    slot.forward(torch.tensor([[1, 2, 3]]), tree_parents=parents[:3])
    with pytest.raises(ValueError, match=r"row 2 \(accepted\[2\]\) ran at position 1, not 2"):
        slot.commit(3)  # an int commit is checked too
    ragged = RaggedDenseTarget(DENSE, slots=2)
    mask = build_tree_meta(parents, validate=False).ancestors[0].bool()
    ragged.forward([RequestRows(1, torch.tensor([[1, 2, 3, 4]]), positions=torch.tensor([[0, 1, 1, 2]]), mask=mask)])
    with pytest.raises(ValueError, match=r"attended rows \[0, 2, 3\], not \[0, 1, 3\]"):
        ragged.commit(1, torch.tensor([0, 1, 3]))
    ragged.commit(1, torch.tensor([0, 2, 3]))
    assert ragged.lengths == [0, 3]


def test_commit_refuses_rows_that_ran_at_other_positions_than_their_slots():
    ragged = RaggedDenseTarget(DENSE, slots=2)
    ragged.forward([RequestRows(1, torch.tensor([[1, 2, 3]]))])  # a chain: row 2 ran at position 2
    with pytest.raises(
        ValueError,
        match=r"accepted: expected the rows of one root-to-node path; row 2 \(accepted\[1\]\) ran at position 2, not 1",
    ):
        ragged.commit(1, torch.tensor([0, 2]))
    assert ragged.lengths == [0, 0]
    ragged.slot_target(1).commit(torch.tensor([0, 1]))
    assert ragged.lengths == [0, 2]


def test_tree_commit_keeps_the_accepted_rows_kv():
    ragged = RaggedDenseTarget(DENSE, slots=2)
    ragged.forward([RequestRows(1, torch.tensor([[1, 2]]))])
    ragged.commit(1, 2)
    plan = VerifyPlan.for_tree(torch.tensor([3]), Tree(tokens=[7, 8, 9], parents=[-1, -1, 1]), prefix_len=2)
    ragged.forward([RequestRows.from_plan(1, plan)])
    ragged.commit(1, torch.tensor([0, 2, 3]))
    after = ragged.forward([RequestRows(1, torch.tensor([[4]]))])[0].logits
    history = [(RequestRows(0, torch.tensor([[1, 2]])), 2), (RequestRows.from_plan(0, plan), torch.tensor([0, 2, 3]))]
    ref = replay(ALONE, history)(torch.tensor([[4]])).logits
    assert torch.equal(after, ref)


def test_weights_are_shared_not_copied():
    ragged = RaggedDenseTarget(DENSE, slots=2)
    assert ragged.target is DENSE
    assert ragged.target.layers[0].attn.wqkv.weight.data_ptr() == DENSE.layers[0].attn.wqkv.weight.data_ptr()


def test_bad_rows_raise_before_any_work():
    ragged = RaggedDenseTarget(DENSE, slots=2, max_seq_len=8)
    ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))])
    ragged.commit(0, 3)
    caches = [k.clone() for k in ragged.k_caches]
    good = RequestRows(1, torch.tensor([[4, 5]]))
    cases = [
        ([good, RequestRows(1, torch.tensor([[6]]))], ValueError, "slot 1 appears twice"),
        ([good, RequestRows(2, torch.tensor([[6]]))], ValueError, r"requests\[1\].slot: expected an int in \[0, 2\)"),
        ([good, RequestRows(0, torch.arange(6)[None])], ValueError, "6 new rows do not fit slot 0: length 3"),
        ([good, RequestRows(0, torch.tensor([[1.0]]))], TypeError, r"requests\[1\].tokens: expected an int64 tensor"),
        ([good, RequestRows(0, torch.tensor([[1, 200]]))], ValueError, r"requests\[1\].tokens: expected token ids in \[0, 97\)"),
        ([good, RequestRows(0, torch.tensor([[1, 2]]), mask=torch.ones(3, 3, dtype=torch.bool))], ValueError, "mask"),
        ([], ValueError, "requests: expected a non-empty list"),
    ]
    for rows, error, message in cases:
        with pytest.raises(error, match=message):
            ragged.forward(rows)
        assert ragged.lengths == [3, 0] and ragged._last_rows == [0, 0]
        assert all(torch.equal(a, b) for a, b in zip(ragged.k_caches, caches))


def test_constructor_errors():
    with pytest.raises(TypeError, match="target: expected a specdec DenseTarget"):
        RaggedDenseTarget(object(), slots=2)
    with pytest.raises(ValueError, match="slots: expected an int >= 1, got 0"):
        RaggedDenseTarget(DENSE, slots=0)
    with pytest.raises(ValueError, match="layout: expected one of"):
        RaggedDenseTarget(DENSE, slots=1, layout="padded")


def test_a_slot_is_a_batch1_target_that_generates_like_the_dense_target():
    ragged = RaggedDenseTarget(DENSE, slots=3)
    ragged.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))])
    ragged.commit(0, 3)
    slot = check_target(ragged.slot_target(2))
    prompt = torch.tensor([[5, 6, 7, 5, 6]])
    kwargs = dict(max_new_tokens=10, drafter=NGramDrafter(), verifier=TreeVerifier(budget=4))
    assert torch.equal(sd.generate(slot, prompt, **kwargs).tokens, sd.generate(DENSE, prompt, **kwargs).tokens)
    assert ragged.length(0) == 3


def test_tree_parents_alone_give_the_mask_and_positions_a_tree_plan_gives():
    parents = torch.tensor([-1, 0, 0, 1])
    tokens = torch.tensor([[5, 9, 2, 7]])
    plan = VerifyPlan.for_tree(tokens[0, :1], Tree(tokens=tokens[0, 1:], parents=parents[1:] - 1), prefix_len=3)
    derived, explicit = tiny_target(seed=0), tiny_target(seed=0)
    for target in (derived, explicit):
        target.forward(torch.tensor([[1, 2, 3]]))
        target.commit(3)
    got = derived.forward(tokens, tree_parents=parents).logits
    assert torch.equal(got, explicit.forward(tokens, plan.positions, plan.mask).logits)
    derived.commit(torch.tensor([0, 2]))
    explicit.commit(torch.tensor([0, 2]))
    assert torch.equal(derived.forward(torch.tensor([[4]])).logits, explicit.forward(torch.tensor([[4]])).logits)
    ragged = RaggedDenseTarget(tiny_target(seed=0), slots=2, max_seq_len=32)
    ragged.forward([RequestRows(1, torch.tensor([[1, 2, 3]]))])
    ragged.commit(1, 3)
    assert torch.equal(ragged.slot_target(1).forward(tokens, tree_parents=parents).logits, got)
    with pytest.raises(ValueError, match="mask: expected the ancestor-or-self mask of tree_parents"):
        derived.forward(tokens, mask=torch.ones(4, 4, dtype=torch.bool).tril(), tree_parents=parents)
    with pytest.raises(ValueError, match=r"tree_parents: expected -1 <= tree_parents\[t\] < t"):
        derived.forward(tokens, tree_parents=torch.tensor([-1, 0, 2, 1]))


def test_positions_must_be_integers():
    tokens, positions = torch.tensor([[1, 2, 3]]), torch.tensor([[0.0, 1.5, 2.7]])
    with pytest.raises(TypeError, match="positions: expected an integer tensor"):
        tiny_target(seed=0).forward(tokens, positions=positions)
    with pytest.raises(TypeError, match=r"requests\[0\].positions: expected an integer tensor"):
        RaggedDenseTarget(tiny_target(seed=0), slots=2).forward([RequestRows(0, tokens, positions)])
