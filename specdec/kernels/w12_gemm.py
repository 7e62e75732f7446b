"""W12 GEMM kernels: ``y = x @ W^T`` with W given as the raw W12 planes.

The weight arrives as plain tensors, in the layout that ``specdec/formats/w12.py`` documents (``docs/w12.md``
derives it): the AE plane ``ae`` uint8 ``[N, k_padded]``, the nibble plane ``nib`` uint8
``[N, k_padded // 2]``, the row bases ``base`` uint8 ``[N]`` and the escape list in
``ESCAPE_TILE x ESCAPE_TILE`` tiles: ``esc_ptr`` int32 ``[num_tiles + 1]``, ``esc_pos`` and ``esc_bits``
int16 ``[num_escapes]`` (see :func:`escape_coordinates`). The 12-bit code with ``E = 0`` and all
mantissa bits 0 is reserved for zero: it decodes to ``sign << 15`` (``±0``), never to ``±2^(base-127)``.
This module knows nothing of ``W12Tensor``; ``specdec.formats`` unpacks its tensors and calls these
functions.

* :func:`w12_matmul` — exact. The Triton kernel decodes W12 into bf16 in registers (the bf16
  matrix never exists in global memory), patches escaped weights in registers with their exact bits,
  and feeds ``tl.dot``: the GEMM sees weights bit-identical to the bf16 original, so its output is
  bit-identical to the same kernel run on the bf16 weights (:func:`bf16_linear_triton`; tested).
* :func:`q_matmul` — the 8-bit view. Reads only the AE plane and the row bases, low mantissa
  nibble at the midpoint; an AE byte with ``E = 0`` and ``m_hi = 0`` reads as ``±0``; escapes are not patched.
* :func:`decode_w12_tiles` — the same kernel storing every decoded weight tile, for tests.

Their pure-PyTorch references decode the planes and call ``F.linear``
(``specdec.formats.w12_linear(..., backend="torch")``).

The examples below use CPU tensors, which the kernels accept under ``TRITON_INTERPRET=1`` (the test
suite's setting); on a GPU, pass CUDA tensors.

Kernel structure: swap-AB skinny GEMM, the weight tile ``[BLOCK_N, BLOCK_K]`` is the left operand and
``x^T [BLOCK_K, BLOCK_M]`` the right one, so M (tokens) may be as small as 1 with a 16-wide tile.
Grid ``(N tiles, split_k, M tiles)``; with split-K the fp32 partials go to a workspace and a second
small kernel reduces them in a fixed order (deterministic). Decode works on 32-bit words: one AE word
(4 weights) gives two bf16x2 words with two shifts and masks each, the B nibbles of 8 weights come
from one word; the row base is added only to the halves whose 15 low bits are not all zero (the zero code).
The stored escape tiles are regrouped once per kernel tile shape into a per-(row tile, k tile) index
(:func:`escape_tile_index`), kept in the ``escape_cache`` the caller passes.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

__all__ = [
    "W12KernelConfig",
    "REBIAS_EXPONENT",
    "w12_matmul",
    "q_matmul",
    "decode_w12_tiles",
    "decode_ae_words",
    "decode_plane_words",
    "bf16_linear_triton",
    "default_config",
    "escape_tile_index",
    "escape_coordinates",
    "num_escape_tiles",
    "pack_escape_tiles",
    "check_planes",
    "ESCAPE_TILE",
    "MAX_BASE",
    "rebias_escape_bits",
    "resolve_backend",
]

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# bf16 exponent 112 puts a 4-bit offset E at 112 + E, i.e. values in [2^-15, 2): always normal.
REBIAS_EXPONENT = 112
# Escapes are stored per tile of ESCAPE_TILE rows x ESCAPE_TILE columns, so a position inside a
# tile, (row % 256) << 8 | (col % 256), fits 16 bits.
ESCAPE_TILE = 256

_MODE_EXACT = 0
_MODE_REBIAS = 1
_MODE_Q = 2
_MODE_BF16 = 3
_MODES = {"exact": _MODE_EXACT, "rebias": _MODE_REBIAS, "q": _MODE_Q, "bf16": _MODE_BF16}


@dataclass(frozen=True)
class W12KernelConfig:
    """Tile shape and launch settings of the W12 GEMM kernels.

    ``split_k`` is the number of K slices (1 = no split); the others are Triton meta-parameters.
    ``block_k`` must be a multiple of 32 (8 weights per nibble word, and at least 16 for ``tl.dot``).

    Example::

        >>> W12KernelConfig(block_m=32, split_k=4).block_k
        128
        >>> W12KernelConfig(block_n=48)
        Traceback (most recent call last):
        ...
        ValueError: config.block_n: expected a power of two >= 16, got 48
    """

    block_m: int = 16
    block_n: int = 64
    block_k: int = 128
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if v < 16 or v & (v - 1):
                raise ValueError(f"config.{name}: expected a power of two >= 16, got {v}")
        if self.block_k % 32:
            raise ValueError(f"config.block_k: expected a multiple of 32, got {self.block_k}")
        if self.split_k < 1:
            raise ValueError(f"config.split_k: expected >= 1, got {self.split_k}")


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def default_config(m: int, n: int, k: int, device: torch.device) -> W12KernelConfig:
    """Heuristic tile choice: one M tile up to 128 tokens, split-K until ~2 programs per SM."""
    block_m = 16
    while block_m < min(m, 128):
        block_m *= 2
    if INTERPRET:
        block_n, block_k = 32, 64
    else:
        block_n, block_k = 64, 256 if k >= 2048 else 128
    num_stages = 3
    while shared_memory_estimate(block_m, block_n, block_k, num_stages) > SHARED_MEMORY_BUDGET and block_k > 64:
        block_k //= 2
    tiles = triton.cdiv(n, block_n) * triton.cdiv(m, block_m)
    n_kb = triton.cdiv(k, block_k)
    split = max(1, min(n_kb, (2 * _num_sms(device)) // max(1, tiles)))
    return W12KernelConfig(block_m=block_m, block_n=block_n, block_k=block_k, split_k=split, num_stages=num_stages)


SHARED_MEMORY_BUDGET = 200 * 1024
"""Bytes of shared memory a default tile may plan for (an H200 block gets at most 227 KiB)."""


def shared_memory_estimate(block_m: int, block_n: int, block_k: int, num_stages: int) -> int:
    """Shared memory of one pipelined tile: per stage the bf16 activations and one byte per weight.

    Calibrated on the H200: Triton asked 237,568 B for ``(128, 64, 256)`` at 3 stages; this gives 245,760.

    Example:
        >>> shared_memory_estimate(16, 64, 256, 3)
        73728
    """
    return num_stages * (2 * block_m * block_k + block_n * block_k)


@triton.jit
def _nonzero_halves(p):
    """0x7FFF in each 16-bit half of ``p`` whose bits 0..14 are not all zero, else 0 (uint32 in and out).

    Bits 11..14 of each half are clear here, so the low 15 bits are at most 0x07FF and ``low + 0x7FFF``
    sets bit 15 exactly when they are nonzero, without carrying into the next half.
    """
    nz = ((p & 0x7FFF7FFF) + 0x7FFF7FFF) & 0x80008000
    return nz - (nz >> 15)


@triton.jit
def decode_ae_words(aw):
    """The two bf16x2 words (uint32 each) of every AE word ``aw`` (uint32, bytes k0, k2, k1, k3): ``(k0, k1)`` and
    ``(k2, k3)`` with the sign in bit 15 and E, m_hi in bits 7..10 and 4..6 of each half, bits 11..14 and 0..3 zero.
    :func:`decode_plane_words` finishes them. Used by the GEMM kernel and :func:`specdec.kernels.w12_dequant.w12_dequant`.
    """
    p02 = ((aw << 8) & 0x80008000) | ((aw << 4) & 0x07F007F0)
    p13 = (aw & 0x80008000) | ((aw >> 4) & 0x07F007F0)
    return p02, p13


@triton.jit
def decode_plane_words(p02, p13, bw, konst, MODE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The bf16 bits (uint16 ``[BLOCK_N, BLOCK_K]``, logical k order) of a weight tile from :func:`decode_ae_words`'
    words of its AE words (``[BLOCK_N, BLOCK_K // 4]`` each) and its nibble words ``bw`` (uint32 ``[BLOCK_N, BLOCK_K //
    8]``; not read in MODE 2, the Q view, which takes the midpoint nibble instead). ``konst``: ``[BLOCK_N, 1]``, the row
    base in both halves' exponent field (MODE 0 exact, with the midpoint nibble in MODE 2) or the exponent field 112
    (MODE 1, rebias). A half whose 15 low bits are zero (the zero code) gets no base: it stays ``sign << 15``. Escapes
    are not patched here.
    """
    if MODE == 2:
        p02 = p02 + (konst & _nonzero_halves(p02))
        p13 = p13 + (konst & _nonzero_halves(p13))
    else:
        n01 = bw & 0x000F000F
        n23 = (bw >> 4) & 0x000F000F
        n45 = (bw >> 8) & 0x000F000F
        n67 = (bw >> 12) & 0x000F000F
        n02 = tl.reshape(tl.join(n01, n45), [BLOCK_N, BLOCK_K // 4])
        n13 = tl.reshape(tl.join(n23, n67), [BLOCK_N, BLOCK_K // 4])
        p02 = p02 | n02
        p13 = p13 | n13
        if MODE == 1:
            p02 = p02 | (konst & _nonzero_halves(p02))
            p13 = p13 | (konst & _nonzero_halves(p13))
        else:
            # E + base <= 254 cannot carry into the sign bit or the other half.
            p02 = p02 + (konst & _nonzero_halves(p02))
            p13 = p13 + (konst & _nonzero_halves(p13))
    p = tl.reshape(tl.join(p02, p13), [BLOCK_N, BLOCK_K // 2])
    lo = (p & 0xFFFF).to(tl.uint16)
    hi = (p >> 16).to(tl.uint16)
    return tl.reshape(tl.join(lo, hi), [BLOCK_N, BLOCK_K])


@triton.jit
def _w12_gemm_kernel(
    x_ptr,
    w_ptr,
    nib_ptr,
    base_ptr,
    tile_ptr,
    esc_pos_ptr,
    esc_v_ptr,
    bias_ptr,
    out_ptr,
    ws_ptr,
    dbg_ptr,
    M,
    N,
    K,
    KW,
    stride_xm,
    stride_om,
    stride_wn,
    n_kblocks,
    kblocks_per_split,
    MODE: tl.constexpr,
    HAS_ESC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SPLIT: tl.constexpr,
    DEBUG: tl.constexpr,
    EVEN_K: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    n_mask = offs_n < N
    m_mask = offs_m < M
    # Out-of-range rows and tokens read row 0 instead of being masked: loads stay unpredicated
    # and vectorised, and the store mask drops those results.
    # int64 offsets: rows x strides pass 2^31 elements on large weights (a 262k x 8k head) and long prefills
    rows_n = tl.where(n_mask, offs_n, 0).to(tl.int64)
    rows_m = tl.where(m_mask, offs_m, 0).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    offs_w = tl.arange(0, BLOCK_K // 4)
    offs_b = tl.arange(0, BLOCK_K // 8)
    # Position of each weight inside the [BLOCK_N, BLOCK_K] tile, the key of the escape index.
    local_pos = tl.arange(0, BLOCK_N)[:, None] * BLOCK_K + offs_k[None, :]

    if MODE != 3:
        base = tl.load(base_ptr + rows_n).to(tl.uint32)
        if MODE == 1:
            # Exponent field 112 + E: the row base leaves the loop (see the epilogue scale).
            konst = tl.full([BLOCK_N, 1], 0x38003800, tl.uint32)
        elif MODE == 2:
            konst = ((base << 7) | (base << 23) | 0x00080008)[:, None]
        else:
            konst = ((base << 7) | (base << 23))[:, None]

    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    kb_start = pid_k * kblocks_per_split
    kb_end = tl.minimum(kb_start + kblocks_per_split, n_kblocks)
    x_ptrs = x_ptr + rows_m[:, None] * stride_xm + (kb_start * BLOCK_K + offs_k)[None, :]
    if MODE == 3:
        w_ptrs = w_ptr + rows_n[:, None] * stride_wn + (kb_start * BLOCK_K + offs_k)[None, :]
    else:
        w_ptrs = w_ptr + rows_n[:, None] * KW + (kb_start * (BLOCK_K // 4) + offs_w)[None, :]
        b_ptrs = nib_ptr + rows_n[:, None] * (KW // 2) + (kb_start * (BLOCK_K // 8) + offs_b)[None, :]
    for kb in range(kb_start, kb_end):
        k0 = kb * BLOCK_K
        kk = k0 + offs_k
        if EVEN_K:
            x = tl.load(x_ptrs)
        else:
            x = tl.load(x_ptrs, mask=(kk < K)[None, :], other=0.0)
        xt = tl.trans(x)  # [BLOCK_K, BLOCK_M]
        if MODE == 3:
            if EVEN_K:
                w = tl.load(w_ptrs)
            else:
                w = tl.load(w_ptrs, mask=(kk < K)[None, :], other=0.0)
        else:
            if EVEN_K:
                aw = tl.load(w_ptrs)
            else:
                aw = tl.load(w_ptrs, mask=((k0 // 4 + offs_w) < KW)[None, :], other=0)
            # [BLOCK_N, BLOCK_K // 4], bytes k0, k2, k1, k3
            aw = aw.to(tl.uint32, bitcast=True)
            p02, p13 = decode_ae_words(aw)
            if MODE == 2:
                bw = aw  # the Q view reads no nibbles: decode_plane_words does not look at bw
            else:
                if EVEN_K:
                    bw = tl.load(b_ptrs)
                else:
                    bw = tl.load(b_ptrs, mask=((k0 // 8 + offs_b) < KW // 2)[None, :], other=0)
                bw = bw.to(tl.uint32, bitcast=True)  # [BLOCK_N, BLOCK_K // 8]
            w16 = decode_plane_words(p02, p13, bw, konst, MODE, BLOCK_N, BLOCK_K)
            if HAS_ESC:
                tile = pid_n * n_kblocks + kb
                e_start = tl.load(tile_ptr + tile)
                e_end = tl.load(tile_ptr + tile + 1)
                for e in range(e_start, e_end):
                    pos = tl.load(esc_pos_ptr + e)
                    v = tl.load(esc_v_ptr + e).to(tl.uint16, bitcast=True)
                    w16 = tl.where(local_pos == pos, v, w16)
            w = w16.to(tl.bfloat16, bitcast=True)
        if DEBUG:
            tl.store(dbg_ptr + offs_n[:, None] * K + kk[None, :], w, mask=n_mask[:, None] & (kk < K)[None, :])
        if UPCAST_DOT:
            acc += tl.dot(w.to(tl.float32), xt.to(tl.float32))
        else:
            acc = tl.dot(w, xt, acc)
        x_ptrs += BLOCK_K
        if MODE == 3:
            w_ptrs += BLOCK_K
        else:
            w_ptrs += BLOCK_K // 4
            b_ptrs += BLOCK_K // 8

    if MODE == 1:
        # 2^(base - 112) as an fp32 bit pattern; base + 15 lies in [16, 254], always normal.
        scale = ((base + (127 - 112)) << 23).to(tl.float32, bitcast=True)
        acc = acc * scale[:, None]
    out_mask = n_mask[:, None] & m_mask[None, :]
    if SPLIT:
        tl.store(ws_ptr + pid_k.to(tl.int64) * M * N + rows_m[None, :] * N + offs_n[:, None], acc, mask=out_mask)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[:, None]
        tl.store(out_ptr + rows_m[None, :] * stride_om + offs_n[:, None], acc.to(tl.bfloat16), mask=out_mask)


@triton.jit
def _splitk_reduce_kernel(
    ws_ptr,
    bias_ptr,
    out_ptr,
    MN,
    N,
    SPLIT_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    # Fixed summation order over the slices: the result does not depend on scheduling.
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)


def resolve_backend(backend: str, device: torch.device) -> str:
    """``"auto"`` -> ``"triton"`` on CUDA, else ``"torch"``; checks that ``"triton"`` can run on ``device``.

    Example::

        >>> resolve_backend("auto", torch.device("cpu"))
        'torch'
    """
    if backend not in ("auto", "triton", "torch"):
        raise ValueError(f"backend: expected 'auto', 'triton' or 'torch', got {backend!r}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    if backend == "triton" and device.type != "cuda" and not INTERPRET:
        raise ValueError(f"backend: 'triton' needs a CUDA tensor (or TRITON_INTERPRET=1), got device {device}")
    return backend


def _check_tensor(name: str, t: object, dtype: torch.dtype, shape: tuple[int, ...] | None, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}, got {t.dtype}")
    if shape is not None and tuple(t.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name}: expected device {device} (where ae lives), got {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor, got strides {t.stride()}")


NO_NIB = object()  # _check_planes' nib for the Q view


# The largest row base: it keeps the whole 16-binade window E = 0..15 inside the normal exponents [1, 254], and the
# decode's 8-bit exponent add E + base from carrying into the sign bit.
MAX_BASE = 239


def _check_planes(ae, nib, base, k: int) -> tuple[int, int]:
    """Checks the planes of an ``[N, k]`` weight; returns ``(N, k_padded)``. ``nib``: the nibble plane, or
    :data:`NO_NIB` for the Q view, which reads none (an exact read given ``None`` is refused)."""
    if not isinstance(ae, torch.Tensor) or ae.dim() != 2:
        raise ValueError(f"ae: expected a 2-D uint8 tensor [N, k_padded], got {getattr(ae, 'shape', type(ae).__name__)}")
    n, k_padded = ae.shape
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or (k + 7) // 8 * 8 != k_padded:
        raise ValueError(f"k: expected an int with k_padded = ceil(k / 8) * 8 = {k_padded} (ae's width), got {k!r}")
    _check_tensor("ae", ae, torch.uint8, (n, k_padded), ae.device)
    if nib is not NO_NIB:
        _check_tensor("nib", nib, torch.uint8, (n, k_padded // 2), ae.device)
    _check_tensor("base", base, torch.uint8, (n,), ae.device)
    return n, k_padded


def num_escape_tiles(n: int, k: int) -> int:
    """Number of ``ESCAPE_TILE x ESCAPE_TILE`` escape tiles of an ``[n, k]`` weight (``esc_ptr`` has one more entry)."""
    return triton.cdiv(n, ESCAPE_TILE) * triton.cdiv(k, ESCAPE_TILE)


def _check_escapes(esc_ptr, esc_pos, esc_bits, n: int, k: int, device: torch.device) -> None:
    _check_tensor("esc_ptr", esc_ptr, torch.int32, (num_escape_tiles(n, k) + 1,), device)
    _check_tensor("esc_pos", esc_pos, torch.int16, None, device)
    if esc_pos.dim() != 1:
        raise ValueError(f"esc_pos: expected a 1-D tensor [num_escapes], got shape {tuple(esc_pos.shape)}")
    _check_tensor("esc_bits", esc_bits, torch.int16, (esc_pos.numel(),), device)


def check_planes(ae, nib, base, esc_ptr, esc_pos, esc_bits, *, k: int) -> int:
    """Check the dtypes, shapes and devices of the W12 planes of an ``[N, k]`` weight and the escape offsets; returns N.

    Raises ``TypeError``/``ValueError`` naming the plane, also for a row base above :data:`MAX_BASE` (the kernels'
    exponent add would carry into the sign and the next weight). Reads ``base``, ``esc_ptr`` and ``esc_pos`` (one
    device-to-host copy each), so call it once per tensor, not per GEMM.

    Example::

        >>> ae, nib = torch.zeros(2, 8, dtype=torch.uint8), torch.zeros(2, 4, dtype=torch.uint8)
        >>> no_escapes = torch.zeros(0, dtype=torch.int16)
        >>> check_planes(ae, nib, torch.zeros(2, dtype=torch.uint8), torch.zeros(2, dtype=torch.int32),
        ...              no_escapes, no_escapes, k=5)
        2
    """
    n, _ = _check_planes(ae, nib, base, k)
    top = int(base.max()) if n else 0
    if top > MAX_BASE:
        raise ValueError(f"base: expected row bases <= {MAX_BASE} (E + base <= 254 in the decode), got {top}")
    _check_escapes(esc_ptr, esc_pos, esc_bits, n, k, ae.device)
    escape_coordinates(esc_ptr, esc_pos, n=n, k=k)
    return n


def _check_activation(x, bias, n: int, k: int, device: torch.device) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a bf16 torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"x: expected dtype torch.bfloat16, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] != k:
        raise ValueError(f"x: expected shape [..., {k}] (K of the weight), got {tuple(x.shape)}")
    if x.device != device:
        raise ValueError(f"x: expected device {device} (where the weight lives), got {x.device}")
    if bias is not None:  # a strided bias (a view) is copied contiguous by _launch
        _check_tensor("bias", bias.contiguous() if isinstance(bias, torch.Tensor) else bias, torch.bfloat16, (n,), device)


def rebias_escape_bits(esc_rows: torch.Tensor, esc_bits: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """Escape bits scaled by ``2^(112 - base[row])``, as int16 ``[num_escapes]``.

    Raises ``ValueError`` if an escaped weight is not exactly representable after the scaling. NaN
    escapes keep their pattern (NaN times anything is NaN, whatever the payload).

    Example::

        >>> rows = torch.tensor([0], dtype=torch.int32)
        >>> one = torch.tensor([1.0], dtype=torch.bfloat16).view(torch.int16)
        >>> rebias_escape_bits(rows, one, torch.tensor([127], dtype=torch.uint8)).view(torch.bfloat16)
        tensor([3.0518e-05], dtype=torch.bfloat16)
    """
    bits = esc_bits.to(torch.int32) & 0xFFFF
    true = bits.to(torch.int16).view(torch.bfloat16).to(torch.float64)
    shift = (REBIAS_EXPONENT - base.long()[esc_rows.long()]).to(torch.float64)
    scaled = (true * torch.exp2(shift)).to(torch.float32).to(torch.bfloat16)
    back = scaled.to(torch.float64) * torch.exp2(-shift)
    same = (back == true) | (torch.isnan(back) & torch.isnan(true))
    if not bool(same.all()):
        bad = int((~same).sum())
        raise ValueError(
            f"rebias: {bad} escaped weights are not exactly representable after the 2^(112-base) rebias; "
            "use the exact mode (rebias=False)"
        )
    return torch.where(torch.isnan(true), esc_bits, scaled.view(torch.int16))


def escape_coordinates(esc_ptr: torch.Tensor, esc_pos: torch.Tensor, *, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows and columns (int64 ``[num_escapes]``) of the escapes of an ``[n, k]`` weight.

    Storage: the weight is cut into tiles of ``ESCAPE_TILE x ESCAPE_TILE`` (256 x 256), numbered row-tile
    major (``t = (row // 256) * ceil(k / 256) + col // 256``); the escapes of tile ``t`` are entries
    ``esc_ptr[t]:esc_ptr[t + 1]``, each a 16-bit position ``(row % 256) << 8 | (col % 256)`` in
    ``esc_pos`` (int16 holding the uint16 pattern) and its bf16 bits in ``esc_bits``. Raises
    ``ValueError`` when ``esc_ptr`` is not a valid offset vector or a position lies outside the weight.

    Example::

        >>> ptr = torch.tensor([0, 1, 2], dtype=torch.int32)  # a 2 x 300 weight has tiles 0 and 1
        >>> pos = torch.tensor([0x0103, 0x0002], dtype=torch.int16)
        >>> rows, cols = escape_coordinates(ptr, pos, n=2, k=300)
        >>> rows.tolist(), cols.tolist()
        ([1, 0], [3, 258])
    """
    n_tiles = num_escape_tiles(n, k)
    if esc_ptr.numel() != n_tiles + 1:
        raise ValueError(f"esc_ptr: expected {n_tiles + 1} offsets for an [{n}, {k}] weight, got {esc_ptr.numel()}")
    ptr = esc_ptr.long()
    counts = ptr[1:] - ptr[:-1]
    if int(ptr[0]) != 0 or int(ptr[-1]) != esc_pos.numel() or bool((counts < 0).any()):
        raise ValueError(
            f"esc_ptr: expected non-decreasing offsets from 0 to {esc_pos.numel()} (the length of esc_pos), "
            f"got first {int(ptr[0])}, last {int(ptr[-1])}"
        )
    tile = torch.repeat_interleave(torch.arange(n_tiles, device=esc_pos.device), counts)
    pos = esc_pos.long() & 0xFFFF
    n_ct = triton.cdiv(k, ESCAPE_TILE)
    rows = (tile // n_ct) * ESCAPE_TILE + (pos >> 8)
    cols = (tile % n_ct) * ESCAPE_TILE + (pos & 0xFF)
    if bool(((rows >= n) | (cols >= k)).any()):
        raise ValueError(f"esc_pos: expected positions inside the [{n}, {k}] weight, got one past its edge")
    return rows, cols


def pack_escape_tiles(
    rows: torch.Tensor, cols: torch.Tensor, bits: torch.Tensor, *, n: int, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Store escapes at ``(rows, cols)`` (int ``[num_escapes]``, any order) with their bf16 ``bits`` as escape tiles.

    Returns ``(esc_ptr int32 [num_tiles + 1], esc_pos int16, esc_bits int16 [num_escapes])``, the layout
    :func:`escape_coordinates` reads back; inside a tile the entries are sorted by row, then column.

    Example::

        >>> rows, cols = torch.tensor([0, 1]), torch.tensor([258, 3])
        >>> ptr, pos, b = pack_escape_tiles(rows, cols, torch.tensor([7, 9], dtype=torch.int16), n=2, k=300)
        >>> ptr.tolist(), [hex(p) for p in pos.tolist()], b.tolist()
        ([0, 1, 2], ['0x103', '0x2'], [9, 7])
    """
    for name, t in (("rows", rows), ("cols", cols), ("bits", bits)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.is_floating_point():
            got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name}: expected a 1-D integer tensor [num_escapes], got {got}")
    if not rows.numel() == cols.numel() == bits.numel():
        raise ValueError(
            f"rows, cols, bits: expected one entry each an escape, got {rows.numel()}, {cols.numel()}, {bits.numel()}"
        )
    rows, cols = rows.long(), cols.long()
    for name, t, limit in (("rows", rows, n), ("cols", cols, k)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= limit):
            raise ValueError(f"{name}: expected values in [0, {limit}), got {int(t.min())}..{int(t.max())}")
    n_tiles = num_escape_tiles(n, k)
    n_ct = triton.cdiv(k, ESCAPE_TILE)
    tile = (rows // ESCAPE_TILE) * n_ct + cols // ESCAPE_TILE
    pos = (rows % ESCAPE_TILE) * ESCAPE_TILE + cols % ESCAPE_TILE
    order = torch.argsort(tile * ESCAPE_TILE * ESCAPE_TILE + pos)
    ptr = torch.zeros(n_tiles + 1, dtype=torch.int32, device=rows.device)
    ptr[1:] = torch.cumsum(torch.bincount(tile, minlength=n_tiles), 0).to(torch.int32)
    # Positions run to 0xFFFF: stored as the int16 with the same 16 bits.
    esc_pos = pos[order].to(torch.int32).to(torch.int16)
    return ptr, esc_pos.contiguous(), bits.to(torch.int16)[order].contiguous()


def escape_tile_index(
    esc_ptr: torch.Tensor,
    esc_pos: torch.Tensor,
    esc_bits: torch.Tensor,
    *,
    n: int,
    k: int,
    block_n: int,
    block_k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Escapes regrouped by kernel tile (row tile of ``block_n``, k tile of ``block_k``), the order the kernel walks them.

    Takes the stored escape tiles (see :func:`escape_coordinates`). Returns ``(tile_ptr [tiles + 1] int32,
    local_pos int32, bits int16)``: the escapes of kernel tile ``t = (row // block_n) * ceil(k / block_k) + col // block_k``
    are entries ``tile_ptr[t]:tile_ptr[t + 1]``, ``local_pos = (row % block_n) * block_k + col % block_k``.

    Example::

        >>> ptr, pos = torch.tensor([0, 2], dtype=torch.int32), torch.tensor([0x0003, 0x0128], dtype=torch.int16)
        >>> tile_ptr, local, b = escape_tile_index(ptr, pos, torch.zeros(2, dtype=torch.int16), n=2, k=64,
        ...                                        block_n=16, block_k=32)
        >>> tile_ptr.tolist(), local.tolist()
        ([0, 1, 2], [3, 40])
    """
    rows, cols = escape_coordinates(esc_ptr, esc_pos, n=n, k=k)
    n_kb = triton.cdiv(k, block_k)
    n_tiles = triton.cdiv(n, block_n) * n_kb
    tile = (rows // block_n) * n_kb + cols // block_k
    order = torch.argsort(tile, stable=True)
    counts = torch.bincount(tile, minlength=n_tiles)
    ptr = torch.zeros(n_tiles + 1, dtype=torch.int32, device=esc_pos.device)
    ptr[1:] = torch.cumsum(counts, 0).to(torch.int32)
    local = ((rows % block_n) * block_k + cols % block_k).to(torch.int32)
    return ptr, local[order].contiguous(), esc_bits[order].contiguous()


def _escape_index(esc_ptr, esc_pos, esc_bits, base, *, n, k, config, rebias, escape_cache):
    """:func:`escape_tile_index` (with rebiased bits when ``rebias``), memoised in ``escape_cache``."""
    key = (config.block_n, config.block_k, rebias)
    if escape_cache is not None and key in escape_cache:
        return escape_cache[key]
    if rebias:
        rows, _ = escape_coordinates(esc_ptr, esc_pos, n=n, k=k)
        esc_bits = rebias_escape_bits(rows, esc_bits, base)
    entry = escape_tile_index(esc_ptr, esc_pos, esc_bits, n=n, k=k, block_n=config.block_n, block_k=config.block_k)
    if escape_cache is not None:
        escape_cache[key] = entry
    return entry


def _launch(
    x: torch.Tensor,
    n: int,
    k: int,
    *,
    mode: str,
    config: W12KernelConfig | None,
    bias: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    ae: torch.Tensor | None = None,
    nib: torch.Tensor | None = None,
    base: torch.Tensor | None = None,
    escapes: tuple | None = None,
    debug_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Shared launcher: the bf16 ``weight`` for mode 'bf16', else the planes (and the escape index)."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if bias is not None:
        bias = bias.contiguous()  # the kernel reads it with unit stride
    m = x2.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    if m == 0 or n == 0:
        return out.reshape(*lead, n)
    if config is None:
        config = default_config(m, n, k, x.device)
    n_kb = triton.cdiv(k, config.block_k)
    kbps = triton.cdiv(n_kb, min(config.split_k, n_kb))
    split = triton.cdiv(n_kb, kbps)
    mode_id = _MODES[mode]
    dummy = out
    if mode_id == _MODE_BF16:
        w_arg, nib_arg, base_arg, kw, stride_wn = weight, dummy, dummy, 0, weight.stride(0)
        even_k = k % config.block_k == 0
    else:
        w_arg = ae.view(torch.int32)
        nib_arg = nib.view(torch.int32) if nib is not None else dummy
        base_arg = base
        kw = ae.shape[1] // 4
        stride_wn = 0
        even_k = k % config.block_k == 0 and ae.shape[1] == k
    has_esc = escapes is not None and escapes[1].numel() > 0
    tile_ptr, esc_pos, esc_v = escapes if has_esc else (dummy, dummy, dummy)
    ws = torch.empty(split, m, n, dtype=torch.float32, device=x.device) if split > 1 else out
    grid = (triton.cdiv(n, config.block_n), split, triton.cdiv(m, config.block_m))
    _w12_gemm_kernel[grid](
        x2,
        w_arg,
        nib_arg,
        base_arg,
        tile_ptr,
        esc_pos,
        esc_v,
        bias if bias is not None else dummy,
        out,
        ws,
        debug_out if debug_out is not None else dummy,
        m,
        n,
        k,
        kw,
        x2.stride(0),
        out.stride(0),
        stride_wn,
        n_kb,
        kbps,
        MODE=mode_id,
        HAS_ESC=has_esc,
        HAS_BIAS=bias is not None,
        SPLIT=split > 1,
        DEBUG=debug_out is not None,
        EVEN_K=even_k,
        UPCAST_DOT=INTERPRET,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    if split > 1:
        block = 1024
        _splitk_reduce_kernel[(triton.cdiv(m * n, block),)](
            ws,
            bias if bias is not None else dummy,
            out,
            m * n,
            n,
            SPLIT_K=split,
            HAS_BIAS=bias is not None,
            BLOCK=block,
        )
    return out.reshape(*lead, n)


def w12_matmul(
    x: torch.Tensor,
    ae: torch.Tensor,
    nib: torch.Tensor,
    base: torch.Tensor,
    esc_ptr: torch.Tensor,
    esc_pos: torch.Tensor,
    esc_bits: torch.Tensor,
    *,
    k: int,
    bias: torch.Tensor | None = None,
    rebias: bool = False,
    config: W12KernelConfig | None = None,
    escape_cache: MutableMapping | None = None,
) -> torch.Tensor:
    """Exact ``y = x @ W^T (+ bias)`` on the Triton kernel, W ``[N, k]`` given as its W12 planes.

    Args:
        x: bf16 ``[..., k]`` on the planes' device (CUDA, or any device under ``TRITON_INTERPRET=1``).
        ae, nib, base: uint8 ``[N, k_padded]``, ``[N, k_padded // 2]``, ``[N]``.
        esc_ptr, esc_pos, esc_bits: the escape tiles, int32 ``[num_tiles + 1]``, int16 and int16
            ``[num_escapes]`` (see :func:`escape_coordinates`).
        k: logical width of W (``k_padded = ceil(k / 8) * 8``).
        bias: optional bf16 ``[N]``.
        rebias: build weights with exponent ``112 + E`` (the row base leaves the inner loop) and
            scale the fp32 accumulator by ``2^(base - 112)``; equal to the exact mode while every
            product and partial sum stays a normal fp32 number in both scalings (``docs/w12.md``).
            Raises ``ValueError`` if an escape cannot be rebiased exactly.
        config: tile shape; default from :func:`default_config`.
        escape_cache: a dict kept with the weight; the per-tile escape index is stored there.

    Returns:
        bf16 ``[..., N]``, bit-equal to :func:`bf16_linear_triton` on the decoded weight.

    Example::

        One row of eight weights 1.0 (base 126, offset E = 1, mantissa 0: AE byte ``1 << 3``), except
        k = 3, the zero code (AE byte 0), which an escape patches to 4.0 (bits ``0x4080``):

        >>> ae, nib = torch.full((1, 8), 8, dtype=torch.uint8), torch.zeros(1, 4, dtype=torch.uint8)
        >>> ae[0, 3] = 0  # logical k = 3 sits at physical column 3 (groups of 4 stored k0, k2, k1, k3)
        >>> base = torch.tensor([126], dtype=torch.uint8)
        >>> esc_ptr, esc_pos = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([3], dtype=torch.int16)
        >>> four = torch.tensor([0x4080], dtype=torch.int16)
        >>> x = torch.ones(1, 8, dtype=torch.bfloat16)
        >>> w12_matmul(x, ae, nib, base, esc_ptr, esc_pos, four, k=8)
        tensor([[11.]], dtype=torch.bfloat16)
    """
    n, _ = _check_planes(ae, nib, base, k)
    _check_escapes(esc_ptr, esc_pos, esc_bits, n, k, ae.device)
    _check_activation(x, bias, n, k, ae.device)
    resolve_backend("triton", x.device)
    if config is None:
        config = default_config(x.numel() // k, n, k, x.device)
    escapes = _escape_index(esc_ptr, esc_pos, esc_bits, base, n=n, k=k, config=config, rebias=rebias, escape_cache=escape_cache)
    return _launch(
        x, n, k, mode="rebias" if rebias else "exact", config=config, bias=bias, ae=ae, nib=nib, base=base, escapes=escapes
    )


def q_matmul(
    x: torch.Tensor,
    ae: torch.Tensor,
    base: torch.Tensor,
    *,
    k: int,
    bias: torch.Tensor | None = None,
    config: W12KernelConfig | None = None,
) -> torch.Tensor:
    """Approximate ``y = x @ Q^T (+ bias)`` on the Triton kernel, reading only the AE plane and the bases.

    Q is the 8-bit view: each weight's low mantissa nibble at the midpoint ``0b1000``; an AE byte with
    ``E = 0`` and ``m_hi = 0`` (the zero code, also the placeholder of escaped slots) reads as ``±0``.
    Shapes as :func:`w12_matmul`. For proposals only.

    Example::

        Seven weights 1.0 read as ``1 + 8/128`` (the midpoint nibble) and one zero code:

        >>> ae, base = torch.full((1, 8), 8, dtype=torch.uint8), torch.tensor([126], dtype=torch.uint8)
        >>> ae[0, 3] = 0
        >>> q_matmul(torch.ones(1, 8, dtype=torch.bfloat16), ae, base, k=8)
        tensor([[7.4375]], dtype=torch.bfloat16)
    """
    n, _ = _check_planes(ae, NO_NIB, base, k)
    _check_activation(x, bias, n, k, ae.device)
    resolve_backend("triton", x.device)
    return _launch(x, n, k, mode="q", config=config, bias=bias, ae=ae, base=base)


def decode_w12_tiles(
    ae: torch.Tensor,
    nib: torch.Tensor,
    base: torch.Tensor,
    esc_ptr: torch.Tensor,
    esc_pos: torch.Tensor,
    esc_bits: torch.Tensor,
    *,
    k: int,
    mode: str = "exact",
    config: W12KernelConfig | None = None,
) -> torch.Tensor:
    """Kernel test mode: run the GEMM kernel with a debug store of every decoded weight tile.

    Returns the bf16 ``[N, k]`` matrix exactly as the kernel's registers held it before ``tl.dot``:
    ``mode`` "exact" gives the encoded weight bit for bit, "q" the 8-bit view, "rebias" the weights
    times ``2^(112 - base)``. Slow; for tests only.

    Example::

        >>> ae, nib = torch.full((1, 8), 8, dtype=torch.uint8), torch.zeros(1, 4, dtype=torch.uint8)
        >>> ae[0, 2] = 0x80  # physical column 2 holds logical k = 1: the zero code with the sign set
        >>> base = torch.tensor([126], dtype=torch.uint8)
        >>> no_escapes = torch.zeros(0, dtype=torch.int16)
        >>> decode_w12_tiles(ae, nib, base, torch.zeros(2, dtype=torch.int32), no_escapes, no_escapes, k=3)
        tensor([[1., -0., 1.]], dtype=torch.bfloat16)
    """
    if mode not in ("exact", "rebias", "q"):
        raise ValueError(f"mode: expected 'exact', 'rebias' or 'q', got {mode!r}")
    n, _ = _check_planes(ae, nib, base, k)
    _check_escapes(esc_ptr, esc_pos, esc_bits, n, k, ae.device)
    resolve_backend("triton", ae.device)
    dbg = torch.full((n, k), float("nan"), dtype=torch.bfloat16, device=ae.device)
    x = torch.zeros(1, k, dtype=torch.bfloat16, device=ae.device)
    if config is None:
        config = default_config(1, n, k, ae.device)
    escapes = None
    if mode != "q":
        escapes = _escape_index(
            esc_ptr, esc_pos, esc_bits, base, n=n, k=k, config=config, rebias=mode == "rebias", escape_cache=None
        )
    _launch(x, n, k, mode=mode, config=config, ae=ae, nib=nib, base=base, escapes=escapes, debug_out=dbg)
    return dbg


def bf16_linear_triton(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, config: W12KernelConfig | None = None
) -> torch.Tensor:
    """The same Triton GEMM reading plain bf16 weights ``[N, K]``: the same-tiling baseline.

    Example::

        >>> w = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16)
        >>> bf16_linear_triton(torch.ones(1, 2, dtype=torch.bfloat16), w)
        tensor([[3.]], dtype=torch.bfloat16)
    """
    if weight.dtype != torch.bfloat16 or weight.dim() != 2 or weight.stride(1) != 1:
        raise ValueError(
            f"weight: expected a 2-D bf16 tensor with unit column stride, got {weight.dtype} "
            f"shape {tuple(weight.shape)} strides {weight.stride()}"
        )
    n, k = weight.shape
    _check_activation(x, bias, n, k, weight.device)
    resolve_backend("triton", x.device)
    return _launch(x, n, k, mode="bf16", config=config, bias=bias, weight=weight)
