"""Path kernel: every program replays one root-to-leaf path from the committed state in registers.

One program per (leaf, value head, dv tile). It loads its ``[dk, BV]`` tile of the committed state,
applies the recurrence along the leaf's root-to-leaf path and writes the outputs of the nodes it
owns (the chain of first children ending at that leaf, see :class:`TreeMeta`). Every node is owned
by exactly one leaf, so every output is written once, and no per-node state ever leaves registers.
Work is the sum over leaves of (depth + 1) steps; memory traffic is one state tile read per program.

The commit kernel runs the same step along the accepted path and writes the final state.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .meta import TreeMeta

__all__ = ["gdn_tree_path", "gdn_tree_commit_triton"]


@triton.jit
def _gdn_step(state, k_t, v_t, g_t, beta_t):
    # state [BK, BV]; k_t [BK]; v_t [BV]; decay first, then the delta-rule correction
    state = state * tl.exp(g_t)
    kv_mem = tl.sum(state * k_t[:, None], axis=0)
    u = (v_t - kv_mem) * beta_t
    return state + k_t[:, None] * u[None, :]


@triton.jit
def _load_key(ptr, offs_k, mask_k, L2NORM: tl.constexpr):
    x = tl.load(ptr + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    if L2NORM:
        x = x * tl.rsqrt(tl.sum(x * x, axis=0) + 1e-6)
    return x


@triton.jit
def _load_node(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    row,
    h,
    hk,
    offs_k,
    mask_k,
    offs_v,
    mask_v,
    scale,
    HK: tl.constexpr,
    HV: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    L2NORM: tl.constexpr,
):
    k_t = _load_key(k_ptr + (row * HK + hk) * DK, offs_k, mask_k, L2NORM)
    q_t = _load_key(q_ptr + (row * HK + hk) * DK, offs_k, mask_k, L2NORM) * scale
    v_t = tl.load(v_ptr + (row * HV + h) * DV + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    g_t = tl.load(g_ptr + row * HV + h).to(tl.float32)
    beta_t = tl.load(beta_ptr + row * HV + h).to(tl.float32)
    return k_t, v_t, q_t, g_t, beta_t


@triton.jit
def _gdn_path_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    s0_ptr,
    out_ptr,
    paths_ptr,
    depth_ptr,
    slots_ptr,
    emit_ptr,
    scale,
    N,
    HK: tl.constexpr,
    HV: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    L2NORM: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_s = tl.program_id(1)
    i_bh = tl.program_id(2)
    b = i_bh // HV
    h = i_bh % HV
    hk = h // (HV // HK)
    leaf = tl.load(slots_ptr + b * N + i_s)
    if leaf >= 0:
        path_len = tl.load(depth_ptr + b * N + leaf) + 1
        emit_from = tl.load(emit_ptr + b * N + i_s)
        offs_k = tl.arange(0, BK)
        offs_v = i_v * BV + tl.arange(0, BV)
        mask_k = offs_k < DK
        mask_v = offs_v < DV
        state = tl.load(
            s0_ptr + i_bh * DK * DV + offs_k[:, None] * DV + offs_v[None, :],
            mask=mask_k[:, None] & mask_v[None, :],
            other=0.0,
        )  # [BK, BV]
        path_row = paths_ptr + (b * N + leaf) * N
        # inputs of step t + 1 are loaded (and normalised) while step t runs: only the state
        # update is on the loop-carried critical path
        k_t, v_t, q_t, g_t, beta_t = _load_node(
            q_ptr,
            k_ptr,
            v_ptr,
            g_ptr,
            beta_ptr,
            b * N + tl.load(path_row),
            h,
            hk,
            offs_k,
            mask_k,
            offs_v,
            mask_v,
            scale,
            HK,
            HV,
            DK,
            DV,
            L2NORM,
        )
        for t in range(path_len):
            node = tl.load(path_row + t)
            k_n, v_n, q_n, g_n, beta_n = _load_node(
                q_ptr,
                k_ptr,
                v_ptr,
                g_ptr,
                beta_ptr,
                b * N + tl.load(path_row + tl.minimum(t + 1, path_len - 1)),
                h,
                hk,
                offs_k,
                mask_k,
                offs_v,
                mask_v,
                scale,
                HK,
                HV,
                DK,
                DV,
                L2NORM,
            )
            state = _gdn_step(state, k_t, v_t, g_t, beta_t)
            if t >= emit_from:
                o = tl.sum(state * q_t[:, None], axis=0)
                tl.store(out_ptr + ((b * N + node) * HV + h) * DV + offs_v, o.to(out_ptr.dtype.element_ty), mask=mask_v)
            k_t, v_t, q_t, g_t, beta_t = k_n, v_n, q_n, g_n, beta_n


@triton.jit
def _gdn_commit_kernel(
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    s0_ptr,
    out_ptr,
    path_ptr,
    N,
    L,
    HK: tl.constexpr,
    HV: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    L2NORM: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    b = i_bh // HV
    h = i_bh % HV
    hk = h // (HV // HK)
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_k = offs_k < DK
    mask_v = offs_v < DV
    mask = mask_k[:, None] & mask_v[None, :]
    ptrs = offs_k[:, None] * DV + offs_v[None, :]
    state = tl.load(s0_ptr + i_bh * DK * DV + ptrs, mask=mask, other=0.0)  # [BK, BV]
    for t in range(L):
        node = tl.load(path_ptr + b * L + t)
        if node >= 0:
            row = b * N + node
            k_t = _load_key(k_ptr + (row * HK + hk) * DK, offs_k, mask_k, L2NORM)
            v_t = tl.load(v_ptr + (row * HV + h) * DV + offs_v, mask=mask_v, other=0.0).to(tl.float32)
            g_t = tl.load(g_ptr + row * HV + h).to(tl.float32)
            beta_t = tl.load(beta_ptr + row * HV + h).to(tl.float32)
            state = _gdn_step(state, k_t, v_t, g_t, beta_t)
    # each program reads its whole tile before writing it, so out may alias s0
    tl.store(out_ptr + i_bh * DK * DV + ptrs, state, mask=mask)


def _tile_v(dv: int, block_v: int | None) -> int:
    bv = block_v if block_v is not None else 32
    return max(16, min(triton.next_power_of_2(dv), bv))


def gdn_tree_path(
    q,
    k,
    v,
    g,
    beta,
    meta: TreeMeta,
    initial_state,
    out,
    *,
    use_qk_l2norm: bool,
    scale: float,
    block_v: int | None = 16,
    num_warps: int = 1,
) -> torch.Tensor:
    """Launches the path kernel on checked, batched, contiguous ``[B, N, ...]`` tensors; fills ``out``.

    Defaults: dv tiles of 16 with one warp, the fastest config at N = 16..128 on the H200 (2026-11-29).
    """
    bsz, n, hk, dk = k.shape
    hv, dv = v.shape[-2:]
    bk = max(16, triton.next_power_of_2(dk))
    bv = _tile_v(dv, block_v)
    grid = (triton.cdiv(dv, bv), n, bsz * hv)
    _gdn_path_kernel[grid](
        q,
        k,
        v,
        g,
        beta,
        initial_state,
        out,
        meta.paths,
        meta.depth,
        meta.leaf_slots,
        meta.emit_from,
        scale,
        n,
        HK=hk,
        HV=hv,
        DK=dk,
        DV=dv,
        BK=bk,
        BV=bv,
        L2NORM=use_qk_l2norm,
        num_warps=num_warps,
    )
    return out


def gdn_tree_commit_triton(
    k, v, g, beta, path, initial_state, out, *, use_qk_l2norm: bool, block_v: int | None = None, num_warps: int = 4
) -> torch.Tensor:
    """Launches the commit kernel; ``path`` is ``[B, L]`` int32 padded with -1; fills ``out``."""
    bsz, n, hk, dk = k.shape
    hv, dv = v.shape[-2:]
    bk = max(16, triton.next_power_of_2(dk))
    bv = _tile_v(dv, block_v)
    grid = (triton.cdiv(dv, bv), bsz * hv)
    _gdn_commit_kernel[grid](
        k,
        v,
        g,
        beta,
        initial_state,
        out,
        path,
        n,
        path.shape[1],
        HK=hk,
        HV=hv,
        DK=dk,
        DV=dv,
        BK=bk,
        BV=bv,
        L2NORM=use_qk_l2norm,
        num_warps=num_warps,
    )
    return out
