"""Fault injectors: targets that behave like the wrapped one except for one planted bug.

A fault wraps a :class:`specdec.models.Target` and keeps its interface (``forward``, ``commit``,
``reset``, ``length``, ``room()``, ...), so ``sd.generate(fault, ...)`` runs a faulty *system* whose
outputs a checker must reject. Each fault activates from generated position ``after`` on (``0`` is the
first generated token), which lets a test show that a late fault is not diluted by clean early tokens.

Which rows a fault touches: row ``r`` of a forward at position ``pos_r`` produces the logits of the
token at ``pos_r + 1``, i.e. of generated position ``pos_r + 1 - prompt_len``. The prompt length is
taken from the first forward after :meth:`reset` (the prefill), as :func:`specdec.generate` does it.

Faults:

* :class:`LogitBiasFault` -- ``+bias`` on every ``every``-th vocabulary id (a planted reward hack).
* :class:`LogitNoiseFault` -- Gaussian noise on the logits (a numerics bug larger than rounding).
* :class:`PositionShiftFault` -- RoPE positions off by ``shift`` (an off-by-one position bug).
* :class:`StaleStateFault` -- rejected draft rows stay in the state after rollback (a recurrent state
  that is not restored; inert under plain autoregressive decoding, where nothing is rejected).
* :class:`QChainHandOff` -- an exact pass that reuses the previous Q pass's logits on their shared rows (a
  two-level verifier's shortcut that commits 8-bit results).
* :class:`SlotLogitBiasFault` -- a ragged target (what :class:`specdec.engine.Engine` batches on) that adds
  ``LogitBiasFault``'s bias to the rows of ONE slot only (cross-talk or bookkeeping between a batched
  engine's requests: one request's logits touched, its companions' not).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.target import TargetOutput, check_target
from specdec.models.dense import DenseTarget
from specdec.models.ragged import RaggedDenseTarget, RequestRows

__all__ = [
    "LogitBiasFault",
    "LogitNoiseFault",
    "PositionShiftFault",
    "QChainHandOff",
    "SlotLogitBiasFault",
    "StaleStateFault",
    "TargetFault",
]


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return value


class TargetFault:
    """Base class: a transparent wrapper around a target; subclasses override one behaviour.

    Args:
        target: the wrapped :class:`specdec.models.Target`.
        after: first generated position at which the fault acts.

    Example:
        >>> import specdec as sd
        >>> from specdec.testing import tiny_target
        >>> wrapped = TargetFault(tiny_target(seed=0))        # no fault: identical outputs
        >>> prompt = torch.tensor([[1, 2, 3]])
        >>> torch.equal(sd.generate(wrapped, prompt, 8).tokens, sd.generate(wrapped.target, prompt, 8).tokens)
        True
    """

    def __init__(self, target, *, after: int = 0):
        self.target = check_target(target)
        self.after = _check_int("after", after, 0)
        self.prompt_len: int | None = None
        self._rows = 0

    def __getattr__(self, name):
        # Only reached for attributes not set on the wrapper: config, device, dtype, k_caches, ...
        if name == "target":
            raise AttributeError(name)
        return getattr(self.target, name)

    @property
    def config(self):
        """The wrapped target's config."""
        return self.target.config

    @property
    def device(self) -> torch.device:
        """The wrapped target's device."""
        return self.target.device

    @property
    def dtype(self) -> torch.dtype:
        """The wrapped target's weight dtype."""
        return self.target.dtype

    @property
    def length(self) -> int:
        """Committed tokens of the wrapped target's cache."""
        return self.target.length

    @property
    def vocab_size(self) -> int:
        """The wrapped target's ``V``."""
        return self.target.vocab_size

    @property
    def max_seq_len(self) -> int:
        """The wrapped target's cache capacity in tokens."""
        return self.target.max_seq_len

    def reset(self) -> None:
        """Reset the wrapped target and forget the prompt length (the next forward is a prefill).

        Example:
            >>> from specdec.testing import tiny_target
            >>> fault = TargetFault(tiny_target(seed=0))
            >>> _ = fault(torch.tensor([[1, 2, 3]])); fault.commit(3); fault.prompt_len
            3
            >>> fault.reset(); fault.length, fault.prompt_len
            (0, None)
        """
        self.target.reset()
        self.prompt_len = None
        self._rows = 0

    def truncate(self, length: int) -> None:
        """Roll the wrapped target back to ``length`` committed tokens.

        Example:
            >>> from specdec.testing import tiny_target
            >>> fault = TargetFault(tiny_target(seed=0))
            >>> _ = fault(torch.tensor([[1, 2, 3]])); fault.commit(3); fault.truncate(1); fault.length
            1
        """
        self.target.truncate(length)

    def room(self) -> int:
        """Tokens that still fit in the wrapped target's cache.

        Example:
            >>> from specdec.testing import tiny_target
            >>> TargetFault(tiny_target(seed=0, max_seq_len=64)).room()
            64
        """
        return self.target.room()

    @property
    def supports_trees(self) -> bool:
        """Whether the wrapped target accepts tree plans."""
        return self.target.supports_trees

    @property
    def weight_views(self) -> tuple[str, ...]:
        """The wrapped target's weight views (a fault acts on every view)."""
        return self.target.weight_views

    def __call__(
        self, tokens, positions=None, mask=None, *, hidden_layers: Sequence[int] = (), tree_parents=None, view: str = "exact"
    ):
        # a subclass written before weight views may override forward without `view`: pass it only when set
        extra = {} if view == "exact" else {"view": view}
        return self.forward(tokens, positions, mask, hidden_layers=hidden_layers, tree_parents=tree_parents, **extra)

    def run_plan(self, plan: VerifyPlan, *, hidden_layers: Sequence[int] = (), view: str = "exact"):
        """The wrapped target's plan forward, through this fault's :meth:`forward`."""
        plan.check_prefix(self.length)
        extra = {} if view == "exact" else {"view": view}
        return self.forward(
            plan.tokens, plan.positions, plan.mask, hidden_layers=hidden_layers, tree_parents=plan.row_parents, **extra
        )

    def discard(self) -> None:
        """Drop the scratch rows of the last forward of the wrapped target.

        Example:
            >>> from specdec.testing import tiny_target
            >>> fault = TargetFault(tiny_target(seed=0))
            >>> _ = fault(torch.tensor([[1, 2, 3]])); fault.discard(); fault.length
            0
        """
        self.target.discard()

    def _default_positions(self, tokens: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        if positions is not None:
            return positions
        return (self.target.length + torch.arange(tokens.shape[1], device=tokens.device))[None]

    def active_rows(self, tokens: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        """``[1, T]`` bool: rows whose logits decide a generated position ``>= after``."""
        if self.prompt_len is None:
            self.prompt_len = self.target.length + tokens.shape[1]
        generated = self._default_positions(tokens, positions) + 1 - self.prompt_len  # [1, T]
        return generated >= self.after

    def forward(
        self, tokens, positions=None, mask=None, *, hidden_layers: Sequence[int] = (), tree_parents=None, view: str = "exact"
    ):
        """The wrapped target's forward, unchanged; the first forward after :meth:`reset` sets ``prompt_len``.

        Arguments and result are those of :meth:`specdec.contracts.Target.forward`: ``tokens [1, T]``,
        ``positions [1, T]``, ``mask [T, T]``, ``tree_parents [T]``; logits ``[1, T, V]``.

        Example:
            >>> from specdec.testing import tiny_target
            >>> fault = TargetFault(tiny_target(seed=0))
            >>> out = fault.forward(torch.tensor([[1, 2, 3]]), hidden_layers=(0,))
            >>> out.logits.shape, out.hidden[0].shape, fault.prompt_len
            (torch.Size([1, 3, 97]), torch.Size([1, 3, 32]), 3)
        """
        self.active_rows(tokens, positions)
        self._rows = tokens.shape[1]
        return self.target(tokens, positions, mask, hidden_layers=hidden_layers, tree_parents=tree_parents, view=view)

    def commit(self, accepted) -> None:
        """Commit on the wrapped target: an int ``n`` keeps the first ``n`` rows, an int64 ``[n]`` those rows.

        Example:
            >>> from specdec.testing import tiny_target
            >>> fault = TargetFault(tiny_target(seed=0))
            >>> _ = fault(torch.tensor([[1, 2, 3]])); fault.commit(torch.tensor([0, 1])); fault.length
            2
        """
        self.target.commit(accepted)


class LogitBiasFault(TargetFault):
    """Adds ``bias`` to the logits of every ``every``-th vocabulary id (ids ``0, every, 2 * every, ...``)
    from generated position ``after`` on.

    Wherever a biased id lies within ``bias`` logits of the top, the faulty system emits it instead of
    the argmax; the token-forcing checker sees a mismatch with a margin in ``(0, bias]``.

    Args:
        target: the wrapped target.
        bias: added logit (may be negative).
        every: period of the biased ids.
        after: first generated position affected.

    Example:
        >>> from specdec.testing import tiny_target
        >>> fault = LogitBiasFault(tiny_target(seed=0), bias=2.0, every=7, after=0)
        >>> out = fault(torch.tensor([[1, 2, 3]]))
        >>> fault.target.reset()
        >>> ref = fault.target(torch.tensor([[1, 2, 3]]))
        >>> (out.logits - ref.logits)[0, :, :8].round(decimals=4)  # only the last prefill row decides a generated token
        tensor([[0., 0., 0., 0., 0., 0., 0., 0.],
                [0., 0., 0., 0., 0., 0., 0., 0.],
                [2., 0., 0., 0., 0., 0., 0., 2.]])
    """

    def __init__(self, target, bias: float = 2.0, every: int = 7, after: int = 2048):
        super().__init__(target, after=after)
        if not (isinstance(bias, (int, float)) and not isinstance(bias, bool) and abs(bias) < float("inf")):
            raise ValueError(f"bias: expected a finite float, got {bias!r}")
        self.bias = float(bias)
        self.every = _check_int("every", every, 1)

    def forward(
        self, tokens, positions=None, mask=None, *, hidden_layers: Sequence[int] = (), tree_parents=None, view: str = "exact"
    ):
        """The wrapped forward, then ``+bias`` on ids ``0, every, 2 * every, ...`` of the active rows' logits ``[1, T, V]``.

        Example:
            >>> from specdec.testing import tiny_target
            >>> fault = LogitBiasFault(tiny_target(seed=0), bias=2.0, every=7, after=1)
            >>> _ = fault(torch.tensor([[1, 2, 3]])); fault.commit(3)   # the prefill decides position 0: clean
            >>> out = fault(torch.tensor([[4, 5]]))                      # positions 1 and 2: biased
            >>> ref = fault.target; ref.reset(); _ = ref(torch.tensor([[1, 2, 3]])); ref.commit(3)
            >>> (out.logits - ref(torch.tensor([[4, 5]])).logits)[0, :, :8].round()   # logit + 2 - logit rounds
            tensor([[2., 0., 0., 0., 0., 0., 0., 2.],
                    [2., 0., 0., 0., 0., 0., 0., 2.]])
        """
        active = self.active_rows(tokens, positions)  # [1, T]
        out = super().forward(tokens, positions, mask, hidden_layers=hidden_layers, tree_parents=tree_parents, view=view)
        vocab = out.logits.shape[-1]
        biased = (torch.arange(vocab, device=out.logits.device) % self.every == 0).float()  # [V]
        out.logits = out.logits + self.bias * active[..., None].float() * biased
        return out


class LogitNoiseFault(TargetFault):
    """Adds ``N(0, std^2)`` noise to every logit from generated position ``after`` on.

    The noise comes from the fault's own generator, re-seeded with ``seed`` on every :meth:`reset`,
    so a run is reproducible.

    Example:
        >>> from specdec.testing import tiny_target
        >>> fault = LogitNoiseFault(tiny_target(seed=0), std=1.0, after=0)
        >>> fault.reset(); a = fault(torch.tensor([[1, 2]])).logits
        >>> fault.reset(); b = fault(torch.tensor([[1, 2]])).logits
        >>> torch.equal(a, b)
        True
    """

    def __init__(self, target, std: float = 0.5, after: int = 0, seed: int = 0):
        super().__init__(target, after=after)
        if not (isinstance(std, (int, float)) and not isinstance(std, bool) and 0 <= std < float("inf")):
            raise ValueError(f"std: expected a finite float >= 0, got {std!r}")
        self.std = float(std)
        self.seed = _check_int("seed", seed, 0)
        self._generator = torch.Generator(device=target.device).manual_seed(seed)

    def reset(self) -> None:
        """:meth:`TargetFault.reset`, and re-seed the noise generator with ``seed`` (see the class example)."""
        super().reset()
        self._generator.manual_seed(self.seed)

    def forward(
        self, tokens, positions=None, mask=None, *, hidden_layers: Sequence[int] = (), tree_parents=None, view: str = "exact"
    ):
        """The wrapped forward, then ``std * N(0, 1)`` noise on every logit of the active rows (``[1, T, V]``).

        Example:
            >>> from specdec.testing import tiny_target
            >>> fault = LogitNoiseFault(tiny_target(seed=0), std=1.0, after=0)
            >>> noisy = fault(torch.tensor([[1, 2]])).logits
            >>> fault.target.reset(); clean = fault.target(torch.tensor([[1, 2]])).logits
            >>> (noisy != clean).sum(-1)           # row 0 decides a prompt token, row 1 the first generated one
            tensor([[ 0, 97]])
        """
        active = self.active_rows(tokens, positions)
        out = super().forward(tokens, positions, mask, hidden_layers=hidden_layers, tree_parents=tree_parents, view=view)
        noise = torch.randn(out.logits.shape, generator=self._generator, device=out.logits.device, dtype=out.logits.dtype)
        out.logits = out.logits + self.std * noise * active[..., None]
        return out


class PositionShiftFault(TargetFault):
    """Runs the rows that decide generated positions ``>= after`` at RoPE position ``+ shift``.

    The shifted rows' K/V are cached at the wrong positions too, so the error persists into later
    tokens, as with a real off-by-one position bug. The wrapped target keeps the positions it was asked
    for as those its rows ran at, as a system whose kernel shifts them internally would, so a dense
    target's commit check (rows at the positions of their slots) does not see the shift: the fault is for
    the checks downstream of the target (token forcing).

    Example:
        >>> from specdec.testing import tiny_target
        >>> fault = PositionShiftFault(tiny_target(seed=0), shift=1, after=0)
        >>> fault(torch.tensor([[1, 2, 3]])).logits.shape
        torch.Size([1, 3, 97])
    """

    def __init__(self, target, shift: int = 1, after: int = 0):
        super().__init__(target, after=after)
        if isinstance(shift, bool) or not isinstance(shift, int) or shift == 0:
            raise ValueError(f"shift: expected a non-zero int, got {shift!r}")
        self.shift = shift

    def forward(
        self, tokens, positions=None, mask=None, *, hidden_layers: Sequence[int] = (), tree_parents=None, view: str = "exact"
    ):
        """The wrapped forward with ``positions [1, T]`` (default ``length + arange(T)``) ``+ shift`` on the active rows.

        Example:
            >>> from specdec.testing import tiny_target
            >>> fault = PositionShiftFault(tiny_target(seed=0), shift=1, after=0)
            >>> shifted = fault(torch.tensor([[1, 2, 3]])).logits     # only row 2 decides a generated token
            >>> fault.target.reset()
            >>> torch.equal(shifted, fault.target(torch.tensor([[1, 2, 3]]), torch.tensor([[0, 1, 3]])).logits)
            True
        """
        active = self.active_rows(tokens, positions)
        asked = self._default_positions(tokens, positions)
        self._rows = tokens.shape[1]
        out = self.target(
            tokens, asked + self.shift * active.long(), mask, hidden_layers=hidden_layers, tree_parents=tree_parents, view=view
        )
        if isinstance(self.target, DenseTarget):
            self.target._last_tree = (asked, *self.target._last_tree[1:])
        return out


class StaleStateFault(TargetFault):
    """After a verification that rejects rows, folds the rejected rows into the state it keeps.

    This is what a recurrent (GDN/Mamba) state that is not rolled back does: the rejected draft tokens
    have already been absorbed into the state. Here the accepted rows are committed as the wrapped target
    would (its length and positions stay right, so its own bookkeeping checks pass), then the K/V of the
    last committed row becomes the mean of it and the rejected rows' K/V, which the verify pass left in the
    cache past the new length: every later token attends to a row that carries the rejected drafts. Plain
    autoregressive decoding never rejects, so the fault is inert there; speculative decoding through it drifts.
    Needs a target with a K/V cache (``k_caches`` / ``v_caches`` ``[B, H, S, D]``, as the lean targets have).

    Example:
        >>> from specdec.testing import tiny_target
        >>> fault = StaleStateFault(tiny_target(seed=0), after=0)
        >>> _ = fault(torch.tensor([[1, 2, 3]])); fault.commit(3)      # prefill
        >>> _ = fault(torch.tensor([[4, 5, 6, 7]]))                    # verify: rows at slots 3..6
        >>> row4 = fault.k_caches[0][0, :, 4].clone()
        >>> fault.commit(2)                                            # 2 rows rejected, folded into slot 4
        >>> fault.length, torch.equal(fault.k_caches[0][0, :, 4], row4)
        (5, False)
    """

    def commit(self, accepted) -> None:
        """Commit ``accepted`` as the wrapped target would; then, when the last forward decides positions ``>= after``
        and some of its rows were rejected, fold them into the last committed row (see the class example)."""
        rows, start = self._rows, self.target.length
        kept = accepted if isinstance(accepted, int) else int(accepted.numel())
        self.target.commit(accepted)
        if self.prompt_len is not None and start + 1 - self.prompt_len >= self.after and 0 < kept < rows:
            last = self.target.length - 1
            for cache in (*self.target.k_caches, *self.target.v_caches):
                cache[:, :, last] = cache[:, :, last : start + rows].mean(dim=2)


class QChainHandOff(TargetFault):
    """Planted fault: the exact pass reuses the Q pass's logits for the rows the two passes share.

    With chain drafts the exact pass's first rows (the root and the Q chain C) are the Q pass's first
    rows, same tokens at the same positions: the shortcut a fused implementation could take, and wrong,
    since the Q logits come from the 8-bit weights. Two-level verification must fail token forcing under it.

    Example:
        >>> from specdec.testing import tiny_target
        >>> fault = QChainHandOff(tiny_target(seed=0))
        >>> ids = torch.tensor([[1, 2, 3]])
        >>> q = fault.forward(ids, view="q").logits; fault.discard()
        >>> torch.equal(fault.forward(ids).logits, q)        # the exact pass now returns the Q logits
        True
    """

    def __init__(self, target):
        super().__init__(target)
        self.last_q_pass: tuple[torch.Tensor, torch.Tensor] | None = None  # (tokens [T], logits [1, T, V]) of the last Q pass

    def forward(self, tokens, positions=None, mask=None, *, hidden_layers=(), tree_parents=None, view="exact"):
        """The wrapped forward; an exact forward right after a Q forward takes the Q logits on their shared rows."""
        out = super().forward(tokens, positions, mask, hidden_layers=hidden_layers, tree_parents=tree_parents, view=view)
        if view == "q":
            self.last_q_pass = (tokens[0].clone(), out.logits.clone())
        elif self.last_q_pass is not None:
            q_tokens, q_logits = self.last_q_pass
            self.last_q_pass = None
            n = min(q_tokens.numel(), tokens.shape[1])
            differs = (q_tokens[:n] != tokens[0, :n]).nonzero()
            shared = n if differs.numel() == 0 else int(differs[0, 0])
            logits = out.logits.clone()
            logits[:, :shared] = q_logits[:, :shared]
            out = type(out)(logits=logits, hidden=out.hidden)
        return out


class SlotLogitBiasFault(RaggedDenseTarget):
    """A ragged target whose slot ``slot`` gets ``+bias`` on every ``every``-th vocabulary id from generated
    position ``after`` on; every other slot is the clean :class:`~specdec.models.ragged.RaggedDenseTarget`.

    The fault of a batched engine that mixes up its requests (a bias, a cache row or a bookkeeping entry
    applied to the wrong request): one request's outputs are wrong, its companions' are not. Generated
    positions count from the faulted slot's prefill, the first forward after :meth:`reset` of that slot: a row at
    position ``pos`` decides generated position ``pos + 1 - prompt_len``, as in :class:`TargetFault`. Every weight
    view is faulted.

    Args:
        target: the :class:`~specdec.models.DenseTarget` whose weights every slot runs.
        slot: the faulted slot (``0 <= slot < slots``); an :class:`~specdec.engine.Engine` gives its ``i``-th
            request slot ``i`` while no request has left.
        bias: added logit (finite, may be negative).
        every: period of the biased ids ``0, every, 2 * every, ...``.
        after: first generated position of the faulted slot's request that is biased.
        slots, max_seq_len, layout: as for :class:`~specdec.models.ragged.RaggedDenseTarget`.

    Example:
        >>> from specdec.testing import tiny_target
        >>> dense = tiny_target(seed=0)
        >>> fault = SlotLogitBiasFault(dense, slots=2, slot=1, bias=2.0, every=7, after=0)
        >>> clean = RaggedDenseTarget(dense, slots=2)
        >>> rows = [RequestRows(0, torch.tensor([[1, 2, 3]])), RequestRows(1, torch.tensor([[4, 5]]))]
        >>> (faulty0, faulty1), (clean0, clean1) = fault.forward(rows), clean.forward(rows)
        >>> torch.equal(faulty0.logits, clean0.logits)      # slot 0 untouched
        True
        >>> (faulty1.logits - clean1.logits)[0, :, :8].round(decimals=3)   # slot 1: its prefill's last row decides position 0
        tensor([[0., 0., 0., 0., 0., 0., 0., 0.],
                [2., 0., 0., 0., 0., 0., 0., 2.]])
    """

    def __init__(
        self,
        target: DenseTarget,
        *,
        slots: int,
        slot: int,
        bias: float = 2.0,
        every: int = 7,
        after: int = 2048,
        max_seq_len: int | None = None,
        layout: str = "per_request",
    ):
        super().__init__(target, slots=slots, max_seq_len=max_seq_len, layout=layout)
        self.slot = self._check_slot(slot)
        if not (isinstance(bias, (int, float)) and not isinstance(bias, bool) and abs(bias) < float("inf")):
            raise ValueError(f"bias: expected a finite float, got {bias!r}")
        self.bias = float(bias)
        self.every = _check_int("every", every, 1)
        self.after = _check_int("after", after, 0)
        self.prompt_len: int | None = None

    def reset(self, slot: int) -> None:
        """Empty ``slot``; for the faulted slot, also forget its prompt length (its next forward is a prefill).

        Example:
            >>> from specdec.testing import tiny_target
            >>> fault = SlotLogitBiasFault(tiny_target(seed=0), slots=2, slot=0, after=0)
            >>> _ = fault.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))]); fault.prompt_len
            3
            >>> fault.reset(0); fault.prompt_len is None
            True
        """
        super().reset(slot)
        if slot == self.slot:
            self.prompt_len = None

    def forward(
        self, requests: Sequence[RequestRows], *, hidden_layers: Sequence[int] = (), view: str = "exact"
    ) -> list[TargetOutput]:
        """The clean ragged forward, then ``+bias`` on ids ``0, every, ...`` of the faulted slot's active rows.

        Arguments and result as :meth:`RaggedDenseTarget.forward <specdec.models.ragged.RaggedDenseTarget.forward>`:
        one :class:`~specdec.contracts.TargetOutput` per entry of ``requests``, logits ``[1, T_i, V]``.

        Example:
            >>> from specdec.testing import tiny_target
            >>> fault = SlotLogitBiasFault(tiny_target(seed=0), slots=1, slot=0, bias=2.0, every=7, after=2)
            >>> _ = fault.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))]); fault.commit(0, 3)  # decides position 0
            >>> out = fault.forward([RequestRows(0, torch.tensor([[4, 5, 6]]))])[0]                # positions 1, 2, 3
            >>> clean = RaggedDenseTarget(fault.target, slots=1)
            >>> _ = clean.forward([RequestRows(0, torch.tensor([[1, 2, 3]]))]); clean.commit(0, 3)
            >>> (out.logits - clean.forward([RequestRows(0, torch.tensor([[4, 5, 6]]))])[0].logits)[0, :, :8].round()
            tensor([[0., 0., 0., 0., 0., 0., 0., 0.],
                    [2., 0., 0., 0., 0., 0., 0., 2.],
                    [2., 0., 0., 0., 0., 0., 0., 2.]])
        """
        outs = super().forward(requests, hidden_layers=hidden_layers, view=view)  # checks every argument first
        for req, out in zip(requests, outs):
            if req.slot != self.slot:
                continue
            length, rows = self.lengths[req.slot], req.tokens.shape[1]
            if self.prompt_len is None:
                self.prompt_len = length + rows
            positions = req.positions
            if positions is None:
                positions = (length + torch.arange(rows, device=out.logits.device))[None]
            active = positions.to(out.logits.device) + 1 - self.prompt_len >= self.after  # [1, T]
            biased = (torch.arange(out.logits.shape[-1], device=out.logits.device) % self.every == 0).float()  # [V]
            out.logits = out.logits + self.bias * active[..., None].float() * biased
        return outs
