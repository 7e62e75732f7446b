"""W12 planes decoded into a bf16 matrix in global memory, for GEMMs past the skinny kernels' rows.

The skinny and wide kernels decode W12 in registers and never write the bf16 weight: at 1-128 rows a GEMM is bound by
reading its weights, so 12 bits a weight are what it gains. Past that (a prefill, a long packed pass) a GEMM is bound
by its FLOPs, and decoding the weights once per call into a bf16 matrix that cuBLAS then multiplies costs one read of
1.5 bytes and one write of 2 bytes a weight, against the fused Triton kernel's decode in every M tile.
:func:`w12_dequant` is that decode: a Triton kernel over ``[BLOCK_N, BLOCK_K]`` tiles with the GEMM kernel's own
decode (:func:`specdec.kernels.w12_gemm.decode_ae_words` and ``decode_plane_words``), then the escapes of its rows
patched with their exact bits. Its output is ``W12Tensor.to_bf16()`` (or ``q_view()``) bit for bit, for any row range.

``specdec.formats.w12_linear(..., backend="dequant")`` decodes a weight in chunks of rows
(``specdec.formats.w12.DEQUANT_CHUNK_BYTES`` of bf16 at a time) and multiplies each with ``F.linear``.

Example (CPU tensors under ``TRITON_INTERPRET=1``, the test suite's setting; on a GPU pass CUDA tensors)::

    >>> ae, nib = torch.full((1, 8), 8, dtype=torch.uint8), torch.zeros(1, 4, dtype=torch.uint8)
    >>> ae[0, 2] = 0x80  # physical column 2 holds logical k = 1: the zero code with the sign set
    >>> base = torch.tensor([126], dtype=torch.uint8)
    >>> no_escapes = torch.zeros(0, dtype=torch.int16)
    >>> w12_dequant(ae, nib, base, torch.zeros(2, dtype=torch.int32), no_escapes, no_escapes, k=3)
    tensor([[1., -0., 1.]], dtype=torch.bfloat16)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specdec.kernels.w12_gemm import (
    INTERPRET,
    NO_NIB,
    _check_escapes,
    _check_planes,
    decode_ae_words,
    decode_plane_words,
    escape_coordinates,
    resolve_backend,
)

__all__ = ["w12_dequant", "DEQUANT_MODES"]

DEQUANT_MODES = ("exact", "q")
_MODE_IDS = {"exact": 0, "q": 2}  # decode_plane_words' MODE


@triton.jit
def _w12_dequant_kernel(
    w_ptr,
    nib_ptr,
    base_ptr,
    out_ptr,
    rows,
    K,
    KW,
    row0,
    MODE: tl.constexpr,
    EVEN_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    offs_r = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    r_mask = offs_r < rows
    # rows past the range read the range's first row (loads stay unmasked) and are not stored
    src = (row0 + tl.where(r_mask, offs_r, 0)).to(tl.int64)
    k0 = tl.program_id(1) * BLOCK_K
    offs_w = k0 // 4 + tl.arange(0, BLOCK_K // 4)
    offs_b = k0 // 8 + tl.arange(0, BLOCK_K // 8)
    base = tl.load(base_ptr + src).to(tl.uint32)
    if MODE == 2:
        konst = ((base << 7) | (base << 23) | 0x00080008)[:, None]
    else:
        konst = ((base << 7) | (base << 23))[:, None]
    if EVEN_K:
        aw = tl.load(w_ptr + src[:, None] * KW + offs_w[None, :])
    else:
        aw = tl.load(w_ptr + src[:, None] * KW + offs_w[None, :], mask=(offs_w < KW)[None, :], other=0)
    aw = aw.to(tl.uint32, bitcast=True)
    p02, p13 = decode_ae_words(aw)
    if MODE == 2:
        bw = aw  # the Q view reads no nibbles
    else:
        if EVEN_K:
            bw = tl.load(nib_ptr + src[:, None] * (KW // 2) + offs_b[None, :])
        else:
            bw = tl.load(nib_ptr + src[:, None] * (KW // 2) + offs_b[None, :], mask=(offs_b < KW // 2)[None, :], other=0)
        bw = bw.to(tl.uint32, bitcast=True)
    w16 = decode_plane_words(p02, p13, bw, konst, MODE, BLOCK_N, BLOCK_K)
    kk = k0 + tl.arange(0, BLOCK_K)
    dst = out_ptr + offs_r.to(tl.int64)[:, None] * K + kk[None, :]
    if EVEN_K:
        tl.store(dst, w16.to(tl.int16, bitcast=True), mask=r_mask[:, None])
    else:
        tl.store(dst, w16.to(tl.int16, bitcast=True), mask=r_mask[:, None] & (kk < K)[None, :])


def w12_dequant(
    ae: torch.Tensor,
    nib: torch.Tensor | None,
    base: torch.Tensor,
    esc_ptr: torch.Tensor | None,
    esc_pos: torch.Tensor | None,
    esc_bits: torch.Tensor | None,
    *,
    k: int,
    rows: tuple[int, int] | None = None,
    mode: str = "exact",
    coordinates: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Rows ``[r0, r1)`` of an ``[N, k]`` W12 weight decoded to a bf16 ``[r1 - r0, k]`` tensor.

    Args:
        ae, nib, base, esc_ptr, esc_pos, esc_bits: the W12 planes (``specdec/formats/w12.py``); the Q view
            (``mode="q"``) reads ``ae`` and ``base`` only and takes ``None`` for the others.
        k: the weight's columns (the planes are padded to ``ceil(k / 8) * 8``).
        rows: ``(r0, r1)`` with ``0 <= r0 < r1 <= N``; default every row.
        mode: ``"exact"``, the weight bit for bit (escapes patched), or ``"q"``, the 8-bit view (``q_view()``).
        coordinates: the escapes' ``(rows, cols)`` in storage order, as :func:`escape_coordinates` gives them, for a
            caller that decodes one weight in several row ranges (computed here when ``None``).

    Returns:
        bf16 ``[r1 - r0, k]``, contiguous, on the planes' device. With ``coordinates`` given the call reads nothing
        back to the host (it does not wait for the device).

    Raises ``ValueError`` / ``TypeError`` naming the argument for a mode, row range or plane that does not fit.
    """
    if mode not in DEQUANT_MODES:
        raise ValueError(f"mode: expected one of {DEQUANT_MODES}, got {mode!r}")
    exact = mode == "exact"
    n, k_padded = _check_planes(ae, nib if exact else NO_NIB, base, k)
    if exact:
        _check_escapes(esc_ptr, esc_pos, esc_bits, n, k, ae.device)
    if rows is not None and (
        not isinstance(rows, tuple) or len(rows) != 2 or not all(isinstance(r, int) and not isinstance(r, bool) for r in rows)
    ):
        raise TypeError(f"rows: expected a tuple (r0, r1) of two ints, got {rows!r}")
    r0, r1 = (0, n) if rows is None else rows
    if not 0 <= r0 < r1 <= n:
        raise ValueError(f"rows: expected 0 <= r0 < r1 <= N = {n}, got {rows!r}")
    patch = exact and esc_pos.numel() > 0
    if patch:
        esc_rows, esc_cols = coordinates if coordinates is not None else escape_coordinates(esc_ptr, esc_pos, n=n, k=k)
        if esc_rows.shape != esc_pos.shape or esc_cols.shape != esc_pos.shape:
            raise ValueError(
                f"coordinates: expected two tensors of shape {tuple(esc_pos.shape)} (one entry an escape), "
                f"got {tuple(esc_rows.shape)} and {tuple(esc_cols.shape)}"
            )
    resolve_backend("triton", ae.device)
    # one row more than asked: the escapes outside [r0, r1) are written there, so that the patch below needs no
    # boolean mask (whose index would wait for the device)
    out = torch.empty(r1 - r0 + 1, k, dtype=torch.int16, device=ae.device)
    block_n, block_k = (16, 64) if INTERPRET else (32, 256)
    kw = k_padded // 4
    grid = (triton.cdiv(r1 - r0, block_n), triton.cdiv(k, block_k))
    _w12_dequant_kernel[grid](
        ae.view(torch.int32),
        nib.view(torch.int32) if exact else out,
        base,
        out,
        r1 - r0,
        k,
        kw,
        r0,
        MODE=_MODE_IDS[mode],
        EVEN_K=k % block_k == 0 and k_padded == k,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
    )
    if patch:
        local = esc_rows - r0
        local = torch.where((local >= 0) & (local < r1 - r0), local, r1 - r0)
        out[local, esc_cols] = esc_bits
    return out[: r1 - r0].view(torch.bfloat16)
