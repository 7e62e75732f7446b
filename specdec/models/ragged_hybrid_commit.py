"""The commits of a ``"packed"`` :class:`~specdec.models.ragged_hybrid.RaggedHybridTarget` forward, batched.

After a packed forward every request commits its own accepted path, one call each. What a commit writes
(per GDN layer the path's replay into a new ring entry of recurrent and conv state; for a tree path that
is not a prefix, the K/V rows moved into place) is the same work for every request, so
:meth:`RaggedHybridTarget.commit <specdec.models.ragged_hybrid.RaggedHybridTarget.commit>` checks the
path and moves the slot's bookkeeping at once (its length, its ring entry) and leaves a
:class:`PendingCommit`; :func:`flush_commits` writes all of them with ONE call of the commit kernels per
GDN layer over every request, and one K/V move per attention layer. The target flushes before anything
reads a slot's states or caches (the next forward, a truncate, a reset, a state read).

Each request's accepted rows are gathered out of the packed forward's stash, so the kernels see a chain
``[B, L]`` (row ``j`` of request ``b`` is its path's ``j``-th node, ``-1`` padding after it): the replay is
the one the batch-1 commit runs over the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec.kernels.gdn import gdn_tree_commit
from specdec.kernels.gdn.path import gdn_tree_commit_triton
from specdec.models.hybrid import conv_state_commit_static

__all__ = ["PendingCommit", "flush_commits"]


@dataclass(frozen=True)
class PendingCommit:
    """One request's checked commit, not yet written.

    Attributes:
        slot: the request slot.
        cur, nxt: the ring entries read (the committed states the forward started from) and written.
        stash: per GDN layer the packed forward's rows ``(mixed [R, C], k [R, Hk, dk], v [R, Hv, dv],
            g [R, Hv], beta [R, Hv])``.
        start: the request's first row in the packed forward.
        rows: the accepted rows of the request's forward, root to leaf (non-empty, ascending).
        length: the slot's committed length before the commit (where its new rows' K/V sit).
    """

    slot: int
    cur: int
    nxt: int
    stash: Sequence[tuple[torch.Tensor, ...]]
    start: int
    rows: tuple[int, ...]
    length: int


def flush_commits(ragged, pending: Sequence[PendingCommit]) -> None:
    """Write ``pending`` commits into ``ragged``'s ring entries and KV caches, one batch per packed forward.

    Args:
        ragged: the :class:`~specdec.models.ragged_hybrid.RaggedHybridTarget` (its ``recurrent [S, ring, G, Hv,
            dk, dv]``, ``conv [S, ring, G, C, W - 1]``, ``k_caches`` / ``v_caches [S, Hkv, max_seq_len, D]``).
        pending: at most one commit per slot (usually all of one forward's requests).

    Example:
        >>> from specdec.testing import tiny_target
        >>> from specdec.models.ragged_hybrid import RaggedHybridTarget
        >>> from specdec.models.slots import RequestRows
        >>> ragged = RaggedHybridTarget(tiny_target("qwen3_5_text", seed=0), slots=2, layout="packed")
        >>> _ = ragged.forward([RequestRows(0, torch.tensor([[1, 2]])), RequestRows(1, torch.tensor([[3]]))])
        >>> ragged.commit(0, 2); ragged.commit(1, 1); len(ragged._pending)     # checked, not yet written
        2
        >>> ragged.recurrent_states(0).shape, len(ragged._pending)             # a read writes them first
        (torch.Size([1, 4, 8, 8]), 0)
    """
    batches: dict[int, list[PendingCommit]] = {}
    for commit in pending:
        batches.setdefault(id(commit.stash), []).append(commit)
    for batch in batches.values():
        _write(ragged, batch)


def _write(ragged, pending: Sequence[PendingCommit]) -> None:
    """The commits of one packed forward (they share its stash)."""
    device, target = ragged.device, ragged.target
    width = max(len(p.rows) for p in pending)
    # per request: its accepted rows in the packed forward (padding repeats its first), and a chain over them
    rows = [[p.start + r for r in p.rows] + [p.start] * (width - len(p.rows)) for p in pending]
    chain = [list(range(len(p.rows))) + [-1] * (width - len(p.rows)) for p in pending]
    flat = [r for row in rows for r in row] + [c for row in chain for c in row]
    flat += [p.slot for p in pending] + [p.cur for p in pending] + [p.nxt for p in pending]
    index = torch.tensor(flat, dtype=torch.long).to(device)  # one host-to-device copy
    count = len(pending) * width
    packed_rows, path = index[:count].view(-1, width), index[count : 2 * count].view(-1, width)
    slot, cur, nxt = index[2 * count :].view(3, -1)
    triton = target._triton(device)
    for g, (mixed, k, v, gate, beta) in enumerate(pending[0].stash):
        state = ragged.recurrent[slot, cur, g]  # [B, Hv, dk, dv]
        k_b, v_b, gate_b, beta_b = k[packed_rows], v[packed_rows], gate[packed_rows], beta[packed_rows]  # [B, L, ...]
        new = torch.empty_like(state)
        if triton:
            gdn_tree_commit_triton(k_b, v_b, gate_b, beta_b, path.to(torch.int32), state, new, use_qk_l2norm=True)
        else:
            gdn_tree_commit(k_b, v_b, gate_b, beta_b, path, state, backend="torch", out=new)
        ragged.recurrent[slot, nxt, g] = new
        ragged.conv[slot, nxt, g] = conv_state_commit_static(mixed[packed_rows], path, ragged.conv[slot, cur, g])
    # a tree path that is not a prefix of the forward's rows: its K/V rows move down to follow the prefix
    moves = [(p.slot, p.length + j, p.length + r) for p in pending for j, r in enumerate(p.rows) if r != j]
    if moves:
        at, dst, src = torch.tensor(moves, dtype=torch.long).to(device).unbind(1)
        for k_cache, v_cache in zip(ragged.k_caches, ragged.v_caches):
            k_cache[at, :, dst] = k_cache[at, :, src]
            v_cache[at, :, dst] = v_cache[at, :, src]
