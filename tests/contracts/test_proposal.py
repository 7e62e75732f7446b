"""DraftProposal validation: every malformed field raises naming the field, before any target pass."""

import pytest
import torch

import specdec as sd
from specdec.contracts import DraftProposal, Tree
from specdec.contracts.proposal import proposals_pass_conditions
from specdec.testing import tiny_target

V = 11


def law(k: int, vocab: int = V) -> torch.Tensor:
    return torch.softmax(torch.randn(k, vocab, generator=torch.Generator().manual_seed(0)), -1)


@pytest.mark.parametrize(
    "proposal, error, message",
    [
        (
            DraftProposal(torch.tensor([3, V])),
            ValueError,
            rf"proposal.tokens: expected token ids in \[0, {V}\), got tokens\[1\] = {V}",
        ),
        (
            DraftProposal(torch.tensor([-1])),
            ValueError,
            r"proposal.tokens: expected token ids in \[0, 11\), got tokens\[0\] = -1",
        ),
        (DraftProposal(torch.tensor([[1, 2]])), ValueError, r"proposal.tokens: expected a 1-D tensor, got shape \(1, 2\)"),
        (DraftProposal(torch.tensor([1.0])), TypeError, r"proposal.tokens: expected an integer dtype, got torch.float32"),
        (DraftProposal(torch.tensor([1, 1], dtype=torch.uint8)), TypeError, r"proposal.tokens: expected int64 .*torch.uint8"),
        (DraftProposal(torch.tensor([1], dtype=torch.int32)), TypeError, r"proposal.tokens: expected int64 .*torch.int32"),
        (
            DraftProposal(torch.tensor([1, 2]), draft_probs=law(3)),
            ValueError,
            r"proposal.draft_probs: expected shape \(2, 11\) .*got \(3, 11\)",
        ),
        (
            DraftProposal(torch.tensor([1, 2]), draft_probs=law(2, V - 1)),
            ValueError,
            r"proposal.draft_probs: expected shape \(2, 11\) .*got \(2, 10\)",
        ),
        (
            DraftProposal(torch.tensor([1, 2]), draft_probs=law(2) * 1.1),
            ValueError,
            r"proposal.draft_probs: expected each row to sum to 1 \(within 0.001\), got row 0 summing to 1.1",
        ),
        (
            DraftProposal(torch.tensor([1, 2]), draft_probs=law(2).index_fill(1, torch.tensor([4]), float("nan"))),
            ValueError,
            r"proposal.draft_probs: expected finite values, got NaN/inf in row 0",
        ),
        (
            DraftProposal(torch.tensor([1, 2]), draft_probs=torch.tensor([[1.5, -0.5] + [0.0] * (V - 2)] * 2)),
            ValueError,
            r"proposal.draft_probs: expected values >= 0, got a negative entry in row 0",
        ),
        (
            DraftProposal(torch.tensor([1, 2, 3]), parents=torch.tensor([-1, 2, 0])),
            ValueError,
            r"proposal.parents: expected -1 <= parents\[i\] < i \(parents before children\), got parents\[1\] = 2",
        ),
        (
            DraftProposal(torch.tensor([1, 2, 3]), parents=torch.tensor([-1, 0])),
            ValueError,
            r"proposal.parents: expected shape \(3,\)",
        ),
        (
            DraftProposal(torch.tensor([1]), tree=Tree(tokens=[1, 12], parents=[-1, -1])),
            ValueError,
            r"proposal.tree: expected token ids in \[0, 11\), got tree.tokens\[1\] = 12",
        ),
        (DraftProposal(torch.tensor([1]), tree=[1, 2]), TypeError, r"proposal.tree: expected a Tree, got list"),
        (
            DraftProposal(torch.tensor([1, 2]), confidence=torch.tensor([0.5, 1.5])),
            ValueError,
            r"proposal.confidence: expected values in \[0, 1\], got 1.5",
        ),
        (
            DraftProposal(torch.tensor([1, 2]), tree_logprobs=torch.full((2, V), float("nan"))),
            ValueError,
            r"proposal.tree_logprobs: expected no NaN",
        ),
        (
            DraftProposal(torch.tensor([1]), tree_logprobs=torch.full((8, V), -1.0)),
            ValueError,
            r"proposal.tree_logprobs: expected 1 to 1 rows \(one a depth along the 1 tokens\), got 8",
        ),
        (
            DraftProposal(torch.tensor([1, 2]), tree_logprobs=torch.zeros(0, V)),
            ValueError,
            r"proposal.tree_logprobs: expected 1 to 2 rows",
        ),
        (
            DraftProposal(torch.tensor([1, 2]), tree_logprobs=torch.full((2, V), 3.0)),
            ValueError,
            r"proposal.tree_logprobs: expected log-probabilities \(<= 0\), got a maximum of 3",
        ),
    ],
    ids=[
        "token-too-large",
        "token-negative",
        "tokens-2d",
        "tokens-float",
        "tokens-uint8",
        "tokens-int32",
        "probs-rows",
        "probs-vocab",
        "probs-sum",
        "probs-nan",
        "probs-negative",
        "parent-after-child",
        "parents-length",
        "tree-token",
        "tree-type",
        "confidence-range",
        "logprobs-nan",
        "logprobs-rows-past-tokens",
        "logprobs-no-rows",
        "logprobs-positive",
    ],
)
def test_malformed_proposals_name_the_field(proposal, error, message):
    with pytest.raises(error, match=message):
        proposal.validate(vocab_size=V)


def test_well_formed_proposals_pass():
    DraftProposal(torch.tensor([1, 2]), draft_probs=law(2), confidence=torch.tensor([0.9, 0.4])).validate(vocab_size=V)
    DraftProposal(torch.tensor([1, 2, 3]), parents=torch.tensor([-1, -1, 0])).validate(vocab_size=V)
    DraftProposal(torch.zeros(0, dtype=torch.long), draft_probs=torch.zeros(0, V)).validate(vocab_size=V)


@pytest.mark.parametrize("verifier", [sd.ChainVerifier(), sd.TreeVerifier(budget=8)], ids=["chain", "tree"])
def test_verifiers_reject_a_bad_proposal_before_any_target_pass(verifier):
    target = tiny_target(seed=0)
    target(torch.tensor([[1, 2]]))
    target.commit(2)
    calls = []
    handle = target.register_forward_pre_hook(lambda *a: calls.append(1))
    bad_law = law(2, target.vocab_size) * 0.5
    try:
        with pytest.raises(ValueError, match="proposal.draft_probs: expected each row to sum to 1"):
            verifier.verify(
                target,
                torch.tensor([3]),
                DraftProposal(torch.tensor([4, 5]), bad_law),
                sampling=sd.SamplingConfig(temperature=1.0),
            )
    finally:
        handle.remove()
    assert calls == [] and target.length == 2


def test_tree_from_parents_is_the_drafters_tree():
    proposal = DraftProposal(torch.tensor([5, 9, 4]), parents=torch.tensor([-1, -1, 0]))
    tree = proposal.as_tree()
    assert tree.tokens.tolist() == [5, 9, 4] and tree.parents.tolist() == [-1, -1, 0]
    assert proposal.num_nodes == 3 and DraftProposal(torch.tensor([5])).as_tree() is None


@pytest.mark.parametrize(
    "verifier",
    [sd.ChainVerifier(validate_proposals=False), sd.TreeVerifier(budget=8, validate_proposals=False)],
    ids=["chain", "tree"],
)
def test_validation_can_be_switched_off_for_a_trusted_drafter(verifier, monkeypatch):
    calls = []
    monkeypatch.setattr(DraftProposal, "validate", lambda self, *, vocab_size: calls.append(vocab_size))
    target = tiny_target(seed=0)
    target(torch.tensor([[1, 2]]))
    target.commit(2)
    verifier.verify(target, torch.tensor([3]), DraftProposal(torch.tensor([4, 5])), sampling=sd.SamplingConfig())
    assert calls == []
    with pytest.raises(TypeError, match="validate_proposals: expected a bool"):
        sd.ChainVerifier(validate_proposals=1)


def test_proposals_pass_conditions_fail_exactly_when_one_proposal_fails_validate():
    """All of a round's proposals checked together: false iff ``validate`` refuses one of them, for every check."""
    vocab = 6
    g = torch.Generator().manual_seed(0)
    law = torch.softmax(torch.randn(2, vocab, generator=g), -1)
    good = [
        DraftProposal(torch.tensor([1, 2]), tree_logprobs=law.log()),
        DraftProposal(torch.tensor([3, 0]), draft_probs=law),
        DraftProposal(torch.tensor([4]), parents=torch.tensor([-1])),
        DraftProposal(torch.tensor([5, 1]), confidence=torch.tensor([0.5, 0.2])),
        DraftProposal(torch.tensor([], dtype=torch.long)),
    ]
    bad = [
        DraftProposal(torch.tensor([1, 6])),
        DraftProposal(torch.tensor([1, 2]), tree_logprobs=torch.full((2, vocab), float("nan"))),
        DraftProposal(torch.tensor([3, 0]), draft_probs=law * 2),
        DraftProposal(torch.tensor([3, 0]), draft_probs=law.clone().index_fill_(1, torch.tensor([0]), -0.1)),
        DraftProposal(torch.tensor([3, 0]), draft_probs=law.clone().index_fill_(1, torch.tensor([0]), float("inf"))),
        DraftProposal(torch.tensor([4]), parents=torch.tensor([0])),
        DraftProposal(torch.tensor([5, 1]), confidence=torch.tensor([0.5, 1.5])),
    ]

    def passes(proposals):
        return all(bool(ok) for ok in proposals_pass_conditions(proposals, vocab_size=vocab))

    assert passes(good)
    for proposal in bad:
        with pytest.raises(ValueError):
            proposal.validate(vocab_size=vocab)
        for where in range(len(good) + 1):
            assert not passes([*good[:where], proposal, *good[where:]])
    with pytest.raises(ValueError, match="draft_probs: expected shape"):
        proposals_pass_conditions([good[0], DraftProposal(torch.tensor([1]), draft_probs=law)], vocab_size=vocab)


def test_a_round_refuses_what_is_not_a_proposal_and_names_bad_parents():
    from specdec.contracts.proposal import check_proposal_size

    with pytest.raises(TypeError, match=r"drafter: expected propose\(\) to return a DraftProposal, got Tensor"):
        check_proposal_size(torch.tensor([1, 2]), 4)
    with pytest.raises(TypeError, match=r"proposal.tokens: expected a tensor, got list"):
        check_proposal_size(DraftProposal([1, 2]), 4)
    with pytest.raises(ValueError, match=r"^proposal.parents: "):
        DraftProposal(torch.tensor([1, 2]), parents=torch.tensor([-1, 5])).as_tree()
    check_proposal_size(DraftProposal(torch.tensor([1, 2])), 2)
