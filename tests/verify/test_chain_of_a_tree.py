"""A chain verifier given a tree checks its first root-to-leaf path, with those nodes' laws."""

from __future__ import annotations

import pytest
import torch

from specdec.contracts import DraftProposal, SamplingConfig, Tree
from specdec.testing import MarkovLaw, MarkovTarget
from specdec.verify import ChainVerifier


def _target(law: MarkovLaw) -> MarkovTarget:
    target = MarkovTarget(law, max_seq_len=16)
    target.forward(torch.tensor([[0]]))
    target.commit(1)
    return target


def test_a_tree_given_as_parents_is_verified_along_its_first_path():
    law = MarkovLaw(5, order=1, seed=0)
    root = 2
    a = int(law((root,)).argmax())
    c = int(law((a,)).argmax())
    b = next(t for t in range(5) if t not in (a, c))
    proposal = DraftProposal(torch.tensor([a, b, c]), parents=torch.tensor([-1, -1, 0]))  # root -> a -> c, root -> b
    with pytest.warns(UserWarning, match="first root-to-leaf path"):
        result = ChainVerifier().verify(
            _target(law), torch.tensor([root]), proposal, sampling=SamplingConfig(), context=torch.tensor([0, root])
        )
    assert result.num_accepted == 2 and result.emitted[:2].tolist() == [a, c]


def test_the_chain_of_a_tree_keeps_its_path_nodes_laws():
    probs = torch.softmax(torch.randn(4, 6, generator=torch.Generator().manual_seed(0)), -1)
    confidence = torch.tensor([0.9, 0.8, 0.7, 0.6])
    tree = DraftProposal(
        torch.tensor([1, 2, 3, 4]),
        draft_probs=probs,
        parents=torch.tensor([-1, -1, 1, 2]),  # root -> 1, root -> 2 -> 3 -> 4: the first path is node 0 alone
        confidence=confidence,
        tree_logprobs=probs.log()[:2],
    )
    chain = tree.chain()
    assert chain.tokens.tolist() == [1] and torch.equal(chain.draft_probs, probs[:1]) and chain.parents is None
    assert torch.equal(chain.confidence, confidence[:1]) and chain.tree_logprobs is None
    deep = DraftProposal(torch.tensor([1, 2, 3]), draft_probs=probs[:3], parents=torch.tensor([-1, 0, 0]))
    assert deep.chain().tokens.tolist() == [1, 2] and torch.equal(deep.chain().draft_probs, probs[[0, 1]])
    own = DraftProposal(torch.tensor([5, 6]), tree=Tree.from_paths([[5, 6], [7]]))
    assert own.chain().tokens.tolist() == [5, 6] and own.chain().tree is None
    plain = DraftProposal(torch.tensor([5, 6]))
    assert plain.chain() is plain


def test_the_first_path_follows_the_first_child_and_an_empty_tree_reorders():
    assert Tree(tokens=[7, 8, 9, 6], parents=[-1, -1, 1, 0]).first_path() == [0, 3]
    assert Tree(tokens=[7, 8, 9], parents=[-1, -1, 1]).first_path() == [0]
    assert Tree(tokens=[], parents=[]).first_path() == []
    assert Tree(tokens=[], parents=[]).reorder([]).num_nodes == 0
