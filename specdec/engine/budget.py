"""A global verify budget: how many draft nodes each request verifies this round, chosen for the batch.

One target forward serves every running request, so its time depends on the total rows ``R`` it
holds, not on any one request. :class:`StepTimeTable` is that time, ``T(R)``, profiled once per
machine and model (:meth:`StepTimeTable.profile`). Each request offers marginal gains: ``gains[r][j]``
is the expected number of extra accepted tokens from verifying its ``(j + 1)``-th draft node, which
falls with ``j`` (a deeper node is accepted only if its ancestors are). :func:`allocate` picks node
counts ``n_r`` maximising the batch's expected emitted tokens per unit of batch time::

    (base_tokens + sum_r sum_{j < n_r} gains[r][j]) / T(fixed_rows + sum_r n_r)

For a fixed total ``N`` the best split is the ``N`` largest gains overall (each node costs one row and
each request's gains fall, so a greedy merge solves the knapsack exactly); the total is a 1-D scan.

The gains come from what the drafter said this round (its path scores or confidences) and from what
past rounds showed (:class:`AcceptanceEstimator`, one per request, calibrated online): never from the
target's draws of the round being planned. A best-first tree's shape may follow the drafter's scores
(sample-and-match emits the target's law on any tree the target's draws did not choose), and so may a
greedy chain's length; a chain the chain rule verifies at ``temperature > 0`` gets gains from the depth
posteriors alone (:func:`chain_gains`): a length that read the draft law at the drafted tokens would verify
a draft more often the likelier the drafter found it, which the chain rule does not correct for (the non-anticipation
DSpark's scheduler keeps). With that, any allocation is lossless.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import numbers
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from specdec.contracts.proposal import DraftProposal
from specdec.contracts.tree import Tree

__all__ = ["AcceptanceEstimator", "StepTimeTable", "allocate", "chain_gains", "expected_tokens_per_ms"]


def _check_positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:  # numpy ints too
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class StepTimeTable:
    """``T(R)``: milliseconds of one ragged target forward holding ``R`` rows in total.

    Between profiled row counts the time is interpolated linearly; past the last one it is extended
    along the last segment's slope (the compute-bound regime is affine in ``R``); below the first it is
    the first time (a forward never costs less than its smallest profiled shape).

    Attributes:
        rows: ``[P]`` profiled row counts, strictly increasing, ``>= 1``.
        ms: ``[P]`` milliseconds per forward at those counts, positive and non-decreasing.
        meta: free-form provenance (model, dtype, device, requests per forward).

    Example:
        >>> table = StepTimeTable(rows=(1, 16, 64), ms=(6.0, 7.0, 16.0))
        >>> table(1), table(8), table(64), table(96)
        (6.0, 6.466666666666667, 16.0, 22.0)
        >>> StepTimeTable.from_json(table.to_json()) == table
        True
    """

    rows: tuple[int, ...]
    ms: tuple[float, ...]
    meta: dict = field(default_factory=dict, compare=False)
    _times: list = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rows = tuple(self.rows) if isinstance(self.rows, (list, tuple)) else None
        ms = tuple(self.ms) if isinstance(self.ms, (list, tuple)) else None
        if not rows:
            raise ValueError(f"rows: expected a non-empty sequence of ints, got {self.rows!r}")
        if ms is None or len(ms) != len(rows):
            raise ValueError(f"ms: expected {len(rows)} times (one per row count), got {self.ms!r}")
        for r in rows:
            _check_positive_int("rows", r)
        if any(b <= a for a, b in zip(rows, rows[1:])):
            raise ValueError(f"rows: expected strictly increasing row counts, got {list(rows)}")
        for t in ms:
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
                raise ValueError(f"ms: expected finite times > 0, got {list(ms)}")
        if any(b < a for a, b in zip(ms, ms[1:])):
            raise ValueError(f"ms: expected times non-decreasing in rows, got {list(ms)}")
        if not isinstance(self.meta, dict):
            raise TypeError(f"meta: expected a dict, got {type(self.meta).__name__}")
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "ms", tuple(float(t) for t in ms))

    def __call__(self, rows: int) -> float:
        """Milliseconds of a forward with ``rows >= 1`` rows in total (see the class docstring)."""
        _check_positive_int("rows", rows)
        xs, ys = self.rows, self.ms
        if rows <= xs[0] or len(xs) == 1:
            return ys[0]
        i = 1
        while i < len(xs) - 1 and xs[i] < rows:
            i += 1
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (rows - x0) / (x1 - x0)

    def over(self, first: int, count: int) -> list[float]:
        """``[self(first), self(first + 1), ..., self(first + count - 1)]``, each row count's time worked out once per table.

        Example:
            >>> StepTimeTable(rows=(2, 4), ms=(10.0, 20.0)).over(1, 5)
            [10.0, 10.0, 15.0, 20.0, 25.0]
        """
        _check_positive_int("first", first)
        _check_positive_int("count", count, minimum=0)
        last = first + count - 1
        known = self._times  # known[r - 1] = self(r)
        if len(known) < last:
            xs, ys, i = self.rows, self.ms, 1
            for rows in range(len(known) + 1, last + 1):
                if rows <= xs[0] or len(xs) == 1:
                    known.append(ys[0])
                    continue
                while i < len(xs) - 1 and xs[i] < rows:
                    i += 1
                x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
                known.append(y0 + (y1 - y0) * (rows - x0) / (x1 - x0))
        return known[first - 1 : last]

    def to_json(self) -> str:
        """The table as a JSON string (``rows``, ``ms``, ``meta``)."""
        return json.dumps({"rows": list(self.rows), "ms": list(self.ms), "meta": self.meta})

    @classmethod
    def from_json(cls, text: str) -> StepTimeTable:
        """The table :meth:`to_json` wrote."""
        data = json.loads(text)
        if not isinstance(data, dict) or not {"rows", "ms"} <= set(data):
            raise ValueError(f"text: expected a JSON object with 'rows' and 'ms', got {text[:80]!r}")
        return cls(rows=tuple(data["rows"]), ms=tuple(data["ms"]), meta=data.get("meta", {}))

    @classmethod
    def profile(
        cls,
        target,
        rows: Sequence[int] = (1, 8, 16, 32, 64, 128, 256),
        *,
        requests: int = 1,
        prefix_len: int = 128,
        reps: int = 5,
        warmup: int = 2,
    ) -> StepTimeTable:
        """Time a ragged target's forward (:class:`~specdec.models.ragged.RaggedDenseTarget` or
        :class:`~specdec.models.ragged_hybrid.RaggedHybridTarget`) at each total row count.

        Each forward spreads its rows as evenly as it can over ``min(requests, rows)`` slots, each slot
        holding ``prefix_len`` committed tokens (random ids), with causal masks; the median of ``reps``
        timed calls (after ``warmup``) is kept. Slots used are reset afterwards. Measured times are made
        non-decreasing by a running maximum (the raw medians are kept in ``meta["measured_ms"]``).

        Args:
            target: a ``RaggedDenseTarget`` or ``RaggedHybridTarget`` with ``slots >= requests``.
            rows: total row counts to time, strictly increasing.
            requests: requests per forward (the engine's concurrency).
            prefix_len: committed tokens per request.
            reps, warmup: timed and untimed calls per row count.

        Example:
            >>> from specdec.testing import tiny_target
            >>> from specdec.models.ragged import RaggedDenseTarget
            >>> table = StepTimeTable.profile(RaggedDenseTarget(tiny_target(seed=0), slots=2), rows=(2, 8), requests=2,
            ...                               prefix_len=8, reps=1, warmup=0)
            >>> table.rows, len(table.ms)
            ((2, 8), 2)
        """
        from specdec.models.ragged import RaggedDenseTarget, RequestRows
        from specdec.models.ragged_hybrid import RaggedHybridTarget

        if not isinstance(target, (RaggedDenseTarget, RaggedHybridTarget)):
            raise TypeError(f"target: expected a RaggedDenseTarget or RaggedHybridTarget, got {type(target).__name__}")
        _check_positive_int("requests", requests)
        if requests > target.slots:
            raise ValueError(f"requests: expected at most the target's {target.slots} slots, got {requests}")
        _check_positive_int("prefix_len", prefix_len)
        _check_positive_int("reps", reps)
        _check_positive_int("warmup", warmup, minimum=0)
        rows = tuple(rows)
        cls(rows=rows, ms=(1.0,) * len(rows))  # checks the row counts before any work
        longest = -(-rows[-1] // min(requests, rows[-1]))
        if prefix_len + longest > target.max_seq_len:
            raise ValueError(
                f"prefix_len: {prefix_len} + {longest} rows per request exceeds the target's max_seq_len {target.max_seq_len}"
            )
        device, cuda = target.device, target.device.type == "cuda"
        gen = torch.Generator().manual_seed(0)
        for slot in range(requests):
            target.reset(slot)
            target.forward([RequestRows(slot, torch.randint(0, target.vocab_size, (1, prefix_len), generator=gen).to(device))])
            target.commit(slot, prefix_len)
        measured = []
        for total in rows:
            n = min(requests, total)
            sizes = [total // n + (1 if i < total % n else 0) for i in range(n)]
            batch = [
                RequestRows(s, torch.randint(0, target.vocab_size, (1, t), generator=gen).to(device)) for s, t in enumerate(sizes)
            ]
            times = []
            for rep in range(warmup + reps):
                if cuda:
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                target.forward(batch)
                if cuda:
                    torch.cuda.synchronize(device)
                if rep >= warmup:
                    times.append((time.perf_counter() - t0) * 1e3)
                for s in range(n):
                    target.discard(s)
            measured.append(sorted(times)[len(times) // 2])
        for slot in range(requests):
            target.reset(slot)
        envelope = [max(measured[: i + 1]) for i in range(len(measured))]
        meta = {
            "requests": requests,
            "prefix_len": prefix_len,
            "layout": target.layout,
            "dtype": str(target.dtype),
            "device": str(device),
            "measured_ms": measured,
        }
        return cls(rows=rows, ms=tuple(envelope), meta=meta)


def _plain_falling_rows(gains: list | tuple) -> bool:
    """Whether every row of ``gains`` is a list of floats, finite, ``>= 0`` and non-increasing: checked at C speed.

    ``False`` says nothing: the per-gain checks of :func:`_check_gains` then decide, and word the error.
    A NaN or an infinity makes the sum non-finite; a gain above the one before it makes its row differ
    from the row sorted.
    """
    if not all(isinstance(row, (list, tuple)) for row in gains):
        return False
    every = list(itertools.chain.from_iterable(gains))
    return (
        set(map(type, every)) <= {float}
        and math.isfinite(sum(every))
        and min(every, default=0.0) >= 0.0
        and all(list(row) == sorted(row, reverse=True) for row in gains)
    )


def _check_gains(gains: Sequence[Sequence[float]]) -> list[list[float]]:
    if not isinstance(gains, (list, tuple)):
        raise TypeError(f"gains: expected a list of per-request lists of floats, got {type(gains).__name__}")
    if _plain_falling_rows(gains):
        return [list(row) for row in gains]
    out = []
    for r, row in enumerate(gains):
        if not isinstance(row, (list, tuple)):
            raise TypeError(f"gains[{r}]: expected a list of floats, got {type(row).__name__}")
        values = []
        for g in row:
            if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or g < 0:
                raise ValueError(f"gains[{r}]: expected finite gains >= 0, got {list(row)}")
            values.append(float(g))
        if any(b > a for a, b in zip(values, values[1:])):
            raise ValueError(f"gains[{r}]: expected non-increasing marginal gains, got {values}")
        out.append(values)
    return out


def allocate(
    gains: Sequence[Sequence[float]],
    *,
    base_tokens: float,
    fixed_rows: int,
    step_time: StepTimeTable | None = None,
    max_nodes: int | None = None,
    max_rows: int | None = None,
) -> list[int]:
    """Draft nodes per request maximising expected tokens per unit of batch time (see the module docstring).

    Args:
        gains: ``gains[r]`` non-increasing expected extra accepted tokens of request ``r``'s 1st, 2nd, ...
            node (its length is the most nodes ``r`` can verify).
        base_tokens: tokens the forward emits whatever the allocation (one bonus token per verifying
            request, one per prefill that ends in this forward).
        fixed_rows: rows the forward holds whatever the allocation (root rows, prefill chunk rows), ``>= 1``.
        step_time: ``T(R)``; ``None`` maximises tokens under ``max_nodes`` / ``max_rows`` alone (every
            positive gain that fits).
        max_nodes: the most nodes over all requests; ``None`` = no cap beyond ``gains``' lengths.
        max_rows: the most rows of the forward, ``fixed_rows`` included (so at most ``max_rows -
            fixed_rows`` nodes); ``None`` = no cap.

    Returns:
        ``n_r`` per request, ``0 <= n_r <= len(gains[r])``, ``sum n_r <= max_nodes`` and
        ``fixed_rows + sum n_r <= max_rows``; among totals with the same objective the smallest is chosen,
        among equal gains the earlier request.

    Example:
        >>> table = StepTimeTable(rows=(2, 4, 8), ms=(10.0, 10.0, 20.0))
        >>> allocate([[0.9, 0.8, 0.1], [0.5, 0.4]], base_tokens=2, fixed_rows=2, step_time=table)
        [2, 0]
        >>> allocate([[0.9, 0.8, 0.1], [0.5, 0.4]], base_tokens=2, fixed_rows=2, max_nodes=3)
        [2, 1]
        >>> allocate([[0.9, 0.8, 0.1], [0.5, 0.4]], base_tokens=2, fixed_rows=2, max_nodes=3, max_rows=4)
        [2, 0]
    """
    values = _check_gains(gains)
    _check_base_tokens(base_tokens)
    _check_positive_int("fixed_rows", fixed_rows)
    if step_time is not None and not isinstance(step_time, StepTimeTable):
        raise TypeError(f"step_time: expected a StepTimeTable or None, got {type(step_time).__name__}")
    if max_nodes is not None:
        _check_positive_int("max_nodes", max_nodes, minimum=0)
    if max_rows is not None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, numbers.Integral) or max_rows < fixed_rows:  # numpy ints too
            raise ValueError(f"max_rows: expected None or an int >= fixed_rows = {fixed_rows}, got {max_rows!r}")
        max_rows = int(max_rows)
    if step_time is None and max_nodes is None and max_rows is None:
        raise ValueError(
            "step_time: expected a StepTimeTable when max_nodes and max_rows are None (nothing else bounds the allocation)"
        )
    # every request's gains fall, so the best N nodes are the N largest gains of all: their sum over the
    # falling order of all gains, one total at a time
    falling = sorted(itertools.chain.from_iterable(values), reverse=True)
    cap = len(falling)
    if max_nodes is not None:
        cap = min(cap, max_nodes)
    if max_rows is not None:
        cap = min(cap, max_rows - fixed_rows)
    tokens = list(itertools.accumulate(falling[:cap], initial=float(base_tokens)))  # [cap + 1], by node total
    objective = tokens if step_time is None else list(map(operator.truediv, tokens, step_time.over(fixed_rows, cap + 1)))
    best_total = objective.index(max(objective))  # the first, so the smallest, of equal maxima
    return _largest_counts(values, best_total, falling)


def _largest_counts(values: list[list[float]], total: int, falling: list[float]) -> list[int]:
    """How many of each request's (falling) gains are among the ``total`` largest, equal gains to earlier requests first.

    ``falling``: every gain, largest first.
    """
    counts = [0] * len(values)
    if total == 0:
        return counts
    threshold = -falling[total - 1]
    # the gains above the threshold all go in; ties with it fill what is left, request by request (each row
    # falls, so its negated gains rise and bisect finds both ends)
    ties = []
    for r, row in enumerate(values):
        counts[r] = bisect.bisect_left(row, threshold, key=operator.neg)
        ties += [r] * (bisect.bisect_right(row, threshold, lo=counts[r], key=operator.neg) - counts[r])
    for r in ties[: total - sum(counts)]:
        counts[r] += 1
    return counts


def _check_base_tokens(base_tokens: object) -> None:
    if (
        isinstance(base_tokens, bool)
        or not isinstance(base_tokens, (int, float))
        or not math.isfinite(base_tokens)
        or base_tokens < 0
    ):
        raise ValueError(f"base_tokens: expected a finite number >= 0, got {base_tokens!r}")


def expected_tokens_per_ms(
    gains: Sequence[Sequence[float]],
    counts: Sequence[int],
    *,
    base_tokens: float,
    fixed_rows: int,
    step_time: StepTimeTable | None,
) -> float:
    """The objective :func:`allocate` maximises, for given ``counts`` (tokens, or tokens per ms with ``step_time``).

    Example:
        >>> expected_tokens_per_ms([[0.5]], [1], base_tokens=1, fixed_rows=1, step_time=StepTimeTable((1, 2), (1.0, 2.0)))
        0.75
    """
    values = _check_gains(gains)
    _check_base_tokens(base_tokens)
    if len(counts) != len(values):
        raise ValueError(f"counts: expected one count a request ({len(values)}), got {len(counts)}")
    for r, (row, n) in enumerate(zip(values, counts)):
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= len(row):
            raise ValueError(f"counts[{r}]: expected an int in [0, {len(row)}] (the request's nodes), got {n!r}")
    tokens = base_tokens + sum(sum(row[:n]) for row, n in zip(values, counts))
    return tokens / step_time(fixed_rows + sum(counts)) if step_time is not None else tokens


class AcceptanceEstimator:
    """One request's expected accepted tokens per draft node, from the drafter's scores and past rounds.

    Non-anticipating by construction: :meth:`gains` reads this round's proposal and the counts of
    earlier rounds; :meth:`observe` adds a round once it has been verified.

    * When the drafter gives scores (``confidence``, a tree's path log-scores, ``tree_logprobs`` or
      ``draft_probs`` along the chain), a node's raw gain is its path probability under the drafter;
      the gains are that times a calibration ``(accepted + prior) / (predicted + prior)`` over past
      rounds, capped at 1.
    * Otherwise a node at depth ``d`` gains ``prod_{i <= d} alpha_i``, with ``alpha_i`` the posterior mean
      of the conditional acceptance at depth ``i`` (a ``Beta(prior_accept, prior_reject)`` prior updated
      by every round that reached depth ``i``). A depth no verified round has reached yet takes the pooled
      posterior mean of all depths reached so far: a budget that verifies only the first few nodes never
      observes the deeper ones, and their bare prior would keep them unallocated for good.

    Gains are made non-increasing in node order by a running minimum (a node never gains more than
    one verified before it), so :func:`allocate` takes prefixes; :meth:`in_gain_order` first puts a tree's
    nodes in the order that makes that minimum change nothing.

    With a ``pool`` (an estimator every request of a batch feeds, see :class:`~specdec.engine.Engine`),
    the prior of each depth is centred on the pool's posterior mean at that depth, with the same
    strength ``prior_accept + prior_reject``, and the score calibration's prior ratio is the pool's: a
    request that has verified few rounds borrows what its companions' rounds showed, and its own rounds
    take over as they accumulate. The pool only ever holds verified rounds, so this stays non-anticipating.

    Args:
        prior_accept, prior_reject: the Beta prior of each depth's acceptance (``> 0``).
        prior_tokens: pseudo-tokens of the score calibration's prior (``> 0``).
        pool: an estimator whose posterior is this one's prior; :meth:`observe` feeds it too.

    Example:
        >>> est = AcceptanceEstimator()
        >>> [round(g, 3) for g in est.gains(DraftProposal(torch.tensor([1, 2])))]
        [0.5, 0.25]
        >>> est.observe(DraftProposal(torch.tensor([1, 2])), nodes=2, accepted=2)
        >>> [round(g, 3) for g in est.gains(DraftProposal(torch.tensor([1, 2])))]
        [0.667, 0.444]
    """

    def __init__(
        self,
        *,
        prior_accept: float = 1.0,
        prior_reject: float = 1.0,
        prior_tokens: float = 1.0,
        pool: AcceptanceEstimator | None = None,
    ):
        for name, value in (("prior_accept", prior_accept), ("prior_reject", prior_reject), ("prior_tokens", prior_tokens)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
        if pool is not None and not isinstance(pool, AcceptanceEstimator):
            raise TypeError(f"pool: expected an AcceptanceEstimator or None, got {type(pool).__name__}")
        self.prior_accept, self.prior_reject, self.prior_tokens = float(prior_accept), float(prior_reject), float(prior_tokens)
        self.pool = pool
        self.reached: list[int] = []
        self.passed: list[int] = []
        self.scored_predicted = 0.0
        self.scored_accepted = 0
        self._observed = 0  # rounds observed so far
        self._rates_memo: tuple[tuple, list[float]] | None = None

    @staticmethod
    def score_tensor(proposal: DraftProposal, tree: Tree | None = None) -> torch.Tensor | None:
        """Raw path probabilities per node under the drafter (``[nodes]`` float32, where the proposal's tensors
        are), or ``None`` when it gave no scores. A caller with many requests reads them all at once and passes
        each request's list as ``scores`` to :meth:`gains` and :meth:`observe`.

        Example:
            >>> lp = torch.log(torch.tensor([[0.5, 0.5], [0.2, 0.8]]))
            >>> AcceptanceEstimator.score_tensor(DraftProposal(torch.tensor([0, 1]), tree_logprobs=lp))
            tensor([0.5000, 0.4000])
        """
        k = proposal.num_tokens
        # the confidences are the proposal's nodes': a chain's, or its own tree's; a tree a verifier built from a chain
        # proposal (best-first from its laws) has other nodes, scored by the tree
        own_nodes = tree is None or (proposal.tree is not None or proposal.parents is not None)
        if (
            own_nodes
            and proposal.confidence is not None
            and proposal.confidence.numel() == (k if tree is None else tree.num_nodes)
        ):
            return proposal.confidence.float().clamp(0.0, 1.0)
        if tree is not None:
            if tree.scores is None:
                return None
            return tree.scores.float().exp().clamp(0.0, 1.0)
        if k == 0:
            return torch.zeros(0)
        if proposal.tree_logprobs is not None:
            picked = proposal.tree_logprobs[:k].float().gather(1, proposal.tokens[:k, None]).squeeze(1)
            return picked.cumsum(0).exp().clamp(0.0, 1.0)
        if proposal.draft_probs is not None:
            picked = proposal.draft_probs[:k].float().gather(1, proposal.tokens[:k, None]).squeeze(1)
            return picked.clamp(0.0, 1.0).cumprod(0)
        return None

    @classmethod
    def _scores(cls, proposal: DraftProposal, tree: Tree | None, scores: list[float] | None = None) -> list[float] | None:
        """:meth:`score_tensor` as floats (``scores``: already read), one a node, each a probability."""
        nodes = tree.num_nodes if tree is not None else proposal.num_tokens
        if scores is None:
            t = cls.score_tensor(proposal, tree)
            if t is None:
                return None
            scores, name = t.tolist(), "proposal's scores (confidence, tree scores or logprobs)"
        else:
            name = "scores"
        if len(scores) != nodes:
            raise ValueError(f"{name}: expected one a node ({nodes}), got {len(scores)}")
        bad = [s for s in scores if not (isinstance(s, (int, float)) and 0.0 <= s <= 1.0)]  # NaN fails too
        if bad:
            raise ValueError(f"{name}: expected probabilities in [0, 1], got {bad[:3]}")
        return scores

    def _rates(self, max_depth: int) -> list[float]:
        """Posterior mean of the conditional acceptance at depths ``1..max_depth`` (read-only: kept until a round is observed).

        Every request of a round asks its pool for the same rates, so they are worked out once per round.
        """
        means = self.pool._rates(max_depth) if self.pool is not None else None
        # the rates are a function of the rounds observed here and of the pool's rates
        key = (max_depth, self._observed, means)
        if self._rates_memo is not None and self._rates_memo[0] == key:
            return self._rates_memo[1]
        strength = self.prior_accept + self.prior_reject
        if means is not None:
            unreached = means
        else:
            means = [self.prior_accept / strength] * max_depth
            # without a pool, a depth never reached takes the pooled rate of the depths that were
            unreached = [(sum(self.passed) + self.prior_accept) / (sum(self.reached) + strength)] * max_depth
        seen = min(max_depth, len(self.reached))
        rates = [
            (passed + strength * mean) / (reached + strength) if reached else fallback
            for reached, passed, mean, fallback in zip(self.reached[:seen], self.passed[:seen], means, unreached)
        ]
        rates += unreached[seen:max_depth]
        self._rates_memo = (key, rates)
        return rates

    def _survivals(self, max_depth: int) -> list[float]:
        """``[P(reach depth 0), ..., P(reach depth max_depth)]``: products of the depths' posterior means."""
        return list(itertools.accumulate(self._rates(max_depth), operator.mul, initial=1.0))

    def _score_scale(self) -> float:
        """Calibration of the drafter's scores: (accepted + prior) / (predicted + prior), the prior ratio the pool's."""
        ratio = self.pool._score_scale() if self.pool is not None else 1.0
        return (self.scored_accepted + self.prior_tokens * ratio) / (self.scored_predicted + self.prior_tokens)

    def raw_gains(
        self, proposal: DraftProposal, tree: Tree | None = None, *, scores: list[float] | None = None
    ) -> tuple[list[float], bool]:
        """``(gains before calibration, scored)``: per node (of ``tree`` if given, else of the chain); ``scores``:
        the proposal's :meth:`score_tensor` already read."""
        scores = self._scores(proposal, tree, scores)
        if scores is not None:
            return scores, True
        if tree is None:
            return self._survivals(proposal.num_tokens)[1:], False
        # a node is accepted when its parent is, every sibling before it was rejected, and it is accepted: with the
        # depth's rate p, a j-th sibling gains parent x (1 - p)^j x p (a chain: the depth's survival)
        depths, parents = tree.depth.tolist(), tree.parents.tolist()
        rates = self._rates(max(depths, default=0))
        gains: list[float] = []
        siblings_before: dict[int, int] = {}
        for depth, parent in zip(depths, parents):
            rank = siblings_before.get(parent, 0)
            siblings_before[parent] = rank + 1
            rate = rates[depth - 1]
            gains.append((1.0 if parent < 0 else gains[parent]) * (1.0 - rate) ** rank * rate)
        return gains, False

    def gains(self, proposal: DraftProposal, tree: Tree | None = None, *, scores: list[float] | None = None) -> list[float]:
        """Non-increasing expected accepted tokens of each node, in node order (``[k]`` floats).

        Args:
            proposal: this round's proposal (a chain unless ``tree`` is given).
            tree: the tree the verifier would check, nodes in its order (best-first trees carry scores).
            scores: the proposal's :meth:`score_tensor` as floats, when already read (else read here).
        """
        raw, scored = self.raw_gains(proposal, tree, scores=scores)
        if scored:
            scale = self._score_scale()
            raw = [min(1.0, g * scale) for g in raw]
        return list(itertools.accumulate(raw, min, initial=1.0))[1:]

    def in_gain_order(
        self, proposal: DraftProposal, tree: Tree, *, scores: list[float] | None = None
    ) -> tuple[Tree, list[float] | None]:
        """``tree`` with its nodes in falling order of expected gain, and its node scores in that order (``None``
        without scores): :meth:`gains` of the result falls already, so taking its first nodes takes the best ones.

        A node's gain is capped by its parent's (it is accepted only after it); equal gains keep node order, so parents
        stay first and each node's siblings keep their order (the gains of a tree without scores depend on it).
        Without this, :meth:`gains` lowers every node to the least gain before it in node order: a trie whose second
        path starts after a deep first one (:meth:`Tree.from_paths`) would value that path's first node below the
        first path's leaf.

        Example:
            >>> est = AcceptanceEstimator()
            >>> tree = Tree.from_paths([[5, 6, 7], [9]])
            >>> [round(g, 3) for g in est.gains(DraftProposal(torch.tensor([5, 6, 7])), tree)]
            [0.5, 0.25, 0.125, 0.125]
            >>> moved, _ = est.in_gain_order(DraftProposal(torch.tensor([5, 6, 7])), tree)
            >>> moved.tokens.tolist(), [round(g, 3) for g in est.gains(DraftProposal(torch.tensor([5, 6, 7])), moved)]
            ([5, 6, 9, 7], [0.5, 0.25, 0.25, 0.125])
        """
        raw, scored = self.raw_gains(proposal, tree, scores=scores)
        node_scores = list(raw) if scored else None
        if scored:
            scale = self._score_scale()
            raw = [min(1.0, g * scale) for g in raw]
        capped: list[float] = []
        for gain, parent in zip(raw, tree.parents.tolist()):
            capped.append(gain if parent < 0 else min(gain, capped[parent]))
        order = sorted(range(len(capped)), key=lambda i: -capped[i])  # stable: ties keep node order
        if order == list(range(len(order))):
            return tree, node_scores
        return tree.reorder(order), None if node_scores is None else [node_scores[i] for i in order]

    def observe(
        self,
        proposal: DraftProposal,
        *,
        nodes: int,
        accepted: int,
        tree: Tree | None = None,
        scores: list[float] | None = None,
        path: Sequence[int] | torch.Tensor | None = None,
    ) -> None:
        """Record a verified round: ``nodes`` nodes were checked (the first ones), ``accepted`` were accepted.

        The round goes into this estimator and every pool under it. ``scores``: as for :meth:`gains`. ``path``: for a
        tree without scores, the accepted nodes from the root on (``accepted`` node indices, a list or a tensor read
        only then): each checked child of a path node, in order up to the accepted one (all of them below the last), is
        one trial of its depth's rate, as :meth:`raw_gains` models the siblings; a checked node with no checked child
        ends the trials.

        Raises:
            ValueError: ``nodes`` or ``accepted`` the proposal cannot have, or a tree without scores and a ``path``
                that is missing or not a path of its checked nodes.
        """
        _check_positive_int("nodes", nodes, minimum=0)
        _check_positive_int("accepted", accepted, minimum=0)
        size = tree.num_nodes if tree is not None else proposal.num_tokens
        if nodes > size:
            raise ValueError(f"nodes: expected at most the {size} nodes of the proposal, got {nodes}")
        scores = self._scores(proposal, tree, scores)
        deepest = nodes if tree is None else (int(tree.depth[:nodes].max()) if nodes else 0)
        if accepted > deepest:
            raise ValueError(f"accepted: expected at most the depth the checked nodes reach ({deepest}), got {accepted}")
        trials = None if tree is None or scores is not None else self._tree_trials(tree, nodes, accepted, path)
        estimator = self
        while estimator is not None:
            estimator._record(scores, nodes=nodes, accepted=accepted, deepest=deepest, trials=trials)
            estimator = estimator.pool

    @staticmethod
    def _tree_trials(tree: Tree, nodes: int, accepted: int, path: Sequence[int] | torch.Tensor | None) -> list[tuple[int, int]]:
        """``[(trials, accepted)]`` a depth from 1 on for a tree round: the checked children of each path node, in
        order up to the accepted one."""
        if path is None:
            raise ValueError("path: expected the accepted nodes of a tree without scores, got None")
        path = path.tolist() if isinstance(path, torch.Tensor) else [int(v) for v in path]
        parents = tree.parents[:nodes].tolist()
        if (
            len(path) != accepted
            or any(not 0 <= v < nodes for v in path)
            or any(parents[v] != (path[d - 1] if d else -1) for d, v in enumerate(path))
        ):
            raise ValueError(
                f"path: expected {accepted} checked nodes from the root on, each a child of the one before, got {path}"
            )
        children: dict[int, list[int]] = {}
        for node, parent in enumerate(parents):
            children.setdefault(parent, []).append(node)
        trials, parent = [], -1
        for d in range(accepted + 1):
            kids = children.get(parent, [])
            if not kids:
                break
            if d < accepted:
                trials.append((kids.index(path[d]) + 1, 1))
                parent = path[d]
            else:
                trials.append((len(kids), 0))
        return trials

    def _record(
        self, scores: list[float] | None, *, nodes: int, accepted: int, deepest: int, trials: list[tuple[int, int]] | None
    ) -> None:
        """Add a checked round to this estimator's counts: the scores' calibration, or the depths' trials (a chain:
        one a depth it reached)."""
        self._observed += 1
        if scores is not None:
            self.scored_predicted += sum(scores[:nodes])
            self.scored_accepted += accepted
            return
        if trials is None:
            trials = [(1, int(d <= accepted)) for d in range(1, min(accepted + 1, deepest) + 1)]
        for d, (tried, passed) in enumerate(trials, start=1):
            while len(self.reached) < d:
                self.reached.append(0)
                self.passed.append(0)
            self.reached[d - 1] += tried
            self.passed[d - 1] += passed


def chain_gains(estimators: Sequence[AcceptanceEstimator], lengths: Sequence[int]) -> list[list[float]]:
    """Each estimator's :meth:`~AcceptanceEstimator.gains` for a chain of ``lengths[r]`` drafts without scores, together.

    Equal to ``[est.gains(DraftProposal(tokens)) for est, tokens in ...]`` with ``tokens [lengths[r]]`` and no
    ``confidence``, ``tree_logprobs`` or ``draft_probs``: the same float operations, on ``[requests, depth]``
    arrays (a round's requests cost a few array ops instead of a Python loop over depths each).

    Example:
        >>> pool = AcceptanceEstimator()
        >>> a, b = AcceptanceEstimator(pool=pool), AcceptanceEstimator(pool=pool)
        >>> a.observe(DraftProposal(torch.tensor([1, 2])), nodes=2, accepted=2)
        >>> chain_gains([a, b], [2, 1]) == [a.gains(DraftProposal(torch.tensor([1, 2]))), b.gains(DraftProposal(torch.tensor([1])))]
        True
    """
    if len(estimators) != len(lengths):
        raise ValueError(f"lengths: expected one per estimator ({len(estimators)}), got {len(lengths)}")
    for n in lengths:
        _check_positive_int("lengths", n, minimum=0)
    depth = max(lengths, default=0)
    if depth == 0:
        return [[] for _ in lengths]
    strength = np.array([[est.prior_accept + est.prior_reject] for est in estimators])  # [R, 1]
    means, unreached = [], []
    for est, s in zip(estimators, strength[:, 0].tolist()):
        if est.pool is not None:
            means.append(est.pool._rates(depth))
            unreached.append(means[-1])
        else:
            means.append([est.prior_accept / s] * depth)
            unreached.append([(sum(est.passed) + est.prior_accept) / (sum(est.reached) + s)] * depth)
    reached, passed = np.zeros((len(estimators), depth)), np.zeros((len(estimators), depth))  # [R, D]
    for r, est in enumerate(estimators):
        seen = min(depth, len(est.reached))
        reached[r, :seen] = est.reached[:seen]
        passed[r, :seen] = est.passed[:seen]
    # AcceptanceEstimator._rates, then _survivals and the running minimum of gains, row by row
    rates = np.where(reached > 0, (passed + strength * np.array(means)) / (reached + strength), np.array(unreached))
    falling = np.minimum(np.minimum.accumulate(np.cumprod(rates, axis=1), axis=1), 1.0)
    return [row[:n] for row, n in zip(falling.tolist(), lengths)]
