"""VerifyPlan is built once per round and read by every consumer; targets are checked by the protocol."""

import pytest
import torch

import specdec as sd
import specdec.contracts.plan as plan_mod
from specdec.contracts import Target, Tree, VerifyPlan, check_target
from specdec.testing import tiny_target


def test_tree_plan_rows_positions_mask_parents():
    tree = Tree(tokens=[7, 8, 9, 6], parents=[-1, -1, 0, 2])
    plan = VerifyPlan.for_tree(torch.tensor([3]), tree, prefix_len=5)
    assert plan.tokens.tolist() == [[3, 7, 8, 9, 6]]
    assert plan.positions.tolist() == [[5, 6, 6, 7, 8]]
    assert plan.row_parents.tolist() == [-1, 0, 0, 1, 3]
    # the mask is the tree's own, computed once and shared
    assert plan.mask is tree.ancestor_mask
    assert plan.mask.int().tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 0, 1, 1]]
    assert plan.accepted_rows(2, torch.tensor([0, 1, 3])).tolist() == [0, 1, 3]


def test_chain_plan_keeps_the_default_forward():
    plan = VerifyPlan.chain(torch.tensor([3]), torch.tensor([4, 5]), prefix_len=2)
    assert plan.is_chain and plan.positions is None and plan.mask is None and plan.row_parents is None
    assert plan.accepted_rows(1) == 2


def test_positions_are_derived_once_per_plan(monkeypatch):
    calls = []
    original = plan_mod.tree_positions
    monkeypatch.setattr(plan_mod, "tree_positions", lambda tree, p: calls.append(1) or original(tree, p))
    plan = VerifyPlan.for_tree(torch.tensor([3]), Tree(tokens=[7, 8], parents=[-1, -1]), prefix_len=0)
    first, second = plan.positions, plan.positions
    assert calls == [1] and first is second


def test_plan_input_errors():
    with pytest.raises(TypeError, match="tree: expected a Tree, got list"):
        VerifyPlan.for_tree(torch.tensor([3]), [1, 2], prefix_len=0)
    with pytest.raises(ValueError, match="root: expected one token id"):
        VerifyPlan.for_tree(torch.tensor([3, 4]), Tree.chain([1]), prefix_len=0)
    with pytest.raises(ValueError, match="prefix_len: expected an int >= 0, got -1"):
        VerifyPlan.for_tree(torch.tensor([3]), Tree.chain([1]), prefix_len=-1)


def test_targets_and_test_targets_implement_the_protocol():
    assert isinstance(tiny_target(seed=0), Target)
    assert isinstance(sd.testing.LogitBiasFault(tiny_target(seed=0)), Target)
    assert isinstance(sd.testing.MarkovTarget(sd.testing.MarkovLaw(5, seed=0)), Target)


def test_a_non_target_is_named_with_what_it_lacks():
    class Half:
        config = None
        length = 0
        max_seq_len = 8

        def forward(self, tokens):
            return tokens

    with pytest.raises(TypeError, match="target: expected a specdec Target .* got Half missing commit, device, discard"):
        check_target(Half())
    with pytest.raises(TypeError, match="got Half missing"):
        sd.ChainVerifier().verify(Half(), torch.tensor([1]), sd.DraftProposal(torch.tensor([2])), sampling=sd.SamplingConfig())


class ChainOnly(sd.DenseTarget):
    """A dense target that declares it verifies chains only (as an HF adapter does)."""

    @property
    def supports_trees(self) -> bool:
        return False


def test_tree_verifier_refuses_trees_on_a_chain_only_target():
    base = tiny_target(seed=0)
    target = ChainOnly(base.config, max_seq_len=64)
    target.load_state_dict(base.state_dict())
    target(torch.tensor([[1, 2]]))
    target.commit(2)
    proposal = sd.DraftProposal(torch.tensor([4, 5, 6]), parents=torch.tensor([-1, -1, 0]))
    with pytest.raises(ValueError, match="verifies chains only"):
        sd.TreeVerifier().verify(target, torch.tensor([3]), proposal, sampling=sd.SamplingConfig())
    assert target.length == 2


def test_chain_plan_skips_the_host_walk_and_equals_the_checked_chain(monkeypatch):
    drafts = torch.tensor([4, 5, 9])
    checked = Tree.chain(drafts)

    def no_host_walk(self):
        raise AssertionError("the chain plan of a round must not read its tokens back to the host")

    monkeypatch.setattr(Tree, "__post_init__", no_host_walk)
    tree = VerifyPlan.chain(torch.tensor([3]), drafts, prefix_len=2).tree
    for field in ("tokens", "parents", "depth"):
        assert torch.equal(getattr(tree, field), getattr(checked, field))
    assert (tree.max_depth, tree.is_chain, tree.scores) == (checked.max_depth, checked.is_chain, None)
    assert torch.equal(tree.ancestor_mask, checked.ancestor_mask)
    empty = VerifyPlan.chain(torch.tensor([3]), torch.zeros(0, dtype=torch.long), prefix_len=2)
    assert empty.num_rows == 1 and empty.is_chain


def test_plans_refuse_token_ids_that_are_not_integers():
    with pytest.raises(TypeError, match="drafts: expected integer token ids, got torch.float32"):
        VerifyPlan.chain(torch.tensor([3]), torch.tensor([4.9, 5.7]), prefix_len=0)
    with pytest.raises(TypeError, match="drafts: expected integer token ids, got torch.bool"):
        VerifyPlan.chain(torch.tensor([3]), torch.tensor([True, False]), prefix_len=0)
    with pytest.raises(TypeError, match="root: expected integer token ids, got torch.float32"):
        VerifyPlan.for_tree(torch.tensor([3.9]), Tree.chain([4, 5]), prefix_len=0)


def test_a_verify_result_is_one_round_of_n_accepted_drafts_and_a_bonus_token():
    from specdec.contracts import VerifyResult

    with pytest.raises(ValueError, match="emitted: expected at least the bonus token"):
        VerifyResult(emitted=torch.zeros(0, dtype=torch.long), num_accepted=0)
    with pytest.raises(TypeError, match="emitted: expected integer token ids, got torch.float32"):
        VerifyResult(emitted=torch.tensor([2.7, 3.9]), num_accepted=1)
    with pytest.raises(TypeError, match=r"emitted: expected a 1-D int64 tensor \[n \+ 1\], got shape \(1, 2\)"):
        VerifyResult(emitted=torch.tensor([[2, 3]]), num_accepted=1)
    for wrong in (7, 0, True, -1):
        with pytest.raises(ValueError, match=rf"num_accepted: expected .* = 1 .*, got {wrong!r}"):
            VerifyResult(emitted=torch.tensor([2, 3]), num_accepted=wrong)
    for hidden, got in ((torch.zeros(7), r"shape \(7,\)"), (torch.zeros(3, 1, 4), r"shape \(3, 1, 4\)"), ([0.0], "list")):
        with pytest.raises(ValueError, match=r"hidden: expected \[n \+ 1, taps, H\] = \[2, taps, H\] .*, got " + got):
            VerifyResult(emitted=torch.tensor([2, 3]), num_accepted=1, hidden=hidden)
    assert VerifyResult(emitted=torch.tensor([2, 3]), num_accepted=1, hidden=torch.zeros(2, 1, 4)).hidden.shape == (2, 1, 4)


@pytest.mark.parametrize("field", ["temperature", "top_p"])
def test_sampling_settings_refuse_bools(field):
    with pytest.raises(ValueError, match=rf"{field}: expected"):
        sd.SamplingConfig(**{field: True})
