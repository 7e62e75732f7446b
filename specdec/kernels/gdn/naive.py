"""Pure-PyTorch references for the gated delta rule along the root-to-node paths of a draft tree.

The recurrence per value head (state ``S [dk, dv]``, decay first, output from the updated state),
in the exact order of operations of transformers' ``torch_recurrent_gated_delta_rule``::

    S   <- exp(g_t) * S
    u_t  = beta_t * (v_t - S^T k_t)
    S   <- S + k_t u_t^T
    o_t  = S^T (q_t / sqrt(dk))          (q_t, k_t l2-normalised first)

Node ``i`` of a tree sees the recurrence run from the committed state along its root-to-``i``
path. Because ``parents[i] < i``, running the nodes in index order and starting each one from its
parent's state gives every path exactly the chain recurrence, with the same floating-point
operations as the chain: a chain-shaped tree reproduces transformers bit for bit in float32.
"""

from __future__ import annotations

import torch

from .meta import TreeMeta, _as_meta, _batched, _check_gdn_inputs, _check_meta

__all__ = ["naive_gdn_tree", "naive_gdn_tree_commit"]


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    # transformers / fla convention: x * rsqrt(sum(x^2) + 1e-6)
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)


def _prepare(q, k, v, g, beta, hv, use_qk_l2norm, scale, dtype):
    """[B, N, H*, d] inputs -> fp32/fp64 tensors with key heads repeated to the value heads."""
    hk = k.shape[2]
    # value head h reads key head h // (Hv // Hk), as transformers' repeat_interleave
    k = k.repeat_interleave(hv // hk, dim=2).to(dtype)
    if q is not None:
        q = q.repeat_interleave(hv // hk, dim=2).to(dtype)
    v, g, beta = v.to(dtype), g.to(dtype), beta.to(dtype)
    if use_qk_l2norm:
        k = _l2norm(k)
        if q is not None:
            q = _l2norm(q)
    if q is not None:
        q = q / (q.shape[-1] ** 0.5) if scale is None else q * scale
    return q, k, v, g, beta


def _step(state, k_t, v_t, g_t, beta_t):
    # state [B, Hv, dk, dv]; k_t [B, Hv, dk]; v_t [B, Hv, dv]; g_t, beta_t [B, Hv]
    state = state * g_t.exp()[..., None, None]
    kv_mem = (state * k_t.unsqueeze(-1)).sum(dim=-2)
    delta = (v_t - kv_mem) * beta_t.unsqueeze(-1)
    return state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)


def naive_gdn_tree(
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
    dtype: torch.dtype = torch.float32,
    return_states: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Reference: the gated delta rule run along every root-to-node path of a draft tree.

    Args:
        q, k (Tensor): ``[N, Hk, dk]`` or ``[B, N, Hk, dk]``.
        v (Tensor): ``[N, Hv, dv]`` or ``[B, N, Hv, dv]``, ``Hv`` a multiple of ``Hk``; value head
            ``h`` uses key head ``h // (Hv // Hk)``.
        g (Tensor): ``[N, Hv]`` / ``[B, N, Hv]`` log decay (<= 0).
        beta (Tensor): ``[N, Hv]`` / ``[B, N, Hv]`` delta-rule step size.
        parents (Tensor | TreeMeta): ``[N]`` / ``[B, N]``, ``-1`` = child of the committed prefix,
            ``parents[i] < i``; or a prebuilt :class:`TreeMeta`.
        initial_state (Tensor): ``[Hv, dk, dv]`` / ``[B, Hv, dk, dv]`` committed state.
        use_qk_l2norm (bool): l2-normalise q and k over dk. Default: ``True``.
        scale (float, Optional): query scale; ``None`` divides by ``sqrt(dk)`` like transformers.
        dtype (torch.dtype): compute dtype, ``torch.float32`` or ``torch.float64``.
        return_states (bool): also return every node's state. Default: ``False``.

    Returns:
        Tensor: outputs ``[N, Hv, dv]`` / ``[B, N, Hv, dv]`` in ``q.dtype``; with
        ``return_states`` also the per-node states ``[(B,) N, Hv, dk, dv]`` in ``dtype``.

    Example::

        >>> q = k = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[0.0, 1.0]]])  # [3, 1, 2]
        >>> v = torch.tensor([[[1.0, 2.0]], [[3.0, 4.0]], [[5.0, 6.0]]])     # [3, 1, 2]
        >>> g, beta = torch.zeros(3, 1), torch.ones(3, 1)
        >>> o = naive_gdn_tree(q, k, v, g, beta, torch.tensor([-1, 0, 0]), torch.zeros(1, 2, 2), scale=1.0)
        >>> o[:, 0].round(decimals=4).tolist()   # nodes 1 and 2 are siblings: they never see each other
        [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    """
    dims = _check_gdn_inputs(q, k, v, g, beta, initial_state)
    meta = _as_meta(parents)
    _check_meta(meta, dims, k.device)
    q, k, v, g, beta, s0 = (_batched(t, dims.batched) for t in (q, k, v, g, beta, initial_state))
    out_dtype = q.dtype
    qf, kf, vf, gf, bf = _prepare(q, k, v, g, beta, dims.HV, use_qk_l2norm, scale, dtype)
    s0 = s0.to(dtype)
    par = meta.parents.to(torch.int64)  # [B, N]
    states = s0.new_empty((dims.B, dims.N) + tuple(s0.shape[1:]))  # [B, N, Hv, dk, dv]
    out = vf.new_empty(vf.shape)  # [B, N, Hv, dv]
    rows = torch.arange(dims.B, device=k.device)
    for i in range(dims.N):
        p = par[:, i]
        prev = torch.where((p >= 0)[:, None, None, None], states[rows, p.clamp(min=0)], s0)
        state = _step(prev, kf[:, i], vf[:, i], gf[:, i], bf[:, i])
        states[:, i] = state
        out[:, i] = (state * qf[:, i].unsqueeze(-1)).sum(dim=-2)
    out = out.to(out_dtype)
    if not dims.batched:
        out, states = out[0], states[0]
    return (out, states) if return_states else out


def _check_path(path, n: int, batched: bool, bsz: int, device, parents=None) -> torch.Tensor:
    """Accepted path(s) -> [B, L] int64 padded with -1 (padding only as a suffix)."""
    if isinstance(path, (list, tuple)):
        path = torch.tensor(path, dtype=torch.int64, device=device)
        if not batched:
            path = path.reshape(-1)
    if not isinstance(path, torch.Tensor):
        raise TypeError(f"path: expected a torch.Tensor or list of node indices, got {type(path).__name__}")
    if path.dtype.is_floating_point or path.dtype == torch.bool:
        raise TypeError(f"path: expected an integer dtype, got {path.dtype}")
    want = 2 if batched else 1
    if path.ndim != want or (batched and path.shape[0] != bsz):
        exp = f"[{bsz}, L]" if batched else "[L]"
        raise ValueError(f"path: expected shape {exp}, got {tuple(path.shape)}")
    p = (path if batched else path[None]).to(device=device, dtype=torch.int64)
    if p.numel():
        valid = p >= 0
        # host sync once per commit; the commit itself is cheap
        if bool((p >= n).any()) or bool((p < -1).any()):
            raise ValueError(f"path: expected node indices in [0, {n}) (or -1 padding), got {p.tolist()}")
        if bool((valid[:, 1:] & ~valid[:, :-1]).any()):
            raise ValueError(f"path: expected -1 padding only after the last node, got {p.tolist()}")
        both = valid[:, 1:] & valid[:, :-1]
        if bool((both & (p[:, 1:] <= p[:, :-1])).any()):
            raise ValueError(f"path: expected strictly increasing node indices (root to leaf), got {p.tolist()}")
        if parents is not None:
            par = parents.parents.to(torch.int64) if isinstance(parents, TreeMeta) else parents.to(torch.int64)
            par = par if par.ndim == 2 else par[None]
            if par.shape != (p.shape[0], n):
                raise ValueError(f"parents: expected shape {(p.shape[0], n)} for the path check, got {tuple(par.shape)}")
            got = par.gather(1, p.clamp(min=0))
            want_par = torch.cat([torch.full_like(p[:, :1], -1), p[:, :-1]], dim=1)
            if bool((valid & (got != want_par)).any()):
                raise ValueError(
                    f"path: expected a root-to-node path of the tree (parents[path[t]] == path[t-1]), got {p.tolist()}"
                )
    return p


def naive_gdn_tree_commit(
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    path,
    initial_state: torch.Tensor,
    *,
    use_qk_l2norm: bool = True,
    parents: torch.Tensor | TreeMeta | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Reference commit: replays the recurrence along the accepted path and returns the new state.

    Args:
        k, v, g, beta (Tensor): the verify step's inputs, shaped as for :func:`naive_gdn_tree`.
        path (Tensor | list[int]): accepted node indices root to leaf, ``[L]``; batched ``[B, L]``
            padded with ``-1`` after each request's last node. An empty path keeps the state.
        initial_state (Tensor): ``[Hv, dk, dv]`` / ``[B, Hv, dk, dv]`` committed state.
        use_qk_l2norm (bool): must match the verify call. Default: ``True``.
        parents (Tensor | TreeMeta, Optional): when given, the path is checked to be a
            root-to-node path of this tree.
        dtype (torch.dtype): compute dtype. Default: ``torch.float32``.

    Returns:
        Tensor: new state, shaped like ``initial_state``, in ``dtype``.

    Example::

        >>> k = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]]); v = torch.ones(2, 1, 2)
        >>> s = naive_gdn_tree_commit(k, v, torch.zeros(2, 1), torch.ones(2, 1), [1], torch.zeros(1, 2, 2))
        >>> s[0].round(decimals=4).tolist()
        [[0.0, 0.0], [1.0, 1.0]]
    """
    dims = _check_gdn_inputs(None, k, v, g, beta, initial_state, need_q=False)
    p = _check_path(path, dims.N, dims.batched, dims.B, k.device, parents)
    k, v, g, beta, s0 = (_batched(t, dims.batched) for t in (k, v, g, beta, initial_state))
    _, kf, vf, gf, bf = _prepare(None, k, v, g, beta, dims.HV, use_qk_l2norm, None, dtype)
    state = s0.to(dtype)
    rows = torch.arange(dims.B, device=k.device)
    for t in range(p.shape[1]):
        node = p[:, t]
        i = node.clamp(min=0)
        nxt = _step(state, kf[rows, i], vf[rows, i], gf[rows, i], bf[rows, i])
        state = torch.where((node >= 0)[:, None, None, None], nxt, state)
    return state if dims.batched else state[0]
