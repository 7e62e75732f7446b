"""Drafters: the protocol and the built-in implementations.

Training lives one layer up, in :mod:`specdec.train`.
"""

from specdec.drafters.agentspec import AgentSpecDrafter
from specdec.drafters.base import Drafter, DraftProposal
from specdec.drafters.block import (
    BlockDrafterConfig,
    DFlash2Drafter,
    DFlashDrafter,
    DSparkDrafter,
    PrefixScheduler,
    StaticDraftKVCache,
    calibration,
    load_drafter,
    read_drafter_config,
    read_dspark_config,
    save_fixture,
)
from specdec.drafters.block.calibration import expected_calibration_error, sequential_temperature_scaling
from specdec.drafters.model import ModelDrafter
from specdec.drafters.ngram import NGramDrafter
from specdec.drafters.oracle import PRESETS as ORACLE_PRESETS
from specdec.drafters.oracle import AcceptanceProfile, OracleDrafter
from specdec.drafters.ssd import SpeculativeSpeculationDrafter

__all__ = [
    "AcceptanceProfile",
    "AgentSpecDrafter",
    "BlockDrafterConfig",
    "DFlash2Drafter",
    "DFlashDrafter",
    "DSparkDrafter",
    "DraftProposal",
    "Drafter",
    "ModelDrafter",
    "NGramDrafter",
    "ORACLE_PRESETS",
    "OracleDrafter",
    "PrefixScheduler",
    "SpeculativeSpeculationDrafter",
    "StaticDraftKVCache",
    "calibration",
    "expected_calibration_error",
    "load_drafter",
    "read_drafter_config",
    "read_dspark_config",
    "save_fixture",
    "sequential_temperature_scaling",
]
