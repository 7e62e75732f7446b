"""specdec: composable, tested-lossless speculative-decoding primitives for PyTorch and Triton."""

from specdec import contracts, data, drafters, engine, forcing, formats, kernels, layers, models, pilot, testing, train, verify
from specdec.contracts import Drafter, DraftProposal, SamplingConfig, Target, Tree, VerifyPlan, VerifyResult
from specdec.decode import GenerationOutput, GenerationStats, generate
from specdec.drafters import (
    DFlash2Drafter,
    DFlashDrafter,
    DSparkDrafter,
    ModelDrafter,
    NGramDrafter,
    OracleDrafter,
    PrefixScheduler,
    load_drafter,
)
from specdec.engine import Engine, RequestFailed
from specdec.forcing import ForcingReport, TokenForcingChecker
from specdec.formats import W12Tensor
from specdec.models import DenseTarget, HFTarget, HybridConfig, HybridTarget, TargetConfig, load_target
from specdec.verify import ChainVerifier, TreeVerifier, TwoLevelVerifier, best_first_tree

__version__ = "0.1.0"

__all__ = [
    "ChainVerifier",
    "DFlash2Drafter",
    "DFlashDrafter",
    "DSparkDrafter",
    "DenseTarget",
    "DraftProposal",
    "Drafter",
    "Engine",
    "ForcingReport",
    "GenerationOutput",
    "GenerationStats",
    "HFTarget",
    "HybridConfig",
    "HybridTarget",
    "ModelDrafter",
    "NGramDrafter",
    "OracleDrafter",
    "PrefixScheduler",
    "RequestFailed",
    "SamplingConfig",
    "Target",
    "TargetConfig",
    "TokenForcingChecker",
    "Tree",
    "TreeVerifier",
    "TwoLevelVerifier",
    "VerifyPlan",
    "VerifyResult",
    "W12Tensor",
    "best_first_tree",
    "contracts",
    "data",
    "layers",
    "drafters",
    "engine",
    "forcing",
    "formats",
    "kernels",
    "generate",
    "load_drafter",
    "load_target",
    "models",
    "pilot",
    "testing",
    "train",
    "verify",
]
