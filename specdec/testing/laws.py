"""Distribution tests for decode loops: exact laws by enumeration, two-sample tests, strategies.

Three levels, from exact to statistical:

1. **Exact laws on tiny vocabularies.** :func:`autoregressive_law` is the law of the next ``m``
   tokens under the target; :func:`speculative_law` composes verification rounds (a
   :func:`chain_round` or :func:`tree_round`) into the law of the same ``m`` tokens by enumerating
   every draft, every accept/reject branch and every residual token. A lossless round gives the same
   law up to float64 rounding (:func:`total_variation` ~ 1e-12); a biased one does not.
2. **Two-sample tests on real runs.** :func:`two_sample_chi2` pools the tokens of two arms (e.g.
   speculative vs autoregressive samples), keeps the 200 most frequent ids plus an "other" bin
   (200 degrees of freedom, the binning of arXiv 2607.17283) and calibrates the p-value by permuting
   arm labels *per sequence* (tokens inside a sequence are not independent, so the nominal chi-square
   p-value is not trusted alone). :func:`argmax_rate_test` is the targeted 1-dof test for the most
   common bug class: acceptance biased towards the target's argmax.
3. **Generators of awkward cases** for hypothesis: random trees, distributions with zeros,
   one-hot laws and disjoint supports (:func:`probability_vectors`, :func:`distribution_pairs`,
   :func:`trees`).

:class:`MarkovTarget` is a target whose logits are a table lookup on the last ``order`` tokens (of
the committed prefix or of the row's tree ancestors), so the law of every run is known exactly and a
thousand speculative runs take seconds on a CPU.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Sequence

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.target import TargetOutput
from specdec.drafters.base import DraftProposal
from specdec.verify import chain as _chain
from specdec.verify.chain import ChainLaws
from specdec.verify.sampling import SamplingConfig, logits_to_probs, sample
from specdec.verify.tree import Tree, match_walk

__all__ = [
    "ArgmaxRateResult",
    "Law",
    "MarkovDrafter",
    "MarkovLaw",
    "MarkovTarget",
    "TwoSampleResult",
    "argmax_rate_test",
    "autoregressive_law",
    "chain_round",
    "chain_round_law",
    "distribution_pairs",
    "enumerate_contexts",
    "probability_vectors",
    "reference_chain_decide",
    "speculative_law",
    "total_variation",
    "tree_round",
    "tree_round_law",
    "trees",
    "two_sample_chi2",
]

Law = dict[tuple[int, ...], float]
TargetLogits = Callable[[tuple[int, ...]], torch.Tensor]


# ------------------------------------------------------------------------------------------------
# Markov targets: exact laws and cheap runs
# ------------------------------------------------------------------------------------------------
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
        >>> target = MarkovTarget(MarkovLaw(7, seed=0), max_seq_len=64)
        >>> out = sd.generate(target, torch.tensor([[1, 2]]), 5, temperature=1.0, seed=0)
        >>> out.tokens.shape
        torch.Size([1, 5])
    """

    def __init__(self, law: MarkovLaw, *, max_seq_len: int = 4096, device: torch.device | str = "cpu"):
        self.law = law
        self.max_seq_len = max_seq_len
        self.device = torch.device(device)
        self.dtype = torch.float32
        self._table = law.table.to(self.device)
        self._tokens: list[int] = []
        self._last: list[tuple[int, ...]] = []  # context keys of the last forward's rows
        self._last_tokens: list[int] = []

    @property
    def vocab_size(self) -> int:
        return self.law.vocab_size

    @property
    def length(self) -> int:
        return len(self._tokens)

    def reset(self) -> None:
        self._tokens = []
        self._last, self._last_tokens = [], []

    def truncate(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"length: expected 0 <= length <= {self.length}, got {length}")
        del self._tokens[length:]

    def room(self) -> int:
        return self.max_seq_len - self.length

    @property
    def config(self) -> SimpleNamespace:
        return SimpleNamespace(vocab_size=self.vocab_size, num_layers=0)

    @property
    def supports_trees(self) -> bool:
        return True

    def __call__(self, tokens, positions=None, mask=None, *, hidden_layers=(), tree_parents=None):
        return self.forward(tokens, positions, mask, hidden_layers=hidden_layers, tree_parents=tree_parents)

    def run_plan(self, plan: VerifyPlan, *, hidden_layers=()) -> TargetOutput:
        return self.forward(plan.tokens, plan.positions, plan.mask, hidden_layers=hidden_layers)

    def discard(self) -> None:
        self._last, self._last_tokens = [], []

    def forward(self, tokens, positions=None, mask=None, *, hidden_layers=(), tree_parents=None):
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.shape[0] != 1 or tokens.dtype != torch.long:
            raise TypeError(f"tokens: expected int64 [1, T], got {getattr(tokens, 'dtype', type(tokens).__name__)} {tuple(getattr(tokens, 'shape', ()))}")
        rows = tokens[0].tolist()
        if self.length + len(rows) > self.max_seq_len:
            raise ValueError(f"tokens: {len(rows)} new rows do not fit: length {self.length} + {len(rows)} > max_seq_len {self.max_seq_len}")
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
        self._last, self._last_tokens = keys, rows
        index = torch.tensor(keys, dtype=torch.long, device=self.device)  # [T, order]
        logits = self._table[tuple(index.unbind(-1))]  # [T, V]
        return TargetOutput(logits=logits[None].float(), hidden=())

    def commit(self, accepted) -> None:
        if isinstance(accepted, int):
            if not 0 <= accepted <= len(self._last_tokens):
                raise ValueError(f"accepted: expected 0 <= n <= {len(self._last_tokens)}, got {accepted}")
            self._tokens.extend(self._last_tokens[:accepted])
        else:
            self._tokens.extend(self._last_tokens[i] for i in accepted.tolist())
        self._last, self._last_tokens = [], []


class MarkovDrafter:
    """Draws each draft token from a :class:`MarkovLaw` (after the request's sampling settings) and
    reports that law as ``draft_probs``: a drafter whose law is known exactly.

    Example:
        >>> d = MarkovDrafter(MarkovLaw(7, seed=1))
        >>> p = d.propose(torch.tensor([1, 2]), 3, sampling=SamplingConfig(temperature=1.0),
        ...               generator=torch.Generator().manual_seed(0))
        >>> p.tokens.shape, p.draft_probs.shape
        (torch.Size([3]), torch.Size([3, 7]))
    """

    def __init__(self, law: MarkovLaw):
        self.law = law
        self.vocab_size = law.vocab_size

    def reset(self) -> None:
        pass

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
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


# ------------------------------------------------------------------------------------------------
# Exact laws by enumeration
# ------------------------------------------------------------------------------------------------
def _support(probs: torch.Tensor) -> list[tuple[int, float]]:
    return [(i, p) for i, p in enumerate(probs.tolist()) if p > 0]


def _probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    # float64 and renormalised, as :func:`specdec.verify.sample` does before drawing
    probs = logits_to_probs(logits, sampling).double()
    return probs / probs.sum(-1, keepdim=True)


def autoregressive_law(target_logits: TargetLogits, context: Sequence[int], num_tokens: int, *, sampling: SamplingConfig) -> Law:
    """Law of the next ``num_tokens`` tokens under plain decoding.

    Args:
        target_logits: ``context tuple -> logits [V]``.
        context: the tokens so far.
        num_tokens: length of the continuation.
        sampling: temperature / top-k / top-p (greedy gives a point mass).

    Example:
        >>> law = autoregressive_law(lambda ctx: torch.tensor([0.0, 0.0]), (0,), 2, sampling=SamplingConfig(temperature=1.0))
        >>> law[(0, 1)]
        0.25
    """
    law: Law = {(): 1.0}
    for _ in range(num_tokens):
        nxt: Law = {}
        for seq, mass in law.items():
            for token, p in _support(_probs(target_logits(tuple(context) + seq), sampling)):
                nxt[seq + (token,)] = nxt.get(seq + (token,), 0.0) + mass * p
        law = nxt
    return law


def speculative_law(round_law: Callable[[tuple[int, ...]], Law], context: Sequence[int], num_tokens: int) -> Law:
    """Law of the next ``num_tokens`` tokens when rounds of ``round_law`` are repeated.

    ``round_law(context)`` is the exact law of the tuple a round emits after ``context`` (accepted
    drafts then the bonus token). Rounds are composed until ``num_tokens`` tokens are out; a round
    that overshoots is cut, which keeps the law of the prefix.

    Example:
        >>> ar = lambda ctx: {(0,): 0.5, (1,): 0.5}                 # a "round" that emits one token
        >>> speculative_law(ar, (0,), 2)[(1, 0)]
        0.25
    """
    cache: dict[tuple[int, ...], Law] = {}
    done: Law = {}
    frontier: Law = {(): 1.0}
    context = tuple(int(t) for t in context)
    while frontier:
        nxt: Law = {}
        for seq, mass in frontier.items():
            ctx = context + seq
            if ctx not in cache:
                cache[ctx] = round_law(ctx)
            for emitted, p in cache[ctx].items():
                if not emitted:
                    raise ValueError(f"round_law: a round must emit at least one token, got an empty tuple after {ctx}")
                new = (seq + emitted)[:num_tokens]
                bucket = done if len(new) == num_tokens else nxt
                bucket[new] = bucket.get(new, 0.0) + mass * p
        frontier = nxt
    return done


def total_variation(law_a: Law, law_b: Law) -> float:
    """``0.5 * sum |a - b|`` over the union of outcomes.

    Example:
        >>> total_variation({(0,): 1.0}, {(0,): 0.5, (1,): 0.5})
        0.5
    """
    keys = set(law_a) | set(law_b)
    return 0.5 * sum(abs(law_a.get(k, 0.0) - law_b.get(k, 0.0)) for k in keys)


ChainDecide = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None", SamplingConfig], ChainLaws]


def reference_chain_decide(target_logits: torch.Tensor, draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, sampling: SamplingConfig) -> ChainLaws:
    """What :class:`specdec.ChainVerifier` samples from: ``chain_laws`` applied to the target law after
    the request's sampling settings (float64 for exact comparisons).

    Both functions are looked up in :mod:`specdec.verify.chain` at call time, so the enumeration
    judges whatever the chain verifier currently runs (a patched copy included).
    """
    probs = _chain.logits_to_probs(target_logits, sampling).double()
    probs = probs / probs.sum(-1, keepdim=True)
    return _chain.chain_laws(probs, draft_tokens, None if draft_probs is None else draft_probs.double())


def chain_round_law(target_logits: torch.Tensor, draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, *, sampling: SamplingConfig, decide: ChainDecide = reference_chain_decide) -> Law:
    """Exact law of the tuple one chain verification emits for fixed drafts.

    Args:
        target_logits: ``[k + 1, V]`` logits of the verify rows ``[root, d_1, ..., d_k]``.
        draft_tokens: ``[k]``.
        draft_probs: ``[k, V]`` draft laws or ``None`` (deterministic proposal).
        decide: the acceptance/residual/bonus laws (default: the library's); pass a modified copy
            to see what a bug does to the output law.

    Example:
        >>> law = chain_round_law(torch.zeros(2, 2), torch.tensor([0]), None, sampling=SamplingConfig(temperature=1.0))
        >>> sorted(law.items())
        [((0, 0), 0.25), ((0, 1), 0.25), ((1,), 0.5)]
    """
    laws = decide(target_logits, draft_tokens, draft_probs, sampling)
    k = draft_tokens.numel()
    drafts = [int(t) for t in draft_tokens.tolist()]
    accept = [float(a) for a in laws.accept_probs.double().tolist()]
    law: Law = {}
    reach = 1.0  # probability that the first n drafts were accepted
    for n in range(k + 1):
        if n == k:
            branch, stop = laws.bonus_probs, reach
        else:
            branch, stop = laws.residual_probs[n], reach * (1.0 - accept[n])
        if stop > 0:
            for token, p in _support(branch.double()):
                key = tuple(drafts[:n]) + (token,)
                law[key] = law.get(key, 0.0) + stop * p
        if n < k:
            reach *= accept[n]
            if reach == 0:
                break
    return law


def chain_round(
    target_logits: TargetLogits,
    *,
    num_draft: int,
    sampling: SamplingConfig,
    draft_logits: TargetLogits | None = None,
    draft_sampling: SamplingConfig | None = None,
    draft_tokens: Callable[[tuple[int, ...]], Sequence[int]] | None = None,
    decide: ChainDecide = reference_chain_decide,
) -> Callable[[tuple[int, ...]], Law]:
    """A round law for :func:`speculative_law`: draft ``num_draft`` tokens, verify them as a chain.

    Exactly one of ``draft_logits`` (drafts are drawn one by one from that law after
    ``draft_sampling``, default ``sampling``, and reported as ``draft_probs``) and ``draft_tokens``
    (a deterministic proposal ``context -> tokens``, reported with ``draft_probs=None``).

    Example:
        >>> p = lambda ctx: torch.tensor([1.0, 0.0, -1.0])
        >>> q = lambda ctx: torch.tensor([0.0, 1.0, 0.0])
        >>> s = SamplingConfig(temperature=1.0)
        >>> spec = speculative_law(chain_round(p, num_draft=2, sampling=s, draft_logits=q), (0,), 3)
        >>> total_variation(spec, autoregressive_law(p, (0,), 3, sampling=s)) < 1e-12
        True
    """
    if (draft_logits is None) == (draft_tokens is None):
        raise ValueError("draft_logits/draft_tokens: expected exactly one of them, got " + ("both" if draft_logits is not None else "neither"))
    if isinstance(num_draft, bool) or not isinstance(num_draft, int) or num_draft < 0:
        raise ValueError(f"num_draft: expected an int >= 0, got {num_draft!r}")
    dsampling = draft_sampling if draft_sampling is not None else sampling

    def round_law(context: tuple[int, ...]) -> Law:
        if draft_tokens is not None:
            proposals = [(tuple(int(t) for t in draft_tokens(context))[:num_draft], 1.0, None)]
        else:
            proposals = []

            def grow(drafts: tuple[int, ...], mass: float, rows: list[torch.Tensor]) -> None:
                if len(drafts) == num_draft:
                    proposals.append((drafts, mass, torch.stack(rows) if rows else None))
                    return
                q = _probs(draft_logits(context + drafts), dsampling)
                for token, p in _support(q):
                    grow(drafts + (token,), mass * p, rows + [q])

            grow((), 1.0, [])
        law: Law = {}
        for drafts, mass, draft_probs in proposals:
            rows = torch.stack([target_logits(context + drafts[:i]) for i in range(len(drafts) + 1)])  # [k + 1, V]
            d = torch.tensor(drafts, dtype=torch.long)
            if draft_probs is None and draft_logits is not None:
                draft_probs = torch.zeros(0, rows.shape[-1], dtype=torch.float64)
            for emitted, p in chain_round_law(rows, d, draft_probs, sampling=sampling, decide=decide).items():
                law[emitted] = law.get(emitted, 0.0) + mass * p
        return law

    return round_law


def tree_round_law(tree: Tree, target_probs: torch.Tensor, *, walk: Callable[[Tree, torch.Tensor], object] = match_walk) -> Law:
    """Exact law of the tuple sample-and-match emits on ``tree``.

    Enumerates the target's draw at every row the walk visits (rows draw independently) and runs
    ``walk(tree, choices)`` -- by default the library's :func:`specdec.verify.tree.match_walk` -- on
    each outcome. Rows the walk does not visit get choice 0.

    Args:
        tree: the draft tree (``N`` nodes).
        target_probs: ``[N + 1, V]`` target law of each verify row.

    Example:
        >>> tree = Tree(tokens=[0], parents=[-1])
        >>> law = tree_round_law(tree, torch.tensor([[0.5, 0.5], [0.0, 1.0]]))
        >>> sorted(law.items())
        [((0, 1), 0.5), ((1,), 0.5)]
    """
    n = tree.num_nodes
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    first_child: dict[tuple[int, int], int] = {}
    for node in range(n):
        first_child.setdefault((parents[node] + 1, tokens[node]), node + 1)
    probs = target_probs.double()
    law: Law = {}

    def visit(row: int, choices: list[int], mass: float) -> None:
        for token, p in _support(probs[row]):
            choices[row] = token
            child = first_child.get((row, token))
            if child is not None:
                visit(child, choices, mass * p)
            else:
                emitted = tuple(walk(tree, torch.tensor(choices, dtype=torch.long, device=tree.device)).emitted.tolist())
                law[emitted] = law.get(emitted, 0.0) + mass * p
            choices[row] = 0

    visit(0, [0] * (n + 1), 1.0)
    return law


def tree_round(
    target_logits: TargetLogits,
    build_tree: Callable[[tuple[int, ...]], Tree],
    *,
    sampling: SamplingConfig,
    walk: Callable[[Tree, torch.Tensor], object] = match_walk,
) -> Callable[[tuple[int, ...]], Law]:
    """A round law for :func:`speculative_law`: ``build_tree(context)`` then sample-and-match.

    The tree may depend on the context (e.g. the top-k children of a draft law) but not on the
    target's draws.
    """

    def round_law(context: tuple[int, ...]) -> Law:
        tree = build_tree(context)
        rows = [target_logits(context)]
        for node in range(tree.num_nodes):
            rows.append(target_logits(context + tuple(tree.tokens[tree.path(node)].tolist())))
        return tree_round_law(tree, _probs(torch.stack(rows), sampling), walk=walk)

    return round_law


# ------------------------------------------------------------------------------------------------
# Two-sample tests
# ------------------------------------------------------------------------------------------------
def _as_sequences(name: str, value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        if value.ndim == 1:
            value = [value]
        elif value.ndim == 2:
            value = list(value)
        else:
            raise ValueError(f"{name}: expected [S, n] or a list of 1-D tensors, got shape {tuple(value.shape)}")
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{name}: expected a non-empty list of 1-D integer tensors, got {type(value).__name__} of length {len(value) if hasattr(value, '__len__') else '?'}")
    out = []
    for i, seq in enumerate(value):
        seq = torch.as_tensor(seq)
        if seq.ndim != 1 or seq.dtype == torch.bool or seq.is_floating_point():
            raise TypeError(f"{name}[{i}]: expected a 1-D integer tensor, got {seq.dtype} {tuple(seq.shape)}")
        if seq.numel() and int(seq.min()) < 0:
            raise ValueError(f"{name}[{i}]: token ids must be >= 0, got {int(seq.min())}")
        out.append(seq.long().cpu())
    if sum(s.numel() for s in out) == 0:
        raise ValueError(f"{name}: expected at least one token, got only empty sequences")
    return out


@dataclass(frozen=True)
class TwoSampleResult:
    """Outcome of :func:`two_sample_chi2`.

    Attributes:
        statistic: Pearson chi-square of the ``2 x K`` table.
        dof: ``K - 1``.
        p_value: upper-tail p of ``chi2(dof)`` (nominal: assumes independent tokens).
        p_lower: lower-tail p (a fit that is too good).
        p_permutation: p from permuting arm labels per sequence, or ``None`` without permutations.
        cramers_v: ``sqrt(statistic / N)``.
        tv_distance: total variation between the two arms' binned laws.
        num_a, num_b: tokens per arm.
        categories: the kept token ids (the "other" bin, if any, is last and not listed).
    """

    statistic: float
    dof: int
    p_value: float
    p_lower: float
    p_permutation: float | None
    cramers_v: float
    tv_distance: float
    num_a: int
    num_b: int
    categories: tuple[int, ...]


def _chi2(table: torch.Tensor) -> torch.Tensor:
    """Pearson statistic of ``[..., 2, K]`` count tables (float64)."""
    rows = table.sum(-1, keepdim=True)  # [..., 2, 1]
    cols = table.sum(-2, keepdim=True)  # [..., 1, K]
    expected = rows * cols / table.sum((-2, -1), keepdim=True)
    return ((table - expected) ** 2 / expected.clamp_min(1e-300)).sum((-2, -1))


def two_sample_chi2(
    tokens_a,
    tokens_b,
    *,
    max_categories: int = 201,
    min_expected: float = 5.0,
    permutations: int = 0,
    generator: torch.Generator | None = None,
    context: int = 0,
) -> TwoSampleResult:
    """Two-sample chi-square test of the token laws of two arms.

    Categories: the token ids by pooled frequency, kept while both arms' expected count is at least
    ``min_expected``, at most ``max_categories - 1`` of them, plus one "other" bin for the rest
    (``max_categories=201`` gives the paper's 200 degrees of freedom when enough ids are frequent).
    An "other" bin below ``min_expected`` is merged into the rarest kept id.

    Args:
        tokens_a, tokens_b: the arms' sequences (``[S, n]`` or lists of 1-D tensors).
        permutations: sequence-level label permutations for a calibrated p-value (0 = skip).
        generator: for the permutations.
        context: categories are ``(previous context tokens, token)`` tuples instead of bare ids
            (``0``: the paper's unigram table). A bias that depends on the prefix, such as a
            dropped top-k, shows far sooner in the conditional table; the first ``context`` tokens
            of each sequence are only used as context.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> a = torch.randint(0, 20, (200, 10), generator=g); b = torch.randint(0, 20, (200, 10), generator=g)
        >>> r = two_sample_chi2(a, b, permutations=100, generator=g)
        >>> r.dof, r.p_value > 0.01
        (19, True)
    """
    if isinstance(max_categories, bool) or not isinstance(max_categories, int) or max_categories < 2:
        raise ValueError(f"max_categories: expected an int >= 2, got {max_categories!r}")
    if not min_expected >= 0:
        raise ValueError(f"min_expected: expected a float >= 0, got {min_expected!r}")
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 0:
        raise ValueError(f"permutations: expected an int >= 0, got {permutations!r}")
    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise ValueError(f"context: expected an int >= 0, got {context!r}")
    seq_a, seq_b = _as_sequences("tokens_a", tokens_a), _as_sequences("tokens_b", tokens_b)
    if context:
        base = int(max(max(int(s.max()) for s in seq_a if s.numel()), max(int(s.max()) for s in seq_b if s.numel()))) + 1
        if base ** (context + 1) > 2**62:
            raise ValueError(f"context: {context} tokens of a {base}-id vocabulary overflow int64 category ids")

        def with_context(seq: torch.Tensor) -> torch.Tensor:
            if seq.numel() <= context:
                return seq[:0]
            windows = seq.unfold(0, context + 1, 1)  # [n - context, context + 1]
            weights = base ** torch.arange(context, -1, -1)
            return (windows * weights).sum(-1)

        seq_a, seq_b = [with_context(s) for s in seq_a], [with_context(s) for s in seq_b]
        if sum(s.numel() for s in seq_a) == 0 or sum(s.numel() for s in seq_b) == 0:
            raise ValueError(f"context: every sequence is at most {context} tokens long; nothing left to compare")
    flat_a, flat_b = torch.cat(seq_a), torch.cat(seq_b)
    n_a, n_b = flat_a.numel(), flat_b.numel()
    vocab = int(max(flat_a.max(), flat_b.max())) + 1
    pooled = torch.bincount(flat_a, minlength=vocab) + torch.bincount(flat_b, minlength=vocab)  # [V]
    order = torch.argsort(pooled, descending=True, stable=True)
    total = n_a + n_b
    smaller = min(n_a, n_b)
    kept: list[int] = []
    for token in order.tolist():
        if len(kept) == max_categories - 1 or pooled[token] == 0 or smaller * int(pooled[token]) / total < min_expected:
            break
        kept.append(token)
    if not kept:
        kept = [int(order[0])]
    # category of every token id: its rank among kept ids, or K_kept for "other"
    category = torch.full((vocab,), len(kept), dtype=torch.long)
    category[torch.tensor(kept)] = torch.arange(len(kept))
    other = int(pooled.sum()) - int(pooled[torch.tensor(kept)].sum())
    num_bins = len(kept) + 1
    if other == 0 or smaller * other / total < min_expected:
        category[category == len(kept)] = len(kept) - 1  # merge "other" into the rarest kept id
        num_bins = len(kept)
    if num_bins < 2:
        raise ValueError("tokens_a/tokens_b: both arms use a single token category; nothing to compare")
    # per-sequence category counts, so labels can be permuted by sequence
    counts = torch.stack([torch.bincount(category[s], minlength=num_bins) for s in seq_a + seq_b]).double()  # [S, K]
    table = torch.stack([counts[: len(seq_a)].sum(0), counts[len(seq_a) :].sum(0)])  # [2, K]
    stat = float(_chi2(table))
    dof = num_bins - 1
    from scipy.stats import chi2 as chi2_dist

    p_perm = None
    if permutations:
        num_seq = counts.shape[0]
        all_counts = counts.sum(0)
        exceed = 0
        for _ in range(permutations):
            perm = torch.randperm(num_seq, generator=generator)
            arm_a = counts[perm[: len(seq_a)]].sum(0)
            exceed += int(float(_chi2(torch.stack([arm_a, all_counts - arm_a]))) >= stat - 1e-9)
        p_perm = (1 + exceed) / (1 + permutations)
    freq = table / table.sum(-1, keepdim=True)
    return TwoSampleResult(
        statistic=stat,
        dof=dof,
        p_value=float(chi2_dist.sf(stat, dof)),
        p_lower=float(chi2_dist.cdf(stat, dof)),
        p_permutation=p_perm,
        cramers_v=math.sqrt(stat / total),
        tv_distance=0.5 * float((freq[0] - freq[1]).abs().sum()),
        num_a=n_a,
        num_b=n_b,
        categories=tuple(kept),
    )


@dataclass(frozen=True)
class ArgmaxRateResult:
    """Outcome of :func:`argmax_rate_test`: rate at which each arm emitted the target's argmax.

    Attributes:
        rate_a, rate_b: the two rates.
        z: two-proportion z statistic (``a - b``).
        p_value: two-sided normal p (nominal).
        p_permutation: two-sided p from sequence-level label permutations, or ``None``.
    """

    rate_a: float
    rate_b: float
    z: float
    p_value: float
    p_permutation: float | None


def argmax_rate_test(hits_a, hits_b, *, permutations: int = 0, generator: torch.Generator | None = None) -> ArgmaxRateResult:
    """Targeted 1-dof test: does one arm emit the target's argmax more often than the other?

    ``hits`` are per-sequence boolean tensors (``True`` where the emitted token was the target's
    argmax given the prefix, e.g. ``~teacher_force(target, prompt, output).mismatch``). Acceptance
    rules biased towards the argmax (greedy matching at ``temperature > 0``, wrong draft law in the
    ratio) move this rate long before they move the 200-bin table.

    Example:
        >>> a = [torch.tensor([True, True, False])] * 50; b = [torch.tensor([True, False, False])] * 50
        >>> argmax_rate_test(a, b).p_value < 1e-3
        True
    """
    seq_a = [torch.as_tensor(h).bool().view(-1).cpu() for h in hits_a]
    seq_b = [torch.as_tensor(h).bool().view(-1).cpu() for h in hits_b]
    if not seq_a or not seq_b:
        raise ValueError("hits_a/hits_b: expected at least one sequence per arm")
    sums = torch.tensor([float(h.sum()) for h in seq_a + seq_b], dtype=torch.float64)
    sizes = torch.tensor([float(h.numel()) for h in seq_a + seq_b], dtype=torch.float64)
    n_a = len(seq_a)

    def z_of(idx_a: torch.Tensor, idx_b: torch.Tensor) -> tuple[float, float, float]:
        k1, m1 = float(sums[idx_a].sum()), float(sizes[idx_a].sum())
        k2, m2 = float(sums[idx_b].sum()), float(sizes[idx_b].sum())
        if m1 == 0 or m2 == 0:
            raise ValueError("hits_a/hits_b: each arm needs at least one token")
        pooled = (k1 + k2) / (m1 + m2)
        se = math.sqrt(max(pooled * (1 - pooled) * (1 / m1 + 1 / m2), 1e-300))
        return k1 / m1, k2 / m2, (k1 / m1 - k2 / m2) / se

    ids = torch.arange(len(seq_a) + len(seq_b))
    rate_a, rate_b, z = z_of(ids[:n_a], ids[n_a:])
    p_perm = None
    if permutations:
        exceed = 0
        for _ in range(permutations):
            perm = torch.randperm(ids.numel(), generator=generator)
            exceed += int(abs(z_of(perm[:n_a], perm[n_a:])[2]) >= abs(z) - 1e-12)
        p_perm = (1 + exceed) / (1 + permutations)
    return ArgmaxRateResult(rate_a=rate_a, rate_b=rate_b, z=z, p_value=math.erfc(abs(z) / math.sqrt(2)), p_permutation=p_perm)


# ------------------------------------------------------------------------------------------------
# Hypothesis strategies (hypothesis is a test dependency, imported on use)
# ------------------------------------------------------------------------------------------------
def probability_vectors(vocab_size: int, *, kinds: Sequence[str] = ("dense", "sparse", "one_hot", "uniform")):
    """Strategy for laws ``[V]`` float64 summing to 1: dense, with zeros, one-hot or uniform.

    Example:
        >>> from hypothesis import given
        >>> @given(probability_vectors(4))
        ... def test(p): assert abs(float(p.sum()) - 1) < 1e-12
    """
    from hypothesis import strategies as st

    allowed = {"dense", "sparse", "one_hot", "uniform"}
    if not set(kinds) <= allowed or not kinds:
        raise ValueError(f"kinds: expected a non-empty subset of {sorted(allowed)}, got {kinds!r}")

    @st.composite
    def build(draw):
        kind = draw(st.sampled_from(list(kinds)))
        if kind == "one_hot":
            return torch.nn.functional.one_hot(torch.tensor(draw(st.integers(0, vocab_size - 1))), vocab_size).double()
        if kind == "uniform":
            return torch.full((vocab_size,), 1.0 / vocab_size, dtype=torch.float64)
        weights = draw(st.lists(st.floats(0.01, 10.0), min_size=vocab_size, max_size=vocab_size))
        w = torch.tensor(weights, dtype=torch.float64)
        if kind == "sparse":
            keep = draw(st.lists(st.booleans(), min_size=vocab_size, max_size=vocab_size))
            mask = torch.tensor(keep)
            if not mask.any():
                mask[draw(st.integers(0, vocab_size - 1))] = True
            w = w * mask
        return w / w.sum()

    return build()


def distribution_pairs(vocab_size: int, *, disjoint: bool | None = None):
    """Strategy for ``(target_probs, draft_probs)`` pairs of laws ``[V]``, including pairs with
    disjoint supports (``disjoint=None`` mixes both kinds; ``True`` only disjoint ones).

    Example:
        >>> from hypothesis import given
        >>> @given(distribution_pairs(4, disjoint=True))
        ... def test(pq): assert float((pq[0] * pq[1]).sum()) == 0
    """
    from hypothesis import strategies as st

    if vocab_size < 2:
        raise ValueError(f"vocab_size: expected >= 2 for disjoint supports, got {vocab_size}")

    @st.composite
    def build(draw):
        want_disjoint = draw(st.booleans()) if disjoint is None else disjoint
        if not want_disjoint:
            return draw(probability_vectors(vocab_size)), draw(probability_vectors(vocab_size))
        split = draw(st.integers(1, vocab_size - 1))
        perm = torch.tensor(draw(st.permutations(list(range(vocab_size)))))
        side = torch.zeros(vocab_size, dtype=torch.bool)
        side[perm[:split]] = True
        out = []
        for support in (side, ~side):
            w = torch.tensor(draw(st.lists(st.floats(0.01, 10.0), min_size=vocab_size, max_size=vocab_size)), dtype=torch.float64)
            w = w * support
            out.append(w / w.sum())
        return tuple(out)

    return build()


def trees(max_nodes: int, vocab_size: int, *, min_nodes: int = 0):
    """Strategy for :class:`specdec.verify.tree.Tree`: random parents (``parents[i] < i``), random
    tokens, duplicate sibling tokens allowed, chains and stars included.

    Example:
        >>> from hypothesis import given
        >>> @given(trees(6, 3))
        ... def test(tree): assert all(p < i for i, p in enumerate(tree.parents.tolist()))
    """
    from hypothesis import strategies as st

    @st.composite
    def build(draw):
        n = draw(st.integers(min_nodes, max_nodes))
        shape = draw(st.sampled_from(["random", "chain", "star"]))
        if shape == "chain":
            parents = list(range(-1, n - 1))
        elif shape == "star":
            parents = [-1] * n
        else:
            parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
        tokens = [draw(st.integers(0, vocab_size - 1)) for _ in range(n)]
        return Tree(tokens=torch.tensor(tokens, dtype=torch.long), parents=torch.tensor(parents, dtype=torch.long))

    return build()


def enumerate_contexts(vocab_size: int, length: int) -> list[tuple[int, ...]]:
    """Every context of ``length`` tokens (for exhaustive checks on tiny vocabularies)."""
    return list(itertools.product(range(vocab_size), repeat=length))
