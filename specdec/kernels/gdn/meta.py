"""Tree topology tensors shared by every GDN layer of one verify step, and input checks.

A draft tree of N nodes is given by ``parents [N]`` (or ``[B, N]``): ``parents[i] = -1`` means
node ``i`` hangs directly below the committed prefix, otherwise ``parents[i] < i`` (nodes are in
topological order). Everything in :class:`TreeMeta` depends on the topology only, so a model builds
it once per verify step and passes it to all its GDN layers instead of ``parents``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..backend import BACKENDS, use_triton

__all__ = ["TreeMeta", "build_tree_meta"]

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# the one-program topology kernel holds [N, N] tiles; larger trees use the tensor-op build
_KERNEL_MAX_NODES = 128


@dataclass(frozen=True)
class TreeMeta:
    """Topology of a batch of draft trees, as index tensors on the trees' device.

    Attributes:
        parents (Tensor): ``[B, N]`` int32, ``-1`` for children of the committed prefix.
        ancestors (Tensor): ``[B, N, N]`` int8, ``ancestors[b, i, j] = 1`` iff ``j`` is ``i`` or a
            proper ancestor of ``i`` (lower triangular because of the topological order).
        depth (Tensor): ``[B, N]`` int32, 0 for children of the committed prefix.
        paths (Tensor): ``[B, N, N]`` int32, ``paths[b, i, :depth[b, i] + 1]`` is the root-to-``i``
            node list; the rest is ``-1``.
        leaf_slots (Tensor): ``[B, N]`` int32, the leaves of each tree in ascending order, then
            ``-1``. The path kernel runs one program per leaf.
        emit_from (Tensor): ``[B, N]`` int32, for the leaf in each slot: the first depth on its
            path whose node that leaf's program emits. Every node is emitted by exactly one leaf
            program: the leaf reached by following first children down from the node.
        batched (bool): whether ``parents`` had a batch dimension.

    Example::

        >>> m = build_tree_meta(torch.tensor([-1, 0, 0]))
        >>> m.batch_size, m.num_nodes, m.batched, m.ancestors[0, 2].tolist()   # node 2: itself and its parent 0
        (1, 3, False, [1, 0, 1])
    """

    parents: torch.Tensor
    ancestors: torch.Tensor
    depth: torch.Tensor
    paths: torch.Tensor
    leaf_slots: torch.Tensor
    emit_from: torch.Tensor
    batched: bool

    @property
    def batch_size(self) -> int:
        """``B``, the number of trees (1 for an unbatched ``parents [N]``) (int)."""
        return self.parents.shape[0]

    @property
    def num_nodes(self) -> int:
        """``N``, nodes per tree (int)."""
        return self.parents.shape[1]


def _check_parents(parents: torch.Tensor) -> None:
    if not isinstance(parents, torch.Tensor):
        raise TypeError(f"parents: expected a torch.Tensor or TreeMeta, got {type(parents).__name__}")
    if parents.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        raise TypeError(f"parents: expected an integer dtype, got {parents.dtype}")
    if parents.ndim not in (1, 2):
        raise ValueError(f"parents: expected shape [N] or [B, N], got {tuple(parents.shape)}")
    n = parents.shape[-1]
    if n == 0:
        return
    idx = torch.arange(n, device=parents.device)
    p = parents.to(torch.int64)
    bad = (p < -1) | (p >= idx)
    # one host sync per verify step; the meta is then reused by every layer without checks
    if bool(bad.any()):
        where = bad.reshape(-1, n).nonzero()[0].tolist()
        b, i = where
        raise ValueError(
            "parents: expected topological order with -1 <= parents[i] < i; "
            f"got parents[{f'{b}, ' if parents.ndim == 2 else ''}{i}] = {int(p.reshape(-1, n)[b, i])}"
        )


def build_tree_meta(parents: torch.Tensor, *, validate: bool = True, backend: str = "auto") -> TreeMeta:
    """Builds the layer-invariant topology tensors of one verify step.

    Args:
        parents (Tensor): ``[N]`` or ``[B, N]`` integer parent indices, ``-1`` = child of the
            committed prefix, ``parents[i] < i``.
        validate (bool): check the topological order (one host sync). Default: ``True``.
        backend (str): ``"auto"`` (one Triton kernel on CUDA for N <= 128, tensor ops otherwise),
            ``"triton"`` or ``"torch"``. Both give identical tensors.

    Returns:
        TreeMeta: see its attributes. All index tensors live on ``parents.device``.

    Example::

        >>> m = build_tree_meta(torch.tensor([-1, 0, 0, 1]))
        >>> m.depth.tolist(), m.leaf_slots.tolist()
        ([[0, 1, 1, 2]], [[2, 3, -1, -1]])
        >>> m.paths[0, 3].tolist()
        [0, 1, 3, -1]
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if validate:
        _check_parents(parents)
    n = parents.shape[-1]
    use_kernel = use_triton(backend, parents.device)
    if use_kernel and 0 < n <= _KERNEL_MAX_NODES:
        return _build_tree_meta_triton(parents)
    return _build_tree_meta_torch(parents)


def _build_tree_meta_torch(parents: torch.Tensor) -> TreeMeta:
    batched = parents.ndim == 2
    par = (parents if batched else parents[None]).to(torch.int64)  # [B, N]
    bsz, n = par.shape
    dev = par.device
    idx = torch.arange(n, device=dev)

    # ancestor-or-self closure by repeated squaring of I + E (E[i, parent(i)] = 1): ceil(log2 N)
    # small matmuls, no data-dependent host loop
    edge = torch.zeros(bsz, n, n + 1, device=dev, dtype=torch.float32)
    edge.scatter_(2, torch.where(par >= 0, par, n)[..., None], 1.0)
    reach = edge[..., :n] + torch.eye(n, device=dev)
    for _ in range(max(1, math.ceil(math.log2(max(n, 2))))):
        reach = (torch.bmm(reach, reach) > 0).to(torch.float32)
    anc = reach > 0  # [B, N, N]
    depth = anc.sum(-1) - 1  # [B, N]

    # paths[b, i, d] = the ancestor of i at depth d
    pos = torch.where(anc, anc.cumsum(-1) - 1, n)  # [B, N, N]
    paths = torch.full((bsz, n, n + 1), -1, device=dev, dtype=torch.int64)
    paths.scatter_(2, pos, idx.expand(bsz, n, n).clone())
    paths = paths[..., :n]

    # first child of every node (n = none); chains follow first children down to a leaf
    first_child = torch.full((bsz, n + 1), n, device=dev, dtype=torch.int64)
    first_child.scatter_reduce_(1, torch.where(par >= 0, par, n), idx.expand(bsz, n).clone(), "amin")
    first_child = first_child[:, :n]
    is_leaf = first_child == n
    chain_leaf = torch.where(is_leaf, idx, first_child)
    for _ in range(max(1, math.ceil(math.log2(max(n, 2))))):
        chain_leaf = chain_leaf.gather(1, chain_leaf)
    # leaf l emits the last chain_len(l) nodes of its path
    chain_len = torch.zeros(bsz, n, device=dev, dtype=torch.int64)
    chain_len.scatter_add_(1, chain_leaf, torch.ones_like(chain_leaf))
    key = torch.where(is_leaf, idx, n + idx)
    key, order = key.sort(dim=1)
    leaf_slots = torch.where(key < n, order, -1)
    emit_from = torch.where(
        leaf_slots >= 0,
        depth.gather(1, leaf_slots.clamp(min=0)) - chain_len.gather(1, leaf_slots.clamp(min=0)) + 1,
        0,
    )
    i32 = torch.int32
    return TreeMeta(
        parents=par.to(i32).contiguous(),
        ancestors=anc.to(torch.int8).contiguous(),
        depth=depth.to(i32).contiguous(),
        paths=paths.to(i32).contiguous(),
        leaf_slots=leaf_slots.to(i32).contiguous(),
        emit_from=emit_from.to(i32).contiguous(),
        batched=batched,
    )


@triton.jit
def _tree_meta_kernel(
    par_ptr, anc_ptr, depth_ptr, paths_ptr, slots_ptr, emit_ptr, N, BN: tl.constexpr, LOG: tl.constexpr, UPCAST: tl.constexpr
):
    # one program per tree; every quantity is a [BN] vector or a [BN, BN] tile, nothing sequential
    # in N: the ancestor closure by repeated squaring, then masked reductions
    b = tl.program_id(0)
    rows = tl.arange(0, BN)
    mask_n = rows < N
    mask_nn = mask_n[:, None] & mask_n[None, :]
    par = tl.load(par_ptr + b * N + rows, mask=mask_n, other=-1)  # [BN] int32
    edge = (par[:, None] == rows[None, :]) & mask_nn  # edge[i, j]: j is the parent of i
    eye = (rows[:, None] == rows[None, :]) & mask_nn
    reach = (edge | eye).to(tl.float32)
    # 0/1 matrices: the products count paths (<= BN), exact in any dot precision
    for _ in tl.static_range(LOG):
        reach = (tl.dot(reach, reach, input_precision="ieee" if UPCAST else "tf32") > 0).to(tl.float32)
    anc = reach > 0  # [BN, BN] ancestor-or-self
    depth = tl.sum(anc.to(tl.int32), axis=1) - 1  # [BN]
    tile = (b * N + rows[:, None]) * N
    tl.store(anc_ptr + tile + rows[None, :], anc.to(tl.int8), mask=mask_nn)
    tl.store(depth_ptr + b * N + rows, depth, mask=mask_n)
    # paths[i, depth[j]] = j for every ancestor-or-self j of i (one per depth), -1 past depth[i]
    tl.store(paths_ptr + tile + depth[None, :], rows[None, :] + 0 * rows[:, None], mask=anc & mask_nn)
    tl.store(paths_ptr + tile + rows[None, :], tl.full([BN, BN], -1, tl.int32), mask=mask_nn & (rows[None, :] > depth[:, None]))
    # first child of each node (BN = none); a node heads a first-child chain unless it is the first
    # child of its parent
    first = tl.min(tl.where(edge, rows[:, None], BN), axis=0)  # [BN] indexed by the parent
    is_leaf = (first == BN) & mask_n
    first_of_parent = tl.sum(tl.where(edge, first[None, :], 0), axis=1)  # [BN]: first[par[i]] (0 for roots)
    head = (par < 0) | (first_of_parent != rows)
    heads = tl.sum(tl.where(anc, head[None, :].to(tl.int32), 0), axis=1)  # chain heads on root..i
    # the chain ending at leaf l: its ancestors-or-self below (and including) the last head
    chain_len = tl.sum((anc & (heads[None, :] == heads[:, None])).to(tl.int32), axis=1)
    emit_leaf = depth - chain_len + 1
    # leaves in ascending order: slot s holds the leaf of rank s
    rank = tl.cumsum(is_leaf.to(tl.int32), axis=0) - 1
    sel = (rank[None, :] == rows[:, None]) & is_leaf[None, :]  # [BN (slot), BN (leaf)]
    has = tl.sum(sel.to(tl.int32), axis=1) > 0
    slot_leaf = tl.where(has, tl.sum(tl.where(sel, rows[None, :], 0), axis=1), -1)
    slot_emit = tl.sum(tl.where(sel, emit_leaf[None, :], 0), axis=1)
    tl.store(slots_ptr + b * N + rows, slot_leaf, mask=mask_n)
    tl.store(emit_ptr + b * N + rows, slot_emit, mask=mask_n)


def _build_tree_meta_triton(parents: torch.Tensor) -> TreeMeta:
    batched = parents.ndim == 2
    par = (parents if batched else parents[None]).to(torch.int32, copy=True).contiguous()  # [B, N], never aliased
    bsz, n = par.shape
    bn = max(16, triton.next_power_of_2(n))
    i32 = dict(device=par.device, dtype=torch.int32)
    anc = torch.empty(bsz, n, n, device=par.device, dtype=torch.int8)
    depth = torch.empty(bsz, n, **i32)
    paths = torch.empty(bsz, n, n, **i32)
    slots = torch.empty(bsz, n, **i32)
    emit = torch.empty(bsz, n, **i32)
    _tree_meta_kernel[(bsz,)](
        par,
        anc,
        depth,
        paths,
        slots,
        emit,
        n,
        BN=bn,
        LOG=max(1, math.ceil(math.log2(bn))),
        UPCAST=_INTERPRET,
        num_warps=4 if bn <= 64 else 8,
    )
    return TreeMeta(parents=par, ancestors=anc, depth=depth, paths=paths, leaf_slots=slots, emit_from=emit, batched=batched)


def _as_meta(parents: torch.Tensor | TreeMeta) -> TreeMeta:
    return parents if isinstance(parents, TreeMeta) else build_tree_meta(parents)


def _shape(name: str, t: torch.Tensor, expected: tuple[int, ...]) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name}: expected shape {tuple(expected)}, got {tuple(t.shape)}")


def _tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    return t


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class _Dims:
    batched: bool
    B: int
    N: int
    HK: int
    HV: int
    DK: int
    DV: int


def _check_gdn_inputs(q, k, v, g, beta, initial_state, *, need_q: bool = True) -> _Dims:
    """Shape/dtype/device checks shared by every method; returns the problem sizes."""
    k = _tensor("k", k)
    v = _tensor("v", v)
    g = _tensor("g", g)
    beta = _tensor("beta", beta)
    initial_state = _tensor("initial_state", initial_state)
    if k.ndim not in (3, 4):
        raise ValueError(f"k: expected shape [N, Hk, dk] or [B, N, Hk, dk], got {tuple(k.shape)}")
    batched = k.ndim == 4
    kk = k if batched else k[None]
    bsz, n, hk, dk = kk.shape
    if v.ndim != k.ndim:
        raise ValueError(f"v: expected {k.ndim} dims like k, got shape {tuple(v.shape)}")
    hv, dv = v.shape[-2:]
    lead = (bsz, n) if batched else (n,)
    if need_q:
        q = _tensor("q", q)
        _shape("q", q, tuple(k.shape))
    _shape("v", v, lead + (hv, dv))
    _shape("g", g, lead + (hv,))
    _shape("beta", beta, lead + (hv,))
    _shape("initial_state", initial_state, ((bsz,) if batched else ()) + (hv, dk, dv))
    if hk == 0 or hv % hk != 0:
        raise ValueError(f"v: expected a number of value heads Hv that is a multiple of Hk = {hk}, got Hv = {hv}")
    for name, t in (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta)):
        if name == "q" and not need_q:
            continue
        if t.dtype not in _FLOATS:
            raise TypeError(f"{name}: expected a floating dtype, got {t.dtype}")
    if need_q and q.dtype != k.dtype:
        raise TypeError(f"q: expected the dtype of k ({k.dtype}), got {q.dtype}")
    if v.dtype != k.dtype:
        raise TypeError(f"v: expected the dtype of k ({k.dtype}), got {v.dtype}")
    if initial_state.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"initial_state: expected torch.float32, got {initial_state.dtype}")
    for name, t in (("q", q), ("v", v), ("g", g), ("beta", beta), ("initial_state", initial_state)):
        if name == "q" and not need_q:
            continue
        if t.device != k.device:
            raise ValueError(f"{name}: expected device {k.device} (the device of k), got {t.device}")
    return _Dims(batched, bsz, n, hk, hv, dk, dv)


def _check_meta(meta: TreeMeta, dims: _Dims, device: torch.device) -> None:
    if meta.batched != dims.batched or meta.num_nodes != dims.N or meta.batch_size != dims.B:
        want = f"[{dims.B}, {dims.N}]" if dims.batched else f"[{dims.N}]"
        got = tuple(meta.parents.shape) if meta.batched else (meta.num_nodes,)
        raise ValueError(f"parents: expected shape {want} to match k, got {got}")
    if meta.parents.device != device:
        raise ValueError(f"parents: expected device {device} (the device of k), got {meta.parents.device}")


def _batched(t: torch.Tensor | None, batched: bool) -> torch.Tensor | None:
    return t if t is None or batched else t[None]
