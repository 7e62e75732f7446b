"""Where a round's feature rows go in a block drafter's cache, checked before anything changes.

Features cover ``context[:-1]`` (the newest token, the block's anchor, has none yet): a round brings
the rows committed since the previous one, and the cache keeps its longest prefix that they continue
(rows taken back by a rejection are dropped and sent again).
"""

from __future__ import annotations

import torch

__all__ = ["check_features", "kept_rows"]


def check_features(target_hidden: torch.Tensor | None, taps: int, hidden_size: int, *, name: str = "target_hidden") -> int:
    """Rows of ``target_hidden [rows, taps, H]`` (0 for ``None``); ``ValueError`` naming ``name`` for another shape.

    Example:
        >>> check_features(torch.zeros(3, 2, 8), 2, 8), check_features(None, 2, 8)
        (3, 0)
    """
    if target_hidden is None:
        return 0
    if target_hidden.ndim != 3 or target_hidden.shape[1] != taps or target_hidden.shape[2] != hidden_size:
        raise ValueError(f"{name}: expected [rows, {taps}, {hidden_size}] (rows, taps, hidden), got {tuple(target_hidden.shape)}")
    return target_hidden.shape[0]


def kept_rows(cached: int, rows: int, context_len: int, *, name: str = "target_hidden") -> int:
    """Cached rows to keep so that ``rows`` new feature rows end at row ``context_len - 2`` (before the anchor).

    Raises ``ValueError`` naming ``name`` when the rows cannot continue the cache (a gap) or exceed the context.

    Example:
        >>> kept_rows(cached=10, rows=3, context_len=12)     # 2 cached rows were rejected: crop to 8
        8
        >>> kept_rows(cached=5, rows=1, context_len=12)
        Traceback (most recent call last):
        ...
        ValueError: target_hidden: the drafter holds features of 5 rows and got 1 more, but the context has 11 committed rows before the anchor; pass the rows committed since the previous call
    """
    keep = min(cached, context_len - 1 - rows)
    if keep < 0:
        raise ValueError(
            f"{name}: {rows} feature rows for a context of {context_len} tokens (expected at most {context_len - 1})"
        )
    if keep + rows != context_len - 1:
        raise ValueError(
            f"{name}: the drafter holds features of {cached} rows and got {rows} more, but the context has "
            f"{context_len - 1} committed rows before the anchor; pass the rows committed since the previous call"
        )
    return keep
