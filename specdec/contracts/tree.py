"""Draft trees: tokens and parent pointers, their ancestor mask and positions.

Row convention shared by every consumer: verify row 0 is the root (the newest emitted token, not yet in
the cache); node ``i`` is row ``i + 1``; ``parents[i] == -1`` means "child of the root".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import torch


def _as_long_vector(name: str, value) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        try:  # no dtype given: floats stay floats and are refused below, not cut to ints
            value = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{name}: expected a 1-D integer tensor or a list of ints, got {type(value).__name__}") from err
        if value.ndim == 0:
            value = value.view(1)
        if value.numel() == 0:
            value = value.long()
    if value.dtype == torch.bool or value.is_floating_point() or value.is_complex():
        raise TypeError(f"{name}: expected an integer dtype, got {value.dtype}")
    if value.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D tensor [N], got shape {tuple(value.shape)}")
    return value.long()


@dataclass(frozen=True, eq=False)
class Tree:
    """A tree of draft tokens hanging under the root row, nodes in topological order.

    Attributes:
        tokens: ``[N]`` int64 token of each node.
        parents: ``[N]`` int64 parent node of each node, ``-1`` for a child of the root (the committed
            prefix's newest token); ``parents[i] < i``, so every parent comes before its children.
        scores: ``[N]`` optional float score of each node (:func:`best_first_tree` stores the summed
            draft log-prob of the node's path).
        depth: ``[N]`` int64, computed: 1 for children of the root, ``depth[parent] + 1`` below.
        max_depth: host int, the largest depth (0 for an empty tree).
        is_chain: host bool, every node's parent is the node before it (a single path).

    Siblings may repeat a token (wasteful but legal): the walks always follow the first such child.

    Example:
        >>> tree = Tree(tokens=[7, 8, 9], parents=[-1, -1, 0])   # root -> 7 -> 9, root -> 8
        >>> tree.depth.tolist(), tree.max_depth
        ([1, 1, 2], 2)
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    scores: torch.Tensor | None = None
    depth: torch.Tensor = field(init=False)
    max_depth: int = field(init=False)
    is_chain: bool = field(init=False)

    def __post_init__(self) -> None:
        tokens = _as_long_vector("tokens", self.tokens)
        parents = _as_long_vector("parents", self.parents)
        n = tokens.numel()
        if parents.numel() != n:
            raise ValueError(f"parents: expected the same length as tokens ({n}), got {parents.numel()}")
        if parents.device != tokens.device:
            raise ValueError(f"parents: expected the device of tokens ({tokens.device}), got {parents.device}")
        if n and int(tokens.min()) < 0:
            bad = int((tokens < 0).nonzero()[0, 0])
            raise ValueError(f"tokens: expected token ids >= 0, got tokens[{bad}] = {int(tokens[bad])}")
        if self.scores is not None:
            scores = self.scores
            if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
                got = getattr(scores, "dtype", type(scores).__name__)
                raise TypeError(f"scores: expected a float tensor [N] or None, got {got}")
            if tuple(scores.shape) != (n,):
                raise ValueError(f"scores: expected shape ({n},), got {tuple(scores.shape)}")
        # Parents are read on the host once: depth needs a walk in topological order anyway.
        depth: list[int] = []
        for i, p in enumerate(parents.tolist()):
            if not -1 <= p < n:
                raise ValueError(
                    f"parents[{i}] = {p} is out of range: expected -1 (child of the root) or a node index in [0, {n})"
                )
            if p >= i:
                raise ValueError(
                    f"parents[{i}] = {p}: a parent must come before its child (expected parents[i] < i, "
                    f"node {p} comes at or after node {i})"
                )
            depth.append(1 if p < 0 else depth[p] + 1)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "depth", torch.tensor(depth, dtype=torch.long, device=tokens.device))
        object.__setattr__(self, "max_depth", max(depth, default=0))
        object.__setattr__(self, "is_chain", max(depth, default=0) == n)

    @classmethod
    def chain(cls, tokens) -> Tree:
        """The tree of a single chain ``d_1, ..., d_k`` (``parents = [-1, 0, 1, ..., k-2]``).

        Example:
            >>> Tree.chain([4, 5, 6]).parents.tolist()
            [-1, 0, 1]
        """
        tokens = _as_long_vector("tokens", tokens)
        parents = torch.arange(-1, tokens.numel() - 1, device=tokens.device)
        return cls(tokens=tokens, parents=parents)

    @classmethod
    def _unchecked_chain(cls, tokens: torch.Tensor) -> Tree:
        """:meth:`chain` without reading the tokens back to the host (no sync on an accelerator).

        For the verify plan of every round: a chain's parents are valid by construction and its token
        ids were range-checked by :meth:`DraftProposal.validate`, so the host walk of ``__post_init__``
        would only add a device-to-host read to the hot path.
        """
        n = tokens.numel()
        device = tokens.device
        return cls._unchecked(tokens, torch.arange(-1, n - 1, device=device), torch.arange(1, n + 1, device=device), n, True)

    @classmethod
    def _unchecked(cls, tokens: torch.Tensor, parents: torch.Tensor, depth: torch.Tensor, max_depth: int, is_chain: bool) -> Tree:
        """A tree from fields already known to be consistent (no validation, no device-to-host read).

        For trees assembled from checked parts inside a round (a chain, or a chain joined with a checked
        subtree), whose parents, depths and token ids are valid by construction.
        """
        tree = object.__new__(cls)
        object.__setattr__(tree, "tokens", tokens.long())
        object.__setattr__(tree, "parents", parents)
        object.__setattr__(tree, "scores", None)
        object.__setattr__(tree, "depth", depth)
        object.__setattr__(tree, "max_depth", max_depth)
        object.__setattr__(tree, "is_chain", is_chain)
        return tree

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]], *, device: torch.device | str | None = None) -> Tree:
        """Merge several continuations into a trie (shared prefixes share nodes).

        Nodes are numbered in first-seen order, so the first path is the spine ``0, 1, ...``.

        Example:
            >>> t = Tree.from_paths([[5, 6, 7], [5, 8], [9]])
            >>> t.tokens.tolist(), t.parents.tolist()
            ([5, 6, 7, 8, 9], [-1, 0, 1, 0, -1])
        """
        tokens: list[int] = []
        parents: list[int] = []
        index: dict[tuple[int, int], int] = {}
        for path in paths:
            node = -1
            for tok in path:
                tok = int(tok)
                child = index.get((node, tok))
                if child is None:
                    child = len(tokens)
                    index[(node, tok)] = child
                    tokens.append(tok)
                    parents.append(node)
                node = child
        return cls(
            tokens=torch.tensor(tokens, dtype=torch.long, device=device),
            parents=torch.tensor(parents, dtype=torch.long, device=device),
        )

    @property
    def num_nodes(self) -> int:
        """``N``, the number of draft nodes (the root row not counted) (int)."""
        return int(self.tokens.numel())

    def __len__(self) -> int:
        return self.num_nodes

    @property
    def device(self) -> torch.device:
        """The device of :attr:`tokens` and :attr:`parents` (:class:`torch.device`)."""
        return self.tokens.device

    @cached_property
    def ancestor_mask(self) -> torch.Tensor:
        """``[N + 1, N + 1]`` bool, cached: :func:`tree_attention_mask` of this tree."""
        return _ancestor_mask(self)

    def path(self, node: int) -> list[int]:
        """Node indices from the root's child down to ``node`` (inclusive).

        Example:
            >>> Tree(tokens=[7, 8, 9], parents=[-1, -1, 1]).path(2)
            [1, 2]
        """
        if not 0 <= node < self.num_nodes:
            raise ValueError(f"node: expected an index in [0, {self.num_nodes}), got {node}")
        parents = self.parents.tolist()
        out = []
        while node >= 0:
            out.append(node)
            node = parents[node]
        return out[::-1]

    def first_path(self) -> list[int]:
        """Node indices of the first root-to-leaf path: from the root, the first child (lowest index) at each depth.

        Example:
            >>> Tree(tokens=[7, 8, 9, 6], parents=[-1, -1, 1, 0]).first_path()
            [0, 3]
        """
        first_child: dict[int, int] = {}
        for node, parent in enumerate(self.parents.tolist()):
            first_child.setdefault(parent, node)
        out, node = [], -1
        while node in first_child:
            node = first_child[node]
            out.append(node)
        return out

    def truncate(self, num_nodes: int) -> Tree:
        """The first ``num_nodes`` nodes (still a tree: parents come first).

        For a tree from :func:`best_first_tree` this is exactly the best ``num_nodes`` prefixes.
        """
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 0:
            raise ValueError(f"num_nodes: expected an int >= 0, got {num_nodes!r}")
        if num_nodes >= self.num_nodes:
            return self
        scores = None if self.scores is None else self.scores[:num_nodes]
        return Tree(tokens=self.tokens[:num_nodes], parents=self.parents[:num_nodes], scores=scores)

    def reorder(self, order: Sequence[int]) -> Tree:
        """The same tree with its nodes renumbered: node ``i`` of the result is node ``order[i]`` of this one.

        Tokens, parent links and scores move with their nodes; ``order`` must keep every parent before its
        children (the tree then has the same root paths, so a walk accepts the same tokens).

        Raises:
            ValueError: ``order`` is not a permutation of ``range(N)``, or puts a node before its parent.

        Example:
            >>> tree = Tree.from_paths([[5, 6, 7], [9]])             # 9 is node 3, a child of the root
            >>> moved = tree.reorder([0, 3, 1, 2])
            >>> moved.tokens.tolist(), moved.parents.tolist()
            ([5, 9, 6, 7], [-1, -1, 0, 2])
        """
        n = self.num_nodes
        order = [int(i) for i in order]
        if sorted(order) != list(range(n)):
            raise ValueError(f"order: expected a permutation of range({n}) (one entry a node), got {order}")
        position = [0] * n
        for new, old in enumerate(order):
            position[old] = new
        old_parents = self.parents.tolist()
        parents = [-1 if old_parents[old] < 0 else position[old_parents[old]] for old in order]
        late = [(order[i], order[p]) for i, p in enumerate(parents) if p >= i]
        if late:
            node, parent = late[0]
            raise ValueError(f"order: node {node} would come before its parent {parent} (expected parents first)")
        index = torch.tensor(order, dtype=torch.long, device=self.device)
        scores = None if self.scores is None else self.scores[index]
        return Tree(tokens=self.tokens[index], parents=torch.tensor(parents, dtype=torch.long, device=self.device), scores=scores)

    def to(self, device: torch.device | str) -> Tree:
        """The same tree with ``tokens``, ``parents`` and ``scores`` on ``device`` (``self`` when already there).

        Example:
            >>> tree = Tree.chain([4, 5])
            >>> tree.to("cpu") is tree          # already there: no copy
            True
        """
        if torch.device(device) == self.device:
            return self
        scores = None if self.scores is None else self.scores.to(device)
        return Tree(tokens=self.tokens.to(device), parents=self.parents.to(device), scores=scores)

    def check_fits(self, room: int, *, name: str = "tree") -> None:
        """Raise ``ValueError`` unless the verify rows ``[root] + nodes`` fit in ``room`` cache slots.

        A verify forward writes all ``N + 1`` rows (and reaches position ``prefix + max_depth``), so
        the binding limit is the row count; the message names both.
        """
        rows = self.num_nodes + 1
        if rows > room:
            raise ValueError(
                f"{name}: {self.num_nodes} nodes (depth {self.max_depth}) need {rows} cache rows with the root, "
                f"but only {room} are left; use a smaller budget or a longer max_seq_len"
            )

    def __repr__(self) -> str:
        return (
            f"Tree(num_nodes={self.num_nodes}, max_depth={self.max_depth}, "
            f"tokens={self.tokens.tolist()}, parents={self.parents.tolist()})"
        )


def _ancestor_mask(tree: Tree) -> torch.Tensor:
    rows = tree.num_nodes + 1
    device = tree.device
    # parent row of every row; the root row points at itself so repeated jumps stay put
    jump = torch.cat([torch.zeros(1, dtype=torch.long, device=device), tree.parents + 1])  # [N + 1]
    mask = torch.eye(rows, dtype=torch.bool, device=device)  # [N + 1, N + 1]
    # Pointer doubling: after r rounds every row holds its ancestors up to 2^r - 1 hops away.
    reach = 0
    while reach < tree.max_depth:
        mask = mask | mask[jump]
        jump = jump[jump]
        reach = 2 * reach + 1
    return mask


def tree_attention_mask(tree: Tree) -> torch.Tensor:
    """``[N + 1, N + 1]`` bool over the verify rows ``[root, node_0, ...]``: ancestors-or-self.

    Row ``r`` may attend row ``c`` iff ``c`` is ``r`` or one of its ancestors (the root row 0 is an
    ancestor of every node). The committed prefix is not part of this matrix: it is visible to every
    row (the target adds it). See :class:`TreeVerifier` for a drawing.

    Example:
        >>> tree_attention_mask(Tree(tokens=[7, 8, 9], parents=[-1, -1, 0])).int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [1, 0, 1, 0],
                [1, 1, 0, 1]], dtype=torch.int32)
    """
    if not isinstance(tree, Tree):
        raise TypeError(f"tree: expected a Tree, got {type(tree).__name__}")
    return _ancestor_mask(tree)


def tree_positions(tree: Tree, prefix_len: int) -> torch.Tensor:
    """``[N + 1]`` int64 RoPE positions of the verify rows: ``prefix_len + depth`` (root depth 0).

    Positions follow depth, not the flattened row index: siblings share a position.

    Example:
        >>> tree_positions(Tree(tokens=[7, 8, 9], parents=[-1, -1, 0]), prefix_len=10).tolist()
        [10, 11, 11, 12]
    """
    if not isinstance(tree, Tree):
        raise TypeError(f"tree: expected a Tree, got {type(tree).__name__}")
    if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 0:
        raise ValueError(f"prefix_len: expected an int >= 0, got {prefix_len!r}")
    zero = torch.zeros(1, dtype=torch.long, device=tree.device)
    return prefix_len + torch.cat([zero, tree.depth])
