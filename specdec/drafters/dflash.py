"""Parallel block drafters that read the target's hidden states: DFlash and DFlash2.

One draft forward predicts a whole block. The block is ``[anchor, MASK, ..., MASK]`` (the anchor is
the newest context token), embedded with the *target's* embedding; every draft layer attends, without
a causal mask inside the block, to the block itself and to the *context*: the target's hidden states
at ``target_layer_ids`` of the committed tokens, concatenated, projected by ``fc`` and normalised by
``hidden_norm``, then turned into keys and values by each layer's own ``k_proj`` / ``v_proj``
("KV injection"). Those context K/V live in the drafter's own cache; the block's K/V are never
stored. The draft hidden states go through the *target's* ``lm_head``.

* :class:`DFlashDrafter` -- z-lab ``DFlashDraftModel`` checkpoints and the transformers assistant
  ``muse_glimmer_assistant`` (same model, other tensor names). Row ``i`` of the block predicts the
  token ``i`` places after the anchor; the drafts are independent per position (marginals), which is
  what a best-first tree is built from.
* :class:`DFlash2Drafter` -- ``DFlash2DraftModel``: a grouped dynamic causal convolution wraps every
  attention and MLP sublayer, and a candidate selector walks the block left to right over the top-K
  tokens of each row, scoring ``unary + <A[previous] * P h, B[candidate]>``; its child log-probs depend
  on the path, so trees come from :func:`specdec.verify.best_first_tree` with a callable.

Embedding and ``lm_head`` are shared with the target passed at construction (they are never copied):
a drafter belongs to one target. The checkpoint is checked against that target when it is loaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from specdec.drafters.base import DraftProposal
from specdec.models.dense import RMSNorm
from specdec.models.loading import read_safetensors
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample

__all__ = [
    "BlockDraftModel",
    "BlockDrafterConfig",
    "DFlash2Drafter",
    "DFlashDrafter",
    "DraftKVCache",
    "StaticDraftKVCache",
    "grouped_dynamic_conv",
    "layer_visibility",
    "load_drafter",
    "read_drafter_config",
]

DFLASH = "DFlashDraftModel"
DFLASH2 = "DFlash2DraftModel"
MUSE_ASSISTANT = "muse_glimmer_assistant"
DSPARK = "Qwen3DSparkModel"
ARCHITECTURES = (DFLASH, DFLASH2, MUSE_ASSISTANT, DSPARK)


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockDrafterConfig:
    """Shape and behaviour of a block drafter, read from its published ``config.json``.

    Attributes:
        architecture: one of ``DFlashDraftModel``, ``DFlash2DraftModel``, ``muse_glimmer_assistant``,
            ``Qwen3DSparkModel``.
        target_layer_ids: layer ids as the checkpoint spells them; the target hidden state used for id
            ``i`` is HF ``hidden_states[i + 1]`` (DSpark's ``-1`` is the embedding output).
        block_size: rows of one draft forward (anchor included).
        mask_token_id: the id embedded at the masked rows.
        layer_causal: per draft layer, causal inside the block (z-lab rule: an explicit ``is_causal``
            wins; otherwise sliding layers are causal and full layers are not; the transformers
            assistant and DSpark are never causal).
        sliding_window: per draft layer, the window (``None`` = full attention).
        output_multiplier, final_logit_softcapping, input_embedding_scale: logit / embedding scaling.
        conv_kernel_size, conv_group_size: DFlash2 convolution (0 = none).
        selector_rank, selector_top_k: DFlash2 candidate selector (0 = none).
        markov_rank, markov_head_type: DSpark sequential head (0 = none).
        confidence_head, confidence_head_with_markov: DSpark confidence head.

    Example:
        >>> cfg = BlockDrafterConfig(architecture="DFlashDraftModel", hidden_size=32, intermediate_size=64,
        ...     num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8, target_layer_ids=(0,), block_size=4,
        ...     mask_token_id=3, layer_causal=(False,), sliding_window=(None,))
        >>> cfg.hf_layer_ids
        (1,)
    """

    architecture: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    target_layer_ids: tuple[int, ...]
    block_size: int
    mask_token_id: int
    layer_causal: tuple[bool, ...]
    sliding_window: tuple[int | None, ...]
    vocab_size: int | None = None
    num_target_layers: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention_bias: bool = False
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None
    input_embedding_scale: float = 1.0
    conv_kernel_size: int = 0
    conv_group_size: int = 0
    selector_rank: int = 0
    selector_top_k: int = 0
    markov_rank: int = 0
    markov_head_type: str | None = None
    confidence_head: bool = False
    confidence_head_with_markov: bool = False
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def hf_layer_ids(self) -> tuple[int, ...]:
        """Indices into HF ``hidden_states`` (0 = embeddings): ``id + 1``."""
        return tuple(i + 1 for i in self.target_layer_ids)


def _need(raw: Mapping[str, Any], name: str, where: str = "config.json") -> Any:
    if name not in raw or raw[name] is None:
        raise ValueError(f"{name}: missing from {where} (expected a value, found none)")
    return raw[name]


def _rope_theta(raw: Mapping[str, Any], default: float) -> float:
    params = raw.get("rope_parameters") or {}
    if "rope_theta" in params:
        return float(params["rope_theta"])
    return float(raw.get("rope_theta", default))


def _architecture(raw: Mapping[str, Any]) -> str:
    if raw.get("model_type") == MUSE_ASSISTANT:
        return MUSE_ASSISTANT
    archs = raw.get("architectures") or []
    for arch in archs:
        if arch in ARCHITECTURES:
            return arch
    raise ValueError(
        f"architectures: expected one of {list(ARCHITECTURES[:2]) + [DSPARK]} (or model_type {MUSE_ASSISTANT!r}), "
        f"got architectures={list(archs)!r}, model_type={raw.get('model_type')!r}"
    )


def read_drafter_config(raw: Mapping[str, Any]) -> BlockDrafterConfig:
    """Parse a published drafter ``config.json`` (already loaded as a dict).

    DFlash / DFlash2 keep their drafting fields in ``dflash_config`` (top-level values are the
    fallback, as in the z-lab reference); the transformers assistant and DSpark keep them at the top
    level.

    Raises:
        ValueError: unknown architecture, or a missing field (the message names it).

    Example:
        >>> read_drafter_config({"architectures": ["Nope"]})
        Traceback (most recent call last):
        ...
        ValueError: architectures: expected one of ['DFlashDraftModel', 'DFlash2DraftModel', 'Qwen3DSparkModel'] (or model_type 'muse_glimmer_assistant'), got architectures=['Nope'], model_type=None
    """
    arch = _architecture(raw)
    nested = dict(raw.get("dflash_config") or {}) if arch in (DFLASH, DFLASH2) else {}

    def draft(name: str, default: Any = None) -> Any:
        return nested.get(name, raw.get(name, default))

    def draft_need(name: str) -> Any:
        value = draft(name)
        if value is None:
            where = "config.json (dflash_config or top level)" if arch in (DFLASH, DFLASH2) else "config.json"
            raise ValueError(f"{name}: missing from {where} (expected a value, found none)")
        return value

    hidden = int(_need(raw, "hidden_size"))
    heads = int(_need(raw, "num_attention_heads"))
    num_layers = int(_need(raw, "num_hidden_layers"))
    layer_types = list(raw.get("layer_types") or ["full_attention"] * num_layers)
    if len(layer_types) != num_layers:
        raise ValueError(f"layer_types: expected {num_layers} entries (num_hidden_layers), got {len(layer_types)}")
    window = raw.get("sliding_window")
    windows = tuple(int(window) if (t == "sliding_attention" and window is not None) else None for t in layer_types)
    if arch in (DFLASH, DFLASH2):
        is_causal = raw.get("is_causal", None)
        causal = tuple((t == "sliding_attention") if is_causal is None else bool(is_causal) for t in layer_types)
    else:
        causal = (False,) * num_layers
    ids = draft_need("target_layer_ids")
    mask = draft("mask_token_id")
    if mask is None:
        raise ValueError("mask_token_id: missing from config.json; a block drafter needs the id it embeds at masked rows")
    softcap = draft("final_logit_softcapping")
    cfg = BlockDrafterConfig(
        architecture=arch,
        hidden_size=hidden,
        intermediate_size=int(_need(raw, "intermediate_size")),
        num_layers=num_layers,
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads", heads)),
        head_dim=int(raw.get("head_dim") or hidden // heads),
        target_layer_ids=tuple(int(i) for i in ids),
        block_size=int(draft_need("block_size")) if arch != MUSE_ASSISTANT else int(raw.get("block_size", 16)),
        mask_token_id=int(mask),
        layer_causal=causal,
        sliding_window=windows,
        vocab_size=None if raw.get("vocab_size") is None else int(raw["vocab_size"]),
        num_target_layers=None if raw.get("num_target_layers") is None else int(raw["num_target_layers"]),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=_rope_theta(raw, 500000.0 if arch == MUSE_ASSISTANT else 10000.0),
        attention_bias=bool(raw.get("attention_bias", False)),
        output_multiplier=float(draft("output_multiplier", 1.0)),
        final_logit_softcapping=None if softcap is None or float(softcap) <= 0 else float(softcap),
        input_embedding_scale=float(draft("input_embedding_scale", 1.0)),
        raw=dict(raw),
    )
    if arch == DFLASH2:
        cfg = replace(
            cfg,
            conv_kernel_size=int(draft_need("conv_kernel_size")),
            conv_group_size=int(draft_need("conv_group_size")),
            selector_rank=int(draft_need("selector_rank")),
            selector_top_k=int(draft_need("selector_top_k")),
        )
        if hidden % cfg.conv_group_size:
            raise ValueError(f"conv_group_size: expected a divisor of hidden_size {hidden}, got {cfg.conv_group_size}")
    if arch == DSPARK:
        rank = int(_need(raw, "markov_rank"))
        head_type = raw.get("markov_head_type") if rank > 0 else None
        # DeepSpec reads the head type case-insensitively; the gated / RNN variants live in dspark.py
        if isinstance(head_type, str):
            head_type = head_type.lower()
        if rank > 0 and head_type not in ("vanilla", "gated", "rnn"):
            raise ValueError(f"markov_head_type: expected one of ['vanilla', 'gated', 'rnn'], got {raw.get('markov_head_type')!r}")
        conf = bool(_need(raw, "enable_confidence_head"))
        cfg = replace(
            cfg,
            markov_rank=rank,
            markov_head_type=head_type,
            confidence_head=conf,
            confidence_head_with_markov=bool(_need(raw, "confidence_head_with_markov")) if conf else False,
        )
    return cfg


def check_fits_target(cfg: BlockDrafterConfig, target) -> None:
    """Raise ``ValueError`` naming the config field when a checkpoint does not fit ``target``."""
    tcfg = target.config
    if cfg.hidden_size != tcfg.hidden_size:
        raise ValueError(
            f"hidden_size: the drafter's fc reads len(target_layer_ids) x hidden_size = "
            f"{len(cfg.target_layer_ids)} x {cfg.hidden_size} features, but the target's hidden size is {tcfg.hidden_size}"
        )
    if cfg.vocab_size is not None and cfg.vocab_size != tcfg.vocab_size:
        raise ValueError(f"vocab_size: checkpoint has {cfg.vocab_size}, the target has {tcfg.vocab_size}")
    if not cfg.target_layer_ids:
        raise ValueError("target_layer_ids: expected at least one layer id, got []")
    for i in cfg.target_layer_ids:
        if not -1 <= i < tcfg.num_layers:
            raise ValueError(
                f"target_layer_ids: id {i} does not exist in a target of {tcfg.num_layers} layers "
                f"(expected ids in [-1, {tcfg.num_layers - 1}], got {list(cfg.target_layer_ids)})"
            )
    if cfg.num_target_layers is not None and cfg.num_target_layers != tcfg.num_layers:
        raise ValueError(f"num_target_layers: checkpoint was trained on a {cfg.num_target_layers}-layer target, this one has {tcfg.num_layers}")
    if not 0 <= cfg.mask_token_id < tcfg.vocab_size:
        raise ValueError(f"mask_token_id: expected an id in [0, {tcfg.vocab_size}) (the target's vocabulary), got {cfg.mask_token_id}")
    if cfg.block_size < 2:
        raise ValueError(f"block_size: expected >= 2, got {cfg.block_size}")
    if cfg.selector_top_k > tcfg.vocab_size:
        raise ValueError(f"selector_top_k: expected <= vocab size {tcfg.vocab_size}, got {cfg.selector_top_k}")


# --------------------------------------------------------------------------------------------------
# Modules (parameter names are the published tensor names)
# --------------------------------------------------------------------------------------------------
def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def grouped_dynamic_conv(x: torch.Tensor, dynamic: torch.Tensor, base: torch.Tensor, group_size: int) -> torch.Tensor:
    """Block-local causal convolution with per-row, per-group dynamic taps (DFlash2).

    ``out[i, c] = sum_t (base[t, c] + dynamic[i, t, c // group_size]) * x[i - t, c]``, with
    ``x[i - t] = 0`` before the block start.

    Args:
        x: ``[T, H]``.
        dynamic: ``[T, k, G]`` with ``G = H / group_size``.
        base: ``[k, H]``.

    Example:
        >>> x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> grouped_dynamic_conv(x, torch.zeros(2, 2, 1), torch.tensor([[1.0, 1.0], [1.0, 0.0]]), 2)
        tensor([[1., 2.],
                [4., 4.]])
    """
    rows = x.shape[0]
    out = torch.zeros_like(x)
    for t in range(base.shape[0]):
        shifted = x if t == 0 else F.pad(x[: rows - t], (0, 0, t, 0))  # [T, H]
        # each group's tap spread over its channels; a view + copy (repeat_interleave may read its size back from the device)
        spread = dynamic[:, t, :, None].expand(rows, dynamic.shape[-1], group_size).reshape(rows, -1)  # [T, H]
        taps = base[t].to(x.dtype) + spread
        out = out + taps * shifted
    return out


def layer_visibility(q_pos: torch.Tensor, k_pos: torch.Tensor, *, causal: bool, window: int | None) -> torch.Tensor:
    """Which keys a draft layer's queries see: ``q_pos [..., Q, 1]``, ``k_pos [..., 1, K]`` -> bool ``[..., Q, K]``.

    The windows are transformers' (``masking_utils``): a causal layer sees the last ``window`` positions,
    itself included (``0 <= q - k < window``, ``sliding_window_causal_mask_function``); a bidirectional
    layer sees every position within distance ``window`` (``|q - k| <= window``,
    ``sliding_window_bidirectional_mask_function``). ``window=None`` is full attention.

    Example:
        >>> q, k = torch.tensor([[3]]), torch.arange(6)[None]
        >>> layer_visibility(q, k, causal=False, window=2).int().tolist()
        [[0, 1, 1, 1, 1, 1]]
        >>> layer_visibility(q, k, causal=True, window=2).int().tolist()
        [[0, 0, 1, 1, 0, 0]]
    """
    distance = q_pos - k_pos
    visible = torch.ones_like(distance, dtype=torch.bool)
    if causal:
        visible = distance >= 0
        if window is not None:
            visible = visible & (distance < window)
    elif window is not None:
        visible = distance.abs() <= window
    return visible


class GroupedDynamicCausalConv(nn.Module):
    def __init__(self, hidden: int, kernel: int, group: int):
        super().__init__()
        self.kernel, self.group = kernel, group
        self.base_kernel = nn.Parameter(torch.zeros(2, kernel, hidden))
        self.kernel_projection = nn.Linear(hidden, 2 * kernel * (hidden // group), bias=False)

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # one projection of the sublayer input gives both halves: [T, 2, k, G]
        dyn = self.kernel_projection(x).view(x.shape[0], 2, self.kernel, -1)
        return grouped_dynamic_conv(x, dyn[:, 0], self.base_kernel[0], self.group), dyn[:, 1]

    def finish(self, x: torch.Tensor, dyn: torch.Tensor) -> torch.Tensor:
        return grouped_dynamic_conv(x, dyn, self.base_kernel[1], self.group)


class _Attention(nn.Module):
    def __init__(self, cfg: BlockDrafterConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)


class _MLP(nn.Module):
    def __init__(self, cfg: BlockDrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Layer(nn.Module):
    def __init__(self, cfg: BlockDrafterConfig):
        super().__init__()
        self.self_attn = _Attention(cfg)
        self.mlp = _MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.conv_kernel_size:
            self.attention_conv = GroupedDynamicCausalConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
            self.mlp_conv = GroupedDynamicCausalConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
        else:
            self.attention_conv = self.mlp_conv = None


class _Selector(nn.Module):
    def __init__(self, cfg: BlockDrafterConfig, vocab: int):
        super().__init__()
        self.hidden_projection = nn.Linear(cfg.hidden_size, cfg.selector_rank, bias=False)
        self.predecessor_codebook = nn.Parameter(torch.zeros(vocab, cfg.selector_rank))
        self.successor_codebook = nn.Parameter(torch.zeros(vocab, cfg.selector_rank))


class _Markov(nn.Module):
    def __init__(self, cfg: BlockDrafterConfig, vocab: int):
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, cfg.markov_rank)
        self.markov_w2 = nn.Linear(cfg.markov_rank, vocab, bias=False)


class _Confidence(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.proj = nn.Linear(features, 1)


class DraftKVCache:
    """The drafter's K/V of committed context rows, per layer ``[Hkv, S, D]``, with crop.

    Storage doubles when full, so appends are amortised O(rows). Block rows are never stored.

    Example:
        >>> cache = DraftKVCache(num_layers=1)
        >>> cache.append(0, torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)); cache.length
        3
        >>> cache.crop(1); cache.keys(0).shape
        torch.Size([2, 1, 4])
    """

    def __init__(self, num_layers: int):
        self._k: list[torch.Tensor | None] = [None] * num_layers
        self._v: list[torch.Tensor | None] = [None] * num_layers
        self._len = [0] * num_layers

    @property
    def length(self) -> int:
        return self._len[-1] if self._len else 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        n, add = self._len[layer], k.shape[1]
        buf = self._k[layer]
        if buf is None or n + add > buf.shape[1]:
            cap = max(64, 2 * (n + add))
            new_k = k.new_zeros(k.shape[0], cap, k.shape[2])
            new_v = v.new_zeros(v.shape[0], cap, v.shape[2])
            if buf is not None:
                new_k[:, :n] = buf[:, :n]
                new_v[:, :n] = self._v[layer][:, :n]
            self._k[layer], self._v[layer] = new_k, new_v
        self._k[layer][:, n : n + add] = k
        self._v[layer][:, n : n + add] = v
        self._len[layer] = n + add

    def keys(self, layer: int) -> torch.Tensor:
        buf = self._k[layer]
        return buf[:, : self._len[layer]] if buf is not None else None

    def values(self, layer: int) -> torch.Tensor:
        buf = self._v[layer]
        return buf[:, : self._len[layer]] if buf is not None else None

    def crop(self, length: int) -> None:
        """Keep the first ``length`` context rows."""
        if not 0 <= length <= self.length:
            raise ValueError(f"length: expected 0 <= length <= {self.length}, got {length}")
        self._len = [length] * len(self._len)


class StaticDraftKVCache:
    """A preallocated draft cache for fixed-shape (CUDA-graph) draft steps, per layer ``[Hkv, slots, D]``.

    Slot ``j`` holds the K/V of context row ``j`` (its RoPE position is ``j``), so a step needs only
    the device-side row count to build its masks. ``slots = max_context + block_size`` rounded up to a
    multiple of 16: the block's own K/V are written after the context rows (scratch, overwritten by
    the next step) and attention always spans every slot under a mask. ``length`` is host
    bookkeeping only (it follows from the context length the caller passes), so no step reads it
    back from the device.

    Args:
        num_layers, num_kv_heads, head_dim: the drafter's attention shape.
        max_context: the most committed context rows it can hold.
        block_size: rows of one draft block.

    Example:
        >>> cache = StaticDraftKVCache(1, 2, 4, max_context=10, block_size=4, dtype=torch.float32, device="cpu")
        >>> cache.k[0].shape, cache.length
        (torch.Size([2, 16, 4]), 0)
        >>> cache.reserve(11)
        Traceback (most recent call last):
        ...
        ValueError: max_context: the draft cache holds at most 10 context rows (set by enable_static_cache / enable_cuda_graphs), got 11
    """

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, *, max_context: int, block_size: int, dtype, device):
        if isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1:
            raise ValueError(f"max_context: expected an int >= 1, got {max_context!r}")
        self.max_context = max_context
        slots = -(-(max_context + block_size) // 16) * 16
        # zeros, not empty: masked slots still enter the softmax-weighted sum as 0 * value, so they must be finite
        self.k = [torch.zeros(num_kv_heads, slots, head_dim, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(num_kv_heads, slots, head_dim, dtype=dtype, device=device) for _ in range(num_layers)]
        self.length = 0

    @property
    def slots(self) -> int:
        return self.k[0].shape[1] if self.k else 0

    def reserve(self, length: int) -> None:
        """Raise ``ValueError`` unless ``length`` context rows fit."""
        if length > self.max_context:
            raise ValueError(
                f"max_context: the draft cache holds at most {self.max_context} context rows "
                f"(set by enable_static_cache / enable_cuda_graphs), got {length}"
            )

    def crop(self, length: int) -> None:
        """Keep the first ``length`` context rows (the rest become scratch)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"length: expected 0 <= length <= {self.length}, got {length}")
        self.length = length


class BlockDraftModel(nn.Module):
    """The backbone shared by DFlash, DFlash2 and DSpark, with the published parameter names.

    Args:
        cfg: the drafter config.
        vocab_size: rows of the vocabulary-sized tensors (codebooks, Markov head).

    Example:
        >>> from specdec.drafters.checkpoints import fixture_config
        >>> from specdec.testing import tiny_target
        >>> cfg = read_drafter_config(fixture_config("DFlashDraftModel", tiny_target(seed=0)))
        >>> sorted(BlockDraftModel(cfg, 97).state_dict())[:2]
        ['fc.weight', 'hidden_norm.weight']
    """

    def __init__(self, cfg: BlockDrafterConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(len(cfg.target_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.selector_rank:
            self.candidate_selector = _Selector(cfg, vocab_size)
        if cfg.markov_rank:
            self.markov_head = _Markov(cfg, vocab_size)
        if cfg.confidence_head:
            self.confidence_head = _Confidence(cfg.hidden_size + (cfg.markov_rank if cfg.confidence_head_with_markov else 0))
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self) -> torch.Tensor:
        d = self.cfg.head_dim
        return (1.0 / (self.cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))).float()

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        # RoPE frequencies stay float32 when the weights go to bf16 (a bf16 inv_freq is off by up to
        # 0.4%, radians of phase at positions in the hundreds); recomputed, since the cast lost bits
        if self.inv_freq.dtype != torch.float32:
            self.inv_freq = self._inv_freq().to(self.inv_freq.device)
        return self

    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq.to(positions.device)[None]  # [T, D/2]
        emb = torch.cat([freqs, freqs], dim=-1)  # [T, D]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def project_context(self, features: torch.Tensor) -> torch.Tensor:
        """``[r, taps * H]`` target features -> ``[r, H]`` draft context."""
        return self.hidden_norm(self.fc(features))

    def _kv(self, attn: _Attention, x: torch.Tensor, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        k = attn.k_norm(attn.k_proj(x).view(x.shape[0], cfg.num_kv_heads, cfg.head_dim)).transpose(0, 1)  # [Hkv, T, D]
        v = attn.v_proj(x).view(x.shape[0], cfg.num_kv_heads, cfg.head_dim).transpose(0, 1)
        return k * cos + _rotate_half(k) * sin, v

    def append_context(self, cache: DraftKVCache, context: torch.Tensor, positions: torch.Tensor) -> None:
        """Project ``context [r, H]`` (output of :meth:`project_context`) into every layer's cache."""
        cos, sin = self.rope(positions, context.dtype)
        for i, layer in enumerate(self.layers):
            k, v = self._kv(layer.self_attn, context, cos, sin)
            cache.append(i, k, v)

    def append_context_static(self, cache: "StaticDraftKVCache", context: torch.Tensor, start: torch.Tensor) -> None:
        """:meth:`append_context` into a :class:`StaticDraftKVCache` at slots ``start + [0, r)``.

        ``start`` is a 0-d int64 device tensor (the rows already cached), so a CUDA graph can capture
        this once per row count ``r``.
        """
        positions = start + torch.arange(context.shape[0], device=context.device)  # [r] slot = position
        cos, sin = self.rope(positions, context.dtype)
        for i, layer in enumerate(self.layers):
            k, v = self._kv(layer.self_attn, context, cos, sin)  # [Hkv, r, D]
            cache.k[i].index_copy_(1, positions, k)
            cache.v[i].index_copy_(1, positions, v)

    def _masks(self, q_pos: torch.Tensor, k_pos: torch.Tensor, base: torch.Tensor | None) -> list[torch.Tensor]:
        """Per layer ``[B, K]`` bool visibility; layers with the same (causal, window) share one mask."""
        cfg = self.cfg
        built: dict[tuple[bool, int | None], torch.Tensor] = {}
        out = []
        for i in range(cfg.num_layers):
            key = (cfg.layer_causal[i], cfg.sliding_window[i])
            if key not in built:
                visible = layer_visibility(q_pos, k_pos, causal=cfg.layer_causal[i], window=cfg.sliding_window[i])
                visible = visible.expand(q_pos.shape[0], k_pos.shape[-1])
                built[key] = visible if base is None else visible & base
            out.append(built[key])
        return out

    def _layers(self, x: torch.Tensor, cos, sin, keys_values, masks: list[torch.Tensor]) -> torch.Tensor:
        """The layer stack over the block rows ``x [B, H]``; ``keys_values(i, k_blk, v_blk)`` gives the
        layer's full ``[Hkv, K, D]`` keys / values (context then block) that ``masks[i] [B, K]`` indexes."""
        cfg = self.cfg
        rows = x.shape[0]
        group = cfg.num_heads // cfg.num_kv_heads
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            kernel = None
            if layer.attention_conv is not None:
                h, kernel = layer.attention_conv.prepare(h)
            q = attn.q_norm(attn.q_proj(h).view(rows, cfg.num_heads, cfg.head_dim)).transpose(0, 1)  # [Hq, B, D]
            q = q * cos + _rotate_half(q) * sin
            k_blk, v_blk = self._kv(attn, h, cos, sin)
            k, v = keys_values(i, k_blk, v_blk)  # [Hkv, K, D]
            # GQA without copying K/V: the q heads that share a kv head become extra query rows
            q = q.reshape(cfg.num_kv_heads, group * rows, cfg.head_dim)  # [Hkv, G*B, D]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=masks[i].repeat(group, 1))  # [Hkv, G*B, D]
            out = out.reshape(cfg.num_heads, rows, cfg.head_dim).transpose(0, 1).reshape(rows, -1)  # [B, Hq*D]
            h = attn.o_proj(out)
            if kernel is not None:
                h = layer.attention_conv.finish(h, kernel)
            x = x + h
            h = layer.post_attention_layernorm(x)
            kernel = None
            if layer.mlp_conv is not None:
                h, kernel = layer.mlp_conv.prepare(h)
            h = layer.mlp(h)
            if kernel is not None:
                h = layer.mlp_conv.finish(h, kernel)
            x = x + h
        return self.norm(x)

    def block_forward(self, noise: torch.Tensor, positions: torch.Tensor, cache: DraftKVCache) -> torch.Tensor:
        """Draft hidden states ``[B, H]`` (after the final norm) of the block ``noise [B, H]``.

        The block attends to every cached context row (subject to the layer's sliding window) and to
        itself: fully, or causally for causal layers. Context rows have positions ``0 .. S-1``.
        """
        ctx = cache.length
        cos, sin = self.rope(positions, noise.dtype)
        q_pos = positions[:, None]  # [B, 1]
        k_pos = torch.cat([torch.arange(ctx, device=noise.device), positions])[None]  # [1, S + B]

        def keys_values(i, k_blk, v_blk):
            k_ctx, v_ctx = cache.keys(i), cache.values(i)
            if k_ctx is None:
                return k_blk, v_blk
            return torch.cat([k_ctx, k_blk], dim=1), torch.cat([v_ctx, v_blk], dim=1)  # [Hkv, S + B, D]

        return self._layers(noise, cos, sin, keys_values, self._masks(q_pos, k_pos, None))

    def block_forward_static(self, noise: torch.Tensor, start: torch.Tensor, cache: "StaticDraftKVCache") -> torch.Tensor:
        """:meth:`block_forward` on fixed shapes: the block starts at position ``start`` (a 0-d int64
        device tensor equal to the cached context rows); its K/V go to slots ``start + [0, B)`` and
        attention spans every slot of ``cache`` under a mask built from ``start`` on the device."""
        rows = noise.shape[0]
        positions = start + torch.arange(rows, device=noise.device)  # [B]
        cos, sin = self.rope(positions, noise.dtype)
        q_pos = positions[:, None]  # [B, 1]
        k_pos = torch.arange(cache.slots, device=noise.device)[None]  # [1, K]: slot j sits at position j
        in_use = k_pos < start + rows  # context rows and this block; later slots are stale scratch

        def keys_values(i, k_blk, v_blk):
            cache.k[i].index_copy_(1, positions, k_blk)
            cache.v[i].index_copy_(1, positions, v_blk)
            return cache.k[i], cache.v[i]

        return self._layers(noise, cos, sin, keys_values, self._masks(q_pos, k_pos, in_use))

    def logits(self, hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """Target ``lm_head`` -> x ``output_multiplier`` -> ``tanh`` softcap; float32 ``[.., V]``."""
        logits = lm_head(hidden).float() * self.cfg.output_multiplier
        cap = self.cfg.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------
# checkpoint name -> module name (the transformers assistant nests the context projection)
_MUSE_RENAMES = {"encoder.fc.weight": "fc.weight", "encoder.output_norm_enc.weight": "hidden_norm.weight"}
# copies of the target's tables some checkpoints carry; the drafter uses the target's own
_SHARED_COPIES = ("embed_tokens.weight", "lm_head.weight")


def _load_weights(model: BlockDraftModel, tensors: Mapping[str, torch.Tensor], target) -> None:
    cfg = model.cfg
    renamed: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if cfg.architecture == MUSE_ASSISTANT:
            name = _MUSE_RENAMES.get(name, name)
        # transformers' key_mapping for DFlash2 codebooks saved as embeddings
        if name.startswith("candidate_selector.") and name.endswith("_codebook.weight"):
            name = name[: -len(".weight")]
        renamed[name] = t
    expected = model.state_dict()
    vocab, hidden = target.config.vocab_size, target.config.hidden_size
    for name in _SHARED_COPIES:
        if name in renamed:
            t = renamed.pop(name)
            if tuple(t.shape) != (vocab, hidden):
                raise ValueError(f"{name}: checkpoint shape {tuple(t.shape)} does not match the target's ({vocab}, {hidden}) (vocab_size, hidden_size)")
    missing = sorted(set(expected) - set(renamed))
    if missing:
        raise ValueError(f"checkpoint: missing tensors for {cfg.architecture}: {missing[:6]}{' ...' if len(missing) > 6 else ''}")
    unexpected = sorted(set(renamed) - set(expected))
    if unexpected:
        raise ValueError(f"checkpoint: unexpected tensors for {cfg.architecture}: {unexpected[:6]}{' ...' if len(unexpected) > 6 else ''}")
    for name, ref in expected.items():
        if tuple(renamed[name].shape) != tuple(ref.shape):
            field_hint = " (vocab_size)" if ref.shape[0] == vocab and renamed[name].shape[0] != vocab else ""
            raise ValueError(f"{name}: expected shape {tuple(ref.shape)}{field_hint}, checkpoint has {tuple(renamed[name].shape)}")
    model.load_state_dict({k: renamed[k] for k in expected}, strict=True)


def load_block_model(folder, target, *, dtype: torch.dtype | None = None) -> BlockDraftModel:
    """Read ``config.json`` + ``*.safetensors`` of a published drafter and check it fits ``target``."""
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ValueError(f"folder: expected {config_path} to exist")
    cfg = read_drafter_config(json.loads(config_path.read_text()))
    check_fits_target(cfg, target)
    model = BlockDraftModel(cfg, target.config.vocab_size)
    _load_weights(model, read_safetensors(folder, argument="folder"), target)
    return model.to(device=target.device, dtype=dtype or target.dtype).eval()


def load_drafter(folder, target, **kwargs):
    """The right drafter class for the checkpoint in ``folder`` (by its architecture field).

    Example:
        >>> drafter = load_drafter("path/to/Qwen3-8B-DFlash-b16", target)      # doctest: +SKIP
    """
    cfg = read_drafter_config(json.loads((Path(folder) / "config.json").read_text()))
    if cfg.architecture == DSPARK:
        from specdec.drafters.dspark import DSparkDrafter

        return DSparkDrafter.from_pretrained(folder, target, **kwargs)
    cls = DFlash2Drafter if cfg.architecture == DFLASH2 else DFlashDrafter
    return cls.from_pretrained(folder, target, **kwargs)


# --------------------------------------------------------------------------------------------------
# Drafters
# --------------------------------------------------------------------------------------------------
def _check_budget(tree_budget) -> int | None:
    if tree_budget is not None and (isinstance(tree_budget, bool) or not isinstance(tree_budget, int) or tree_budget < 1):
        raise ValueError(f"tree_budget: expected an int >= 1 or None, got {tree_budget!r}")
    return tree_budget


class _BlockDrafter:
    """Feature ingestion, the draft cache and the block forward; subclasses turn hidden rows into drafts.

    Two ways to run a round, giving the same proposals:

    * dynamic (the default and the reference): a :class:`DraftKVCache` that grows, eager PyTorch;
    * static (:meth:`enable_static_cache`, :meth:`enable_cuda_graphs`): a preallocated
      :class:`StaticDraftKVCache`, and feature ingestion + block forward + the subclass's
      :meth:`_graph_head` as one fixed-shape body per count of new context rows, with the row count
      held on the device. With CUDA graphs each round is one replay of that body and needs no host
      sync; without them the same body runs eagerly (how the CPU tests check it).

    Hooks for subclasses: :meth:`_draft` turns the predicting rows into a proposal; :meth:`_graph_head`
    adds per-round outputs computed inside the graph (``self._graph_out`` during :meth:`_draft`, or
    ``None`` on the dynamic path).
    """

    architectures: tuple[str, ...] = ()
    # rows of the block that predict tokens: DFlash drops the anchor row, DSpark keeps it
    first_predicting_row = 1

    def __init__(self, model: BlockDraftModel, target, *, tree_budget: int | None = None):
        if not isinstance(model, BlockDraftModel):
            raise TypeError(f"model: expected a BlockDraftModel, got {type(model).__name__}")
        if model.cfg.architecture not in self.architectures:
            raise ValueError(
                f"architectures: {type(self).__name__} reads {list(self.architectures)}, got {model.cfg.architecture!r}"
                + (" (use load_drafter to pick the class)" if model.cfg.architecture in ARCHITECTURES else "")
            )
        check_fits_target(model.cfg, target)
        self.model = model
        self.cfg = model.cfg
        # shared, not copied: the target's tables are the drafter's tables
        self.embed = target.embed
        self.lm_head = target.lm_head
        self.vocab_size = target.config.vocab_size
        self.target_layer_ids = model.cfg.hf_layer_ids
        self.tree_budget = _check_budget(tree_budget)
        self.cache: DraftKVCache | StaticDraftKVCache = DraftKVCache(model.cfg.num_layers)
        self.last_hidden: torch.Tensor | None = None
        # static path state (None / empty on the dynamic path)
        self._static: StaticDraftKVCache | None = None
        self._max_new_rows = 0
        self._graphs: dict[int, tuple] | None = None
        self._pending: torch.Tensor | None = None  # [r, taps * H] features not yet in the static cache
        self._graph_out: dict[str, torch.Tensor] | None = None

    @classmethod
    def from_pretrained(cls, folder, target, *, dtype: torch.dtype | None = None, tree_budget: int | None = None):
        """Load a published checkpoint folder for ``target`` (whose embedding and lm_head it shares)."""
        return cls(load_block_model(folder, target, dtype=dtype), target, tree_budget=tree_budget)

    @property
    def block_size(self) -> int:
        return self.cfg.block_size

    @property
    def max_draft_tokens(self) -> int:
        return self.cfg.block_size - self.first_predicting_row

    @property
    def uses_cuda_graphs(self) -> bool:
        return self._graphs is not None

    def reset(self) -> None:
        self._pending = None
        self._graph_out = None
        if self._static is not None:
            self._static.crop(0)
        else:
            self.cache = DraftKVCache(self.cfg.num_layers)

    # ---- static cache and CUDA graphs ------------------------------------------------------------
    def enable_static_cache(self, max_context: int, *, max_new_rows: int | None = None) -> None:
        """Switch to the static path, run eagerly: a preallocated cache of ``max_context`` context rows.

        Rounds that bring at most ``max_new_rows`` new feature rows (default ``max_draft_tokens + 1``:
        the accepted drafts and the previous root) ingest them inside the fixed-shape body; larger
        ingestions (the prompt) are projected into the cache eagerly first. Empties the cache.
        A context longer than ``max_context + 1`` tokens raises ``ValueError`` before any launch.

        Example:
            >>> drafter.enable_static_cache(4096)          # doctest: +SKIP
        """
        if max_new_rows is None:
            max_new_rows = self.max_draft_tokens + 1
        if isinstance(max_new_rows, bool) or not isinstance(max_new_rows, int) or max_new_rows < 0:
            raise ValueError(f"max_new_rows: expected an int >= 0, got {max_new_rows!r}")
        weight = self.model.fc.weight
        cfg = self.cfg
        self._static = StaticDraftKVCache(
            cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, max_context=max_context, block_size=cfg.block_size,
            dtype=weight.dtype, device=weight.device,
        )
        self.cache = self._static
        self._max_new_rows = max_new_rows
        self._graphs = None
        self._pending = None
        self._graph_out = None
        # the masked rows of every block, embedded at the anchor's side in the body
        self._mask_ids = torch.full((cfg.block_size - 1,), cfg.mask_token_id, dtype=torch.long, device=weight.device)

    @torch.no_grad()
    def enable_cuda_graphs(self, max_context: int, *, max_new_rows: int | None = None) -> None:
        """:meth:`enable_static_cache`, then capture the body as one CUDA graph per new-row count
        ``0 .. max_new_rows`` (captured here, on an empty cache). A round then copies its features,
        the anchor and the cached row count into static buffers and replays: no host sync.

        Raises:
            ValueError: the drafter is not on a CUDA device.
        """
        device = self.model.fc.weight.device
        if device.type != "cuda":
            raise ValueError(f"enable_cuda_graphs: expected a drafter on a CUDA device, got {device}")
        self.enable_static_cache(max_context, max_new_rows=max_new_rows)
        graphs = {}
        for rows in range(self._max_new_rows + 1):
            graphs[rows] = self._capture(rows)
        self._graphs = graphs

    def disable_static_cache(self) -> None:
        """Back to the dynamic (reference) path with an empty cache; drops the graphs."""
        self._static = None
        self._graphs = None
        self._pending = None
        self._graph_out = None
        self.cache = DraftKVCache(self.cfg.num_layers)

    def _static_body(self, feats: torch.Tensor | None, start: torch.Tensor, anchor: torch.Tensor) -> dict[str, torch.Tensor]:
        """Ingest ``feats [r, taps * H]`` at rows ``start + [0, r)``, then the block after them.

        ``start``: 0-d int64 device tensor; ``anchor``: ``[1]`` int64. Returns ``hidden [B, H]`` and the
        outputs of :meth:`_graph_head`. Fixed shapes for a given ``r``: what a graph captures.
        """
        model = self.model
        if feats is not None and feats.shape[0]:
            model.append_context_static(self._static, model.project_context(feats), start)
            start = start + feats.shape[0]
        ids = torch.cat([anchor, self._mask_ids])  # [B]
        noise = self.embed(ids) * self.cfg.input_embedding_scale  # [B, H]
        hidden = model.block_forward_static(noise.to(model.fc.weight.dtype), start, self._static)  # [B, H]
        out = {"hidden": hidden}
        out.update(self._graph_head(hidden, anchor))
        return out

    def _graph_head(self, hidden: torch.Tensor, anchor: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-round work on the block's hidden rows ``[B, H]`` that the static body (and graph) also
        runs: fixed-shape, no host sync, no randomness. Default: nothing."""
        return {}

    def _capture(self, rows: int):
        device = self.model.fc.weight.device
        taps = len(self.target_layer_ids)
        static = {
            "feats": torch.zeros(rows, taps * self.cfg.hidden_size, dtype=self.model.fc.weight.dtype, device=device),
            "start": torch.zeros((), dtype=torch.long, device=device),
            "anchor": torch.zeros(1, dtype=torch.long, device=device),
        }
        args = (static["feats"] if rows else None, static["start"], static["anchor"])
        # warm-up on a side stream (allocator, kernel selection), then capture; on the empty cache of
        # enable time these only write scratch slots
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._static_body(*args)
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._static_body(*args)
        return graph, static, out

    def _run_static(self, context: torch.Tensor) -> dict[str, torch.Tensor]:
        """Ingest the pending rows and run the block on the static path (a replay, or the body eagerly)."""
        cache = self._static
        feats, self._pending = self._pending, None
        rows = 0 if feats is None else feats.shape[0]
        start = cache.length
        device = cache.k[0].device
        if rows > self._max_new_rows:
            # the prompt (or a long catch-up): eager projection, then the block alone
            self.model.append_context_static(cache, self.model.project_context(feats), torch.full((), start, dtype=torch.long, device=device))
            start, feats, rows = start + rows, None, 0
        cache.length = start + rows
        anchor = context[-1:].to(device)
        if self._graphs is None:
            return self._static_body(feats, torch.full((), start, dtype=torch.long, device=device), anchor)
        graph, static, out = self._graphs[rows]
        if rows:
            static["feats"].copy_(feats)
        static["start"].fill_(start)
        static["anchor"].copy_(anchor)
        graph.replay()
        return out

    def _flush_pending(self) -> None:
        """Project pending feature rows into the static cache without running a block (k = 0 rounds)."""
        feats, self._pending = self._pending, None
        if feats is not None and feats.shape[0]:
            cache = self._static
            start = torch.full((), cache.length, dtype=torch.long, device=cache.k[0].device)
            self.model.append_context_static(cache, self.model.project_context(feats), start)
            cache.length += feats.shape[0]

    # ---- one round ---------------------------------------------------------------------------------
    def _ingest(self, context: torch.Tensor, target_hidden: torch.Tensor | None) -> None:
        self._graph_out = None
        n = context.numel()
        rows = 0 if target_hidden is None else target_hidden.shape[0]
        if target_hidden is not None:
            taps = len(self.target_layer_ids)
            if target_hidden.ndim != 3 or target_hidden.shape[1] != taps or target_hidden.shape[2] != self.cfg.hidden_size:
                raise ValueError(
                    f"target_hidden: expected [rows, {taps}, {self.cfg.hidden_size}] (rows, taps, hidden), got {tuple(target_hidden.shape)}"
                )
        if self._pending is not None:
            # a previous _ingest whose block never ran: its rows go in first
            self._flush_pending()
        cached = self.cache.length
        # features cover context[:-1]; the newest token (the anchor) has none yet
        if cached + rows > n - 1:
            keep = n - 1 - rows
            if keep < 0:
                raise ValueError(f"target_hidden: {rows} feature rows for a context of {n} tokens (expected at most {n - 1})")
            self.cache.crop(keep)
            cached = keep
        if cached + rows != n - 1:
            raise ValueError(
                f"target_hidden: the drafter holds features of {cached} rows and got {rows} more, but the context has "
                f"{n - 1} committed rows before the anchor; pass the rows committed since the previous call"
            )
        if not rows:
            return
        feats = target_hidden.reshape(rows, -1).to(self.model.fc.weight.dtype)  # [r, taps * H]
        if self._static is not None:
            self._static.reserve(n - 1)
            # ingested inside the next block's body (one graph for both)
            self._pending = feats
            return
        positions = torch.arange(cached, cached + rows, device=feats.device)
        self.model.append_context(self.cache, self.model.project_context(feats), positions)

    def _block_hidden(self, context: torch.Tensor) -> torch.Tensor:
        if self._static is not None:
            out = self._run_static(context)
            self._graph_out = out
            # a view of the graph's output buffer: valid until the next round
            self.last_hidden = out["hidden"]
            return out["hidden"]
        n = context.numel()
        b = self.cfg.block_size
        ids = torch.full((b,), self.cfg.mask_token_id, dtype=torch.long, device=context.device)
        ids[0] = context[-1]
        noise = self.embed(ids) * self.cfg.input_embedding_scale  # [B, H]
        positions = torch.arange(n - 1, n - 1 + b, device=context.device)
        hidden = self.model.block_forward(noise.to(self.model.fc.weight.dtype), positions, self.cache)  # [B, H]
        self.last_hidden = hidden
        return hidden

    @torch.no_grad()
    def propose(self, context, max_tokens, *, sampling: SamplingConfig, generator, target_hidden=None) -> DraftProposal:
        self._ingest(context, target_hidden)
        k = max(0, min(int(max_tokens), self.max_draft_tokens))
        if k == 0:
            if self._pending is not None:
                self._flush_pending()
            return DraftProposal(tokens=context.new_zeros(0))
        hidden = self._block_hidden(context)[self.first_predicting_row : self.first_predicting_row + k]  # [k, H]
        return self._draft(context, hidden, k, sampling, generator)

    def _draft(self, context, hidden, k, sampling, generator) -> DraftProposal:
        raise NotImplementedError

    def _tree_from(self, child_logprobs, depth: int, budget: int, device) -> DraftProposal:
        from specdec.verify.tree import best_first_tree

        tree = best_first_tree(child_logprobs, budget, max_depth=depth, device=device)
        # tokens: the first root-to-leaf path (each node's first child in node order)
        path, node = [], -1
        parents = tree.parents.tolist()
        while True:
            kids = [i for i, p in enumerate(parents) if p == node]
            if not kids:
                break
            node = kids[0]
            path.append(node)
        return DraftProposal(tokens=tree.tokens[path], tree=tree)


class DFlashDrafter(_BlockDrafter):
    """DFlash (``DFlashDraftModel``) and the transformers DFlash assistant (``muse_glimmer_assistant``).

    Each round: the features of the newly committed rows enter the draft cache, one forward over
    ``[anchor, MASK x (B - 1)]`` gives ``B - 1`` independent per-position distributions. Greedy takes
    the argmax of each; at ``temperature > 0`` each token is drawn from the request's law after
    temperature / top-k / top-p and that law is ``draft_probs``. ``tree_logprobs`` are the
    per-position log-softmaxes (marginals), from which :class:`~specdec.TreeVerifier` builds a
    best-first tree.

    Args:
        model: a :class:`BlockDraftModel` of architecture ``DFlashDraftModel`` or ``muse_glimmer_assistant``.
        target: the :class:`~specdec.models.Target` whose ``embed`` and ``lm_head`` it shares.
        tree_budget: unused by DFlash (its marginals are path-independent); accepted for symmetry.

    Example:
        >>> from specdec.testing import tiny_target
        >>> from specdec.drafters.checkpoints import save_fixture
        >>> target = tiny_target(seed=0)
        >>> drafter = DFlashDrafter.from_pretrained(save_fixture(tmp, "DFlashDraftModel", target), target)  # doctest: +SKIP
        >>> sd.generate(target, prompt, 32, drafter=drafter, num_draft_tokens=drafter.max_draft_tokens)  # doctest: +SKIP
    """

    architectures = (DFLASH, MUSE_ASSISTANT)

    def _graph_head(self, hidden, anchor):
        logits = self.model.logits(hidden[1:], self.lm_head)  # [B - 1, V]
        return {"logits": logits, "greedy": logits.argmax(-1)}

    def _draft(self, context, hidden, k, sampling, generator) -> DraftProposal:
        out = self._graph_out
        # static path: the logits (and greedy picks) of every predicting row came from the body
        logits = self.model.logits(hidden, self.lm_head) if out is None else out["logits"][:k]  # [k, V]
        scores = torch.log_softmax(logits, dim=-1)
        if sampling.greedy:
            tokens = logits.argmax(-1) if out is None else out["greedy"][:k].clone()
            return DraftProposal(tokens=tokens, tree_logprobs=scores)
        probs = logits_to_probs(logits, sampling)  # [k, V]
        return DraftProposal(tokens=sample(probs, generator), draft_probs=probs, tree_logprobs=scores)


class DFlash2Drafter(_BlockDrafter):
    """DFlash2 (``DFlash2DraftModel``): DFlash with dynamic convolutions and a candidate selector.

    The selector keeps the top-``selector_top_k`` tokens ``C_t`` of each row's logits ``U_t`` and walks
    the block from the anchor: ``score_t(c) = U_t(c) + <A[prev] * (P h_t), B[c]>`` for ``c`` in ``C_t``
    (``A`` = ``predecessor_codebook``, ``B`` = ``successor_codebook``, ``P`` = ``hidden_projection``).
    Greedy takes the argmax; at ``temperature > 0`` it draws from ``softmax(score / T)`` over the
    candidates, and that law scattered onto the vocabulary is ``draft_probs`` (zero outside ``C_t``).

    With ``tree_budget`` set, the proposal carries a best-first tree whose child log-probs are the
    selector's ``log_softmax(score / T)`` given the path (T = 1 when greedy), capped at ``max_tokens``
    nodes; ``tokens`` is its first root-to-leaf path.
    """

    architectures = (DFLASH2,)

    def _selector_rows(self, hidden: torch.Tensor):
        sel = self.model.candidate_selector
        logits = self.model.logits(hidden, self.lm_head)  # [k, V]
        unary, cand = torch.topk(logits, self.cfg.selector_top_k, dim=-1)  # [k, K]
        proj = sel.hidden_projection(hidden).float()  # [k, r]
        succ = sel.successor_codebook[cand].float()  # [k, K, r]
        return unary, cand, proj, succ

    def _scores(self, rows, t: int, prev: torch.Tensor) -> torch.Tensor:
        unary, cand, proj, succ = rows
        # index_select, not [prev]: a 0-d device index would be read back to the host
        pred = self.model.candidate_selector.predecessor_codebook.index_select(0, prev.reshape(1))[0].float()  # [r]
        return unary[t] + succ[t] @ (pred * proj[t])  # [K]

    def _walk_step(self, rows, t: int, prev: torch.Tensor) -> torch.Tensor:
        """The greedy choice at row ``t`` after ``prev``: ``[1]`` token id, no host sync."""
        return rows[1][t].index_select(0, self._scores(rows, t, prev).argmax().reshape(1))

    def _graph_head(self, hidden, anchor):
        unary, cand, proj, succ = self._selector_rows(hidden[1:])
        rows = (unary, cand, proj, succ)
        # the greedy walk over every predicting row; its first k steps are the walk of a k-token round
        prev, picks = anchor, []
        for t in range(unary.shape[0]):
            prev = self._walk_step(rows, t, prev)  # [1]
            picks.append(prev)
        return {"unary": unary, "cand": cand, "proj": proj, "succ": succ, "greedy": torch.cat(picks)}

    def _draft(self, context, hidden, k, sampling, generator) -> DraftProposal:
        out = self._graph_out
        if out is None:
            rows = self._selector_rows(hidden)
        else:
            if sampling.greedy and self.tree_budget is None:
                return DraftProposal(tokens=out["greedy"][:k].clone())
            rows = tuple(out[name][:k] for name in ("unary", "cand", "proj", "succ"))
        cand = rows[1]
        temperature = 1.0 if sampling.greedy else sampling.temperature
        if self.tree_budget is not None:
            anchor = int(context[-1])

            def child_logprobs(path: torch.Tensor) -> torch.Tensor:
                t = path.numel()
                prev = anchor if t == 0 else int(path[-1])
                lp = torch.log_softmax(self._scores(rows, t, torch.tensor(prev, device=cand.device)) / temperature, -1)
                full = torch.full((self.vocab_size,), float("-inf"), device=cand.device)
                return full.scatter(0, cand[t], lp).cpu()

            return self._tree_from(child_logprobs, k, min(self.tree_budget, k), context.device)
        prev = context[-1:]
        tokens, laws = [], []
        for t in range(k):
            if sampling.greedy:
                prev = self._walk_step(rows, t, prev)  # [1]
            else:
                q = torch.softmax(self._scores(rows, t, prev) / temperature, dim=-1)  # [K]
                index = sample(q, generator)
                laws.append(torch.zeros(self.vocab_size, device=q.device).scatter(0, cand[t], q))
                prev = cand[t].index_select(0, index.reshape(1))
            tokens.append(prev)
        return DraftProposal(tokens=torch.cat(tokens), draft_probs=torch.stack(laws) if laws else None)
