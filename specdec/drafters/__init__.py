"""Drafters: the protocol and the built-in implementations."""

from specdec.drafters.base import DraftProposal, Drafter
from specdec.drafters.checkpoints import save_fixture
from specdec.drafters.dflash import BlockDrafterConfig, DFlash2Drafter, DFlashDrafter, load_drafter, read_drafter_config
from specdec.drafters.dspark import DSparkDrafter, PrefixScheduler
from specdec.drafters.model import ModelDrafter
from specdec.drafters.ngram import NGramDrafter
from specdec.drafters.oracle import PRESETS as ORACLE_PRESETS
from specdec.drafters.oracle import AcceptanceProfile, OracleDrafter
from specdec.drafters import training
from specdec.drafters.training import TrainingConfig, TrainingHistory, train_drafter

__all__ = [
    "AcceptanceProfile",
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
