"""W12 GEMM kernels: ``y = x @ W^T`` with W stored as a :class:`~specdec.formats.W12Tensor`.

Two public primitives, each with a pure-PyTorch reference beside it:

* :func:`w12_linear` — exact. The Triton kernel decodes W12 into bf16 in registers (the bf16
  matrix never exists in global memory), patches escaped weights in registers with their exact bits,
  and feeds ``tl.dot``: the GEMM sees weights bit-identical to the bf16 original, so its output is
  bit-identical to the same kernel run on the bf16 weights (``mode="bf16"`` below; tested).
* :func:`q_linear` — the 8-bit view. Reads only the AE plane and the row bases, low mantissa
  nibble at the midpoint, escapes left as placeholders; equals ``F.linear(x, w.q_view())`` up to
  GEMM rounding.

Kernel structure (see ``docs/w12.md`` for the derivation): swap-AB skinny GEMM, the weight tile
``[BLOCK_N, BLOCK_K]`` is the left operand and ``x^T [BLOCK_K, BLOCK_M]`` the right one, so M (tokens)
may be as small as 1 with a 16-wide tile. Grid ``(N tiles, split_k, M tiles)``; with split-K the
fp32 partials go to a workspace and a second small kernel reduces them in a fixed order
(deterministic). Decode works on 32-bit words: one AE word (4 weights) gives two bf16x2 words
with two shifts and masks each, the B nibbles of 8 weights come from one word.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from specdec.formats.w12 import REBIAS_EXPONENT, W12Tensor

__all__ = [
    "W12KernelConfig",
    "w12_linear",
    "q_linear",
    "w12_linear_reference",
    "q_linear_reference",
    "decode_tiles",
    "bf16_linear_triton",
    "default_config",
]

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

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
    tiles = triton.cdiv(n, block_n) * triton.cdiv(m, block_m)
    n_kb = triton.cdiv(k, block_k)
    split = max(1, min(n_kb, (2 * _num_sms(device)) // max(1, tiles)))
    return W12KernelConfig(block_m=block_m, block_n=block_n, block_k=block_k, split_k=split)


@triton.jit
def _w12_gemm_kernel(
    x_ptr,
    w_ptr,
    nib_ptr,
    base_ptr,
    tile_ptr,
    esc_r_ptr,
    esc_c_ptr,
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
    rows_n = tl.where(n_mask, offs_n, 0)
    rows_m = tl.where(m_mask, offs_m, 0)
    offs_k = tl.arange(0, BLOCK_K)
    offs_w = tl.arange(0, BLOCK_K // 4)
    offs_b = tl.arange(0, BLOCK_K // 8)

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
            # bytes 0 and 2 -> bf16x2 word of (k0, k1); bytes 1 and 3 -> (k2, k3): sign to bit 15,
            # E and m_hi to bits 7..10 and 4..6 of each half; bits 11..14 and 0..3 stay zero.
            p02 = ((aw << 8) & 0x80008000) | ((aw << 4) & 0x07F007F0)
            p13 = (aw & 0x80008000) | ((aw >> 4) & 0x07F007F0)
            if MODE == 2:
                p02 = p02 + konst
                p13 = p13 + konst
            else:
                if EVEN_K:
                    bw = tl.load(b_ptrs)
                else:
                    bw = tl.load(b_ptrs, mask=((k0 // 8 + offs_b) < KW // 2)[None, :], other=0)
                bw = bw.to(tl.uint32, bitcast=True)  # [BLOCK_N, BLOCK_K // 8]
                n01 = bw & 0x000F000F
                n23 = (bw >> 4) & 0x000F000F
                n45 = (bw >> 8) & 0x000F000F
                n67 = (bw >> 12) & 0x000F000F
                n02 = tl.reshape(tl.join(n01, n45), [BLOCK_N, BLOCK_K // 4])
                n13 = tl.reshape(tl.join(n23, n67), [BLOCK_N, BLOCK_K // 4])
                if MODE == 1:
                    p02 = p02 | n02 | konst
                    p13 = p13 | n13 | konst
                else:
                    # E + base <= 254 cannot carry into the sign bit or the other half.
                    p02 = p02 + (n02 | konst)
                    p13 = p13 + (n13 | konst)
            p = tl.reshape(tl.join(p02, p13), [BLOCK_N, BLOCK_K // 2])
            lo = (p & 0xFFFF).to(tl.uint16)
            hi = (p >> 16).to(tl.uint16)
            w16 = tl.reshape(tl.join(lo, hi), [BLOCK_N, BLOCK_K])
            if HAS_ESC:
                tile = pid_n * n_kblocks + kb
                e_start = tl.load(tile_ptr + tile)
                e_end = tl.load(tile_ptr + tile + 1)
                for e in range(e_start, e_end):
                    r = tl.load(esc_r_ptr + e)
                    c = tl.load(esc_c_ptr + e)
                    v = tl.load(esc_v_ptr + e).to(tl.uint16, bitcast=True)
                    w16 = tl.where((offs_n[:, None] == r) & (kk[None, :] == c), v, w16)
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
        tl.store(ws_ptr + pid_k * M * N + offs_m[None, :] * N + offs_n[:, None], acc, mask=out_mask)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0.0).to(tl.float32)[:, None]
        tl.store(out_ptr + offs_m[None, :] * stride_om + offs_n[:, None], acc.to(tl.bfloat16), mask=out_mask)


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
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    # Fixed summation order over the slices: the result does not depend on scheduling.
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)


def _check_inputs(x, w, bias, name_w="w") -> None:
    if not isinstance(x, torch.Tensor) or isinstance(x, W12Tensor):
        raise TypeError(f"x: expected a bf16 torch.Tensor, got {type(x).__name__}")
    if not isinstance(w, W12Tensor):
        raise TypeError(
            f"{name_w}: expected a W12Tensor (build with W12Tensor.from_bf16), got {type(w).__name__}"
        )
    if x.dtype != torch.bfloat16:
        raise TypeError(f"x: expected dtype torch.bfloat16, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(
            f"x: expected shape [..., {w.shape[1]}] (K of {name_w} {tuple(w.shape)}), got {tuple(x.shape)}"
        )
    if x.device != w.device:
        raise ValueError(f"x: expected device {w.device} (where {name_w} lives), got {x.device}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias: expected a tensor or None, got {type(bias).__name__}")
        if bias.shape != (w.shape[0],):
            raise ValueError(f"bias: expected shape ({w.shape[0]},), got {tuple(bias.shape)}")
        if bias.dtype != torch.bfloat16:
            raise TypeError(f"bias: expected dtype torch.bfloat16, got {bias.dtype}")
        if bias.device != w.device:
            raise ValueError(f"bias: expected device {w.device}, got {bias.device}")


def _resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in ("auto", "triton", "torch"):
        raise ValueError(f"backend: expected 'auto', 'triton' or 'torch', got {backend!r}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    if backend == "triton" and device.type != "cuda" and not INTERPRET:
        raise ValueError(
            f"backend: 'triton' needs a CUDA tensor (or TRITON_INTERPRET=1), got device {device}"
        )
    return backend


def _rebias_escape_bits(w: W12Tensor) -> torch.Tensor:
    """Escape bits scaled by 2^(112 - base); raises ValueError if any is not exactly representable."""
    bits = w.esc_bits.to(torch.int32) & 0xFFFF
    true = bits.to(torch.int16).view(torch.bfloat16).to(torch.float64)
    shift = (REBIAS_EXPONENT - w.base.long()[w.esc_rows.long()]).to(torch.float64)
    scaled = (true * torch.exp2(shift)).to(torch.float32).to(torch.bfloat16)
    back = scaled.to(torch.float64) * torch.exp2(-shift)
    same = (back == true) | (torch.isnan(back) & torch.isnan(true))
    if not bool(same.all()):
        bad = int((~same).sum())
        raise ValueError(
            f"w: {bad} escaped weights are not exactly representable after the 2^(112-base) rebias; "
            "use the exact mode (rebias=False)"
        )
    # NaN payloads: keep the original pattern (a NaN times a power of two is the same NaN class,
    # and NaN * x is NaN whatever the payload, so the product is unchanged).
    nan = torch.isnan(true)
    out = scaled.view(torch.int16)
    return torch.where(nan, w.esc_bits, out)


def _escape_index(w: W12Tensor, block_n: int, block_k: int, rebias: bool):
    """Escapes grouped by (row tile, k tile): tile_ptr [tiles + 1], rows, cols, bits (cached)."""
    key = (block_n, block_k, rebias)
    cached = w._kernel_cache.get(key)
    if cached is not None:
        return cached
    n, k = w.shape
    n_kb = triton.cdiv(k, block_k)
    n_tiles = triton.cdiv(n, block_n) * n_kb
    rows = w.esc_rows.long()
    cols = w.esc_cols.long()
    tile = (rows // block_n) * n_kb + cols // block_k
    order = torch.argsort(tile, stable=True)
    counts = torch.bincount(tile, minlength=n_tiles)
    ptr = torch.zeros(n_tiles + 1, dtype=torch.int32, device=w.device)
    ptr[1:] = torch.cumsum(counts, 0).to(torch.int32)
    bits = _rebias_escape_bits(w) if rebias else w.esc_bits
    entry = (ptr, w.esc_rows[order].contiguous(), w.esc_cols[order].contiguous(), bits[order].contiguous())
    w._kernel_cache[key] = entry
    return entry


def _launch(x, weight, bias, *, mode: str, config: W12KernelConfig | None, debug_out=None):
    """Shared launcher for all modes; ``weight`` is a W12Tensor, or a bf16 tensor for mode 'bf16'."""
    n, k = weight.shape
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
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
        has_esc = False
        tile_ptr = esc_r = esc_c = esc_v = dummy
    else:
        w_arg = weight.ae.view(torch.int32)
        nib_arg = weight.nib.view(torch.int32)
        base_arg = weight.base
        kw = weight.k_padded // 4
        stride_wn = 0
        has_esc = mode_id != _MODE_Q and weight.num_escapes > 0
        if has_esc:
            tile_ptr, esc_r, esc_c, esc_v = _escape_index(
                weight, config.block_n, config.block_k, mode_id == _MODE_REBIAS
            )
        else:
            tile_ptr = esc_r = esc_c = esc_v = dummy
    ws = torch.empty(split, m, n, dtype=torch.float32, device=x.device) if split > 1 else out
    grid = (triton.cdiv(n, config.block_n), split, triton.cdiv(m, config.block_m))
    _w12_gemm_kernel[grid](
        x2,
        w_arg,
        nib_arg,
        base_arg,
        tile_ptr,
        esc_r,
        esc_c,
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
        EVEN_K=k % config.block_k == 0 and (mode_id == _MODE_BF16 or weight.k_padded == k),
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
            ws, bias if bias is not None else dummy, out, m * n, n,
            SPLIT_K=split, HAS_BIAS=bias is not None, BLOCK=block,
        )
    return out.reshape(*lead, n)


def w12_linear_reference(x: torch.Tensor, w: W12Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Pure-PyTorch reference of :func:`w12_linear`: exact decode, then ``F.linear``."""
    return F.linear(x, w.to_bf16(), bias)


def q_linear_reference(x: torch.Tensor, w: W12Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Pure-PyTorch reference of :func:`q_linear`: 8-bit-view decode, then ``F.linear``."""
    return F.linear(x, w.q_view(), bias)


def w12_linear(
    x: torch.Tensor,
    w: W12Tensor,
    bias: torch.Tensor | None = None,
    *,
    backend: str = "auto",
    rebias: bool = False,
    config: W12KernelConfig | None = None,
) -> torch.Tensor:
    """Exact ``y = x @ W^T (+ bias)`` with W in W12.

    Args:
        x: bf16 ``[..., K]`` on the device of ``w``.
        w: :class:`W12Tensor` ``[N, K]``.
        bias: optional bf16 ``[N]``.
        backend: ``"torch"`` decodes and calls ``F.linear`` (bit-identical to the bf16 layer);
            ``"triton"`` runs the fused kernel (weights bit-identical inside the GEMM; output
            equal to the same kernel on bf16 weights); ``"auto"`` = Triton on CUDA, else torch.
        rebias: Triton only. Build weights with exponent ``112 + E`` (the row base leaves the
            inner loop) and scale the fp32 accumulator by ``2^(base-112)``. Equal to the exact
            kernel while every product and partial sum stays a normal fp32 number in both scalings
            (see ``docs/w12.md``); raises ``ValueError`` if an escape cannot be rebiased exactly.
        config: tile shape; default from :func:`default_config`.

    Returns:
        bf16 ``[..., N]``.

    Example::

        >>> w = torch.tensor([[1.0, 2.0], [0.0, -1.0]], dtype=torch.bfloat16)
        >>> x = torch.tensor([[1.0, 1.0]], dtype=torch.bfloat16)
        >>> w12_linear(x, W12Tensor.from_bf16(w), backend="torch")
        tensor([[ 3., -1.]], dtype=torch.bfloat16)
    """
    _check_inputs(x, w, bias)
    backend = _resolve_backend(backend, x.device)
    if backend == "torch":
        return w12_linear_reference(x, w, bias)
    return _launch(x, w, bias, mode="rebias" if rebias else "exact", config=config)


def q_linear(
    x: torch.Tensor,
    w: W12Tensor,
    bias: torch.Tensor | None = None,
    *,
    backend: str = "auto",
    config: W12KernelConfig | None = None,
) -> torch.Tensor:
    """Approximate ``y = x @ Q^T (+ bias)`` with Q = ``w.q_view()``, reading only the 8-bit plane.

    Shapes and backends as :func:`w12_linear`. Used for proposal passes only: its output decides
    nothing that is emitted.

    Example::

        >>> w = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16)
        >>> q_linear(torch.ones(1, 2, dtype=torch.bfloat16), W12Tensor.from_bf16(w), backend="torch")
        tensor([[3.1875]], dtype=torch.bfloat16)
    """
    _check_inputs(x, w, bias)
    backend = _resolve_backend(backend, x.device)
    if backend == "torch":
        return q_linear_reference(x, w, bias)
    return _launch(x, w, bias, mode="q", config=config)


def bf16_linear_triton(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, config: W12KernelConfig | None = None
) -> torch.Tensor:
    """The same Triton GEMM reading plain bf16 weights ``[N, K]``: the same-tiling baseline."""
    if weight.dtype != torch.bfloat16 or weight.dim() != 2 or weight.stride(1) != 1:
        raise ValueError(f"weight: expected a 2-D bf16 tensor with unit column stride, got {weight.dtype} "
                         f"shape {tuple(weight.shape)} strides {weight.stride()}")
    if x.dtype != torch.bfloat16 or x.shape[-1] != weight.shape[1] or x.device != weight.device:
        raise ValueError(f"x: expected bf16 [..., {weight.shape[1]}] on {weight.device}, got {x.dtype} "
                         f"{tuple(x.shape)} on {x.device}")
    return _launch(x, weight, bias, mode="bf16", config=config)


def decode_tiles(w: W12Tensor, *, mode: str = "exact", config: W12KernelConfig | None = None) -> torch.Tensor:
    """Kernel test mode: run the GEMM kernel with a debug store of every decoded weight tile.

    Returns the bf16 ``[N, K]`` matrix exactly as the kernel's registers held it before ``tl.dot``
    (``mode`` "exact": must equal ``w.to_bf16()`` bit for bit; "q": ``w.q_view()``; "rebias":
    the weights times ``2^(112 - base)``). Slow; for tests only.
    """
    if mode not in ("exact", "rebias", "q"):
        raise ValueError(f"mode: expected 'exact', 'rebias' or 'q', got {mode!r}")
    n, k = w.shape
    dbg = torch.full((n, k), float("nan"), dtype=torch.bfloat16, device=w.device)
    x = torch.zeros(1, k, dtype=torch.bfloat16, device=w.device)
    if config is None:
        config = default_config(1, n, k, w.device)
    _launch(x, w, None, mode=mode, config=replace(config), debug_out=dbg)
    return dbg
