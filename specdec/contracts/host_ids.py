"""Python ints to a host int64 tensor at the cost of a copy of their bytes.

Drafters that look tokens up on the host and an engine that decides greedy rounds on Python ints turn
short lists of ids into tensors every round. ``torch.tensor(ids)`` reads a list element by element
through its generic sequence path; here ``array.array`` packs the ints in C and ``torch.frombuffer``
wraps its bytes.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import torch

__all__ = ["ids_tensor"]


def ids_tensor(ids: Sequence[int]) -> torch.Tensor:
    """``[len(ids)]`` int64 host tensor of ``ids``, equal to ``torch.tensor(ids, dtype=torch.long)`` (its own storage).

    Example:
        >>> ids_tensor([3, 1, 4]), ids_tensor([]).shape
        (tensor([3, 1, 4]), torch.Size([0]))
    """
    if not ids:
        return torch.empty(0, dtype=torch.long)
    return torch.frombuffer(array("q", ids), dtype=torch.long)
