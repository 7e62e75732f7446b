"""The ``Target`` protocol: everything a verifier, a drafter or the decode loop may ask of a target."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

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
        room(): tokens that still fit.
        reset(), truncate(length): forget all / roll back to ``length`` committed tokens.
        forward(tokens [1, T], positions [1, T] | None, mask [T, T] | None, *, hidden_layers,
            tree_parents [T] | None) -> :class:`TargetOutput` with logits ``[1, T, V]``.
        run_plan(plan, *, hidden_layers) -> :class:`TargetOutput`: the forward of a :class:`VerifyPlan`.
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
    def vocab_size(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def supports_trees(self) -> bool: ...

    def room(self) -> int: ...

    def reset(self) -> None: ...

    def truncate(self, length: int) -> None: ...

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        hidden_layers: Sequence[int] = (),
        tree_parents: torch.Tensor | None = None,
    ) -> TargetOutput: ...

    def run_plan(self, plan: VerifyPlan, *, hidden_layers: Sequence[int] = ()) -> TargetOutput: ...

    def commit(self, accepted: int | torch.Tensor) -> None: ...

    def discard(self) -> None: ...


_MEMBERS = ("commit", "config", "device", "discard", "dtype", "forward", "length", "max_seq_len", "reset", "room",
            "run_plan", "supports_trees", "truncate", "vocab_size")


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
