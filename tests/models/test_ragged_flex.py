"""RaggedDenseTarget(layout="packed", attention="flex"): the packed rows through flex_attention over the slots' long KV.

* flex logits and hidden taps agree with the SDPA-over-slots packed forward to float32 rounding: prefills
  of different lengths, tree rows from random trees over committed prefixes of different lengths, 1-row
  and many-row requests, grouped-query heads (both tiny targets), tree-path commits between rounds
  (hypothesis); also under the bucketed static path (padding rows in the scratch slot);
* the mask keeps every row to its own slot: K of every position a row may not see poisoned with NaN
  (other slots, stale rows past the request's new rows) leaves the logits unchanged;
* greedy decoding through ``sd.Engine`` on a flex target: each request's tokens in company are
  ``torch.equal`` to its tokens alone on the same target, and to autoregressive decoding, for chain and
  tree verification;
* the block mask visits only the blocks of a row's own slot; the long KV is a view of the cache;
* bad input: an unknown ``attention``, flex without the packed layout, CUDA graphs with flex.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specdec as sd
import specdec.models.ragged as ragged_module
from specdec.contracts import Tree, VerifyPlan
from specdec.drafters import NGramDrafter
from specdec.engine import Engine
from specdec.models.packed_attention import long_kv_view, packed_block_mask, slot_major_cache
from specdec.models.ragged import RaggedDenseTarget, RequestRows
from specdec.testing import tiny_target
from specdec.verify import ChainVerifier, TreeVerifier

VOCAB = 97
SEQ = 48
DENSE = tiny_target(seed=0, max_seq_len=SEQ)  # 4 query heads over 2 KV heads
QWEN3 = tiny_target("qwen3", seed=2, max_seq_len=SEQ)
TOL = dict(rtol=1e-5, atol=1e-5)


def random_tree(gen: torch.Generator, nodes: int) -> Tree:
    parents = [-1] + [int(torch.randint(-1, i, (), generator=gen)) for i in range(1, nodes)]
    return Tree(tokens=torch.randint(0, VOCAB, (nodes,), generator=gen).tolist(), parents=parents[:nodes])


def tree_rounds(gen, slots, lengths, nodes, flex, sdpa, check):
    """Prefill ``slots`` with prompts of ``lengths``, then two rounds of random trees with tree-path commits."""
    prompts = [RequestRows(s, torch.randint(0, VOCAB, (1, n), generator=gen)) for s, n in zip(slots, lengths)]
    check(prompts)
    for rows in prompts:
        flex.commit(rows.slot, rows.tokens.shape[1])
        sdpa.commit(rows.slot, rows.tokens.shape[1])
    for round_nodes in (nodes, nodes[::-1]):
        order = torch.randperm(len(slots), generator=gen).tolist()
        requests = []
        for j in order:
            tree = random_tree(gen, round_nodes[j % len(round_nodes)])
            root = torch.randint(0, VOCAB, (1,), generator=gen)
            plan = VerifyPlan.for_tree(root, tree, prefix_len=sdpa.length(slots[j]))
            requests.append(RequestRows.from_plan(slots[j], plan))
        check(requests)
        for rows in requests:
            keep = torch.tensor([0, 1]) if rows.tokens.shape[1] > 1 else torch.tensor([0])  # root and a root child
            flex.commit(rows.slot, keep)
            sdpa.commit(rows.slot, keep)


@settings(max_examples=8, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4),
    nodes=st.lists(st.integers(0, 9), min_size=4, max_size=4),
    seed=st.integers(0, 1000),
    qwen=st.booleans(),
)
def test_flex_follows_sdpa_over_slots_through_prefills_trees_and_commits(lengths, nodes, seed, qwen):
    dense = QWEN3 if qwen else DENSE
    gen = torch.Generator().manual_seed(seed)
    flex = RaggedDenseTarget(dense, slots=5, layout="packed", attention="flex")
    sdpa = RaggedDenseTarget(dense, slots=5, layout="packed")
    slots = torch.randperm(5, generator=gen)[: len(lengths)].tolist()
    taps = (0, 1, dense.config.num_layers)

    def check(requests):
        outs, refs = flex.forward(requests, hidden_layers=taps), sdpa.forward(requests, hidden_layers=taps)
        for out, ref in zip(outs, refs):
            assert out.logits.shape == ref.logits.shape
            torch.testing.assert_close(out.logits, ref.logits, **TOL)
            for a, b in zip(out.hidden, ref.hidden):
                torch.testing.assert_close(a, b, **TOL)

    tree_rounds(gen, slots, lengths, nodes, flex, sdpa, check)
    for s in slots:
        used = flex.length(s)
        for a, b in zip(flex.k_caches + flex.v_caches, sdpa.k_caches + sdpa.v_caches):
            torch.testing.assert_close(a[s, :, :used], b[s, :, :used], **TOL)


def test_flex_one_row_and_many_row_requests_side_by_side():
    """A 1-row request beside a 16-row tree beside a 30-token prefill, prefixes of 0, 9 and 31 tokens."""
    gen = torch.Generator().manual_seed(7)
    flex = RaggedDenseTarget(QWEN3, slots=4, layout="packed", attention="flex")
    sdpa = RaggedDenseTarget(QWEN3, slots=4, layout="packed")
    for slot, n in ((1, 9), (3, 31)):
        rows = [RequestRows(slot, torch.randint(0, VOCAB, (1, n), generator=gen))]
        flex.forward(rows)
        sdpa.forward(rows)
        flex.commit(slot, n)
        sdpa.commit(slot, n)
    tree = random_tree(gen, 15)
    requests = [
        RequestRows(3, torch.randint(0, VOCAB, (1, 1), generator=gen)),
        RequestRows.from_plan(1, VerifyPlan.for_tree(torch.tensor([5]), tree, prefix_len=9)),
        RequestRows(0, torch.randint(0, VOCAB, (1, 30), generator=gen)),
    ]
    outs, refs = flex.forward(requests), sdpa.forward(requests)
    assert [o.logits.shape[1] for o in outs] == [1, 16, 30]
    for out, ref in zip(outs, refs):
        torch.testing.assert_close(out.logits, ref.logits, **TOL)


@settings(max_examples=5, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 10), min_size=1, max_size=4),
    nodes=st.lists(st.integers(0, 6), min_size=4, max_size=4),
    seed=st.integers(0, 1000),
)
def test_flex_static_path_agrees_with_unpadded_flex(lengths, nodes, seed):
    """Padding rows (scratch slot, bucketed row counts) change no real row and no idle slot under flex."""
    gen = torch.Generator().manual_seed(seed)
    static = RaggedDenseTarget(DENSE, slots=5, layout="packed", attention="flex")
    static.enable_static_path((1, 2, 4, 8, 16, 64), span_step=16)
    plain = RaggedDenseTarget(DENSE, slots=5, layout="packed", attention="flex")
    slots = torch.randperm(5, generator=gen)[: len(lengths)].tolist()
    idle = [s for s in range(5) if s not in slots]

    def check(requests):
        before = [k[idle].clone() for k in static.k_caches + static.v_caches]
        for out, ref in zip(static.forward(requests), plain.forward(requests)):
            torch.testing.assert_close(out.logits, ref.logits, **TOL)
        assert all(torch.equal(k[idle], old) for k, old in zip(static.k_caches + static.v_caches, before))

    tree_rounds(gen, slots, lengths, nodes, static, plain, check)
    assert static.static_keys


def test_rows_never_see_other_slots_or_stale_rows():
    """NaN in the K of every position no row may see: other requests' slots, the scratch slot, and stale rows."""
    gen = torch.Generator().manual_seed(11)
    flex = RaggedDenseTarget(DENSE, slots=3, layout="packed", attention="flex")
    clean = RaggedDenseTarget(DENSE, slots=3, layout="packed", attention="flex")
    prefill = [
        RequestRows(0, torch.randint(0, VOCAB, (1, 6), generator=gen)),
        RequestRows(2, torch.randint(0, VOCAB, (1, 3), generator=gen)),
    ]
    for target in (flex, clean):
        target.forward(prefill)
        target.commit(0, 6)
        target.commit(2, 3)
    for k in flex.k_caches:
        k[1] = float("nan")  # an idle slot
        k[3] = float("nan")  # the scratch slot
        k[0, :, 6:] = float("nan")  # past slot 0's prefix: its new rows are written there, then stale
        k[2, :, 3:] = float("nan")
    tree = Tree(tokens=[4, 5, 6, 7], parents=[-1, -1, 0, 2])
    requests = [
        RequestRows.from_plan(0, VerifyPlan.for_tree(torch.tensor([3]), tree, prefix_len=6)),
        RequestRows(2, torch.tensor([[8]])),
    ]
    for out, ref in zip(flex.forward(requests), clean.forward(requests)):
        assert torch.isfinite(out.logits).all()
        torch.testing.assert_close(out.logits, ref.logits, **TOL)


def engine_tokens(target, prompts, verifier, max_new_tokens):
    engine = Engine(target, lambda: NGramDrafter(max_ngram=2, max_paths=2), verifier, max_batch=len(prompts))
    ids = [engine.add_request(p, max_new_tokens=max_new_tokens) for p in prompts]
    outputs = engine.run()
    return [outputs[i] for i in ids]


@pytest.mark.parametrize("verifier", [ChainVerifier(), TreeVerifier(budget=5)], ids=["chain", "tree"])
def test_engine_greedy_tokens_in_company_equal_tokens_alone_with_flex(verifier):
    gen = torch.Generator().manual_seed(13)
    # a small alphabet makes the n-gram drafter find matches, so rounds accept several tokens
    prompts = [torch.randint(0, 6, (n,), generator=gen) * 7 for n in (5, 9, 2, 12)]
    target = RaggedDenseTarget(DENSE, slots=4, layout="packed", attention="flex")
    together = engine_tokens(target, prompts, verifier, 14)
    for p, tokens in zip(prompts, together):
        alone = engine_tokens(target, [p], verifier, 14)[0]
        assert torch.equal(tokens, alone)
        assert torch.equal(tokens, sd.generate(DENSE, p[None], 14).tokens[0])


def test_block_mask_visits_only_the_rows_own_slot_span():
    # rows 0-1: slot 2, 5 committed tokens, a chain of 2; row 2: slot 0, 20 committed; row 3: slot 1, length 0
    row_slot, row_len = torch.tensor([2, 2, 0, 1]), torch.tensor([5, 5, 20, 0])
    local = torch.tensor([[True, False], [True, True], [True, False], [True, False]])
    mask = packed_block_mask(row_slot, row_len, local, num_slots=3, max_seq_len=32, block_size=(1, 8))
    visited = mask.to_dense()[0, 0].bool()  # [R, KV blocks]
    want = torch.zeros(4, 12, dtype=torch.bool)
    want[0, 8] = want[1, 8] = True  # positions 64..70 of the long KV
    want[2, 0:3] = True  # positions 0..20
    want[3, 4] = True  # position 32
    assert torch.equal(visited, want)


def test_long_kv_view_shares_the_cache_memory():
    cache = slot_major_cache(3, 2, 5, 4, dtype=torch.float32, device="cpu")
    long = long_kv_view(cache)
    cache[2, 1, 4] = 7.0
    assert long.data_ptr() == cache.data_ptr() and torch.equal(long[0, 1, 14], torch.full((4,), 7.0))
    with pytest.raises(ValueError, match=r"cache: expected heads-first memory \(from slot_major_cache\)"):
        long_kv_view(torch.zeros(3, 2, 5, 4))


def test_bad_attention_arguments():
    with pytest.raises(ValueError, match=r"attention: expected one of \('sdpa', 'flex'\), got 'flash'"):
        RaggedDenseTarget(DENSE, slots=2, layout="packed", attention="flash")
    with pytest.raises(ValueError, match="attention: 'flex' runs the packed rows of layout 'packed', got layout 'per_request'"):
        RaggedDenseTarget(DENSE, slots=2, attention="flex")
    flex = RaggedDenseTarget(DENSE, slots=2, layout="packed", attention="flex")
    with pytest.raises(ValueError, match="enable_cuda_graphs: attention 'flex' builds its block mask with create_block_mask"):
        flex.enable_cuda_graphs()
    assert not flex.uses_cuda_graphs


def test_a_flex_forward_attends_through_flex_once_per_layer(monkeypatch):
    calls = []

    def counting(*args, **kwargs):
        calls.append(args[0].shape)  # queries [1, H, R, D]
        return flex(*args, **kwargs)

    flex = ragged_module.flex_over_slots
    monkeypatch.setattr(ragged_module, "flex_over_slots", counting)
    target = RaggedDenseTarget(DENSE, slots=2, layout="packed", attention="flex")
    target.forward([RequestRows(0, torch.tensor([[1, 2, 3]])), RequestRows(1, torch.tensor([[4]]))])
    assert calls == [torch.Size([1, DENSE.config.num_heads, 4, DENSE.config.head_dim])] * DENSE.config.num_layers
    RaggedDenseTarget(DENSE, slots=2, layout="packed").forward([RequestRows(0, torch.tensor([[1]]))])
    assert len(calls) == DENSE.config.num_layers
