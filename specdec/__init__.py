"""specdec: composable, tested-lossless speculative-decoding primitives for PyTorch and Triton."""

from specdec import drafters, forcing, formats, kernels, models, testing, train, verify
from specdec.decode import GenerationOutput, GenerationStats, generate
from specdec.drafters import (
    DFlash2Drafter,
    DFlashDrafter,
    DraftProposal,
    Drafter,
    DSparkDrafter,
    ModelDrafter,
    NGramDrafter,
    OracleDrafter,
    PrefixScheduler,
    load_drafter,
)
from specdec.forcing import ForcingReport, TokenForcingChecker
from specdec.formats import W12Tensor
from specdec.models import HybridConfig, HybridTarget, Target, TargetConfig, load_target
from specdec.verify import ChainVerifier, SamplingConfig, TreeVerifier

__version__ = "0.1.0"

__all__ = [
    "ChainVerifier",
    "DFlash2Drafter",
    "DFlashDrafter",
    "DSparkDrafter",
    "DraftProposal",
    "Drafter",
    "ForcingReport",
    "GenerationOutput",
    "GenerationStats",
    "HybridConfig",
    "HybridTarget",
    "ModelDrafter",
    "NGramDrafter",
    "OracleDrafter",
    "PrefixScheduler",
    "SamplingConfig",
    "Target",
    "TargetConfig",
    "TokenForcingChecker",
    "TreeVerifier",
    "W12Tensor",
    "drafters",
    "forcing",
    "formats",
    "kernels",
    "generate",
    "load_drafter",
    "load_target",
    "models",
    "testing",
    "train",
    "verify",
]
