"""Test helpers shipped with the library: tiny random targets, forcing drafters, law checks.

Researchers use these to property-test their own decode loops the way specdec tests its own.
"""

from specdec.testing.models import tiny_hf_model, tiny_target
from specdec.testing.drafters import ForcedDrafter, RandomDrafter

__all__ = ["ForcedDrafter", "RandomDrafter", "tiny_hf_model", "tiny_target"]
