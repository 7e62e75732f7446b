"""Random-weight drafter checkpoints in the published formats, at small sizes, for tests and benchmarks.

:func:`fixture_config` writes the ``config.json`` fields exactly as the published checkpoints spell
them (z-lab ``DFlashDraftModel`` / ``DFlash2DraftModel`` with ``dflash_config``, the transformers
``muse_glimmer_assistant``, DeepSpec ``Qwen3DSparkModel``); :func:`save_fixture` adds a
``model.safetensors`` under the published tensor names, so ``from_pretrained`` is exercised on the
real formats without downloading anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from specdec.drafters.block.backbone import BlockDraftModel
from specdec.drafters.block.checkpoint import export_state_dict
from specdec.drafters.block.config import DFLASH, DFLASH2, DSPARK, MUSE_ASSISTANT, read_drafter_config, read_dspark_config
from specdec.drafters.block.heads import build_dspark_model

__all__ = ["fixture_config", "random_block_model", "save_fixture"]


def fixture_config(
    architecture: str,
    target,
    *,
    num_layers: int = 1,
    block_size: int | None = None,
    target_layer_ids: list[int] | None = None,
    num_heads: int | None = None,
    num_kv_heads: int | None = None,
    head_dim: int | None = None,
    intermediate_size: int | None = None,
    mask_token_id: int | None = None,
    sliding_window: int | None = None,
    selector_rank: int = 8,
    selector_top_k: int = 4,
    markov_rank: int = 8,
    markov_head_type: str = "vanilla",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``config.json`` dict in ``architecture``'s published format, sized to fit ``target``.

    ``markov_head_type`` (DSpark only): ``"vanilla"``, ``"gated"`` or ``"rnn"``, DeepSpec's head variants.

    Example:
        >>> from specdec.testing import tiny_target
        >>> cfg = fixture_config("DFlash2DraftModel", tiny_target(seed=0))
        >>> cfg["architectures"], sorted(cfg["dflash_config"])[:3]
        (['DFlash2DraftModel'], ['block_size', 'conv_group_size', 'conv_kernel_size'])
    """
    tcfg = target.config
    hidden = tcfg.hidden_size
    heads = num_heads or tcfg.num_heads
    kv = num_kv_heads or tcfg.num_kv_heads
    hd = head_dim or tcfg.head_dim
    ids = target_layer_ids if target_layer_ids is not None else list(range(min(3, tcfg.num_layers)))
    mask = tcfg.vocab_size - 1 if mask_token_id is None else mask_token_id
    common = {
        "hidden_size": hidden,
        "intermediate_size": intermediate_size or 2 * hidden,
        "num_hidden_layers": num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hd,
        "rms_norm_eps": 1e-6,
        "vocab_size": tcfg.vocab_size,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
    }
    if architecture in (DFLASH, DFLASH2):
        layer_types = ["sliding_attention" if sliding_window else "full_attention"] * num_layers
        draft = {"block_size": block_size or 8, "mask_token_id": mask, "target_layer_ids": ids}
        cfg = {
            "architectures": [architecture],
            "model_type": "qwen3",
            **common,
            "layer_types": layer_types,
            "sliding_window": sliding_window,
            "use_sliding_window": bool(sliding_window),
            "num_target_layers": tcfg.num_layers,
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
            "dflash_config": draft,
        }
        if architecture == DFLASH2:
            cfg["is_causal"] = False
            draft.update(
                conv_group_size=hidden // 4 if hidden % 4 == 0 else 1,
                conv_kernel_size=2,
                selector_rank=selector_rank,
                selector_top_k=selector_top_k,
            )
    elif architecture == MUSE_ASSISTANT:
        cfg = {
            "architectures": ["MuseGlimmerAssistantModel"],
            "model_type": MUSE_ASSISTANT,
            **common,
            "layer_types": ["sliding_attention"] * num_layers,
            "sliding_window": sliding_window or 2048,
            "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
            "block_size": block_size or 8,
            "mask_token_id": mask,
            "target_layer_ids": ids,
        }
    elif architecture == DSPARK:
        cfg = {
            "architectures": [DSPARK],
            "model_type": "qwen3",
            **common,
            "layer_types": ["full_attention"] * num_layers,
            "sliding_window": None,
            "num_target_layers": tcfg.num_layers,
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
            "block_size": block_size or 7,
            "mask_token_id": mask,
            "target_layer_ids": ids,
            "num_anchors": 512,
            "enable_confidence_head": True,
            "confidence_head_with_markov": markov_rank > 0,  # it reads the sequential head's features
            "markov_rank": markov_rank,
            "markov_head_type": markov_head_type,
        }
    else:
        raise ValueError(f"architecture: expected one of {[DFLASH, DFLASH2, MUSE_ASSISTANT, DSPARK]}, got {architecture!r}")
    cfg.update(extra or {})
    return cfg


def random_block_model(config: dict[str, Any], target, *, seed: int = 0, scale: float = 1.0) -> BlockDraftModel:
    """A :class:`BlockDraftModel` for ``config`` with ``N(0, scale / fan_in)`` weights, norms ``1 + 0.1 N(0, 1)``.

    Random small-norm weights keep the draft logits far from flat, so greedy tests are not decided by
    rounding.
    """
    if config.get("architectures") == [DSPARK]:
        # the gated / rnn heads add tensors the backbone parser does not know
        model = build_dspark_model(read_dspark_config(config), target.config.vocab_size)
    else:
        model = BlockDraftModel(read_drafter_config(config), target.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("base_kernel"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith("_codebook"):
                # the pairwise term sums rank products: keep its spread near the unary logits'
                p.copy_(torch.randn(p.shape, generator=gen) * p.shape[-1] ** -0.25)
            elif name.endswith("markov_w1.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (scale / p.shape[-1]) ** 0.5)
    return model.to(dtype=target.dtype, device=target.device).eval()


def save_fixture(folder, architecture: str, target, *, seed: int = 0, scale: float = 1.0, **config_kwargs: Any) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (random weights, published names) into ``folder``.

    Returns:
        the folder, ready for ``from_pretrained``.

    Example:
        >>> import tempfile
        >>> from specdec.testing import tiny_target
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     folder = save_fixture(Path(tmp) / "dflash", "DFlashDraftModel", tiny_target(seed=0))
        ...     sorted(p.name for p in folder.iterdir())
        ['config.json', 'model.safetensors']
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = fixture_config(architecture, target, **config_kwargs)
    model = random_block_model(config, target, seed=seed, scale=scale)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v.cpu() for k, v in export_state_dict(model, target).items()}, str(folder / "model.safetensors"))
    return folder
