"""Drafters: the protocol and the built-in implementations."""

from specdec.drafters.base import DraftProposal, Drafter
from specdec.drafters.checkpoints import save_fixture
from specdec.drafters.dflash import (
    BlockDrafterConfig,
    DFlash2Drafter,
    DFlashDrafter,
    StaticDraftKVCache,
    load_drafter,
    read_drafter_config,
)
from specdec.drafters.dspark import DSparkDrafter, PrefixScheduler, read_dspark_config
from specdec.drafters.model import ModelDrafter
from specdec.drafters.ngram import NGramDrafter
from specdec.drafters.oracle import PRESETS as ORACLE_PRESETS
from specdec.drafters.oracle import AcceptanceProfile, OracleDrafter
from specdec.drafters import calibration, training, training_dspark
from specdec.drafters.calibration import expected_calibration_error, sequential_temperature_scaling
from specdec.drafters.training import TrainingConfig, TrainingHistory, train_drafter
from specdec.drafters.training_dspark import DSparkTrainingConfig, train_dspark

__all__ = [
    "AcceptanceProfile",
    "DSparkTrainingConfig",
    "StaticDraftKVCache",
    "calibration",
    "expected_calibration_error",
    "read_dspark_config",
    "sequential_temperature_scaling",
    "train_dspark",
    "training_dspark",
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
    "load_drafter",
    "read_drafter_config",
    "save_fixture",
    "train_drafter",
    "training",
    "TrainingConfig",
    "TrainingHistory",
]
