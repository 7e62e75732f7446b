"""Teacher-forcing outputs through the stock system: per-position scores of a run, and the null run
(the stock system's own outputs scored the same way)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specdec.contracts.target import check_target
from specdec.forcing.report import MarginEvent
from specdec.forcing.statistics import large_margin_threshold

__all__ = [
    "ForcedPositions",
    "NullCalibration",
    "ScoredRun",
    "generate_stock",
    "require_stock_target",
    "score_run",
    "teacher_force",
]

# tokens before a mismatch kept with its event, so a report can show what the model was continuing
EVENT_CONTEXT_TOKENS = 8


def require_stock_target(stock) -> None:
    """Raise ``TypeError`` unless ``stock`` implements the :class:`~specdec.contracts.Target` protocol."""
    check_target(stock, name="stock")


@dataclass
class ForcedPositions:
    """Per generated position of one output, what the stock target says.

    Attributes:
        stock_argmax: ``[n]`` int64, the stock target's argmax at each position.
        margin: ``[n]`` float32, ``max(logits) - logits[emitted]`` (``>= 0``).
        mismatch: ``[n]`` bool, ``margin > 0``: the emitted token is not a stock argmax.

    Example:
        >>> from specdec.testing import tiny_target
        >>> forced = teacher_force(tiny_target(seed=0), torch.tensor([1, 2, 3]), torch.tensor([5, 6]))
        >>> forced.stock_argmax.shape, forced.mismatch.tolist(), torch.equal(forced.mismatch, forced.margin > 0)
        (torch.Size([2]), [True, True], True)
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
        >>> import specdec as sd
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


@dataclass
class ScoredRun:
    """Per-position arrays of one run (candidate or null), concatenated over its ``S`` sequences.

    Attributes:
        sequence: ``[N]`` int64, index of the prompt/output pair of each position.
        position: ``[N]`` int64, generated position (0 = first generated token).
        absolute: ``[N]`` int64, position in ``prompt + output``.
        emitted: ``[N]`` int64, the run's token.
        stock_argmax: ``[N]`` int64, the stock target's argmax there.
        margin: ``[N]`` float32, stock top logit minus the stock logit of ``emitted``.
        prompt_set: ``S`` labels, one per sequence.
        tokens: ``S`` CPU tensors ``prompt + output``, for the context of events.

    Example:
        >>> import specdec as sd
        >>> from specdec.testing import tiny_target
        >>> stock = tiny_target(seed=0)
        >>> prompt = torch.tensor([1, 2, 3]); out = sd.generate(stock, prompt[None], 4).tokens[0]
        >>> run = score_run(stock, [prompt], [out], ["default"], chunk_size=512)
        >>> run.position.tolist(), run.mismatch.any().item()
        ([0, 1, 2, 3], False)
    """

    sequence: torch.Tensor
    position: torch.Tensor
    absolute: torch.Tensor
    emitted: torch.Tensor
    stock_argmax: torch.Tensor
    margin: torch.Tensor
    prompt_set: list[str]
    tokens: list[torch.Tensor]

    @property
    def mismatch(self) -> torch.Tensor:
        """``[N]`` bool: the emitted token is not a stock argmax."""
        return self.margin > 0

    def events(self, keep: torch.Tensor) -> tuple[MarginEvent, ...]:
        """One :class:`MarginEvent` per position where ``keep`` (``[N]`` bool) is set."""
        idx = keep.nonzero().view(-1).tolist()
        seq, pos, absolute = self.sequence.tolist(), self.position.tolist(), self.absolute.tolist()
        emitted, argmax, margin = self.emitted.tolist(), self.stock_argmax.tolist(), self.margin.tolist()
        return tuple(
            MarginEvent(
                seq[i],
                pos[i],
                absolute[i],
                emitted[i],
                argmax[i],
                float(margin[i]),
                self.prompt_set[seq[i]],
                context=tuple(self.tokens[seq[i]][max(0, absolute[i] - EVENT_CONTEXT_TOKENS) : absolute[i]].tolist()),
            )
            for i in idx
        )


def score_run(
    stock, prompts: list[torch.Tensor], outputs: list[torch.Tensor], prompt_sets: list[str], *, chunk_size: int
) -> ScoredRun:
    """Teacher-force every ``prompt + output`` pair through ``stock`` (see :func:`teacher_force`).

    Args:
        prompts, outputs: ``S`` 1-D int64 tensors each (checked by the caller).
        prompt_sets: ``S`` labels.

    Example: see :class:`ScoredRun`.
    """
    cols: dict[str, list[torch.Tensor]] = {k: [] for k in ("sequence", "position", "absolute", "emitted", "argmax", "margin")}
    for i, (prompt, output) in enumerate(zip(prompts, outputs)):
        forced = teacher_force(stock, prompt, output, chunk_size=chunk_size)
        n = output.numel()
        pos = torch.arange(n)
        cols["sequence"].append(torch.full((n,), i, dtype=torch.long))
        cols["position"].append(pos)
        cols["absolute"].append(pos + prompt.numel())
        cols["emitted"].append(output.cpu())
        cols["argmax"].append(forced.stock_argmax.cpu())
        cols["margin"].append(forced.margin.cpu())
    return ScoredRun(
        sequence=torch.cat(cols["sequence"]),
        position=torch.cat(cols["position"]),
        absolute=torch.cat(cols["absolute"]),
        emitted=torch.cat(cols["emitted"]),
        stock_argmax=torch.cat(cols["argmax"]),
        margin=torch.cat(cols["margin"]),
        prompt_set=list(prompt_sets),
        tokens=[torch.cat([p.cpu(), y.cpu()]) for p, y in zip(prompts, outputs)],
    )


@torch.no_grad()
def generate_stock(stock, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """The stock system's output for ``prompt`` (``[P]``): greedy autoregressive decoding, ``[n]``."""
    from specdec.decode import generate

    return generate(stock, prompt[None], max_new_tokens).tokens[0]


@dataclass
class NullCalibration:
    """The stock system's own outputs scored through the teacher-forcing path.

    Build it once with :meth:`TokenForcingChecker.calibrate` and pass it to every
    :meth:`TokenForcingChecker.check` of candidates on the same prompts.

    Attributes:
        scored: the null run's per-position scores.
        tau: the large-margin threshold derived from it.
        max_null_margin: the largest null mismatch margin (0 when the null never mismatches).

    Example:
        >>> from specdec.testing import tiny_target
        >>> stock = tiny_target(seed=0)
        >>> prompt = torch.tensor([1, 2, 3]); out = generate_stock(stock, prompt, 6)
        >>> run = score_run(stock, [prompt], [out], ["default"], chunk_size=512)
        >>> null = NullCalibration.from_run(run, tau_floor=0.5, tau_scale=2.0)
        >>> null.num_tokens, null.num_mismatches, null.tau
        (6, 0, 0.5)
    """

    scored: ScoredRun
    tau: float
    max_null_margin: float

    @classmethod
    def from_run(cls, scored: ScoredRun, *, tau_floor: float, tau_scale: float) -> NullCalibration:
        """Calibrate ``tau`` from a scored null run (:func:`specdec.forcing.statistics.large_margin_threshold`)."""
        tau, max_margin = large_margin_threshold(scored.margin, tau_floor=tau_floor, tau_scale=tau_scale)
        return cls(scored=scored, tau=tau, max_null_margin=max_margin)

    @property
    def num_tokens(self) -> int:
        """Positions scored in the null run (int); see the class example."""
        return int(self.scored.margin.numel())

    @property
    def num_mismatches(self) -> int:
        """Null positions whose emitted token is not a stock argmax (int); see the class example."""
        return int(self.scored.mismatch.sum())
