"""Two-level verification: a cheap 8-bit pass picks the chain, the drafter drafts again, one exact pass decides.

One round, after a committed prefix and the root ``r`` (the newest emitted token)::

    1. draft 1     the drafter's tree T1 below r                      (the decode loop's proposal)
    2. Q pass      target with its 8-bit weight view over [r, T1]     (rows discarded, never committed)
                   greedy walk with the Q logits -> chain C = c_1..c_m and the Q next token c*
    3. draft 2     the drafter again, from r C c*, fed the Q pass's hidden states of r C
                   -> subtree T2 below c*
    4. exact pass  exact weights over [r, c_1..c_m, c*, T2]           (C causal, T2 by its ancestor mask)
    5. accept      greedy walk / sample-and-match with the exact logits only
    6. commit      the accepted rows (K/V compaction, GDN replay along the path); the drafter's next
                   call gets the exact hidden states of those rows, which replace the Q ones

      r ── c_1 ── c_2 ── ... ── c_m ── c* ─┬─ t ── t          exact pass rows: r, C, c*, T2
                                           └─ t ── t ─ t

Why it is exact: the emitted tokens are decided by step 5 alone, which reads only the exact pass.
Steps 1-3 only choose which rows the exact pass checks, from the committed prefix and the drafters'
own randomness, never from the target's draws of the round (those are made in step 5). So the Q
pass may be arbitrarily wrong: it changes how many tokens a round emits, never which. Greedy output
equals autoregressive output token for token; sampled output has the target's law
(sample-and-match, :mod:`specdec.verify.walks`).

A :class:`~specdec.verify.two_level_gate.TwoLevelGate` decides per round whether the second level is
worth its cost; when it is not, the round is an ordinary :class:`~specdec.verify.tree.TreeVerifier`
round over T1.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from specdec.contracts.drafter import Drafter
from specdec.contracts.plan import VerifyPlan
from specdec.contracts.proposal import DraftProposal, check_proposal_size
from specdec.contracts.result import VerifyResult
from specdec.contracts.sampling import SamplingConfig
from specdec.contracts.target import Target, check_target
from specdec.contracts.tree import Tree
from specdec.verify.best_first import _check_budget
from specdec.verify.processors import process_logits, row_prefixes
from specdec.verify.round_inputs import check_round_inputs
from specdec.verify.sampling import logits_to_probs
from specdec.verify.tree import TreeVerifier
from specdec.verify.two_level_gate import GATE_MODES, TwoLevelGate
from specdec.verify.walks import TreeWalk, greedy_walk, sample_and_match

__all__ = ["STAGES", "TwoLevelRound", "TwoLevelStats", "TwoLevelVerifier", "join_chain_and_subtree"]

STAGES = ("q_pass", "draft2", "exact", "commit", "one_level")


@dataclass
class TwoLevelStats:
    """Counters and stage times of a :class:`TwoLevelVerifier` (cumulative until :meth:`reset`).

    Attributes:
        rounds, two_level_rounds: rounds verified, and those that ran both levels.
        q_passes, exact_passes: target passes with the Q view and with the exact weights.
        emitted: tokens emitted (accepted drafts plus one bonus per round).
        chain_tokens: ``m + 1`` summed over two-level rounds (the Q chain and the Q next token).
        chain_agreed: of those, the tokens the exact pass accepted.
        chain_full: two-level rounds in which the exact pass accepted the whole Q chain and next token.
        seconds: time per stage (:data:`STAGES`); device-accurate with ``sync_stages=True``.

    Example:
        >>> s = TwoLevelStats(rounds=2, exact_passes=2, emitted=9, chain_tokens=6, chain_agreed=5)
        >>> s.tokens_per_exact_pass, round(s.agreement, 3)
        (4.5, 0.833)
    """

    rounds: int = 0
    two_level_rounds: int = 0
    q_passes: int = 0
    exact_passes: int = 0
    emitted: int = 0
    chain_tokens: int = 0
    chain_agreed: int = 0
    chain_full: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))

    @property
    def tokens_per_exact_pass(self) -> float:
        """Emitted tokens per exact target pass (float; 0.0 before any round)."""
        return self.emitted / self.exact_passes if self.exact_passes else 0.0

    @property
    def agreement(self) -> float:
        """Fraction of Q-chain tokens (C and the Q next token) the exact pass accepted (float)."""
        return self.chain_agreed / self.chain_tokens if self.chain_tokens else 0.0

    def as_dict(self) -> dict:
        """Every counter, the derived rates and the stage times, for JSON."""
        return dict(
            rounds=self.rounds,
            two_level_rounds=self.two_level_rounds,
            q_passes=self.q_passes,
            exact_passes=self.exact_passes,
            emitted=self.emitted,
            tokens_per_exact_pass=self.tokens_per_exact_pass,
            chain_tokens=self.chain_tokens,
            chain_agreed=self.chain_agreed,
            chain_full=self.chain_full,
            agreement=self.agreement,
            seconds=dict(self.seconds),
        )


@dataclass
class TwoLevelRound:
    """What the last round did (for tests, plots and the docs' step-by-step drawing).

    Attributes:
        two_level: whether the round ran both levels.
        draft_tree: T1, the first draft as verified by the Q pass (``None`` in a one-level round).
        chain: ``[m + 1]`` the Q chain C then the Q next token (``None`` in a one-level round).
        subtree: T2 below the Q next token (``None`` in a one-level round).
        tree: the tree the exact pass checked (T1 in a one-level round, else C, c*, T2).
        num_accepted: accepted draft tokens of the exact walk.

    Example:
        >>> r = TwoLevelRound(two_level=False, draft_tree=None, chain=None, subtree=None,
        ...                   tree=Tree(tokens=[5, 6], parents=[-1, 0]), num_accepted=1)   # a one-level round
        >>> r.two_level, r.tree.num_nodes, r.num_accepted
        (False, 2, 1)
    """

    two_level: bool
    draft_tree: Tree | None
    chain: torch.Tensor | None
    subtree: Tree | None
    tree: Tree
    num_accepted: int


def join_chain_and_subtree(chain: torch.Tensor, subtree: Tree) -> Tree:
    """The exact pass's tree: ``chain`` as a path below the root, then ``subtree`` below its last token.

    Args:
        chain: ``[m + 1]`` int64, C then the Q next token (at least one token).
        subtree: T2, ``N2`` nodes whose ``-1`` parents mean "child of the chain's last token".

    Returns:
        :class:`Tree` of ``m + 1 + N2`` nodes: chain node ``i`` has parent ``i - 1``; subtree node ``j``
        has parent ``m`` (the chain's last node) or ``m + 1 + parent``.

    Example:
        >>> t = join_chain_and_subtree(torch.tensor([5, 6]), Tree(tokens=[7, 8, 9], parents=[-1, -1, 0]))
        >>> t.tokens.tolist(), t.parents.tolist()
        ([5, 6, 7, 8, 9], [-1, 0, 1, 1, 2])
    """
    if not isinstance(chain, torch.Tensor) or chain.ndim != 1 or chain.numel() < 1 or chain.dtype != torch.long:
        desc = f"{chain.dtype} {tuple(chain.shape)}" if isinstance(chain, torch.Tensor) else type(chain).__name__
        raise ValueError(f"chain: expected int64 [m + 1] with m + 1 >= 1, got {desc}")
    if not isinstance(subtree, Tree):
        raise TypeError(f"subtree: expected a Tree, got {type(subtree).__name__}")
    m1 = chain.numel()
    device = chain.device
    sub = subtree.to(device)
    chain_parents = torch.arange(-1, m1 - 1, device=device)
    sub_parents = torch.where(sub.parents < 0, sub.parents.new_full((), m1 - 1), sub.parents + m1)
    depth = torch.cat([torch.arange(1, m1 + 1, device=device), sub.depth.to(device) + m1])
    # both parts are checked trees (the chain: a root path plus one argmax), so the join needs no host walk;
    # a chain below a chain is a chain
    return Tree._unchecked(
        torch.cat([chain, sub.tokens]), torch.cat([chain_parents, sub_parents]), depth, m1 + sub.max_depth, sub.is_chain
    )


class TwoLevelVerifier:
    """Two-level verification (see the module docstring for the round, drawn step by step).

    Use it like the other verifiers; the decode loop hands it the drafter for the second draft::

        sd.generate(target, ids, drafter=d, verifier=sd.TwoLevelVerifier(budget=64, q_budget=64))

    Args:
        budget: most nodes of the exact pass's tree (C, the Q next token and T2 together; also the
            budget of a one-level round).
        q_budget: most nodes of T1, the tree the Q pass checks. Both bound the trees built here from draft
            log-probs; a tree the drafter built itself (``proposal.tree`` / ``parents``) is checked as given, as
            :class:`TreeVerifier` checks it (``generate`` caps its nodes at ``num_draft_tokens``).
        top_k: at most this many children per node in trees built here from draft log-probs.
        gate: ``"auto"`` (measured, see :class:`~specdec.verify.two_level_gate.TwoLevelGate`),
            ``"always"``, ``"never"``, or a :class:`TwoLevelGate`; each request of :func:`specdec.generate` starts
            with it as given (:meth:`start_request`). Past its warm-up ``"auto"`` follows measured wall-clock
            rates, so under sampling its choices, and the tokens, can differ from run to run with the same seed;
            ``"always"`` or ``"never"`` repeat.
        view: the target weight view of the Q pass (one of ``target.weight_views``, not ``"exact"``).
        device_tree: build trees from log-probs with tensor ops on the device (as :class:`TreeVerifier`).
        validate_proposals: check both drafts (one host read each) before use.
        sync_stages: synchronise the device between stages so :attr:`stats` times are device times
            (costs a little; for profiling).

    Attributes:
        stats: :class:`TwoLevelStats`.
        last_round: :class:`TwoLevelRound` of the most recent round.

    Example (greedy, float32: the output is the autoregressive output exactly):
        >>> import specdec as sd
        >>> from specdec.testing import tiny_target
        >>> target, prompt = tiny_target(seed=0), torch.tensor([[1, 2, 3, 1, 2]])
        >>> v = TwoLevelVerifier(budget=16, q_budget=16, gate="always")
        >>> spec = sd.generate(target, prompt, 24, drafter=sd.NGramDrafter(), verifier=v, num_draft_tokens=8)
        >>> torch.equal(spec.tokens, sd.generate(target, prompt, 24).tokens), v.stats.q_passes > 0
        (True, True)
    """

    def __init__(
        self,
        budget: int = 64,
        q_budget: int = 64,
        *,
        top_k: int | None = None,
        gate: str | TwoLevelGate = "auto",
        view: str = "q",
        device_tree: bool = False,
        validate_proposals: bool = True,
        sync_stages: bool = False,
    ):
        self.budget = _check_budget(budget)
        self.q_budget = _check_budget(q_budget, name="q_budget")
        if isinstance(gate, str):
            if gate not in GATE_MODES:
                raise ValueError(f"gate: expected one of {GATE_MODES} or a TwoLevelGate, got {gate!r}")
            gate = TwoLevelGate(mode=gate)
        if not isinstance(gate, TwoLevelGate):
            raise TypeError(f"gate: expected 'auto', 'always', 'never' or a TwoLevelGate, got {type(gate).__name__}")
        if not isinstance(view, str) or view in ("exact", ""):
            raise ValueError(f"view: expected a non-exact weight view name such as 'q', got {view!r}")
        for name, value in (("validate_proposals", validate_proposals), ("sync_stages", sync_stages)):
            if not isinstance(value, bool):
                raise TypeError(f"{name}: expected a bool, got {type(value).__name__} {value!r}")
        self.gate = gate
        self._gate_as_given = copy.deepcopy(gate)  # what start_request() restores
        self.view = view
        self.validate_proposals = validate_proposals
        self.sync_stages = sync_stages
        self._exact_level = TreeVerifier(budget, top_k=top_k, device_tree=device_tree, validate_proposals=False)
        self._q_level = TreeVerifier(q_budget, top_k=top_k, device_tree=device_tree, validate_proposals=False)
        self.stats = TwoLevelStats()
        self.last_round: TwoLevelRound | None = None
        self._last_end: tuple[float, int] | None = None  # (time, target length) when the last round ended

    def reset(self) -> None:
        """Zero :attr:`stats` (the gate keeps its measured rates)."""
        self.stats = TwoLevelStats()

    def start_request(self) -> None:
        """Start a request with the gate as it was given (its rates measured on earlier requests forgotten).

        :func:`specdec.generate` calls it before each request (``RequestScopedVerifier``): the gate's choice changes
        how many draws a sampled round takes from the request's generator, so a gate carried over from other requests
        would make a seeded request's tokens depend on what was decoded before it. :attr:`stats` keep adding up.

        Example:
            >>> v = TwoLevelVerifier()
            >>> v.gate.record(True, tokens=4, seconds=0.01)
            >>> v.start_request()
            >>> v.gate.two_level.rounds
            0
        """
        self.gate = self.request_gate()
        self._last_end = None

    def request_gate(self) -> TwoLevelGate:
        """A fresh gate for one request: a copy of the gate as given (what :meth:`start_request` restores), whatever
        the verifier's own gate has measured since.

        Example:
            >>> v = TwoLevelVerifier()
            >>> v.gate.record(True, tokens=4, seconds=0.01)
            >>> v.request_gate().two_level.rounds, v.gate.two_level.rounds
            (0, 1)
        """
        return copy.deepcopy(self._gate_as_given)

    def _mark(self, device: torch.device, stage: str, since: float) -> float:
        if self.sync_stages and device.type == "cuda":
            torch.cuda.synchronize(device)
        now = time.perf_counter()
        self.stats.seconds[stage] += now - since
        return now

    def verify(
        self,
        target: Target,
        root: torch.Tensor,
        proposal: DraftProposal,
        *,
        sampling: SamplingConfig,
        generator: torch.Generator | None = None,
        hidden_layers: Sequence[int] = (),
        context: torch.Tensor | None = None,
        drafter: Drafter | None = None,
    ) -> VerifyResult:
        """Run one round (one-level or two-level, as the gate decides) and commit the accepted rows.

        Args:
            target: a :class:`~specdec.contracts.Target` with the Q weight view (``view in target.weight_views``)
                and tree plans; its cache holds the context but the root.
            root: ``[1]`` int64, the newest emitted token.
            proposal: the drafter's first proposal (T1).
            sampling, generator: the target law and the request's generator.
            hidden_layers: the drafter's taps; the Q pass's taps feed draft 2, the exact pass's are returned.
            context: ``[n]`` every token so far, ``root`` last (draft 2 continues it).
            drafter: the drafter that made ``proposal``; it drafts again from the Q chain's end.

        Returns:
            :class:`~specdec.contracts.VerifyResult`: ``emitted [n + 1]``, ``num_accepted = n`` and the exact
            ``hidden [n + 1, taps, H]`` of the committed rows (``None`` without taps).
        """
        start = time.perf_counter()
        check_target(target)
        check_round_inputs(target, root, context)
        if self.view not in target.weight_views:
            raise ValueError(
                f"target: {type(target).__name__} has the weight views {target.weight_views}; the Q pass needs {self.view!r}"
            )
        if drafter is None:
            raise ValueError("drafter: expected the round's drafter (the second level drafts again), got None")
        if context is None:
            raise ValueError("context: expected the tokens so far [n], root last (draft 2 continues them), got None")
        if self.validate_proposals:
            proposal.validate(vocab_size=target.vocab_size)
        # a two-level round needs room for the root and at least the Q next token
        two_level = target.room() >= 2 and self.gate.choose()
        if two_level:
            result, rnd = self._two_level(target, root, proposal, sampling, generator, tuple(hidden_layers), context, drafter)
        else:
            result = self._exact_level.verify(
                target, root, proposal, sampling=sampling, generator=generator, hidden_layers=hidden_layers, context=context
            )
            rnd = TwoLevelRound(False, None, None, None, self._exact_level.last_tree, result.num_accepted)
            self._mark(target.device, "one_level", start)
        self.last_round = rnd
        stats = self.stats
        stats.rounds += 1
        stats.exact_passes += 1
        stats.emitted += result.num_accepted + 1
        end = time.perf_counter()
        # A round's cost includes its first draft, made between the previous round's end and this call;
        # the previous end counts only if this call continues that round's request (same cache length).
        gap = 0.0
        if self._last_end is not None and self._last_end[1] == target.length - result.num_accepted - 1:
            gap = start - self._last_end[0]
        self.gate.record(two_level, tokens=result.num_accepted + 1, seconds=gap + end - start)
        self._last_end = (end, target.length)
        return result

    @property
    def one_level(self) -> TreeVerifier:
        """The :class:`TreeVerifier` of a one-level round (``budget`` nodes, proposals already validated here)."""
        return self._exact_level

    def q_plan(self, proposal: DraftProposal, root: torch.Tensor, *, prefix_len: int, room: int) -> VerifyPlan:
        """The Q pass's plan: T1 (``proposal`` as a tree of at most ``q_budget`` nodes) below ``root``.

        Args:
            proposal: the first draft (validated by the caller when :attr:`validate_proposals`).
            root: ``[1]`` int64, the newest emitted token.
            prefix_len, room: the request's committed length and free cache slots.

        Example:
            >>> v = TwoLevelVerifier(budget=4, q_budget=4)
            >>> v.q_plan(DraftProposal(torch.tensor([5, 6, 7])), torch.tensor([3]), prefix_len=4, room=10).tokens.tolist()
            [[3, 5, 6, 7]]
        """
        tree1 = self._q_level.build_tree(proposal, room=room).to(root.device)
        return VerifyPlan.for_tree(root, tree1, prefix_len=prefix_len)

    def q_chain(
        self, q_plan: VerifyPlan, q_logits: torch.Tensor, *, sampling: SamplingConfig, context: torch.Tensor, room: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The greedy walk of the Q logits over T1: ``(chain [m + 1], rows [m + 1])``, cut to the exact pass's room.

        Args:
            q_plan: from :meth:`q_plan`.
            q_logits: ``[N1 + 1, V]`` float32, the Q pass's logits of the plan's rows.
            sampling: the request's law (its prefix-dependent processors apply to the Q logits too).
            context: ``[n]`` every token so far, root last.
            room: the request's free cache slots.

        Returns:
            C then the Q next token, and the plan rows whose logits chose them (root row first).

        Example:
            >>> v = TwoLevelVerifier(budget=4, q_budget=2)
            >>> plan = v.q_plan(DraftProposal(torch.tensor([1, 0])), torch.tensor([0]), prefix_len=1, room=10)
            >>> logits = torch.eye(2)[[1, 0, 1]]       # row 0 picks 1, row 1 picks 0, row 2 picks 1
            >>> [t.tolist() for t in v.q_chain(plan, logits, sampling=SamplingConfig(), context=torch.tensor([0]), room=10)]
            [[1, 0, 1], [0, 1, 2]]
        """
        if sampling.needs_prefix:
            q_logits = process_logits(q_logits, row_prefixes(context, q_plan), sampling)
        q_walk = greedy_walk(q_plan.tree, q_logits)  # the Q pass proposes; it never samples
        limit = min(self.budget, room - 1)
        return q_walk.emitted[:limit], q_walk.rows[:limit]

    def second_draft_request(
        self, context: torch.Tensor, chain: torch.Tensor, chain_rows: torch.Tensor, q_hidden: torch.Tensor | None, *, room: int
    ) -> tuple[torch.Tensor, int, dict]:
        """What the drafter's second call gets: ``(context2 [n + m + 1], k2, extra keyword arguments)``.

        Args:
            context: ``[n]`` every token so far, root last.
            chain, chain_rows: from :meth:`q_chain`.
            q_hidden: ``[N1 + 1, taps, H]`` the Q pass's taps of T1's rows, or ``None`` (a drafter without taps).
            room: the request's free cache slots.

        ``k2`` is the subtree's node budget (0: no second draft, the drafter is not called); ``extra`` holds
        ``target_hidden [m + 1, taps, H]`` (the Q features of ``r C``) when ``q_hidden`` is given.

        Example:
            >>> v = TwoLevelVerifier(budget=4)
            >>> ctx, k2, extra = v.second_draft_request(torch.tensor([1, 2]), torch.tensor([3, 4]), torch.tensor([0, 1]), None, room=9)
            >>> ctx.tolist(), k2, extra
            ([1, 2, 3, 4], 2, {})
        """
        device = chain.device
        k2 = max(0, min(self.budget, room - 1) - chain.numel())
        extra = {} if q_hidden is None else {"target_hidden": q_hidden[chain_rows.to(q_hidden.device)]}
        return torch.cat([context.to(device), chain]), k2, extra

    def exact_plan(
        self,
        chain: torch.Tensor,
        second: DraftProposal | None,
        k2: int,
        root: torch.Tensor,
        *,
        prefix_len: int,
        vocab_size: int,
    ) -> tuple[Tree, VerifyPlan]:
        """The exact pass's subtree T2 and plan over ``[root, C, c*, T2]``.

        Args:
            chain: ``[m + 1]`` from :meth:`q_chain`.
            second: the drafter's second proposal, or ``None`` when ``k2 == 0`` (no subtree).
            k2: the subtree budget of :meth:`second_draft_request`.
            root: ``[1]`` int64; prefix_len: the request's committed length; vocab_size: the target's ``V``.

        Example:
            >>> v = TwoLevelVerifier(budget=4)
            >>> sub, plan = v.exact_plan(torch.tensor([3, 4]), DraftProposal(torch.tensor([5, 6])), 2, torch.tensor([2]),
            ...                          prefix_len=5, vocab_size=97)
            >>> sub.tokens.tolist(), plan.tokens.tolist()
            ([5, 6], [[2, 3, 4, 5, 6]])
        """
        subtree = Tree._unchecked_chain(chain[:0])
        if second is not None:
            if self.validate_proposals:
                second.validate(vocab_size=vocab_size)
            subtree = self._exact_level.build_tree(second, room=k2 + 1)
        tree = join_chain_and_subtree(chain, subtree)
        return subtree, VerifyPlan.for_tree(root, tree, prefix_len=prefix_len)

    @staticmethod
    def accept_exact(
        plan: VerifyPlan,
        logits: torch.Tensor,
        *,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        context: torch.Tensor,
    ) -> TreeWalk:
        """Acceptance of the exact pass: the greedy walk, or sample-and-match with ``generator``.

        Returns a :class:`~specdec.verify.walks.TreeWalk` (``emitted [n + 1]``, ``num_accepted``, ``rows [n + 1]``).

        Args:
            plan: from :meth:`exact_plan`.
            logits: ``[N + 1, V]`` float32, the EXACT pass's logits of the plan's rows (never the Q pass's).
            sampling, generator: the request's law and RNG (the round's only target draws).
            context: ``[n]`` every token so far, root last (read when ``sampling.needs_prefix``).

        Example:
            >>> plan = VerifyPlan.for_tree(torch.tensor([0]), Tree(tokens=[1], parents=[-1]), prefix_len=1)
            >>> walk = TwoLevelVerifier.accept_exact(plan, torch.eye(2)[[1, 1]], sampling=SamplingConfig(), generator=None,
            ...                                      context=torch.tensor([0]))
            >>> walk.emitted.tolist(), walk.num_accepted
            ([1, 1], 1)
        """
        if sampling.needs_prefix:
            logits = process_logits(logits, row_prefixes(context, plan), sampling)
        if sampling.greedy:
            return greedy_walk(plan.tree, logits)
        return sample_and_match(plan.tree, logits_to_probs(logits, sampling), generator=generator)

    @staticmethod
    def record_two_level_round(stats: TwoLevelStats, chain: torch.Tensor, num_accepted: int) -> None:
        """Add a two-level round's Q-pass and agreement counters to ``stats`` (the round totals are the caller's).

        Example:
            >>> s = TwoLevelStats(); TwoLevelVerifier.record_two_level_round(s, torch.tensor([4, 5, 6]), 2)
            >>> s.q_passes, s.chain_tokens, s.chain_agreed, s.chain_full
            (1, 3, 2, 0)
        """
        m1 = chain.numel()
        stats.q_passes += 1
        stats.two_level_rounds += 1
        stats.chain_tokens += m1
        stats.chain_agreed += min(num_accepted, m1)
        stats.chain_full += int(num_accepted >= m1)

    def _two_level(self, target, root, proposal, sampling, generator, taps, context, drafter):
        device = target.device
        t = time.perf_counter()
        if not target.supports_trees:
            raise ValueError(
                f"target: {type(target).__name__} verifies chains only (supports_trees is False); two-level needs trees"
            )
        plan1 = self.q_plan(proposal, root, prefix_len=target.length, room=target.room())
        q_out = target.run_plan(plan1, hidden_layers=taps, view=self.view)
        target.discard()
        chain, chain_rows = self.q_chain(plan1, q_out.logits[0], sampling=sampling, context=context, room=target.room())
        t = self._mark(device, "q_pass", t)

        q_hidden = torch.stack([h[0] for h in q_out.hidden], dim=1) if taps else None
        context2, k2, extra = self.second_draft_request(context, chain, chain_rows, q_hidden, room=target.room())
        second = None
        if k2 > 0:
            second = drafter.propose(context2, k2, sampling=sampling, generator=generator, **extra)
            check_proposal_size(second, k2)
        subtree, plan = self.exact_plan(chain, second, k2, root, prefix_len=target.length, vocab_size=target.vocab_size)
        t = self._mark(device, "draft2", t)

        out = target.run_plan(plan, hidden_layers=taps)
        walk = self.accept_exact(plan, out.logits[0], sampling=sampling, generator=generator, context=context)
        t = self._mark(device, "exact", t)

        target.commit(plan.accepted_rows(walk.num_accepted, walk.rows))
        hidden = None
        if taps:
            hidden = torch.stack([h[0] for h in out.hidden], dim=1)[walk.rows.to(device)]
        self._mark(device, "commit", t)
        self.record_two_level_round(self.stats, chain, walk.num_accepted)
        rnd = TwoLevelRound(True, plan1.tree, chain, subtree, plan.tree, walk.num_accepted)
        return VerifyResult(emitted=walk.emitted, num_accepted=walk.num_accepted, hidden=hidden), rnd
