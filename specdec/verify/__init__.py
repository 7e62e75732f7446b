"""Verifiers: decide which draft tokens the target accepts, losslessly."""

from specdec.contracts.result import VerifyResult
from specdec.verify.chain import ChainLaws, ChainVerifier, chain_accept, chain_laws
from specdec.verify.processors import apply_repetition_penalty, process_logits, row_prefixes
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample
from specdec.verify.tree import (
    Tree,
    TreeVerifier,
    TreeWalk,
    best_first_tree,
    best_first_tree_device,
    greedy_walk,
    match_walk,
    sample_and_match,
    tree_attention_mask,
    tree_positions,
)
from specdec.verify.two_level import TwoLevelRound, TwoLevelStats, TwoLevelVerifier, join_chain_and_subtree
from specdec.verify.two_level_gate import TwoLevelGate

__all__ = [
    "ChainLaws",
    "ChainVerifier",
    "SamplingConfig",
    "Tree",
    "TreeVerifier",
    "TreeWalk",
    "TwoLevelGate",
    "TwoLevelRound",
    "TwoLevelStats",
    "TwoLevelVerifier",
    "VerifyResult",
    "apply_repetition_penalty",
    "best_first_tree",
    "best_first_tree_device",
    "chain_accept",
    "chain_laws",
    "greedy_walk",
    "join_chain_and_subtree",
    "logits_to_probs",
    "match_walk",
    "process_logits",
    "row_prefixes",
    "sample",
    "sample_and_match",
    "tree_attention_mask",
    "tree_positions",
]
