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

The commits of a bucketed forward (:mod:`~specdec.models.ragged_hybrid_static`) run as one fixed-shape body
:func:`commit_body` over ``[Bb, Lb]`` (requests and path length from the target's row buckets; padding requests
commit into the scratch slot, padding path entries are ``-1`` and move nothing), captured as a CUDA graph per
``(forward bucket, Bb, Lb)`` when the target replays graphs: the stash it reads is that forward graph's output, at
fixed addresses. The commits of an eager forward run the same body at their own shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec.kernels.gdn import gdn_tree_commit
from specdec.kernels.gdn.path import gdn_tree_commit_triton
from specdec.models.graphs import pick_bucket
from specdec.models.hybrid import conv_state_commit_static
from specdec.models.ragged_hybrid_static import scratch_slot

__all__ = ["PendingCommit", "commit_body", "flush_commits"]


@dataclass(frozen=True)
class PendingCommit:
    """One request's checked commit, not yet written.

    Attributes:
        slot: the request slot.
        cur, nxt: the ring entries read (the committed states the forward started from) and written.
        stash: per GDN layer the packed forward's rows ``(mixed [R, C], k [R, Hk, dk], v [R, Hv, dv],
            g [R, Hv], beta [R, Hv])``.
        kv: per attention layer the forward's K/V rows ``[R, Hkv, D]`` (a bucketed forward), or ``None`` (the
            commit moves rows within the cache).
        start: the request's first row in the packed forward.
        bucket: the forward's static key, or ``None`` for an eager forward.
        rows: the accepted rows of the request's forward, root to leaf (non-empty, ascending).
        length: the slot's committed length before the commit (where its new rows' K/V sit).
    """

    slot: int
    cur: int
    nxt: int
    stash: Sequence[tuple[torch.Tensor, ...]]
    kv: Sequence[tuple[torch.Tensor, torch.Tensor]] | None
    start: int
    bucket: tuple | None
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
    """The commits of one packed forward (they share its stash): at a bucketed shape when the forward had one."""
    device, bucket = ragged.device, pending[0].bucket
    count, width = len(pending), max(len(p.rows) for p in pending)
    key = None
    if bucket is not None:
        count_b, width_b = pick_bucket(ragged.row_buckets, count), pick_bucket(ragged.row_buckets, width)
        if count_b is not None and width_b is not None:
            key, count, width = ("commit", bucket, count_b, width_b), count_b, width_b
    scratch = scratch_slot(ragged)
    # per request: its accepted rows in the packed forward, a chain over them, and the cache positions its K/V rows
    # sit at; padding entries (path -1) are masked in the body, so they hold 0
    rows, chain, source = [], [], []
    for p in pending:
        pad = width - len(p.rows)
        rows += [p.start + r for r in p.rows] + [0] * pad
        chain += list(range(len(p.rows))) + [-1] * pad
        source += [p.length + r for r in p.rows] + [0] * pad
    pad = count - len(pending)  # padding requests: the scratch slot, ring entry 0 into 1, nothing accepted
    rows += [0] * (pad * width)
    chain += [-1] * (pad * width)
    source += [0] * (pad * width)
    where = [p.slot for p in pending] + [scratch] * pad
    where += [p.cur for p in pending] + [0] * pad
    where += [p.nxt for p in pending] + [1] * pad
    lengths = [p.length for p in pending] + [0] * pad
    host = torch.tensor([*rows, *chain, *source, *where, *lengths], dtype=torch.long)
    stash, kv = pending[0].stash, pending[0].kv
    if key is None:
        index = host.to(device)
    else:
        index = ragged._graphs.buffers(key, lambda: {"index": torch.zeros(host.numel(), dtype=torch.long)})["index"]
        index.copy_(host, non_blocking=True)
    n = count * width
    packed_rows, path, src = (index[i * n : (i + 1) * n].view(count, width) for i in range(3))
    slot, cur, nxt, length = index[3 * n :].view(4, count)
    moves = any(r != j for p in pending for j, r in enumerate(p.rows))

    def body():
        commit_body(
            ragged, stash, packed_rows, path, slot, cur, nxt, length, src, kv=kv if key is not None else None, move_kv=moves
        )

    if key is None:
        body()
    else:
        ragged._graphs.run(key, body)


def commit_body(ragged, stash, packed_rows, path, slot, cur, nxt, length, src, *, kv=None, move_kv: bool) -> None:
    """The commits on explicit tensors: what a CUDA graph captures for a bucketed forward.

    Args:
        ragged: the target (its ring entries and KV caches are written).
        stash: per GDN layer the forward's packed rows ``(mixed, k, v, g, beta)``, each ``[R, ...]``.
        packed_rows: ``[B, L]`` int64 the accepted rows' packed indices (any row where ``path`` is ``-1``).
        path: ``[B, L]`` int64 ``0 .. n_b - 1`` then ``-1``: a chain over the gathered rows.
        slot, cur, nxt: ``[B]`` int64 each request's slot and the ring entries read and written.
        length: ``[B]`` int64 the committed lengths before the commit.
        src: ``[B, L]`` int64 the cache position each accepted row's K/V sits at, 0 where ``path`` is ``-1`` (read
            where ``kv`` is ``None``).
        kv: per attention layer the forward's K/V rows ``[R, Hkv, D]``: every accepted row is written from them
            to ``length + j`` (so running the body twice writes the same); ``None``: rows move within the cache,
            and only when ``move_kv`` (an eager batch of chain commits moves nothing).

    Entries where ``path`` is ``-1`` write position 0 of the scratch slot (``S``), which no request reads.
    """
    triton = ragged.target._triton(path.device)
    path32 = path.to(torch.int32) if triton else None
    for g, (mixed, k, v, gate, beta) in enumerate(stash):
        state = ragged.recurrent[slot, cur, g]  # [B, Hv, dk, dv]
        k_b, v_b, gate_b, beta_b = k[packed_rows], v[packed_rows], gate[packed_rows], beta[packed_rows]  # [B, L, ...]
        new = torch.empty_like(state)
        if triton:
            gdn_tree_commit_triton(k_b, v_b, gate_b, beta_b, path32, state, new, use_qk_l2norm=True)
        else:
            gdn_tree_commit(k_b, v_b, gate_b, beta_b, path, state, backend="torch", out=new)
        ragged.recurrent[slot, nxt, g] = new
        ragged.conv[slot, nxt, g] = conv_state_commit_static(mixed[packed_rows], path, ragged.conv[slot, cur, g])
    if kv is None and not move_kv:
        return
    valid = path >= 0
    at = torch.where(valid, slot[:, None], scratch_slot(ragged))
    dst = torch.where(valid, length[:, None] + torch.arange(path.shape[1], device=path.device), 0)
    for a, (k_cache, v_cache) in enumerate(zip(ragged.k_caches, ragged.v_caches)):
        if kv is None:  # a tree path that is not a prefix of the forward's rows: its K/V rows move down
            k_rows, v_rows = k_cache[at, :, src], v_cache[at, :, src]
        else:
            k_rows, v_rows = kv[a][0][packed_rows], kv[a][1][packed_rows]
        k_cache[at, :, dst] = k_rows
        v_cache[at, :, dst] = v_rows
