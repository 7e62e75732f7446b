"""The engine's round helpers: a chain proposal cut to the nodes a verify budget gives it."""

from __future__ import annotations

import pytest
import torch

from specdec.contracts import DraftProposal, Tree
from specdec.engine.rounds import truncate_chain


def test_truncating_a_tree_as_a_chain_is_refused():
    with pytest.raises(ValueError, match="proposal: expected a chain proposal"):
        truncate_chain(DraftProposal(torch.tensor([4, 5]), tree=Tree(tokens=[4, 5], parents=[-1, -1])), 1)
    with pytest.raises(ValueError, match="proposal: expected a chain proposal"):
        truncate_chain(DraftProposal(torch.tensor([4, 5]), parents=torch.tensor([-1, -1])), 1)
    laws = torch.tensor([[0.5, 0.5], [0.25, 0.75]])
    cut = truncate_chain(DraftProposal(torch.tensor([0, 1]), draft_probs=laws), 1)
    assert cut.tokens.tolist() == [0] and torch.equal(cut.draft_probs, laws[:1])
