"""The ``Target`` protocol: everything a verifier, a drafter or the decode loop may ask of a target."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from specdec.contracts.plan import VerifyPlan


@dataclass
class TargetOutput:
    """Result of a target forward.

    Attributes:
        logits: ``[B, T, V]`` float32.
        hidden: hidden states after the requested layers, each ``[B, T, hidden_size]``, in the order
            of ``hidden_layers`` (layer ``i`` means the output of decoder layer ``i``; ``0`` is the
            embedding output, HF's ``hidden_states[i]`` convention; the last layer's, like HF's, is
            taken after the final norm).

    Example:
        >>> TargetOutput(logits=torch.zeros(1, 2, 5)).hidden
        ()
    """

    logits: torch.Tensor
    hidden: tuple[torch.Tensor, ...] = ()


@runtime_checkable
class Target(Protocol):
    """A model with a batch-1 cache of ``length`` committed tokens that verifiers drive.

    The cycle of one round: :meth:`run_plan` (or :meth:`forward`) writes the rows of a verify pass to
    *scratch* slots ``[length, length + T)`` without committing them; :meth:`commit` keeps the accepted
    rows (compacting K/V, replaying recurrent state along the accepted path) and advances ``length``;
    :meth:`discard` drops the scratch rows instead. A second forward before a commit overwrites the
    scratch rows, so a pass that must never change the cache (a two-level Q pass) simply is not
    committed.

    Members:
        config: the model's shape (``num_layers``, ``vocab_size``, ...).
        max_seq_len, length: cache capacity and committed tokens.
        vocab_size, device, dtype: of the logits' vocabulary and the weights.
        supports_trees: whether :meth:`run_plan` accepts non-chain plans (an HF adapter does not).
        weight_views: the weight views :meth:`run_plan` / :meth:`forward` accept: ``"exact"`` always;
            ``"q"`` where the target has the 8-bit A+E view that a two-level Q pass reads. The rows of a
            non-exact forward can only be discarded: :meth:`commit` raises ``RuntimeError``.
        room(): tokens that still fit.
        reset(), truncate(length): forget all / roll back to ``length`` committed tokens.
        forward(tokens [1, T], positions [1, T] | None, mask [T, T] | None, *, hidden_layers,
            tree_parents [T] | None, view) -> :class:`TargetOutput` with logits ``[1, T, V]``.
        run_plan(plan, *, hidden_layers, view) -> :class:`TargetOutput`: the forward of a :class:`VerifyPlan`.
        commit(accepted): ``n`` keeps the first ``n`` scratch rows; ``[n]`` int64 keeps those rows.
        discard(): drop the scratch rows of the last forward.

    Example:
        >>> from specdec.testing import tiny_target
        >>> isinstance(tiny_target(seed=0), Target)
        True
    """

    config: Any
    max_seq_len: int
    length: int

    @property
    def vocab_size(self) -> int:
        """``V``, the size of the logits' last dimension (int)."""

    @property
    def device(self) -> torch.device:
        """The device of the weights, the cache and every tensor the target returns (:class:`torch.device`)."""

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the weights and hidden states (logits are always float32) (:class:`torch.dtype`)."""

    @property
    def supports_trees(self) -> bool:
        """Whether :meth:`run_plan` and :meth:`forward` accept tree plans, masks and ``tree_parents`` (bool)."""

    @property
    def weight_views(self) -> tuple[str, ...]:
        """The ``view`` values :meth:`forward` and :meth:`run_plan` accept: ``("exact",)`` or ``("exact", "q")``.

        Example:
            >>> from specdec.testing import tiny_target
            >>> tiny_target(seed=0).weight_views
            ('exact', 'q')
        """

    def room(self) -> int:
        """Tokens that still fit in the cache: ``max_seq_len - length``.

        Example:
            >>> from specdec.testing import tiny_target
            >>> tiny_target(seed=0, max_seq_len=64).room()
            64
        """

    def reset(self) -> None:
        """Forget every committed token (``length`` becomes 0); called once per request.

        Example:
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> _ = target.forward(torch.tensor([[1, 2]])); target.commit(2); target.reset(); target.length
            0
        """

    def truncate(self, length: int) -> None:
        """Roll back to the first ``length`` committed tokens (``0 <= length <= self.length``, else ``ValueError``).

        Example:
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> _ = target.forward(torch.tensor([[1, 2, 3]])); target.commit(3); target.truncate(1); target.length
            1
        """

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        hidden_layers: Sequence[int] = (),
        tree_parents: torch.Tensor | None = None,
        view: str = "exact",
    ) -> TargetOutput:
        """Run ``T`` rows after the committed prefix, writing them to scratch slots (nothing is committed).

        Args:
            tokens: ``[1, T]`` int64 on :attr:`device`.
            positions: ``[1, T]`` int64 RoPE positions; ``None`` = ``length + arange(T)`` (a chain), or
                ``length + depth`` when ``tree_parents`` is given.
            mask: ``[T, T]`` bool, which new rows each row attends to (the committed prefix is always
                visible); ``None`` = causal, or the ancestor-or-self mask of ``tree_parents``.
            hidden_layers: HF ``hidden_states`` indices to return (0 = embeddings).
            tree_parents: ``[T]`` int64 parent row of each row (``-1``: a child of the committed prefix), which
                recurrent layers follow and which gives what ``positions`` and ``mask`` leave out; ``None`` for
                a chain. A given ``mask`` must be its ancestor-or-self mask. A target without trees
                (``supports_trees`` False) refuses it.
            view: one of :attr:`weight_views`; ``"q"`` runs the 8-bit weight view (a proposal pass whose
                rows are never committed).

        Returns:
            :class:`TargetOutput` with float32 ``logits [1, T, V]`` and one ``[1, T, hidden_size]`` per
            entry of ``hidden_layers``.

        Example:
            >>> from specdec.testing import tiny_target
            >>> out = tiny_target(seed=0).forward(torch.tensor([[1, 2, 3]]), hidden_layers=(0,))
            >>> out.logits.shape, out.hidden[0].shape
            (torch.Size([1, 3, 97]), torch.Size([1, 3, 32]))
        """

    def run_plan(self, plan: VerifyPlan, *, hidden_layers: Sequence[int] = (), view: str = "exact") -> TargetOutput:
        """The :meth:`forward` of a :class:`VerifyPlan`'s rows, positions, mask and row parents (in weight ``view``).

        Returns:
            :class:`TargetOutput` with ``logits [1, N + 1, V]``, one row per plan row.

        Example:
            >>> from specdec.testing import tiny_target
            >>> plan = VerifyPlan.chain(torch.tensor([3]), torch.tensor([4, 5]), prefix_len=0)
            >>> tiny_target(seed=0).run_plan(plan).logits.shape
            torch.Size([1, 3, 97])
        """

    def commit(self, accepted: int | torch.Tensor) -> None:
        """Keep rows of the last forward and advance ``length`` by their count; the other scratch rows are dropped.

        Args:
            accepted: an int ``n`` keeps the first ``n`` rows; an int64 tensor ``[n]`` of ascending row
                indices keeps those rows (an accepted tree path, as :meth:`VerifyPlan.accepted_rows` gives).

        Example:
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> _ = target.forward(torch.tensor([[1, 2, 3]])); target.commit(2); target.length
            2
        """

    def discard(self) -> None:
        """Drop the scratch rows of the last forward; ``length`` and the committed cache are unchanged.

        Example:
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> _ = target.forward(torch.tensor([[1, 2, 3]])); target.discard(); target.length
            0
        """


_MEMBERS = (
    "commit",
    "config",
    "device",
    "discard",
    "dtype",
    "forward",
    "length",
    "max_seq_len",
    "reset",
    "room",
    "run_plan",
    "supports_trees",
    "truncate",
    "vocab_size",
    "weight_views",
)


def check_target(target: object, *, name: str = "target") -> Target:
    """Return ``target`` when it implements :class:`Target`, else raise ``TypeError`` naming what is missing.

    Members are looked up statically (class attributes, properties and instance attributes; a
    ``__getattr__`` fallback does not count), which is what ``isinstance(x, Target)`` does from Python
    3.12 on; this check gives the same answer on every Python version.

    Example:
        >>> check_target(object())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: target: expected a specdec Target (specdec.contracts.Target), got object missing commit, config, ...
    """
    missing = []
    for member in _MEMBERS:
        try:
            inspect.getattr_static(target, member)
        except AttributeError:
            missing.append(member)
    if missing:
        raise TypeError(
            f"{name}: expected a specdec Target (specdec.contracts.Target), got {type(target).__name__} missing {', '.join(missing)}"
        )
    return target
