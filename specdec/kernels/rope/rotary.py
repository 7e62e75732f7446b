"""q/k RMSNorm and RoPE of :mod:`.naive` in one Triton launch: one program per (row, head) over q's and k's heads.

The grid is ``(B * T, H + Hkv)``: program ``(r, h)`` reads head ``h`` of row ``r`` (a q head for ``h < H``, else
k head ``h - H``) through the inputs' strides, so the views of the fused qkv projection are read in place; it writes
the rotated head to ``[B, H, T, D]`` (or ``[B, Hkv, T, D]``), contiguous. Each program loads the two halves of its
head, so ``rotate_half`` costs no gather. Over at most 16 rows inside a captured graph the launch takes part in
programmatic launch (:func:`specdec.kernels.launch.triton_launch_options`): it waits for the kernel before it, then
lets the attention after it start.

Rounding points are the reference's: the norm's ``x_hat.to(dtype)`` and ``weight * x_hat`` product, then
``t1 = x * cos``, ``t2 = rotate_half(x) * sin`` and ``t1 + t2``, each computed in float32 and rounded to the inputs'
dtype (:func:`specdec.kernels.norm.rounding.round_to`). A product of two bfloat16 or float16 values is exact in
float32, so without the norm the kernel is bitwise the reference in every dtype; in float32 the launch turns off
floating-point contraction so that ``t1 + t2`` is not fused into an FMA. The norm's sum of squares is a tree
reduction, so with the norm the result agrees with the reference to float32 rounding of ``mean(x^2)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specdec.kernels.launch import join_programmatic_launch, triton_launch_options
from specdec.kernels.norm.rounding import round_to

__all__ = ["LAUNCH_OPTIONS", "qk_norm_rope_triton"]

LAUNCH_OPTIONS = {"enable_fp_fusion": False}
"""Compile options of every launch: no contraction of ``t1 + t2`` into an FMA (the float32 bitwise claim)."""


@triton.jit
def _norm_rope_head(
    x_ptr,
    out_ptr,
    cos_ptr,
    sin_ptr,
    w_ptr,
    stride_xd,
    stride_od,
    stride_cd,
    stride_sd,
    HALF,
    eps,
    valid,
    BLOCK: tl.constexpr,
    NORM: tl.constexpr,
):
    offs = tl.arange(0, BLOCK)
    mask = (offs < HALF) & valid
    x1 = tl.load(x_ptr + offs * stride_xd, mask=mask, other=0.0)
    x2 = tl.load(x_ptr + (offs + HALF) * stride_xd, mask=mask, other=0.0)
    dtype = x1.dtype
    x1f, x2f = x1.to(tl.float32), x2.to(tl.float32)
    if NORM:  # scaled RMSNorm: w * (x * rsqrt(mean(x^2) + eps)).to(dtype), the product rounded to dtype
        rstd = 1.0 / tl.sqrt((tl.sum(x1f * x1f, axis=0) + tl.sum(x2f * x2f, axis=0)) / (2 * HALF) + eps)
        w1 = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        w2 = tl.load(w_ptr + HALF + offs, mask=mask, other=0.0).to(tl.float32)
        x1f = round_to(w1 * round_to(x1f * rstd, dtype).to(tl.float32), dtype).to(tl.float32)
        x2f = round_to(w2 * round_to(x2f * rstd, dtype).to(tl.float32), dtype).to(tl.float32)
    c1 = tl.load(cos_ptr + offs * stride_cd, mask=mask, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + (offs + HALF) * stride_cd, mask=mask, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + offs * stride_sd, mask=mask, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + (offs + HALF) * stride_sd, mask=mask, other=0.0).to(tl.float32)
    # x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1): each product and the sum rounded to dtype
    t1 = round_to(x1f * c1, dtype).to(tl.float32)
    t2 = round_to(-x2f * s1, dtype).to(tl.float32)
    tl.store(out_ptr + offs * stride_od, round_to(t1 + t2, dtype), mask=mask)
    t1 = round_to(x2f * c2, dtype).to(tl.float32)
    t2 = round_to(x1f * s2, dtype).to(tl.float32)
    tl.store(out_ptr + (offs + HALF) * stride_od, round_to(t1 + t2, dtype), mask=mask)


@triton.jit
def _qk_norm_rope_kernel(
    q_ptr,
    k_ptr,
    cos_ptr,
    sin_ptr,
    qw_ptr,
    kw_ptr,
    q_out_ptr,
    k_out_ptr,
    v_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_ptr,
    pos_ptr,
    q_index_ptr,
    T,
    H,
    HKV,
    HALF,
    N_CACHE,
    L_CACHE,
    N_Q,
    L_Q,
    stride_qb,
    stride_qt,
    stride_qh,
    stride_qd,
    stride_kb,
    stride_kt,
    stride_kh,
    stride_kd,
    stride_ct,
    stride_cd,
    stride_st,
    stride_sd,
    stride_vb,
    stride_vt,
    stride_vh,
    stride_vd,
    stride_cn,
    stride_ch,
    stride_cl,
    stride_cdd,
    stride_on,
    stride_oh,
    stride_ol,
    stride_odd,
    eps,
    BLOCK: tl.constexpr,
    NORM: tl.constexpr,
    CACHE: tl.constexpr,
    SLOTS: tl.constexpr,
    Q_SCATTER: tl.constexpr,
    PDL: tl.constexpr,
):
    join_programmatic_launch(PDL)  # specdec.kernels.launch: the attention after this kernel may start now
    row = tl.program_id(0).to(tl.int64)  # b * T + t
    head = tl.program_id(1)
    b, t = row // T, row % T
    cos_row, sin_row = cos_ptr + t * stride_ct, sin_ptr + t * stride_st
    if head < H:
        x_ptr = q_ptr + b * stride_qb + t * stride_qt + head * stride_qh
        if Q_SCATTER:  # q's head to [slot, head, q_index] of the given buffer (the packed rows' per-slot layout)
            q_slot = tl.load(slot_ptr + t).to(tl.int64)
            q_row = tl.load(q_index_ptr + t).to(tl.int64)
            q_valid = (q_slot >= 0) & (q_slot < N_Q) & (q_row >= 0) & (q_row < L_Q)
            out_ptr = q_out_ptr + q_slot * stride_on + head * stride_oh + q_row * stride_ol
            _norm_rope_head(x_ptr, out_ptr, cos_row, sin_row, qw_ptr, stride_qd, stride_odd, stride_cd, stride_sd, HALF, eps,
                            q_valid, BLOCK, NORM)  # fmt: skip
        else:
            out_ptr = q_out_ptr + ((b * H + head) * T + t) * (2 * HALF)
            _norm_rope_head(x_ptr, out_ptr, cos_row, sin_row, qw_ptr, stride_qd, 1, stride_cd, stride_sd, HALF, eps, row >= 0,
                            BLOCK, NORM)  # fmt: skip
    else:
        kv_head = head - H
        x_ptr = k_ptr + b * stride_kb + t * stride_kt + kv_head * stride_kh
        if CACHE:  # k's rotated head and v's head go straight to their cache entry [slot, kv_head, pos, :]
            slot = tl.load(slot_ptr + t).to(tl.int64) if SLOTS else b
            pos = tl.load(pos_ptr + t).to(tl.int64)
            valid = (slot >= 0) & (slot < N_CACHE) & (pos >= 0) & (pos < L_CACHE)  # never a write outside the cache
            entry = slot * stride_cn + kv_head * stride_ch + pos * stride_cl
            _norm_rope_head(x_ptr, k_cache_ptr + entry, cos_row, sin_row, kw_ptr, stride_kd, stride_cdd, stride_cd,
                            stride_sd, HALF, eps, valid, BLOCK, NORM)  # fmt: skip
            offs = tl.arange(0, BLOCK)
            mask = (offs < HALF) & valid
            v_head = v_ptr + b * stride_vb + t * stride_vt + kv_head * stride_vh
            for half in tl.static_range(2):
                v = tl.load(v_head + (offs + half * HALF) * stride_vd, mask=mask)
                tl.store(v_cache_ptr + entry + (offs + half * HALF) * stride_cdd, v, mask=mask)
        else:
            out_ptr = k_out_ptr + ((b * HKV + kv_head) * T + t) * (2 * HALF)
            _norm_rope_head(x_ptr, out_ptr, cos_row, sin_row, kw_ptr, stride_kd, 1, stride_cd, stride_sd, HALF, eps,
                            row >= 0, BLOCK, NORM)  # fmt: skip


def qk_norm_rope_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    eps: float,
    cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor] | None = None,
    q_scatter: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`.naive.qk_norm_rope_torch` in one launch for checked inputs of one dtype (any strides):
    ``(q_out [B, H, T, D], k_out [B, Hkv, T, D])``, both contiguous in ``q.dtype``.

    ``cache = (v, k_cache, v_cache, cache_slot, cache_pos)`` (checked by the caller; the caches share their strides):
    k's rotated heads and v's heads are written to ``[slot, :, pos]`` of the caches instead, and ``k_out`` is ``None``.
    ``q_scatter = (q_out, q_index)`` (with a ``cache_slot``): q's rotated heads go to ``q_out[slot, :, q_index]`` of
    the given ``[N, H, L, D]`` buffer, which is returned.
    """
    bsz, seqlen, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[2]
    if q_scatter is None:
        q_out = torch.empty(bsz, num_heads, seqlen, head_dim, dtype=q.dtype, device=q.device)
        q_index, q_strides, q_bounds = q, (0, 0, 0, 0), (0, 0)  # unread placeholders
    else:
        q_out, q_index = q_scatter
        q_strides, q_bounds = q_out.stride(), (q_out.shape[0], q_out.shape[2])
    norm = q_weight is not None
    if cache is None:
        k_out = torch.empty(bsz, num_kv_heads, seqlen, head_dim, dtype=q.dtype, device=q.device)
        v, k_cache, v_cache, slot, pos = k, k_out, k_out, None, q  # unread placeholders
        v_strides, cache_strides = (0, 0, 0, 0), (0, 0, 0, 0)
    else:
        k_out = None
        v, k_cache, v_cache, slot, pos = cache
        v_strides, cache_strides = v.stride(), k_cache.stride()
    if bsz * seqlen and num_heads + num_kv_heads:
        half = head_dim // 2
        # programmatic launch over the decode step's rows (q_out [B, H, T, D] seen as B * T rows); not into a scatter buffer
        pdl = triton_launch_options(q_out.view(bsz * seqlen, -1)) if q_scatter is None else {"PDL": 0}
        _qk_norm_rope_kernel[(bsz * seqlen, num_heads + num_kv_heads)](
            q, k, cos, sin,
            q_weight.contiguous() if norm else q, k_weight.contiguous() if norm else k,
            q_out, q_out if k_out is None else k_out, v, k_cache, v_cache, pos if slot is None else slot, pos, q_index,
            seqlen, num_heads, num_kv_heads, half, k_cache.shape[0], k_cache.shape[2], *q_bounds,
            *q.stride(), *k.stride(), cos.stride(2), cos.stride(3), sin.stride(2), sin.stride(3), *v_strides,
            *cache_strides, *q_strides, float(eps),
            BLOCK=triton.next_power_of_2(half), NORM=norm, CACHE=cache is not None, SLOTS=slot is not None,
            Q_SCATTER=q_scatter is not None, num_warps=1 if half <= 64 else 2, **LAUNCH_OPTIONS, **pdl,
        )  # fmt: skip
    return q_out, k_out
