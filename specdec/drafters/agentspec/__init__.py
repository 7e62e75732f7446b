"""AgentSpec: structure-isolated, redundancy-budgeted retrieval drafting for agent workloads.

One idea per module: :mod:`.structure` (the blocks an agent declares), :mod:`.token_pieces` (the
cached id -> bytes table), :mod:`.tracker` (which block the output is in), :mod:`.suffix_index`
(history by agent, query and block), :mod:`.redundancy` (the score ``g(c, n)``), :mod:`.budget`
(draft lengths within a batch budget), :mod:`.request` (one request's place in the history),
:mod:`.drafter` (the drafter) and :mod:`.batched` (its form for a continuous-batching engine). Formulas and choices:
``README.md`` beside this file.
"""

from specdec.drafters.agentspec.batched import AgentSpecBatchDrafter
from specdec.drafters.agentspec.budget import BudgetAllocator
from specdec.drafters.agentspec.drafter import AgentSpecDrafter
from specdec.drafters.agentspec.redundancy import Redundancy, RedundancyScorer
from specdec.drafters.agentspec.request import RequestStream
from specdec.drafters.agentspec.structure import Delimiter, StructureSpec
from specdec.drafters.agentspec.suffix_index import PartitionedSuffixIndex
from specdec.drafters.agentspec.token_pieces import TokenPieces
from specdec.drafters.agentspec.tracker import BlockTracker, TrackerState

__all__ = [
    "AgentSpecBatchDrafter",
    "AgentSpecDrafter",
    "BlockTracker",
    "BudgetAllocator",
    "Delimiter",
    "PartitionedSuffixIndex",
    "Redundancy",
    "RedundancyScorer",
    "RequestStream",
    "StructureSpec",
    "TokenPieces",
    "TrackerState",
]
