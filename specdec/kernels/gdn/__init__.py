"""Gated DeltaNet state recompute along the root-to-node paths of a draft tree.

- :func:`gdn_tree`: outputs of every tree node for one GDN layer (``method="path" | "wy" | "naive"``).
- :func:`gdn_tree_commit`: exact replay of the accepted path, returns the new recurrent state.
- :func:`tree_causal_conv` / :func:`conv_state_commit`: the short causal conv in front of it.
- :func:`build_tree_meta`: the topology tensors, built once per verify step and shared by layers.

Derivations and the kernel designs: ``README.md`` in this folder.
"""

from __future__ import annotations

import torch

from ..backend import use_triton
from .conv import conv_state_commit, tree_causal_conv
from .meta import TreeMeta, _as_meta, _batched, _check_gdn_inputs, _check_meta, build_tree_meta
from .naive import _check_path, naive_gdn_tree, naive_gdn_tree_commit
from .path import gdn_tree_commit_triton, gdn_tree_path
from .wy import gdn_tree_wy_auto, gdn_tree_wy_torch

__all__ = [
    "TreeMeta",
    "build_tree_meta",
    "gdn_tree",
    "gdn_tree_commit",
    "naive_gdn_tree",
    "naive_gdn_tree_commit",
    "tree_causal_conv",
    "conv_state_commit",
]

_METHODS = ("path", "wy", "naive")


def _check_triton_dtypes(k: torch.Tensor, g: torch.Tensor, initial_state: torch.Tensor) -> None:
    if k.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"k: the Triton kernels take float16/bfloat16/float32 q, k, v, got {k.dtype}")
    if initial_state.dtype != torch.float32:
        raise TypeError(f"initial_state: the Triton kernels take torch.float32, got {initial_state.dtype}")


def gdn_tree(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    parents: torch.Tensor | TreeMeta,
    initial_state: torch.Tensor,
    *,
    use_qk_l2norm: bool = True,
    scale: float | None = None,
    method: str = "path",
    backend: str = "auto",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gated delta rule outputs of every node of a draft tree, each from its own root-to-node path.

    Semantics: transformers' ``torch_recurrent_gated_delta_rule`` (decay, delta-rule update, then
    the output from the updated state) run from ``initial_state`` along the path root -> ``i`` for
    every node ``i``. No per-node state is materialised; commit with :func:`gdn_tree_commit`.

    Args:
        q, k (Tensor): ``[N, Hk, dk]`` for one request, or ``[B, N, Hk, dk]`` for B requests with
            trees padded to the same N (pad nodes as extra roots, ``parents = -1``, never accepted).
        v (Tensor): ``[N, Hv, dv]`` / ``[B, N, Hv, dv]``; value head ``h`` reads key head
            ``h // (Hv // Hk)`` (transformers' ``repeat_interleave``). Same dtype as q and k.
        g (Tensor): ``[N, Hv]`` / ``[B, N, Hv]`` log decay (<= 0), read in fp32.
        beta (Tensor): ``[N, Hv]`` / ``[B, N, Hv]``.
        parents (Tensor | TreeMeta): ``[N]`` / ``[B, N]`` parent indices, ``-1`` = child of the
            committed prefix, ``parents[i] < i``. Pass a :class:`TreeMeta` from
            :func:`build_tree_meta` to skip the per-call topology build (and its host sync).
        initial_state (Tensor): ``[Hv, dk, dv]`` / ``[B, Hv, dk, dv]`` committed state, float32.
        use_qk_l2norm (bool): l2-normalise q and k over dk (Qwen3-Next / Qwen3.5 do). Default: ``True``.
        scale (float, Optional): query scale. Default: ``dk ** -0.5``.
        method (str): ``"path"`` (replay each path in registers), ``"wy"`` (tree WY/UT solve: one
            dense tile for trees up to 64 nodes, the fastest method there; a blocked solve beyond) or
            ``"naive"`` (the sequential reference). Default: ``"path"``.
        backend (str): ``"auto"`` (Triton on CUDA, PyTorch elsewhere), ``"triton"`` or ``"torch"``.
            The torch backend of ``"path"`` is the reference; of ``"wy"`` a dense PyTorch WY solve.
        out (Tensor, Optional): preallocated output (Triton backend), shaped like ``v``.

    Returns:
        Tensor: outputs ``[N, Hv, dv]`` / ``[B, N, Hv, dv]`` in ``q.dtype``.

    Example::

        >>> q = k = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[0.0, 1.0]]])  # [N=3, Hk=1, dk=2]
        >>> v = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]], [[5.0, 6.0]]])     # [3, Hv=1, dv=2]
        >>> o = gdn_tree(q, k, v, torch.zeros(3, 1), torch.ones(3, 1), torch.tensor([-1, 0, 0]),
        ...              torch.zeros(1, 2, 2), scale=1.0, backend="torch")
        >>> o[:, 0].round(decimals=4).tolist()    # siblings 1 and 2 do not see each other
        [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    """
    if method not in _METHODS:
        raise ValueError(f"method: expected one of {_METHODS}, got {method!r}")
    dims = _check_gdn_inputs(q, k, v, g, beta, initial_state)
    meta = _as_meta(parents)
    _check_meta(meta, dims, k.device)
    if method == "naive" or not use_triton(backend, k.device):
        if method == "wy":
            qb, kb, vb, gb, bb, sb = (_batched(t, dims.batched) for t in (q, k, v, g, beta, initial_state))
            res = gdn_tree_wy_torch(
                qb,
                kb,
                vb,
                gb,
                bb,
                meta,
                sb,
                use_qk_l2norm=use_qk_l2norm,
                scale=scale,
                dtype=torch.float64 if initial_state.dtype == torch.float64 else torch.float32,
            )
            res = res.to(q.dtype)
            res = res if dims.batched else res[0]
        else:
            res = naive_gdn_tree(
                q,
                k,
                v,
                g,
                beta,
                meta,
                initial_state,
                use_qk_l2norm=use_qk_l2norm,
                scale=scale,
                dtype=torch.float64 if initial_state.dtype == torch.float64 else torch.float32,
            )
        if out is not None:
            _check_out(out, tuple(v.shape), q.dtype, k.device)
            out.copy_(res)
            return out
        return res
    _check_triton_dtypes(k, g, initial_state)
    if out is not None:
        _check_out(out, tuple(v.shape), q.dtype, k.device)
        if not out.is_contiguous():
            raise ValueError("out: expected a contiguous tensor")
    else:
        out = torch.empty(v.shape, dtype=q.dtype, device=k.device)
    if dims.N == 0:
        return out
    qb, kb, vb, gb, bb, sb, ob = (_batched(t, dims.batched).contiguous() for t in (q, k, v, g, beta, initial_state, out))
    sc = dims.DK**-0.5 if scale is None else float(scale)
    launch = gdn_tree_path if method == "path" else gdn_tree_wy_auto
    launch(qb, kb, vb, gb, bb, meta, sb, ob, use_qk_l2norm=use_qk_l2norm, scale=sc)
    return out


def _check_out(out: object, shape: tuple, dtype: torch.dtype, device: torch.device) -> None:
    """``out=`` must be where the result would be made: the same shape, dtype and device (never a broadcast or a cast)."""
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape or out.dtype != dtype or out.device != device:
        got = f"{tuple(out.shape)}, {out.dtype}, {out.device}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"out: expected shape {shape}, dtype {dtype}, device {device}; got {got}")


def gdn_tree_commit(
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    path,
    initial_state: torch.Tensor,
    *,
    use_qk_l2norm: bool = True,
    parents: torch.Tensor | TreeMeta | None = None,
    backend: str = "auto",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """New recurrent state after the accepted path: an exact fp32 replay of the recurrence.

    Args:
        k, v, g, beta (Tensor): the inputs of the verify step, shaped as for :func:`gdn_tree`.
        path (Tensor | list[int]): accepted node indices, root to leaf (``[L]``; batched ``[B, L]``
            padded with ``-1`` after each request's last node). Empty: the state is unchanged.
        initial_state (Tensor): ``[Hv, dk, dv]`` / ``[B, Hv, dk, dv]`` float32 committed state.
        use_qk_l2norm (bool): must match the verify call. Default: ``True``.
        parents (Tensor | TreeMeta, Optional): if given, the path is checked against the tree.
        backend (str): ``"auto"``, ``"triton"`` or ``"torch"`` (the reference replay).
        out (Tensor, Optional): where to write the new state; may be ``initial_state`` itself
            (in-place commit, Triton backend or torch).

    Returns:
        Tensor: the new state, shaped like ``initial_state``, float32.

    Example::

        >>> k = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]]); v = torch.ones(2, 1, 2)
        >>> s = gdn_tree_commit(k, v, torch.zeros(2, 1), torch.ones(2, 1), [1], torch.zeros(1, 2, 2), backend="torch")
        >>> s[0].round(decimals=4).tolist()    # l2norm's eps: k = 1 - 5e-7
        [[0.0, 0.0], [1.0, 1.0]]
    """
    if not use_triton(backend, k.device if isinstance(k, torch.Tensor) else torch.device("cpu")):
        res = naive_gdn_tree_commit(
            k,
            v,
            g,
            beta,
            path,
            initial_state,
            use_qk_l2norm=use_qk_l2norm,
            parents=parents,
            dtype=torch.float64 if initial_state.dtype == torch.float64 else torch.float32,
        )
        if out is not None:
            _check_out(out, tuple(initial_state.shape), res.dtype, res.device)
            out.copy_(res)
            return out
        return res
    dims = _check_gdn_inputs(None, k, v, g, beta, initial_state, need_q=False)
    _check_triton_dtypes(k, g, initial_state)
    p = _check_path(path, dims.N, dims.batched, dims.B, k.device, parents)
    if out is not None:
        _check_out(out, tuple(initial_state.shape), torch.float32, k.device)
        if not out.is_contiguous():
            raise ValueError("out: expected a contiguous tensor")
    else:
        out = torch.empty_like(initial_state, memory_format=torch.contiguous_format)
    kb, vb, gb, bb, sb, ob = (_batched(t, dims.batched).contiguous() for t in (k, v, g, beta, initial_state, out))
    if sb.data_ptr() != initial_state.data_ptr() and out.data_ptr() == initial_state.data_ptr():
        raise ValueError("initial_state: an in-place commit needs a contiguous initial_state")
    gdn_tree_commit_triton(kb, vb, gb, bb, p.to(torch.int32).contiguous(), sb, ob, use_qk_l2norm=use_qk_l2norm)
    return out
