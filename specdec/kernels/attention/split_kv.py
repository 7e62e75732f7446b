"""Masked attention of a few query rows over a long KV cache in two Triton launches (split-KV, "flash decoding").

A decode step's query is a handful of rows (the query heads that share a KV head, times 1-16 new tokens) against a
cache of thousands of slots. One program per KV head (what a prefill-shaped kernel does at this size) streams the whole
cache through one SM. Here program ``(bh, j)`` of the first launch covers slots ``[j * chunk, (j + 1) * chunk)`` of
batch-head ``bh`` and keeps an online softmax over them: the running maximum ``m``, the sum ``l`` of
``exp(score - m)`` and ``acc = sum exp(score - m) v``, all float32. The second launch, one program per batch-head and row,
rescales the splits to their common maximum ``M`` and writes ``sum_j exp(m_j - M) acc_j / sum_j exp(m_j - M) l_j``,
either as ``[B, Hkv, R, D]`` or token-major (``tokens``: ``[B, T, H * D]``, what the output projection reads, so that
no transposing copy sits between them when ``T > 1``); both launched programmatically where a norm would be
(:func:`specdec.kernels.launch.triton_launch_options`: captured, the projection's rows at most 16), each waits for
the kernel before it (the q/k norm + RoPE, then the first launch) and then lets the next one (the second launch, then
the output projection) start.
A split whose slots are all masked has ``m = -inf`` and weight 0; a row with no allowed slot anywhere gives zeros, as
the reference and SDPA do. Float32 inputs take IEEE float32 products (``PRECISION``): Triton's default for them on
NVIDIA GPUs is TF32, ~1e-4 off the reference.

Under ``TRITON_INTERPRET=1`` (``UPCAST``) the dot products run in float32: the interpreter's bf16 ``tl.dot`` is not
exact.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from specdec.kernels.launch import join_programmatic_launch, triton_launch_options

__all__ = ["decode_attention_triton"]

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _split_kernel(
    q_ptr, k_ptr, v_ptr, mask_ptr, m_ptr, l_ptr, acc_ptr,
    R, S, CHUNK, HKV, SPLITS, scale,
    stride_qb, stride_qh, stride_qr, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_mb, stride_mr, stride_ms,
    BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    join_programmatic_launch(PDL)  # specdec.kernels.launch: the combine launch may start now (it waits for this)
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = (bh // HKV).to(tl.int64)  # b * stride_kb passes 2^31 elements in a cache of many long slots
    h = bh % HKV
    rows = tl.arange(0, BLOCK_R)
    dims = tl.arange(0, D)
    row_ok = rows < R
    q = tl.load(
        q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qr + dims[None, :] * stride_qd,
        mask=row_ok[:, None],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_R], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_R], tl.float32)
    acc = tl.zeros([BLOCK_R, D], tl.float32)
    start = split * CHUNK
    end = tl.minimum(start + CHUNK, S)
    for n0 in range(start, end, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < end
        k = tl.load(
            k_ptr + b * stride_kb + h * stride_kh + cols[:, None] * stride_ks + dims[None, :] * stride_kd,
            mask=col_ok[:, None],
            other=0.0,
        )
        v = tl.load(
            v_ptr + b * stride_vb + h * stride_vh + cols[:, None] * stride_vs + dims[None, :] * stride_vd,
            mask=col_ok[:, None],
            other=0.0,
        )
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        add = tl.load(
            mask_ptr + b * stride_mb + rows[:, None] * stride_mr + cols[None, :] * stride_ms,
            mask=row_ok[:, None] & col_ok[None, :],
            other=float("-inf"),
        )
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale + add.to(tl.float32)  # [BLOCK_R, BLOCK_N]
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # all masked so far: nothing to rescale
        alpha = tl.exp(m_i - m_use)
        p = tl.exp(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    base = (bh * SPLITS + split) * R  # the R real rows only: the combine reads no padding
    tl.store(m_ptr + base + rows, m_i, mask=row_ok)
    tl.store(l_ptr + base + rows, l_i, mask=row_ok)
    tl.store(acc_ptr + (base + rows[:, None]) * D + dims[None, :], acc, mask=row_ok[:, None])


@triton.jit
def _combine_kernel(
    m_ptr, l_ptr, acc_ptr, out_ptr, R, HKV, SPLITS, T,
    stride_ob, stride_oh, stride_og, stride_ot, stride_od,
    BLOCK_S: tl.constexpr, D: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    join_programmatic_launch(PDL)  # specdec.kernels.launch: the output projection after it may start now
    bh = tl.program_id(0)
    row = tl.program_id(1)
    b = bh // HKV
    h = bh % HKV
    dims = tl.arange(0, D)
    js = tl.arange(0, BLOCK_S)
    first = bh * SPLITS * R + row  # split j of this (batch-head, row) at first + j * R
    big = tl.full([BLOCK_S], float("-inf"), tl.float32)
    for j0 in range(0, SPLITS, BLOCK_S):
        big = tl.maximum(big, tl.load(m_ptr + first + (j0 + js) * R, mask=j0 + js < SPLITS, other=float("-inf")))
    top = tl.max(big, axis=0)
    top = tl.where(top == float("-inf"), 0.0, top)
    total = tl.zeros([BLOCK_S], tl.float32)
    out = tl.zeros([BLOCK_S, D], tl.float32)
    for j0 in range(0, SPLITS, BLOCK_S):
        ok = j0 + js < SPLITS
        at = first + (j0 + js) * R
        w = tl.exp(tl.load(m_ptr + at, mask=ok, other=float("-inf")) - top)
        total += w * tl.load(l_ptr + at, mask=ok, other=0.0)
        out += w[:, None] * tl.load(acc_ptr + at[:, None] * D + dims[None, :], mask=ok[:, None], other=0.0)
    total_sum = tl.sum(total, axis=0)
    res = tl.where(total_sum > 0, tl.sum(out, axis=0) / total_sum, 0.0)  # no allowed slot: zeros, as SDPA
    at = b * stride_ob + h * stride_oh + (row // T) * stride_og + (row % T) * stride_ot  # row = g * T + t
    tl.store(out_ptr + at + dims * stride_od, res.to(out_ptr.dtype.element_ty))


def dot_precision(dtype: torch.dtype) -> str:
    """The ``input_precision`` of the kernel's dot products for inputs of ``dtype``: IEEE float32 products for float32
    (Triton's NVIDIA default for them is TF32), the tensor cores' own for 16-bit inputs.

    Example:
        >>> dot_precision(torch.float32), dot_precision(torch.bfloat16)
        ('ieee', 'tf32')
    """
    return "ieee" if dtype == torch.float32 else "tf32"


def default_splits(kv_heads: int, slots: int, block_n: int, device: torch.device, sms: int | None = None) -> int:
    """Splits of the cache a batch-head: enough programs for two a multiprocessor at batch 1, each at least ``block_n``
    slots. Counted from the KV heads, not the batch, so that a request's splits, and so its output bits, do not depend
    on the other requests in a batch (a batch only adds programs). ``sms``: the multiprocessors to fill (``None``:
    ``device``'s, 32 off CUDA).

    Example:
        >>> default_splits(8, 4096, 64, torch.device("cpu")), default_splits(8, 4096, 64, torch.device("cpu"), sms=132)
        (8, 33)
    """
    if sms is None:
        sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 32
    return max(1, min(triton.cdiv(slots, block_n), triton.cdiv(2 * sms, kv_heads)))


def decode_attention_triton(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, mask: torch.Tensor, *, splits: int | None = None,
    block_n: int = 64, tokens: int | None = None, num_warps: int = 4,
) -> torch.Tensor:  # fmt: skip
    """:func:`.naive.decode_attention_torch` in two launches (arguments checked by the caller); ``splits`` of the
    slots a batch-head (``None``: :func:`default_splits`). ``tokens``: ``None`` returns ``[B, Hkv, R, D]``; ``T``
    reads row ``g * T + t`` as query head ``g`` of the KV head at token ``t`` and returns ``[B, T, Hkv * G * D]``
    (``G = R / T``), written there by the combine launch. ``num_warps``: the split launch's warps a program (1, 2, 4,
    8 or 16; the sums' reduction order follows the layout, so results may differ from 4's in the last bits). Compiled
    for sm_90 at 4, the split kernel at 64 query rows spills and at 8 it does not, yet 8 timed 3-8 % slower on an H100
    (``benchmarks/NOTES.md``, "The split attention at 8 warps a program...: measured")."""
    if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps: expected 1, 2, 4, 8 or 16, got {num_warps!r}")
    bsz, hkv, r, d = q.shape
    s = k_cache.shape[2]
    if tokens is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # contiguous whatever q's strides
        rows_after = out.view(bsz * r, hkv * d)
        t, (stride_b, stride_h, stride_t, stride_d), stride_g = r, out.stride(), 0
    else:
        out = torch.empty(bsz, tokens, hkv, r // tokens, d, dtype=q.dtype, device=q.device)  # [B, T, Hkv, G, D]
        rows_after = out.view(bsz * tokens, hkv * (r // tokens) * d)
        t, (stride_b, stride_t, stride_h, stride_g, stride_d) = tokens, out.stride()
    result = out if tokens is None else out.view(bsz, tokens, hkv * (r // tokens) * d)
    if out.numel() == 0:
        return result
    if s == 0:  # no slot to attend: the reference's zeros
        out.zero_()
        return result
    chunk_blocks = triton.cdiv(triton.cdiv(s, block_n), splits or default_splits(hkv, s, block_n, q.device))
    chunk = chunk_blocks * block_n
    n_splits = triton.cdiv(s, chunk)
    block_r = max(16, triton.next_power_of_2(r))
    m = torch.empty(bsz * hkv, n_splits, r, dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)  # noqa: E741 (the softmax's usual name)
    acc = torch.empty(bsz * hkv, n_splits, r, d, dtype=torch.float32, device=q.device)
    mask_b = mask.stride(0) if mask.shape[0] > 1 else 0
    pdl = triton_launch_options(rows_after)  # the rows the output projection after this reads
    _split_kernel[(bsz * hkv, n_splits)](
        q, k_cache, v_cache, mask, m, l, acc, r, s, chunk, hkv, n_splits, d**-0.5,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), mask_b, mask.stride(2), mask.stride(3),
        BLOCK_R=block_r, BLOCK_N=block_n, D=d, UPCAST=_INTERPRET,
        PRECISION=dot_precision(torch.float32 if _INTERPRET else q.dtype), num_warps=num_warps, **pdl,
    )  # fmt: skip
    block_s = min(32, triton.next_power_of_2(n_splits))
    _combine_kernel[(bsz * hkv, r)](
        m, l, acc, out, r, hkv, n_splits, t, stride_b, stride_h, stride_g, stride_t, stride_d,
        BLOCK_S=block_s, D=d, **pdl,
    )  # fmt: skip
    return result
