"""The batched commits of a packed RaggedHybridTarget forward.

* the requests of one forward commit with ONE commit-kernel call per GDN layer, written when a slot is next
  read; the states and the next logits agree with the ``"per_request"`` layout, whose commits run one
  request at a time through the batch-1 code;
* a slot left out of the next forward still commits the rows of its own forward (the commits of two forwards
  are written as two batches);
* a commit is checked when it is made (a path that is not one raises at once and books nothing);
* a guard broken on purpose (the pending commits not written before a forward) is caught by the comparison.
"""

from __future__ import annotations

import pytest
import torch

from specdec.contracts import Tree, VerifyPlan
from specdec.models import ragged_hybrid_commit
from specdec.models.ragged import RequestRows
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.testing import tiny_target

VOCAB = 97
HYBRID = tiny_target("qwen3_5_text", seed=0, max_seq_len=48)
GDN_LAYERS = len(HYBRID.config.gdn_layers)


def assert_close(got, want, what):
    # packed GEMMs change a row's last float32 bits; a state written from the wrong rows moves far more
    torch.testing.assert_close(got, want, rtol=0.0, atol=1e-4, msg=lambda m: f"{what}: {m}")


def prefilled(lengths=(5, 3, 7)):
    """A packed target and its per_request reference, each slot prefilled with its own prompt and committed."""
    gen = torch.Generator().manual_seed(0)
    packed, ref = RaggedHybridTarget(HYBRID, slots=3, layout="packed"), RaggedHybridTarget(HYBRID, slots=3)
    rows = [RequestRows(s, torch.randint(0, VOCAB, (1, n), generator=gen)) for s, n in enumerate(lengths)]
    for target in (packed, ref):
        target.forward(rows)
        for s, n in enumerate(lengths):
            target.commit(s, n)
    return packed, ref


def tree_rows(slot: int, prefix_len: int, seed: int) -> RequestRows:
    """A root and a 4-node tree with siblings (root -> a -> c, root -> b -> d)."""
    gen = torch.Generator().manual_seed(seed)
    tree = Tree(tokens=torch.randint(0, VOCAB, (4,), generator=gen).tolist(), parents=[-1, -1, 0, 1])
    return RequestRows.from_plan(slot, VerifyPlan.for_tree(torch.tensor([seed % VOCAB]), tree, prefix_len=prefix_len))


def compare(packed, ref, slots, what):
    for s in slots:
        assert_close(packed.recurrent_states(s), ref.recurrent_states(s), f"{what}: recurrent states of slot {s}")
        assert_close(packed.conv_states(s), ref.conv_states(s), f"{what}: conv states of slot {s}")
    rows = [RequestRows(s, torch.tensor([[s + 1]])) for s in slots]
    for s, got, want in zip(slots, packed.forward(rows), ref.forward(rows)):
        assert_close(got.logits, want.logits, f"{what}: next logits of slot {s}")


def test_one_commit_call_per_gdn_layer_for_every_request_of_a_forward(monkeypatch):
    calls = []
    real = ragged_hybrid_commit.gdn_tree_commit

    def counted(k, *args, **kwargs):
        calls.append(k.shape[0])
        return real(k, *args, **kwargs)

    monkeypatch.setattr(ragged_hybrid_commit, "gdn_tree_commit", counted)
    packed, ref = prefilled()
    assert calls == []  # the prefills' commits are booked
    rows = [tree_rows(s, packed.length(s), seed=s) for s in range(3)]
    for got, want in zip(packed.forward(rows), ref.forward(rows)):
        assert_close(got.logits, want.logits, "tree rows")
    assert calls == [3] * GDN_LAYERS  # written by the next forward: one call per layer over the three slots
    calls.clear()
    paths = [torch.tensor([0, 2, 4]), torch.tensor([0, 1]), torch.tensor([0, 1, 3])]  # b -> d: K/V rows move
    for s, path in enumerate(paths):
        packed.commit(s, path)
        ref.commit(s, path)
        assert packed.length(s) == ref.length(s)
    assert calls == []  # booked, not yet written
    compare(packed, ref, range(3), "after three tree commits")
    assert calls == [3] * GDN_LAYERS


def test_a_slot_left_out_of_the_next_forward_commits_its_own_rows():
    packed, ref = prefilled()
    rows = [tree_rows(s, packed.length(s), seed=10 + s) for s in range(3)]
    for target in (packed, ref):
        target.forward(rows)
        target.commit(0, torch.tensor([0, 1]))
    # slots 1 and 2 have not committed; slot 0 runs a second forward alone
    again = [RequestRows(0, torch.tensor([[3, 4]]))]
    for got, want in zip(packed.forward(again), ref.forward(again)):
        assert_close(got.logits, want.logits, "slot 0's second forward")
    for target in (packed, ref):
        target.commit(2, torch.tensor([0, 2, 4]))  # from the first forward
        target.commit(0, 2)  # from the second
        target.commit(1, torch.tensor([0]))  # from the first
    compare(packed, ref, range(3), "commits of two forwards")


def test_a_bad_path_raises_when_committed_and_books_nothing():
    packed, _ = prefilled()
    packed.forward([tree_rows(1, packed.length(1), seed=3)])
    with pytest.raises(ValueError, match="row 3 at position 1 has parent 1, not 0"):
        packed.commit(1, torch.tensor([0, 3]))
    assert packed.lengths == [5, 3, 7] and packed._pending == []


def test_a_forward_that_does_not_write_the_pending_commits_first_is_caught(monkeypatch):
    packed, ref = prefilled()
    rows = [tree_rows(s, packed.length(s), seed=20 + s) for s in range(3)]
    for target in (packed, ref):
        target.forward(rows)
        for s in range(3):
            target.commit(s, torch.tensor([0, 1, 3]))
    monkeypatch.setattr(RaggedHybridTarget, "_flush", lambda self: None)
    rows = [RequestRows(s, torch.tensor([[s + 1]])) for s in range(3)]
    worst = max((got.logits - want.logits).abs().max().item() for got, want in zip(packed.forward(rows), ref.forward(rows)))
    assert worst > 1e-2
