"""W12: lossless 12-bit storage for bf16 weight matrices, with a free 8-bit sub-view.

A bf16 weight is ``s | e(8) | m(7)``. For each output row ``n`` a base exponent ``b_n`` is chosen;
a weight whose biased exponent lies in the window ``[b_n, b_n + 15]`` is stored in 12 bits:

    A = s, m[6:4]  (4 bits)      E = e - b_n  (4 bits)      B = m[3:0]  (4 bits)

and decodes exactly as ``s << 15 | (E + b_n) << 7 | m_hi << 4 | B``. One code is reserved: ``E = 0``
with all mantissa bits 0 decodes to ``±0`` (``s << 15``), so zeros cost 12 bits like any weight and
the one value ``±2^(b_n - 127)`` that code would have meant is escaped instead. Weights that fit no
code (subnormals, inf/NaN, values more than 15 binades below the row's top, ``±2^(b_n - 127)``) go to
an exact escape list; their slots in the planes hold the zero code (with the sign).

Memory layout (all planes row-major, one row per output channel, K padded to ``k_padded``, a
multiple of 8; padding slots hold the zero code and are never read as weights):

* ``ae``  uint8 ``[N, k_padded]``: one byte per weight, ``s | E(4) | m_hi(3)``. Inside every group
  of 4 consecutive k the bytes are stored in the order ``k0, k2, k1, k3``: a 32-bit little-endian
  load then holds the pair ``(k0, k1)`` in bytes 0 and 2 and ``(k2, k3)`` in bytes 1 and 3, so the
  kernel builds two packed bf16x2 words from one load with shifts and masks only.
* ``nib`` uint8 ``[N, k_padded // 2]``: the B nibbles. Every 32-bit word covers 8 consecutive k;
  its 4-bit slots hold ``k0, k2, k4, k6, k1, k3, k5, k7`` (slot i at bits ``4i..4i+3``), so
  ``(word >> 4j) & 0x000F000F`` is the nibble pair of ``(k2j, k2j+1)`` already in bf16x2 position.
* ``base`` uint8 ``[N]``.
* Escapes, per tile of 256 x 256 weights (tiles numbered row-tile major): ``esc_ptr`` int32
  ``[num_tiles + 1]`` offsets, then per escape ``esc_pos`` int16 (the 16 bits
  ``(row % 256) << 8 | (col % 256)``) and ``esc_bits`` int16 (its bf16 bits): 4 bytes per escape.

Window choice: ``b_n`` maximises the number of weights of row n that fit a code; ties go to the
larger base (keeps the largest magnitudes in-window). Rows with no finite nonzero normal weight get
the largest base, 239. Derivation and kernel notes: ``docs/w12.md``.

Example::

    >>> w = torch.tensor([[1.0, -0.5, 0.0, 3.0]], dtype=torch.bfloat16)
    >>> w12 = W12Tensor.from_bf16(w)
    >>> torch.equal(w12.to_bf16().view(torch.int16), w.view(torch.int16))
    True
    >>> w12.num_escapes          # the zero has a code of its own
    0
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from specdec.kernels.cuda.ops import register_cpu_reference
from specdec.kernels.w12_dequant import w12_dequant
from specdec.kernels.w12_gemm import (
    MAX_BASE,
    REBIAS_EXPONENT,
    W12KernelConfig,
    check_planes,
    decode_w12_tiles,
    escape_coordinates,
    num_escape_tiles,
    pack_escape_tiles,
    q_matmul,
    resolve_backend,
    w12_matmul,
)

__all__ = [
    "W12Tensor",
    "W12KernelConfig",
    "ConversionReport",
    "TensorReport",
    "convert",
    "w12_linear",
    "q_linear",
    "linear_path",
    "linear_arguments",
    "cuda_small_m_available",
    "CUDA_SMALL_M_ENV",
    "DEQUANT_CHUNK_BYTES",
    "w12_linear_reference",
    "q_linear_reference",
    "decode_tiles",
    "save_file",
    "load_file",
    "load_into",
    "decode_ae_bytes",
    "decode_planes",
    "W12_LAYOUT",
    "REBIAS_EXPONENT",
]

logger = logging.getLogger("specdec")

WINDOW = 16
# Written to and required in the metadata of files from save_file: the plane layout of this module.
W12_LAYOUT = "zero-code;escape-tiles-256x256;ae,nib,base,esc_ptr,esc_pos,esc_bits"
_EXP_MASK = 0xFF


def _bits16(w: torch.Tensor) -> torch.Tensor:
    """bf16 tensor -> int32 tensor of its raw 16-bit patterns in [0, 65535]."""
    return w.view(torch.int16).to(torch.int32) & 0xFFFF


def _check_weight(weight: object, name: str = "weight") -> torch.Tensor:
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(weight).__name__}")
    if isinstance(weight, W12Tensor):
        raise TypeError(f"{name}: expected a bf16 tensor, got a W12Tensor (already converted)")
    if weight.dtype != torch.bfloat16:
        raise TypeError(f"{name}: expected dtype torch.bfloat16, got {weight.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D [N, K] tensor, got shape {tuple(weight.shape)}")
    if not weight.is_contiguous():
        raise ValueError(f"{name}: expected a contiguous tensor, got strides {weight.stride()} for shape {tuple(weight.shape)}")
    if weight.shape[1] == 0:
        raise ValueError(f"{name}: expected K >= 1, got shape {tuple(weight.shape)}")
    return weight


def choose_base(exponents: torch.Tensor, mantissa_zero: torch.Tensor | None = None) -> torch.Tensor:
    """Per-row base exponent that minimises escapes; ties toward the larger base.

    exponents: int64 ``[N, K]`` biased bf16 exponents (0 and 255 never fit a window).
    mantissa_zero: optional bool ``[N, K]``, True where the mantissa is 0; such a weight at exponent
    ``b`` is the reserved zero code of base ``b`` and does not count for that base.
    Returns int64 ``[N]`` in ``[1, 239]``.

    Example::

        >>> choose_base(torch.tensor([[127, 127, 100]]))  # every base in [112, 127] holds two; the largest wins
        tensor([127])
    """
    n = exponents.shape[0]
    hist = torch.zeros(n, 256, dtype=torch.int64, device=exponents.device)
    hist.scatter_add_(1, exponents, torch.ones_like(exponents))
    hist[:, 0] = 0
    hist[:, 255] = 0
    csum = torch.cumsum(hist, dim=1)  # [N, 256]
    bases = torch.arange(1, MAX_BASE + 1, device=exponents.device)
    # in-window count for window [b, b+15] = csum[b+15] - csum[b-1]
    counts = csum[:, bases + WINDOW - 1] - csum[:, bases - 1]  # [N, 239]
    if mantissa_zero is not None:
        reserved = torch.zeros(n, 256, dtype=torch.int64, device=exponents.device)
        reserved.scatter_add_(1, exponents, mantissa_zero.to(torch.int64))
        counts = counts - reserved[:, bases]
    # argmax returns the first maximum; flipping makes that the largest base.
    best_from_top = torch.argmax(counts.flip(1), dim=1)
    return MAX_BASE - best_from_top


def _perm_ae(k_padded: int, device: torch.device) -> torch.Tensor:
    """Physical column -> logical k for the AE plane (groups of 4 stored as k0, k2, k1, k3)."""
    group = torch.tensor([0, 2, 1, 3], device=device)
    return (torch.arange(0, k_padded, 4, device=device)[:, None] + group).reshape(-1)


def _perm_nib(k_padded: int, device: torch.device) -> torch.Tensor:
    """Nibble slot -> logical k for the B plane (words of 8 as k0, k2, k4, k6, k1, k3, k5, k7)."""
    group = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7], device=device)
    return (torch.arange(0, k_padded, 8, device=device)[:, None] + group).reshape(-1)


def decode_planes(ae_logical: torch.Tensor, nibbles: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """Exact decode of AE bytes and B nibbles ``[N, K]`` (logical order) -> int32 bf16 patterns (escapes not applied).

    Example::

        >>> decode_planes(torch.tensor([[0x08, 0x80, 0x00]]), torch.tensor([[0, 0, 1]]), torch.tensor([126]))
        tensor([[16256, 32768, 16129]], dtype=torch.int32)
    """
    ae = ae_logical.to(torch.int32)
    nib = nibbles.to(torch.int32)
    e = ((ae >> 3) & 0xF) + base.to(torch.int32)[:, None]
    sign = (ae & 0x80) << 8
    value = sign | (e << 7) | ((ae & 0x7) << 4) | nib
    return torch.where(((ae & 0x7F) | nib) == 0, sign, value)


def decode_ae_bytes(ae_logical: torch.Tensor, base: torch.Tensor, low_bits: int) -> torch.Tensor:
    """Decode AE bytes ``[N, K]`` (logical order) with a fixed low nibble -> int32 bf16 patterns.

    The 8-bit view's rule: a byte with ``E = 0`` and ``m_hi = 0`` decodes to ``±0`` whatever its nibble.

    Example::

        >>> decode_ae_bytes(torch.tensor([[0x08, 0x80]]), torch.tensor([126]), 0b1000)  # 1.0625, -0.0
        tensor([[16264, 32768]], dtype=torch.int32)
    """
    ae = ae_logical.to(torch.int32)
    e = ((ae >> 3) & 0xF) + base.to(torch.int32)[:, None]
    sign = (ae & 0x80) << 8
    return torch.where((ae & 0x7F) == 0, sign, sign | (e << 7) | ((ae & 0x7) << 4) | low_bits)


def linear_arguments(args: tuple, kwargs: dict) -> tuple:
    """``(input, weight, bias)`` of an ``F.linear`` call as a tensor subclass's ``__torch_function__`` receives it.

    Example::

        >>> linear_arguments((1,), {"weight": 2})
        (1, 2, None)
    """
    x = args[0] if args else kwargs["input"]
    weight = args[1] if len(args) > 1 else kwargs["weight"]
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    return x, weight, bias


def _check_plane_shapes(ae, nib, base, shape: tuple) -> None:
    """The planes' shapes against the logical ``shape`` ``(N, K)`` (no device read: it runs for every wrapper made)."""
    if len(shape) != 2:
        raise ValueError(f"shape: expected (N, K), got {shape}")
    n, k = shape
    want = {"ae": (n, (k + 7) // 8 * 8), "nib": (n, (k + 7) // 8 * 4), "base": (n,)}
    for name, plane in (("ae", ae), ("nib", nib), ("base", base)):
        if not isinstance(plane, torch.Tensor) or tuple(plane.shape) != want[name]:
            got = tuple(plane.shape) if isinstance(plane, torch.Tensor) else type(plane).__name__
            raise ValueError(f"{name}: expected shape {want[name]} for a W12 weight of shape {shape}, got {got}")


class W12Tensor(torch.Tensor):
    """A bf16 weight ``[N, K]`` stored losslessly in ~12 bits per weight.

    Behaves as a read-only bf16 weight: ``F.linear(x, w12, bias)`` runs the W12 GEMM
    (:func:`specdec.formats.w12_linear`), so an ``nn.Linear`` whose ``weight`` is
    ``nn.Parameter(w12, requires_grad=False)`` computes the same layer. With
    ``linear_backend="torch"`` the result is bit-identical to the bf16 layer (decode, then
    ``F.linear``); the Triton path uses bit-identical weights inside its own GEMM. Any other
    operation decodes to bf16 first (slow, but exact); in-place operations are refused.

    Build with :meth:`from_bf16`; decode with :meth:`to_bf16` (exact) or :meth:`q_view`.

    Example::

        >>> w = torch.randn(8, 16).to(torch.bfloat16)
        >>> w12 = W12Tensor.from_bf16(w)
        >>> x = torch.randn(2, 16).to(torch.bfloat16)
        >>> torch.equal(F.linear(x, w12), F.linear(x, w))
        True
    """

    ae: torch.Tensor
    nib: torch.Tensor
    base: torch.Tensor
    esc_ptr: torch.Tensor
    esc_pos: torch.Tensor
    esc_bits: torch.Tensor

    _INNER = ("ae", "nib", "base", "esc_ptr", "esc_pos", "esc_bits")

    @staticmethod
    def __new__(cls, ae, nib, base, esc_ptr, esc_pos, esc_bits, shape, linear_backend="auto", linear_view="exact"):
        return torch.Tensor._make_wrapper_subclass(cls, tuple(shape), dtype=torch.bfloat16, device=ae.device, requires_grad=False)

    def __init__(self, ae, nib, base, esc_ptr, esc_pos, esc_bits, shape, linear_backend="auto", linear_view="exact"):
        _check_plane_shapes(ae, nib, base, tuple(shape))
        self.ae = ae
        self.nib = nib
        self.base = base
        self.esc_ptr = esc_ptr
        self.esc_pos = esc_pos
        self.esc_bits = esc_bits
        if linear_backend not in _BACKENDS:
            raise ValueError(f"linear_backend: expected 'auto', 'cuda', 'triton', 'torch' or 'dequant', got {linear_backend!r}")
        self.linear_backend = linear_backend
        if linear_view not in ("exact", "q"):
            raise ValueError(f"linear_view: expected 'exact' or 'q', got {linear_view!r}")
        self.linear_view = linear_view
        # Per-(tile shape, mode) escape index used by the kernels, built on first use.
        self._kernel_cache: dict = {}

    @classmethod
    def from_bf16(cls, weight: torch.Tensor, *, linear_backend: str = "auto") -> W12Tensor:
        """Encode a contiguous bf16 ``weight [N, K]`` (N output channels). Exact for any bits.

        Runs on the weight's device. ``linear_backend`` picks the backend used when the tensor
        is a weight in ``F.linear`` ("torch" gives results bit-identical to the bf16 layer).
        """
        _check_weight(weight)
        n, k = weight.shape
        device = weight.device
        bits = _bits16(weight)  # [N, K] int32
        sign = bits >> 15
        exp = (bits >> 7) & _EXP_MASK
        mant = bits & 0x7F
        if n > 0:
            base = choose_base(exp.to(torch.int64), mant == 0)
        else:
            base = torch.zeros(0, dtype=torch.int64, device=device)
        off = exp - base[:, None].to(torch.int32)
        is_zero = (bits & 0x7FFF) == 0
        # (off 0, mantissa 0) is the zero code, so ±2^(base-127) itself must escape.
        in_window = (off >= 0) & (off < WINDOW) & (exp >= 1) & (exp <= 254) & ((off > 0) | (mant > 0))
        # Zeros and escaped slots hold the zero code with their sign.
        ae_logical = torch.where(in_window, (sign << 7) | (off << 3) | (mant >> 4), sign << 7)
        b_logical = torch.where(in_window, mant & 0xF, torch.zeros_like(mant))

        k_padded = (k + 7) // 8 * 8
        if k_padded != k:
            ae_logical = F.pad(ae_logical, (0, k_padded - k))
            b_logical = F.pad(b_logical, (0, k_padded - k))
        ae = ae_logical[:, _perm_ae(k_padded, device)].to(torch.uint8).contiguous()
        slots = b_logical[:, _perm_nib(k_padded, device)].reshape(n, k_padded // 2, 2)
        nib = (slots[..., 0] | (slots[..., 1] << 4)).to(torch.uint8).contiguous()

        esc_rows, esc_cols = torch.nonzero(~(in_window | is_zero), as_tuple=True)
        esc_bits = bits[esc_rows, esc_cols].to(torch.int16)
        esc_ptr, esc_pos, esc_bits = pack_escape_tiles(esc_rows, esc_cols, esc_bits, n=n, k=k)
        return cls(ae, nib, base.to(torch.uint8), esc_ptr, esc_pos, esc_bits, (n, k), linear_backend)

    @property
    def k_padded(self) -> int:
        """``K`` rounded up to a multiple of 8: the row length of the ``ae`` plane (int)."""
        return self.ae.shape[1]

    def ae_logical(self) -> torch.Tensor:
        """AE bytes as int32 ``[N, K]`` in logical column order."""
        n, k = self.shape
        inv = torch.argsort(_perm_ae(self.k_padded, self.ae.device))
        return self.ae.to(torch.int32)[:, inv][:, :k]

    def nibbles_logical(self) -> torch.Tensor:
        """B nibbles as int32 ``[N, K]`` in logical column order."""
        n, k = self.shape
        packed = self.nib.to(torch.int32)
        slots = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(n, self.k_padded)
        inv = torch.argsort(_perm_nib(self.k_padded, self.ae.device))
        return slots[:, inv][:, :k]

    def escape_coordinates(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows and columns (int64 ``[num_escapes]``) of the escaped weights, in storage order (``esc_bits``'s order)."""
        n, k = self.shape
        return escape_coordinates(self.esc_ptr, self.esc_pos, n=n, k=k)

    def to_bf16(self) -> torch.Tensor:
        """Exact decode: a bf16 ``[N, K]`` tensor bit-identical to the encoded weight."""
        bits = decode_planes(self.ae_logical(), self.nibbles_logical(), self.base)
        rows, cols = self.escape_coordinates()
        bits[rows, cols] = self.esc_bits.to(torch.int32) & 0xFFFF
        return bits.to(torch.int16).view(torch.bfloat16)

    def q_view(self) -> torch.Tensor:
        """bf16 ``[N, K]`` decode of the 8-bit A+E view, low 4 mantissa bits at the midpoint 0b1000.

        A byte with ``E = 0`` and ``m_hi = 0`` decodes to ``±0``: the zero code, the escaped slots
        (the view only proposes tokens, so its escapes are not patched) and the in-window weights
        ``±2^(b-127) * (1 + B/128)``, which have nothing but their nibble to tell them from zero.
        """
        bits = decode_ae_bytes(self.ae_logical(), self.base, 0b1000)
        return bits.to(torch.int16).view(torch.bfloat16)

    @property
    def num_escapes(self) -> int:
        """Weights kept in the exact escape list: subnormals, inf/NaN, ``±2^(b-127)`` and those outside their row's window (int)."""
        return int(self.esc_bits.numel())

    @property
    def escape_fraction(self) -> float:
        """:attr:`num_escapes` over the ``N * K`` weights (float in ``[0, 1]``)."""
        n, k = self.shape
        return self.num_escapes / max(1, n * k)

    @property
    def nbytes(self) -> int:  # type: ignore[override]
        """Bytes held by all planes, the base vector and the escape list."""
        return sum(getattr(self, name).numel() * getattr(self, name).element_size() for name in self._INNER)

    @property
    def bits_per_weight(self) -> float:
        """Storage cost, ``8 * nbytes / (N * K)``: 12 plus padding, the base vector and escapes (float)."""
        n, k = self.shape
        return 8.0 * self.nbytes / max(1, n * k)

    def __repr__(self) -> str:  # type: ignore[override]
        n, k = self.shape
        return (
            f"W12Tensor(shape=({n}, {k}), device={self.device}, escapes={self.num_escapes}, "
            f"bits_per_weight={self.bits_per_weight:.4f})"
        )

    def __tensor_flatten__(self):
        return list(self._INNER), (tuple(self.shape), self.linear_backend, self.linear_view)

    @classmethod
    def __tensor_unflatten__(cls, inner, meta, outer_size, outer_stride):
        shape, backend, view = meta
        return cls(*(inner[name] for name in cls._INNER), shape, backend, view)

    def _apply_inner(self, fn) -> W12Tensor:
        return W12Tensor(
            *(fn(getattr(self, name)) for name in self._INNER), tuple(self.shape), self.linear_backend, self.linear_view
        )

    def as_q_weight(self) -> W12Tensor:
        """The same planes (no copy) as a weight whose ``F.linear`` is :func:`q_linear`: the 8-bit view.

        Used by a target's ``"q"`` weight view (the two-level verifier's proposal pass); any other
        operation still sees the exact weights.

        Example::

            >>> w = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16)
            >>> F.linear(torch.ones(1, 2, dtype=torch.bfloat16), W12Tensor.from_bf16(w).as_q_weight())
            tensor([[3.1875]], dtype=torch.bfloat16)
        """
        return W12Tensor(*(getattr(self, name) for name in self._INNER), tuple(self.shape), self.linear_backend, "q")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, weight, bias = linear_arguments(args, kwargs)
            if isinstance(weight, W12Tensor) and not isinstance(x, W12Tensor):
                if weight.linear_view == "q":
                    return q_linear(x, weight, bias=bias, backend=weight.linear_backend)
                return w12_linear(x, weight, bias=bias, backend=weight.linear_backend)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        aten = torch.ops.aten
        if func in (aten.detach.default, aten.alias.default):
            return args[0]._apply_inner(lambda t: t)
        if func is aten.clone.default:
            return args[0]._apply_inner(torch.clone)
        if func is aten._to_copy.default:
            src = args[0]
            dtype = kwargs.get("dtype")
            if dtype is not None and dtype != torch.bfloat16:
                raise TypeError(
                    f"dtype: a W12Tensor holds bf16 weights and cannot be cast to {dtype}; decode with .to_bf16() first"
                )
            device = kwargs.get("device") or src.device
            return src._apply_inner(lambda t: t.to(device))
        if any(isinstance(t, W12Tensor) for t in torch.utils._pytree.tree_leaves(_written_arguments(func, args, kwargs))):
            raise TypeError(f"W12Tensor is read-only; {func} would modify it (decode with .to_bf16())")

        def unwrap(a):
            return a.to_bf16() if isinstance(a, W12Tensor) else a

        args = torch.utils._pytree.tree_map(unwrap, args)
        kwargs = torch.utils._pytree.tree_map(unwrap, kwargs)
        return func(*args, **kwargs)


def _written_arguments(func, args: tuple, kwargs: dict) -> list:
    """The arguments an aten op writes (its schema's arguments with a write alias: ``self`` of ``add_``, ``out`` of
    ``add.out``); an op that only reads a W12Tensor (``copy_`` into a plain tensor, an ``out=`` elsewhere) decodes it."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            written.append(args[i] if i < len(args) else kwargs.get(arg.name))
    return written


_BACKENDS = ("auto", "cuda", "triton", "torch", "dequant")
CUDA_SMALL_M_ENV = "SPECDEC_W12_CUDA"
# The bf16 bytes the "dequant" path decodes at a time: a weight larger than this is decoded and multiplied in chunks
# of rows, so a call never holds more than this much of its bf16 copy (the 8B lm_head's is 1.2 GB).
DEQUANT_CHUNK_BYTES = 64 << 20
# Exact W12 over up to this many tensor-map kernel calls of at most 16 rows each. In one H200 run twice the 16-row call's
# time was below the Triton kernel's at 32 rows on every Qwen3-8B / 32B linear, and the 32-row verify step of the 8B
# shape took 10.58 ms against 14.42 with Triton linears (benchmarks/NOTES.md); the Q view's Triton kernel was faster
# than two calls there, so it keeps one.
EXACT_CUDA_CALLS = 2


@torch.compiler.assume_constant_result
@functools.cache
def cuda_small_m_available() -> bool:
    """Whether the CUDA small-M kernels of :mod:`specdec.kernels.cuda` can run: a GPU and the built library.

    Never builds the library (``python -c "import specdec.kernels.cuda as c; c.build_kernels()"`` does).
    Cached for the process.

    Example::

        >>> isinstance(cuda_small_m_available(), bool)
        True
    """
    if not torch.cuda.is_available():
        return False
    from specdec.kernels.cuda.build import KernelLibraryError, load_library

    try:
        load_library(build_if_missing=False)
    except KernelLibraryError as err:
        logger.info("W12 linears use Triton: %s", err)
        return False
    return True


def linear_path(
    x: torch.Tensor,
    w: W12Tensor,
    bias: torch.Tensor | None = None,
    *,
    backend: str = "auto",
    plain: bool = True,
    view: str = "exact",
) -> str:
    """Which implementation :func:`w12_linear` / :func:`q_linear` run: ``"torch"``, ``"triton"``, ``"cuda"`` or ``"dequant"``.

    ``"auto"``: the pure-PyTorch reference off CUDA; on CUDA the CUDA small-M kernel
    (:func:`specdec.kernels.cuda.w12_gemm_small_m` / ``q_gemm_small_m``) when ``x`` has at most
    ``max_tokens("w12" / "q", K)`` rows (16 for the tensor-map kernels where ``K % 32 == 0``, else 8; the exact
    view takes ``EXACT_CUDA_CALLS`` times that with the tensor-map kernel, in calls of at most 16 rows; where
    ``K % 64 == 0`` and ``$SPECDEC_WIDE_GEMM`` takes the view's rows (unset: the exact view's, and the Q view's past 32,
    :func:`~specdec.kernels.cuda.ops.wide_gemm_enabled`) it takes up to ``WIDE_MAX_TOKENS``, those past one small-M
    call in one call of the wide op, :func:`specdec.kernels.cuda.ops.w12_gemm_wide` / ``q_gemm_wide``), there is
    no bias, ``K % 8 == 0``, the call is ``plain`` (no ``rebias`` / ``config``), the library loads
    (:func:`cuda_small_m_available`) and ``$SPECDEC_W12_CUDA`` is not ``0``; else Triton. ``"cuda"`` asks for the
    CUDA kernel and raises ``ValueError`` where it cannot run. ``SPECDEC_W12_CUDA=0`` (or ``linear_backend="triton"``
    on the weight) forces the Triton path, e.g. to compare the two. ``"dequant"`` (asked for, never chosen by
    ``"auto"``) decodes the weight to bf16 with :func:`specdec.kernels.w12_dequant.w12_dequant` and multiplies it with
    ``F.linear`` (cuBLAS on CUDA), in chunks of :data:`DEQUANT_CHUNK_BYTES`: the path for compute-bound row counts
    (prefills), where the fused kernels decode the same weights again for every tile of rows.

    Args:
        x: bf16 ``[..., K]``; its leading dimensions multiply to the row count M.
        w: :class:`W12Tensor` ``[N, K]``.
        bias: optional bf16 ``[N]``.
        backend: ``"auto"``, ``"cuda"``, ``"triton"``, ``"torch"`` or ``"dequant"``.
        plain: ``False`` when the caller asks for Triton-only options.
        view: ``"exact"`` (:func:`w12_linear`) or ``"q"`` (:func:`q_linear`): whose kernel's row limit applies.

    Example::

        >>> w = W12Tensor.from_bf16(torch.ones(4, 8, dtype=torch.bfloat16))
        >>> linear_path(torch.ones(1, 8, dtype=torch.bfloat16), w)
        'torch'
    """
    if backend not in _BACKENDS:
        raise ValueError(f"backend: expected 'auto', 'cuda', 'triton', 'torch' or 'dequant', got {backend!r}")
    if view not in ("exact", "q"):
        raise ValueError(f"view: expected 'exact' or 'q', got {view!r}")
    if backend in ("triton", "torch"):
        return resolve_backend(backend, x.device)
    if backend == "dequant":
        resolve_backend("triton", x.device)  # its decode is a Triton kernel
        return "dequant"
    k = w.shape[1]
    rows = x.numel() // k if k else 0
    max_rows = _cuda_row_limit(view, k, rows)
    reasons = []
    if x.device.type != "cuda":
        reasons.append(f"x is on {x.device}")
    if not 1 <= rows <= max_rows:
        reasons.append(f"x has {rows} rows (at most {max_rows})")
    if bias is not None:
        reasons.append("a bias is given")
    if k % 8:
        reasons.append(f"K={k} is not a multiple of 8")
    if not plain:
        reasons.append("rebias or config asks for Triton")
    if backend == "cuda":
        if not reasons and not cuda_small_m_available():
            reasons.append("the CUDA kernel library does not load")
        if reasons:
            raise ValueError(f"backend: 'cuda' cannot run here: {'; '.join(reasons)}")
        return "cuda"
    if x.device.type != "cuda":
        return "torch"
    if reasons or os.environ.get(CUDA_SMALL_M_ENV, "1") == "0" or not cuda_small_m_available():
        return "triton"
    return "cuda"


def _cuda_row_limit(view: str, k: int, rows: int) -> int:
    """The most rows :func:`linear_path` sends to CUDA for ``view`` at width ``k`` when asked for ``rows``
    (:func:`_cuda_small_m` splits them, or sends those past one small-M call to the wide op)."""
    from specdec.kernels.cuda.ops import MAX_TOKENS, WIDE_MAX_TOKENS, max_tokens

    if _takes_wide(k, view, rows):
        return WIDE_MAX_TOKENS
    per_call = max_tokens("w12" if view == "exact" else "q", k)
    return per_call * EXACT_CUDA_CALLS if view == "exact" and per_call > MAX_TOKENS else per_call


def _takes_wide(k: int, view: str, rows: int) -> bool:
    """Whether ``rows`` of ``view`` (past one small-M call) go to its wide op at width ``k``
    (:func:`~specdec.kernels.cuda.ops.wide_gemm_enabled` by ``$SPECDEC_WIDE_GEMM``, and ``K % 64 == 0``)."""
    from specdec.kernels.cuda.ops import WIDE_STAGE_K, wide_gemm_enabled

    return wide_gemm_enabled(view, rows) and k % WIDE_STAGE_K == 0


def _cuda_small_m(x: torch.Tensor, w: W12Tensor, view: str) -> torch.Tensor:
    """``x @ W^T`` through the CUDA ops: more rows than one small-M call takes in one wide call where
    :func:`_takes_wide`, else in small-M calls of at most ``TENSOR_MAP_MAX_TOKENS`` rows (:func:`linear_path` sends
    more than ``max_tokens`` rows only where the tensor-map kernel or the wide one runs, at most ``_cuda_row_limit``)."""
    from specdec.kernels.cuda.ops import TENSOR_MAP_MAX_TOKENS, max_tokens  # the import registers torch.ops.specdec.*

    k = w.shape[1]
    x2 = x.reshape(-1, k).contiguous()
    # the kernel's 16-byte loads need an aligned base (traced tensors have no address; the op checks it at run time)
    if not torch.compiler.is_compiling() and x2.data_ptr() % 16:
        x2 = x2.clone()
    if x2.shape[0] > max_tokens("w12" if view == "exact" else "q", k) and _takes_wide(k, view, x2.shape[0]):
        if view == "q":
            y = torch.ops.specdec.q_gemm_wide(x2, w.ae, w.base)
        else:
            y = torch.ops.specdec.w12_gemm_wide(x2, w.ae, w.nib, w.base, w.esc_ptr, w.esc_pos, w.esc_bits)
        return y.reshape(*x.shape[:-1], w.shape[0])
    outs = []
    for part in x2.split(TENSOR_MAP_MAX_TOKENS):  # more than one block only where K % 32 == 0: starts stay 16-byte aligned
        if view == "q":
            outs.append(torch.ops.specdec.q_gemm_small_m(part, w.ae, w.base))
        else:
            outs.append(torch.ops.specdec.w12_gemm_small_m(part, w.ae, w.nib, w.base, w.esc_ptr, w.esc_pos, w.esc_bits))
    y = outs[0] if len(outs) == 1 else torch.cat(outs)
    return y.reshape(*x.shape[:-1], w.shape[0])


def _dequant_linear(x: torch.Tensor, w: W12Tensor, bias: torch.Tensor | None, view: str) -> torch.Tensor:
    """``x @ W^T (+ bias)`` with W decoded to bf16 by :func:`w12_dequant` (``view`` "exact" or "q") and multiplied by
    ``F.linear``, in chunks of at most :data:`DEQUANT_CHUNK_BYTES` of bf16 rows: chunk by chunk the result is
    ``F.linear`` of ``x`` with those rows of ``w.to_bf16()`` (``q_view()``)."""
    n, k = w.shape
    exact = view == "exact"
    planes = (w.ae, w.nib, w.base, w.esc_ptr, w.esc_pos, w.esc_bits) if exact else (w.ae, None, w.base, None, None, None)
    chunk = max(1, DEQUANT_CHUNK_BYTES // (2 * max(k, 1)))
    coordinates = None
    if exact:
        # computed once a weight: escape_coordinates reads its offsets on the host
        coordinates = w._kernel_cache.get("escape_coordinates")
        if coordinates is None:
            coordinates = w._kernel_cache["escape_coordinates"] = w.escape_coordinates()
    if chunk >= n:
        return F.linear(x, w12_dequant(*planes, k=k, mode=view, coordinates=coordinates), bias)
    x2 = x.reshape(-1, k)
    y = torch.empty(x2.shape[0], n, dtype=x.dtype, device=x.device)
    for r0 in range(0, n, chunk):
        r1 = min(n, r0 + chunk)
        weight = w12_dequant(*planes, k=k, rows=(r0, r1), mode=view, coordinates=coordinates)
        y[:, r0:r1] = F.linear(x2, weight, None if bias is None else bias[r0:r1])
    return y.reshape(*x.shape[:-1], n)


def _check_linear_inputs(x: object, w: object, bias: object) -> None:
    if not isinstance(x, torch.Tensor) or isinstance(x, W12Tensor):
        raise TypeError(f"x: expected a bf16 torch.Tensor, got {type(x).__name__}")
    if not isinstance(w, W12Tensor):
        raise TypeError(f"w: expected a W12Tensor (build with W12Tensor.from_bf16), got {type(w).__name__}")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"x: expected dtype torch.bfloat16, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"x: expected shape [..., {w.shape[1]}] (K of w {tuple(w.shape)}), got {tuple(x.shape)}")
    if x.device != w.device:
        raise ValueError(f"x: expected device {w.device} (where w lives), got {x.device}")
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias: expected a tensor or None, got {type(bias).__name__}")
        if bias.shape != (w.shape[0],):
            raise ValueError(f"bias: expected shape ({w.shape[0]},), got {tuple(bias.shape)}")
        if bias.dtype != torch.bfloat16:
            raise TypeError(f"bias: expected dtype torch.bfloat16, got {bias.dtype}")
        if bias.device != w.device:
            raise ValueError(f"bias: expected device {w.device}, got {bias.device}")


def _check_triton_options(path: str, config: object, rebias: bool = False) -> None:
    """``config`` and ``rebias`` steer the Triton kernel only: refused where another path would drop them."""
    if config is not None and not isinstance(config, W12KernelConfig):
        raise TypeError(f"config: expected a W12KernelConfig or None, got {type(config).__name__}")
    if path != "triton" and (rebias or config is not None):
        given = " and ".join(name for name, on in (("rebias", rebias), ("config", config is not None)) if on)
        raise ValueError(f"{given}: options of the Triton kernel, but this call runs the {path!r} path (pass backend='triton')")


def w12_linear_reference(x: torch.Tensor, w: W12Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Pure-PyTorch reference of :func:`w12_linear`: exact decode, then ``F.linear``.

    Example::

        >>> w = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16)
        >>> w12_linear_reference(torch.ones(1, 2, dtype=torch.bfloat16), W12Tensor.from_bf16(w))
        tensor([[3.]], dtype=torch.bfloat16)
    """
    return F.linear(x, w.to_bf16(), bias)


def q_linear_reference(x: torch.Tensor, w: W12Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Pure-PyTorch reference of :func:`q_linear`: 8-bit-view decode, then ``F.linear``.

    Example::

        >>> w = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16)
        >>> q_linear_reference(torch.ones(1, 2, dtype=torch.bfloat16), W12Tensor.from_bf16(w))
        tensor([[3.1875]], dtype=torch.bfloat16)
    """
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
            ``"triton"`` runs the fused kernel :func:`specdec.kernels.w12_gemm.w12_matmul` (weights
            bit-identical inside the GEMM; output equal to the same kernel on bf16 weights);
            ``"cuda"`` the CUDA kernels: :func:`specdec.kernels.cuda.w12_gemm_small_m` (at most 8 rows a call, 16
            with the tensor-map kernel where ``K % 32 == 0``; up to two such calls), and past one call's rows the wide
            op :func:`~specdec.kernels.cuda.ops.w12_gemm_wide` (up to 128 rows, ``K % 64 == 0``) where
            ``$SPECDEC_WIDE_GEMM`` allows it; ``"auto"``: see :func:`linear_path` (the CUDA kernels for those row
            counts on CUDA, else Triton; torch off CUDA); ``"dequant"``: the weight decoded to bf16 by a Triton kernel
            (:func:`specdec.kernels.w12_dequant.w12_dequant`, in chunks of :data:`DEQUANT_CHUNK_BYTES`), then
            ``F.linear``, for compute-bound row counts (prefills); never chosen by ``"auto"``.
        rebias: Triton only. Build weights with exponent ``112 + E`` (the row base leaves the
            inner loop) and scale the fp32 accumulator by ``2^(base-112)``. Equal to the exact
            kernel while every product and partial sum stays a normal fp32 number in both scalings
            (see ``docs/w12.md``); raises ``ValueError`` if an escape cannot be rebiased exactly.
        config: tile shape; default from :func:`specdec.kernels.w12_gemm.default_config`.

    Returns:
        bf16 ``[..., N]``.

    Example::

        >>> w = torch.tensor([[1.0, 2.0], [0.0, -1.0]], dtype=torch.bfloat16)
        >>> x = torch.tensor([[1.0, 1.0]], dtype=torch.bfloat16)
        >>> w12_linear(x, W12Tensor.from_bf16(w), backend="torch")
        tensor([[ 3., -1.]], dtype=torch.bfloat16)
    """
    _check_linear_inputs(x, w, bias)
    path = linear_path(x, w, bias, backend=backend, plain=not rebias and config is None)
    _check_triton_options(path, config, rebias)
    if path == "torch":
        return w12_linear_reference(x, w, bias)
    if path == "cuda":
        return _cuda_small_m(x, w, "exact")
    if path == "dequant":
        return _dequant_linear(x, w, bias, "exact")
    return w12_matmul(
        x,
        w.ae,
        w.nib,
        w.base,
        w.esc_ptr,
        w.esc_pos,
        w.esc_bits,
        k=w.shape[1],
        bias=bias,
        rebias=rebias,
        config=config,
        escape_cache=w._kernel_cache,
    )


def q_linear(
    x: torch.Tensor,
    w: W12Tensor,
    bias: torch.Tensor | None = None,
    *,
    backend: str = "auto",
    config: W12KernelConfig | None = None,
) -> torch.Tensor:
    """Approximate ``y = x @ Q^T (+ bias)`` with Q = ``w.q_view()``, reading only the 8-bit plane.

    Shapes and backends as :func:`w12_linear` (the Triton path is
    :func:`specdec.kernels.w12_gemm.q_matmul`). Used for proposal passes only: its output decides
    nothing that is emitted.

    Example::

        >>> w = torch.tensor([[1.0, 2.0]], dtype=torch.bfloat16)
        >>> q_linear(torch.ones(1, 2, dtype=torch.bfloat16), W12Tensor.from_bf16(w), backend="torch")
        tensor([[3.1875]], dtype=torch.bfloat16)
    """
    _check_linear_inputs(x, w, bias)
    path = linear_path(x, w, bias, backend=backend, plain=config is None, view="q")
    _check_triton_options(path, config)
    if path == "torch":
        return q_linear_reference(x, w, bias)
    if path == "cuda":
        return _cuda_small_m(x, w, "q")
    if path == "dequant":
        return _dequant_linear(x, w, bias, "q")
    return q_matmul(x, w.ae, w.base, k=w.shape[1], bias=bias, config=config)


def decode_tiles(w: W12Tensor, *, mode: str = "exact", config: W12KernelConfig | None = None) -> torch.Tensor:
    """The weight ``[N, K]`` as the W12 GEMM kernel's registers hold it before ``tl.dot`` (tests only).

    ``mode`` "exact" must equal ``w.to_bf16()`` bit for bit, "q" ``w.q_view()``, "rebias" the weights
    times ``2^(112 - base)``. See :func:`specdec.kernels.w12_gemm.decode_w12_tiles`. Runs the Triton kernel: on
    CUDA tensors, or on CPU tensors under ``TRITON_INTERPRET=1`` as in this example.

    Example::

        >>> w = torch.tensor([[1.0, 0.0]], dtype=torch.bfloat16)
        >>> decode_tiles(W12Tensor.from_bf16(w))
        tensor([[1., 0.]], dtype=torch.bfloat16)
    """
    if not isinstance(w, W12Tensor):
        raise TypeError(f"w: expected a W12Tensor, got {type(w).__name__}")
    return decode_w12_tiles(w.ae, w.nib, w.base, w.esc_ptr, w.esc_pos, w.esc_bits, k=w.shape[1], mode=mode, config=config)


@dataclass(frozen=True)
class TensorReport:
    """Conversion result for one weight tensor.

    Example::

        >>> report = convert(nn.Sequential(nn.Linear(16, 8, bias=False)).to(torch.bfloat16))
        >>> report.tensors["0.weight"].shape, report.tensors["0.weight"].num_escapes
        ((8, 16), 0)
    """

    shape: tuple[int, int]
    escape_fraction: float
    bits_per_weight: float
    num_escapes: int


@dataclass(frozen=True)
class ConversionReport:
    """What :func:`convert` did, keyed by parameter name (``"layers.0.qkv.weight"``).

    ``tensors`` holds the converted weights; ``skipped`` maps every ``nn.Linear`` weight left as it
    was to the reason (``"matches skip entry 'lm_head'"``, ``"already a W12Tensor"``).

    Example::

        >>> report = convert(nn.Sequential(nn.Linear(16, 8, bias=False), nn.Linear(8, 4)).to(torch.bfloat16), skip=("1",))
        >>> list(report.tensors), report.skipped
        (['0.weight'], {'1.weight': "matches skip entry '1'"})
    """

    tensors: dict[str, TensorReport]
    skipped: dict[str, str]

    @property
    def bits_per_weight(self) -> float:
        """Weight-count-weighted mean bits per weight over the converted tensors."""
        total = sum(t.shape[0] * t.shape[1] for t in self.tensors.values())
        bits = sum(t.bits_per_weight * t.shape[0] * t.shape[1] for t in self.tensors.values())
        return bits / max(1, total)

    def __str__(self) -> str:
        lines = [f"{'tensor':<48} {'shape':>16} {'escape frac':>12} {'bits/w':>8}"]
        for name, t in self.tensors.items():
            lines.append(f"{name:<48} {str(t.shape):>16} {t.escape_fraction:>12.3e} {t.bits_per_weight:>8.4f}")
        for name, reason in self.skipped.items():
            lines.append(f"{name:<48} left as it was: {reason}")
        lines.append(f"converted {len(self.tensors)}, skipped {len(self.skipped)}; mean {self.bits_per_weight:.4f} bits/weight")
        return "\n".join(lines)


def convert(
    module: nn.Module,
    *,
    dtype: torch.dtype | None = None,
    max_escape_fraction: float = 1e-3,
    skip: Iterable[str] = (),
    linear_backend: str = "auto",
) -> ConversionReport:
    """Swap the weight of every ``nn.Linear`` in ``module`` for a :class:`W12Tensor`, in place.

    W12 stores bf16 weights exactly, so every ``nn.Linear`` to convert must hold a bf16 weight;
    any other dtype raises ``TypeError`` naming the layers, unless ``dtype=torch.bfloat16`` is passed:
    then every floating-point parameter of ``module`` (not only the linears, so that activations stay
    bf16 throughout) is first cast to bf16. That cast is lossy for float32 (and float16) weights;
    W12 is then exact with respect to the bf16 weights, not to the originals.

    A linear is left as it was when its qualified module name matches ``skip`` (an entry matches a
    name equal to it or ending in ``"." + entry``, e.g. ``skip=("lm_head",)``; a single string is one
    entry) or its weight already is a W12Tensor; the report names each one with the reason, and both
    lists are logged (logger ``"specdec"``, INFO). A ``skip`` entry that matches no ``nn.Linear`` (a
    misspelt name) and a module with nothing to convert raise ``ValueError``.

    The layers stay ``nn.Linear`` (their ``forward`` calls ``F.linear``, which the W12 weight
    overrides), so hooks, ``state_dict`` names and model code are untouched. Every tensor is checked
    before any is swapped: a tensor whose escape fraction exceeds ``max_escape_fraction`` raises
    ``ValueError`` naming it, and the module is unchanged.

    Example::

        >>> model = nn.Sequential(nn.Linear(16, 8, bias=False)).to(torch.bfloat16)
        >>> report = convert(model)
        >>> report.tensors["0.weight"].shape
        (8, 16)
        >>> fp32 = nn.Sequential(nn.Linear(16, 8), nn.Linear(8, 4))
        >>> sorted(convert(fp32, dtype=torch.bfloat16, skip=("1",)).skipped.items())
        [('1.weight', "matches skip entry '1'")]
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module: expected an nn.Module, got {type(module).__name__}")
    if dtype is not None and dtype != torch.bfloat16:
        raise ValueError(f"dtype: W12 holds bf16 weights; expected None or torch.bfloat16, got {dtype!r}")
    if not (0.0 <= max_escape_fraction <= 1.0):
        raise ValueError(f"max_escape_fraction: expected a value in [0, 1], got {max_escape_fraction}")
    skip = (skip,) if isinstance(skip, str) else tuple(skip)
    if not all(isinstance(entry, str) for entry in skip):
        raise TypeError(f"skip: expected module names (str), got {skip!r}")

    def matching_skip(name: str) -> str | None:
        return next((s for s in skip if name == s or name.endswith("." + s)), None)

    linears: list[tuple[str, str, nn.Linear]] = []
    skipped: dict[str, str] = {}
    wrong_dtype: list[str] = []
    for name, sub in module.named_modules():
        if not isinstance(sub, nn.Linear):
            continue
        pname = f"{name}.weight" if name else "weight"
        entry = matching_skip(name)
        if entry is not None:
            skipped[pname] = f"matches skip entry {entry!r}"
        elif isinstance(sub.weight, W12Tensor):
            skipped[pname] = "already a W12Tensor"
        else:
            if sub.weight.dtype != torch.bfloat16:
                wrong_dtype.append(f"{pname} ({sub.weight.dtype})")
            linears.append((name, pname, sub))
    linear_names = [name for name, sub in module.named_modules() if isinstance(sub, nn.Linear)]
    unused = [entry for entry in skip if not any(name == entry or name.endswith("." + entry) for name in linear_names)]
    if unused:
        raise ValueError(
            f"skip: entries {unused} match no nn.Linear of module (a name or the end of one after a '.'); "
            f"its linears: {linear_names[:8]}{' ...' if len(linear_names) > 8 else ''}"
        )
    if wrong_dtype and dtype is None:
        raise TypeError(
            f"module: expected bf16 weights, got {', '.join(wrong_dtype[:3])}"
            f"{f' and {len(wrong_dtype) - 3} more' if len(wrong_dtype) > 3 else ''}; pass dtype=torch.bfloat16 "
            "to cast every floating-point parameter to bf16 first (lossy for float32; W12 is then exact w.r.t. "
            "the bf16 weights), or skip these layers"
        )
    if not linears:
        found = f"; left as they were: {skipped}" if skipped else ""
        raise ValueError(f"module: expected at least one nn.Linear to convert, found none{found}")

    planned: list[tuple[str, nn.Linear, W12Tensor]] = []
    encoded: dict[int, W12Tensor] = {}  # a weight tied between linears is encoded once and stays tied
    for name, pname, sub in linears:
        if id(sub.weight) in encoded:
            planned.append((pname, sub, encoded[id(sub.weight)]))
            continue
        weight = sub.weight.detach().to(torch.bfloat16)
        # The planes are a fresh copy, so a strided weight converts as well as a contiguous one.
        w12 = W12Tensor.from_bf16(weight.contiguous(), linear_backend=linear_backend)
        if w12.escape_fraction > max_escape_fraction:
            raise ValueError(
                f"{pname}: escape fraction {w12.escape_fraction:.3e} ({w12.num_escapes} of "
                f"{weight.numel()} weights) exceeds max_escape_fraction={max_escape_fraction:.3e}; "
                f"raise the bound or pass skip=({name!r},)"
            )
        planned.append((pname, sub, w12))
        encoded[id(sub.weight)] = w12
    if dtype is not None:
        with torch.no_grad():
            for param in module.parameters():
                if param.is_floating_point() and param.dtype != dtype and not isinstance(param, W12Tensor):
                    param.data = param.data.to(dtype)
    tensors = {}
    params: dict[int, nn.Parameter] = {}
    for pname, sub, w12 in planned:
        sub.weight = params.setdefault(id(w12), nn.Parameter(w12, requires_grad=False))
        tensors[pname] = TensorReport(tuple(w12.shape), w12.escape_fraction, w12.bits_per_weight, w12.num_escapes)
    report = ConversionReport(tensors, skipped)
    logger.info("convert: %d linear weights to W12 (%s)", len(tensors), ", ".join(tensors))
    for pname, reason in skipped.items():
        logger.info("convert: left %s as it was: %s", pname, reason)
    return report


_W12_SUFFIX = ".__w12__."


def save_file(tensors: Mapping[str, torch.Tensor] | nn.Module, path: str) -> None:
    """Save a state dict (or a module's) holding plain tensors and W12Tensors to safetensors.

    Each W12Tensor ``name`` becomes the plain tensors ``name.__w12__.{ae,nib,base,esc_ptr,
    esc_pos,esc_bits}``; its logical shape, ``linear_backend`` and ``linear_view`` go into the file
    metadata, with the layout tag ``w12_layout`` (:data:`W12_LAYOUT`). :func:`load_file` restores it
    bit-exact. Names of one tensor (tied weights: the same storage, shape and strides) are stored once and
    come back as one tensor under both names; other tensors that share storage are stored as copies.

    Example::

        >>> import tempfile, os
        >>> w = torch.tensor([[1.0, 0.0]], dtype=torch.bfloat16)
        >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        >>> save_file({"lin.weight": W12Tensor.from_bf16(w)}, path)
        >>> load_file(path)["lin.weight"].to_bf16()
        tensor([[1., 0.]], dtype=torch.bfloat16)
    """
    from safetensors.torch import save_file as _save

    if isinstance(tensors, nn.Module):
        tensors = tensors.state_dict()
    flat: dict[str, torch.Tensor] = {}
    shapes: dict[str, list[int]] = {}
    linear: dict[str, list[str]] = {}
    aliases: dict[str, str] = {}
    first_name: dict[tuple, str] = {}
    storages: set[tuple] = set()

    def own_storage(t: torch.Tensor) -> torch.Tensor:
        # safetensors refuses entries that share memory: a tensor whose storage an earlier entry holds (a view of it,
        # or the planes an as_q_weight() view shares with its exact weight) is stored as a copy
        storage = (t.device, t.untyped_storage().data_ptr())
        plain = t.detach().contiguous().cpu()
        shared = storage in storages or plain.untyped_storage().nbytes() != plain.nbytes
        storages.add(storage)
        return plain.clone() if shared else plain

    for name, t in tensors.items():
        if isinstance(t, W12Tensor):  # state_dict() detaches each entry into a new wrapper: its planes tell it apart
            key = (t.linear_backend, t.linear_view, tuple(t.shape)) + tuple(
                (p.device, p.untyped_storage().data_ptr(), p.storage_offset(), tuple(p.shape))
                for p in (getattr(t, inner) for inner in W12Tensor._INNER)
            )
        elif isinstance(t, torch.Tensor):
            key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        else:
            raise TypeError(f"tensors[{name!r}]: expected a tensor, got {type(t).__name__}")
        if key in first_name:
            aliases[name] = first_name[key]
            continue
        first_name[key] = name
        if isinstance(t, W12Tensor):
            for inner in W12Tensor._INNER:
                flat[name + _W12_SUFFIX + inner] = own_storage(getattr(t, inner))
            shapes[name] = list(t.shape)
            linear[name] = [t.linear_backend, t.linear_view]
        else:
            flat[name] = own_storage(t)
    metadata = {"format": "pt", "w12_shapes": json.dumps(shapes), "w12_layout": W12_LAYOUT}
    metadata.update(w12_linear=json.dumps(linear), aliases=json.dumps(aliases))
    _save(flat, path, metadata=metadata)


def _padding_holds_weights(ae: torch.Tensor, nib: torch.Tensor, k: int) -> bool:
    """Whether a padding column (logical ``k`` to ``k_padded - 1``) of the planes holds anything but the zero code. Reads
    only the last word of 8 columns of each row: the planes permute columns within such words (``_perm_ae``,
    ``_perm_nib``), and a K that is a multiple of 8 has no padding at all."""
    k_padded = ae.shape[1]
    if k == k_padded:
        return False
    start = k_padded - 8
    logical_ae = _perm_ae(k_padded, ae.device)[start:]
    tail = nib[:, start // 2 :].to(torch.int32)
    slots = torch.stack([tail & 0xF, tail >> 4], dim=-1).reshape(ae.shape[0], 8)
    logical_nib = _perm_nib(k_padded, ae.device)[start:]
    return bool((ae[:, start:][:, logical_ae >= k] & 0x7F).any()) or bool(slots[:, logical_nib >= k].any())


def load_file(path: str, *, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Load a file written by :func:`save_file`; W12 entries come back as W12Tensors.

    Raises ``ValueError`` when the file's W12 entries are in another plane layout than
    :data:`W12_LAYOUT` (naming both), or a plane has the wrong dtype, shape or escape offsets.

    Example (see also :func:`save_file`)::

        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     save_file({"w": W12Tensor.from_bf16(torch.ones(2, 8, dtype=torch.bfloat16)), "b": torch.zeros(2)}, f"{tmp}/w.st")
        ...     state = load_file(f"{tmp}/w.st")
        >>> type(state["w"]).__name__, state["b"].tolist()
        ('W12Tensor', [0.0, 0.0])
    """
    from safetensors import safe_open

    with safe_open(path, framework="pt", device=str(device)) as f:
        meta = f.metadata() or {}
        flat = {name: f.get_tensor(name) for name in f.keys()}
    shapes = json.loads(meta.get("w12_shapes", "{}"))
    has_w12 = bool(shapes) or any(_W12_SUFFIX in n for n in flat)
    if has_w12 and meta.get("w12_layout") != W12_LAYOUT:
        found = sorted({n.rpartition(_W12_SUFFIX)[2] for n in flat if _W12_SUFFIX in n})
        raise ValueError(
            f"path: {path} holds W12 weights in another layout (w12_layout {meta.get('w12_layout')!r}, planes "
            f"{', '.join(found)}); expected w12_layout {W12_LAYOUT!r}: planes {', '.join(W12Tensor._INNER)}, "
            "zeros as the reserved code, escapes in 256x256 tiles. Encode the bf16 weights again "
            "(W12Tensor.from_bf16 or convert, then save_file)"
        )
    linear = json.loads(meta.get("w12_linear", "{}"))
    out: dict[str, torch.Tensor] = {}
    for name, shape in shapes.items():
        missing = [part for part in W12Tensor._INNER if name + _W12_SUFFIX + part not in flat]
        if missing:
            raise ValueError(f"path: {path} lacks the W12 planes {missing} of {name!r}")
        inner = [flat.pop(name + _W12_SUFFIX + part) for part in W12Tensor._INNER]
        if len(shape) != 2:
            raise ValueError(f"{name}: expected a 2-D [N, K] shape in the w12_shapes metadata, got {shape}")
        base = inner[2]
        if base.ndim == 1 and not base.is_floating_point():  # named here before check_planes' generic message
            bad = ((base < 1) | (base > MAX_BASE)).nonzero()
            if bad.numel():
                row = int(bad[0])
                raise ValueError(
                    f"{name}: expected row bases in [1, {MAX_BASE}] (the encoder writes no other), got {int(base[row])} at "
                    f"row {row}: the base plane is corrupt"
                )
        if check_planes(*inner, k=shape[1]) != shape[0]:
            raise ValueError(f"{name}: expected {shape[0]} rows (w12_shapes metadata), the planes hold {inner[0].shape[0]}")
        if _padding_holds_weights(inner[0], inner[1], shape[1]):
            raise ValueError(
                f"{name}: expected the zero code in the padding columns {shape[1]}..{inner[0].shape[1] - 1} (w12_shapes "
                f"says K={shape[1]}), found weights there: the planes hold a wider weight"
            )
        out[name] = W12Tensor(*inner, tuple(shape), *linear.get(name, ()))
    leftover = [n for n in flat if _W12_SUFFIX in n]
    if leftover:
        raise ValueError(f"path: {path} holds W12 planes without a shape entry: {leftover[:3]}")
    out.update(flat)
    for alias, name in json.loads(meta.get("aliases", "{}")).items():
        if name not in out:
            raise ValueError(f"path: {path} names {alias!r} an alias of {name!r}, which it does not hold")
        out[alias] = out[name]
    return out


def load_into(module: nn.Module, path: str) -> None:
    """Load a file from :func:`save_file` into ``module``; W12 entries replace ``nn.Linear`` weights.

    Plain entries are copied into the existing parameters and persistent buffers (the names of
    ``module.state_dict()``; ``strict`` names, shapes and dtypes).

    Example::

        >>> import tempfile
        >>> src, dst = (nn.Sequential(nn.Linear(16, 8, bias=False)).to(torch.bfloat16) for _ in range(2))
        >>> _ = convert(src)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     save_file(src, f"{tmp}/m.safetensors"); load_into(dst, f"{tmp}/m.safetensors")
        >>> isinstance(dst[0].weight, W12Tensor), torch.equal(dst[0].weight.to_bf16(), src[0].weight.to_bf16())
        (True, True)
    """
    held = next(itertools.chain(module.parameters(), module.buffers()), None)
    if held is None:
        raise ValueError(
            f"module: expected a module with parameters or buffers to load into, got an empty {type(module).__name__}"
        )
    state = load_file(path, device=held.device)
    own = module.state_dict(keep_vars=True)
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise ValueError(f"path: {path} does not match module: missing {missing[:5]}, unexpected {unexpected[:5]}")
    for name, value in state.items():
        target = own[name]
        if tuple(value.shape) != tuple(target.shape):
            raise ValueError(f"{name}: expected shape {tuple(target.shape)}, file has {tuple(value.shape)}")
        if isinstance(value, W12Tensor):
            mod_name, _, attr = name.rpartition(".")
            sub = module.get_submodule(mod_name)
            if not isinstance(sub, nn.Linear) or attr != "weight":
                raise ValueError(f"{name}: W12 entries must be nn.Linear weights, got {type(sub).__name__}.{attr}")
            sub.weight = nn.Parameter(value, requires_grad=False)
        else:
            if isinstance(target, W12Tensor):
                raise ValueError(f"{name}: module holds a W12 weight but the file holds a plain tensor")
            if value.dtype != target.dtype:
                raise ValueError(f"{name}: expected dtype {target.dtype}, file has {value.dtype}")
            with torch.no_grad():
                target.copy_(value)


def _w12_planes_reference(x, ae, nib, base, esc_ptr, esc_pos, esc_bits):
    return w12_linear_reference(x, W12Tensor(ae, nib, base, esc_ptr, esc_pos, esc_bits, tuple(ae.shape)))


def _q_plane_reference(x, ae, base):
    n, k = ae.shape
    no_nib = torch.zeros(n, k // 2, dtype=torch.uint8, device=ae.device)
    no_esc_ptr = torch.zeros(num_escape_tiles(n, k) + 1, dtype=torch.int32, device=ae.device)
    no_esc = torch.zeros(0, dtype=torch.int16, device=ae.device)
    return q_linear_reference(x, W12Tensor(ae, no_nib, base, no_esc_ptr, no_esc, no_esc, (n, k)))


register_cpu_reference("w12", _w12_planes_reference)
register_cpu_reference("q", _q_plane_reference)
