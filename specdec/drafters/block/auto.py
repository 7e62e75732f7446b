"""The drafter class a checkpoint folder asks for."""

from __future__ import annotations

import json
from pathlib import Path

from specdec.drafters.block.config import DFLASH2, DSPARK, read_drafter_config
from specdec.drafters.block.dflash import DFlash2Drafter, DFlashDrafter
from specdec.drafters.block.dspark import DSparkDrafter

__all__ = ["load_drafter"]


def load_drafter(folder, target, **kwargs):
    """The right drafter class for the checkpoint in ``folder`` (by its architecture field).

    Example:
        >>> import tempfile
        >>> from specdec.drafters.block.fixtures import save_fixture
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     type(load_drafter(save_fixture(tmp, "Qwen3DSparkModel", target), target)).__name__
        'DSparkDrafter'
    """
    cfg = read_drafter_config(json.loads((Path(folder) / "config.json").read_text()))
    if cfg.architecture == DSPARK:
        return DSparkDrafter.from_pretrained(folder, target, **kwargs)
    cls = DFlash2Drafter if cfg.architecture == DFLASH2 else DFlashDrafter
    return cls.from_pretrained(folder, target, **kwargs)
