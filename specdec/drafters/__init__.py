"""Drafters: the protocol and the built-in implementations."""

from specdec.drafters.base import DraftProposal, Drafter
from specdec.drafters.model import ModelDrafter
from specdec.drafters.ngram import NGramDrafter

__all__ = ["DraftProposal", "Drafter", "ModelDrafter", "NGramDrafter"]
