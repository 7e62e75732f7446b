"""The ground floor: the contracts every other part of specdec plugs into. Imports nothing else of specdec.

* :class:`Target` -- what verifiers, drafters and the decode loop may ask of a target (a protocol).
* :class:`DraftProposal` -- a drafter's answer for a round, validated in one place.
* :class:`VerifyPlan` -- the rows and topology of one verify pass, built once per round.
* :class:`VerifyResult` -- a verifier's answer for a round.
* :class:`Drafter` (and :class:`FinishingDrafter`, for drafters with work in flight), :class:`SamplingConfig`, :class:`Tree` -- the drafter protocol, the sampling
  settings and draft trees.
* :class:`RequestScopedVerifier` -- a verifier whose learned state belongs to one request.
"""

from specdec.contracts.drafter import Drafter, FinishingDrafter, PartlyVerifiedDrafter, check_propose_arguments
from specdec.contracts.plan import VerifyPlan
from specdec.contracts.proposal import DraftProposal, validate_proposal
from specdec.contracts.result import VerifyResult
from specdec.contracts.sampling import SamplingConfig
from specdec.contracts.target import Target, TargetOutput, check_target
from specdec.contracts.tree import Tree, tree_attention_mask, tree_positions
from specdec.contracts.verifier import RequestScopedVerifier

__all__ = [
    "DraftProposal",
    "Drafter",
    "FinishingDrafter",
    "PartlyVerifiedDrafter",
    "RequestScopedVerifier",
    "SamplingConfig",
    "Target",
    "TargetOutput",
    "Tree",
    "VerifyPlan",
    "VerifyResult",
    "check_propose_arguments",
    "check_target",
    "tree_attention_mask",
    "tree_positions",
    "validate_proposal",
]
