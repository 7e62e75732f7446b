"""Greedy acceptance from host tokens equals the logits path: chains (``chain_accept``) and trees (``greedy_walk``).

The host forms take the argmax of the verify rows already read to the host; the logits forms take the
argmax themselves. Cases: ties inside a row (small integer logits over a tiny vocabulary make them
frequent), every draft rejected, every draft accepted, no drafts, and hostile tree shapes with
duplicate siblings.
"""

from __future__ import annotations

import pytest
import torch
from tree_shapes import SHAPES, hostile_tree, shape_id

from specdec.contracts import SamplingConfig, Tree
from specdec.verify.chain import chain_accept, greedy_chain_accept_tokens
from specdec.verify.walks import greedy_walk, greedy_walk_tokens

V = 3


def tied_logits(rows: int, seed: int) -> torch.Tensor:
    """``[rows, V]`` float32 logits with values in {0, 1, 2}: most rows hold a tie for the maximum."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 3, (rows, V), generator=g).float()


def chain_cases():
    cases = []
    for seed in range(200):
        g = torch.Generator().manual_seed(10_000 + seed)
        k = int(torch.randint(0, 6, (1,), generator=g))
        cases.append((tied_logits(k + 1, seed), torch.randint(0, V, (k,), generator=g)))
    return cases


def test_chain_host_tokens_equal_chain_accept_with_ties():
    ties = 0
    for logits, drafts in chain_cases():
        top = logits.max(-1, keepdim=True).values
        ties += int(((logits == top).sum(-1) > 1).sum())
        n, bonus = chain_accept(logits, drafts, None, sampling=SamplingConfig())
        assert greedy_chain_accept_tokens(drafts.tolist(), logits.argmax(-1).tolist()) == (n, int(bonus))
    assert ties > 100  # the cases do exercise tied rows


def test_chain_host_tokens_tie_takes_the_first_index():
    # row 0 ties tokens 1 and 2: the argmax is 1, so the draft 2 is rejected and 1 is the bonus
    logits = torch.tensor([[0.0, 5.0, 5.0], [1.0, 0.0, 0.0]])
    assert greedy_chain_accept_tokens([2], logits.argmax(-1).tolist()) == (0, 1)
    n, bonus = chain_accept(logits, torch.tensor([2]), None, sampling=SamplingConfig())
    assert (n, int(bonus)) == (0, 1)


@pytest.mark.parametrize(
    "drafts, target, expected",
    [
        ([], [4], (0, 4)),  # no drafts: the bonus only
        ([1, 2, 3], [7, 2, 3, 9], (0, 7)),  # the first draft is rejected
        ([1, 2, 3], [1, 2, 3, 9], (3, 9)),  # all accepted, the bonus follows the last
        ([1, 2, 3], [1, 5, 3, 9], (1, 5)),  # a later match after a miss does not count
    ],
)
def test_chain_host_tokens_reject_all_accept_all(drafts, target, expected):
    logits = torch.nn.functional.one_hot(torch.tensor(target), 10).float()
    n, bonus = chain_accept(logits, torch.tensor(drafts, dtype=torch.long), None, sampling=SamplingConfig())
    assert (n, int(bonus)) == expected
    assert greedy_chain_accept_tokens(drafts, target) == expected


def test_chain_host_tokens_checks_the_row_count():
    with pytest.raises(ValueError, match=r"target_tokens: expected k \+ 1 = 3 ids \(one per verify row\), got 2"):
        greedy_chain_accept_tokens([1, 2], [1, 2])


@pytest.mark.parametrize("shape", [s for s in SHAPES if s[1] <= 33], ids=shape_id)
def test_tree_host_tokens_equal_greedy_walk_with_ties(shape):
    for seed in range(8):
        tree = hostile_tree(*shape, seed=seed, vocab=V)
        logits = tied_logits(tree.num_nodes + 1, seed)
        walk = greedy_walk(tree, logits)
        host = greedy_walk_tokens(tree, logits.argmax(-1).tolist())
        assert torch.equal(host.rows, walk.rows) and torch.equal(host.emitted, walk.emitted)
        assert host.num_accepted == walk.num_accepted


def test_tree_host_tokens_reject_all_and_accept_a_full_path():
    tree = Tree(tokens=[1, 2, 1, 0], parents=[-1, -1, 0, 2])
    none = torch.nn.functional.one_hot(torch.tensor([0, 0, 0, 0, 0]), V).float()  # the root wants 0: no child
    full = torch.nn.functional.one_hot(torch.tensor([1, 1, 0, 0, 2]), V).float()  # root -> 1 -> 1 -> 0, bonus 2
    for logits, rows, emitted in ((none, [0], [0]), (full, [0, 1, 3, 4], [1, 1, 0, 2])):
        host = greedy_walk_tokens(tree, logits.argmax(-1).tolist())
        walk = greedy_walk(tree, logits)
        assert host.rows.tolist() == walk.rows.tolist() == rows
        assert host.emitted.tolist() == walk.emitted.tolist() == emitted


def test_tree_host_tokens_follow_the_first_duplicate_sibling():
    tree = Tree(tokens=[4, 4, 6], parents=[-1, -1, 1])
    walk = greedy_walk_tokens(tree, [4, 9, 6, 0])
    assert walk.rows.tolist() == [0, 1] and walk.emitted.tolist() == [4, 9]


def test_tree_host_tokens_input_errors():
    with pytest.raises(ValueError, match=r"target_tokens: expected a list of 3 ints \(root \+ 2 nodes\), got 2"):
        greedy_walk_tokens(Tree.chain([1, 2]), [1, 2])
    with pytest.raises(TypeError, match="tree: expected a Tree, got list"):
        greedy_walk_tokens([1, 2], [1, 2, 3])
