"""The CUDA skinny GEMMs as torch custom ops: ``specdec::skinny_gemm_bf16``, ``specdec::w12_gemm_small_m``, ``specdec::q_gemm_small_m``.

Each computes ``y [M, N] = x [M, K] @ W^T`` for a few tokens (``1 <= M <= 8``; up to 16 where the kernel that runs is
a tensor-map one, :func:`max_tokens`), bf16 in and out with fp32 accumulation, ``K`` a multiple of 8. On CUDA tensors the kernel of ``skinny_gemm.cu`` runs on
``torch.cuda.current_stream()`` (so CUDA graphs capture it); on CPU tensors the pure-PyTorch reference
runs (``F.linear`` on the bf16 weight, on ``W12Tensor.to_bf16()`` or on ``W12Tensor.q_view()``). Each op has a
fake (meta) implementation, so ``torch.compile`` and graph tracing see its output shape without running it.

``SPECDEC_W12_CUDA_VARIANT`` (read on every call) picks the W12 kernel: unset or ``"v1"`` the default kernel,
``"v3"`` the streaming kernel without barriers in its K loop (``specdec_w12_gemm_small_m_v3``: 64-row CTAs, K split
over clusters of up to 16 CTAs, three chunks of loads in flight per lane; README.md beside the kernels), ``"v4"``
the same K loop with K split over independent CTAs (``specdec_w12_gemm_small_m_v4``: the last CTA of a row block
sums the partials from a workspace in split order; :func:`w12_workspace`), ``"v5"`` the same split over
independent CTAs fed by bulk copies (``specdec_w12_gemm_small_m_v5``: a producer warp copies each K stage's
planes and ``x`` into a ring of shared-memory stages, four consumer warps decode from there; ``K % 32 != 0``
runs the ``"v4"`` kernel), ``"v6"`` that pipeline with four producer warps issuing the copies
(``specdec_w12_gemm_small_m_v6``), ``"v7"`` that pipeline with its producer issuing one 2-D TMA copy per plane
per stage through tensor maps (``specdec_w12_gemm_small_m_v7``) and ``"v8"`` v7's pipeline in persistent CTAs, each
a run of equal length over row blocks x stages (``specdec_w12_gemm_small_m_v8``; where v7's split-K plan needs more
than one wave of CTAs and the runs are short, else v7's kernel and plan: :func:`stream_k_segments`, README.md) and
``"v9"`` v7's stages in CTAs of one 16-row tile each over the whole of K (``specdec_w12_gemm_small_m_v9``: no K split,
so no workspace and no reduction of partials; README.md, "Row-tile CTAs over the whole of K") and ``"v10"`` the
row tiles where they pay (K <= 8192, else at most two even waves of CTAs), else ``"v8"`` (``specdec_w12_gemm_small_m_v10``);
all five fall back as
``"v5"`` does. All decode bit-exactly; they sum in different orders, so their outputs may differ
in the last bits. Unset, it is ``"v10"`` where ``K % 32 == 0``, else ``"v1"`` (:func:`w12_variant`).

``SPECDEC_BF16_CUDA_VARIANT`` (read on every call) picks the bf16 kernel the same way (:func:`bf16_variant`): ``"v1"``
the register kernel (``specdec_skinny_gemm_bf16``), ``"v2"`` plain bf16 weights on the tensor-map pipeline of
``"v7"`` (``specdec_skinny_gemm_bf16_v2``, the same workspace contract; ``K % 32 != 0`` runs ``"v1"``), ``"v3"`` the
same in the persistent CTAs of W12 ``"v8"`` (``specdec_skinny_gemm_bf16_v3``; never slower than ``"v2"`` on the
H200's model shapes, faster where split K needs several waves), ``"v4"`` the same in the row-tile CTAs of W12 ``"v9"``
(``specdec_skinny_gemm_bf16_v4``), ``"v5"`` the row tiles where they pay (at up to 8 tokens wherever K <= 8192, at 9-16 in one wave of CTAs), else ``"v3"``
(``specdec_skinny_gemm_bf16_v5``); unset, ``"v5"``
where ``K % 32 == 0``, else ``"v1"``. They sum in different orders.

``SPECDEC_Q_CUDA_VARIANT`` (read on every call) picks the Q-view kernel the same way (:func:`q_variant`): ``"v1"``
the register kernel (``specdec_q_gemm_small_m``), ``"v2"`` the Q view on the tensor-map pipeline of ``"v7"``, K split
over independent CTAs with the same workspace contract (``specdec_q_gemm_small_m_v2``; ``K % 32 != 0`` runs the
``"v1"`` kernel), ``"v3"`` the same in the persistent CTAs of W12 ``"v8"`` (``specdec_q_gemm_small_m_v3``), ``"v4"`` in
the row-tile CTAs of W12 ``"v9"`` (``specdec_q_gemm_small_m_v4``), ``"v5"`` the row tiles where they pay, else ``"v2"``
(over up to 8 waves of CTAs, at 9-16 tokens only where ``K <= 8192``; ``specdec_q_gemm_small_m_v5``); unset, ``"v5"`` where
``K % 32 == 0``, else ``"v1"``. All decode the same Q view; they sum in different orders.

W12 planes are those of :class:`specdec.formats.W12Tensor` (``ae``, ``nib``, ``base``, ``esc_ptr``, ``esc_pos``,
``esc_bits``); with ``K % 8 == 0`` the planes are unpadded (``ae`` is ``[N, K]``).

Example (CPU: the reference path)::

    >>> import torch
    >>> from specdec.formats import W12Tensor
    >>> w = torch.tensor([[1.0, 2.0] * 4, [0.0, -1.0] * 4], dtype=torch.bfloat16)
    >>> x = torch.ones(1, 8, dtype=torch.bfloat16)
    >>> skinny_gemm_bf16(x, w)
    tensor([[12., -4.]], dtype=torch.bfloat16)
    >>> w12 = W12Tensor.from_bf16(w)
    >>> w12_gemm_small_m(x, w12.ae, w12.nib, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits)
    tensor([[12., -4.]], dtype=torch.bfloat16)
    >>> q_gemm_small_m(x, w12.ae, w12.base)
    tensor([[12.7500, -4.2500]], dtype=torch.bfloat16)
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F

from specdec.kernels.cuda.build import W12_WORKSPACE_VARIANTS, load_library
from specdec.kernels.launch import gemm_launch_code
from specdec.kernels.w12_gemm import NO_NIB, _check_escapes, _check_planes

__all__ = [
    "skinny_gemm_bf16",
    "w12_gemm_small_m",
    "q_gemm_small_m",
    "launch_plan",
    "rows_stage_groups",
    "row_stage_groups",
    "stream_k_segments",
    "w12_variant",
    "q_variant",
    "bf16_variant",
    "max_tokens",
    "split_k_workspace",
    "split_workspace_mode",
    "SPLIT_WORKSPACE_ENV",
    "MAX_TOKENS",
    "TENSOR_MAP_MAX_TOKENS",
    "KINDS",
    "W12_VARIANT_ENV",
    "W12_VARIANTS",
    "Q_VARIANT_ENV",
    "Q_VARIANTS",
    "BF16_VARIANT_ENV",
    "BF16_VARIANTS",
    "ROW_STAGE_GROUPS_ENV",
    "WIDE_CTAS_ENV",
    "WIDE_GROUPS_ENV",
    "WIDE_UNROLL_ENV",
    "WIDE_STREAM_K_ENV",
    "WIDE_PIPELINE_ENV",
    "w12_gemm_wide",
    "q_gemm_wide",
    "wide_plan",
    "wide_split_layout",
    "wide_gemm_enabled",
    "wide_ctas_per_sm",
    "wide_pipeline",
    "wide_stage_groups",
    "wide_unroll",
    "wide_unrolled",
    "wide_stream_k",
    "wide_stream_k_takes",
    "wide_ablation",
    "wide_trace_fields",
    "wide_trace_ctas",
    "wide_trace_reset",
    "wide_trace_read",
    "WIDE_TRACE_FIELDS",
    "WIDE_UNROLL_MODES",
    "WIDE_GEMM_ENV",
    "WIDE_Q_MIN_ROWS",
    "WIDE_MAX_TOKENS",
    "WIDE_STAGE_K",
]

MAX_TOKENS = 8
TENSOR_MAP_MAX_TOKENS = 16  # two MMA n-tiles of 8 tokens
KINDS = {"bf16": 0, "w12": 1, "q": 2}
W12_VARIANT_ENV = "SPECDEC_W12_CUDA_VARIANT"
W12_VARIANTS = ("v1", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10")
Q_VARIANT_ENV = "SPECDEC_Q_CUDA_VARIANT"
Q_VARIANTS = ("v1", "v2", "v3", "v4", "v5")
BF16_VARIANT_ENV = "SPECDEC_BF16_CUDA_VARIANT"
BF16_VARIANTS = ("v1", "v2", "v3", "v4", "v5")
ROW_STAGE_GROUPS_ENV = "SPECDEC_ROW_STAGE_GROUPS"
WIDE_PIPELINE_ENV = "SPECDEC_WIDE_PIPELINE"
WIDE_CTAS_ENV = "SPECDEC_WIDE_CTAS"
WIDE_GROUPS_ENV = "SPECDEC_WIDE_GROUPS"
WIDE_UNROLL_ENV = "SPECDEC_WIDE_UNROLL"
WIDE_UNROLL_MODES = ("auto", "1", "0")
_WIDE_UNROLL_CODES = {"0": 0, "1": 1, "auto": 2}  # specdec_set_wide_unroll's modes
WIDE_STREAM_K_ENV = "SPECDEC_WIDE_STREAM_K"
WIDE_STREAM_K_MODES = ("auto", "1", "0")
_WIDE_STREAM_K_CODES = {"0": 0, "1": 1, "auto": 2}  # specdec_set_wide_stream_k's modes
WIDE_GEMM_ENV = "SPECDEC_WIDE_GEMM"
WIDE_MAX_TOKENS = 128  # four wgmma n-tiles of 32 tokens
WIDE_STAGE_K = 64  # K of a ring stage: the wide ops need K % 64 == 0
# launch_plan kinds of the kernels with K split over independent CTAs -> their plan's entry point (seven int64 values).
_SPLIT_K_PLANS = {
    **{f"w12_{v}": f"specdec_w12_{v}_plan" for v in W12_WORKSPACE_VARIANTS},
    "q_v2": "specdec_q_v2_plan",
    "q_v3": "specdec_q_v3_plan",
    "q_v4": "specdec_q_v4_plan",
    "q_v5": "specdec_q_v5_plan",
    "bf16_v2": "specdec_bf16_v2_plan",
    "bf16_v3": "specdec_bf16_v3_plan",
    "bf16_v4": "specdec_bf16_v4_plan",
    "bf16_v5": "specdec_bf16_v5_plan",
}
# Those fed by copies into shared-memory stages: their plans also say whether the copies run.
_STAGED_KINDS = ("w12_v5", "w12_v6", "w12_v7", "w12_v8", "w12_v9", "w12_v10", "q_v2", "q_v3", "q_v4", "q_v5")
_STAGED_KINDS += ("bf16_v2", "bf16_v3", "bf16_v4", "bf16_v5")
# Byte alignment the kernels' vector loads need of every plane's base address.
_ALIGN = 16


def _check_x(x: object, k: int | None, device: torch.device | None, max_rows: int = MAX_TOKENS) -> tuple[int, int]:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a bf16 torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"x: expected dtype torch.bfloat16, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"x: expected a 2-D tensor [M, K], got shape {tuple(x.shape)}")
    m, kx = x.shape
    if not 1 <= m <= max_rows:
        raise ValueError(f"x: expected 1 to {max_rows} rows (tokens) at K={kx}, got M={m}")
    if kx < 8 or kx % 8:
        raise ValueError(f"x: expected K (its last dimension) a positive multiple of 8, got K={kx}")
    if k is not None and kx != k:
        raise ValueError(f"x: expected K={k} columns (the weight's K), got {kx}")
    if device is not None and x.device != device:
        raise ValueError(f"x: expected device {device} (where the weight lives), got {x.device}")
    if not x.is_contiguous():
        raise ValueError(f"x: expected a contiguous tensor, got strides {x.stride()}")
    return m, kx


def _check_aligned(**tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        if t.device.type == "cuda" and t.numel() and t.data_ptr() % _ALIGN:
            raise ValueError(f"{name}: expected a base address aligned to {_ALIGN} bytes, got {t.data_ptr():#x}")


def _check_bf16_weight(weight: object, device: torch.device) -> tuple[int, int]:
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight: expected a bf16 torch.Tensor, got {type(weight).__name__}")
    if weight.dtype != torch.bfloat16:
        raise TypeError(f"weight: expected dtype torch.bfloat16, got {weight.dtype}")
    if weight.dim() != 2:
        raise ValueError(f"weight: expected a 2-D tensor [N, K], got shape {tuple(weight.shape)}")
    if weight.device != device:
        raise ValueError(f"weight: expected device {device} (where x lives), got {weight.device}")
    if not weight.is_contiguous():
        raise ValueError(f"weight: expected a contiguous tensor, got strides {weight.stride()}")
    return weight.shape[0], weight.shape[1]


def _k_of_planes(ae: object) -> int:
    if not isinstance(ae, torch.Tensor) or ae.dim() != 2:
        raise ValueError(f"ae: expected a 2-D uint8 tensor [N, K], got {getattr(ae, 'shape', type(ae).__name__)}")
    k = ae.shape[1]
    if k < 8 or k % 8:
        raise ValueError(f"ae: expected K (its width) a positive multiple of 8, got {k}")
    return k


def _raise_on_failure(lib: ctypes.CDLL, rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what}: CUDA kernel launch failed ({rc}): {lib.specdec_cuda_last_error().decode()}")


def _variant(env: str, variants: tuple[str, ...], tensor_map: str, k: int | None) -> str:
    # Unset: the tensor-map kernel where its copies run (K % 32 == 0), the register kernel "v1" elsewhere.
    value = os.environ.get(env, "") or (tensor_map if k is not None and k % 32 == 0 else "v1")
    if value not in variants:
        raise ValueError(f"{env}: expected one of {variants} or unset, got {value!r}")
    return value


def w12_variant(k: int | None = None) -> str:
    """The W12 CUDA kernel :func:`w12_gemm_small_m` runs now for weights of width ``k``: ``$SPECDEC_W12_CUDA_VARIANT``.

    Unset: ``"v10"`` (the tensor-map kernel in row tiles, in persistent CTAs or split over K, whichever measured
    fastest for the call's shape) where ``k % 32 == 0``, else ``"v1"`` (the register kernel; ``k=None`` stands for such a width).
    Raises ValueError for any other value than those of ``W12_VARIANTS``.

    Example::

        >>> import os
        >>> os.environ.pop("SPECDEC_W12_CUDA_VARIANT", None) and None
        >>> w12_variant(4096), w12_variant(4104), w12_variant()
        ('v10', 'v1', 'v1')
    """
    return _variant(W12_VARIANT_ENV, W12_VARIANTS, "v10", k)


def q_variant(k: int | None = None) -> str:
    """The Q-view CUDA kernel :func:`q_gemm_small_m` runs now for weights of width ``k``: ``$SPECDEC_Q_CUDA_VARIANT``.

    Unset: ``"v5"`` (the Q view on the tensor-map pipeline, in row tiles where they pay) where ``k % 32 == 0``, else ``"v1"`` (the register
    kernel; ``k=None`` stands for such a width). Raises ValueError for any other value than those of ``Q_VARIANTS``.

    Example::

        >>> import os
        >>> os.environ.pop("SPECDEC_Q_CUDA_VARIANT", None) and None
        >>> q_variant(4096), q_variant(4104), q_variant()
        ('v5', 'v1', 'v1')
    """
    return _variant(Q_VARIANT_ENV, Q_VARIANTS, "v5", k)


def bf16_variant(k: int | None = None) -> str:
    """The bf16 CUDA kernel :func:`skinny_gemm_bf16` runs now for weights of width ``k``: ``$SPECDEC_BF16_CUDA_VARIANT``.

    Unset: ``"v5"`` (plain bf16 weights on the tensor-map pipeline, in row tiles or persistent CTAs where they measured faster) where
    ``k % 32 == 0``, else ``"v1"`` (the register
    kernel; ``k=None`` stands for such a width). Raises ValueError for any other value than those of ``BF16_VARIANTS``.

    Example::

        >>> import os
        >>> os.environ.pop("SPECDEC_BF16_CUDA_VARIANT", None) and None
        >>> bf16_variant(4096), bf16_variant(4104), bf16_variant()
        ('v5', 'v1', 'v1')
    """
    return _variant(BF16_VARIANT_ENV, BF16_VARIANTS, "v5", k)


def _env_choice(name: str, default: str, choices: tuple[str, ...], what: str) -> str:
    """``$name`` (unset or empty: ``default``), one of ``choices``; ValueError naming the variable, what it sets, the
    expected values and the value found otherwise.

    Example::

        >>> import os
        >>> os.environ.pop("SPECDEC_EXAMPLE", None) and None
        >>> _env_choice("SPECDEC_EXAMPLE", "1", ("1", "2"), "an example")
        '1'
    """
    value = os.environ.get(name, "") or default
    if value not in choices:
        expected = " or ".join(repr(c) for c in choices)
        raise ValueError(f"${name}: expected {expected} ({what}), got {value!r}")
    return value


def row_stage_groups() -> int:
    """Up to how many consumer stage groups the row-tile kernels run (``$SPECDEC_ROW_STAGE_GROUPS``, read on every
    call; unset: 2). ``2``: a Q-view row-tile call of at most 8 tokens whose CTAs all fit at three an SM runs eight
    consumer warps a CTA, warps 0-3 on the even stages and 4-7 on the odd ones, so two stages are decoded and
    multiplied at once (:func:`rows_stage_groups` says which calls; ``specdec/kernels/cuda/README.md``, "Two stage
    groups"; measured 1-8 % faster there on the H200); ``1``: four consumer warps everywhere. Raises ValueError for
    any other value.

    Example::

        >>> import os
        >>> os.environ.pop(ROW_STAGE_GROUPS_ENV, None) and None
        >>> row_stage_groups()
        2
    """
    return int(_env_choice(ROW_STAGE_GROUPS_ENV, "2", ("1", "2"), "consumer stage groups of the row-tile kernels"))


def wide_pipeline() -> bool:
    """Whether the wide kernels decode a stage while the MMAs of the stage before run (``$SPECDEC_WIDE_PIPELINE``, read
    on every call: ``"1"``; unset or ``"0"``: each warpgroup waits for a stage's MMAs before decoding the next, the
    form measured on the H200). Two sets of A registers (``specdec/kernels/cuda/README.md``, "Wide calls"). Raises
    ValueError for any other value.

    Example::

        >>> import os
        >>> os.environ.pop(WIDE_PIPELINE_ENV, None) and None
        >>> wide_pipeline()
        False
    """
    return _env_choice(WIDE_PIPELINE_ENV, "0", ("0", "1"), "the wide kernels' decode pipelined with their MMAs") == "1"


def wide_ctas_per_sm() -> int:
    """The CTAs an SM the wide kernels ask for (``$SPECDEC_WIDE_CTAS``, read on every call): ``2`` lets two 128-row CTAs
    share an SM up to 64 tokens with the one-set loop (a ring of 3-7 stages in half the SM's shared memory, 96
    registers a thread, slices of at least 8 stages), so that the second CTA's warps fill the waits of the first's
    decode chains; ``1`` (the default) keeps one CTA an SM (a ring of up to 8 stages in 200 KB): on an H100 two CTAs
    issued no faster (ncu) and made the 64-row W12 verify step 5 % slower (benchmarks/NOTES.md). The pipelined loop and
    65-128 tokens always run one. Raises ValueError for any other value.

    Example::

        >>> import os
        >>> os.environ.pop(WIDE_CTAS_ENV, None) and None
        >>> wide_ctas_per_sm()
        1
    """
    return int(_env_choice(WIDE_CTAS_ENV, "1", ("1", "2"), "CTAs an SM of the wide kernels up to 64 tokens"))


def wide_stage_groups() -> int:
    """The consumer stage groups of the wide kernels with one CTA an SM and the one-set loop up to 64 tokens
    (``$SPECDEC_WIDE_GROUPS``, read on every call): ``2`` (the default) runs two groups of two warpgroups over the same
    128 rows, one on the slice's even stages and one on its odd ones (16 consumer warps, 96 registers a thread), so that
    four warps a scheduler cover each other's decode chains and MMA waits; ``1`` one group. The same plan either way, and
    the sums add group by group (``specdec/kernels/cuda/README.md``, "Wide calls"). On an H100 two groups made the
    64-row W12 verify step 3 % faster (10.31 -> 10.01 ms) and the Q kernel 5-14 % (benchmarks/NOTES.md). Raises
    ValueError for any other value.

    Example::

        >>> import os
        >>> os.environ.pop(WIDE_GROUPS_ENV, None) and None
        >>> wide_stage_groups()
        2
    """
    return int(_env_choice(WIDE_GROUPS_ENV, "2", ("1", "2"), "consumer stage groups of the wide kernels"))


def wide_unroll() -> str:
    """Which wide calls with one CTA an SM and the one-set loop run it unrolled over one pass of the ring
    (``$SPECDEC_WIDE_UNROLL``, read on every call): ``"auto"`` (unset) the Q view's at every width and W12's above 32
    tokens, ``"1"`` all, ``"0"`` none (:func:`wide_unrolled` says for one call). Unrolled, each copy's ring slot is a
    constant, so the MMAs' shared-memory descriptors are uniform values: the W12 loop at 33-64 tokens 241 -> ~200
    instructions a stage, the Q loop 180 -> ~145 (sm_90a SASS, ``specdec/kernels/cuda/README.md``, "Wide calls").
    ``"auto"`` is measured (H100, ``benchmarks/NOTES.md``, "The wide loop unrolled over a pass of the ring:
    measured"): the Q kernel up to 7 % faster at 32-128 tokens, W12 1-7 % at 128 and level at 64, but up to 6 %
    slower at 24-32 in two alternated passes. Raises ValueError for any other value.

    Example::

        >>> import os
        >>> os.environ.pop(WIDE_UNROLL_ENV, None) and None
        >>> wide_unroll()
        'auto'
    """
    return _env_choice(WIDE_UNROLL_ENV, "auto", WIDE_UNROLL_MODES, "which wide calls unroll their loop over the ring")


def wide_stream_k() -> str:
    """Which wide calls run the persistent kernel (``$SPECDEC_WIDE_STREAM_K``, read on every call): ``"auto"``
    (unset) those it was measured faster on: where the split-K plan takes more than one wave of CTAs with its last wave
    under half full (the Qwen3-32B gate_up: 800 CTAs, the last wave 8), Q-view calls at every width and W12 up to 64
    tokens, Q-view calls whose split plan takes two or three waves and W12 calls up to 64 tokens whose split plan takes
    three (the Qwen3-8B gate_up); ``"1"`` every call it
    applies to, ``"0"`` none (:func:`wide_stream_k_takes` says for one call). Persistent, one CTA an SM takes an equal
    run of the call's (row block, stage) units across row blocks, so a multi-wave call's last wave does not round up
    and each row block's epilogue runs while the CTA's producer loads the next block's stages
    (``specdec/kernels/cuda/README.md``, "Persistent wide CTAs"). Measured (H100, ``benchmarks/NOTES.md``, "The tree's
    persistent kernel and the `auto` rule: measured"): the 32B gate_up W12 212.0 -> 169.5 us at 64 rows, Q 124.5 ->
    106.1; the 8B gate_up's Q call 54.3 -> 47.1, its W12 call 75.1 -> 73.2 (68.1 -> 63.3 at 32 rows); the 8B target's
    64-row Q-view pass 6.41 -> 6.13 ms (both rules alternated in one process); one-wave calls and runs of two partial
    pieces up to 29 % slower persistent. Raises ValueError for any other value.

    Example::

        >>> import os
        >>> os.environ.pop(WIDE_STREAM_K_ENV, None) and None
        >>> wide_stream_k()
        'auto'
    """
    return _env_choice(WIDE_STREAM_K_ENV, "auto", WIDE_STREAM_K_MODES, "which wide calls run the persistent kernel")


def wide_stream_k_takes(kind: str, m: int, n: int, k: int, sms: int, mode: str | None = None) -> bool:
    """Whether a wide call (``kind`` ``"w12"`` or ``"q"``, ``m`` tokens, ``[n, k]`` weights) on ``sms``
    multiprocessors runs the persistent kernel under ``mode`` (a :func:`wide_stream_k` value; None: the
    environment's), with the environment's other wide settings (it needs one CTA an SM, the one-set loop and, up to 64
    tokens, two stage groups). Host only: needs the built library, not a GPU.

    Example (needs the built library, so not run as a doctest): ``wide_stream_k_takes("w12", 64, 51200, 5120, 132,
    "auto") is True`` (the split plan's 800 CTAs, 8 in the last wave), ``wide_stream_k_takes("w12", 64, 24576, 4096,
    132, "auto") is True`` (384 CTAs: three waves) and ``wide_stream_k_takes("w12", 64, 10240, 5120, 132, "auto") is
    False`` (240 CTAs: two waves, the second 108).
    """
    if kind not in ("w12", "q"):
        raise ValueError(f"kind: expected 'w12' or 'q', got {kind!r}")
    mode = wide_stream_k() if mode is None else mode
    if mode not in WIDE_STREAM_K_MODES:
        raise ValueError(f"mode: expected one of {WIDE_STREAM_K_MODES}, got {mode!r}")
    lib = load_library()
    _set_wide_settings(lib)
    takes = lib.specdec_wide_stream_k_takes(KINDS[kind], m, n, k, sms, _WIDE_STREAM_K_CODES[mode])
    if takes < 0:
        raise ValueError(
            f"wide_stream_k_takes: expected 1 <= m <= {WIDE_MAX_TOKENS}, n >= 1, k a positive multiple of {WIDE_STAGE_K} "
            f"and sms >= 1, got m={m} n={n} k={k} sms={sms}"
        )
    return takes == 1


def wide_unrolled(kind: str, m: int, mode: str | None = None) -> bool:
    """Whether a wide call (``kind`` ``"w12"`` or ``"q"``, ``1 <= m <= WIDE_MAX_TOKENS``) with one CTA an SM and the
    one-set loop runs the unrolled loop under ``mode`` (a :func:`wide_unroll` value; None: the environment's). Host
    code of the library: needs the built library, not a GPU.

    Example (needs the built library, so not run as a doctest): ``wide_unrolled("q", 32) is True`` and
    ``wide_unrolled("w12", 32) is False`` under ``"auto"``; ``wide_unrolled("w12", 64) is True``.
    """
    if kind not in ("w12", "q"):
        raise ValueError(f"kind: expected 'w12' or 'q', got {kind!r}")
    if not 1 <= m <= WIDE_MAX_TOKENS:
        raise ValueError(f"m: expected 1 <= m <= {WIDE_MAX_TOKENS}, got {m}")
    mode = wide_unroll() if mode is None else mode
    if mode not in WIDE_UNROLL_MODES:
        raise ValueError(f"mode: expected one of {WIDE_UNROLL_MODES}, got {mode!r}")
    return load_library().specdec_wide_unrolled(KINDS[kind], m, _WIDE_UNROLL_CODES[mode]) == 1


def wide_ablation() -> int:
    """The loaded library's ``SPECDEC_WIDE_ABLATE`` build switch: 0 for the shipped kernels; in a library built to time
    the wide kernels' parts, whose products are wrong by design, the bits of what they leave out (1 the decode, 2 the
    MMAs, 4 x's box, 8 the epilogue; ``specdec/kernels/cuda/README.md``, "Wide calls"). Needs the built library, not a
    GPU.

    Example (needs the built library, so not run as a doctest): ``wide_ablation() == 0`` for
    ``build/specdec_cuda_kernels.so``.
    """
    return int(load_library().specdec_wide_ablation())


# What a traced build's wide kernels record a CTA (common/trace.cuh, WideTrace): the global clock in ns at each point,
# "meta" the SM (bits 0-15), the split (16-31), whether the CTA summed its row block (bit 32) and the K splits (40-);
# the persistent kernel's sums over its segments (ns) of warp 0's K loops, its waits for the other warps and the
# segments' epilogues, and "segments" its segments (bits 0-15) and partial ones (16-31).
WIDE_TRACE_FIELDS = (
    "start",
    "consumed",
    "ring_done",
    "summed",
    "partial",
    "counted",
    "reduced",
    "end",
    "meta",
    "escapes",
    "group1",
    "producer",
    "seg_loop",
    "seg_wait",
    "seg_epilogue",
    "segments",
)


def wide_trace_fields() -> int:
    """The records a CTA of the wide kernels keeps in a library built with ``-DSPECDEC_WIDE_TRACE=1`` (the first
    ``len(WIDE_TRACE_FIELDS)`` of them named by :data:`WIDE_TRACE_FIELDS`); 0 for the shipped build, which records
    nothing. Needs the built library, not a GPU.

    Example (needs the built library, so not run as a doctest): ``wide_trace_fields() == 0`` for
    ``build/specdec_cuda_kernels.so``.
    """
    return int(load_library().specdec_wide_trace_fields())


def wide_trace_ctas() -> int:
    """How many CTAs of a wide call a library built with ``-DSPECDEC_WIDE_TRACE=1`` records (the first ones, by
    ``blockIdx.y * gridDim.x + blockIdx.x``): the most :func:`wide_trace_read` returns. Needs the built library, not a
    GPU.

    Example (needs the built library, so not run as a doctest): ``wide_trace_ctas() == 4096``.
    """
    return int(load_library().specdec_wide_trace_ctas())


def wide_trace_reset(device: torch.device) -> None:
    """Zeroes a traced build's records on ``device``'s current stream, before the call to trace. Raises RuntimeError
    with the library's message in a build without the trace.

    Example (needs a traced build and a GPU, so not run as a doctest): ``wide_trace_reset(x.device);
    w12_gemm_wide(x, ...); wide_trace_read(ctas)``.
    """
    lib = load_library()
    _raise_on_failure(lib, lib.specdec_wide_trace_reset(_stream(device)), "wide_trace_reset")


def wide_trace_read(ctas: int) -> torch.Tensor:
    """The records of the first ``ctas`` CTAs (``blockIdx.y * gridDim.x + blockIdx.x``) of the wide calls since
    :func:`wide_trace_reset`, after the device's work: int64 ``[ctas, wide_trace_fields()]``, columns named by
    :data:`WIDE_TRACE_FIELDS` (0 where a CTA did not reach a point: the sum of the splits is the last CTA's only).
    Raises ValueError for ``ctas`` outside 1 to the build's limit, RuntimeError in a build without the trace.

    Example (needs a traced build and a GPU, so not run as a doctest): ``wide_trace_read(128)[:, 7] -
    wide_trace_read(128)[:, 0]``, each CTA's time from its start to its end in ns.
    """
    lib = load_library()
    fields, most = wide_trace_fields(), wide_trace_ctas()
    if fields == 0:
        raise RuntimeError("wide_trace_read: a library built without -DSPECDEC_WIDE_TRACE=1 records no trace")
    if not 1 <= ctas <= most:
        raise ValueError(f"ctas: expected 1 to {most}, got {ctas}")
    out = (ctypes.c_ulonglong * (ctas * fields))()
    _raise_on_failure(lib, lib.specdec_wide_trace_read(out, ctas), "wide_trace_read")
    return torch.tensor(list(out), dtype=torch.int64).reshape(ctas, fields)


# The tensor-map variants of each op (16 tokens where k % 32 == 0): the split-K kernel, its persistent form, row tiles.
_TENSOR_MAP_VARIANTS = {"bf16": ("v2", "v3", "v4", "v5"), "w12": ("v7", "v8", "v9", "v10"), "q": ("v2", "v3", "v4", "v5")}


def max_tokens(op: str, k: int) -> int:
    """The most rows (tokens) the op ``op`` (``"bf16"``, ``"w12"`` or ``"q"``) takes now for weights of width ``k``.

    16 where the kernel its variant variable picks at ``k`` is a tensor-map one (bf16 ``"v2"`` to ``"v5"``, W12 ``"v7"`` to
    ``"v10"``, Q ``"v2"`` to ``"v5"``: two MMA n-tiles of 8 tokens) and ``k % 32 == 0``; 8 elsewhere. The CPU reference takes the same.

    Example::

        >>> import os
        >>> for env in ("SPECDEC_W12_CUDA_VARIANT", "SPECDEC_Q_CUDA_VARIANT"):
        ...     os.environ.pop(env, None) and None
        >>> max_tokens("w12", 4096), max_tokens("w12", 4104), max_tokens("q", 4096)
        (16, 8, 16)
    """
    variants = {"bf16": bf16_variant, "w12": w12_variant, "q": q_variant}
    if op not in variants:
        raise ValueError(f"op: expected one of {sorted(variants)}, got {op!r}")
    return _max_rows(op, variants[op](k), k)


def _max_rows(op: str, variant: str, k: int) -> int:
    # max_tokens for the variant the op has already read
    return TENSOR_MAP_MAX_TOKENS if k % 32 == 0 and variant in _TENSOR_MAP_VARIANTS[op] else MAX_TOKENS


def _bf16_max_rows(x: object) -> int:
    # the row limit of skinny_gemm_bf16 at x's width (checked by _check_x; a malformed x gets the plain limit)
    width = x.shape[-1] if isinstance(x, torch.Tensor) and x.dim() == 2 else 0
    return max_tokens("bf16", width) if width > 0 else MAX_TOKENS


SPLIT_WORKSPACE_ENV = "SPECDEC_SPLIT_WORKSPACE"
SPLIT_WORKSPACE_MODES = ("shared", "per-layout")
_WORKSPACES: dict[tuple, list[torch.Tensor]] = {}


def split_workspace_mode() -> str:
    """How the kernels with K split over independent CTAs get their workspace (``$SPECDEC_SPLIT_WORKSPACE``, read on
    every launch): ``"shared"`` (unset) one per device for every launch, so each launch's partials land on the lines
    the launch before it wrote; ``"per-layout"`` one per plan size and row-block count (:func:`split_k_workspace`).
    Raises ValueError for any other value.

    Example::

        >>> import os
        >>> os.environ.pop(SPLIT_WORKSPACE_ENV, None) and None
        >>> split_workspace_mode()
        'shared'
    """
    return _env_choice(SPLIT_WORKSPACE_ENV, "shared", SPLIT_WORKSPACE_MODES, "the split-K kernels' workspace")


def split_k_workspace(
    device: torch.device, nbytes: int, *, op: str = "split_k_workspace", layout: tuple | None = None
) -> torch.Tensor:
    """A workspace of at least ``nbytes`` on ``device`` for the kernels with K split over independent CTAs: int32,
    zeroed when it is made and kept for the life of the process (a CUDA graph that captured a launch keeps using its
    address).

    Those kernels are W12 ``SPECDEC_W12_CUDA_VARIANT`` v4 to v10, Q and bf16 v2 to v5 and the wide ops; each takes the
    bytes its plan asks for: its fp32 partials from the workspace's start, its row blocks' counters at its end, which
    every launch leaves zero, so no launch clears it. ``layout`` None: the device's shared workspace, at least twice the
    largest asked for so far (a plan's partials then end below half of it and every plan's counters begin above,
    whatever their row blocks); a larger request makes a larger one, and the ones before it stay alive for the graphs
    that captured them. With ``layout`` (what sets the split: the launches pass N and their plan): one workspace of
    exactly ``nbytes`` per (device, size, layout). Launches sharing a workspace must not run concurrently: the ops run
    on ``torch.cuda.current_stream()``, one launch after another. Raises RuntimeError naming ``op`` when a workspace
    would be made during CUDA graph capture (call the op once on that shape before capturing), ValueError for
    ``nbytes < 1``.

    Example (CPU tensors stand for the device's)::

        >>> split_k_workspace(torch.device("cpu"), 10, layout=()).shape
        torch.Size([3])
    """
    if nbytes < 1:
        raise ValueError(f"nbytes: expected a positive workspace size, got {nbytes}")
    index = device.index if device.index is not None else (torch.cuda.current_device() if device.type == "cuda" else -1)
    shared = layout is None
    key = (index,) if shared else (index, nbytes, tuple(layout))
    made = _WORKSPACES.setdefault(key, [])
    words = -(-2 * nbytes // 4) if shared else -(-nbytes // 4)
    if made and made[-1].numel() >= words:
        return made[-1]
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"{op}: its {nbytes}-byte workspace on {device} would be made during CUDA graph capture; "
            "call the op once on this shape before capturing"
        )
    made.append(torch.zeros(words, dtype=torch.int32, device=device))
    return made[-1]


def _ptr(t: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


def _stream(device: torch.device) -> ctypes.c_void_p:
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _launch_split_k(lib, what: str, plan_of, run, args: tuple, m: int, n: int, k: int, device: torch.device, stream) -> int:
    # A kernel with K split over independent CTAs: its plan on the current device (sms = 0) says how many workspace
    # bytes it needs; it gets them after its other arguments, then the stream. Returns the launch's code.
    plan = (ctypes.c_longlong * 7)()
    _raise_on_failure(lib, plan_of(m, n, k, 0, plan), f"{what} plan")
    nbytes = plan[5]
    ws_ptr, ws_bytes = ctypes.c_void_p(None), 0
    if nbytes:
        layout = None if split_workspace_mode() == "shared" else (n, *plan)  # the row blocks follow from N and the plan
        ws = split_k_workspace(device, nbytes, op=what, layout=layout)
        ws_ptr, ws_bytes = _ptr(ws), ws.numel() * 4
    lib.specdec_set_programmatic_launch(gemm_launch_code())  # read by the tensor-map kernels only
    lib.specdec_set_row_stage_groups(row_stage_groups())
    return run(*args, ws_ptr, ws_bytes, stream)


@torch.library.custom_op("specdec::skinny_gemm_bf16", mutates_args=())
def skinny_gemm_bf16(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``y [M, N] = x [M, K] @ weight [N, K]^T``, bf16, ``1 <= M <= max_tokens("bf16", K)``, ``K % 8 == 0``; CPU: ``F.linear``.

    ``$SPECDEC_BF16_CUDA_VARIANT`` picks the kernel (:func:`bf16_variant`). Example: see the module docstring.
    """
    m, k = _check_x(x, None, None, _bf16_max_rows(x))
    variant = bf16_variant(k)
    n, kw = _check_bf16_weight(weight, x.device)
    if kw != k:
        raise ValueError(f"weight: expected K={k} columns (x's K), got shape {tuple(weight.shape)}")
    if x.device.type != "cuda" or n == 0:
        return F.linear(x, weight)
    _check_aligned(x=x, weight=weight)
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    lib = load_library()
    args = (_ptr(x), _ptr(weight), _ptr(out), m, n, k)
    with torch.cuda.device(x.device):
        if variant in _TENSOR_MAP_VARIANTS["bf16"]:
            plan_of, run = getattr(lib, f"specdec_bf16_{variant}_plan"), getattr(lib, f"specdec_skinny_gemm_bf16_{variant}")
            what = f"skinny_gemm_bf16 ({variant})"
            rc = _launch_split_k(lib, what, plan_of, run, args, m, n, k, x.device, _stream(x.device))
        else:
            rc = lib.specdec_skinny_gemm_bf16(*args, _stream(x.device))
    _raise_on_failure(lib, rc, f"skinny_gemm_bf16 ({variant})")
    return out


@skinny_gemm_bf16.register_fake
def _(x, weight):
    _check_x(x, None, None, _bf16_max_rows(x))
    n, _ = _check_bf16_weight(weight, x.device)
    return x.new_empty(x.shape[0], n)


_CPU_REFERENCES: dict[str, Callable[..., torch.Tensor]] = {}


def register_cpu_reference(op: str, fn: Callable[..., torch.Tensor]) -> None:
    """Set the pure-PyTorch function the ``"w12"`` or ``"q"`` op runs off CUDA.

    The decode lives a layer above the kernels, in :mod:`specdec.formats.w12`, which registers both when it
    is imported (``import specdec`` does).

    Example:
        >>> import specdec.formats  # registers the references
        >>> sorted(_CPU_REFERENCES)
        ['q', 'w12']
    """
    if op not in ("w12", "q"):
        raise ValueError(f"op: expected 'w12' or 'q', got {op!r}")
    if not callable(fn):
        raise TypeError(f"fn: expected a callable, got {type(fn).__name__}")
    _CPU_REFERENCES[op] = fn


def _cpu_reference(op: str) -> Callable[..., torch.Tensor]:
    if op not in _CPU_REFERENCES:
        raise RuntimeError(f"the {op} GEMM off CUDA runs the reference of specdec.formats: import specdec.formats first")
    return _CPU_REFERENCES[op]


def _w12_reference(x, ae, nib, base, esc_ptr, esc_pos, esc_bits):
    return _cpu_reference("w12")(x, ae, nib, base, esc_ptr, esc_pos, esc_bits)


def _q_reference(x, ae, base):
    return _cpu_reference("q")(x, ae, base)


@torch.library.custom_op("specdec::w12_gemm_small_m", mutates_args=())
def w12_gemm_small_m(
    x: torch.Tensor,
    ae: torch.Tensor,
    nib: torch.Tensor,
    base: torch.Tensor,
    esc_ptr: torch.Tensor,
    esc_pos: torch.Tensor,
    esc_bits: torch.Tensor,
) -> torch.Tensor:
    """Exact ``y [M, N] = x [M, K] @ W^T`` with W ``[N, K]`` as its W12 planes; ``1 <= M <= max_tokens("w12", K)``, ``K % 8 == 0``.

    The kernel decodes the weights bit-exactly in registers (escaped slots hold a signed zero; each escape is
    added as ``x[:, col] * value`` in fp32 by the CTA that owns its row). The output is not bit-equal to
    cuBLAS (another summation order). ``$SPECDEC_W12_CUDA_VARIANT`` picks the kernel (:func:`w12_variant`; the
    CPU reference is the same for all). CPU: :func:`specdec.formats.w12_linear_reference`.
    Example: see the module docstring.
    """
    k = _k_of_planes(ae)
    variant = w12_variant(k)
    m, _ = _check_x(x, k, ae.device, _max_rows("w12", variant, k))
    n, _ = _check_planes(ae, nib, base, k)
    _check_escapes(esc_ptr, esc_pos, esc_bits, n, k, ae.device)
    if x.device.type != "cuda" or n == 0:
        return _w12_reference(x, ae, nib, base, esc_ptr, esc_pos, esc_bits)
    _check_aligned(x=x, ae=ae, nib=nib)
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    lib = load_library()
    kernel = lib.specdec_w12_gemm_small_m_v3 if variant == "v3" else lib.specdec_w12_gemm_small_m
    args = (_ptr(x), _ptr(ae), _ptr(nib), _ptr(base), _ptr(esc_ptr), _ptr(esc_pos), _ptr(esc_bits), _ptr(out), m, n, k)
    with torch.cuda.device(x.device):
        if variant in W12_WORKSPACE_VARIANTS:
            plan_of = getattr(lib, f"specdec_w12_{variant}_plan")
            run = getattr(lib, f"specdec_w12_gemm_small_m_{variant}")
            rc = _launch_split_k(lib, f"w12_gemm_small_m ({variant})", plan_of, run, args, m, n, k, x.device, _stream(x.device))
        else:
            rc = kernel(*args, _stream(x.device))
    _raise_on_failure(lib, rc, f"w12_gemm_small_m ({variant})")
    return out


@w12_gemm_small_m.register_fake
def _(x, ae, nib, base, esc_ptr, esc_pos, esc_bits):
    k = _k_of_planes(ae)
    _check_x(x, k, ae.device, max_tokens("w12", k))
    return x.new_empty(x.shape[0], ae.shape[0])


@torch.library.custom_op("specdec::q_gemm_small_m", mutates_args=())
def q_gemm_small_m(x: torch.Tensor, ae: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """``y [M, N] = x [M, K] @ Q^T`` with Q the 8-bit view of the W12 planes (``ae`` and ``base`` only).

    ``1 <= M <= max_tokens("q", K)``, ``K % 8 == 0``; low mantissa nibble at the midpoint, escapes not patched (proposals only).
    ``$SPECDEC_Q_CUDA_VARIANT`` picks the kernel (:func:`q_variant`; the CPU reference is the same for both).
    CPU: :func:`specdec.formats.q_linear_reference`. Example: see the module docstring.
    """
    k = _k_of_planes(ae)
    variant = q_variant(k)
    m, _ = _check_x(x, k, ae.device, _max_rows("q", variant, k))
    n, _ = _check_planes(ae, NO_NIB, base, k)
    if x.device.type != "cuda" or n == 0:
        return _q_reference(x, ae, base)
    _check_aligned(x=x, ae=ae)
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    lib = load_library()
    args = (_ptr(x), _ptr(ae), _ptr(base), _ptr(out), m, n, k)
    with torch.cuda.device(x.device):
        if variant in _TENSOR_MAP_VARIANTS["q"]:
            plan_of, run = getattr(lib, f"specdec_q_{variant}_plan"), getattr(lib, f"specdec_q_gemm_small_m_{variant}")
            rc = _launch_split_k(lib, f"q_gemm_small_m ({variant})", plan_of, run, args, m, n, k, x.device, _stream(x.device))
        else:
            rc = lib.specdec_q_gemm_small_m(*args, _stream(x.device))
    _raise_on_failure(lib, rc, f"q_gemm_small_m ({variant})")
    return out


@q_gemm_small_m.register_fake
def _(x, ae, base):
    k = _k_of_planes(ae)
    _check_x(x, k, ae.device, max_tokens("q", k))
    return x.new_empty(x.shape[0], ae.shape[0])


def launch_plan(kind: str, m: int, n: int, k: int, sms: int, *, max_cluster: int = 16) -> dict[str, int]:
    """The kernel's launch plan for a shape (host code of the library; needs the built library, not a GPU).

    Returns ``row_tiles_per_cta`` (16-row tiles per CTA), ``k_splits`` (CTAs of a cluster splitting K),
    ``chunks`` (K chunks), ``ctas_x`` (row blocks) and ``shared_bytes`` (dynamic shared memory per CTA).

    Example (needs the built library, so not run as a doctest): ``launch_plan("w12", 8, 5120, 25600, 132)``
    gives ``row_tiles_per_cta == 8`` and ``k_splits == 8`` (128 rows share each staged ``x`` value; 40 row blocks
    times 8 K splits fill the 132 SMs). ``kind="w12_v3"`` gives the plan of the streaming W12 kernel
    (``row_tiles_per_cta`` is then its 4 tiles of 64-row CTAs, ``k_splits`` its cluster size, at most
    ``max_cluster``: 16 where the GPU allows non-portable clusters, else 8). ``kind="w12_v4"``: the same kernel
    shape with K split over independent CTAs (``k_splits`` of them per row block, no cluster), plus
    ``workspace_bytes`` (row-block counters and fp32 partials; 0 without K splits). ``kind="w12_v5"``: the
    bulk-copy kernel's plan, the keys of ``"w12_v4"`` plus ``bulk_copies`` (1, or 0 where ``k % 32 != 0`` and the
    ``"w12_v4"`` kernel and plan run instead); with ``bulk_copies == 1`` ``chunks`` counts K stages of 128
    weights, split evenly over ``k_splits`` CTAs per 64-row block. ``kind="w12_v6"``: the bulk-copy kernel with four
    producer warps, the keys and plan of ``"w12_v5"`` (``shared_bytes`` of its larger CTA). ``kind="w12_v7"``: the
    pipeline of ``"w12_v5"`` fed by 2-D TMA copies through tensor maps, the keys of ``"w12_v5"`` (``shared_bytes`` of
    its own stage ring). ``kind="q_v2"``: the Q view on that tensor-map pipeline, the keys of ``"w12_v5"``, with
    ``bulk_copies == 0`` where ``k % 32 != 0`` and the register Q kernel runs (then ``k_splits == 1`` and
    ``workspace_bytes == 0``). ``kind="bf16_v2"``: bf16 weights on that tensor-map pipeline, the keys of ``"q_v2"``
    (the register bf16 kernel's plan where ``k % 32 != 0``). ``kind="w12_v9"``, ``"q_v4"``, ``"bf16_v4"``: the row-tile
    kernels, the keys of ``"w12_v5"`` with ``row_tiles_per_cta == 1``, ``k_splits == 1``, ``chunks`` their stages of
    256 weights, ``ctas_x == ceil(n / 16)`` and ``workspace_bytes == 0`` (where ``k % 32 != 0`` the plan of the kernel
    they fall back to: W12 ``"v8"``'s, Q ``"q_v2"``'s, bf16 ``"bf16_v2"``'s).
    """
    kinds = (*KINDS, "w12_v3", *_SPLIT_K_PLANS)
    if kind not in kinds:
        raise ValueError(f"kind: expected one of {sorted(kinds)}, got {kind!r}")
    if max_cluster not in (8, 16):
        raise ValueError(f"max_cluster: expected 8 or 16 (CTAs per cluster), got {max_cluster}")
    if sms < 1:
        raise ValueError(f"sms: expected a positive multiprocessor count, got {sms}")
    lib = load_library()
    out = (ctypes.c_int * 5)()
    if kind in _SPLIT_K_PLANS:
        wide = (ctypes.c_longlong * 7)()
        rc = getattr(lib, _SPLIT_K_PLANS[kind])(m, n, k, sms, wide)
        if rc == 0:
            keys = ("row_tiles_per_cta", "k_splits", "chunks", "ctas_x", "shared_bytes", "workspace_bytes")
            if kind in _STAGED_KINDS:
                keys += ("bulk_copies",)
            return dict(zip(keys, list(wide)))
    elif kind == "w12_v3":
        rc = lib.specdec_w12_v3_plan(m, n, k, sms, max_cluster, out)
    else:
        rc = lib.specdec_skinny_plan(KINDS[kind], m, n, k, sms, out)
    if rc != 0:
        raise ValueError(
            f"launch_plan: expected 1 <= m <= 8 (16 for the tensor-map kinds, w12_v7, q_v2, bf16_v2 and later, where k % 32 == 0), n >= 1, "
            f"k a positive multiple of 8 and sms >= 1, got m={m} n={n} k={k} sms={sms}"
        )
    keys = ("row_tiles_per_cta", "k_splits", "chunks", "ctas_x", "shared_bytes")
    return dict(zip(keys, list(out)))


def rows_stage_groups(kind: str, m: int, n: int, k: int, sms: int, wanted: int) -> int:
    """Consumer stage groups a row-tile call (``kind`` ``"bf16"``, ``"w12"`` or ``"q"``; ``m <= 16``, ``k % 32 == 0``) runs
    on ``sms`` multiprocessors when up to ``wanted`` are asked for (:func:`row_stage_groups`): 2 for the Q view at up
    to 8 tokens where every CTA of the call is resident at once at the two-group kernel's three CTAs an SM, else 1
    (host code of the library; needs the built library, not a GPU).

    Example (needs the built library, so not run as a doctest): on 132 SMs the 8B qkv in the Q view at one token (384
    CTAs of 16 rows) gives ``rows_stage_groups("q", 1, 6144, 4096, 132, 2) == 2``; the 32B qkv (640 CTAs), W12, bf16
    and 9-16 tokens give 1.
    """
    if sms < 1 or wanted not in (1, 2):
        raise ValueError(f"sms, wanted: expected >= 1 and 1 or 2, got {sms} and {wanted}")
    return _row_tile_query("rows_stage_groups", kind, m, n, k, sms, wanted)


def _row_tile_query(name: str, kind: str, m: int, n: int, k: int, *args: int) -> int:
    """The library's ``specdec_<name>`` for a row-tile call, with ``kind`` and the sizes it refuses (-1) named."""
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {sorted(KINDS)}, got {kind!r}")
    value = getattr(load_library(), f"specdec_{name}")(KINDS[kind], m, n, k, *args)
    if value < 0:
        raise ValueError(
            f"{name}: expected 1 <= m <= {TENSOR_MAP_MAX_TOKENS}, n >= 1 and k a positive multiple of 32, got m={m} n={n} k={k}"
        )
    return value


def stream_k_segments(row_blocks: int, stages: int, ctas: int) -> list[tuple[int, int, int, int, int, int, int]]:
    """How the persistent kernels (W12 ``"v8"``, Q and bf16 ``"v3"``) cut a call's work (host code of the library).

    The work is ``row_blocks x stages`` units (a 64-row block's 128 columns), cut into ``ctas`` contiguous runs of
    equal length. Returns one tuple a segment (a run's units inside one row block), CTA by CTA in order:
    ``(cta, row_block, first_stage, end_stage, piece, pieces, slot)``; ``piece`` numbers the segments of a row block
    in k order, ``pieces`` counts them, ``slot`` is the workspace tile of the segment's partial (``-1`` where the
    block is one segment and stored at once). Raises ValueError unless ``1 <= ctas <= row_blocks x stages``.

    Example (needs the built library, so not run as a doctest): ``stream_k_segments(2, 4, 3)`` gives
    ``[(0, 0, 0, 2, 0, 2, 0), (1, 0, 2, 4, 1, 2, 2), (1, 1, 0, 1, 0, 2, 3), (2, 1, 1, 4, 1, 2, 4)]``.
    """
    for name, value in (("row_blocks", row_blocks), ("stages", stages), ("ctas", ctas)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    if ctas > row_blocks * stages:
        raise ValueError(f"ctas: expected at most row_blocks x stages = {row_blocks * stages} (one unit a CTA), got {ctas}")
    lib = load_library()
    cap = 2 * ctas + row_blocks  # a run meets at most its blocks' count + 1 blocks; runs together row_blocks + ctas
    out = (ctypes.c_longlong * (7 * cap))()
    count = lib.specdec_stream_k_segments(row_blocks, stages, ctas, out, cap)
    if not 0 <= count <= cap:
        raise RuntimeError(f"specdec_stream_k_segments returned {count} for a buffer of {cap} segments")
    return [tuple(out[7 * i : 7 * i + 7]) for i in range(count)]


WIDE_GEMM_VALUES = ("auto", "1", "exact", "0")
WIDE_Q_MIN_ROWS = 33  # the Q view's fewest rows for its wide op under "auto": two wgmma n-tiles


def wide_gemm_enabled(view: str, rows: int = WIDE_MAX_TOKENS) -> bool:
    """Whether :func:`specdec.formats.w12_linear` (``view="exact"``) or ``q_linear`` (``"q"``) sends ``rows`` (17 to
    ``WIDE_MAX_TOKENS``: more than one small-M call takes) to its wide op (:func:`w12_gemm_wide`,
    :func:`q_gemm_wide`), by ``$SPECDEC_WIDE_GEMM`` (read on every call): ``"auto"`` (the default) the exact view at
    17-128 rows and the Q view at ``WIDE_Q_MIN_ROWS`` (33) to 128, ``"1"`` both views at 17-128, ``"exact"`` the
    exact view only, ``"0"`` neither. Rows a view does not send go to W12's two 16-row calls up to 32 rows, then
    Triton, and to Triton for the Q view. The default is measured: the wide W12 kernel beats two 16-row calls and the
    Triton kernel on every shape where both ran (H200, ``benchmarks/NOTES.md``, "Wide calls: measured"); the wide Q
    kernel beats the Triton Q kernel on 61 of 70 Qwen3-8B / 32B linears at 17-128 rows in chains of one linear
    under programmatic launch (which overlaps each call with the one before: it flatters them), and
    inside the lean 8B target's Q-view pass at 64 and 128 rows, but that pass at 32 rows is 11 % slower with it
    (H100, "The Q view's wide calls: measured").

    Raises:
        ValueError: another ``$SPECDEC_WIDE_GEMM``, or a ``view`` other than ``"exact"`` / ``"q"``.

    Example::

        >>> import os
        >>> os.environ.pop(WIDE_GEMM_ENV, None) and None
        >>> wide_gemm_enabled("exact", 32), wide_gemm_enabled("q", 32), wide_gemm_enabled("q", 64)
        (True, False, True)
    """
    if view not in ("exact", "q"):
        raise ValueError(f"view: expected 'exact' or 'q', got {view!r}")
    value = _env_choice(WIDE_GEMM_ENV, "auto", WIDE_GEMM_VALUES, "which views' linears of 17-128 rows take the wide kernels")
    if value == "auto":
        return view == "exact" or rows >= WIDE_Q_MIN_ROWS
    return value == "1" or value == view


def wide_split_layout(kind: str, m: int, n: int, k: int, sms: int, workspace_bytes: int) -> dict[str, int]:
    """Where a wide call's split-K buffers lie in a workspace of ``workspace_bytes`` (the library's layout, host code:
    needs the built library, not a GPU; the plan of :func:`wide_plan`): ``partials_at`` (0) and ``partial_bytes``,
    ``counters_at`` (at the workspace's end) and ``counter_bytes``; all 0 without K splits. The shared workspace of
    :func:`split_k_workspace` holds every plan because each one's partials end below half of it and its counters begin
    above.

    Example (needs the built library, so not run as a doctest): for ``wide_plan("w12", 64, 4096, 4096, 132)`` (4.19 MB)
    in a workspace of 10 MB, ``partials_at == 0`` and ``counters_at == 10_000_000 - counter_bytes``.

    Raises:
        ValueError: a kind, size or ``sms`` the wide kernels do not take, or a workspace smaller than the plan needs.
    """
    if kind not in ("w12", "q"):
        raise ValueError(f"kind: expected 'w12' or 'q', got {kind!r}")
    out = (ctypes.c_longlong * 4)()
    lib = load_library()
    _set_wide_settings(lib)
    rc = lib.specdec_wide_split_layout(KINDS[kind], m, n, k, sms, workspace_bytes, out)
    if rc == 3:
        raise ValueError(
            f"wide_split_layout: expected 1 <= m <= {WIDE_MAX_TOKENS}, n >= 1, k a positive multiple of {WIDE_STAGE_K} "
            f"and sms >= 1, got m={m} n={n} k={k} sms={sms}"
        )
    if rc:
        raise ValueError(f"workspace_bytes: {lib.specdec_cuda_last_error().decode()}")
    return dict(zip(("partials_at", "partial_bytes", "counters_at", "counter_bytes"), list(out)))


def _set_wide_settings(lib) -> None:
    """Hand the wide kernels' settings read from the environment to the library (read by its next wide plan or launch
    on this thread)."""
    lib.specdec_set_wide_pipeline(int(wide_pipeline()))
    lib.specdec_set_wide_ctas_per_sm(wide_ctas_per_sm())
    lib.specdec_set_wide_stage_groups(wide_stage_groups())
    lib.specdec_set_wide_unroll(_WIDE_UNROLL_CODES[wide_unroll()])
    lib.specdec_set_wide_stream_k(_WIDE_STREAM_K_CODES[wide_stream_k()])


def _check_wide_k(k: int) -> None:
    if k % WIDE_STAGE_K:
        raise ValueError(f"ae: expected K (its width) a multiple of {WIDE_STAGE_K} for the wide kernels, got {k}")


def _launch_wide(lib, what: str, run, kind: int, args: tuple, m: int, n: int, k: int, device: torch.device) -> int:
    def plan_of(m_, n_, k_, sms, out):
        return lib.specdec_wide_plan(kind, m_, n_, k_, sms, out)

    _set_wide_settings(lib)
    return _launch_split_k(lib, what, plan_of, run, args, m, n, k, device, _stream(device))


@torch.library.custom_op("specdec::w12_gemm_wide", mutates_args=())
def w12_gemm_wide(
    x: torch.Tensor,
    ae: torch.Tensor,
    nib: torch.Tensor,
    base: torch.Tensor,
    esc_ptr: torch.Tensor,
    esc_pos: torch.Tensor,
    esc_bits: torch.Tensor,
) -> torch.Tensor:
    """Exact ``y [M, N] = x [M, K] @ W^T`` for ``1 <= M <= WIDE_MAX_TOKENS`` with W ``[N, K]`` as its W12 planes, ``K % 64 == 0``.

    The verifiers' wide passes (a tree's nodes, a two-level block): 128-row CTAs whose two consumer warpgroups decode
    the weights bit-exactly into registers and multiply them with ``wgmma`` (x read by the tensor cores from shared
    memory, through the L2 once for 128 rows), K split over CTAs where the row blocks alone leave SMs idle, the partials
    summed in split order (deterministic); escapes added by an escape warp (``specdec/kernels/cuda/README.md``, "Wide
    calls"). Not bit-equal to cuBLAS or to :func:`w12_gemm_small_m` (other summation orders). CPU:
    :func:`specdec.formats.w12_linear_reference`.

    Example (CPU: the reference path)::

        >>> from specdec.formats import W12Tensor
        >>> w = W12Tensor.from_bf16(torch.ones(2, 64, dtype=torch.bfloat16))
        >>> w12_gemm_wide(torch.ones(20, 64, dtype=torch.bfloat16), w.ae, w.nib, w.base, w.esc_ptr, w.esc_pos, w.esc_bits).shape
        torch.Size([20, 2])
    """
    k = _k_of_planes(ae)
    _check_wide_k(k)
    m, _ = _check_x(x, k, ae.device, WIDE_MAX_TOKENS)
    n, _ = _check_planes(ae, nib, base, k)
    _check_escapes(esc_ptr, esc_pos, esc_bits, n, k, ae.device)
    if x.device.type != "cuda" or n == 0:
        return _w12_reference(x, ae, nib, base, esc_ptr, esc_pos, esc_bits)
    _check_aligned(x=x, ae=ae, nib=nib)
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    lib = load_library()
    args = (_ptr(x), _ptr(ae), _ptr(nib), _ptr(base), _ptr(esc_ptr), _ptr(esc_pos), _ptr(esc_bits), _ptr(out), m, n, k)
    with torch.cuda.device(x.device):
        rc = _launch_wide(lib, "w12_gemm_wide", lib.specdec_w12_gemm_wide, KINDS["w12"], args, m, n, k, x.device)
    _raise_on_failure(lib, rc, "w12_gemm_wide")
    return out


@w12_gemm_wide.register_fake
def _(x, ae, nib, base, esc_ptr, esc_pos, esc_bits):
    k = _k_of_planes(ae)
    _check_wide_k(k)
    _check_x(x, k, ae.device, WIDE_MAX_TOKENS)
    return x.new_empty(x.shape[0], ae.shape[0])


@torch.library.custom_op("specdec::q_gemm_wide", mutates_args=())
def q_gemm_wide(x: torch.Tensor, ae: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """``y [M, N] = x [M, K] @ Q^T`` (the 8-bit view of the W12 planes) for ``1 <= M <= WIDE_MAX_TOKENS``, ``K % 64 == 0``.

    The kernel of :func:`w12_gemm_wide` on the ``ae`` plane alone, the low mantissa nibble at the midpoint, escapes not
    patched (proposals only). CPU: :func:`specdec.formats.q_linear_reference`.

    Example (CPU: the reference path)::

        >>> from specdec.formats import W12Tensor
        >>> w = W12Tensor.from_bf16(torch.ones(2, 64, dtype=torch.bfloat16))
        >>> q_gemm_wide(torch.ones(20, 64, dtype=torch.bfloat16), w.ae, w.base)[0]
        tensor([68., 68.], dtype=torch.bfloat16)
    """
    k = _k_of_planes(ae)
    _check_wide_k(k)
    m, _ = _check_x(x, k, ae.device, WIDE_MAX_TOKENS)
    n, _ = _check_planes(ae, NO_NIB, base, k)
    if x.device.type != "cuda" or n == 0:
        return _q_reference(x, ae, base)
    _check_aligned(x=x, ae=ae)
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    lib = load_library()
    args = (_ptr(x), _ptr(ae), _ptr(base), _ptr(out), m, n, k)
    with torch.cuda.device(x.device):
        rc = _launch_wide(lib, "q_gemm_wide", lib.specdec_q_gemm_wide, KINDS["q"], args, m, n, k, x.device)
    _raise_on_failure(lib, rc, "q_gemm_wide")
    return out


@q_gemm_wide.register_fake
def _(x, ae, base):
    k = _k_of_planes(ae)
    _check_wide_k(k)
    _check_x(x, k, ae.device, WIDE_MAX_TOKENS)
    return x.new_empty(x.shape[0], ae.shape[0])


def wide_plan(kind: str, m: int, n: int, k: int, sms: int) -> dict[str, int]:
    """The launch plan of :func:`w12_gemm_wide` (``kind="w12"``) or :func:`q_gemm_wide` (``"q"``) for a shape on ``sms``
    multiprocessors (host code of the library; needs the built library, not a GPU), for the consumer loop, CTAs an SM
    and persistent mode the ops launch now (:func:`wide_pipeline`, :func:`wide_ctas_per_sm`, :func:`wide_stream_k`).

    Returns the keys of :func:`launch_plan`'s split-K kinds: ``row_tiles_per_cta`` (8: 128 rows), ``k_splits`` (CTAs a
    row block splitting K), ``chunks`` (K stages of 64 weights), ``ctas_x`` (row blocks of 128), ``shared_bytes``
    (dynamic shared memory a CTA), ``workspace_bytes`` (fp32 partial tiles of [32 NB tokens][128 rows], NB = ceil(m /
    32), and row-block counters; 0 without K splits) and ``bulk_copies`` (1). For a call the persistent kernel takes
    (:func:`wide_stream_k_takes`), ``ctas_x`` is its CTAs (one a run), ``k_splits`` the most runs a row block is cut
    into, and the workspace two tiles a CTA and a counter a row block.

    Example (needs the built library, so not run as a doctest): ``wide_plan("w12", 64, 4096, 4096, 132)`` gives 32
    row blocks with ``k_splits == 4`` (128 CTAs: one wave on 132 SMs; with ``$SPECDEC_WIDE_CTAS=2``, 8 and 256: two
    an SM).
    """
    if kind not in ("w12", "q"):
        raise ValueError(f"kind: expected 'w12' or 'q', got {kind!r}")
    if sms < 1:
        raise ValueError(f"sms: expected a positive multiprocessor count, got {sms}")
    out = (ctypes.c_longlong * 7)()
    lib = load_library()
    _set_wide_settings(lib)
    if lib.specdec_wide_plan(KINDS[kind], m, n, k, sms, out) != 0:
        raise ValueError(
            f"wide_plan: expected 1 <= m <= {WIDE_MAX_TOKENS}, n >= 1 and k a positive multiple of {WIDE_STAGE_K}, "
            f"got m={m} n={n} k={k}"
        )
    keys = ("row_tiles_per_cta", "k_splits", "chunks", "ctas_x", "shared_bytes", "workspace_bytes", "bulk_copies")
    return dict(zip(keys, list(out)))
