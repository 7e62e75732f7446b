"""A drafter with a chosen acceptance profile, for systems benchmarks: "simulated acceptance".

:class:`OracleDrafter` knows the target's own continuation (a reference decode of the same prompt)
and proposes it, injecting a miss at a depth drawn from a per-position acceptance profile. Under
greedy verification the accepted count of every round is then exactly the drawn one, so a benchmark
at real shapes with random weights (where a real drafter would accept nothing) sees the acceptance a
trained drafter reaches. It can wrap a real drafter: the wrapped drafter's forward still runs every
round (and is timed), only its proposal is replaced, so the run carries the real draft cost too.

Anything measured with it is simulated acceptance, and says so (:attr:`OracleDrafter.label`).
Losslessness is never at stake: the verifier decides what is emitted, and the proposal is reported
as deterministic (``draft_probs=None``).

The presets are flat conditional acceptance rates ``alpha`` (the probability that depth ``j`` is
accepted given that depths ``< j`` were) solved so that ``1 + sum_j alpha^j`` equals a published mean
acceptance length; each cites its source.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from specdec.contracts.drafter import check_propose_arguments
from specdec.contracts.host_ids import ids_tensor
from specdec.drafters.base import DraftProposal
from specdec.verify.sampling import SamplingConfig

__all__ = ["PRESETS", "AcceptanceProfile", "OracleDrafter"]

SIMULATED = "simulated acceptance"
_UNIFORM_BLOCK = 256  # uniforms an OracleDrafter draws from its generator at a time


@dataclass(frozen=True)
class AcceptanceProfile:
    """Conditional acceptance rate per draft depth, with where the numbers come from.

    Attributes:
        conditional: ``alpha_j`` for depths ``1..gamma``: P(depth ``j`` accepted | depths ``< j`` accepted).
        source: citation of the published data the profile reproduces.
        name: a short label.

    Example:
        >>> p = AcceptanceProfile.from_mean_acceptance(3.0, 2, source="made up")
        >>> round(p.conditional[0], 4), round(p.tokens_per_round, 6)
        (1.0, 3.0)
    """

    conditional: tuple[float, ...]
    source: str
    name: str = ""

    def __post_init__(self) -> None:
        values = tuple(float(a) for a in self.conditional)
        if not values or any(not 0.0 <= a <= 1.0 for a in values):
            raise ValueError(f"conditional: expected a non-empty sequence of rates in [0, 1], got {list(self.conditional)}")
        object.__setattr__(self, "conditional", values)

    @property
    def num_drafts(self) -> int:
        """``gamma``: the deepest draft the profile gives a rate for.

        Example:
            >>> AcceptanceProfile((0.9, 0.8, 0.7), source="made up").num_drafts
            3
        """
        return len(self.conditional)

    @property
    def survival(self) -> list[float]:
        """P(at least ``j`` drafts accepted), ``j = 1..gamma``."""
        out, s = [], 1.0
        for a in self.conditional:
            s *= a
            out.append(s)
        return out

    @property
    def tokens_per_round(self) -> float:
        """Expected tokens per verify pass with all ``gamma`` drafts proposed (bonus included)."""
        return 1.0 + sum(self.survival)

    def accepted_law(self, num_drafts: int | None = None) -> list[float]:
        """``law[n]`` = P(exactly ``n`` accepted) when ``num_drafts`` (default ``gamma``) are proposed."""
        k = self.num_drafts if num_drafts is None else min(num_drafts, self.num_drafts)
        surv = [1.0] + self.survival[:k]
        return [surv[n] - (surv[n + 1] if n < k else 0.0) for n in range(k + 1)]

    @classmethod
    def from_mean_acceptance(cls, tokens_per_round: float, num_drafts: int, *, source: str, name: str = "") -> AcceptanceProfile:
        """The flat profile (one ``alpha`` at every depth) with ``1 + sum_j alpha^j = tokens_per_round``."""
        if not 1.0 <= tokens_per_round <= num_drafts + 1:
            raise ValueError(f"tokens_per_round: expected a value in [1, {num_drafts + 1}], got {tokens_per_round}")
        lo, hi = 0.0, 1.0
        for _ in range(100):
            mid = (lo + hi) / 2
            if 1.0 + sum(mid**j for j in range(1, num_drafts + 1)) < tokens_per_round:
                lo = mid
            else:
                hi = mid
        return cls(conditional=((lo + hi) / 2,) * num_drafts, source=source, name=name)


PRESETS: dict[str, AcceptanceProfile] = {
    p.name: p
    for p in (
        AcceptanceProfile.from_mean_acceptance(
            6.17,
            7,
            name="dspark-qwen3-8b-gsm8k",
            source="DSpark paper (arXiv 2607.05147) Table 1: Qwen3-8B, GSM8K, T=1, gamma=7, chain, acceptance length 6.17; "
            "position-wise acceptance is reported as nearly flat (~0.93)",
        ),
        AcceptanceProfile.from_mean_acceptance(
            5.33,
            7,
            name="dflash-qwen3-8b-gsm8k",
            source="DSpark paper (arXiv 2607.05147) Table 1: DFlash retrained in DeepSpec, Qwen3-8B, GSM8K, T=1, block 7, "
            "acceptance length 5.33 (7 draft positions assumed; the flat rate 0.88 matches DFlash's reported position-1 rate)",
        ),
        AcceptanceProfile.from_mean_acceptance(
            6.36,
            15,
            name="dflash-qwen3-8b-gsm8k-b16",
            source="z-lab/dflash issue #119 (SGLang, Qwen3-8B-DFlash-b16, GSM8K, concurrency 1): accept length 6.36",
        ),
        AcceptanceProfile.from_mean_acceptance(
            4.8,
            15,
            name="specpilot-one-level",
            source="SpecPilot abstract: 4.4-5.2 tokens per exact verify step with one-level verification (stock); "
            "midpoint 4.8, 15 draft positions (a block-16 drafter) assumed",
        ),
        AcceptanceProfile.from_mean_acceptance(
            5.46,
            7,
            name="dflash2-qwen3.8-27b-gsm8k",
            source="z-lab Qwen3.8-27B-DFlash2 model card (quoted in xLLM #2279): GSM8K, T=1, block 8, acceptance length 5.46",
        ),
    )
}


def _int64_bytes(tokens: torch.Tensor) -> bytes:
    """The bytes of ``tokens`` as int64 on the host: two sequences are equal when their bytes are."""
    host = tokens if tokens.is_cpu else tokens.cpu()
    return host.numpy().astype(np.int64, copy=False).tobytes()


class OracleDrafter:
    """Propose the target's own continuation with misses drawn from an :class:`AcceptanceProfile`.

    Each round draws the number of drafts to get right, ``m``, from the profile (its own generator,
    so the request's random stream is untouched), proposes ``reference[n : n + m]`` and then one
    wrong token (and the rest of the reference after it, so the verify width stays ``k``). Under greedy
    verification with a reference equal to the target's greedy decode, exactly ``m`` drafts are
    accepted. When the context is not a prefix of any reference (sampling, or a reference that differs
    from the target), it proposes nothing and counts the round in :attr:`unmatched_rounds`.

    Args:
        profile: an :class:`AcceptanceProfile` or a key of :data:`PRESETS`.
        references: full sequences (prompt + continuation), 1-D int tensors; more with
            :meth:`add_reference`.
        wrap: a drafter whose ``propose`` still runs every round (timed in :attr:`wrapped_seconds`)
            and whose proposal is discarded; its feature taps are forwarded.
        vocab_size: needed without ``wrap`` (the wrong token is ``(truth + 1) % vocab_size``).
        seed: seed of the miss draws.

    Example:
        >>> drafter = OracleDrafter("dspark-qwen3-8b-gsm8k", references=[torch.tensor([1, 2, 3, 4])], vocab_size=5)
        >>> drafter.label, drafter.propose(torch.tensor([1, 2]), 2, sampling=SamplingConfig(), generator=None).tokens.numel()
        ('simulated acceptance', 2)
    """

    label = SIMULATED

    @property
    def host_context(self) -> bool:
        """Whether an engine may hand this drafter its context on the host (bool): ``True`` without a
        wrapped drafter, since the reference lookup reads tokens on the host; a wrapped drafter gets the
        context where its engine keeps it for drafters (the target's device)."""
        return self.wrap is None

    def __init__(
        self,
        profile: AcceptanceProfile | str,
        *,
        references: Sequence[torch.Tensor] = (),
        wrap=None,
        vocab_size: int | None = None,
        seed: int = 0,
    ):
        if isinstance(profile, str):
            if profile not in PRESETS:
                raise ValueError(f"profile: expected an AcceptanceProfile or one of {sorted(PRESETS)}, got {profile!r}")
            profile = PRESETS[profile]
        if not isinstance(profile, AcceptanceProfile):
            raise TypeError(f"profile: expected an AcceptanceProfile or a preset name, got {type(profile).__name__}")
        self.profile = profile
        self.wrap = wrap
        if vocab_size is None:
            vocab_size = getattr(wrap, "vocab_size", None)
        if vocab_size is None:
            raise ValueError("vocab_size: required when the wrapped drafter does not give one")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"vocab_size: expected a positive int, got {vocab_size!r}")
        self.vocab_size = vocab_size
        self.target_layer_ids = tuple(getattr(wrap, "target_layer_ids", ()) or ())
        self.references: list[torch.Tensor] = []
        # each reference as host ints (the continuations) and as int64 bytes (the prefix test: one memcmp)
        self._reference_ids: list[list[int]] = []
        self._reference_bytes: list[bytes] = []
        for ref in references:
            self.add_reference(ref)
        self._seed = seed
        self._gen = torch.Generator().manual_seed(seed)
        self._drawn: list[float] = []  # uniforms drawn from _gen, the first _next of them handed out
        self._next = 0
        self.planned: list[int] = []
        self.unmatched_rounds = 0
        self._wrapped_s = 0.0
        self._events: list[tuple] = []  # CUDA (start, end) events not yet summed into _wrapped_s

    def add_reference(self, sequence: torch.Tensor) -> None:
        """Add a known full sequence ``[L]`` (prompt + the target's continuation) to propose from.

        Example:
            >>> drafter = OracleDrafter("dspark-qwen3-8b-gsm8k", vocab_size=5)
            >>> drafter.add_reference(torch.tensor([1, 2, 3, 4])); len(drafter.references)
            1
        """
        if not isinstance(sequence, torch.Tensor) or sequence.ndim != 1:
            raise TypeError(f"sequence: expected a 1-D int tensor, got {getattr(sequence, 'shape', type(sequence).__name__)}")
        if sequence.is_floating_point() or sequence.is_complex() or sequence.dtype == torch.bool:
            raise TypeError(f"sequence: expected a 1-D int tensor, got dtype {sequence.dtype}")
        bad = ((sequence < 0) | (sequence >= self.vocab_size)).nonzero()  # a host read once a reference
        if bad.numel():
            i = int(bad[0, 0])
            raise ValueError(f"sequence: expected token ids in [0, {self.vocab_size}), got sequence[{i}] = {int(sequence[i])}")
        self.references.append(sequence.long())
        self._reference_ids.append(sequence.tolist())
        self._reference_bytes.append(_int64_bytes(sequence))

    def reset(self) -> None:
        """Start a request: resets the wrapped drafter, if any (the references and miss draws carry on).

        Example:
            >>> OracleDrafter("dspark-qwen3-8b-gsm8k", vocab_size=5).reset()
        """
        if self.wrap is not None:
            self.wrap.reset()

    def _truth(self, context: torch.Tensor, limit: int) -> list[int] | None:
        """Up to ``limit`` tokens after ``context`` in the first reference it is a proper prefix of, as host ints."""
        prefix, n = _int64_bytes(context), context.numel()
        for ids, packed in zip(self._reference_ids, self._reference_bytes):
            if len(ids) > n and packed.startswith(prefix):
                return ids[n : n + limit]
        return None

    def _uniforms(self, k: int) -> list[float]:
        """The next ``k`` uniforms of the miss draws: ``torch.rand(k, generator=..., dtype=torch.float64).tolist()``.

        They are drawn a block at a time and handed out in order: a CPU generator's float64
        stream is the same however it is cut into calls, so a round sees the values a call of its own
        would draw, without a tensor op of its own.
        """
        while len(self._drawn) - self._next < k:
            self._drawn = (
                self._drawn[self._next :] + torch.rand(_UNIFORM_BLOCK, generator=self._gen, dtype=torch.float64).tolist()
            )
            self._next = 0
        self._next += k
        return self._drawn[self._next - k : self._next]

    def _draw_accepts(self, k: int) -> int:
        u = self._uniforms(k)
        m = 0
        while m < k and u[m] < self.profile.conditional[m]:
            m += 1
        return m

    @property
    def wrapped_seconds(self) -> float:
        """Time spent in the wrapped drafter's ``propose``: device time between CUDA events on a GPU
        (read lazily, so timing adds no host sync to a round), host time on the CPU."""
        if self._events:
            self._events[-1][1].synchronize()
            self._wrapped_s += sum(start.elapsed_time(end) for start, end in self._events) / 1e3
            self._events.clear()
        return self._wrapped_s

    def propose(self, context, max_tokens, *, sampling: SamplingConfig, generator, target_hidden=None) -> DraftProposal:
        """Up to ``max_tokens`` drafts after ``context [n]``: the reference's continuation with one planned miss.

        Args:
            context: ``[n]`` int64, the request so far (prompt then emitted tokens).
            max_tokens: the most drafts (the profile's ``num_drafts`` caps it too).
            sampling, generator: passed to the wrapped drafter; the miss draws use the drafter's own seed.
            target_hidden: ``[r, taps, H]`` target features, forwarded to a wrapped drafter with taps.

        Returns:
            a deterministic :class:`DraftProposal` (``tokens [k]``, ``draft_probs=None``); empty when
            ``context`` is not a prefix of any reference.

        Example:
            >>> drafter = OracleDrafter(AcceptanceProfile((1.0, 1.0), source="made up"), references=[torch.tensor([1, 2, 3, 4])],
            ...                         vocab_size=5)
            >>> drafter.propose(torch.tensor([1, 2]), 2, sampling=SamplingConfig(), generator=None).tokens
            tensor([3, 4])
        """
        check_propose_arguments(context, max_tokens)
        # the reference lookup reads the context on the host: do it before the wrapped drafter is
        # queued, while the device is idle after the previous verify, so it costs no pipeline drain
        truth = self._truth(context, min(int(max_tokens), self.profile.num_drafts))
        if self.wrap is not None:
            extra = {"target_hidden": target_hidden} if self.target_layer_ids else {}
            if context.device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                stream = torch.cuda.current_stream(context.device)
                start.record(stream)
                self.wrap.propose(context, max_tokens, sampling=sampling, generator=generator, **extra)
                end.record(stream)
                self._events.append((start, end))
            else:
                t0 = time.perf_counter()
                self.wrap.propose(context, max_tokens, sampling=sampling, generator=generator, **extra)
                self._wrapped_s += time.perf_counter() - t0
        if truth is None:
            self.unmatched_rounds += 1
            return DraftProposal(tokens=context.new_zeros(0))
        k = len(truth)
        m = self._draw_accepts(k)
        self.planned.append(m)
        if m < k:
            truth[m] = (truth[m] + 1) % self.vocab_size
        # built on the host, then queued to the context's device without waiting for the wrapped drafter
        tokens = ids_tensor(truth)
        return DraftProposal(tokens=tokens if context.is_cpu else tokens.to(context.device, non_blocking=True), draft_probs=None)

    def __repr__(self) -> str:
        return f"OracleDrafter({self.profile.name or 'custom'}, {self.label}, {self.profile.tokens_per_round:.2f} tokens/round)"
