"""The token-forcing checker: input checks, strata and the verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from specdec.forcing import runner
from specdec.forcing.report import ForcingReport, Stratum
from specdec.forcing.runner import NullCalibration, ScoredRun, require_stock_target
from specdec.forcing.statistics import Z95, interval_label, large_margin_threshold, rate_rule_fails, wilson_interval

__all__ = ["TokenForcingChecker"]


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
        >>> import specdec as sd
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
        require_stock_target(stock)
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size: expected an int >= 1, got {chunk_size!r}")
        try:
            edges = list(bucket_edges)
        except TypeError:
            raise ValueError(f"bucket_edges: expected strictly increasing ints >= 1, got {bucket_edges!r}") from None
        if any(isinstance(e, bool) or not isinstance(e, int) or e < 1 for e in edges) or edges != sorted(set(edges)):
            raise ValueError(f"bucket_edges: expected strictly increasing ints >= 1, got {bucket_edges!r}")
        if isinstance(tau_floor, bool) or not (
            isinstance(tau_floor, (int, float)) and tau_floor >= 0 and math.isfinite(tau_floor)
        ):
            raise ValueError(f"tau_floor: expected a finite float >= 0, got {tau_floor!r}")
        if isinstance(tau_scale, bool) or not (
            isinstance(tau_scale, (int, float)) and tau_scale >= 1 and math.isfinite(tau_scale)
        ):
            raise ValueError(f"tau_scale: expected a finite float >= 1, got {tau_scale!r}")
        if (
            isinstance(max_large_margin_events, bool)
            or not isinstance(max_large_margin_events, int)
            or max_large_margin_events < 0
        ):
            raise ValueError(f"max_large_margin_events: expected an int >= 0, got {max_large_margin_events!r}")
        if isinstance(z, bool) or not (isinstance(z, (int, float)) and z > 0 and math.isfinite(z)):  # inf: intervals [0, 1]
            raise ValueError(f"z: expected a finite float > 0, got {z!r}")
        self.stock = stock
        self.chunk_size = chunk_size
        self.bucket_edges = tuple(edges)
        self.tau_floor = float(tau_floor)
        self.tau_scale = float(tau_scale)
        self.max_large_margin_events = max_large_margin_events
        self.z = float(z)

    def _sequences(self, name: str, value, *, count: int | None = None, allow_empty: bool = False) -> list[torch.Tensor]:
        if hasattr(value, "tokens") and not isinstance(value, torch.Tensor):
            value = value.tokens  # a GenerationOutput
        if isinstance(value, torch.Tensor):
            if value.ndim != 2:
                raise ValueError(
                    f"{name}: expected a 2-D tensor [batch, length] or a list of 1-D tensors, got shape {tuple(value.shape)}"
                )
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
                    raise TypeError(
                        f"{name}[{i}]: expected a 1-D integer tensor or a list of ints, got {type(seq).__name__}"
                    ) from err
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
            null_list = [runner.generate_stock(self.stock, p, m) for p, m in zip(prompt_list, lengths)]
        else:
            if max_new_tokens is not None:
                raise ValueError(
                    f"max_new_tokens: expected None with null_outputs (their lengths are theirs), got {max_new_tokens!r}"
                )
            null_list = self._sequences("null_outputs", null_outputs, count=len(prompt_list))
        self._check_fits("null_outputs", prompt_list, null_list)
        scored = runner.score_run(self.stock, prompt_list, null_list, sets, chunk_size=self.chunk_size)
        return NullCalibration.from_run(scored, tau_floor=self.tau_floor, tau_scale=self.tau_scale)

    @staticmethod
    def _check_null(ref: ScoredRun, prompts: list[torch.Tensor]) -> None:
        """Raise ``ValueError`` naming ``null`` unless it was calibrated on these prompts, in this order."""
        if len(ref.tokens) != len(prompts):
            raise ValueError(f"null: expected a calibration on these {len(prompts)} prompts, got one on {len(ref.tokens)}")
        for i, (run, prompt) in enumerate(zip(ref.tokens, prompts)):
            if run.numel() < prompt.numel() or not torch.equal(run[: prompt.numel()], prompt.cpu()):
                raise ValueError(f"null: expected a calibration on these prompts, got another prompt at {i}")

    def _stratum(
        self, name: str, cand: ScoredRun, cand_keep: torch.Tensor, null: ScoredRun, null_keep: torch.Tensor, tau: float
    ) -> Stratum:
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
            max_large_margin_events=self.max_large_margin_events,
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
            prompts: ``[B, P]`` tensor or a list of ``B`` 1-D token tensors, every token a prompt token: for prompts
                generated as a left-padded batch (``attention_mask``), pass the list of unpadded prompts, or the
                padding is forced through as prompt.
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
        cand = runner.score_run(self.stock, prompt_list, outputs, sets, chunk_size=self.chunk_size)
        ref = null.scored
        self._check_null(ref, prompt_list)
        # this checker's threshold from the null's margins (a null calibrated by another checker carries its own)
        tau, _ = large_margin_threshold(ref.margin, tau_floor=self.tau_floor, tau_scale=self.tau_scale)

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
            n_ids = torch.tensor([s == label for s in sets])[ref.sequence]  # the null's sequences are this check's prompts
            by_set[f"set {label}"] = self._stratum(f"set {label}", cand, c_ids, ref, n_ids, tau)

        failures = []
        ci = interval_label(self.z)
        for s in [overall, *by_bucket.values(), *(by_set.values() if len(by_set) > 1 else ())]:
            if s.rate_failed:
                failures.append(
                    f"{s.name}: mismatch rate {s.rate:.3g} ({ci} CI {s.ci95[0]:.3g}-{s.ci95[1]:.3g}) above the null's "
                    f"{s.null_rate:.3g} ({ci} CI {s.null_ci95[0]:.3g}-{s.null_ci95[1]:.3g})"
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
