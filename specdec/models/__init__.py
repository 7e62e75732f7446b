"""Targets: the lean runtime and its loaders."""

from specdec.contracts.target import Target, TargetOutput
from specdec.models.base import LeanTarget
from specdec.models.config import DENSE_MODEL_TYPES, HYBRID_MODEL_TYPES, SUPPORTED_MODEL_TYPES, TargetConfig
from specdec.models.dense import DenseTarget
from specdec.models.graphs import StaticGraphs
from specdec.models.hf import HFTarget
from specdec.models.hybrid import HybridConfig, HybridTarget, build_hybrid_target, random_hybrid_target
from specdec.models.loading import build_target, empty_target, load_target, random_target, save_hf_checkpoint
from specdec.models.planted import plant_successor_rule, successor_chain
from specdec.models.ragged import RaggedDenseTarget, RequestRows, SlotTarget
from specdec.models.ragged_hybrid import HybridSlotTarget, RaggedHybridTarget
from specdec.models.shapes import QWEN3_0_6B, QWEN3_8B, QWEN3_32B, SHAPES
from specdec.models.skinny_linear import SkinnyLinearWeight, use_skinny_linears

__all__ = [
    "DENSE_MODEL_TYPES",
    "DenseTarget",
    "HFTarget",
    "HYBRID_MODEL_TYPES",
    "HybridConfig",
    "HybridSlotTarget",
    "HybridTarget",
    "LeanTarget",
    "QWEN3_0_6B",
    "QWEN3_8B",
    "RaggedDenseTarget",
    "RaggedHybridTarget",
    "RequestRows",
    "SlotTarget",
    "QWEN3_32B",
    "SHAPES",
    "SUPPORTED_MODEL_TYPES",
    "SkinnyLinearWeight",
    "StaticGraphs",
    "Target",
    "TargetConfig",
    "TargetOutput",
    "build_hybrid_target",
    "build_target",
    "empty_target",
    "load_target",
    "plant_successor_rule",
    "random_hybrid_target",
    "random_target",
    "save_hf_checkpoint",
    "successor_chain",
    "use_skinny_linears",
]
