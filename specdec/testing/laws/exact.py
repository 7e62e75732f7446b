"""Exact laws by enumeration on tiny vocabularies.

:func:`autoregressive_law` is the law of the next ``m`` tokens under the target;
:func:`speculative_law` composes verification rounds (a :func:`chain_round` or :func:`tree_round`)
into the law of the same ``m`` tokens by enumerating every draft, every accept/reject branch and
every residual token. A lossless round gives the same law up to float64 rounding
(:func:`total_variation` ~ 1e-12); a biased one does not.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch

from specdec.verify import chain as _chain
from specdec.verify.chain import ChainLaws
from specdec.verify.processors import process_logits
from specdec.verify.sampling import SamplingConfig, logits_to_probs
from specdec.verify.tree import Tree, match_walk
from specdec.verify.walks import _check_row_law

__all__ = [
    "Law",
    "autoregressive_law",
    "chain_round",
    "chain_round_law",
    "enumerate_contexts",
    "reference_chain_decide",
    "speculative_law",
    "total_variation",
    "tree_round",
    "tree_round_law",
]

Law = dict[tuple[int, ...], float]
TargetLogits = Callable[[tuple[int, ...]], torch.Tensor]


def _support(probs: torch.Tensor) -> list[tuple[int, float]]:
    return [(i, p) for i, p in enumerate(probs.tolist()) if p > 0]


def _probs(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    # float64 and renormalised, as :func:`specdec.verify.sample` does before drawing
    probs = logits_to_probs(logits, sampling).double()
    return probs / probs.sum(-1, keepdim=True)


def _check_laws(name: str, probs: torch.Tensor, where: str) -> None:
    """Raise ``ValueError`` naming ``name`` unless every row of ``probs [..., V]`` is a law: finite, non-negative,
    summing to 1 (a lost or doubled mass would shift the enumerated law without a word)."""
    sums = probs.sum(-1)
    if not bool(torch.isfinite(probs).all()) or bool((probs < 0).any()) or bool(((sums - 1).abs() > 1e-6).any()):
        raise ValueError(f"{name}: expected a law (finite, >= 0, summing to 1) {where}, got rows summing to {sums.tolist()}")


def _processed_rows(target_logits: TargetLogits, prefixes: Sequence[tuple[int, ...]], sampling: SamplingConfig) -> torch.Tensor:
    """``[R, V]`` logits of each prefix after the prefix-dependent settings (repetition penalty, logits
    processors), as the decode loop and the verifiers apply them before temperature / top-k / top-p."""
    rows = torch.stack([target_logits(prefix) for prefix in prefixes])
    if not sampling.needs_prefix:
        return rows
    return process_logits(rows, [torch.tensor(prefix, dtype=torch.long) for prefix in prefixes], sampling)


def _check_num_tokens(num_tokens: object) -> None:
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
        raise ValueError(f"num_tokens: expected an int >= 0, got {num_tokens!r}")


def autoregressive_law(target_logits: TargetLogits, context: Sequence[int], num_tokens: int, *, sampling: SamplingConfig) -> Law:
    """Law of the next ``num_tokens`` tokens under plain decoding.

    Args:
        target_logits: ``context tuple -> logits [V]``.
        context: the tokens so far.
        num_tokens: length of the continuation.
        sampling: the request's settings (greedy gives a point mass); a repetition penalty and logits
            processors see each step's whole prefix, the context included.

    Example:
        >>> law = autoregressive_law(lambda ctx: torch.tensor([0.0, 0.0]), (0,), 2, sampling=SamplingConfig(temperature=1.0))
        >>> law[(0, 1)]
        0.25
    """
    _check_num_tokens(num_tokens)
    context = _checked_context(context)
    law: Law = {(): 1.0}
    for _ in range(num_tokens):
        nxt: Law = {}
        for seq, mass in law.items():
            probs = _probs(_processed_rows(target_logits, [context + seq], sampling)[0], sampling)
            _check_laws("target_logits", probs, f"after context {context + seq}")
            for token, p in _support(probs):
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
    _check_num_tokens(num_tokens)
    cache: dict[tuple[int, ...], Law] = {}
    done: Law = {} if num_tokens else {(): 1.0}
    frontier: Law = {(): 1.0} if num_tokens else {}
    context = _checked_context(context)
    while frontier:
        nxt: Law = {}
        for seq, mass in frontier.items():
            ctx = context + seq
            if ctx not in cache:
                cache[ctx] = _checked_round_law(round_law(ctx), ctx)
            for emitted, p in cache[ctx].items():
                if not emitted:
                    raise ValueError(f"round_law: a round must emit at least one token, got an empty tuple after {ctx}")
                new = (seq + emitted)[:num_tokens]
                bucket = done if len(new) == num_tokens else nxt
                bucket[new] = bucket.get(new, 0.0) + mass * p
        frontier = nxt
    return done


def _checked_context(context: Sequence[int]) -> tuple[int, ...]:
    out = []
    for i, token in enumerate(context):
        if isinstance(token, bool) or not isinstance(token, int):
            raise TypeError(f"context: expected int token ids, got {token!r} at index {i}")
        out.append(token)
    return tuple(out)


def _checked_round_law(law: Law, context: tuple[int, ...]) -> Law:
    """A round's law must be a law: probabilities in [0, 1] (no NaN) that sum to 1 (within float32 rounding,
    which round laws computed from a verifier's float32 laws carry)."""
    total = 0.0
    for emitted, p in law.items():
        if not 0.0 <= p <= 1.0 + 1e-12:
            raise ValueError(f"round_law: expected probabilities in [0, 1], got {p!r} for {emitted} after {context}")
        total += p
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"round_law: expected probabilities summing to 1, got {total!r} after {context}")
    return law


def total_variation(law_a: Law, law_b: Law) -> float:
    """``0.5 * sum |a - b|`` over the union of outcomes.

    Example:
        >>> total_variation({(0,): 1.0}, {(0,): 0.5, (1,): 0.5})
        0.5
    """
    keys = set(law_a) | set(law_b)
    return 0.5 * sum(abs(law_a.get(k, 0.0) - law_b.get(k, 0.0)) for k in keys)


ChainDecide = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None", SamplingConfig], ChainLaws]


def reference_chain_decide(
    target_logits: torch.Tensor, draft_tokens: torch.Tensor, draft_probs: torch.Tensor | None, sampling: SamplingConfig
) -> ChainLaws:
    """What :class:`specdec.ChainVerifier` samples from: ``chain_laws`` applied to the target law after
    temperature / top-k / top-p (float64 for exact comparisons); ``target_logits [k + 1, V]`` are the verify
    rows' logits after the prefix-dependent settings, which :func:`chain_round` applies row by row.

    Both functions are looked up in :mod:`specdec.verify.chain` at call time, so the enumeration
    judges whatever the chain verifier currently runs (a patched copy included).
    """
    probs = _chain.logits_to_probs(target_logits, sampling).double()
    probs = probs / probs.sum(-1, keepdim=True)
    return _chain.chain_laws(probs, draft_tokens, None if draft_probs is None else draft_probs.double())


def chain_round_law(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    *,
    sampling: SamplingConfig,
    decide: ChainDecide = reference_chain_decide,
) -> Law:
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
    _chain._check_chain_shapes("target_logits", target_logits, draft_tokens, draft_probs)
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
    (a deterministic proposal ``context -> tokens`` of at most ``num_draft`` tokens, reported with
    ``draft_probs=None``). Every verify row's logits go through the prefix-dependent settings with its
    own prefix (the context, then the drafts before it), as the chain verifier processes them.

    Example:
        >>> p = lambda ctx: torch.tensor([1.0, 0.0, -1.0])
        >>> q = lambda ctx: torch.tensor([0.0, 1.0, 0.0])
        >>> s = SamplingConfig(temperature=1.0)
        >>> spec = speculative_law(chain_round(p, num_draft=2, sampling=s, draft_logits=q), (0,), 3)
        >>> total_variation(spec, autoregressive_law(p, (0,), 3, sampling=s)) < 1e-12
        True
    """
    if (draft_logits is None) == (draft_tokens is None):
        raise ValueError(
            "draft_logits/draft_tokens: expected exactly one of them, got " + ("both" if draft_logits is not None else "neither")
        )
    if isinstance(num_draft, bool) or not isinstance(num_draft, int) or num_draft < 0:
        raise ValueError(f"num_draft: expected an int >= 0, got {num_draft!r}")
    dsampling = draft_sampling if draft_sampling is not None else sampling

    def round_law(context: tuple[int, ...]) -> Law:
        if draft_tokens is not None:
            drafts = _checked_context(draft_tokens(context))
            if len(drafts) > num_draft:
                raise ValueError(
                    f"draft_tokens: expected at most num_draft = {num_draft} tokens, got {len(drafts)} after {context}"
                )
            proposals = [(drafts, 1.0, None)]
        else:
            proposals = []

            def grow(drafts: tuple[int, ...], mass: float, rows: list[torch.Tensor]) -> None:
                if len(drafts) == num_draft:
                    proposals.append((drafts, mass, torch.stack(rows) if rows else None))
                    return
                q = _probs(_processed_rows(draft_logits, [context + drafts], dsampling)[0], dsampling)
                for token, p in _support(q):
                    grow(drafts + (token,), mass * p, rows + [q])

            grow((), 1.0, [])
        law: Law = {}
        for drafts, mass, draft_probs in proposals:
            rows = _processed_rows(target_logits, [context + drafts[:i] for i in range(len(drafts) + 1)], sampling)  # [k + 1, V]
            d = torch.tensor(drafts, dtype=torch.long)
            if draft_probs is None and draft_logits is not None:
                draft_probs = torch.zeros(0, rows.shape[-1], dtype=torch.float64)
            for emitted, p in chain_round_law(rows, d, draft_probs, sampling=sampling, decide=decide).items():
                law[emitted] = law.get(emitted, 0.0) + mass * p
        return law

    return round_law


def tree_round_law(tree: Tree, target_probs: torch.Tensor, *, walk: Callable[[Tree, torch.Tensor], object] = match_walk) -> Law:
    """Exact law of the tuple sample-and-match emits on ``tree``.

    Rows draw independently; the target's draw is enumerated at every row a matching path reaches (the
    root, and each child, every duplicate sibling included, whose token the draw at its parent row
    matched) and ``walk(tree, choices)`` -- by default the library's
    :func:`specdec.verify.tree.match_walk` -- runs on each outcome. The rows no matching path reaches
    hold no draw the walk may use: each outcome is walked again with every token at each such row in
    turn (the other such rows held at the first token, then at the last), and a walk whose output changes
    raises ``ValueError`` (its law would be another than the one enumerated here).

    Args:
        tree: the draft tree (``N`` nodes).
        target_probs: ``[N + 1, V]`` target law of each verify row.

    Example:
        >>> tree = Tree(tokens=[0], parents=[-1])
        >>> law = tree_round_law(tree, torch.tensor([[0.5, 0.5], [0.0, 1.0]]))
        >>> sorted(law.items())
        [((0, 1), 0.5), ((1,), 0.5)]
    """
    _check_row_law("target_probs", target_probs, tree)
    _check_laws("target_probs", target_probs.double(), "in every row")
    n = tree.num_nodes
    tokens, parents = tree.tokens.tolist(), tree.parents.tolist()
    children: dict[tuple[int, int], list[int]] = {}
    for node in range(n):
        children.setdefault((parents[node] + 1, tokens[node]), []).append(node + 1)
    probs = target_probs.double()
    vocab = probs.shape[-1]
    law: Law = {}

    def emitted_by(choices: list[int]) -> tuple[int, ...]:
        return tuple(walk(tree, torch.tensor(choices, dtype=torch.long, device=tree.device)).emitted.tolist())

    def visit(frontier: list[int], choices: list[int], drawn: set[int], mass: float) -> None:
        if not frontier:
            emitted = emitted_by(choices)
            unreached = [row for row in range(n + 1) if row not in drawn]
            for filler, row, token in itertools.product((0, vocab - 1), unreached, range(vocab)):
                other = [c if r in drawn else (token if r == row else filler) for r, c in enumerate(choices)]
                if emitted_by(other) != emitted:
                    raise ValueError(
                        "walk: its output depends on the draw of a row no matching path reaches "
                        f"(row {row}; rows drawn {sorted(drawn)} of {n + 1}); sample-and-match reads only the rows it "
                        "matches into"
                    )
            law[emitted] = law.get(emitted, 0.0) + mass
            return
        row, rest = frontier[0], frontier[1:]
        for token, p in _support(probs[row]):
            choices[row] = token
            visit(rest + children.get((row, token), []), choices, drawn | {row}, mass * p)
        choices[row] = 0

    visit([0], [0] * (n + 1), set(), 1.0)
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
    target's draws. Each verify row's logits go through the prefix-dependent settings with its own
    prefix (the context, then its root-to-node path), as the tree verifier processes them.

    Example:
        >>> uniform, s = (lambda ctx: torch.zeros(2)), SamplingConfig(temperature=1.0)
        >>> round_law = tree_round(uniform, lambda ctx: Tree(tokens=[0], parents=[-1]), sampling=s)
        >>> sorted(round_law((0,)).items())   # draft 0 accepted half the time, then a uniform bonus
        [((0, 0), 0.25), ((0, 1), 0.25), ((1,), 0.5)]
    """

    def round_law(context: tuple[int, ...]) -> Law:
        tree = build_tree(context)
        prefixes = [context] + [context + tuple(tree.tokens[tree.path(node)].tolist()) for node in range(tree.num_nodes)]
        return tree_round_law(tree, _probs(_processed_rows(target_logits, prefixes, sampling), sampling), walk=walk)

    return round_law


def enumerate_contexts(vocab_size: int, length: int) -> list[tuple[int, ...]]:
    """Every context of ``length`` tokens (for exhaustive checks on tiny vocabularies)."""
    return list(itertools.product(range(vocab_size), repeat=length))
