"""Shape and numerics of Gated DeltaNet / attention hybrids (Qwen3.5 text, Qwen3-Next), read from HF configs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from specdec.models.config import HYBRID_MODEL_TYPES, require_positive, rope_inv_freq

__all__ = ["HybridConfig"]

_LAYER_TYPES = ("linear_attention", "full_attention")


@dataclass(frozen=True)
class HybridConfig:
    """Shape and numerics of a GDN / attention hybrid (Qwen3.5 text, Qwen3-Next), from an HF config.

    ``layer_types[i]`` is ``"linear_attention"`` (a GDN layer) or ``"full_attention"``. Attention:
    ``q_proj`` emits a query and an output gate per head, per-head (1 + w) RMSNorm on q and k, RoPE on
    the first ``rotary_dim`` channels of each head. GDN: ``Hk`` key heads and ``Hv`` value heads of
    ``dk`` / ``dv`` channels, a depthwise causal conv of width ``conv_kernel`` over ``[q | k | v]``.
    ``num_experts > 0`` makes the MLP of layer ``i`` a sparse MoE when :meth:`is_moe` says so.

    Example:
        >>> cfg = HybridConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_layers=2,
        ...                    layer_types=("linear_attention", "full_attention"), num_heads=4, num_kv_heads=2,
        ...                    head_dim=16, rotary_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
        ...                    linear_key_head_dim=8, linear_value_head_dim=8)
        >>> cfg.conv_dim, cfg.gdn_layers, cfg.attention_layers
        (64, (0,), (1,))
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    layer_types: tuple[str, ...]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rotary_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int = 4
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_parameters: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    model_type: str = "qwen3_5_text"
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        require_positive(
            self,
            (
                "vocab_size",
                "hidden_size",
                "num_layers",
                "num_heads",
                "num_kv_heads",
                "head_dim",
                "linear_num_key_heads",
                "linear_num_value_heads",
                "linear_key_head_dim",
                "linear_value_head_dim",
                "linear_conv_kernel_dim",
                "decoder_sparse_step",
            ),
        )
        if not 0 <= self.num_experts_per_tok <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok: expected an int in [0, num_experts = {self.num_experts}], got {self.num_experts_per_tok}"
            )
        outside = [i for i in self.mlp_only_layers if not 0 <= i < self.num_layers]
        if outside:
            raise ValueError(f"mlp_only_layers: expected layer indices in [0, {self.num_layers}), got {outside[0]}")
        if len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types: expected {self.num_layers} entries, got {len(self.layer_types)}")
        bad = [t for t in self.layer_types if t not in _LAYER_TYPES]
        if bad:
            raise ValueError(f"layer_types: expected entries in {_LAYER_TYPES}, got {bad[0]!r}")
        hk, hv = self.linear_num_key_heads, self.linear_num_value_heads
        if hk < 1 or hv % hk != 0:
            raise ValueError(f"linear_num_value_heads: expected a multiple of linear_num_key_heads = {hk}, got {hv}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(f"num_heads: expected a multiple of num_kv_heads = {self.num_kv_heads}, got {self.num_heads}")
        if not (0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0):
            raise ValueError(f"rotary_dim: expected an even int in (0, head_dim = {self.head_dim}], got {self.rotary_dim}")

    @property
    def q_size(self) -> int:
        """Query channels of an attention layer, ``num_heads * head_dim`` (the output gate not counted) (int)."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of each of an attention layer's key and value projections, ``num_kv_heads * head_dim`` (int)."""
        return self.num_kv_heads * self.head_dim

    @property
    def key_dim(self) -> int:
        """GDN query / key channels, ``Hk * dk`` (``linear_num_key_heads * linear_key_head_dim``) (int)."""
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        """GDN value channels, ``Hv * dv`` (``linear_num_value_heads * linear_value_head_dim``) (int)."""
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the short conv: ``[q (Hk dk) | k (Hk dk) | v (Hv dv)]``."""
        return 2 * self.key_dim + self.value_dim

    @property
    def gdn_layers(self) -> tuple[int, ...]:
        """Indices of the Gated DeltaNet (``"linear_attention"``) layers, ascending (tuple of int)."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == "linear_attention")

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """Indices of the ``"full_attention"`` layers, ascending (tuple of int)."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == "full_attention")

    def is_moe(self, layer: int) -> bool:
        """Whether layer ``layer`` has a sparse MoE MLP (transformers' Qwen3-Next rule)."""
        return self.num_experts > 0 and layer not in self.mlp_only_layers and (layer + 1) % self.decoder_sparse_step == 0

    @classmethod
    def from_hf(cls, hf_config: Any) -> HybridConfig:
        """Build from a transformers ``Qwen3_5TextConfig`` / ``Qwen3NextConfig``."""
        model_type = getattr(hf_config, "model_type", None)
        if model_type not in HYBRID_MODEL_TYPES:
            raise ValueError(f"model_type: expected one of {HYBRID_MODEL_TYPES} (hybrids), got {model_type!r}")
        act = getattr(hf_config, "hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise ValueError(f"hidden_act: expected 'silu', got {act!r}")
        hidden = hf_config.hidden_size
        num_heads = hf_config.num_attention_heads
        head_dim = getattr(hf_config, "head_dim", None) or hidden // num_heads
        rope = dict(getattr(hf_config, "rope_parameters", None) or {})
        partial = float(rope.get("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", 1.0)))
        theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
        eos = getattr(hf_config, "eos_token_id", None)
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))
        moe = model_type == "qwen3_next" and getattr(hf_config, "num_experts", 0) > 0
        return cls(
            vocab_size=hf_config.vocab_size,
            hidden_size=hidden,
            intermediate_size=hf_config.intermediate_size,
            num_layers=hf_config.num_hidden_layers,
            layer_types=tuple(hf_config.layer_types),
            num_heads=num_heads,
            num_kv_heads=getattr(hf_config, "num_key_value_heads", None) or num_heads,
            head_dim=head_dim,
            rotary_dim=int(head_dim * partial),
            linear_num_key_heads=hf_config.linear_num_key_heads,
            linear_num_value_heads=hf_config.linear_num_value_heads,
            linear_key_head_dim=hf_config.linear_key_head_dim,
            linear_value_head_dim=hf_config.linear_value_head_dim,
            linear_conv_kernel_dim=hf_config.linear_conv_kernel_dim,
            rms_norm_eps=hf_config.rms_norm_eps,
            rope_theta=float(theta),
            rope_parameters=rope,
            max_position_embeddings=getattr(hf_config, "max_position_embeddings", 4096),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            attention_bias=bool(getattr(hf_config, "attention_bias", False)),
            num_experts=int(hf_config.num_experts) if moe else 0,
            num_experts_per_tok=int(hf_config.num_experts_per_tok) if moe else 0,
            moe_intermediate_size=int(hf_config.moe_intermediate_size) if moe else 0,
            shared_expert_intermediate_size=int(hf_config.shared_expert_intermediate_size) if moe else 0,
            norm_topk_prob=bool(getattr(hf_config, "norm_topk_prob", True)),
            decoder_sparse_step=int(getattr(hf_config, "decoder_sparse_step", 1) or 1),
            mlp_only_layers=tuple(getattr(hf_config, "mlp_only_layers", None) or ()),
            model_type=model_type,
            eos_token_ids=eos_ids,
        )

    def rope_inv_freq(self, hf_config: Any | None = None) -> tuple[torch.Tensor, float]:
        """Inverse RoPE frequencies ``[rotary_dim // 2]`` (fp32) and the attention scaling factor.

        Qwen3.5's interleaved M-RoPE reduces to this for text: its three position components are equal.
        """
        return rope_inv_freq(self.rope_parameters, self.rope_theta, self.rotary_dim, hf_config)
