"""Token forcing: check a candidate system's outputs token by token against the stock target.

Free-running outputs cannot be compared for equality once rounding differs (bf16 verify passes run
other GEMM and attention shapes than plain decoding, and one flipped near-tie makes the rest of the
sequence diverge). Token forcing compares each emitted token with what the stock target would have
emitted *given the same prefix*, so every position is judged on its own and a flip does not cascade.

For each candidate output ``y`` of prompt ``x`` the stock target runs ``x + y`` teacher-forced (in
chunks that reuse the KV cache), and at each generated position ``t``:

* ``mismatch_t = emitted token y_t is not a stock argmax`` (ties with the top logit are not mismatches),
* ``margin_t = max(logits_t) - logits_t[y_t]`` (``>= 0``; ``0`` on matches).

The same path run on the stock system's own outputs (the *null*) measures what rounding alone
produces. The rule:

* rate test, per stratum (all tokens, each position bucket, each prompt set): fail when the lower
  Wilson 95% bound of the candidate's mismatch rate exceeds the upper bound of the null's;
* large-margin test: fail on any candidate mismatch whose margin exceeds ``tau``, calibrated from the
  null (``max(tau_floor, tau_scale * largest null mismatch margin)``): rounding flips near-ties only.

A planted ``+2`` logit bias on every 7th vocabulary id flips the argmax wherever a biased id lies
within 2 logits of the top, so it shows both as a rate jump in its position bucket and as
large-margin events.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

__all__ = [
    "ForcedPositions",
    "ForcingReport",
    "MarginEvent",
    "NullCalibration",
    "Stratum",
    "TokenForcingChecker",
    "rate_rule_fails",
    "simulate_power",
    "teacher_force",
    "tokens_needed",
    "wilson_interval",
]

# two-sided 95%: the 0.975 quantile of the standard normal
Z95 = 1.959963984540054


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion.

    Unlike the normal interval it stays inside ``[0, 1]`` and is not degenerate at 0 successes,
    which is the usual case for a lossless system.

    Example:
        >>> tuple(round(b, 4) for b in wilson_interval(0, 10))
        (0.0, 0.2775)
        >>> wilson_interval(0, 0)
        (0.0, 1.0)
    """
    if trials < 0 or not 0 <= successes <= max(trials, 0):
        raise ValueError(f"successes/trials: expected 0 <= successes <= trials, got {successes}/{trials}")
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    z2 = z * z
    denom = 1.0 + z2 / trials
    centre = (p + z2 / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / denom
    # exact end points at 0 and n successes (the formula gives them up to rounding)
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == trials else min(1.0, centre + half)
    return lo, hi


def rate_rule_fails(cand_mismatches: int, cand_tokens: int, null_mismatches: int, null_tokens: int, z: float = Z95) -> bool:
    """The rate rule: ``lower95(candidate rate) > upper95(null rate)``.

    Equivalent to a conservative one-sided two-proportion test. An empty stratum never fails.

    Example:
        >>> rate_rule_fails(30, 1000, 0, 1000), rate_rule_fails(2, 1000, 1, 1000)
        (True, False)
    """
    if cand_tokens == 0 or null_tokens == 0:
        return False
    return wilson_interval(cand_mismatches, cand_tokens, z)[0] > wilson_interval(null_mismatches, null_tokens, z)[1]


# ------------------------------------------------------------------------------------------------
# Teacher forcing
# ------------------------------------------------------------------------------------------------
@dataclass
class ForcedPositions:
    """Per generated position of one output, what the stock target says.

    Attributes:
        stock_argmax: ``[n]`` int64, the stock target's argmax at each position.
        margin: ``[n]`` float32, ``max(logits) - logits[emitted]`` (``>= 0``).
        mismatch: ``[n]`` bool, ``margin > 0``: the emitted token is not a stock argmax.
    """

    stock_argmax: torch.Tensor
    margin: torch.Tensor
    mismatch: torch.Tensor


@torch.no_grad()
def teacher_force(stock, prompt: torch.Tensor, output: torch.Tensor, *, chunk_size: int = 512) -> ForcedPositions:
    """Run ``prompt + output`` through ``stock`` and score every token of ``output``.

    The sequence goes through in chunks of ``chunk_size`` rows; each chunk is committed, so later
    chunks attend to the earlier ones through the KV cache (one pass over the sequence, bounded
    logits memory ``[chunk_size, V]``). The stock cache is reset before and after.

    Args:
        stock: a :class:`specdec.models.Target` (or anything with its forward/commit/reset).
        prompt: ``[P]`` int64, ``P >= 1``.
        output: ``[n]`` int64, ``n >= 1``; ``P + n <= stock.max_seq_len``.
        chunk_size: rows per forward.

    Returns:
        :class:`ForcedPositions` on the stock's device.

    Example:
        >>> from specdec.testing import tiny_target
        >>> stock = tiny_target(seed=0)
        >>> prompt = torch.tensor([1, 2, 3])
        >>> out = sd.generate(stock, prompt[None], 8).tokens[0]
        >>> teacher_force(stock, prompt, out).mismatch.any()
        tensor(False)
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected an int >= 1, got {chunk_size!r}")
    plen, n = prompt.numel(), output.numel()
    # rows 0 .. plen + n - 2; row r predicts token r + 1, so rows >= plen - 1 score the output
    seq = torch.cat([prompt, output[:-1]]).to(stock.device)  # [P + n - 1]
    emitted = output.to(stock.device)
    argmax = torch.empty(n, dtype=torch.long, device=stock.device)
    margin = torch.empty(n, dtype=torch.float32, device=stock.device)
    stock.reset()
    try:
        for start in range(0, seq.numel(), chunk_size):
            end = min(start + chunk_size, seq.numel())
            logits = stock(seq[start:end][None]).logits[0]  # [rows, V]
            stock.commit(end - start)
            lo = max(start, plen - 1)
            if lo >= end:
                continue
            rows = logits[lo - start :].float()  # [m, V]
            out_lo, out_hi = lo - plen + 1, end - plen + 1
            if not torch.isfinite(rows.max(-1).values).all():
                bad = int((~torch.isfinite(rows.max(-1).values)).nonzero()[0]) + out_lo
                raise ValueError(f"stock: non-finite logits while scoring output position {bad}")
            top = rows.max(-1)
            argmax[out_lo:out_hi] = top.indices
            margin[out_lo:out_hi] = top.values - rows.gather(-1, emitted[out_lo:out_hi, None])[:, 0]
    finally:
        stock.reset()
    return ForcedPositions(stock_argmax=argmax, margin=margin, mismatch=margin > 0)


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MarginEvent:
    """One mismatch.

    Attributes:
        sequence: index of the prompt/output pair.
        position: generated position (0 = first generated token).
        absolute_position: position in the full sequence (prompt length + ``position``).
        emitted: the candidate's token.
        stock_argmax: the stock target's argmax there.
        margin: stock top logit minus the stock logit of ``emitted``.
        prompt_set: the pair's prompt set.
    """

    sequence: int
    position: int
    absolute_position: int
    emitted: int
    stock_argmax: int
    margin: float
    prompt_set: str


@dataclass(frozen=True)
class Stratum:
    """Counts of one stratum, candidate against null.

    Attributes:
        name: e.g. ``"all"``, ``"pos < 2048"``, ``"set humaneval"``.
        num_tokens, num_mismatches, rate, ci95: the candidate's.
        null_tokens, null_mismatches, null_rate, null_ci95: the null's.
        large_margin_events: candidate mismatches above ``tau`` in this stratum.
        rate_failed: the rate rule fired here.
    """

    name: str
    num_tokens: int
    num_mismatches: int
    rate: float
    ci95: tuple[float, float]
    null_tokens: int
    null_mismatches: int
    null_rate: float
    null_ci95: tuple[float, float]
    large_margin_events: int
    rate_failed: bool

    @property
    def passed(self) -> bool:
        return not self.rate_failed and self.large_margin_events == 0


@dataclass(frozen=True)
class ForcingReport:
    """Verdict of :meth:`TokenForcingChecker.check`.

    Attributes:
        passed: no stratum fails the rate rule and there are at most ``max_large_margin_events``
            large-margin events.
        failures: one sentence per failed rule.
        num_tokens, num_mismatches, mismatch_rate, ci95: candidate over all positions.
        null_tokens, null_mismatches, null_rate, null_ci95: the null run over all positions.
        tau: the large-margin threshold (logits).
        large_margin_events: every candidate mismatch with ``margin > tau``, with positions.
        by_bucket: strata by generated position, e.g. ``"pos < 2048"``, ``"pos >= 2048"``.
        by_set: strata by prompt set.
        mismatches: every candidate mismatch (large or not).
        null_mismatch_events: every null mismatch.
        settings: the checker's settings.
    """

    passed: bool
    failures: tuple[str, ...]
    num_tokens: int
    num_mismatches: int
    mismatch_rate: float
    ci95: tuple[float, float]
    null_tokens: int
    null_mismatches: int
    null_rate: float
    null_ci95: tuple[float, float]
    tau: float
    large_margin_events: tuple[MarginEvent, ...]
    by_bucket: dict[str, Stratum]
    by_set: dict[str, Stratum]
    mismatches: tuple[MarginEvent, ...] = ()
    null_mismatch_events: tuple[MarginEvent, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def strata(self) -> list[Stratum]:
        """The overall stratum, then the buckets, then the sets."""
        overall = Stratum(
            "all", self.num_tokens, self.num_mismatches, self.mismatch_rate, self.ci95, self.null_tokens,
            self.null_mismatches, self.null_rate, self.null_ci95, len(self.large_margin_events),
            rate_rule_fails(self.num_mismatches, self.num_tokens, self.null_mismatches, self.null_tokens),
        )
        return [overall, *self.by_bucket.values(), *self.by_set.values()]

    def to_dict(self, *, max_listed: int = 1000) -> dict[str, Any]:
        """JSON-ready dict; lists of mismatches are cut to ``max_listed`` entries each."""
        hist_edges = [0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, float("inf")]

        def hist(events):
            counts = [0] * (len(hist_edges) - 1)
            for e in events:
                for i in range(len(counts)):
                    if hist_edges[i] <= e.margin < hist_edges[i + 1]:
                        counts[i] += 1
                        break
            return counts

        return {
            "passed": self.passed,
            "failures": list(self.failures),
            "num_tokens": self.num_tokens,
            "num_mismatches": self.num_mismatches,
            "mismatch_rate": self.mismatch_rate,
            "ci95": list(self.ci95),
            "null_tokens": self.null_tokens,
            "null_mismatches": self.null_mismatches,
            "null_rate": self.null_rate,
            "null_ci95": list(self.null_ci95),
            "tau": self.tau,
            "num_large_margin_events": len(self.large_margin_events),
            "large_margin_events": [asdict(e) for e in self.large_margin_events[:max_listed]],
            "by_bucket": {k: _stratum_dict(s) for k, s in self.by_bucket.items()},
            "by_set": {k: _stratum_dict(s) for k, s in self.by_set.items()},
            "margin_histogram": {
                "edges": [e if math.isfinite(e) else "inf" for e in hist_edges],
                "candidate": hist(self.mismatches),
                "null": hist(self.null_mismatch_events),
            },
            "mismatches": [asdict(e) for e in self.mismatches[:max_listed]],
            "null_mismatch_events": [asdict(e) for e in self.null_mismatch_events[:max_listed]],
            "settings": dict(self.settings),
        }

    def to_json(self, path: str | Path | None = None, *, max_listed: int = 1000) -> str:
        """The report as JSON text; written to ``path`` too when given."""
        text = json.dumps(self.to_dict(max_listed=max_listed), indent=2, default=_json_default)
        if path is not None:
            Path(path).write_text(text)
        return text

    def table(self, *, max_events: int = 10) -> str:
        """A plain-text table: one row per stratum, then the first large-margin events."""
        head = f"{'stratum':<18} {'tokens':>8} {'mism':>6} {'rate':>9} {'95% CI':>21} {'null rate':>9} {'null 95% CI':>21} {'events':>6}  verdict"
        lines = [head, "-" * len(head)]
        for s in self.strata:
            verdict = "FAIL" if not s.passed else "ok"
            lines.append(
                f"{s.name:<18} {s.num_tokens:>8} {s.num_mismatches:>6} {s.rate:>9.2e} {_ci(s.ci95):>21} "
                f"{s.null_rate:>9.2e} {_ci(s.null_ci95):>21} {s.large_margin_events:>6}  {verdict}"
            )
        lines.append(f"tau = {self.tau:.3g} logits; verdict: {'PASS' if self.passed else 'FAIL'}")
        for reason in self.failures:
            lines.append(f"  - {reason}")
        if self.large_margin_events:
            lines.append(f"large-margin events ({len(self.large_margin_events)}; first {min(max_events, len(self.large_margin_events))}):")
            for e in self.large_margin_events[:max_events]:
                lines.append(
                    f"  seq {e.sequence} pos {e.position} (abs {e.absolute_position}): emitted {e.emitted}, "
                    f"stock argmax {e.stock_argmax}, margin {e.margin:.3f}"
                )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def plot(self, path: str | Path | None = None):
        """Two panels: mismatch rate with 95% CI per stratum (candidate vs null), and every mismatch's
        margin against its generated position with the threshold ``tau``. Returns the figure."""
        import matplotlib

        if path is not None:
            matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt

        strata = self.strata
        fig, (ax_rate, ax_margin) = plt.subplots(1, 2, figsize=(12, 4.5))
        xs = range(len(strata))
        for offset, label, rate_of, ci_of, color in (
            (-0.15, "candidate", lambda s: s.rate, lambda s: s.ci95, "tab:red"),
            (0.15, "null (stock)", lambda s: s.null_rate, lambda s: s.null_ci95, "tab:blue"),
        ):
            rates = [rate_of(s) for s in strata]
            lo = [max(rate_of(s) - ci_of(s)[0], 0.0) for s in strata]
            hi = [max(ci_of(s)[1] - rate_of(s), 0.0) for s in strata]
            ax_rate.errorbar([x + offset for x in xs], rates, yerr=[lo, hi], fmt="o", capsize=4, label=label, color=color)
        ax_rate.set_xticks(list(xs), [s.name for s in strata], rotation=20)
        ax_rate.set_ylabel("mismatch rate (Wilson 95%)")
        ax_rate.set_title("verdict: " + ("PASS" if self.passed else "FAIL"))
        ax_rate.legend()
        for events, label, color, marker in (
            (self.null_mismatch_events, "null mismatches", "tab:blue", "x"),
            (self.mismatches, "candidate mismatches", "tab:red", "o"),
        ):
            if events:
                ax_margin.scatter([e.position for e in events], [e.margin for e in events], s=12, label=label, color=color, marker=marker)
        if not self.mismatches and not self.null_mismatch_events:
            ax_margin.text(0.5, 0.5, "no mismatches", transform=ax_margin.transAxes, ha="center", va="center")
        ax_margin.set_xlim(0, max(1, self.settings.get("max_position", 0)) + 1)
        ax_margin.axhline(self.tau, color="k", linestyle="--", label=f"tau = {self.tau:.3g}")
        for edge in self.settings.get("bucket_edges", ()):
            ax_margin.axvline(edge, color="gray", linestyle=":")
        ax_margin.set_xlabel("generated position")
        ax_margin.set_ylabel("margin (stock top logit - emitted logit)")
        ax_margin.legend()
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
            plt.close(fig)
        return fig


def _ci(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:.2e}, {ci[1]:.2e}]"


def _stratum_dict(s: Stratum) -> dict[str, Any]:
    d = asdict(s)
    d["ci95"], d["null_ci95"] = list(s.ci95), list(s.null_ci95)
    d["passed"] = s.passed
    return d


def _json_default(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# ------------------------------------------------------------------------------------------------
# Checker
# ------------------------------------------------------------------------------------------------
@dataclass
class _Scored:
    """Per-position arrays of one run (candidate or null), concatenated over its sequences."""

    sequence: torch.Tensor  # [N] int64
    position: torch.Tensor  # [N] int64 generated position
    absolute: torch.Tensor  # [N] int64
    emitted: torch.Tensor  # [N] int64
    stock_argmax: torch.Tensor  # [N] int64
    margin: torch.Tensor  # [N] float32
    prompt_set: list[str]  # per sequence

    @property
    def mismatch(self) -> torch.Tensor:
        return self.margin > 0

    def events(self, keep: torch.Tensor) -> tuple[MarginEvent, ...]:
        idx = keep.nonzero().view(-1).tolist()
        seq, pos, absolute = self.sequence.tolist(), self.position.tolist(), self.absolute.tolist()
        emitted, argmax, margin = self.emitted.tolist(), self.stock_argmax.tolist(), self.margin.tolist()
        return tuple(
            MarginEvent(seq[i], pos[i], absolute[i], emitted[i], argmax[i], float(margin[i]), self.prompt_set[seq[i]])
            for i in idx
        )


@dataclass
class NullCalibration:
    """The stock system's own outputs scored through the teacher-forcing path.

    Build it once with :meth:`TokenForcingChecker.calibrate` and pass it to every
    :meth:`TokenForcingChecker.check` of candidates on the same prompts.

    Attributes:
        tau: the large-margin threshold derived from it.
        max_null_margin: the largest null mismatch margin (0 when the null never mismatches).
    """

    scored: _Scored
    tau: float
    max_null_margin: float

    @property
    def num_tokens(self) -> int:
        return int(self.scored.margin.numel())

    @property
    def num_mismatches(self) -> int:
        return int(self.scored.mismatch.sum())


class TokenForcingChecker:
    """Judge a candidate system's outputs against a stock target, token by token.

    Args:
        stock: the reference :class:`specdec.models.Target` (stock weights, stock dtype).
        chunk_size: rows per teacher-forcing forward.
        bucket_edges: generated-position edges of the position strata; ``(2048,)`` gives
            ``pos < 2048`` and ``pos >= 2048``.
        tau_floor: smallest large-margin threshold (logits); rounding noise flips near-ties only.
        tau_scale: ``tau = max(tau_floor, tau_scale * largest null mismatch margin)``; the factor
            leaves room for the candidate seeing more tokens than the null.
        max_large_margin_events: events tolerated before failing (0: any event fails).
        z: normal quantile of the intervals (95% two-sided by default).

    Example:
        >>> from specdec.testing import tiny_target
        >>> from specdec.testing.faults import LogitBiasFault
        >>> stock = tiny_target(seed=0, max_seq_len=256)
        >>> prompts = torch.randint(0, stock.vocab_size, (4, 8), generator=torch.Generator().manual_seed(0))
        >>> spec = sd.generate(stock, prompts, 96, drafter=sd.NGramDrafter()).tokens
        >>> checker = TokenForcingChecker(stock, bucket_edges=(64,))
        >>> checker.check(prompts, spec).passed
        True
        >>> faulty = sd.generate(LogitBiasFault(stock, bias=2.0, every=7, after=64), prompts, 96).tokens
        >>> checker.check(prompts, faulty).passed
        False
    """

    def __init__(
        self,
        stock,
        *,
        chunk_size: int = 512,
        bucket_edges: Sequence[int] = (2048,),
        tau_floor: float = 0.5,
        tau_scale: float = 2.0,
        max_large_margin_events: int = 0,
        z: float = Z95,
    ):
        for attr in ("forward", "commit", "reset", "vocab_size", "max_seq_len", "device"):
            if not hasattr(stock, attr):
                raise TypeError(f"stock: expected a specdec Target (forward/commit/reset/vocab_size/max_seq_len), got {type(stock).__name__} without {attr!r}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size: expected an int >= 1, got {chunk_size!r}")
        edges = list(bucket_edges)
        if any(isinstance(e, bool) or not isinstance(e, int) or e < 1 for e in edges) or edges != sorted(set(edges)):
            raise ValueError(f"bucket_edges: expected strictly increasing ints >= 1, got {bucket_edges!r}")
        if not (isinstance(tau_floor, (int, float)) and tau_floor >= 0 and math.isfinite(tau_floor)):
            raise ValueError(f"tau_floor: expected a finite float >= 0, got {tau_floor!r}")
        if not (isinstance(tau_scale, (int, float)) and tau_scale >= 1 and math.isfinite(tau_scale)):
            raise ValueError(f"tau_scale: expected a finite float >= 1, got {tau_scale!r}")
        if isinstance(max_large_margin_events, bool) or not isinstance(max_large_margin_events, int) or max_large_margin_events < 0:
            raise ValueError(f"max_large_margin_events: expected an int >= 0, got {max_large_margin_events!r}")
        if not (isinstance(z, (int, float)) and z > 0):
            raise ValueError(f"z: expected a float > 0, got {z!r}")
        self.stock = stock
        self.chunk_size = chunk_size
        self.bucket_edges = tuple(edges)
        self.tau_floor = float(tau_floor)
        self.tau_scale = float(tau_scale)
        self.max_large_margin_events = max_large_margin_events
        self.z = float(z)

    # -- inputs -----------------------------------------------------------------------------------
    def _sequences(self, name: str, value, *, count: int | None = None, allow_empty: bool = False) -> list[torch.Tensor]:
        if hasattr(value, "tokens") and not isinstance(value, torch.Tensor):
            value = value.tokens  # a GenerationOutput
        if isinstance(value, torch.Tensor):
            if value.ndim != 2:
                raise ValueError(f"{name}: expected a 2-D tensor [batch, length] or a list of 1-D tensors, got shape {tuple(value.shape)}")
            value = list(value)
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{name}: expected a list of 1-D integer tensors or a 2-D tensor, got {type(value).__name__}")
        if count is not None and len(value) != count:
            raise ValueError(f"{name}: expected one entry per prompt ({count} prompts), got {len(value)}")
        if not value:
            raise ValueError(f"{name}: expected at least one sequence, got none")
        seqs = []
        vocab = self.stock.vocab_size
        for i, seq in enumerate(value):
            if not isinstance(seq, torch.Tensor):
                try:
                    seq = torch.as_tensor(seq, dtype=torch.long)
                except (TypeError, ValueError, RuntimeError) as err:
                    raise TypeError(f"{name}[{i}]: expected a 1-D integer tensor or a list of ints, got {type(seq).__name__}") from err
            if seq.dtype == torch.bool or seq.is_floating_point() or seq.is_complex():
                raise TypeError(f"{name}[{i}]: expected integer token ids, got dtype {seq.dtype}")
            if seq.ndim != 1:
                raise ValueError(f"{name}[{i}]: expected a 1-D sequence, got shape {tuple(seq.shape)}")
            if seq.numel() == 0 and not allow_empty:
                raise ValueError(f"{name}[{i}]: empty sequence; expected at least one token")
            if seq.numel():
                lo, hi = int(seq.min()), int(seq.max())
                if lo < 0 or hi >= vocab:
                    bad = int(((seq < 0) | (seq >= vocab)).nonzero()[0])
                    raise ValueError(
                        f"{name}[{i}]: token id {int(seq[bad])} at position {bad} lies outside the stock's vocabulary "
                        f"[0, {vocab}) (vocabulary mismatch between candidate and stock?)"
                    )
            seqs.append(seq.long().to(self.stock.device))
        return seqs

    def _check_fits(self, name: str, prompts: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        for i, (p, y) in enumerate(zip(prompts, outputs)):
            if p.numel() + y.numel() > self.stock.max_seq_len:
                raise ValueError(
                    f"{name}[{i}]: prompt {p.numel()} + output {y.numel()} = {p.numel() + y.numel()} tokens exceed the "
                    f"stock's context of {self.stock.max_seq_len} tokens (max_seq_len)"
                )

    def _prompt_sets(self, prompt_sets, count: int) -> list[str]:
        if prompt_sets is None:
            return ["default"] * count
        if isinstance(prompt_sets, str):
            return [prompt_sets] * count
        sets = [str(s) for s in prompt_sets]
        if len(sets) != count:
            raise ValueError(f"prompt_sets: expected one label per prompt ({count} prompts), got {len(sets)}")
        return sets

    # -- scoring ----------------------------------------------------------------------------------
    def _score(self, prompts: list[torch.Tensor], outputs: list[torch.Tensor], sets: list[str]) -> _Scored:
        cols: dict[str, list[torch.Tensor]] = {k: [] for k in ("sequence", "position", "absolute", "emitted", "argmax", "margin")}
        for i, (prompt, output) in enumerate(zip(prompts, outputs)):
            forced = teacher_force(self.stock, prompt, output, chunk_size=self.chunk_size)
            n = output.numel()
            pos = torch.arange(n)
            cols["sequence"].append(torch.full((n,), i, dtype=torch.long))
            cols["position"].append(pos)
            cols["absolute"].append(pos + prompt.numel())
            cols["emitted"].append(output.cpu())
            cols["argmax"].append(forced.stock_argmax.cpu())
            cols["margin"].append(forced.margin.cpu())
        return _Scored(
            sequence=torch.cat(cols["sequence"]),
            position=torch.cat(cols["position"]),
            absolute=torch.cat(cols["absolute"]),
            emitted=torch.cat(cols["emitted"]),
            stock_argmax=torch.cat(cols["argmax"]),
            margin=torch.cat(cols["margin"]),
            prompt_set=sets,
        )

    def calibrate(
        self,
        prompts,
        null_outputs=None,
        *,
        max_new_tokens: int | Sequence[int] | None = None,
        prompt_sets: Sequence[str] | str | None = None,
    ) -> NullCalibration:
        """Score the stock system's own outputs (the null).

        Args:
            prompts: ``[B, P]`` tensor or a list of ``B`` 1-D token tensors.
            null_outputs: the stock system's outputs for the prompts; ``None`` generates them here with
                greedy autoregressive decoding on ``stock`` (``max_new_tokens`` per prompt: an int or
                one int per prompt).
            prompt_sets: one label per prompt (or one label for all).
        """
        prompt_list = self._sequences("prompts", prompts)
        sets = self._prompt_sets(prompt_sets, len(prompt_list))
        if null_outputs is None:
            if max_new_tokens is None:
                raise ValueError("max_new_tokens: expected an int (or one per prompt) when null_outputs is None, got None")
            lengths = [max_new_tokens] * len(prompt_list) if isinstance(max_new_tokens, int) else list(max_new_tokens)
            if len(lengths) != len(prompt_list):
                raise ValueError(f"max_new_tokens: expected an int or one per prompt ({len(prompt_list)}), got {len(lengths)}")
            for i, (p, m) in enumerate(zip(prompt_list, lengths)):
                if isinstance(m, bool) or not isinstance(m, int) or m < 1:
                    raise ValueError(f"max_new_tokens[{i}]: expected an int >= 1, got {m!r}")
                if p.numel() + m > self.stock.max_seq_len:
                    raise ValueError(
                        f"max_new_tokens[{i}]: prompt {p.numel()} + {m} new tokens exceed the stock's context of "
                        f"{self.stock.max_seq_len} tokens (max_seq_len)"
                    )
            null_list = [self._generate_stock(p, m) for p, m in zip(prompt_list, lengths)]
        else:
            null_list = self._sequences("null_outputs", null_outputs, count=len(prompt_list))
        self._check_fits("null_outputs", prompt_list, null_list)
        scored = self._score(prompt_list, null_list, sets)
        null_margins = scored.margin[scored.mismatch]
        max_margin = float(null_margins.max()) if null_margins.numel() else 0.0
        tau = max(self.tau_floor, self.tau_scale * max_margin)
        return NullCalibration(scored=scored, tau=tau, max_null_margin=max_margin)

    @torch.no_grad()
    def _generate_stock(self, prompt: torch.Tensor, max_new: int) -> torch.Tensor:
        from specdec.decode import generate

        return generate(self.stock, prompt[None], max_new).tokens[0]

    # -- verdict ----------------------------------------------------------------------------------
    def _stratum(self, name: str, cand: _Scored, cand_keep: torch.Tensor, null: _Scored, null_keep: torch.Tensor, tau: float) -> Stratum:
        n1, k1 = int(cand_keep.sum()), int((cand.mismatch & cand_keep).sum())
        n0, k0 = int(null_keep.sum()), int((null.mismatch & null_keep).sum())
        events = int((cand.mismatch & cand_keep & (cand.margin > tau)).sum())
        return Stratum(
            name=name,
            num_tokens=n1,
            num_mismatches=k1,
            rate=k1 / n1 if n1 else 0.0,
            ci95=wilson_interval(k1, n1, self.z),
            null_tokens=n0,
            null_mismatches=k0,
            null_rate=k0 / n0 if n0 else 0.0,
            null_ci95=wilson_interval(k0, n0, self.z),
            large_margin_events=events,
            rate_failed=rate_rule_fails(k1, n1, k0, n0, self.z),
        )

    def check(
        self,
        prompts,
        candidate_outputs,
        *,
        null: NullCalibration | Any = None,
        prompt_sets: Sequence[str] | str | None = None,
        candidate_vocab_size: int | None = None,
    ) -> ForcingReport:
        """Teacher-force the candidate's outputs through the stock target and apply the rule.

        Args:
            prompts: ``[B, P]`` tensor or a list of ``B`` 1-D token tensors.
            candidate_outputs: the candidate system's generated tokens per prompt (a ``[B, n]`` tensor,
                a list of 1-D tensors, or a :class:`specdec.GenerationOutput`), prompt excluded.
            null: a :class:`NullCalibration`, or the stock system's outputs for the same prompts, or
                ``None`` to generate them here (greedy AR on ``stock``, same lengths as the candidate's).
            prompt_sets: one label per prompt (e.g. ``"humaneval"``), or one label for all.
            candidate_vocab_size: the candidate's vocabulary size, checked against the stock's.

        Returns:
            :class:`ForcingReport`.
        """
        if candidate_vocab_size is not None and candidate_vocab_size != self.stock.vocab_size:
            raise ValueError(
                f"candidate_vocab_size: the candidate's vocabulary has {candidate_vocab_size} ids, the stock's "
                f"{self.stock.vocab_size}; outputs cannot be compared token by token"
            )
        prompt_list = self._sequences("prompts", prompts)
        outputs = self._sequences("candidate_outputs", candidate_outputs, count=len(prompt_list))
        self._check_fits("candidate_outputs", prompt_list, outputs)
        sets = self._prompt_sets(prompt_sets, len(prompt_list))
        if not isinstance(null, NullCalibration):
            if null is None:
                null = self.calibrate(prompt_list, max_new_tokens=[y.numel() for y in outputs], prompt_sets=sets)
            else:
                null = self.calibrate(prompt_list, null, prompt_sets=sets)
        cand = self._score(prompt_list, outputs, sets)
        ref = null.scored
        tau = null.tau

        all_c, all_n = torch.ones_like(cand.mismatch), torch.ones_like(ref.mismatch)
        overall = self._stratum("all", cand, all_c, ref, all_n, tau)
        by_bucket: dict[str, Stratum] = {}
        edges = [0, *self.bucket_edges, None]
        for lo, hi in zip(edges[:-1], edges[1:]):
            if hi is None:
                name = f"pos >= {lo}"
                keep_c, keep_n = cand.position >= lo, ref.position >= lo
            elif lo == 0:
                name = f"pos < {hi}"
                keep_c, keep_n = cand.position < hi, ref.position < hi
            else:
                name = f"{lo} <= pos < {hi}"
                keep_c = (cand.position >= lo) & (cand.position < hi)
                keep_n = (ref.position >= lo) & (ref.position < hi)
            by_bucket[name] = self._stratum(name, cand, keep_c, ref, keep_n, tau)
        by_set: dict[str, Stratum] = {}
        for label in dict.fromkeys(sets):
            c_ids = torch.tensor([s == label for s in cand.prompt_set])[cand.sequence]
            n_ids = torch.tensor([s == label for s in ref.prompt_set])[ref.sequence]
            by_set[f"set {label}"] = self._stratum(f"set {label}", cand, c_ids, ref, n_ids, tau)

        failures = []
        for s in [overall, *by_bucket.values(), *(by_set.values() if len(by_set) > 1 else ())]:
            if s.rate_failed:
                failures.append(
                    f"{s.name}: mismatch rate {s.rate:.3g} (95% CI {s.ci95[0]:.3g}-{s.ci95[1]:.3g}) above the null's "
                    f"{s.null_rate:.3g} (95% CI {s.null_ci95[0]:.3g}-{s.null_ci95[1]:.3g})"
                )
        large = cand.events(cand.mismatch & (cand.margin > tau))
        if len(large) > self.max_large_margin_events:
            first = large[0]
            failures.append(
                f"{len(large)} large-margin events (margin > tau = {tau:.3g}), first at sequence {first.sequence} "
                f"position {first.position} (margin {first.margin:.3g})"
            )
        return ForcingReport(
            passed=not failures,
            failures=tuple(failures),
            num_tokens=overall.num_tokens,
            num_mismatches=overall.num_mismatches,
            mismatch_rate=overall.rate,
            ci95=overall.ci95,
            null_tokens=overall.null_tokens,
            null_mismatches=overall.null_mismatches,
            null_rate=overall.null_rate,
            null_ci95=overall.null_ci95,
            tau=tau,
            large_margin_events=large,
            by_bucket=by_bucket,
            by_set=by_set,
            mismatches=cand.events(cand.mismatch),
            null_mismatch_events=ref.events(ref.mismatch),
            settings={
                "chunk_size": self.chunk_size,
                "bucket_edges": list(self.bucket_edges),
                "tau_floor": self.tau_floor,
                "tau_scale": self.tau_scale,
                "max_null_margin": null.max_null_margin,
                "max_position": int(max(cand.position.max(), ref.position.max())),
                "max_large_margin_events": self.max_large_margin_events,
                "z": self.z,
            },
        )


# ------------------------------------------------------------------------------------------------
# Power of the rate rule
# ------------------------------------------------------------------------------------------------
def simulate_power(
    null_rate: float,
    candidate_rate: float,
    num_tokens: int,
    *,
    null_tokens: int | None = None,
    trials: int = 2000,
    z: float = Z95,
    generator: torch.Generator | None = None,
) -> float:
    """Probability that :func:`rate_rule_fails` fires, by simulation.

    Mismatches are drawn as independent Bernoulli events (teacher forcing scores each position on its
    own, so a flip does not cascade); the candidate sees ``num_tokens`` positions, the null
    ``null_tokens`` (default the same). With ``candidate_rate == null_rate`` this is the false-alarm
    rate of the rule.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> simulate_power(1e-3, 3e-3, 20_000, trials=500, generator=g) > 0.8
        True
    """
    for name, rate in (("null_rate", null_rate), ("candidate_rate", candidate_rate)):
        if not 0 <= rate <= 1:
            raise ValueError(f"{name}: expected a probability in [0, 1], got {rate!r}")
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
        raise ValueError(f"num_tokens: expected an int >= 1, got {num_tokens!r}")
    null_tokens = num_tokens if null_tokens is None else null_tokens
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials: expected an int >= 1, got {trials!r}")
    cand = torch.binomial(torch.full((trials,), float(num_tokens), dtype=torch.float64), torch.full((trials,), float(candidate_rate), dtype=torch.float64), generator=generator)
    ref = torch.binomial(torch.full((trials,), float(null_tokens), dtype=torch.float64), torch.full((trials,), float(null_rate), dtype=torch.float64), generator=generator)
    fired = sum(rate_rule_fails(int(c), num_tokens, int(r), null_tokens, z) for c, r in zip(cand.tolist(), ref.tolist()))
    return fired / trials


def tokens_needed(
    null_rate: float,
    rise: float,
    *,
    power: float = 0.8,
    trials: int = 1000,
    z: float = Z95,
    seed: int = 0,
    max_tokens: int = 1 << 28,
) -> int:
    """Smallest number of scored tokens (candidate and null each) at which the rate rule detects a
    rise of the mismatch rate from ``null_rate`` to ``null_rate + rise`` with probability ``power``.

    Found by doubling and then bisection on :func:`simulate_power` with a fixed seed per
    evaluation (common random numbers keep the search monotone in practice). Returns
    ``max_tokens`` when even that is not enough.

    Example:
        >>> 5_000 < tokens_needed(1e-3, 2e-3, trials=300) < 50_000
        True
    """
    if not 0 < power < 1:
        raise ValueError(f"power: expected a probability in (0, 1), got {power!r}")
    if not 0 < rise <= 1 - null_rate:
        raise ValueError(f"rise: expected 0 < rise <= 1 - null_rate, got {rise!r}")

    def detects(n: int) -> bool:
        g = torch.Generator().manual_seed(seed)
        return simulate_power(null_rate, null_rate + rise, n, trials=trials, z=z, generator=g) >= power

    lo, hi = 1, 64
    while not detects(hi):
        lo = hi
        hi *= 2
        if hi >= max_tokens:
            return max_tokens
    while hi - lo > max(1, lo // 50):
        mid = (lo + hi) // 2
        if detects(mid):
            hi = mid
        else:
            lo = mid
    return hi
