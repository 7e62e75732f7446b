"""Depthwise short causal convolution over the nodes of a draft tree.

GDN layers convolve the concatenated pre-conv q|k|v channels with a per-channel kernel of width W
(4 in Qwen3-Next / Qwen3.5) before the recurrence. Along a chain, tap m of token t is token t - m.
In a tree, tap m of node i is its m-th ancestor; once the walk passes the root, the taps come from
the committed conv state, most recent column first::

    y_i = act(bias + sum_{m=0}^{W-1} weight[:, W-1-m] * x_{a_m(i)}),
    a_0(i) = i, a_{m+1}(i) = parents[a_m(i)], past the root: conv_state[:, -1], conv_state[:, -2], ...

The conv state holds the last S >= W-1 pre-conv columns (transformers keeps S = W); only the last
W-1 are read. ``conv_state_commit`` appends the accepted path's columns and keeps the last S.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ..backend import use_triton
from .meta import TreeMeta, _tensor

__all__ = ["tree_causal_conv", "conv_state_commit"]

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_ACTIVATIONS = (None, "silu", "swish")


def _tap_index(parents: torch.Tensor, width: int) -> torch.Tensor:
    """[B, N, W] tap sources: >= 0 a node, -s the s-th most recent conv state column."""
    bsz, n = parents.shape
    a = torch.arange(n, device=parents.device).expand(bsz, n)
    taps = [a]
    for _ in range(width - 1):
        up = parents.gather(1, a.clamp(min=0))
        a = torch.where(a >= 0, up, a - 1)
        taps.append(a)
    return torch.stack(taps, dim=-1)


def _check_conv(x, conv_state, weight, bias, activation):
    x = _tensor("x", x)
    conv_state = _tensor("conv_state", conv_state)
    weight = _tensor("weight", weight)
    if x.ndim not in (2, 3):
        raise ValueError(f"x: expected shape [N, C] or [B, N, C], got {tuple(x.shape)}")
    batched = x.ndim == 3
    c = x.shape[-1]
    if weight.ndim != 2 or weight.shape[0] != c or weight.shape[1] < 1:
        raise ValueError(f"weight: expected shape [{c}, W], got {tuple(weight.shape)}")
    w = weight.shape[1]
    want_state = (x.shape[0], c) if batched else (c,)
    if conv_state.ndim != len(want_state) + 1 or tuple(conv_state.shape[:-1]) != want_state or conv_state.shape[-1] < w - 1:
        raise ValueError(f"conv_state: expected shape {want_state + (f'S >= {w - 1}',)}, got {tuple(conv_state.shape)}")
    if bias is not None:
        bias = _tensor("bias", bias)
        if tuple(bias.shape) != (c,):
            raise ValueError(f"bias: expected shape ({c},), got {tuple(bias.shape)}")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation: expected one of {_ACTIVATIONS}, got {activation!r}")
    for name, t in (("x", x), ("conv_state", conv_state), ("weight", weight), ("bias", bias)):
        if t is not None and not t.dtype.is_floating_point:
            raise TypeError(f"{name}: expected a floating dtype, got {t.dtype}")
    if conv_state.dtype != x.dtype:  # the state columns and the new ones share one window
        raise TypeError(f"conv_state: expected the dtype of x ({x.dtype}), got {conv_state.dtype}")
    for name, t in (("conv_state", conv_state), ("weight", weight), ("bias", bias)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{name}: expected device {x.device} (the device of x), got {t.device}")
    return batched


def _conv_torch(x, parents, conv_state, weight, bias, activation):
    # x [B, N, C]; conv_state [B, C, S]; weight [C, W]
    bsz, n, c = x.shape
    s, w = conv_state.shape[-1], weight.shape[1]
    taps = _tap_index(parents, w)  # [B, N, W]
    ext = torch.cat([conv_state.transpose(1, 2), x.to(conv_state.dtype)], dim=1).to(weight.dtype)  # [B, S + N, C]
    # state column -m sits at s - m, node i at s + i
    src = s + taps
    win = ext.gather(1, src.reshape(bsz, n * w, 1).expand(bsz, n * w, c)).reshape(bsz, n, w, c)
    # tap m multiplies weight[:, W-1-m], as in a causal conv1d
    y = (win * weight.t().flip(0)).sum(dim=2)  # [B, N, C]
    if bias is not None:
        y = y + bias
    if activation is not None:
        y = F.silu(y)
    return y.to(x.dtype)


@triton.jit
def _tree_conv_kernel(
    x_ptr,
    state_ptr,
    w_ptr,
    bias_ptr,
    par_ptr,
    y_ptr,
    N,
    C,
    S,
    W: tl.constexpr,
    BLOCK_C: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
):
    i_c = tl.program_id(0)
    i_n = tl.program_id(1)
    b = tl.program_id(2)
    offs = i_c * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = offs < C
    acc = tl.zeros([BLOCK_C], dtype=tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a = i_n
    for m in tl.static_range(W):
        w_m = tl.load(w_ptr + offs * W + (W - 1 - m), mask=mask, other=0.0).to(tl.float32)
        if a >= 0:
            x_m = tl.load(x_ptr + (b * N + a) * C + offs, mask=mask, other=0.0).to(tl.float32)
        else:
            x_m = tl.load(state_ptr + (b * C + offs) * S + (S + a), mask=mask, other=0.0).to(tl.float32)
        acc += w_m * x_m
        if m < W - 1:
            if a >= 0:
                a = tl.load(par_ptr + b * N + a)
            else:
                a = a - 1
    if SILU:
        acc = acc * tl.sigmoid(acc)
    tl.store(y_ptr + (b * N + i_n) * C + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


def tree_causal_conv(
    x: torch.Tensor,
    parents: torch.Tensor | TreeMeta,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """Depthwise causal conv where each node's window is itself, its ancestors, then the conv state.

    Args:
        x (Tensor): pre-conv inputs ``[N, C]`` or ``[B, N, C]`` (one row per tree node).
        parents (Tensor | TreeMeta): ``[N]`` / ``[B, N]``, ``-1`` = child of the committed prefix.
        conv_state (Tensor): ``[C, S]`` / ``[B, C, S]``, the last S >= W-1 committed pre-conv
            columns, oldest first (transformers' layout with ``S = W``).
        weight (Tensor): ``[C, W]`` depthwise kernel (``conv1d.weight.squeeze(1)``).
        bias (Tensor, Optional): ``[C]``. Default: ``None`` (Qwen3-Next / Qwen3.5 have none).
        activation (str, Optional): ``"silu"`` (alias ``"swish"``) or ``None``. Default: ``"silu"``.
        backend (str): ``"auto"`` (Triton on CUDA), ``"triton"`` or ``"torch"``.

    Returns:
        Tensor: ``[N, C]`` / ``[B, N, C]`` in ``x.dtype``; the sum runs in fp32 (Triton) or in
        ``weight.dtype`` (torch, as transformers).

    Example::

        >>> x = torch.tensor([[1.0], [2.0], [4.0]])      # node 0 <- root, nodes 1, 2 children of 0
        >>> w = torch.tensor([[1.0, 10.0, 100.0]])        # W = 3: tap m uses w[:, 2 - m]
        >>> tree_causal_conv(x, torch.tensor([-1, 0, 0]), torch.zeros(1, 2), w, activation=None, backend="torch")
        tensor([[100.],
                [210.],
                [410.]])
    """
    batched = _check_conv(x, conv_state, weight, bias, activation)
    want = tuple(x.shape[:-1])
    if isinstance(parents, TreeMeta):
        par = parents.parents
        got = tuple(par.shape) if parents.batched else tuple(par.shape[1:])
    else:
        from .meta import _check_parents

        _check_parents(parents)
        par = parents if batched else parents[None]
        got = tuple(parents.shape)
    if got != want:
        raise ValueError(f"parents: expected shape {want} to match x, got {got}")
    if par.device != x.device:
        raise ValueError(f"parents: expected device {x.device} (the device of x), got {par.device}")
    if backend not in ("auto", "triton", "torch"):
        raise ValueError(f"backend: expected 'auto', 'triton' or 'torch', got {backend!r}")
    xb = x if batched else x[None]
    sb = conv_state if batched else conv_state[None]
    if not use_triton(backend, x.device):
        y = _conv_torch(xb, par.to(torch.int64), sb, weight, bias, activation)
        return y if batched else y[0]
    bsz, n, c = xb.shape
    y = torch.empty(xb.shape, dtype=xb.dtype, device=xb.device)  # contiguous, as the kernel writes it
    if n == 0:
        return y if batched else y[0]
    block_c = 128 if _INTERPRET else 512
    grid = (triton.cdiv(c, block_c), n, bsz)
    _tree_conv_kernel[grid](
        xb.contiguous(),
        sb.contiguous(),
        weight.contiguous(),
        bias.contiguous() if bias is not None else weight,
        par.to(torch.int32).contiguous(),
        y,
        n,
        c,
        sb.shape[-1],
        W=weight.shape[1],
        BLOCK_C=block_c,
        HAS_BIAS=bias is not None,
        SILU=activation is not None,
    )
    return y if batched else y[0]


def conv_state_commit(x: torch.Tensor, path, conv_state: torch.Tensor) -> torch.Tensor:
    """New conv state after accepting ``path``: the committed columns followed by the path's, last S kept.

    Args:
        x (Tensor): pre-conv inputs of the verify step, ``[N, C]`` / ``[B, N, C]``.
        path (Tensor | list[int]): accepted node indices root to leaf, ``[L]``; batched ``[B, L]``
            padded with ``-1`` after each request's last node.
        conv_state (Tensor): ``[C, S]`` / ``[B, C, S]``.

    Returns:
        Tensor: the new conv state, shaped and typed like ``conv_state``.

    Example::

        >>> x = torch.tensor([[1.0], [2.0], [3.0]])
        >>> conv_state_commit(x, [0, 2], torch.tensor([[7.0, 8.0, 9.0]]))
        tensor([[9., 1., 3.]])
    """
    from .naive import _check_path

    x = _tensor("x", x)
    conv_state = _tensor("conv_state", conv_state)
    if x.ndim not in (2, 3):
        raise ValueError(f"x: expected shape [N, C] or [B, N, C], got {tuple(x.shape)}")
    batched = x.ndim == 3
    want = (x.shape[0], x.shape[-1]) if batched else (x.shape[-1],)
    if conv_state.ndim != len(want) + 1 or tuple(conv_state.shape[:-1]) != want:
        raise ValueError(f"conv_state: expected shape {want + ('S',)}, got {tuple(conv_state.shape)}")
    xb = x if batched else x[None]
    sb = conv_state if batched else conv_state[None]
    bsz, n, c = xb.shape
    s = sb.shape[-1]
    p = _check_path(path, n, batched, bsz, x.device)  # [B, L]
    length = (p >= 0).sum(dim=1, keepdim=True)  # [B, 1]
    # column j of the new state is element length - S + j of the accepted sequence (negative: old state)
    pos = length - s + torch.arange(s, device=x.device)  # [B, S]
    if p.shape[1] == 0:
        node = torch.zeros_like(pos)
    else:
        node = p.gather(1, pos.clamp(min=0, max=p.shape[1] - 1))
    src = torch.where(pos >= 0, s + node, s + pos)  # index into [old state columns | x rows]
    ext = torch.cat([sb.transpose(1, 2), xb.to(sb.dtype)], dim=1)  # [B, S + N, C]
    new = ext.gather(1, src[..., None].expand(bsz, s, c)).transpose(1, 2).contiguous()  # [B, C, S]
    return new if batched else new[0]
