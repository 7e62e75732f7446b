"""Targets: the lean runtime and its loaders."""

from specdec.models.config import SUPPORTED_MODEL_TYPES, TargetConfig
from specdec.models.dense import Target, TargetOutput
from specdec.models.loading import build_target, load_target, save_hf_checkpoint

__all__ = ["SUPPORTED_MODEL_TYPES", "Target", "TargetConfig", "TargetOutput", "build_target", "load_target", "save_hf_checkpoint"]
