"""Target configuration: one frozen dataclass describes every dense decoder the runtime supports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

# Dense decoder families whose layer is: RMSNorm -> GQA attention with RoPE -> RMSNorm -> SwiGLU MLP.
# Qwen2 adds a bias on q/k/v; Qwen3 adds a per-head RMSNorm on q and k; Llama and Qwen3 may bias q/k/v/o
# (attention_bias) and Llama its MLP (mlp_bias). Nothing else differs.
DENSE_MODEL_TYPES = ("llama", "qwen2", "qwen3")
# Hybrids of Gated DeltaNet and gated attention layers (specdec.models.hybrid.HybridTarget).
HYBRID_MODEL_TYPES = ("qwen3_5_text", "qwen3_next")
# Everything load_target accepts.
SUPPORTED_MODEL_TYPES = DENSE_MODEL_TYPES + HYBRID_MODEL_TYPES


def require_positive(config: Any, names: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming the first field of ``names`` on ``config`` that is not a positive int."""
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")


@dataclass(frozen=True)
class TargetConfig:
    """Shape and numerics of a dense decoder, read from a Hugging Face config.

    Example:
        >>> cfg = TargetConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
        ...                    num_heads=4, num_kv_heads=2, head_dim=16)
        >>> cfg.q_size, cfg.kv_size
        (64, 32)
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # Non-default RoPE variants (llama3, yarn, ...) are computed by transformers' own init functions
    # from this dict, so that the frequencies match the reference implementation exactly.
    rope_parameters: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    o_proj_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    model_type: str = "llama"
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        require_positive(
            self,
            (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_layers",
                "num_heads",
                "num_kv_heads",
                "head_dim",
                "max_position_embeddings",
            ),
        )
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(f"num_heads: expected a multiple of num_kv_heads = {self.num_kv_heads}, got {self.num_heads}")
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim: expected an even int (RoPE rotates pairs), got {self.head_dim}")

    @property
    def q_size(self) -> int:
        """Width of the query projection, ``num_heads * head_dim`` (int)."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of each of the key and value projections, ``num_kv_heads * head_dim`` (int)."""
        return self.num_kv_heads * self.head_dim

    def num_parameters(self, *, include_embeddings: bool = True) -> int:
        """Parameter count; without embeddings it counts what a decode step reads (lm_head included)."""
        h, i = self.hidden_size, self.intermediate_size
        attn = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        if self.attention_bias:
            attn += self.q_size + 2 * self.kv_size
        if self.o_proj_bias:
            attn += h
        if self.qk_norm:
            attn += 2 * self.head_dim
        layer = attn + 3 * h * i + 2 * h
        if self.mlp_bias:
            layer += 2 * i + h
        total = self.num_layers * layer + h + self.vocab_size * h  # final norm + lm_head
        if include_embeddings and not self.tie_word_embeddings:
            total += self.vocab_size * h
        return total

    @classmethod
    def from_hf(cls, hf_config: Any) -> TargetConfig:
        """Build from a transformers ``PretrainedConfig`` (or anything with the same attributes)."""
        model_type = getattr(hf_config, "model_type", None)
        if model_type not in DENSE_MODEL_TYPES:
            hint = (
                "; a Qwen3.5 checkpoint holds a vision-language model: load its text model (model_type 'qwen3_5_text')"
                if model_type == "qwen3_5"
                else ""
            )
            raise ValueError(
                f"model_type: expected one of {DENSE_MODEL_TYPES} (dense decoders; the hybrids {HYBRID_MODEL_TYPES} load as a "
                f"HybridTarget through load_target), got {model_type!r}{hint}"
            )
        _refuse_unsupported_hf_fields(hf_config, model_type)
        hidden = hf_config.hidden_size
        num_heads = hf_config.num_attention_heads
        head_dim = getattr(hf_config, "head_dim", None) or hidden // num_heads
        rope = dict(getattr(hf_config, "rope_parameters", None) or {})
        legacy_scaling = getattr(hf_config, "rope_scaling", None)
        if not rope and legacy_scaling:
            rope = dict(legacy_scaling)
        theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
        eos = getattr(hf_config, "eos_token_id", None)
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))
        qkv_bias = getattr(hf_config, "attention_bias", model_type == "qwen2")
        return cls(
            vocab_size=hf_config.vocab_size,
            hidden_size=hidden,
            intermediate_size=hf_config.intermediate_size,
            num_layers=hf_config.num_hidden_layers,
            num_heads=num_heads,
            num_kv_heads=getattr(hf_config, "num_key_value_heads", None) or num_heads,
            head_dim=head_dim,
            rms_norm_eps=hf_config.rms_norm_eps,
            rope_theta=float(theta),
            rope_parameters=rope,
            max_position_embeddings=getattr(hf_config, "max_position_embeddings", 4096),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            attention_bias=bool(qkv_bias) or model_type == "qwen2",
            o_proj_bias=bool(qkv_bias) and model_type != "qwen2",
            mlp_bias=bool(getattr(hf_config, "mlp_bias", False)) and model_type == "llama",
            qk_norm=model_type == "qwen3",
            model_type=model_type,
            eos_token_ids=eos_ids,
        )

    def rope_inv_freq(self, hf_config: Any | None = None) -> tuple[torch.Tensor, float]:
        """Inverse RoPE frequencies [head_dim // 2] (fp32) and the attention scaling factor."""
        return rope_inv_freq(self.rope_parameters, self.rope_theta, self.head_dim, hf_config)


def _refuse_unsupported_hf_fields(hf_config: Any, model_type: str) -> None:
    """Raise ``ValueError`` for a dense HF config the runtime would run as another model.

    The runtime's MLP is SwiGLU with SiLU and every layer attends to the whole prefix; RoPE frequencies are
    fixed at load, so a type whose frequencies follow the sequence length (``dynamic``, ``longrope``) is refused.
    """
    act = getattr(hf_config, "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ValueError(f"hidden_act: expected 'silu' (the runtime's SwiGLU MLP), got {act!r}")
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types is not None:
        other = sorted({str(t) for t in layer_types} - {"full_attention"})
        if other:
            raise ValueError(
                f"layer_types: expected every layer 'full_attention' (the runtime has no sliding-window attention), "
                f"got {other} (sliding_window={getattr(hf_config, 'sliding_window', None)!r})"
            )
    elif getattr(hf_config, "use_sliding_window", False):
        raise ValueError(
            f"use_sliding_window: expected False (the runtime has no sliding-window attention), got True "
            f"(sliding_window={getattr(hf_config, 'sliding_window', None)!r})"
        )
    rope = dict(getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {})
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type in ("dynamic", "longrope"):
        raise ValueError(
            f"rope_type: {rope_type!r} frequencies depend on the sequence length, which the runtime does not follow; "
            f"expected a type with fixed frequencies ('default', 'linear', 'llama3', 'yarn', ...) for model_type {model_type!r}"
        )


def rope_inv_freq(rope_parameters: dict, rope_theta: float, rotary_dim: int, hf_config: Any | None) -> tuple[torch.Tensor, float]:
    """Inverse RoPE frequencies ``[rotary_dim // 2]`` (fp32) and the cos/sin scaling factor.

    The default RoPE is computed here as transformers computes it; other types (llama3, yarn, ...) are
    delegated to transformers' own init functions, which need the original HF config.
    """
    rope_type = rope_parameters.get("rope_type", rope_parameters.get("type", "default"))
    if rope_type in (None, "default"):
        exponent = torch.arange(0, rotary_dim, 2, dtype=torch.int64).to(torch.float) / rotary_dim
        return 1.0 / (rope_theta**exponent), 1.0
    if hf_config is None:
        raise ValueError(f"rope_parameters: rope_type {rope_type!r} needs the original HF config to compute frequencies")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if rope_type not in ROPE_INIT_FUNCTIONS:
        raise ValueError(f"rope_type: expected one of {sorted(ROPE_INIT_FUNCTIONS)}, got {rope_type!r}")
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](hf_config, None)
    return inv_freq.float(), float(scaling)
