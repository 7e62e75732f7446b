"""Test helpers shipped with the library: tiny random targets, forcing drafters, law checks.

Researchers use these to property-test their own decode loops the way specdec tests its own.
"""

from specdec.testing.drafters import ForcedDrafter, RandomDrafter
from specdec.testing.faults import (
    LogitBiasFault,
    LogitNoiseFault,
    PositionShiftFault,
    SlotLogitBiasFault,
    StaleStateFault,
    TargetFault,
)
from specdec.testing.laws import (
    MarkovDrafter,
    MarkovLaw,
    MarkovTarget,
    argmax_rate_test,
    autoregressive_law,
    chain_round,
    chain_round_law,
    chi2_power,
    chi2_sample_size,
    distribution_pairs,
    one_sample_chi2,
    probability_vectors,
    sample_continuations,
    speculative_law,
    total_variation,
    tree_round,
    tree_round_law,
    trees,
    two_sample_chi2,
)
from specdec.testing.models import tiny_hf_model, tiny_target
from specdec.testing.tokenizers import tiny_tokenizer
from specdec.testing.transports import HeldJobTransport

__all__ = [
    "HeldJobTransport",
    "ForcedDrafter",
    "LogitBiasFault",
    "LogitNoiseFault",
    "MarkovDrafter",
    "MarkovLaw",
    "MarkovTarget",
    "PositionShiftFault",
    "RandomDrafter",
    "SlotLogitBiasFault",
    "StaleStateFault",
    "TargetFault",
    "argmax_rate_test",
    "autoregressive_law",
    "chain_round",
    "chain_round_law",
    "chi2_power",
    "chi2_sample_size",
    "distribution_pairs",
    "one_sample_chi2",
    "probability_vectors",
    "sample_continuations",
    "speculative_law",
    "tiny_hf_model",
    "tiny_target",
    "tiny_tokenizer",
    "total_variation",
    "tree_round",
    "tree_round_law",
    "trees",
    "two_sample_chi2",
]
