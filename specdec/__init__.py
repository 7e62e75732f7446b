"""specdec: composable, tested-lossless speculative-decoding primitives for PyTorch and Triton."""

from specdec import drafters, forcing, formats, kernels, models, testing, verify
from specdec.decode import GenerationOutput, GenerationStats, generate
from specdec.drafters import DraftProposal, Drafter, ModelDrafter, NGramDrafter
from specdec.forcing import ForcingReport, TokenForcingChecker
from specdec.formats import W12Tensor
from specdec.models import Target, TargetConfig, load_target
from specdec.verify import ChainVerifier, SamplingConfig, TreeVerifier

__version__ = "0.1.0"

__all__ = [
    "ChainVerifier",
    "DraftProposal",
    "Drafter",
    "ForcingReport",
    "GenerationOutput",
    "GenerationStats",
    "ModelDrafter",
    "NGramDrafter",
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
    "load_target",
    "models",
    "testing",
    "verify",
]
