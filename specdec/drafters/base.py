"""The drafter contract, re-exported where drafters live (it is defined in :mod:`specdec.contracts`)."""

from specdec.contracts.drafter import Drafter
from specdec.contracts.proposal import DraftProposal

__all__ = ["DraftProposal", "Drafter"]
