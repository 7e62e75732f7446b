"""Tiny random-weight models for tests: an HF model and the same weights in the lean runtime."""

from __future__ import annotations

from typing import Any

import torch

_FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "qwen3_5_text": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM"),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM"),
}
_HYBRIDS = ("qwen3_5_text", "qwen3_next")


def tiny_hf_model(
    model_type: str = "llama",
    *,
    seed: int = 0,
    vocab_size: int = 97,
    hidden_size: int = 32,
    intermediate_size: int = 48,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int | None = None,
    tie_word_embeddings: bool = False,
    rope_theta: float = 10000.0,
    weight_scale: float = 1.0,
    layer_types: tuple[str, ...] | None = None,
    linear_heads: tuple[int, int] = (2, 4),
    linear_head_dim: int = 8,
    partial_rotary_factor: float = 0.5,
    num_experts: int = 4,
    extra_config: dict[str, Any] | None = None,
) -> Any:
    """A transformers causal LM with random weights, in float32 on the CPU.

    Weights are drawn as ``N(0, weight_scale / fan_in)`` (embeddings ``N(0, 1)``), not HF's
    ``N(0, 0.02)``: with HF's init the logits are nearly flat and greedy decoding is decided by
    rounding, which would make exactness tests meaningless.

    Hybrids (``"qwen3_5_text"``, ``"qwen3_next"``): ``layer_types`` defaults to alternating
    ``linear_attention`` / ``full_attention`` (GDN first); ``linear_heads = (Hk, Hv)`` and
    ``linear_head_dim`` (dk = dv) size the GDN layers, conv width 4; ``partial_rotary_factor`` sets
    the rotated share of each attention head; ``extra_config`` goes to the config class as it is
    (``{"attention_bias": True}``, ``{"hidden_act": "gelu"}``, ...); Qwen3-Next gets a sparse MoE MLP with ``num_experts``
    experts (top-2, expert width ``intermediate_size // 2``) in every layer. Decay parameters are drawn
    so that the recurrent state carries over several tokens (``A_log = log U(0.05, 0.5)``).

    Example:
        >>> m = tiny_hf_model("qwen3", seed=1, vocab_size=50)
        >>> m.config.model_type, m.config.vocab_size
        ('qwen3', 50)
    """
    import transformers

    if model_type not in _FAMILIES:
        raise ValueError(f"model_type: expected one of {sorted(_FAMILIES)}, got {model_type!r}")
    config_cls, model_cls = (getattr(transformers, name) for name in _FAMILIES[model_type])
    extra: dict[str, Any] = {}
    if model_type in _HYBRIDS:
        hk, hv = linear_heads
        extra = dict(
            layer_types=list(layer_types)
            if layer_types is not None
            else ["linear_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)],
            linear_num_key_heads=hk,
            linear_num_value_heads=hv,
            linear_key_head_dim=linear_head_dim,
            linear_value_head_dim=linear_head_dim,
            linear_conv_kernel_dim=4,
        )
        if model_type == "qwen3_next":
            extra.update(
                num_experts=num_experts,
                num_experts_per_tok=2,
                moe_intermediate_size=intermediate_size // 2,
                shared_expert_intermediate_size=intermediate_size,
                decoder_sparse_step=1,
                mlp_only_layers=[],
            )
    settings = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim if head_dim is not None else hidden_size // num_heads,
        tie_word_embeddings=tie_word_embeddings,
        max_position_embeddings=4096,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": rope_theta,
            **({"partial_rotary_factor": partial_rotary_factor} if model_type in _HYBRIDS else {}),
        },
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        **extra,
    )
    config = config_cls(**{**settings, **(extra_config or {})})
    with torch.random.fork_rng(devices=[]):  # HF init draws from the global RNG: the caller's stream is left as it was
        model = model_cls(config).float().eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            centered = model_type in _HYBRIDS and "linear_attn.norm" not in name  # (1 + w) norms
            if (name.endswith("norm.weight") or "layernorm" in name) and centered:
                param.copy_(0.1 * torch.randn(param.shape, generator=gen))
            elif name.endswith("A_log"):
                param.copy_(torch.empty(param.shape).uniform_(0.05, 0.5, generator=gen).log())
            elif name.endswith("dt_bias"):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
            elif name.endswith("norm.weight") or "layernorm" in name:
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
            elif name.endswith("bias"):
                param.copy_(0.1 * torch.randn(param.shape, generator=gen))
            elif "embed_tokens" in name:
                param.copy_(torch.randn(param.shape, generator=gen))
            else:
                fan_in = param.shape[-1]
                param.copy_(torch.randn(param.shape, generator=gen) * (weight_scale / fan_in) ** 0.5)
    return model


def tiny_target(
    model_type: str = "llama",
    *,
    seed: int = 0,
    max_seq_len: int = 256,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    **model_kwargs: Any,
):
    """A :class:`specdec.models.Target` with the weights of ``tiny_hf_model(model_type, seed=seed, ...)``.

    Example:
        >>> target = tiny_target(seed=0)
        >>> target.vocab_size, target.length
        (97, 0)
    """
    from specdec.models import load_target

    hf = tiny_hf_model(model_type, seed=seed, **model_kwargs)
    return load_target(hf, dtype=dtype, device=device, max_seq_len=max_seq_len, progress=False)
