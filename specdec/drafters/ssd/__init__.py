"""Speculative speculative decoding (SSD / Saguaro) as composable parts.

While the target verifies round ``t``, pre-draft round ``t + 1`` for the outcomes the verification is
likely to have; at round ``t + 1`` a hit costs no drafting time, a miss falls back to a backup.

* :mod:`~specdec.drafters.ssd.outcome` -- :class:`VerificationOutcome` ``(k, bonus)`` and reading it off the context.
* :mod:`~specdec.drafters.ssd.cache` -- :class:`SpeculationCache`: continuations and their laws, keyed by outcome.
* :mod:`~specdec.drafters.ssd.fan_out` -- uniform and capped-geometric fan-out policies.
* :mod:`~specdec.drafters.ssd.estimators` -- online acceptance-rate and miss-power estimates.
* :mod:`~specdec.drafters.ssd.predictor` -- :class:`OutcomePredictor`: ``P(k accepted, bonus = t)`` from the glue law.
* :mod:`~specdec.drafters.ssd.saguaro` -- :class:`SaguaroTransform`, the proposal-law transform.
* :mod:`~specdec.drafters.ssd.drafting` -- one-step drafting that owns every draw and reported law.
* :mod:`~specdec.drafters.ssd.backups` -- neural just-in-time, n-gram, random, batch-aware choice.
* :mod:`~specdec.drafters.ssd.transport` -- where pre-drafting runs (inline, thread, CUDA side stream).
* :mod:`~specdec.drafters.ssd.drafter` -- :class:`SpeculativeSpeculationDrafter`, the Drafter.
"""

from specdec.drafters.ssd.backups import BACKUP_KINDS, BatchAwareBackup, NeuralBackup, RandomBackup, make_backup
from specdec.drafters.ssd.cache import CachedSpeculation, SpeculationCache
from specdec.drafters.ssd.drafter import SpeculationStats, SpeculativeSpeculationDrafter
from specdec.drafters.ssd.drafting import DraftedChain, StepScores, draft_chain, ranking_law
from specdec.drafters.ssd.estimators import AcceptanceRateEstimator, MissPowerEstimator
from specdec.drafters.ssd.fan_out import GeometricFanOut, UniformFanOut, apportion, geometric_fan_out, uniform_fan_out
from specdec.drafters.ssd.outcome import VerificationOutcome, read_outcome
from specdec.drafters.ssd.predictor import OutcomePredictor
from specdec.drafters.ssd.saguaro import SaguaroTransform
from specdec.drafters.ssd.transport import CudaStreamTransport, PredraftTransport, SequentialTransport, ThreadTransport

__all__ = [
    "BACKUP_KINDS",
    "AcceptanceRateEstimator",
    "BatchAwareBackup",
    "CachedSpeculation",
    "CudaStreamTransport",
    "DraftedChain",
    "GeometricFanOut",
    "MissPowerEstimator",
    "NeuralBackup",
    "OutcomePredictor",
    "PredraftTransport",
    "RandomBackup",
    "SaguaroTransform",
    "SequentialTransport",
    "SpeculationCache",
    "SpeculationStats",
    "SpeculativeSpeculationDrafter",
    "StepScores",
    "ThreadTransport",
    "UniformFanOut",
    "VerificationOutcome",
    "apportion",
    "draft_chain",
    "geometric_fan_out",
    "make_backup",
    "ranking_law",
    "read_outcome",
    "uniform_fan_out",
]
