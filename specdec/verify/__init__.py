"""Verifiers: decide which draft tokens the target accepts, losslessly."""

from specdec.verify.chain import ChainLaws, ChainVerifier, VerifyResult, chain_accept, chain_laws
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample

__all__ = ["ChainLaws", "ChainVerifier", "SamplingConfig", "VerifyResult", "chain_accept", "chain_laws", "logits_to_probs", "sample"]
