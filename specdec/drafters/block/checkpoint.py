"""Published checkpoint folders (``config.json`` + ``*.safetensors``) to :class:`BlockDraftModel` and back,
under the tensor names each format uses."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch

from specdec.drafters.block.backbone import BlockDraftModel
from specdec.drafters.block.config import DSPARK, MUSE_ASSISTANT, check_fits_target, read_drafter_config, read_dspark_config
from specdec.drafters.block.heads import build_dspark_model
from specdec.models.loading import read_safetensors

__all__ = ["export_state_dict", "load_block_model", "load_dspark_model"]


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
                raise ValueError(
                    f"{name}: checkpoint shape {tuple(t.shape)} does not match the target's ({vocab}, {hidden}) (vocab_size, hidden_size)"
                )
    missing = sorted(set(expected) - set(renamed))
    if missing:
        raise ValueError(f"checkpoint: missing tensors for {cfg.architecture}: {missing[:6]}{' ...' if len(missing) > 6 else ''}")
    unexpected = sorted(set(renamed) - set(expected))
    if unexpected:
        raise ValueError(
            f"checkpoint: unexpected tensors for {cfg.architecture}: {unexpected[:6]}{' ...' if len(unexpected) > 6 else ''}"
        )
    for name, ref in expected.items():
        if tuple(renamed[name].shape) != tuple(ref.shape):
            field_hint = " (vocab_size)" if ref.shape[0] == vocab and renamed[name].shape[0] != vocab else ""
            raise ValueError(
                f"{name}: expected shape {tuple(ref.shape)}{field_hint}, checkpoint has {tuple(renamed[name].shape)}"
            )
    model.load_state_dict({k: renamed[k] for k in expected}, strict=True)


def _load_folder(folder, target, dtype, read_config, build) -> BlockDraftModel:
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ValueError(f"folder: expected {config_path} to exist")
    cfg = read_config(json.loads(config_path.read_text()))
    check_fits_target(cfg, target)
    model = build(cfg, target.config.vocab_size)
    _load_weights(model, read_safetensors(folder, argument="folder"), target)
    return model.to(device=target.device, dtype=dtype or target.dtype).eval()


def load_block_model(folder, target, *, dtype: torch.dtype | None = None) -> BlockDraftModel:
    """Read ``config.json`` + ``*.safetensors`` of a published drafter and check it fits ``target``."""
    return _load_folder(folder, target, dtype, read_drafter_config, BlockDraftModel)


def load_dspark_model(folder, target, *, dtype: torch.dtype | None = None) -> BlockDraftModel:
    """Read a DeepSpec DSpark checkpoint folder (``config.json`` + ``*.safetensors``), any head type."""
    return _load_folder(folder, target, dtype, read_dspark_config, build_dspark_model)


def export_state_dict(model: BlockDraftModel, target=None) -> dict[str, torch.Tensor]:
    """The model's tensors under the names its published format uses."""
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    arch = model.cfg.architecture
    if arch == MUSE_ASSISTANT:
        state["encoder.fc.weight"] = state.pop("fc.weight")
        state["encoder.output_norm_enc.weight"] = state.pop("hidden_norm.weight")
    if arch == DSPARK and target is not None:
        # DeepSpec checkpoints carry frozen copies of the target's tables
        state["embed_tokens.weight"] = target.embed.weight.detach().clone()
        state["lm_head.weight"] = target.lm_head.weight.detach().clone()
    return state
