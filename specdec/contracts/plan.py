"""The verify plan: the rows of one target pass and their topology, built once per round.

Every consumer of a round (attention masks, GDN tree kernels, the commit, the drafter hand-off) reads
the same :class:`VerifyPlan`, so a tree's topology is never derived twice. Derived per-consumer
metadata (for example the GDN kernels' tree tables) is cached in :attr:`VerifyPlan.derived` under the
consumer's own key, the plan-then-run pattern of attention libraries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from specdec.contracts.tree import Tree, tree_positions


def _check_integer_ids(ids: torch.Tensor, name: str) -> None:
    """Token ids stay integers (a dtype check, no device read): a float or bool tensor is refused, not cut."""
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise TypeError(f"{name}: expected integer token ids, got {ids.dtype}")


@dataclass(eq=False)
class VerifyPlan:
    """Rows ``[root, node_0, ..., node_{N-1}]`` of one verify pass over a committed prefix.

    Attributes:
        tokens: ``[1, N + 1]`` int64 verify rows, the root (newest emitted token) first.
        tree: the draft tree (a chain is a tree whose nodes each hang below the previous one).
        prefix_len: committed tokens in the target's cache when the plan was made.
        derived: per-consumer metadata computed from the plan, keyed by consumer.

    Chains keep the default positions and causal mask (``positions``, ``mask`` and ``row_parents``
    are ``None``), so a chain-shaped tree runs exactly the chain forward.

    Example:
        >>> plan = VerifyPlan.for_tree(torch.tensor([3]), Tree(tokens=[7, 8, 9], parents=[-1, -1, 0]), prefix_len=10)
        >>> plan.tokens.tolist(), plan.positions.tolist(), plan.row_parents.tolist()
        ([[3, 7, 8, 9]], [[10, 11, 11, 12]], [-1, 0, 0, 1])
        >>> plan.mask.int().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    """

    tokens: torch.Tensor
    tree: Tree
    prefix_len: int
    derived: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_tree(cls, root: torch.Tensor, tree: Tree, *, prefix_len: int) -> VerifyPlan:
        """The plan of ``[root] + tree`` on the tree's device.

        Args:
            root: ``[1]`` (or 0-d) int64, the newest emitted token.
            tree: the draft tree; a chain gives the chain plan.
            prefix_len: the target's committed length.
        """
        if not isinstance(tree, Tree):
            raise TypeError(f"tree: expected a Tree, got {type(tree).__name__}")
        if not isinstance(root, torch.Tensor) or root.numel() != 1:
            raise ValueError(f"root: expected one token id as a tensor, got {getattr(root, 'shape', type(root).__name__)}")
        _check_integer_ids(root, "root")
        if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 0:
            raise ValueError(f"prefix_len: expected an int >= 0, got {prefix_len!r}")
        tokens = torch.cat([root.reshape(1).to(tree.device, torch.long), tree.tokens])[None]  # [1, N + 1]
        return cls(tokens=tokens, tree=tree, prefix_len=prefix_len)

    @classmethod
    def chain(cls, root: torch.Tensor, drafts: torch.Tensor, *, prefix_len: int) -> VerifyPlan:
        """The plan of ``[root, d_1, ..., d_k]`` (a causal chain).

        Example:
            >>> VerifyPlan.chain(torch.tensor([3]), torch.tensor([4, 5]), prefix_len=2).is_chain
            True
        """
        if not isinstance(drafts, torch.Tensor) or drafts.ndim != 1:
            raise ValueError(f"drafts: expected a 1-D tensor of token ids, got {getattr(drafts, 'shape', type(drafts).__name__)}")
        _check_integer_ids(drafts, "drafts")
        return cls.for_tree(root, Tree._unchecked_chain(drafts.to(root.device)), prefix_len=prefix_len)

    @property
    def num_rows(self) -> int:
        """``N + 1``, the verify rows (root plus tree nodes) (int)."""
        return self.tree.num_nodes + 1

    def check_prefix(self, length: int) -> None:
        """Raise ``ValueError`` unless the plan was made for a target holding ``length`` committed tokens.

        Its positions (``prefix_len + depth``) and the slots its rows fill start there; a plan made before
        another commit, truncate or reset would run its rows at other positions than their slots.

        Example:
            >>> plan = VerifyPlan.chain(torch.tensor([3]), torch.tensor([4, 5]), prefix_len=2)
            >>> plan.check_prefix(2)
            >>> plan.check_prefix(5)
            Traceback (most recent call last):
            ...
            ValueError: plan: expected prefix_len 5 (the target's committed length), got 2
        """
        if self.prefix_len != length:
            raise ValueError(f"plan: expected prefix_len {length} (the target's committed length), got {self.prefix_len}")

    @property
    def is_chain(self) -> bool:
        """Whether the tree is a single path, so the plan runs the plain causal forward (bool)."""
        return self.tree.is_chain

    @property
    def device(self) -> torch.device:
        """The device of :attr:`tokens` (:class:`torch.device`)."""
        return self.tokens.device

    @property
    def positions(self) -> torch.Tensor | None:
        """``[1, N + 1]`` RoPE positions ``prefix_len + depth``; ``None`` for a chain (the default)."""
        if self.is_chain:
            return None
        if "positions" not in self.derived:
            self.derived["positions"] = tree_positions(self.tree, self.prefix_len)[None]
        return self.derived["positions"]

    @property
    def mask(self) -> torch.Tensor | None:
        """``[N + 1, N + 1]`` bool ancestor-or-self mask over the rows; ``None`` for a chain (causal)."""
        return None if self.is_chain else self.tree.ancestor_mask

    @property
    def row_parents(self) -> torch.Tensor | None:
        """``[N + 1]`` int64 parent row of every row (``-1`` for the root); ``None`` for a chain."""
        if self.is_chain:
            return None
        if "row_parents" not in self.derived:
            parents = self.tree.parents
            self.derived["row_parents"] = torch.cat([parents.new_full((1,), -1), parents + 1])
        return self.derived["row_parents"]

    def accepted_rows(self, num_accepted: int, rows: torch.Tensor | None = None) -> int | torch.Tensor:
        """What ``target.commit`` takes for an accepted path: a row count for a chain, else the rows.

        Args:
            num_accepted: accepted draft tokens ``n``.
            rows: ``[n + 1]`` ascending accepted rows (root row 0 first); required for a tree.
        """
        if self.is_chain:
            return num_accepted + 1
        if rows is None:
            raise ValueError("rows: expected the accepted rows [n + 1] of a tree plan, got None")
        return rows
