"""Tiny random-weight models for tests: an HF model and the same weights in the lean runtime."""

from __future__ import annotations

from typing import Any

import torch

_FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
}


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
) -> Any:
    """A transformers causal LM with random weights, in float32 on the CPU.

    Weights are drawn as ``N(0, weight_scale / fan_in)`` (embeddings ``N(0, 1)``), not HF's
    ``N(0, 0.02)``: with HF's init the logits are nearly flat and greedy decoding is decided by
    rounding, which would make exactness tests meaningless.

    Example:
        >>> m = tiny_hf_model("qwen3", seed=1, vocab_size=50)
        >>> m.config.model_type, m.config.vocab_size
        ('qwen3', 50)
    """
    import transformers

    if model_type not in _FAMILIES:
        raise ValueError(f"model_type: expected one of {sorted(_FAMILIES)}, got {model_type!r}")
    config_cls, model_cls = (getattr(transformers, name) for name in _FAMILIES[model_type])
    config = config_cls(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=head_dim if head_dim is not None else hidden_size // num_heads,
        tie_word_embeddings=tie_word_embeddings,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(0)  # HF init consumes the global RNG; every tensor is redrawn below anyway
    model = model_cls(config).float().eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
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
