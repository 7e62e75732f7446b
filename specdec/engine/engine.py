"""``Engine``: speculative decoding of many requests, one target pass per round for all of them.

Each :meth:`Engine.step` is one round for every running request: requests that just joined are
prefilled (in chunks across steps when a forward's rows are capped, ``max_pass_rows``), the others get
their drafter's proposal and their verifier's plan; the rows of all of them go through ONE ragged target
forward (:class:`~specdec.models.ragged.RaggedDenseTarget`, or
:class:`~specdec.models.ragged_hybrid.RaggedHybridTarget` for a hybrid target); then each
request accepts from its own logits with its own generator and commits into its own KV slot. Requests
join (:meth:`Engine.add_request`) and leave (finish or :meth:`Engine.cancel`) between steps; a request
added while every slot is busy waits for one. With a two-level verifier, the step first runs one Q
forward (the target's 8-bit weight view) for its two-level requests and drafts again for them
(:mod:`specdec.engine.two_level`); the exact pass is still one forward for all.

Host work per round: each request's tokens live on the host (appends, stop scans and the contexts of
drafters that read tokens on the host cost no device op). The greedy requests (one-level, no logits
processors) are decided from ONE argmax over all their verify rows and ONE read of it to the host
(:func:`~specdec.verify.chain.greedy_chain_accept_tokens`, :func:`~specdec.verify.walks.greedy_walk_tokens`:
the verifier's own rule on the same argmax values), and their row tokens reach the device in one copy;
sampled requests accept from their own logits with their own generator, as alone.

Batch invariance: with the ``"per_request"`` layout a request's tokens are exactly those
:func:`specdec.generate` gives it alone (same drafter kind, verifier, sampling and seed), whatever its
companions and arrival order, because its rounds have the shapes, logits and random draws they have
alone.
"""

from __future__ import annotations

import numbers
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from itertools import count

import numpy as np
import torch

from specdec.contracts.drafter import Drafter, FinishingDrafter, PartlyVerifiedDrafter
from specdec.contracts.host_ids import ids_tensor
from specdec.contracts.proposal import DraftProposal, proposals_pass_conditions
from specdec.contracts.sampling import SamplingConfig
from specdec.drafters.model import ModelDrafter
from specdec.drafters.ssd.drafter import SpeculativeSpeculationDrafter
from specdec.engine.budget import AcceptanceEstimator, StepTimeTable, allocate, chain_gains
from specdec.engine.drafting import BatchableDrafter, BatchDrafter, RequestAwareDrafter
from specdec.engine.rounds import RoundOutcome, accept_round, check_verifier, plan_round, truncate_chain
from specdec.engine.two_level import TwoLevelRequest, TwoLevelRounds
from specdec.generation import StopCondition, check_proposal_size
from specdec.models.dense import DenseTarget
from specdec.models.hybrid import HybridTarget
from specdec.models.ragged import RaggedDenseTarget, RequestRows
from specdec.models.ragged_hybrid import RaggedHybridTarget
from specdec.verify.chain import ChainVerifier, greedy_chain_accept_tokens
from specdec.verify.processors import process_logits
from specdec.verify.sampling import logits_to_probs, sample
from specdec.verify.tree import TreeVerifier
from specdec.verify.two_level import TwoLevelVerifier
from specdec.verify.walks import greedy_walk_tokens

__all__ = ["Engine", "RequestFailed", "RequestState"]

WAITING, RUNNING, FINISHED, CANCELLED, FAILED = "waiting", "running", "finished", "cancelled", "failed"
PROPOSAL_EXTRAS = tuple(f.name for f in fields(DraftProposal) if f.name != "tokens")


def _id_tensor(tokens: object) -> bool:
    """Whether ``tokens`` is a 1-D int64 tensor of ids (on any device), the dtype the proposal contract asks for (any
    other goes to :meth:`DraftProposal.validate`, which names it)."""
    return isinstance(tokens, torch.Tensor) and tokens.ndim == 1 and tokens.dtype == torch.long


def _host_ids_only(proposal: DraftProposal) -> bool:
    """Whether the proposal is token ids on the host and nothing else: the host alone can check it."""
    return (
        _id_tensor(proposal.tokens)
        and proposal.tokens.is_cpu
        and all(getattr(proposal, name) is None for name in PROPOSAL_EXTRAS)
    )


class RequestFailed(RuntimeError):
    """A request failed during :meth:`Engine.step` (its drafter, proposal, acceptance or ``on_tokens`` raised).

    The step was completed for every other request before this was raised, so they continue exactly
    as they would have; the failed request has status ``"failed"`` and keeps its tokens so far.

    Attributes:
        request_id: the first request that failed in the step.
        error: the exception it raised (also this exception's ``__cause__``).
        emitted: the step's ``{request_id: [m] int64}`` new tokens of the other requests.
        failures: ``[(request_id, error)]`` of every request that failed in the step, in step order.

    Example:
        >>> err = RequestFailed("a", ValueError("bad proposal"), emitted={})
        >>> str(err), err.failures
        ("request 'a' failed: ValueError: bad proposal", [('a', ValueError('bad proposal'))])
    """

    def __init__(self, request_id: Hashable, error: Exception, emitted: dict, failures: list | None = None):
        self.failures = list(failures) if failures else [(request_id, error)]
        more = f" (and {len(self.failures) - 1} more: {[r for r, _ in self.failures[1:]]})" if len(self.failures) > 1 else ""
        super().__init__(f"request {request_id!r} failed: {type(error).__name__}: {error}{more}")
        self.request_id = request_id
        self.error = error
        self.emitted = emitted


@dataclass(eq=False)
class RequestState:
    """One request inside an :class:`Engine` (read it through :meth:`Engine.request`).

    Attributes:
        request_id: the id :meth:`Engine.add_request` returned.
        prompt: ``[P]`` int64.
        max_new_tokens: the most tokens to emit.
        sampling: the request's law; generator: its RNG (``None`` = torch's global one).
        status: ``"waiting"``, ``"running"``, ``"finished"``, ``"cancelled"`` or ``"failed"``.
        error: the exception of a failed request, else ``None``.
        slot: its KV slot while running, else ``None``.
        prefilled: prompt tokens in the request's slot so far; the request drafts once it holds the whole
            prompt (under ``max_pass_rows`` a prompt is prefilled in chunks over several steps).
        rounds, accepted: verify rounds run and draft tokens accepted so far, counted as ``generate`` counts
            them (of a round that a stop or ``max_new_tokens`` ends early, its kept tokens - 1).
        passed_over: rounds in a row in which the request had a draft and the verify budget gave it no node.
        two_level: with a :class:`~specdec.verify.TwoLevelVerifier`, the request's
            :class:`~specdec.engine.two_level.TwoLevelRequest` (its gate, stats and last round) from its first
            round on; else ``None``.
        drafter_request: the per-request drafter arguments given to :meth:`Engine.add_request`.
        buf: the prompt then every emitted token, on the host (on the target's device with a
            :class:`~specdec.verify.TwoLevelVerifier`, whose rounds read it there); ``length`` of it are filled.
        host_buf: ``buf``'s NumPy view when the engine decides greedy rounds on the host (it reads and writes
            single ids through it, without a tensor op); else ``None``.

    Example:
        >>> from specdec.drafters import NGramDrafter
        >>> from specdec.testing import tiny_target
        >>> engine = Engine(tiny_target(seed=0), NGramDrafter(), max_batch=1)
        >>> rid = engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=4); _ = engine.run()
        >>> state = engine.request(rid); state.status, state.tokens.shape
        ('finished', torch.Size([4]))
    """

    request_id: Hashable
    prompt: torch.Tensor
    max_new_tokens: int
    sampling: SamplingConfig
    generator: torch.Generator | None
    drafter: Drafter | None
    stop: StopCondition
    on_tokens: Callable[[torch.Tensor], None] | None
    buf: torch.Tensor
    length: int
    scanned: int
    status: str = WAITING
    slot: int | None = None
    prefilled: int = 0
    rounds: int = 0
    accepted: int = 0
    passed_over: int = 0
    error: Exception | None = None
    fresh_hidden: torch.Tensor | None = None
    prefill_hidden: list = field(default_factory=list)
    pending: dict = field(default_factory=dict)
    drafter_request: dict = field(default_factory=dict)
    estimator: AcceptanceEstimator = field(default_factory=AcceptanceEstimator)
    two_level: TwoLevelRequest | None = None
    host_buf: np.ndarray | None = None

    @property
    def tokens(self) -> torch.Tensor:
        """``[m]`` int64 on the device of :attr:`buf`, the tokens emitted so far (stops applied; at most ``max_new_tokens``)."""
        plen = self.prompt.numel()
        return self.buf[plen : self.scanned].clone()


@dataclass
class _HostRows:
    """A host-decided request's verify rows before they are shipped to the device with its companions'.

    Attributes:
        tokens: ``T`` ints, the rows' tokens ``[root, node_0, ...]``.
        positions, mask: the plan's ``[1, T]`` positions and ``[T, T]`` mask (``None`` for a chain).
    """

    tokens: list[int]
    positions: torch.Tensor | None = None
    mask: torch.Tensor | None = None


class Engine:
    """Speculative decoding of several requests with one target forward per round.

    Args:
        target: a :class:`~specdec.models.DenseTarget` (the engine builds ``max_batch`` KV slots over its
            weights), a :class:`~specdec.models.HybridTarget` (``max_batch`` slots of KV and GDN states:
            a :class:`~specdec.models.ragged_hybrid.RaggedHybridTarget`, layout ``"per_request"`` or ``"packed"``), or a
            ``RaggedDenseTarget`` / ``RaggedHybridTarget`` (its slots are used).
        drafter: a zero-argument callable returning a fresh :class:`~specdec.contracts.Drafter` per
            request (the way for drafters with a cache, e.g. ``lambda: ModelDrafter(draft_model())``), or
            one drafter shared by every request, which must keep no state between calls that its
            proposals depend on (:class:`~specdec.drafters.NGramDrafter`). A drafter with feature taps
            (``target_layer_ids``) receives its request's ``target_hidden`` rows, as in :func:`specdec.generate`.
        verifier: a :class:`~specdec.verify.ChainVerifier` (default), a :class:`~specdec.verify.TreeVerifier`, or a
            :class:`~specdec.verify.TwoLevelVerifier`: then each request has its own copy of the verifier's gate;
            the two-level requests of a step share ONE Q forward (``view=verifier.view``, never committed),
            draft again, and their exact rows join the step's one exact forward beside the one-level
            (tree) requests; each request's tokens and draws equal its ``generate`` output alone
            (:mod:`specdec.engine.two_level`; per-request stats in ``request(id).two_level``). Not
            combined with ``verify_budget``.
        max_batch: requests decoded at once (the KV slots of a ``DenseTarget``; ``<=`` the slots of a
            ``RaggedDenseTarget``).
        num_draft_tokens: the most tokens a drafter may propose per round.
        layout: the ragged forward's layout (:data:`~specdec.models.ragged.LAYOUTS`); default ``"per_request"``
            (batch-invariant) for a ``DenseTarget``, the given target's own for a ``RaggedDenseTarget``.
        verify_budget: a global verify budget across requests (:mod:`specdec.engine.budget`). ``None``
            (default): every request verifies all its drafter proposed. An int ``B >= 0``: at most ``B``
            draft nodes per round over all requests, given to the nodes of highest expected acceptance
            (with ``step_time``, fewer when the batch time they cost is not worth their tokens).
            ``"auto"``: the node total that maximises expected tokens per unit of ``step_time``. Every
            request with a draft verifies at least its first node (so its acceptance estimate keeps
            learning) when the budget has room for all those first nodes. Outputs
            stay exact (a verifier checks a prefix of each chain, or a tree's likeliest nodes
            (:meth:`~specdec.engine.budget.AcceptanceEstimator.in_gain_order`); a chain sampled at
            ``temperature > 0`` is cut by the depth posteriors only, never by its drafted tokens' scores), but a request's
            round shapes now depend on its companions, so its tokens equal its ``generate`` output
            alone only where the target's logits do not depend on row counts (exact arithmetic, or
            greedy decoding away from near-ties).
        step_time: a :class:`~specdec.engine.budget.StepTimeTable` of this target's ragged forward;
            required by ``"auto"``, optional with an int, refused without a budget.
        pooled_acceptance: under a verify budget, each request's acceptance estimate starts from what all
            requests' verified rounds showed (an :class:`~specdec.engine.budget.AcceptanceEstimator` with a
            ``pool`` shared by the engine), so a new request, or a depth it never verified, is not stuck at
            the bare prior (default ``True``). ``False``: each request learns from its own rounds alone, so
            its allocation depends on its companions only through the budget itself.
        batched_drafting: draft for every running request with one call per round (default ``False``:
            each request's drafter proposes in turn). The drafter is then a
            :class:`~specdec.engine.drafting.BatchDrafter` (e.g. a
            :class:`~specdec.engine.drafting.BatchedModelDrafter` with ``slots >= max_batch``), or a drafter
            (or factory, called once here to see its kind) with a ``batched(slots=...)`` method, such as
            :class:`~specdec.drafters.ModelDrafter`, whose batched form drafts with one draft-model forward
            per draft step over all requests (its ``"packed"`` layout: drafts agree with the unbatched ones
            to rounding, outputs stay exact), a block drafter (DFlash, DFlash2, DSpark: one feature ingestion
            and one block forward a round for all requests,
            :class:`~specdec.drafters.block.BatchedBlockDrafter`), or
            :class:`~specdec.drafters.AgentSpecDrafter` (one history shared by all requests). Other drafters
            (n-gram, oracle: no forward to batch) keep their per-request calls. A batched drafter that is a
            :class:`~specdec.engine.drafting.RequestAwareDrafter` gets each request's ``drafter_request``
            (see :meth:`add_request`) when it joins, and its prompt and output when it ends.
        max_pass_rows: the most rows one target forward holds (chunked prefill). A joining request's prompt
            then goes in chunks over successive steps, each in the same forward as the other requests' verify
            rows, filling the rows they leave under the cap; the request emits its first token after its last
            chunk, and its drafter starts from the whole prompt (``target_hidden`` of every prompt row), as
            without chunks. Without a verify budget every request still verifies all its drafter proposed, so
            the cap must hold ``max_batch`` full rounds (``max_batch x`` :attr:`round_rows`) and prefill chunks
            take the rows left over; with a verify budget each verifying request's root row comes first, then
            the prefill chunks (fixed rows of the budget's allocation), and the budget fits draft nodes in
            what is left. A chunk also keeps within the target's
            :attr:`~specdec.models.slots.RequestSlots.static_request_rows` (64 rows for a graphed hybrid).
            ``"auto"`` (default): the target's largest row bucket
            (:attr:`~specdec.models.slots.RequestSlots.row_buckets`; a forward past it runs eagerly, outside
            any CUDA graph) when the target has buckets and that many rows meet the rule above, else ``None``
            (no cap: a prompt is prefilled in one forward). Not with a ``TwoLevelVerifier`` (its exact rows
            are known only after its Q pass). A prompt prefilled in chunks rounds differently from one
            prefilled whole (a GEMM's rows depend on how many rows share it), so its tokens equal its output
            alone where the logits do not depend on row counts (exact arithmetic, greedy decoding away
            from near-ties), as under a verify budget.

    Attributes:
        max_pass_rows: the cap in force (``"auto"`` resolved), or ``None``.
        target_passes: exact target forwards run so far (one per step with rows).
        prefill_rows: prompt rows those forwards held in all.
        last_pass_rows: rows of the last step's exact forward (0 when it ran none).
        last_allocation: ``{request_id: draft nodes}`` the verify budget gave in the last step.

    Example:
        >>> from specdec.testing import tiny_target
        >>> from specdec.drafters import NGramDrafter
        >>> import specdec
        >>> target = tiny_target(seed=0)
        >>> engine = Engine(target, NGramDrafter(), max_batch=2)
        >>> a = engine.add_request(torch.tensor([1, 2, 3, 1, 2]), max_new_tokens=8)
        >>> b = engine.add_request(torch.tensor([5, 6]), max_new_tokens=4, temperature=1.0, seed=3)
        >>> outputs = engine.run()
        >>> alone = specdec.generate(target, torch.tensor([[1, 2, 3, 1, 2]]), max_new_tokens=8, drafter=NGramDrafter())
        >>> torch.equal(outputs[a], alone.tokens[0]), outputs[b].shape
        (True, torch.Size([4]))
    """

    def __init__(
        self,
        target: DenseTarget | HybridTarget | RaggedDenseTarget | RaggedHybridTarget,
        drafter: Drafter | Callable[[], Drafter],
        verifier: ChainVerifier | TreeVerifier | TwoLevelVerifier | None = None,
        *,
        max_batch: int,
        num_draft_tokens: int = 4,
        layout: str | None = None,
        verify_budget: int | str | None = None,
        step_time: StepTimeTable | None = None,
        batched_drafting: bool = False,
        pooled_acceptance: bool = True,
        max_pass_rows: int | str | None = "auto",
    ):
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch: expected an int >= 1, got {max_batch!r}")
        if isinstance(target, (RaggedDenseTarget, RaggedHybridTarget)):
            if max_batch > target.slots:
                raise ValueError(f"max_batch: expected at most the target's {target.slots} slots, got {max_batch}")
            if layout is not None and layout != target.layout:
                raise ValueError(f"layout: the {type(target).__name__} given runs layout {target.layout!r}, got {layout!r}")
            self.target = target
        elif isinstance(target, DenseTarget):
            self.target = RaggedDenseTarget(target, slots=max_batch, layout="per_request" if layout is None else layout)
        elif isinstance(target, HybridTarget):
            self.target = RaggedHybridTarget(target, slots=max_batch, layout="per_request" if layout is None else layout)
        else:
            raise TypeError(
                f"target: expected a DenseTarget or a RaggedDenseTarget, a HybridTarget or a RaggedHybridTarget, "
                f"got {type(target).__name__}"
            )
        if not isinstance(batched_drafting, bool):
            raise TypeError(f"batched_drafting: expected a bool, got {type(batched_drafting).__name__}")
        self._batch_drafter: BatchDrafter | None = None
        self._shared_drafter: Drafter | None = None
        self._drafter_factory = None
        # a class is a factory even though its attributes make it look like a Drafter instance
        if isinstance(drafter, BatchDrafter) and not isinstance(drafter, type):
            if not batched_drafting:
                raise ValueError(
                    f"drafter: a BatchDrafter ({type(drafter).__name__}) drafts for all requests at once; "
                    "pass batched_drafting=True, got batched_drafting=False"
                )
            if drafter.slots < max_batch:
                raise ValueError(
                    f"drafter: expected a BatchDrafter with at least max_batch={max_batch} slots, got {drafter.slots}"
                )
            self._batch_drafter = self._check_drafter(drafter)
        elif isinstance(drafter, Drafter) and not isinstance(drafter, type):
            self._shared_drafter = drafter
            self._drafter_factory = None
            self._check_drafter(drafter)
        elif callable(drafter):
            self._drafter_factory = drafter
        else:
            raise TypeError(f"drafter: expected a Drafter or a callable returning one, got {type(drafter).__name__}")
        if batched_drafting and self._batch_drafter is None:
            probe = self._shared_drafter if self._drafter_factory is None else self._check_drafter(self._drafter_factory())
            if isinstance(probe, BatchableDrafter):
                self._batch_drafter = self._check_drafter(probe.batched(slots=max_batch))
        self.batched_drafting = batched_drafting
        self._request_aware = isinstance(self._batch_drafter, RequestAwareDrafter)
        verifier = ChainVerifier() if verifier is None else verifier
        self.two_level: TwoLevelRounds | None = None
        if type(verifier) is TwoLevelVerifier:
            self.two_level = TwoLevelRounds(verifier)
            self.two_level.check_target(self.target)
            if verify_budget is not None:
                raise ValueError(
                    "verify_budget: a global verify budget does not allocate a TwoLevelVerifier's exact-pass nodes "
                    f"(they are chosen after the Q pass and the second draft); got verify_budget={verify_budget!r} "
                    "with verifier=TwoLevelVerifier: pass verify_budget=None, or a TreeVerifier"
                )
            self.verifier = verifier
        elif type(verifier) in (ChainVerifier, TreeVerifier):
            self.verifier = check_verifier(verifier)
        else:
            raise TypeError(
                f"verifier: expected a ChainVerifier, a TreeVerifier or a TwoLevelVerifier, got {type(verifier).__name__}"
            )
        if isinstance(num_draft_tokens, bool) or not isinstance(num_draft_tokens, int) or num_draft_tokens < 0:
            raise ValueError(f"num_draft_tokens: expected an int >= 0, got {num_draft_tokens!r}")
        if verify_budget is not None and verify_budget != "auto":
            if isinstance(verify_budget, bool) or not isinstance(verify_budget, int) or verify_budget < 0:
                raise ValueError(f"verify_budget: expected None, an int >= 0 or 'auto', got {verify_budget!r}")
        if step_time is not None and not isinstance(step_time, StepTimeTable):
            raise TypeError(f"step_time: expected a StepTimeTable or None, got {type(step_time).__name__}")
        if verify_budget == "auto" and step_time is None:
            raise ValueError("step_time: verify_budget='auto' needs a StepTimeTable, got None")
        if verify_budget is None and step_time is not None:
            raise ValueError("step_time: only read with a verify_budget, got a table with verify_budget=None")
        self.max_batch = max_batch
        # Requests' tokens live on the host: appends, stop scans, roots and host-reading drafters' contexts
        # cost no device op. Two-level rounds read them on the device.
        self._token_device = torch.device("cpu") if self.two_level is None else self.target.device
        self._device = self.target.device
        self.num_draft_tokens = num_draft_tokens
        self.verify_budget = verify_budget
        self.step_time = step_time
        if not isinstance(pooled_acceptance, bool):
            raise TypeError(f"pooled_acceptance: expected a bool, got {type(pooled_acceptance).__name__}")
        self.acceptance_pool = AcceptanceEstimator() if pooled_acceptance else None
        self.max_pass_rows = self._resolve_max_pass_rows(max_pass_rows)
        self.last_allocation: dict[Hashable, int] = {}
        self._requests: dict[Hashable, RequestState] = {}
        self._waiting: deque[Hashable] = deque()
        self._running: list[Hashable] = []
        self._free_slots = list(range(max_batch))
        self._ids = count()
        self.target_passes = 0
        self.prefill_rows = 0
        self.last_pass_rows = 0
        self._exact_seconds = 0.0

    @property
    def round_rows(self) -> int | None:
        """The most rows one request's verify round can hold: its root and every node it may verify.

        ``1 + num_draft_tokens``; with a :class:`~specdec.verify.TreeVerifier` and drafts, ``1 +
        max(num_draft_tokens, budget)`` (the verifier grows a best-first tree of up to ``budget`` nodes from
        a chain's draft laws); ``None`` with a :class:`~specdec.verify.TwoLevelVerifier`, whose exact rows
        are chosen after its Q pass.

        Example:
            >>> from specdec.testing import tiny_target
            >>> from specdec.drafters import NGramDrafter
            >>> Engine(tiny_target(seed=0), NGramDrafter(), TreeVerifier(budget=8), max_batch=2, num_draft_tokens=4).round_rows
            9
        """
        if self.two_level is not None:
            return None
        k = self.num_draft_tokens
        if type(self.verifier) is TreeVerifier and k:
            return 1 + max(k, self.verifier.budget)
        return 1 + k

    def _resolve_max_pass_rows(self, max_pass_rows: object) -> int | None:
        """The cap of ``max_pass_rows`` (``"auto"`` resolved against the target's row buckets), checked."""
        if max_pass_rows is None:
            return None
        auto = isinstance(max_pass_rows, str) and max_pass_rows == "auto"
        if not auto and (isinstance(max_pass_rows, bool) or not isinstance(max_pass_rows, int) or max_pass_rows < 1):
            raise ValueError(f"max_pass_rows: expected None, 'auto' or an int >= 1, got {max_pass_rows!r}")
        if auto and self.two_level is not None:
            return None
        if self.two_level is not None:
            raise ValueError(
                "max_pass_rows: a TwoLevelVerifier's exact rows are chosen after its Q pass and second draft, so no "
                f"cap can be planned for them; got max_pass_rows={max_pass_rows} with verifier=TwoLevelVerifier: "
                "pass max_pass_rows=None"
            )
        # without a verify budget a forward may hold max_batch full rounds; with one, the roots
        needed = self.max_batch if self.verify_budget is not None else self.max_batch * self.round_rows
        if auto:
            buckets = self.target.row_buckets
            return buckets[-1] if buckets and buckets[-1] >= needed else None
        if max_pass_rows < self.max_batch:
            raise ValueError(
                f"max_pass_rows: expected at least max_batch={self.max_batch} (each running request's root row goes "
                f"into every forward), got {max_pass_rows}"
            )
        if max_pass_rows < needed:
            raise ValueError(
                f"max_pass_rows: without a verify budget every request verifies all its drafter proposes, so a forward "
                f"must hold max_batch={self.max_batch} full rounds of {self.round_rows} rows ({needed} rows), got "
                f"{max_pass_rows}: pass a verify_budget (it fits draft nodes under the cap), a larger max_pass_rows, or None"
            )
        return max_pass_rows

    def _check_drafter(self, drafter: object) -> Drafter:
        if isinstance(drafter, type) or not isinstance(drafter, (Drafter, BatchDrafter)):
            raise TypeError(f"drafter: expected a Drafter (reset() and propose()), got {type(drafter).__name__}")
        if drafter.vocab_size is not None and drafter.vocab_size != self.target.vocab_size:
            raise ValueError(f"drafter: vocabulary size {drafter.vocab_size} differs from the target's {self.target.vocab_size}")
        for layer in self._taps_of(drafter):
            if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= self.target.config.num_layers:
                raise ValueError(
                    f"drafter: target_layer_ids expected indices in [0, {self.target.config.num_layers}], got {layer!r}"
                )
        return drafter

    @staticmethod
    def _draft_model_of(drafter: Drafter | None) -> object | None:
        """The draft model whose cache ``drafter`` keeps (a ModelDrafter's, also inside an SSD wrapper), else ``None``."""
        while isinstance(drafter, SpeculativeSpeculationDrafter):
            drafter = drafter.base
        return drafter.target if isinstance(drafter, ModelDrafter) else None

    def _check_own_draft_model(self, drafter: Drafter) -> None:
        """A factory's model drafter must hold a draft model no live request's drafter holds: each keeps its own cache."""
        model = self._draft_model_of(drafter)
        if model is None:
            return
        for other in self._requests.values():
            if other.status in (WAITING, RUNNING) and self._draft_model_of(other.drafter) is model:
                raise ValueError(
                    f"drafter: the factory gave request {other.request_id!r}'s draft model to this request too; each request's "
                    "ModelDrafter keeps its cache in its model, so each needs its own (build the model in the factory), or "
                    "pass batched_drafting=True to share one model's weights over slots"
                )

    @staticmethod
    def _taps_of(drafter: Drafter | BatchDrafter) -> tuple[int, ...]:
        return tuple(getattr(drafter, "target_layer_ids", ()) or ())

    def _taps_for(self, state: RequestState) -> tuple[int, ...]:
        return self._taps_of(self._batch_drafter if self._batch_drafter is not None else state.drafter)

    def add_request(
        self,
        prompt: torch.Tensor | Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        sampling: SamplingConfig | None = None,
        seed: int | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        request_id: Hashable | None = None,
        on_tokens: Callable[[torch.Tensor], None] | None = None,
        drafter_request: Mapping[str, object] | None = None,
    ) -> Hashable:
        """Queue a request; it joins the running batch at the next :meth:`step` with a free slot.

        Every argument is checked here, before the request is stored: a bad request raises and leaves the
        engine and its other requests as they were.

        Args:
            prompt: ``[P]`` int64 or int32 token ids (or a list of ints), ``P >= 1``.
            max_new_tokens: tokens to emit (fewer if an EOS comes first); ``P + max_new_tokens`` must fit a slot.
            temperature, top_k, top_p: the target law (``temperature=0``: greedy); or give ``sampling``.
            sampling: a :class:`~specdec.contracts.SamplingConfig` instead of the three above.
            seed: the request's own generator seed (its draws are those of ``generate(..., seed=seed)``
                alone); ``None`` draws from torch's global RNG, which companions share.
            eos_token_id: stop after emitting any of these ids.
            request_id: any hashable id not in use; default the next integer.
            on_tokens: called with ``[m]`` int64 new tokens each step that emits some (streaming).
            drafter_request: keyword arguments for this request's drafter, e.g. AgentSpec's
                ``dict(agent=..., query=..., spec=...)``; only a batched drafter that is a
                :class:`~specdec.engine.drafting.RequestAwareDrafter` takes them (it checks them here).

        Returns:
            the request's id.
        """
        target = self.target
        if isinstance(prompt, (list, tuple)):
            bad = next((t for t in prompt if isinstance(t, bool) or not isinstance(t, numbers.Integral)), None)
            if bad is not None:
                raise TypeError(f"prompt: expected integer token ids, got {bad!r} ({type(bad).__name__})")
            out = next((int(t) for t in prompt if not 0 <= int(t) < target.vocab_size), None)
            if out is not None:
                raise ValueError(f"prompt: expected token ids in [0, {target.vocab_size}), got {out}")
            prompt = torch.tensor([int(t) for t in prompt], dtype=torch.long, device=target.device)
        if not isinstance(prompt, torch.Tensor) or prompt.ndim != 1 or prompt.dtype not in (torch.long, torch.int32):
            desc = f"{prompt.dtype} {tuple(prompt.shape)}" if isinstance(prompt, torch.Tensor) else type(prompt).__name__
            raise TypeError(f"prompt: expected a 1-D int64 or int32 tensor of token ids (as generate takes), got {desc}")
        prompt = prompt.long()
        if prompt.numel() < 1:
            raise ValueError("prompt: expected at least one token, got 0")
        if prompt.device != target.device:
            raise ValueError(f"prompt: expected device {target.device}, got {prompt.device}")
        low, high = int(prompt.min()), int(prompt.max())
        if low < 0 or high >= target.vocab_size:
            raise ValueError(f"prompt: expected token ids in [0, {target.vocab_size}), got ids in [{low}, {high}]")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
        if prompt.numel() + max_new_tokens > target.max_seq_len:
            raise ValueError(
                f"prompt: length {prompt.numel()} + max_new_tokens {max_new_tokens} exceeds a slot's max_seq_len {target.max_seq_len}"
            )
        if sampling is None:
            sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
        elif not isinstance(sampling, SamplingConfig):
            raise TypeError(f"sampling: expected a SamplingConfig or None, got {type(sampling).__name__}")
        elif (temperature, top_k, top_p) != (0.0, 0, 1.0):
            raise ValueError("sampling: give either sampling or temperature/top_k/top_p, got both")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed: expected an int or None, got {type(seed).__name__}")
        if seed is not None and not -(2**63) <= seed < 2**64:
            raise ValueError(f"seed: expected an int in [-2**63, 2**64) (a torch.Generator seed), got {seed}")
        if on_tokens is not None and not callable(on_tokens):
            raise TypeError(f"on_tokens: expected a callable or None, got {type(on_tokens).__name__}")
        if request_id is not None:
            try:
                hash(request_id)
            except TypeError:
                raise TypeError(f"request_id: expected a hashable id, got {type(request_id).__name__}") from None
            if request_id in self._requests:
                raise ValueError(f"request_id: {request_id!r} is already in use (pop() a finished request to reuse its id)")
        if drafter_request is not None:
            if not isinstance(drafter_request, Mapping) or not all(isinstance(k, str) for k in drafter_request):
                raise TypeError(f"drafter_request: expected a mapping of argument names to values, got {drafter_request!r}")
            if not self._request_aware:
                drafter_kind = type(self._batch_drafter or self._shared_drafter or self._drafter_factory).__name__
                raise TypeError(
                    f"drafter_request: the engine's drafter ({drafter_kind}) takes no per-request arguments; expected "
                    f"a batched drafter with begin_request(slot, **kw) (a RequestAwareDrafter), got {dict(drafter_request)!r}"
                )
            self._batch_drafter.check_request(**drafter_request)
        stop = StopCondition(eos_token_id, vocab_size=target.vocab_size, device=self._token_device)
        if self._batch_drafter is not None:
            drafter = None
        elif self._drafter_factory is None:
            drafter = self._shared_drafter
        else:
            drafter = self._check_drafter(self._drafter_factory())
            self._check_own_draft_model(drafter)
        if request_id is None:  # taken only once every check has passed: a refused request uses up no id
            request_id = next(self._ids)
            while request_id in self._requests:
                request_id = next(self._ids)
        plen = prompt.numel()
        # room for a round that emits up to num_draft_tokens + 1 tokens past max_new_tokens - 1
        buf = torch.empty(plen + max_new_tokens + self.num_draft_tokens + 1, dtype=torch.long, device=self._token_device)
        buf[:plen] = self._to_token_device(prompt)
        generator = None if seed is None else torch.Generator(device=target.device).manual_seed(seed)
        self._requests[request_id] = RequestState(
            request_id=request_id,
            prompt=prompt.clone(),
            max_new_tokens=max_new_tokens,
            sampling=sampling,
            generator=generator,
            drafter=drafter,
            stop=stop,
            on_tokens=on_tokens,
            buf=buf,
            length=plen,
            scanned=plen,
            drafter_request=dict(drafter_request or {}),
            estimator=AcceptanceEstimator(pool=self.acceptance_pool),
            # a two-level round may grow buf, and never decides on the host
            host_buf=buf.numpy() if self.two_level is None else None,
        )
        self._waiting.append(request_id)
        return request_id

    def _get(self, request_id: Hashable) -> RequestState:
        try:
            return self._requests[request_id]
        except (KeyError, TypeError):
            raise KeyError(f"request_id: no request {request_id!r} in this engine") from None

    def request(self, request_id: Hashable) -> RequestState:
        """The state of a request (status, tokens so far, rounds); ``KeyError`` for an unknown id."""
        return self._get(request_id)

    def output(self, request_id: Hashable) -> torch.Tensor:
        """``[m]`` int64, the tokens request ``request_id`` has emitted so far (all of them once finished)."""
        return self._get(request_id).tokens

    def status(self, request_id: Hashable) -> str:
        """``"waiting"``, ``"running"``, ``"finished"``, ``"cancelled"`` or ``"failed"``."""
        return self._get(request_id).status

    def pop(self, request_id: Hashable) -> torch.Tensor:
        """Forget a finished, cancelled or failed request and return its tokens (its id can then be reused)."""
        state = self._get(request_id)
        if state.status not in (FINISHED, CANCELLED, FAILED):
            raise ValueError(f"request_id: request {request_id!r} is {state.status}; cancel() it first or let it finish")
        del self._requests[request_id]
        return state.tokens

    def cancel(self, request_id: Hashable) -> None:
        """Stop a waiting or running request now; its slot is freed for the next step, its tokens so far kept.

        The other requests are unaffected: their slots, drafters and generators are their own. A request
        that already finished, failed or was cancelled is left as it is.

        Raises:
            Exception: what the request's drafter raised in its end-of-request hook (``finish()``, e.g. SSD's
                pre-draft job's error); the request is cancelled and its slot freed all the same.

        Example:
            >>> from specdec.testing import tiny_target
            >>> from specdec.drafters import NGramDrafter
            >>> engine = Engine(tiny_target(seed=0), NGramDrafter(), max_batch=2)
            >>> a, b = (engine.add_request(torch.tensor([1, 2, 3]), max_new_tokens=20) for _ in range(2))
            >>> _ = engine.step(); engine.cancel(a)
            >>> engine.status(a), engine.output(a).shape, engine.running
            ('cancelled', torch.Size([1]), (1,))
        """
        state = self._get(request_id)
        if state.status == WAITING:
            self._waiting.remove(request_id)
            state.status = CANCELLED
        elif state.status == RUNNING:
            hook_error = self._release(state, CANCELLED)
            if hook_error is not None:  # cancelled all the same; the caller hears of the hook's error
                raise hook_error

    def _release(self, state: RequestState, status: str) -> Exception | None:
        """Take a running request out of the batch with its final ``status``, then run its drafter's end-of-request
        hooks; returns the error a hook raised (the request has left the batch and its slot is free either way)."""
        slot = state.slot
        self._running.remove(state.request_id)
        self.target.reset(slot)
        self._free_slots.append(slot)
        state.slot = None
        state.prefill_hidden = []
        state.status = status
        try:
            if self._request_aware:
                self._batch_drafter.end_request(slot, state.buf[: state.scanned], prompt_len=state.prompt.numel())
            if isinstance(state.drafter, FinishingDrafter):
                state.drafter.finish()
        except Exception as err:
            return err
        return None

    @property
    def has_work(self) -> bool:
        """Whether any request is waiting or running."""
        return bool(self._waiting or self._running)

    @property
    def running(self) -> tuple[Hashable, ...]:
        """Ids of the running requests, in the order they joined."""
        return tuple(self._running)

    @property
    def waiting(self) -> tuple[Hashable, ...]:
        """Ids of the queued requests, first come first."""
        return tuple(self._waiting)

    def _admit(self, failures: list[tuple[RequestState, Exception]]) -> list[RequestState]:
        """Waiting requests into free slots; one whose drafter fails to start fails alone (into ``failures``)."""
        joined = []
        while self._waiting and self._free_slots and len(self._running) < self.max_batch:
            state = self._requests[self._waiting.popleft()]
            self._free_slots.sort()
            state.slot = self._free_slots.pop(0)
            state.status = RUNNING
            self._running.append(state.request_id)
            self.target.reset(state.slot)
            try:
                if self._batch_drafter is not None:
                    self._batch_drafter.reset(state.slot)
                    if self._request_aware:
                        self._batch_drafter.begin_request(state.slot, **state.drafter_request)
                else:
                    state.drafter.reset()
            except Exception as err:
                self._fail(state, err)
                failures.append((state, err))
                continue
            joined.append(state)
        return joined

    def _draft_size(self, state: RequestState) -> int:
        """The most tokens the request's drafter may propose this round."""
        emitted = state.length - state.prompt.numel()
        return max(0, min(self.num_draft_tokens, state.max_new_tokens - emitted - 1, self.target.room(state.slot) - 1))

    def _propose(self, state: RequestState) -> DraftProposal:
        """The request's drafter proposal for this round (checked for type and size)."""
        k = self._draft_size(state)
        extra = {"target_hidden": state.fresh_hidden} if self._taps_of(state.drafter) else {}
        proposal = state.drafter.propose(
            self._context(state.drafter, state), k, sampling=state.sampling, generator=state.generator, **extra
        )
        return self._take_proposal(state, proposal, k)

    def _to_token_device(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` where the requests' tokens live (a device-to-host read when that is the host)."""
        return tokens.cpu() if self._token_device.type == "cpu" else tokens.to(self._token_device)

    def _to_device(self, host: torch.Tensor) -> torch.Tensor:
        """``host`` on the target's device without a stream synchronisation.

        A pageable host tensor's non-blocking copy is staged before the call returns, so the host tensor
        may change right after.
        """
        return host.to(self._device, non_blocking=True)

    def _context(self, drafter: object, state: RequestState) -> torch.Tensor:
        """The request's tokens so far for ``drafter``: on the host for a drafter with ``host_context = True``
        (it reads tokens on the host: no copy), else on the target's device."""
        context = state.buf[: state.length]
        return context if getattr(drafter, "host_context", False) else self._to_device(context)

    def _validate(self, proposal: DraftProposal) -> list[int] | None:
        """``proposal.validate``, decided on the host without a tensor op for a host proposal of token ids only.

        Returns the proposal's token ids as ints when it was decided that way (else ``None``).
        """
        vocab_size = self.target.vocab_size
        if _host_ids_only(proposal):
            ids = proposal.tokens.tolist()
            if not ids or (min(ids) >= 0 and max(ids) < vocab_size):
                return ids
        proposal.validate(vocab_size=vocab_size)
        return None

    def _host_greedy(self, state: RequestState) -> bool:
        """Whether the request's round is decided from host argmax values (greedy, one-level, no logits processors)."""
        sampling = state.sampling
        return self.two_level is None and sampling.greedy and not sampling.needs_prefix

    def _on_target_device(self, proposal: DraftProposal) -> DraftProposal:
        """``proposal`` with its tensors on the target's device (the per-request acceptance reads them there)."""
        if proposal.tokens.device == self._device:
            return proposal
        moved = {}
        for f in fields(proposal):
            value = getattr(proposal, f.name)
            if isinstance(value, torch.Tensor):
                moved[f.name] = self._to_device(value)
            elif value is not None:  # a Tree
                moved[f.name] = value.to(self._device)
        return replace(proposal, **moved)

    def _take_proposal(self, state: RequestState, proposal: object, k: int) -> DraftProposal:
        if not isinstance(proposal, DraftProposal):
            raise TypeError(f"drafter: propose() returned {type(proposal).__name__}, expected a DraftProposal")
        check_proposal_size(proposal, k)
        if type(self.verifier) is ChainVerifier and self.two_level is None:
            proposal = proposal.chain()  # a tree's first root-to-leaf path, as ChainVerifier.verify checks it
        state.pending = {"proposal": proposal}
        return proposal

    def _propose_batch(self, states: list[RequestState]) -> list[tuple[object, int]]:
        """Every drafting request's proposal from one :meth:`BatchDrafter.propose_batch` call, with its size limit."""
        sizes = [self._draft_size(state) for state in states]
        proposals = self._batch_drafter.propose_batch(
            [state.slot for state in states],
            [self._context(self._batch_drafter, state) for state in states],
            sizes,
            samplings=[state.sampling for state in states],
            generators=[state.generator for state in states],
            target_hiddens=[state.fresh_hidden for state in states],
        )
        if not isinstance(proposals, (list, tuple)) or len(proposals) != len(states):
            got = len(proposals) if isinstance(proposals, (list, tuple)) else type(proposals).__name__
            raise TypeError(f"drafter: propose_batch() expected to return {len(states)} proposals, got {got}")
        return list(zip(proposals, sizes))

    def _candidates(self, state: RequestState) -> list[float] | None:
        """Under a verify budget: the nodes the request could verify, as non-increasing expected gains.

        Reads only the drafter's proposal and the request's past rounds (its estimator). ``None`` for a chain
        checked on the host as token ids only, and for every chain the chain rule verifies at ``temperature > 0``:
        :meth:`_with_chain_gains` works those out for all requests at once, from the depth posteriors alone. A
        sampled chain's length must not follow its drawn tokens (scores read at ``x_j`` would verify ``x_j``
        more often the likelier the drafter found it, and the chain rule's output would no longer be the
        target's law); a tree's shape may, since sample-and-match is exact for any tree the target did not choose.
        """
        proposal = state.pending["proposal"]
        if self.verifier.validate_proposals and not state.pending.get("validated"):
            state.pending["ids"] = self._validate(proposal)
        tree = None
        if type(self.verifier) is TreeVerifier:
            # the budget keeps a tree's first nodes: put the likeliest first (any node order verifies the same law)
            tree = self.verifier.build_tree(proposal, room=self.target.room(state.slot))
            tree, scores = state.estimator.in_gain_order(proposal, tree)
            if scores is not None:
                state.pending["path_scores"] = scores
        state.pending["tree"] = tree
        if tree is None and (state.pending.get("ids") is not None or not state.sampling.greedy):
            return None
        return state.estimator.gains(proposal, tree, scores=state.pending.get("path_scores"))

    def _with_chain_gains(
        self, proposed: list[tuple[RequestState, list[float] | None]]
    ) -> list[tuple[RequestState, list[float]]]:
        """``proposed`` with the gains :meth:`_candidates` left to work out together (:func:`~specdec.engine.budget.chain_gains`)."""
        chains = [state for state, gains in proposed if gains is None]
        if not chains:
            return proposed
        together = iter(
            chain_gains([state.estimator for state in chains], [state.pending["proposal"].num_tokens for state in chains])
        )
        return [(state, next(together) if gains is None else gains) for state, gains in proposed]

    def _plan(self, state: RequestState, nodes: int | None = None) -> RequestRows | _HostRows:
        """The request's verify rows for the shared forward; ``nodes`` = its budget's node count (else all).

        A round decided on the host (:meth:`_host_greedy`) plans on the host and returns :class:`_HostRows`;
        the step ships every such request's row tokens to the device in one copy.
        """
        if self.two_level is not None:
            return self.two_level.rows(self.target, state)
        if self._host_greedy(state) and type(self.verifier) is ChainVerifier:
            drafts = self._host_chain_drafts(state, nodes)
            state.pending.update(nodes=nodes, drafts=drafts)
            return _HostRows([int(state.host_buf[state.length - 1]), *drafts])
        target, slot = self.target, state.slot
        proposal, tree = state.pending["proposal"], state.pending.get("tree")
        if nodes is not None:
            if tree is not None:
                tree = tree.truncate(nodes)
            else:
                proposal = truncate_chain(proposal, nodes)
        if self._host_greedy(state):  # a tree, planned on the host (where the engine keeps the root)
            plan = plan_round(
                self.verifier,
                proposal,
                state.buf[state.length - 1 : state.length],
                prefix_len=target.length(slot),
                room=target.room(slot),
                vocab_size=target.vocab_size,
                tree=tree,
            )
            state.pending.update(plan=plan, verified=proposal, nodes=nodes)
            return _HostRows(plan.tokens[0].tolist(), plan.positions, plan.mask)
        proposal = self._on_target_device(proposal)
        plan = plan_round(
            self.verifier,
            proposal,
            self._to_device(state.buf[state.length - 1 : state.length]),
            prefix_len=target.length(slot),
            room=target.room(slot),
            vocab_size=target.vocab_size,
            tree=tree,
        )
        state.pending.update(plan=plan, verified=proposal, nodes=nodes)
        return RequestRows.from_plan(slot, plan)

    def _host_chain_drafts(self, state: RequestState, nodes: int | None) -> list[int]:
        """The draft ids a greedy chain round verifies: its proposal's first ``nodes`` (all without a budget), checked.

        Under a budget :meth:`_candidates` has already checked the whole proposal on the host, as token ids only
        (so a chain), and kept its ids.
        """
        ids = state.pending.get("ids")
        if ids is None:
            ids = state.pending.get("read_ids")  # read with the round's other device chains
        if ids is not None:
            return ids if nodes is None else ids[:nodes]
        proposal = state.pending["proposal"]
        if nodes is not None:
            proposal = truncate_chain(proposal, nodes)
        if self.verifier.validate_proposals:
            ids = self._validate(proposal)
        if ids is None:
            if not isinstance(proposal.tokens, torch.Tensor) or proposal.tokens.ndim != 1:
                got = getattr(proposal.tokens, "shape", type(proposal.tokens).__name__)
                raise ValueError(f"drafts: expected a 1-D tensor of token ids, got {got}")
            ids = proposal.tokens.tolist() if proposal.tokens.numel() else []
        return ids

    def _read_device_chains(self, states: list[RequestState]) -> None:
        """The greedy chain rounds whose proposals :meth:`_validate` cannot decide on the host (ids on the device,
        or laws and scores beside them): checked and read to the host together.

        One device read for all of them: their token ids, every condition of ``DraftProposal.validate``
        (when the verifier validates proposals) and, under a verify budget, the path scores its estimator
        reads (``AcceptanceEstimator.score_tensor``). Each request keeps its ids as ints (``read_ids``) and its
        scores (``path_scores``), and is marked validated. When any check fails, or a proposal is malformed on
        the host, nothing is marked, and each request is checked alone later, so only a bad proposal's request
        fails, with its own message.
        """
        chains = [
            state
            for state in states
            if self._host_greedy(state)
            and type(self.verifier) is ChainVerifier
            and _id_tensor(state.pending["proposal"].tokens)
            and not _host_ids_only(state.pending["proposal"])
        ]
        if not chains:
            return
        proposals = [state.pending["proposal"] for state in chains]
        device = proposals[0].tokens.device
        conditions = []
        if self.verifier.validate_proposals:
            try:
                conditions = [
                    ok.reshape(()).to(device) for ok in proposals_pass_conditions(proposals, vocab_size=self.target.vocab_size)
                ]
            except (TypeError, ValueError):
                return
        scores = [None] * len(proposals)
        if self.verify_budget is not None:
            scores = [AcceptanceEstimator.score_tensor(proposal) for proposal in proposals]
        # float64 holds every id, every check (0 / 1) and every float32 score exactly
        parts = [proposal.tokens.to(device, torch.float64) for proposal in proposals]
        parts += [t.to(device, torch.float64) for t in scores if t is not None]
        if conditions:
            parts.append(torch.stack(conditions).to(torch.float64))
        values = torch.cat(parts).tolist()  # the one device read
        if not all(values[sum(p.numel() for p in parts) - len(conditions) :]):
            return
        at = 0
        for state, proposal in zip(chains, proposals):
            k = proposal.tokens.numel()
            state.pending.update(read_ids=[int(v) for v in values[at : at + k]], validated=True)
            at += k
        for state, t in zip(chains, scores):
            if t is not None:
                state.pending["path_scores"] = values[at : at + t.numel()]
                at += t.numel()

    def _pick_first(self, state: RequestState, logits: torch.Tensor, argmax: int | None = None) -> None:
        """The token after the prompt from the prefill's last row, drawn as :func:`specdec.generate` draws it.

        ``argmax``: the row's argmax already read to the host, for a :meth:`_host_greedy` request.
        """
        if argmax is not None:
            state.buf[state.length] = argmax
            state.length += 1
            return
        prompt, sampling = state.prompt, state.sampling
        if sampling.needs_prefix:
            logits = process_logits(logits[None], [prompt], sampling)[0]
        token = logits.argmax(-1) if sampling.greedy else sample(logits_to_probs(logits, sampling), state.generator)
        state.buf[state.length] = self._to_token_device(token)
        state.length += 1

    def _scan(self, state: RequestState, appended: list[int] | None = None) -> torch.Tensor:
        """Apply stops to the tokens emitted since the last scan; finish the request when it is done.

        ``appended``: the ids this round appended, when it had them as ints; they are exactly the tokens
        since the last scan (every round scans what it appends), so the new tokens are made from them.
        """
        plen = state.prompt.numel()
        limit = min(state.length, plen + state.max_new_tokens)
        end = state.stop.first_stop(state.buf, state.scanned, limit)
        stop = limit if end is None else end
        new = state.buf[state.scanned : stop].clone() if appended is None else ids_tensor(appended[: stop - state.scanned])
        state.scanned = stop
        if end is not None or state.length - plen >= state.max_new_tokens:
            hook_error = self._release(state, FINISHED)
            if hook_error is not None:  # the step fails the request with it
                raise hook_error
        return new

    @torch.no_grad()
    def step(self) -> dict[Hashable, torch.Tensor]:
        """One round for every running request, with one target forward for all of them.

        Waiting requests join first (as many as there are free slots); a joining request's rounds are its
        prefill, in one forward or, under :attr:`max_pass_rows`, in chunks over several steps, then its first
        token. Requests that finish in this round leave it, freeing their slots.

        Returns:
            ``{request_id: [m] int64}``, the tokens each request in the forward emitted in this round (streamed
            to its ``on_tokens`` too; ``m = 0`` for a prompt chunk that is not its last); empty when there
            was nothing to run.

        Raises:
            RequestFailed: a request's drafter, proposal, acceptance or ``on_tokens`` raised; that request
                is ``"failed"`` and left the batch, every other request's round was completed first.

        Example:
            >>> from specdec.testing import tiny_target
            >>> from specdec.drafters import NGramDrafter
            >>> engine = Engine(tiny_target(seed=0), NGramDrafter(), max_batch=2)
            >>> ids = [engine.add_request(torch.tensor(p), max_new_tokens=4) for p in ([1, 2, 3], [7])]
            >>> {rid: t.shape[0] for rid, t in engine.step().items()}   # the prefills, one token each
            {0: 1, 1: 1}
        """
        step_start = time.perf_counter()
        failures: list[tuple[RequestState, Exception]] = []
        self._admit(failures)
        states = [self._requests[rid] for rid in self._running]
        proposed = []
        drafting = [state for state in states if state.prefilled == state.prompt.numel()]
        prefilling = [state for state in states if state.prefilled < state.prompt.numel()]
        batch: list = []
        if self._batch_drafter is not None and drafting:
            try:
                batch = self._propose_batch(drafting)
            except Exception as err:  # one call drafted for all of them: all of them fail, joining requests go on
                for state in drafting:
                    self._fail(state, err)
                    failures.append((state, err))
        for i, state in enumerate(drafting):
            if state.status != RUNNING:
                continue
            try:
                if self._batch_drafter is not None:
                    self._take_proposal(state, *batch[i])
                else:
                    self._propose(state)
            except Exception as err:  # the request fails alone; its companions' round goes on
                self._fail(state, err)
                failures.append((state, err))
        self._read_device_chains([state for state in drafting if state.status == RUNNING])
        for state in drafting:
            if state.status != RUNNING:
                continue
            try:
                gains = self._candidates(state) if self.verify_budget is not None else None
                proposed.append((state, gains))
            except Exception as err:
                self._fail(state, err)
                failures.append((state, err))
        chunks: dict[int, slice] = {}
        if self.verify_budget is not None:
            proposed = self._with_chain_gains(proposed)
            # the roots first, then the prefill chunks; the budget fits draft nodes in the rows left under the cap
            chunks = self._prefill_chunks(prefilling, used_rows=len(proposed))
        nodes = self._allocate(prefilling, chunks, proposed)
        if self.two_level is not None:
            self.two_level.prepare(self, [state for state, _ in proposed if state.status == RUNNING], failures, step_start)
        verify_rows = {}
        for state in drafting:
            if state.status != RUNNING:
                continue
            try:
                verify_rows[id(state)] = self._plan(state, nodes.get(state.request_id))
            except Exception as err:
                self._fail(state, err)
                failures.append((state, err))
        if self.verify_budget is None:
            # every request verifies all it proposed; the prefill chunks take the rows left under the cap
            used = sum(len(r.tokens) if isinstance(r, _HostRows) else r.tokens.shape[1] for r in verify_rows.values())
            chunks = self._prefill_chunks(prefilling, used_rows=used)
        planned, rows = [], []
        for state in states:
            if id(state) in verify_rows and state.status == RUNNING:
                rows.append(verify_rows[id(state)])
            elif id(state) in chunks:
                rows.append(RequestRows(state.slot, state.prompt[None, chunks[id(state)]]))
            else:
                continue
            planned.append(state)
        rows = self._ship_host_rows(planned, rows)
        emitted: dict[Hashable, torch.Tensor] = {}
        taps = sorted({layer for state in planned for layer in self._taps_for(state)})
        forward_start = time.perf_counter()
        outs = self.target.forward(rows, hidden_layers=taps) if rows else []
        self.target_passes += bool(rows)
        self.last_pass_rows = sum(r.tokens.shape[1] for r in rows)
        self.prefill_rows += sum(c.stop - c.start for c in chunks.values())
        self._exact_seconds = time.perf_counter() - forward_start
        argmaxes = self._host_argmaxes(planned, outs, chunks)
        for state, out in zip(planned, outs):
            if state.status != RUNNING:  # cancelled by an earlier request's on_tokens in this loop: its slot is reset
                continue
            try:
                hidden = [out.hidden[taps.index(layer)][0] for layer in self._taps_for(state)]  # each [T_i, H]
                emitted[state.request_id] = self._finish_round(
                    state, out.logits, hidden, chunk=chunks.get(id(state)), argmaxes=argmaxes.get(id(state))
                )
            except Exception as err:
                self._fail(state, err)
                failures.append((state, err))
        if failures:
            state, err = failures[0]
            raise RequestFailed(state.request_id, err, emitted, failures=[(s.request_id, e) for s, e in failures]) from err
        return emitted

    def _prefill_chunks(self, prefilling: list[RequestState], *, used_rows: int) -> dict[int, slice]:
        """``{id(state): prompt rows}`` of this step's forward for the requests still prefilling, in join order.

        Each takes the rest of its prompt, or what is left of :attr:`max_pass_rows` after ``used_rows``
        (the verify rows) and the chunks before it, and under a cap at most the target's
        :attr:`~specdec.models.slots.RequestSlots.static_request_rows` (so the forward stays on its graphs);
        a request left no row waits for the next step.
        """
        room = None if self.max_pass_rows is None else self.max_pass_rows - used_rows
        per_request = self.target.static_request_rows if room is not None else None
        chunks = {}
        for state in prefilling:
            left = state.prompt.numel() - state.prefilled
            rows = left if room is None else min(left, room)
            if per_request is not None:
                rows = min(rows, per_request)
            if rows <= 0:
                break
            chunks[id(state)] = slice(state.prefilled, state.prefilled + rows)
            if room is not None:
                room -= rows
        return chunks

    def _ship_host_rows(self, planned: list[RequestState], rows: list) -> list[RequestRows]:
        """Every host-decided request's row tokens to the target's device in one copy, as views of it.

        A tree's positions and mask go with their own copies.
        """
        host = [(i, r) for i, r in enumerate(rows) if isinstance(r, _HostRows)]
        if not host:
            return rows
        flat = self._to_device(ids_tensor([t for _, r in host for t in r.tokens]))
        views = flat.view(1, -1).split([len(r.tokens) for _, r in host], dim=1)  # each [1, T_i]
        for (i, r), tokens in zip(host, views):
            rows[i] = RequestRows(
                planned[i].slot,
                tokens,
                positions=None if r.positions is None else self._to_device(r.positions),
                mask=None if r.mask is None else self._to_device(r.mask),
            )
        return rows

    def _host_argmaxes(self, planned: list[RequestState], outs: list, chunks: dict[int, slice]) -> dict[int, list[int]]:
        """The argmax of every row a host-decided request reads, with ONE device read.

        A verifying request reads all its rows, a prefill its last chunk's last row (an earlier chunk
        reads none). One argmax over the concatenated rows of all of them; ``{id(state): [its rows'
        argmax]}``. The values equal each request's own ``argmax(-1)``: the same op over the same rows, ties
        to the first index.
        """
        parts, owners = [], []
        for state, out in zip(planned, outs):
            if state.status != RUNNING or not self._host_greedy(state):
                continue
            chunk = chunks.get(id(state))
            if chunk is not None and chunk.stop < state.prompt.numel():
                continue
            parts.append(out.logits if chunk is None else out.logits[:, -1:])  # [1, rows, V]
            owners.append((id(state), parts[-1].shape[1]))
        if not parts:
            return {}
        values = torch.cat(parts, dim=1).argmax(-1).tolist()[0]  # the round's one device read for these requests
        argmaxes, start = {}, 0
        for owner, num_rows in owners:
            argmaxes[owner] = values[start : start + num_rows]
            start += num_rows
        return argmaxes

    def _allocate(self, prefilling: list[RequestState], chunks: dict[int, slice], proposed: list) -> dict[Hashable, int]:
        """Node counts per verifying request under the verify budget (``{}`` without one).

        The forward's fixed rows are the prefill ``chunks`` (of requests in ``prefilling``), one root per
        verifying request and the first-node floors; the nodes fit in what :attr:`max_pass_rows` leaves. Where
        an int budget or the row cap cannot hold every floor, only the requests passed over for as many rounds
        in a row as there are drafting requests keep theirs (the longest-waiting first), and the rest goes by
        gain: a request whose estimator has learned nothing is not left unverified while others keep winning.
        """
        self.last_allocation = {}
        if self.verify_budget is None or not proposed:
            return {}
        prefill = sum(c.stop - c.start for c in chunks.values())
        # a prefill whose last chunk is in this forward emits its first token
        first_tokens = sum(1 for s in prefilling if id(s) in chunks and chunks[id(s)].stop == s.prompt.numel())
        room = None if self.max_pass_rows is None else self.max_pass_rows - prefill - len(proposed)
        # every request with a draft verifies its first node: a request given none would never be observed,
        # and its estimator could never learn that its drafter is better than the prior says
        floors = [min(1, len(gains)) for _, gains in proposed]
        int_budget = None if self.verify_budget == "auto" else self.verify_budget
        caps = [c for c in (int_budget, room) if c is not None]
        if caps and sum(floors) > min(caps):  # an int budget and the row cap are hard caps, floors included
            waited = [i for i, f in enumerate(floors) if f and proposed[i][0].passed_over >= len(proposed)]
            waited.sort(key=lambda i: -proposed[i][0].passed_over)  # stable: the earlier request among equals
            keep = set(waited[: max(0, min(caps))])
            floors = [int(i in keep) for i in range(len(floors))]
        fixed = prefill + len(proposed) + sum(floors)
        base = first_tokens + len(proposed) + sum(gains[0] for (_, gains), f in zip(proposed, floors) if f)
        extra = allocate(
            [gains[f:] for (_, gains), f in zip(proposed, floors)],
            base_tokens=base,
            fixed_rows=fixed,
            step_time=self.step_time,
            max_nodes=None if int_budget is None else max(0, int_budget - sum(floors)),
            max_rows=self.max_pass_rows,
        )
        counts = [f + n for f, n in zip(floors, extra)]
        for (state, gains), n in zip(proposed, counts):
            if gains:
                state.passed_over = 0 if n else state.passed_over + 1
        self.last_allocation = {state.request_id: n for (state, _), n in zip(proposed, counts)}
        return dict(self.last_allocation)

    def _finish_round(
        self,
        state: RequestState,
        logits: torch.Tensor,
        hidden: list,
        *,
        chunk: slice | None = None,
        argmaxes: list[int] | None = None,
    ) -> torch.Tensor:
        """Accept from the request's logits ``[1, T_i, V]``, commit, append, apply stops, stream; the new tokens.

        ``hidden``: the request's taps, each ``[T_i, H]``; the committed rows' become its drafter's next
        ``target_hidden [rows, taps, H]``. ``chunk``: the prompt rows these were, for a prefill; its last
        chunk draws the first token. ``argmaxes``: for a host-decided request, the argmax of its rows (of
        its last row for a prefill's last chunk) already on the host; its round reads nothing else from
        the device.
        """
        ids = None
        if chunk is not None:
            self.target.commit(state.slot, chunk.stop - chunk.start)
            state.prefilled = chunk.stop
            if hidden:
                state.prefill_hidden.append(torch.stack(hidden, dim=1))  # [rows, taps, H]
            if state.prefilled < state.prompt.numel():
                return state.buf.new_empty(0)
            parts, state.prefill_hidden = state.prefill_hidden, []
            # the drafter's first target_hidden: every prompt row, as from a prefill in one forward
            state.fresh_hidden = (parts[0] if len(parts) == 1 else torch.cat(parts)) if parts else None
            self._pick_first(state, logits[0, -1], None if argmaxes is None else argmaxes[-1])
        else:
            pending, state.pending = state.pending, {}
            if argmaxes is not None and "drafts" in pending:
                # a greedy chain decided on the host: its tokens stay ints until they go out
                drafts = pending["drafts"]
                num_accepted, bonus = greedy_chain_accept_tokens(drafts, argmaxes)
                ids, commit = [*drafts[:num_accepted], bonus], num_accepted + 1
            else:
                outcome = self._accept(state, pending, logits[0], argmaxes)
                num_accepted, commit = outcome.num_accepted, outcome.commit
            self.target.commit(state.slot, commit)
            if hidden:
                taps = torch.stack(hidden, dim=1)  # [T_i, taps, H]
                # a chain keeps its first rows (a view); a tree its path's rows
                state.fresh_hidden = taps[:commit] if isinstance(commit, int) else taps[commit.to(logits.device)]
            if pending["nodes"] is not None:
                # a tree's accepted nodes: its committed rows after the root's, one row a node (a chain plan: the first);
                # left on the device: the estimator reads it only for a tree without scores
                path = None
                if pending["tree"] is not None:
                    path = commit[1:] - 1 if isinstance(commit, torch.Tensor) else list(range(num_accepted))
                state.estimator.observe(
                    pending["proposal"],
                    nodes=pending["nodes"],
                    accepted=num_accepted,
                    tree=pending["tree"],
                    scores=pending.get("path_scores"),
                    path=path,
                )
                if isinstance(state.drafter, PartlyVerifiedDrafter) and pending["tree"] is None:
                    state.drafter.verified(pending["nodes"])  # a chain cut by the budget: the drafts past it were never judged
            if self.two_level is not None:
                self.two_level.finish(state, pending, num_accepted, self._exact_seconds)
            round_start = state.length
            if ids is not None:
                state.host_buf[state.length : state.length + len(ids)] = ids
                state.length += len(ids)
            else:
                m = outcome.emitted.numel()
                if state.length + m > state.buf.numel():  # a two-level round may emit more than num_draft_tokens + 1
                    state.buf = torch.cat([state.buf, state.buf.new_empty(state.length + m - state.buf.numel())])
                state.buf[state.length : state.length + m] = self._to_token_device(outcome.emitted)
                state.length += m
            state.rounds += 1
        new = self._scan(state, ids)
        if chunk is None:
            # as generate counts them: the accepted drafts among the round's tokens that the output keeps
            # (a stop or max_new_tokens may end it inside the round); the last kept token counts as the bonus
            state.accepted += min(num_accepted, state.scanned - round_start - 1)
        if state.on_tokens is not None and new.numel():
            state.on_tokens(new)
        return new

    def _accept(self, state: RequestState, pending: dict, logits: torch.Tensor, argmaxes: list[int] | None) -> RoundOutcome:
        """The request's round outcome from its rows' logits ``[T_i, V]``, or from their host ``argmaxes`` for a greedy tree."""
        if argmaxes is not None:
            plan = pending["plan"]
            walk = greedy_walk_tokens(plan.tree, argmaxes)
            return RoundOutcome(
                emitted=walk.emitted, num_accepted=walk.num_accepted, commit=plan.accepted_rows(walk.num_accepted, walk.rows)
            )
        if self.two_level is not None:
            return self.two_level.accept(state, pending, logits)
        return accept_round(
            self.verifier,
            pending["plan"],
            logits,
            pending["verified"],
            sampling=state.sampling,
            generator=state.generator,
            context=self._to_device(state.buf[: state.length]),
        )

    def _fail(self, state: RequestState, err: Exception) -> None:
        state.error = err
        if state.slot is None:
            state.status = FAILED
            return
        hook_error = self._release(state, FAILED)
        if hook_error is not None:
            err.add_note(f"and then its drafter's end-of-request hook raised {type(hook_error).__name__}: {hook_error}")

    def run(self) -> dict[Hashable, torch.Tensor]:
        """Step until no request is waiting or running; returns every finished request's tokens by id.

        A :class:`RequestFailed` from :meth:`step` propagates; calling ``run()`` again continues the others.

        Example:
            >>> from specdec.testing import tiny_target
            >>> from specdec.drafters import NGramDrafter
            >>> engine = Engine(tiny_target(seed=0), NGramDrafter(), max_batch=1)
            >>> ids = [engine.add_request(torch.tensor([1, 2]), max_new_tokens=3) for _ in range(2)]
            >>> [t.shape[0] for t in engine.run().values()]
            [3, 3]
        """
        while self.has_work:
            self.step()
        return {rid: s.tokens for rid, s in self._requests.items() if s.status == FINISHED}
