"""Block drafters that read the target's hidden states: DFlash, DFlash2 and DSpark.

One module per part, each importing only the ones above it::

    config      BlockDrafterConfig, read_drafter_config / read_dspark_config, check_fits_target
    cache       DraftKVCache, StaticDraftKVCache, SlotDraftKVCache
    backbone    BlockDraftModel (published parameter names), layer_visibility, grouped_dynamic_conv
    heads       DSpark's sequential heads (markov_step, block_bias, build_dspark_model)
    checkpoint  checkpoint folders <-> BlockDraftModel (load_block_model, load_dspark_model, export_state_dict)
    calibration DSpark confidence calibration (sequential temperature scaling, ECE)
    ingest      where a round's feature rows go in the cache (check_features, kept_rows)
    graphs      the fixed-shape / CUDA-graph draft step (StaticDraftPath)
    batched     BatchedBlockDrafter: one ingestion and one block forward per round for many requests
    drafter     BlockDrafter: feature ingestion and the block forward of one round
    dflash      DFlashDrafter, DFlash2Drafter
    scheduler   PrefixScheduler (DSpark's Algorithm 1)
    dspark      DSparkDrafter
    auto        load_drafter: the class a checkpoint asks for
    fixtures    random-weight checkpoints in the published formats (tests, benchmarks)
"""

from specdec.drafters.block import calibration
from specdec.drafters.block.auto import load_drafter
from specdec.drafters.block.backbone import BlockDraftModel, grouped_dynamic_conv, layer_visibility
from specdec.drafters.block.batched import BatchedBlockDrafter
from specdec.drafters.block.cache import DraftKVCache, SlotDraftKVCache, StaticDraftKVCache
from specdec.drafters.block.checkpoint import export_state_dict, load_block_model, load_dspark_model
from specdec.drafters.block.config import BlockDrafterConfig, check_fits_target, read_drafter_config, read_dspark_config
from specdec.drafters.block.dflash import DFlash2Drafter, DFlashDrafter
from specdec.drafters.block.drafter import BlockDrafter
from specdec.drafters.block.dspark import DSparkDrafter
from specdec.drafters.block.fixtures import fixture_config, random_block_model, save_fixture
from specdec.drafters.block.heads import HEAD_TYPES, block_bias, build_dspark_model, markov_step
from specdec.drafters.block.scheduler import PrefixScheduler

__all__ = [
    "HEAD_TYPES",
    "BatchedBlockDrafter",
    "BlockDraftModel",
    "BlockDrafter",
    "BlockDrafterConfig",
    "DFlash2Drafter",
    "DFlashDrafter",
    "DSparkDrafter",
    "DraftKVCache",
    "PrefixScheduler",
    "SlotDraftKVCache",
    "StaticDraftKVCache",
    "block_bias",
    "build_dspark_model",
    "calibration",
    "check_fits_target",
    "export_state_dict",
    "fixture_config",
    "grouped_dynamic_conv",
    "layer_visibility",
    "load_block_model",
    "load_drafter",
    "load_dspark_model",
    "markov_step",
    "random_block_model",
    "read_drafter_config",
    "read_dspark_config",
    "save_fixture",
]
