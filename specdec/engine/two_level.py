"""Two-level rounds inside the engine: one Q pass for every two-level request, then the shared exact pass.

A :class:`~specdec.verify.two_level.TwoLevelVerifier` round of one request is, alone (see
:mod:`specdec.verify.two_level`): draft 1, a Q pass over T1 with the target's 8-bit weight view, the
greedy Q walk (chain C and the Q next token c*), draft 2 from ``r C c*``, an exact pass over
``[r, C, c*, T2]``, acceptance from the exact logits only, commit. In an :class:`~specdec.engine.Engine`
step, :class:`TwoLevelRounds` runs those steps for every running request at once:

1. each request's gate (its own copy of the verifier's :class:`~specdec.verify.two_level_gate.TwoLevelGate`)
   picks the round kind; a one-level request plans an ordinary :class:`~specdec.verify.tree.TreeVerifier`
   round (:attr:`TwoLevelVerifier.one_level <specdec.verify.two_level.TwoLevelVerifier.one_level>`);
2. ONE ragged forward with ``view=verifier.view`` over every two-level request's T1 (committed state read,
   scratch rows written, then discarded), the Q walk per request;
3. draft 2 per request (one ``propose_batch`` call for a batch drafter);
4. the exact plans of all requests go into the engine's ONE shared exact forward, beside the one-level
   and prefill rows;
5. acceptance per request with the verifier's own rule (:meth:`TwoLevelVerifier.accept_exact
   <specdec.verify.two_level.TwoLevelVerifier.accept_exact>`) and the request's generator.

Every step calls the batch-1 verifier's own functions, in its order, with the request's own generator, so
a request's draws, rows and tokens are those of ``specdec.generate(..., verifier=TwoLevelVerifier(...))``
alone (with the ``"per_request"`` layout, whose logits are the batch-1 target's bit for bit).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.proposal import DraftProposal
from specdec.engine.rounds import RoundOutcome, accept_round, plan_round
from specdec.generation import check_proposal_size
from specdec.models.slots import RequestRows
from specdec.verify.two_level import TwoLevelRound, TwoLevelStats, TwoLevelVerifier
from specdec.verify.two_level_gate import TwoLevelGate

__all__ = ["TwoLevelRequest", "TwoLevelRounds"]


@dataclass
class TwoLevelRequest:
    """One request's two-level state in an engine (``Engine.request(rid).two_level``).

    Attributes:
        gate: the request's own gate, a copy of the verifier's gate as given (``request_gate()``: what
            ``generate`` starts each request with), so its measured rates are the request's own.
        stats: :class:`~specdec.verify.two_level.TwoLevelStats` of the request's rounds, counted as the
            batch-1 verifier counts them. A stage's seconds are the wall time of the engine's shared stage
            (every request in it is charged the whole stage).
        last_round: :class:`~specdec.verify.two_level.TwoLevelRound` of its most recent round.

    Example:
        >>> r = TwoLevelRequest(TwoLevelGate(mode="always"))
        >>> r.stats.rounds, r.last_round
        (0, None)
    """

    gate: TwoLevelGate
    stats: TwoLevelStats = field(default_factory=TwoLevelStats)
    last_round: TwoLevelRound | None = None


class TwoLevelRounds:
    """The two-level half of an :class:`~specdec.engine.Engine` whose verifier is a :class:`TwoLevelVerifier`.

    The engine calls :meth:`prepare` after draft 1 (gates, the Q pass, draft 2, the exact plans),
    :meth:`rows` for each request's rows of the shared exact forward, and :meth:`accept` with its logits.

    Attributes:
        verifier: the engine's :class:`TwoLevelVerifier` (its budgets, view and acceptance; its own ``stats``
            and ``gate`` are left alone: each request has a :class:`TwoLevelRequest`).
        q_passes: Q forwards run (one per step with at least one two-level request).

    Example:
        >>> import specdec as sd
        >>> from specdec.engine import Engine
        >>> from specdec.testing import tiny_target
        >>> engine = Engine(tiny_target(seed=0), sd.NGramDrafter(), sd.TwoLevelVerifier(8, 8, gate="always"), max_batch=2)
        >>> ids = [engine.add_request(torch.tensor(p), max_new_tokens=12) for p in ([1, 2, 3, 1, 2], [4, 5, 4, 5])]
        >>> _ = engine.run()
        >>> engine.two_level.q_passes > 0, engine.request(ids[0]).two_level.stats.two_level_rounds > 0
        (True, True)
    """

    def __init__(self, verifier: TwoLevelVerifier):
        if type(verifier) is not TwoLevelVerifier:
            raise TypeError(f"verifier: expected a TwoLevelVerifier, got {type(verifier).__name__}")
        self.verifier = verifier
        self.q_passes = 0

    def check_target(self, target) -> None:
        """Raise ``ValueError`` unless the ragged ``target`` has the verifier's Q weight view."""
        views = target.weight_views
        if self.verifier.view not in views:
            raise ValueError(
                f"verifier: the Q pass needs the weight view {self.verifier.view!r}; "
                f"the target {type(target).__name__} has {tuple(views)}"
            )

    def prepare(self, engine, states: list, failures: list, step_start: float) -> None:
        """Gates, the Q pass, draft 2 and the exact plans of ``states`` (running requests holding a draft-1 proposal).

        A request whose gate, proposal, Q walk or second draft raises fails alone (``engine._fail``, appended
        to ``failures``); the others go on. ``step_start``: when the step began (the gate's round time).
        """
        verifier, target = self.verifier, engine.target
        two_level = []
        for state in states:
            try:
                if state.two_level is None:
                    state.two_level = TwoLevelRequest(verifier.request_gate())
                proposal = state.pending["proposal"]
                if verifier.validate_proposals:
                    proposal.validate(vocab_size=target.vocab_size)
                # as TwoLevelVerifier.verify: a two-level round needs room for the root and the Q next token
                level = target.room(state.slot) >= 2 and state.two_level.gate.choose()
                state.pending.update(two_level=level, step_start=step_start)
                if level:
                    root = state.buf[state.length - 1 : state.length]
                    state.pending["q_plan"] = verifier.q_plan(
                        proposal, root, prefix_len=target.length(state.slot), room=target.room(state.slot)
                    )
                    two_level.append(state)
            except Exception as err:
                engine._fail(state, err)
                failures.append((state, err))
        if not two_level:
            return
        t = time.perf_counter()
        taps = sorted({layer for state in two_level for layer in engine._taps_for(state)})
        rows = [RequestRows.from_plan(state.slot, state.pending["q_plan"]) for state in two_level]
        outs = target.forward(rows, hidden_layers=taps, view=verifier.view)
        self.q_passes += 1
        drafting = []
        for state, out in zip(two_level, outs):
            target.discard(state.slot)
            try:
                drafting.append(self._q_walk(engine, state, out, taps))
            except Exception as err:
                engine._fail(state, err)
                failures.append((state, err))
        t = self._charge(two_level, "q_pass", t)
        self._second_drafts(engine, drafting, failures)
        for state in drafting:
            if state.status != "running":
                continue
            try:
                pending = state.pending
                subtree, plan = verifier.exact_plan(
                    pending["chain"],
                    pending.pop("second"),
                    pending["k2"],
                    state.buf[state.length - 1 : state.length],
                    prefix_len=target.length(state.slot),
                    vocab_size=target.vocab_size,
                )
                pending.update(subtree=subtree, plan=plan)
            except Exception as err:
                engine._fail(state, err)
                failures.append((state, err))
        self._charge(two_level, "draft2", t)

    def _q_walk(self, engine, state, out, taps: list[int]):
        """The request's Q chain and its draft-2 arguments, from its rows of the Q forward."""
        target, pending = engine.target, state.pending
        chain, chain_rows = self.verifier.q_chain(
            pending["q_plan"],
            out.logits[0],
            sampling=state.sampling,
            context=state.buf[: state.length],
            room=target.room(state.slot),
        )
        mine = engine._taps_for(state)
        q_hidden = torch.stack([out.hidden[taps.index(layer)][0] for layer in mine], dim=1) if mine else None
        context2, k2, extra = self.verifier.second_draft_request(
            state.buf[: state.length], chain, chain_rows, q_hidden, room=target.room(state.slot)
        )
        pending.update(chain=chain, context2=context2, k2=k2, draft2_extra=extra, second=None)
        return state

    def _second_drafts(self, engine, states: list, failures: list) -> None:
        """Draft 2 of every request with subtree room (``k2 > 0``), as its drafter's second call of the round."""
        asking = [state for state in states if state.status == "running" and state.pending["k2"] > 0]
        if not asking:
            return
        if engine._batch_drafter is not None:
            try:
                proposals = engine._batch_drafter.propose_batch(
                    [state.slot for state in asking],
                    [state.pending["context2"] for state in asking],
                    [state.pending["k2"] for state in asking],
                    samplings=[state.sampling for state in asking],
                    generators=[state.generator for state in asking],
                    target_hiddens=[state.pending["draft2_extra"].get("target_hidden") for state in asking],
                )
                if not isinstance(proposals, (list, tuple)) or len(proposals) != len(asking):
                    got = len(proposals) if isinstance(proposals, (list, tuple)) else type(proposals).__name__
                    raise TypeError(f"drafter: propose_batch() expected to return {len(asking)} proposals, got {got}")
            except Exception as err:  # one call drafted for all of them: all of them fail
                for state in asking:
                    engine._fail(state, err)
                    failures.append((state, err))
                return
        for i, state in enumerate(asking):
            pending = state.pending
            try:
                if engine._batch_drafter is not None:
                    second = proposals[i]
                else:
                    second = state.drafter.propose(
                        pending["context2"],
                        pending["k2"],
                        sampling=state.sampling,
                        generator=state.generator,
                        **pending["draft2_extra"],
                    )
                if not isinstance(second, DraftProposal):
                    raise TypeError(f"drafter: propose() returned {type(second).__name__}, expected a DraftProposal")
                check_proposal_size(second, pending["k2"])
                pending["second"] = second
            except Exception as err:
                engine._fail(state, err)
                failures.append((state, err))

    def _charge(self, states: list, stage: str, since: float) -> float:
        now = time.perf_counter()
        for state in states:
            state.two_level.stats.seconds[stage] += now - since
        return now

    def rows(self, target, state) -> RequestRows:
        """The request's rows of the shared exact forward: its exact plan (two-level) or its tree round's plan."""
        pending = state.pending
        if not pending["two_level"]:
            pending["plan"] = plan_round(
                self.verifier.one_level,
                pending["proposal"],
                state.buf[state.length - 1 : state.length],
                prefix_len=target.length(state.slot),
                room=target.room(state.slot),
                vocab_size=target.vocab_size,
            )
        pending.update(verified=pending["proposal"], nodes=None)
        return RequestRows.from_plan(state.slot, pending["plan"])

    def accept(self, state, pending: dict, logits: torch.Tensor) -> RoundOutcome:
        """The request's acceptance from its rows' exact logits ``[T_i, V]`` (its generator draws here only)."""
        context = state.buf[: state.length]
        pending["accept_start"] = time.perf_counter()
        if not pending["two_level"]:
            outcome = accept_round(
                self.verifier.one_level,
                pending["plan"],
                logits,
                pending["proposal"],
                sampling=state.sampling,
                generator=state.generator,
                context=context,
            )
            rnd = TwoLevelRound(False, None, None, None, pending["plan"].tree, outcome.num_accepted)
        else:
            plan: VerifyPlan = pending["plan"]
            walk = self.verifier.accept_exact(plan, logits, sampling=state.sampling, generator=state.generator, context=context)
            outcome = RoundOutcome(
                emitted=walk.emitted, num_accepted=walk.num_accepted, commit=plan.accepted_rows(walk.num_accepted, walk.rows)
            )
            rnd = TwoLevelRound(True, pending["q_plan"].tree, pending["chain"], pending["subtree"], plan.tree, walk.num_accepted)
            self.verifier.record_two_level_round(state.two_level.stats, pending["chain"], walk.num_accepted)
        state.two_level.last_round = rnd
        return outcome

    def finish(self, state, pending: dict, num_accepted: int, exact_seconds: float) -> None:
        """After the request's commit: its round counters, stage times and its gate's measured round.

        ``exact_seconds``: the wall time of the step's shared exact forward.
        """
        stats, level = state.two_level.stats, pending["two_level"]
        now = time.perf_counter()
        if level:
            stats.seconds["exact"] += exact_seconds
            stats.seconds["commit"] += now - pending["accept_start"]
        else:
            stats.seconds["one_level"] += now - pending["step_start"]
        stats.rounds += 1
        stats.exact_passes += 1
        stats.emitted += num_accepted + 1
        state.two_level.gate.record(level, tokens=num_accepted + 1, seconds=now - pending["step_start"])
