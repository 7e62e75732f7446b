"""``SpeculativeSpeculationDrafter``: pre-draft round ``t + 1`` for the likely outcomes of round ``t``.

Round ``t``: return a proposal, then (before returning) submit a job that predicts the outcomes of its
verification, ``(k accepted, bonus)``, and drafts a continuation after each. Round ``t + 1``: read the
actual outcome off the context, return the cached continuation on a hit, a backup's proposal on a
miss. On a GPU the job overlaps the verification; on a CPU the same schedule runs in sequence.

Why it stays exact: a cached continuation is drawn from its reported law with randomness of its own
(a generator derived per round), independently of the verifier's draws; which entry is used depends
only on the emitted tokens. So given everything the verifier sees, each proposal is a draw from the
law it reports, and the chain rule (or the deterministic-proposal rule) makes the emitted tokens
target samples.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field

import torch

from specdec.contracts.drafter import Drafter, check_propose_arguments
from specdec.contracts.proposal import DraftProposal
from specdec.contracts.sampling import SamplingConfig
from specdec.drafters.ssd.backups import BACKUP_KINDS, BatchAwareBackup, NeuralBackup, make_backup
from specdec.drafters.ssd.cache import CachedSpeculation, SpeculationCache
from specdec.drafters.ssd.drafting import Sampler, StepScores, draft_chain, ranking_law
from specdec.drafters.ssd.fan_out import UniformFanOut
from specdec.drafters.ssd.outcome import VerificationOutcome, read_outcome
from specdec.drafters.ssd.predictor import OutcomePredictor
from specdec.drafters.ssd.saguaro import SaguaroTransform
from specdec.drafters.ssd.transport import CudaStreamTransport, PredraftTransport, SequentialTransport, ThreadTransport
from specdec.verify.sampling import sample

__all__ = ["SpeculationStats", "SpeculativeSpeculationDrafter"]

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64: a well-spread 64-bit hash, so per-round seeds do not collide with request seeds."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (x ^ (x >> 31)) & ((1 << 63) - 1)


@dataclass
class SpeculationStats:
    """Counters a benchmark reads from :attr:`SpeculativeSpeculationDrafter.stats` (summed over requests).

    Attributes:
        hits: rounds served from the speculation cache, or from the last round's own drafts (``tail_hits``).
        tail_hits: rounds after a verify budget's cut (:meth:`SpeculativeSpeculationDrafter.verified`) whose every
            verified draft was accepted and whose bonus was the first unverified draft: the drafts after it are
            already a continuation of the emitted tokens, drawn from the law they report, and are proposed again
            when they are at least as many as the cut verified (no pre-drafted continuation covers that outcome).
        misses: rounds after a verification whose outcome was not cached, or after a round of no drafts (a backup
            proposed).
        cold_starts: first rounds of a request (nothing was pre-drafted yet; a backup proposed).
        predrafts: continuations pre-drafted.
        predraft_s: seconds spent in pre-draft jobs (on the worker, when the transport has one).
        backup_s: seconds spent in backups.
        backups: proposals per backup kind.
    """

    hits: int = 0
    tail_hits: int = 0
    misses: int = 0
    cold_starts: int = 0
    predrafts: int = 0
    predraft_s: float = 0.0
    backup_s: float = 0.0
    backups: dict[str, int] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)`` (0.0 before any lookup)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


@dataclass
class _Pending:
    """The round whose pre-draft job is in flight."""

    context: torch.Tensor
    proposal: DraftProposal
    ranking: torch.Tensor | None
    sampling: SamplingConfig
    collected: bool = False
    fan_out: list[int] = field(default_factory=list)
    verified: int | None = None  # the drafts a verify budget checked, when fewer than the proposal's

    @property
    def tokens(self) -> torch.Tensor:
        return self.proposal.tokens

    def cut_before_bonus(self, outcome: VerificationOutcome | None) -> bool:
        """``outcome`` accepted every draft a verify budget's cut verified and emitted the first unverified one as its
        bonus: an outcome no pre-draft covers (the predictor gives draft ``k + 1`` no mass as the bonus at ``k``)."""
        n = self.verified
        return (
            outcome is not None
            and n is not None
            and outcome.k == n
            and n < self.tokens.numel()
            and outcome.bonus == int(self.tokens[n])
        )

    def unverified_tail(self) -> CachedSpeculation | None:
        """The drafts after the first unverified one, for an outcome that emitted every verified draft and then that
        one (:meth:`cut_before_bonus`), when they are at least as many as the budget verified (``None`` otherwise).

        The tail was drawn after that draft, with randomness the verifier never saw, and the cut did not read it (a
        budget cuts a sampled chain by depth alone): given the emitted tokens it is a draw from the law it reports. A
        tail shorter than the last cut would make the next round shorter than the budget is likely to verify, where
        a backup drafts in full.
        """
        n, p = self.verified, self.proposal
        if n is None or p.tree is not None or p.parents is not None or p.tokens.numel() - n - 1 < max(n, 1):
            return None
        tail = DraftProposal(
            tokens=p.tokens[n + 1 :],
            draft_probs=None if p.draft_probs is None else p.draft_probs[n + 1 :],
            tree_logprobs=None if p.tree_logprobs is None else p.tree_logprobs[n + 1 :],
            confidence=None if p.confidence is None else p.confidence[n + 1 :],
        )
        ranking = None if self.ranking is None or self.ranking.shape[0] < p.tokens.numel() else self.ranking[n + 1 :]
        return CachedSpeculation(tail, ranking)


@dataclass
class _PredraftResult:
    entries: dict[VerificationOutcome, CachedSpeculation]
    fan_out: list[int]
    seconds: float


class SpeculativeSpeculationDrafter:
    """A :class:`~specdec.contracts.Drafter` that speculates on its own verification (SSD / Saguaro).

    Args:
        base: the neural drafter; it is asked for next-token scores only (a one-token greedy proposal
            with ``tree_logprobs``, as :class:`~specdec.drafters.ModelDrafter` gives) and this drafter
            draws, transforms and reports every token itself.
        fan_out: continuations pre-drafted per round: an int ``B`` (:class:`UniformFanOut`) or a policy
            with ``allocate(num_drafts, caps)`` / ``observe(...)`` such as :class:`GeometricFanOut`.
        backup: on a miss: ``"neural"`` (the base, just in time), ``"ngram"``, ``"random"``, any
            :class:`~specdec.contracts.Drafter`, or a :class:`BatchAwareBackup` choosing per row.
        transform: a :class:`SaguaroTransform` applied to every sampled draft law (drawn from and reported).
        predictor: ranks outcomes (default :class:`OutcomePredictor`).
        transport: where pre-draft jobs run: ``None`` or ``"sequential"`` (inline, before the verify pass),
            ``"thread"`` (a worker thread), ``"stream"`` (a worker thread issuing on a CUDA side stream, made
            on the first context's device: :class:`CudaStreamTransport`, see its known limitation with
            graph-replaying drafters), or a :class:`PredraftTransport`.
        sampler: ``(probs [V], generator) -> token``, every draw (default :func:`specdec.verify.sample`).

    Attributes:
        stats: :class:`SpeculationStats`.
        cache: the :class:`SpeculationCache` of the round.

    Example:
        >>> import specdec
        >>> from specdec.drafters import ModelDrafter
        >>> from specdec.testing import tiny_target
        >>> target, prompt = tiny_target(seed=0), torch.tensor([[1, 2, 3]])
        >>> drafter = SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0)), fan_out=4)
        >>> out = specdec.generate(target, prompt, max_new_tokens=10, drafter=drafter, num_draft_tokens=3)
        >>> torch.equal(out.tokens, specdec.generate(target, prompt, max_new_tokens=10).tokens), drafter.stats.hits > 0
        (True, True)
    """

    def __init__(
        self,
        base: Drafter,
        *,
        fan_out=8,
        backup="neural",
        transform: SaguaroTransform | None = None,
        predictor: OutcomePredictor | None = None,
        transport: PredraftTransport | str | None = None,
        sampler: Sampler = sample,
    ):
        if not isinstance(base, Drafter):
            raise TypeError(f"base: expected a Drafter (reset, propose, vocab_size), got {type(base).__name__}")
        taps = tuple(getattr(base, "target_layer_ids", ()) or ())
        if taps:
            raise ValueError(
                f"base: {type(base).__name__} reads target features (target_layer_ids {taps}), which the speculation "
                "cache cannot give it: it drafts ahead of the verify pass that computes them"
            )
        if isinstance(fan_out, int) and not isinstance(fan_out, bool):
            fan_out = UniformFanOut(fan_out)
        if not (callable(getattr(fan_out, "allocate", None)) and callable(getattr(fan_out, "observe", None))):
            raise TypeError(f"fan_out: expected an int budget or a policy with allocate/observe, got {type(fan_out).__name__}")
        if isinstance(backup, str):
            if backup not in BACKUP_KINDS:
                raise ValueError(f"backup: expected one of {BACKUP_KINDS}, a Drafter or a BatchAwareBackup, got {backup!r}")
        elif not isinstance(backup, (BatchAwareBackup, Drafter)):
            raise TypeError(
                f"backup: expected one of {BACKUP_KINDS}, a Drafter or a BatchAwareBackup, got {type(backup).__name__}"
            )
        kinds = (
            {backup} if isinstance(backup, str) else {backup.slow, backup.fast} if isinstance(backup, BatchAwareBackup) else set()
        )
        if "random" in kinds and base.vocab_size is None:
            raise ValueError("backup: 'random' needs the vocabulary size, got a base drafter with vocab_size None")
        if transform is not None and not isinstance(transform, SaguaroTransform):
            raise TypeError(f"transform: expected a SaguaroTransform or None, got {type(transform).__name__}")
        if transport is not None and not isinstance(transport, (str, PredraftTransport)):
            raise TypeError(
                f"transport: expected None, 'sequential', 'thread', 'stream' or a PredraftTransport, got {type(transport).__name__}"
            )
        if isinstance(transport, str) and transport not in ("sequential", "thread", "stream"):
            raise ValueError(f"transport: expected 'sequential', 'thread' or 'stream', got {transport!r}")
        if not callable(sampler):
            raise TypeError(f"sampler: expected a callable (probs, generator) -> token, got {type(sampler).__name__}")
        self.base = base
        self.vocab_size = base.vocab_size
        self.fan_out = fan_out
        # each request starts from the policy as given: what it learned from earlier requests would move which
        # outcomes are pre-drafted, hence hits and misses and the draws of a seeded request's generator
        self._fan_out_start = copy.deepcopy(fan_out)
        self.backup = backup
        self.transform = transform
        self.predictor = predictor if predictor is not None else OutcomePredictor()
        self.sampler = sampler
        self.transport: PredraftTransport | None = (
            SequentialTransport()
            if transport in (None, "sequential")
            else ThreadTransport()
            if transport == "thread"
            else None
            if transport == "stream"
            else transport
        )
        self.stats = SpeculationStats()
        self.cache = SpeculationCache()
        self._step = StepScores(base)
        self._pending: _Pending | None = None
        self._round = 0

    def reset(self) -> None:
        """Start a request: finish any pre-draft in flight, drop the cache, reset the base and the fan-out policy to
        its state at construction (stats keep counting), so that a seeded request's tokens do not depend on the
        requests before it.

        Example:
            >>> from specdec.drafters import ModelDrafter
            >>> from specdec.testing import tiny_target
            >>> SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0))).reset()
        """
        if self._pending is not None and not self._pending.collected:
            self.transport.wait()
        self._pending = None
        self._round = 0
        self.cache.replace({})
        self.fan_out = copy.deepcopy(self._fan_out_start)
        self.base.reset()

    def verified(self, num_drafts: int) -> None:
        """The last round's first ``num_drafts`` drafts were verified, the rest never were (a verify budget's cut): the
        fan-out policy then reads the round as ``num_drafts`` drafts, all accepted unless one before the cut was
        rejected (:class:`~specdec.contracts.drafter.PartlyVerifiedDrafter`).

        Example:
            >>> from specdec.drafters import ModelDrafter
            >>> from specdec.testing import tiny_target
            >>> ssd = SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0)))
            >>> ssd.reset(); _ = ssd.propose(torch.tensor([1, 2, 3]), 4, sampling=SamplingConfig(), generator=None)
            >>> ssd.verified(2)  # the round's first 2 of 4 drafts were checked
            >>> ssd.verified(-1)
            Traceback (most recent call last):
            ...
            ValueError: num_drafts: expected an int >= 0, got -1
        """
        if isinstance(num_drafts, bool) or not isinstance(num_drafts, int) or num_drafts < 0:
            raise ValueError(f"num_drafts: expected an int >= 0, got {num_drafts!r}")
        if self._pending is not None and num_drafts < self._pending.tokens.numel():
            self._pending.verified = num_drafts

    def finish(self) -> None:
        """End the request: wait for the pre-draft in flight (it keeps running on the transport's worker
        otherwise, using the base drafter after ``generate`` returned) and drop its cache entries: the
        round they were drafted for is never verified. Its time still counts in ``stats.predraft_s``.

        Example:
            >>> from specdec.drafters import ModelDrafter
            >>> from specdec.testing import tiny_target
            >>> ssd = SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=0)), transport="thread")
            >>> ssd.reset(); _ = ssd.propose(torch.tensor([3, 4]), 2, sampling=SamplingConfig(), generator=None)
            >>> ssd.finish(); ssd.transport.wait() is None
            True
        """
        pending, self._pending = self._pending, None
        self.cache.replace({})
        if pending is not None and not pending.collected:
            result: _PredraftResult | None = self.transport.wait()  # a job that raised raises here
            if result is not None:  # None: its error was already raised (and the request stopped) at collection
                self.stats.predrafts += len(result.entries)
                self.stats.predraft_s += result.seconds

    def _collect(self) -> None:
        pending = self._pending
        if pending is None or pending.collected:
            return
        result: _PredraftResult = self.transport.wait()
        pending.collected = True
        pending.fan_out = result.fan_out
        self.cache.replace(result.entries)
        self.stats.predrafts += len(result.entries)
        self.stats.predraft_s += result.seconds

    def outcome(self, context: torch.Tensor, sampling: SamplingConfig | None = None) -> VerificationOutcome | None:
        """The outcome of the last proposal's verification read from ``context [n]`` (``None``: none readable); after
        a verify budget's cut (:meth:`verified`), of its verified drafts."""
        pending = self._pending
        if pending is None or (sampling is not None and sampling != pending.sampling):
            return None
        tokens = pending.tokens if pending.verified is None else pending.tokens[: pending.verified]
        return read_outcome(pending.context, tokens, context)

    def peek(self, context: torch.Tensor, sampling: SamplingConfig | None = None) -> CachedSpeculation | None:
        """The continuation :meth:`propose` would return after ``context [n]`` from the cache or the last round's
        unverified drafts (``None`` on a miss); counts nothing."""
        self._collect()
        outcome = self.outcome(context, sampling)
        pending = self._pending
        tail = pending.unverified_tail() if pending is not None and pending.cut_before_bonus(outcome) else None
        return tail if tail is not None else self.cache.peek(outcome)

    def _backup_proposal(self, context, max_tokens, sampling, generator) -> tuple[DraftProposal, torch.Tensor | None]:
        backup = self.backup
        if isinstance(backup, BatchAwareBackup):
            backup = backup.choose()
        if isinstance(backup, str):
            backup = make_backup(
                backup, step=self._step, vocab_size=self.vocab_size, transform=self.transform, sampler=self.sampler
            )
        kind = getattr(backup, "kind", type(backup).__name__)
        self.stats.backups[kind] = self.stats.backups.get(kind, 0) + 1
        start = time.perf_counter()
        if isinstance(backup, NeuralBackup):
            chain = backup.draft(context, max_tokens, sampling=sampling, generator=generator)
            proposal, ranking = chain.proposal, chain.ranking
        else:
            proposal, ranking = backup.propose(context, max_tokens, sampling=sampling, generator=generator), None
        self.stats.backup_s += time.perf_counter() - start
        return proposal, ranking

    def _child_generator(self, generator: torch.Generator | None, device: torch.device) -> torch.Generator:
        if generator is None:
            seed = int(torch.randint(0, 1 << 62, (1,)))
        else:
            seed = _mix64(_mix64(generator.initial_seed()) ^ self._round)
        return torch.Generator(device=device).manual_seed(seed)

    def _predraft(self, context, tokens, ranking, num_tokens, sampling, generator) -> _PredraftResult:
        start = time.perf_counter()
        k = tokens.numel()
        rows = [] if ranking is None or ranking.numel() == 0 else list(ranking[: k + 1].unbind(0))
        for j in range(len(rows), k + 1):
            # the glue law: the base's own law after each prefix of the proposal
            scores = self._step(torch.cat([context, tokens[:j]]))
            if scores is None:  # the base holds no longer context: nothing to pre-draft after this round
                return _PredraftResult({}, [], time.perf_counter() - start)
            rows.append(ranking_law(scores, sampling))
        glue = torch.stack(rows)  # [k + 1, V]
        fan_out = list(self.fan_out.allocate(k, self.predictor.candidates(glue, tokens)))
        entries = {}
        for outcome in self.predictor.predict(glue, tokens, fan_out):
            bonus = torch.tensor([outcome.bonus], dtype=torch.long, device=context.device)
            ctx = torch.cat([context, tokens[: outcome.k], bonus])
            chain = draft_chain(
                self._step,
                ctx,
                num_tokens,
                sampling=sampling,
                generator=generator,
                sampler=self.sampler,
                transform=self.transform,
            )
            entries[outcome] = CachedSpeculation(chain.proposal, chain.ranking)
        return _PredraftResult(entries, fan_out, time.perf_counter() - start)

    @torch.no_grad()
    def propose(self, context, max_tokens, *, sampling: SamplingConfig, generator: torch.Generator | None) -> DraftProposal:
        """The cached continuation for the last round's outcome, else a backup's; then pre-draft the next round.

        Args:
            context: ``[n]`` int64, the request so far (prompt, then every emitted token).
            max_tokens: the most drafts; cached continuations longer than this are cut (a prefix keeps its law).
            sampling: the request's law; greedy drafts are argmax chains reported as deterministic.
            generator: the request's RNG: backups draw from it; pre-drafts draw from a generator derived
                from its seed and the round, so they are independent of the verifier's draws.

        Returns:
            :class:`DraftProposal` ``tokens [k]`` with ``draft_probs [k, V]`` when drawn (the transformed
            law when a :class:`SaguaroTransform` is set), ``None`` when chosen.
        """
        check_propose_arguments(context, max_tokens)
        if self.transport is None:
            if context.device.type != "cuda":
                raise ValueError(f"transport: 'stream' needs a CUDA context, got a context on {context.device}")
            self.transport = CudaStreamTransport(context.device)
        pending = self._pending
        self._collect()
        entry = None
        if pending is None:  # a request's first round, or one after a round of no drafts (nothing pre-drafted)
            if self._round == 0:
                self.stats.cold_starts += 1
            else:
                self.stats.misses += 1
        else:
            outcome = self.outcome(context, sampling)
            uncovered = pending.cut_before_bonus(outcome)  # one read of the draft after the cut
            entry = tail = pending.unverified_tail() if uncovered else None
            if tail is not None:
                self.stats.tail_hits += 1
            else:
                entry = self.cache.lookup(outcome)
            if entry is None:
                self.stats.misses += 1
            else:
                self.stats.hits += 1
            # a round cut by a verify budget had its first `verified` drafts judged: all accepted is no rejection
            drafts = pending.tokens.numel() if pending.verified is None else pending.verified
            if outcome is not None and outcome.k <= drafts:
                # an outcome no pre-draft covers says nothing of the fan-out's misses, tail or not
                fan_out = [] if uncovered else pending.fan_out
                self.fan_out.observe(outcome, drafts, fan_out, entry is not None)
        self._pending = None
        self._round += 1
        if entry is not None:
            entry = entry.truncated(max_tokens)
            proposal, ranking = entry.proposal, entry.ranking
        elif max_tokens == 0:
            proposal, ranking = DraftProposal(tokens=context.new_zeros(0)), None
        else:
            proposal, ranking = self._backup_proposal(context, max_tokens, sampling, generator)
        if max_tokens > 0:
            context, tokens = context.clone(), proposal.tokens.clone()
            child = self._child_generator(generator, context.device)
            self._pending = _Pending(
                context=context, proposal=dataclasses.replace(proposal, tokens=tokens), ranking=ranking, sampling=sampling
            )
            self.transport.submit(lambda: self._predraft(context, tokens, ranking, max_tokens, sampling, child))
        return proposal
