"""Training block drafters for a frozen target, on the target's own continuations.

* :mod:`specdec.train.dflash` -- a DFlash-layout drafter (``DFlashDraftModel``): weighted
  cross-entropy over the block's positions.
* :mod:`specdec.train.dspark` -- a DeepSpec-layout DSpark drafter (backbone, sequential head,
  confidence head): TV and confidence losses, then sequential temperature scaling.

Sits above :mod:`specdec.decode` (it measures acceptance with :func:`specdec.generate`); the drafters
it trains live in :mod:`specdec.drafters.block`.
"""

from specdec.train import dflash, dspark
from specdec.train.dflash import TrainingConfig, TrainingHistory, train_drafter
from specdec.train.dspark import DSparkTrainingConfig, train_dspark

__all__ = ["DSparkTrainingConfig", "TrainingConfig", "TrainingHistory", "dflash", "dspark", "train_drafter", "train_dspark"]
