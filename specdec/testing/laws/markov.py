"""Markov targets: logits are a table lookup on the last ``order`` tokens, so the law of every run is
known exactly and a thousand speculative runs take seconds on a CPU."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.target import TargetOutput
from specdec.drafters.base import DraftProposal
from specdec.models.base import check_rows_mask
from specdec.verify.sampling import logits_to_probs, sample

__all__ = ["MarkovDrafter", "MarkovLaw", "MarkovTarget"]


class MarkovLaw:
    """Logits that depend on the last ``order`` tokens only, from a random table.

    Args:
        vocab_size: ``V``.
        order: context length the logits depend on (contexts shorter than that are left-padded
            with token 0).
        seed: table seed.
        scale: standard deviation of the table entries (larger = more peaked laws).

    Example:
        >>> law = MarkovLaw(5, order=2, seed=0)
        >>> law((3, 1, 4)).shape, torch.equal(law((3, 1, 4)), law((9, 1, 4)))
        (torch.Size([5]), True)
    """

    def __init__(self, vocab_size: int, *, order: int = 2, seed: int = 0, scale: float = 2.0):
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
            raise ValueError(f"vocab_size: expected an int >= 2, got {vocab_size!r}")
        if isinstance(order, bool) or not isinstance(order, int) or not 1 <= order <= 3:
            raise ValueError(f"order: expected 1, 2 or 3, got {order!r}")
        self.vocab_size = vocab_size
        self.order = order
        gen = torch.Generator().manual_seed(seed)
        self.table = scale * torch.randn((vocab_size,) * (order + 1), generator=gen)  # [V]*order + [V]

    def key(self, context: Sequence[int]) -> tuple[int, ...]:
        """The table index of ``context``: its last ``order`` ids, left-padded with 0 (a tuple of ``order`` ints).

        Example:
            >>> law = MarkovLaw(5, order=2, seed=0)
            >>> law.key([3, 1, 4]), law.key([4]), law.key(torch.tensor([2, 3]))
            ((1, 4), (0, 4), (2, 3))
        """
        tail = [int(t) for t in context][-self.order :]
        return tuple([0] * (self.order - len(tail)) + tail)

    def __call__(self, context: Sequence[int]) -> torch.Tensor:
        """Logits ``[V]`` float32 of the token after ``context``."""
        return self.table[self.key(context)].clone()


class MarkovTarget:
    """A :class:`specdec.models.Target` look-alike whose logits come from a :class:`MarkovLaw`.

    It honours the runtime's contract: ``forward`` over new rows (causal by default, or a tree mask:
    a row's context is the committed prefix followed by its ancestors), ``commit(n)`` or
    ``commit(rows)``, ``reset``, ``room``. Positions are accepted and ignored.

    Example:
        >>> import specdec as sd
        >>> target = MarkovTarget(MarkovLaw(7, seed=0), max_seq_len=64)
        >>> out = sd.generate(target, torch.tensor([[1, 2]]), 5, temperature=1.0, seed=0)
        >>> out.tokens.shape
        torch.Size([1, 5])
    """

    def __init__(
        self, law: MarkovLaw, *, max_seq_len: int = 4096, device: torch.device | str = "cpu", q_law: MarkovLaw | None = None
    ):
        if q_law is not None and (q_law.vocab_size != law.vocab_size or q_law.order != law.order):
            raise ValueError(
                f"q_law: expected a MarkovLaw of vocab_size {law.vocab_size} and order {law.order}, got "
                f"{q_law.vocab_size} and {q_law.order}"
            )
        self.law = law
        self.q_law = q_law
        self._last_view = "exact"
        self.max_seq_len = max_seq_len
        self.device = torch.device(device)
        self.dtype = torch.float32
        self._table = law.table.to(self.device)
        self._q_table = None if q_law is None else q_law.table.to(self.device)
        self._tokens: list[int] = []
        self._last: list[tuple[int, ...]] = []  # context keys of the last forward's rows
        self._last_tokens: list[int] = []

    @property
    def vocab_size(self) -> int:
        """The law's ``V``."""
        return self.law.vocab_size

    @property
    def length(self) -> int:
        """Committed tokens."""
        return len(self._tokens)

    def reset(self) -> None:
        """Forget every committed token and the rows of the last forward.

        Example:
            >>> target = MarkovTarget(MarkovLaw(7, seed=0), max_seq_len=16)
            >>> _ = target.forward(torch.tensor([[1, 2]])); target.commit(2); target.reset(); target.length
            0
        """
        self._tokens = []
        self._last, self._last_tokens = [], []
        self._last_view = "exact"

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` committed tokens (``0 <= length <= self.length``, else ``ValueError``).

        Example:
            >>> target = MarkovTarget(MarkovLaw(7, seed=0), max_seq_len=16)
            >>> _ = target.forward(torch.tensor([[1, 2, 3]])); target.commit(3); target.truncate(1); target.length
            1
        """
        if not 0 <= length <= self.length:
            raise ValueError(f"length: expected 0 <= length <= {self.length}, got {length}")
        del self._tokens[length:]

    def room(self) -> int:
        """Tokens that still fit: ``max_seq_len - length``.

        Example:
            >>> MarkovTarget(MarkovLaw(7, seed=0), max_seq_len=16).room()
            16
        """
        return self.max_seq_len - self.length

    @property
    def config(self) -> SimpleNamespace:
        """A minimal config: ``vocab_size`` and ``num_layers = 0`` (no hidden-state taps)."""
        return SimpleNamespace(vocab_size=self.vocab_size, num_layers=0)

    @property
    def supports_trees(self) -> bool:
        """Tree plans are honoured: a row's context is the committed prefix, then its ancestors."""
        return True

    @property
    def weight_views(self) -> tuple[str, ...]:
        """``("exact", "q")`` with a ``q_law`` (the "q" view's logits come from it), else ``("exact",)``."""
        return ("exact",) if self.q_law is None else ("exact", "q")

    def __call__(self, tokens, positions=None, mask=None, *, hidden_layers=(), tree_parents=None, view="exact"):
        return self.forward(tokens, positions, mask, hidden_layers=hidden_layers, tree_parents=tree_parents, view=view)

    def run_plan(self, plan: VerifyPlan, *, hidden_layers=(), view="exact") -> TargetOutput:
        """The forward of a :class:`~specdec.contracts.VerifyPlan` (its rows under its mask)."""
        plan.check_prefix(self.length)
        return self.forward(plan.tokens, plan.positions, plan.mask, hidden_layers=hidden_layers, view=view)

    def discard(self) -> None:
        """Drop the rows of the last forward without committing them."""
        self._last, self._last_tokens = [], []
        self._last_view = "exact"

    def forward(self, tokens, positions=None, mask=None, *, hidden_layers=(), tree_parents=None, view="exact"):
        """Logits of ``T`` new rows after the committed tokens; nothing is committed until :meth:`commit`.

        Args:
            tokens: ``[1, T]`` int64 (else ``TypeError``); ``length + T <= max_seq_len`` (else ``ValueError``).
            positions: ignored (the law does not depend on positions).
            mask: ``[T, T]`` bool tree mask, or ``None`` for causal rows. Under a mask, row ``t``'s context is
                the committed tokens, then its ancestors (its nearest allowed earlier rows), then itself.
            hidden_layers, tree_parents: accepted for the protocol's signature and ignored.
            view: ``"exact"`` (the law) or ``"q"`` (``q_law``; its rows cannot be committed).

        Returns:
            :class:`TargetOutput` with float32 ``logits [1, T, V]`` (row ``t``: the law after row ``t``'s
            context) and ``hidden=()``.

        Example:
            >>> target = MarkovTarget(MarkovLaw(7, seed=0), max_seq_len=16)
            >>> _ = target.forward(torch.tensor([[1]])); target.commit(1)
            >>> tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]]).bool()      # rows 1 and 2 are children of row 0
            >>> out = target.forward(torch.tensor([[4, 5, 6]]), mask=tree)
            >>> out.logits.shape, torch.equal(out.logits[0, 2], target.law((4, 6)))
            (torch.Size([1, 3, 7]), True)
        """
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.shape[0] != 1 or tokens.dtype != torch.long:
            raise TypeError(
                f"tokens: expected int64 [1, T], got {getattr(tokens, 'dtype', type(tokens).__name__)} {tuple(getattr(tokens, 'shape', ()))}"
            )
        rows = tokens[0].tolist()
        vocab = self.law.vocab_size
        if not rows:
            raise ValueError("tokens: expected at least one token, got T = 0")
        if min(rows) < 0 or max(rows) >= vocab:
            raise ValueError(f"tokens: expected token ids in [0, {vocab}), got ids in [{min(rows)}, {max(rows)}]")
        check_rows_mask(mask, len(rows), self.device, "mask")
        if self.length + len(rows) > self.max_seq_len:
            raise ValueError(
                f"tokens: {len(rows)} new rows do not fit: length {self.length} + {len(rows)} > max_seq_len {self.max_seq_len}"
            )
        order = self.law.order
        tail = self._tokens[max(0, self.length - order) :]
        if mask is None:
            # causal rows: row t's context is the committed tail then rows[: t + 1]
            seq = [0] * (order - len(tail)) + tail + rows
            keys = [tuple(seq[len(seq) - len(rows) + t - order + 1 : len(seq) - len(rows) + t + 1]) for t in range(len(rows))]
        else:
            allowed = mask.tolist()
            keys = []
            for t in range(len(rows)):
                # the row's own token, then its nearest ancestors, then the committed tail
                path = [rows[t]]
                j = t
                while len(path) < order:
                    parents = [i for i in range(j) if allowed[t][i]]
                    if not parents:
                        break
                    j = parents[-1]
                    path.append(rows[j])
                keys.append(self.law.key(tail + path[::-1]))
        if view not in self.weight_views:
            raise ValueError(f"view: expected one of {self.weight_views}, got {view!r}")
        self._last, self._last_tokens = keys, rows
        self._last_view = view
        table = self._table if view == "exact" else self._q_table
        index = torch.tensor(keys, dtype=torch.long, device=self.device)  # [T, order]
        logits = table[tuple(index.unbind(-1))]  # [T, V]
        return TargetOutput(logits=logits[None].float(), hidden=())

    def commit(self, accepted) -> None:
        """Keep rows of the last forward: an int ``n`` keeps the first ``n``, an int64 tensor ``[n]`` those rows.

        Example:
            >>> target = MarkovTarget(MarkovLaw(7, seed=0), max_seq_len=16)
            >>> _ = target.forward(torch.tensor([[4, 5, 6]])); target.commit(torch.tensor([0, 2])); target.length
            2
        """
        if self._last_view != "exact":
            raise RuntimeError(f"commit: the last forward ran the {self._last_view!r} view; its rows are never committed")
        last = len(self._last_tokens)
        if isinstance(accepted, int) and not isinstance(accepted, bool):
            if not 0 <= accepted <= last:
                raise ValueError(f"accepted: expected 0 <= n <= {last}, got {accepted}")
            self._tokens.extend(self._last_tokens[:accepted])
        else:
            if not isinstance(accepted, torch.Tensor) or accepted.ndim != 1 or accepted.dtype != torch.long:
                desc = (
                    f"{accepted.dtype} {tuple(accepted.shape)}" if isinstance(accepted, torch.Tensor) else type(accepted).__name__
                )
                raise TypeError(f"accepted: expected an int or a 1-D int64 tensor, got {desc}")
            rows = accepted.tolist()
            if any(not 0 <= r < last for r in rows) or any(b <= a for a, b in zip(rows, rows[1:])):
                raise ValueError(
                    f"accepted: expected ascending row indices in [0, {last}) (rows of the last forward), got {rows}"
                )
            self._tokens.extend(self._last_tokens[i] for i in rows)
        self._last, self._last_tokens = [], []


class MarkovDrafter:
    """Draws each draft token from a :class:`MarkovLaw` (after the request's sampling settings) and
    reports that law as ``draft_probs``: a drafter whose law is known exactly.

    Example:
        >>> d = MarkovDrafter(MarkovLaw(7, seed=1))
        >>> from specdec.verify import SamplingConfig
        >>> p = d.propose(torch.tensor([1, 2]), 3, sampling=SamplingConfig(temperature=1.0),
        ...               generator=torch.Generator().manual_seed(0))
        >>> p.tokens.shape, p.draft_probs.shape
        (torch.Size([3]), torch.Size([3, 7]))
    """

    def __init__(self, law: MarkovLaw):
        self.law = law
        self.vocab_size = law.vocab_size

    def reset(self) -> None:
        """Nothing to forget: the drafter keeps no state between calls.

        Example:
            >>> MarkovDrafter(MarkovLaw(7, seed=1)).reset()
        """

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        """``max_tokens`` tokens, each drawn with ``generator`` from the law after the context so far.

        Args:
            context: ``[n]`` int64, the request so far.
            max_tokens: tokens to draw.
            sampling: the request's :class:`~specdec.verify.SamplingConfig`, applied to the law's logits.
            generator: the RNG of every draw.

        Returns:
            :class:`DraftProposal` with ``tokens [max_tokens]`` and ``draft_probs [max_tokens, V]``, the
            law each token was drawn from (one-hot under greedy ``sampling``).

        Example:
            >>> from specdec.verify import SamplingConfig
            >>> p = MarkovDrafter(MarkovLaw(7, seed=1)).propose(torch.tensor([1, 2]), 3, sampling=SamplingConfig(),
            ...                                                 generator=None)
            >>> p.tokens, p.draft_probs.sum(-1)
            (tensor([6, 0, 4]), tensor([1., 1., 1.]))
        """
        ctx = context.tolist()
        tokens, laws = [], []
        for _ in range(max_tokens):
            probs = logits_to_probs(self.law(ctx).to(context.device), sampling)
            token = int(sample(probs, generator))
            tokens.append(token)
            laws.append(probs)
            ctx.append(token)
        draft_probs = torch.stack(laws) if laws else torch.zeros(0, self.vocab_size, device=context.device)
        return DraftProposal(tokens=torch.tensor(tokens, dtype=torch.long, device=context.device), draft_probs=draft_probs)
