"""The token-forcing verdict as a reader sees it: events, strata with their coverage, the report and
its renderings (table, JSON, plot)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from specdec.forcing.statistics import Z95, interval_label, rate_rule_fails

__all__ = ["ForcingReport", "MarginEvent", "Stratum"]


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
        context: the (up to 8) tokens before the position, prompt included.

    Example:
        >>> e = MarginEvent(0, 70, 78, emitted=14, stock_argmax=3, margin=1.5, prompt_set="default", context=(5, 6))
        >>> e.describe()
        'seq 0 pos 70 (abs 78), margin 1.5: emitted 14 where stock prefers 3; context ids [5, 6]'
    """

    sequence: int
    position: int
    absolute_position: int
    emitted: int
    stock_argmax: int
    margin: float
    prompt_set: str
    context: tuple[int, ...] = ()

    def describe(self, tokenizer=None) -> str:
        """One line: where, how large, which tokens; decoded text too when ``tokenizer`` (anything with
        ``decode(list[int]) -> str``) is given."""
        where = f"seq {self.sequence} pos {self.position} (abs {self.absolute_position}), margin {self.margin:.3g}"
        if tokenizer is None:
            return f"{where}: emitted {self.emitted} where stock prefers {self.stock_argmax}; context ids {list(self.context)}"
        emitted, preferred = _decode(tokenizer, [self.emitted]), _decode(tokenizer, [self.stock_argmax])
        context = _decode(tokenizer, list(self.context))
        return (
            f"{where}: emitted {emitted!r} (id {self.emitted}) where stock prefers {preferred!r} (id {self.stock_argmax}); "
            f"after ...{context!r}"
        )


@dataclass(frozen=True)
class Stratum:
    """Counts of one stratum, candidate against null.

    A stratum with no candidate token or no null token is *not covered*: the rate rule cannot judge
    it, and its verdict is ``"NOT COVERED"``, never ``"PASS"``.

    Attributes:
        name: e.g. ``"all"``, ``"pos < 2048"``, ``"set humaneval"``.
        num_tokens, num_mismatches, rate, ci95: the candidate's.
        null_tokens, null_mismatches, null_rate, null_ci95: the null's.
        large_margin_events: candidate mismatches above ``tau`` in this stratum.
        rate_failed: the rate rule fired here.
        max_large_margin_events: the large-margin events the checker tolerates (its
            ``max_large_margin_events``); more than that here fails the stratum.

    Example:
        >>> s = Stratum("pos >= 2048", 0, 0, 0.0, (0.0, 1.0), 0, 0, 0.0, (0.0, 1.0), 0, False)
        >>> s.passed, s.covered, s.verdict
        (True, False, 'NOT COVERED')
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
    max_large_margin_events: int = 0

    @property
    def passed(self) -> bool:
        """No rule fired here (true of an uncovered stratum too: see :attr:`verdict`)."""
        return not self.rate_failed and self.large_margin_events <= self.max_large_margin_events

    @property
    def covered(self) -> bool:
        """Both the candidate and the null have tokens here."""
        return self.num_tokens > 0 and self.null_tokens > 0

    @property
    def verdict(self) -> str:
        """``"FAIL"``, ``"NOT COVERED"`` or ``"PASS"``."""
        if not self.passed:
            return "FAIL"
        return "PASS" if self.covered else "NOT COVERED"


@dataclass(frozen=True)
class ForcingReport:
    """Verdict of :meth:`TokenForcingChecker.check`.

    Read :attr:`verdict` (or the first line of :meth:`table`): ``"FAIL"`` when a rule fired,
    ``"INCOMPLETE"`` when none fired but some stratum had no tokens to judge (e.g. outputs that never
    reach the ``pos >= 2048`` bucket), ``"PASS"`` otherwise.

    Attributes:
        passed: no stratum fails the rate rule and there are at most ``max_large_margin_events``
            large-margin events. An incomplete report can be ``passed``: check :attr:`complete`.
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

    Example:
        >>> import specdec as sd
        >>> from specdec.forcing import TokenForcingChecker
        >>> from specdec.testing import tiny_target
        >>> stock = tiny_target(seed=0, max_seq_len=128)
        >>> prompts = torch.tensor([[1, 2, 3]])
        >>> report = TokenForcingChecker(stock, bucket_edges=(64,)).check(prompts, sd.generate(stock, prompts, 32).tokens)
        >>> report.passed, report.verdict, report.uncovered
        (True, 'INCOMPLETE', ('pos >= 64',))
        >>> report.table().splitlines()[0]
        'VERDICT: INCOMPLETE -- no rule failed, but 1 stratum was NOT covered (no tokens to judge): pos >= 64'
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
            "all",
            self.num_tokens,
            self.num_mismatches,
            self.mismatch_rate,
            self.ci95,
            self.null_tokens,
            self.null_mismatches,
            self.null_rate,
            self.null_ci95,
            len(self.large_margin_events),
            rate_rule_fails(
                self.num_mismatches, self.num_tokens, self.null_mismatches, self.null_tokens, self.settings.get("z", Z95)
            ),
            self.settings.get("max_large_margin_events", 0),
        )
        return [overall, *self.by_bucket.values(), *self.by_set.values()]

    @property
    def uncovered(self) -> tuple[str, ...]:
        """Names of the strata without candidate or null tokens (not judged)."""
        return tuple(s.name for s in self.strata if not s.covered)

    @property
    def complete(self) -> bool:
        """Every stratum had tokens to judge."""
        return not self.uncovered

    @property
    def verdict(self) -> str:
        """``"FAIL"`` (a rule fired), ``"INCOMPLETE"`` (none fired, some stratum not covered) or ``"PASS"``."""
        if not self.passed:
            return "FAIL"
        return "PASS" if self.complete else "INCOMPLETE"

    def verdict_line(self) -> str:
        """The verdict in one sentence, as the first line of :meth:`table`."""
        uncovered = self.uncovered
        were = "stratum was" if len(uncovered) == 1 else "strata were"
        strata = f"{len(uncovered)} {were} NOT covered (no tokens to judge): " + ", ".join(uncovered)
        if not self.passed:
            line = f"VERDICT: FAIL -- {len(self.failures)} {'rule' if len(self.failures) == 1 else 'rules'} failed"
            return line + (f"; besides, {strata}" if uncovered else "")
        if uncovered:
            return f"VERDICT: INCOMPLETE -- no rule failed, but {strata}"
        return f"VERDICT: PASS -- no rule failed in any of the {len(self.strata)} strata, all covered"

    def to_dict(self, *, max_listed: int = 1000, tokenizer=None) -> dict[str, Any]:
        """JSON-ready dict; lists of mismatches are cut to ``max_listed`` entries each. With a
        ``tokenizer``, events carry their decoded text too."""
        hist_edges = [0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, float("inf")]

        def hist(events):
            counts = [0] * (len(hist_edges) - 1)
            for e in events:
                for i in range(len(counts)):  # the last bin is closed: it holds infinite margins (a -inf stock logit)
                    if hist_edges[i] <= e.margin < hist_edges[i + 1] or e.margin == hist_edges[i + 1] == math.inf:
                        counts[i] += 1
                        break
            return counts

        def listed(events):
            return [_event_dict(e, tokenizer) for e in events[:max_listed]]

        return {
            "verdict": self.verdict,
            "passed": self.passed,
            "complete": self.complete,
            "uncovered": list(self.uncovered),
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
            "large_margin_events": listed(self.large_margin_events),
            "by_bucket": {k: _stratum_dict(s) for k, s in self.by_bucket.items()},
            "by_set": {k: _stratum_dict(s) for k, s in self.by_set.items()},
            "margin_histogram": {
                "edges": [e if math.isfinite(e) else "inf" for e in hist_edges],
                "candidate": hist(self.mismatches),
                "null": hist(self.null_mismatch_events),
            },
            "mismatches": listed(self.mismatches),
            "null_mismatch_events": listed(self.null_mismatch_events),
            "settings": dict(self.settings),
        }

    def to_json(self, path: str | Path | None = None, *, max_listed: int = 1000, tokenizer=None) -> str:
        """The report as JSON text; written to ``path`` too when given."""
        d = finite_json(self.to_dict(max_listed=max_listed, tokenizer=tokenizer))
        text = json.dumps(d, indent=2, default=_json_default, allow_nan=False)
        if path is not None:
            Path(path).write_text(text)
        return text

    def table(self, *, max_events: int = 10, tokenizer=None) -> str:
        """Plain text, verdict first: the verdict line and its reasons, the strata not covered, one row
        per stratum, then the first ``max_events`` large-margin events (decoded with ``tokenizer``,
        anything with ``decode(list[int]) -> str``, when given)."""
        if tokenizer is not None and not callable(getattr(tokenizer, "decode", None)):
            raise TypeError(f"tokenizer: expected an object with decode(list[int]) -> str, got {type(tokenizer).__name__}")
        lines = [self.verdict_line()]
        lines += [f"  - {reason}" for reason in self.failures]
        reach = self.settings.get("max_position")
        for s in self.strata:
            if not s.covered:
                lines.append(
                    f"  - NOT COVERED {s.name}: {s.num_tokens} candidate / {s.null_tokens} null tokens"
                    + (f" (generated positions reach {reach})" if reach is not None else "")
                )
        ci = f"{interval_label(self.settings.get('z', Z95))} CI"
        head = (
            f"{'stratum':<18} {'tokens':>8} {'mism':>6} {'rate':>9} {ci:>21} {'null rate':>9} {'null ' + ci:>21} "
            f"{'events':>6}  verdict"
        )
        lines += ["", head, "-" * len(head)]
        for s in self.strata:
            lines.append(
                f"{s.name:<18} {s.num_tokens:>8} {s.num_mismatches:>6} {s.rate:>9.2e} {_ci(s.ci95):>21} "
                f"{s.null_rate:>9.2e} {_ci(s.null_ci95):>21} {s.large_margin_events:>6}  {s.verdict}"
            )
        lines.append(f"tau = {self.tau:.3g} logits (large-margin threshold)")
        if self.large_margin_events:
            shown = min(max_events, len(self.large_margin_events))
            lines.append(f"large-margin events ({len(self.large_margin_events)}; first {shown}):")
            lines += [f"  {e.describe(tokenizer)}" for e in self.large_margin_events[:max_events]]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def plot(self, path: str | Path | None = None):
        """Two panels: mismatch rate with its Wilson interval (95% by default: the checker's ``z``) per stratum
        (candidate vs null), and every mismatch's margin against its generated position with the threshold ``tau``.
        Returns the figure."""
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
        ax_rate.set_xticks(list(xs), [s.name if s.covered else f"{s.name}\n(NOT COVERED)" for s in strata], rotation=20)
        ax_rate.set_ylabel(f"mismatch rate (Wilson {interval_label(self.settings.get('z', Z95))})")
        ax_rate.set_title("verdict: " + self.verdict)
        ax_rate.legend()
        for events, label, color, marker in (
            (self.null_mismatch_events, "null mismatches", "tab:blue", "x"),
            (self.mismatches, "candidate mismatches", "tab:red", "o"),
        ):
            if events:
                positions, margins = [e.position for e in events], [e.margin for e in events]
                ax_margin.scatter(positions, margins, s=12, label=label, color=color, marker=marker)
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
    d["passed"], d["covered"], d["verdict"] = s.passed, s.covered, s.verdict
    return d


def _decode(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids) if ids else ""


def _event_dict(event: MarginEvent, tokenizer) -> dict[str, Any]:
    d = asdict(event)
    d["context"] = list(event.context)
    if tokenizer is not None:
        d["emitted_text"] = _decode(tokenizer, [event.emitted])
        d["stock_argmax_text"] = _decode(tokenizer, [event.stock_argmax])
        d["context_text"] = _decode(tokenizer, list(event.context))
    return d


def finite_json(obj):
    """``obj`` (dicts, lists, tuples, scalars) with every non-finite float as text: strict JSON has no such numbers.

    Example:
        >>> finite_json({"margin": float("inf"), "rates": (0.5, float("nan"))})
        {'margin': 'inf', 'rates': [0.5, 'nan']}
    """
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def _json_default(obj):
    if isinstance(obj, torch.Tensor):
        return finite_json(obj.tolist())
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
