"""Chi-square tests of sampled tokens: one sample against an exact law, two samples against each
other, and the targeted argmax-rate test.

* :func:`one_sample_chi2` judges a sampler against the exact law of its outcomes (from
  :func:`~specdec.testing.laws.exact.autoregressive_law`, or any law as a dict or a probability
  vector). Cells whose expected count is below ``min_expected`` are pooled into one bin, chosen by
  the law's expected counts, never by what was observed.
* :func:`two_sample_chi2` pools the tokens of two arms (e.g. speculative vs autoregressive samples),
  keeps the 200 most frequent cells plus an "other" bin (200 degrees of freedom, the binning of
  arXiv 2607.17283) and calibrates the p-value by permuting arm labels *per sequence* (tokens inside a
  sequence are not independent, so the nominal chi-square p-value is not trusted alone). Only cells
  that occur are counted, so ``context=1`` on a 49k vocabulary needs memory for the observed
  ``(previous token, token)`` pairs, not for ``V**2`` cells.
* :func:`argmax_rate_test` is the 1-dof test for the most common bug class: acceptance biased towards
  the target's argmax.
"""

from __future__ import annotations

import math
import operator
from collections import Counter

import torch

from specdec.testing.laws.exact import Law
from specdec.testing.laws.reporting import ArgmaxRateResult, OneSampleResult, TwoSampleResult

__all__ = ["argmax_rate_test", "one_sample_chi2", "two_sample_chi2"]


def _as_sequences(name: str, value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        if value.ndim == 1:
            value = [value]
        elif value.ndim == 2:
            value = list(value)
        else:
            raise ValueError(f"{name}: expected [S, n] or a list of 1-D tensors, got shape {tuple(value.shape)}")
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(
            f"{name}: expected a non-empty list of 1-D integer tensors, got {type(value).__name__} of length {len(value) if hasattr(value, '__len__') else '?'}"
        )
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


def _chi2(table: torch.Tensor) -> torch.Tensor:
    """Pearson statistic of ``[..., 2, K]`` count tables (float64)."""
    rows = table.sum(-1, keepdim=True)  # [..., 2, 1]
    cols = table.sum(-2, keepdim=True)  # [..., 1, K]
    expected = rows * cols / table.sum((-2, -1), keepdim=True)
    return ((table - expected) ** 2 / expected.clamp_min(1e-300)).sum((-2, -1))


def _windows(seq: torch.Tensor, context: int) -> torch.Tensor:
    """``[n - context, context + 1]``: each token with the ``context`` tokens before it."""
    if seq.numel() <= context:
        return seq.new_zeros((0, context + 1))
    return seq.unfold(0, context + 1, 1)


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

    Cells: token ids (``context=0``) or ``(previous context tokens, token)`` tuples. Only cells that
    occur in either arm are counted (memory and time grow with the number of tokens, not with
    ``V ** (context + 1)``). Categories: the cells by pooled frequency (ties: smaller cell first), kept
    while both arms' expected count is at least ``min_expected``, at most ``max_categories - 1`` of
    them, plus one "other" bin for the rest (``max_categories=201`` gives the paper's 200 degrees of
    freedom when enough cells are frequent). An "other" bin below ``min_expected`` is merged into the
    rarest kept cell.

    Args:
        tokens_a, tokens_b: the arms' sequences (``[S, n]`` or lists of 1-D tensors).
        permutations: sequence-level label permutations for a calibrated p-value (0 = skip).
        generator: for the permutations.
        context: ``0``: the paper's unigram table. A bias that depends on the prefix, such as a
            dropped top-k, shows far sooner in the conditional table; the first ``context`` tokens
            of each sequence are only used as context.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> a = torch.randint(0, 20, (200, 10), generator=g); b = torch.randint(0, 20, (200, 10), generator=g)
        >>> r = two_sample_chi2(a, b, permutations=100, generator=g)
        >>> r.dof, r.p_value > 0.01
        (19, True)
        >>> two_sample_chi2(a, b, context=1, min_expected=0.5).categories[0]     # (previous token, token)
        (7, 3)
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
    windows = [_windows(s, context) for s in seq_a + seq_b]  # per sequence [n_i - context, context + 1]
    sizes = [w.shape[0] for w in windows]
    n_a, n_b = sum(sizes[: len(seq_a)]), sum(sizes[len(seq_a) :])
    if n_a == 0 or n_b == 0:
        arm = "a" if n_a == 0 else "b"
        raise ValueError(f"context: every sequence of tokens_{arm} is at most {context} tokens long; nothing left to compare")
    # the observed cells only, in lexicographic order; cell[i] is the cell of the i-th window
    cells, cell = torch.unique(torch.cat(windows), dim=0, return_inverse=True)  # [U, context + 1], [n_a + n_b]
    pooled = torch.bincount(cell, minlength=cells.shape[0])  # [U]
    order = torch.argsort(pooled, descending=True, stable=True)
    total = n_a + n_b
    smaller = min(n_a, n_b)
    kept: list[int] = []
    for c in order.tolist():
        if len(kept) == max_categories - 1 or smaller * int(pooled[c]) / total < min_expected:
            break
        kept.append(c)
    if not kept:
        kept = [int(order[0])]
    kept_ids = torch.tensor(kept)
    # bin of every observed cell: its rank among the kept cells, or len(kept) for "other"
    category = torch.full((cells.shape[0],), len(kept), dtype=torch.long)
    category[kept_ids] = torch.arange(len(kept))
    other = total - int(pooled[kept_ids].sum())
    num_bins = len(kept) + 1
    if other == 0 or smaller * other / total < min_expected:
        category[category == len(kept)] = len(kept) - 1  # merge "other" into the rarest kept cell
        num_bins = len(kept)
    if num_bins < 2:
        raise ValueError("tokens_a/tokens_b: both arms use a single token category; nothing to compare")
    # per-sequence bin counts, so labels can be permuted by sequence
    bins = category[cell].split(sizes)
    counts = torch.stack([torch.bincount(b, minlength=num_bins) for b in bins]).double()  # [S, K]
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
    kept_cells = cells[kept_ids].tolist()
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
        categories=tuple(c[0] for c in kept_cells) if context == 0 else tuple(tuple(c) for c in kept_cells),
    )


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
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 0:
        raise ValueError(f"permutations: expected an int >= 0, got {permutations!r}")

    def hits(name: str, arm) -> list[torch.Tensor]:
        if isinstance(arm, torch.Tensor) and arm.ndim < 2:
            raise ValueError(
                f"{name}: expected a list of per-sequence hit tensors (or a 2-D tensor [sequences, tokens]), got a {arm.ndim}-D tensor"
            )
        out = []
        for i, h in enumerate(arm):
            h = torch.as_tensor(h)
            if h.is_floating_point() or h.is_complex() or (h.dtype != torch.bool and bool(((h != 0) & (h != 1)).any())):
                raise ValueError(f"{name}[{i}]: expected boolean (or 0/1) hits, got {h.dtype} {h.flatten()[:4].tolist()}")
            if h.ndim > 1:
                raise ValueError(f"{name}[{i}]: expected a 1-D tensor of one sequence's hits, got shape {tuple(h.shape)}")
            out.append(h.bool().view(-1).cpu())
        return out

    seq_a, seq_b = hits("hits_a", hits_a), hits("hits_b", hits_b)
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


def _law_cells(samples, law) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(probs [C], observed [C], impossible)`` over the law's cells of positive probability."""
    if isinstance(law, dict):
        if not law:
            raise ValueError("law: expected a non-empty dict {outcome tuple: probability}, got {}")
        keys = list(law)
        lengths = {len(k) for k in keys}
        if len(lengths) != 1:
            raise ValueError(f"law: expected outcomes of one length, got lengths {sorted(lengths)}")
        (length,) = lengths
        if isinstance(samples, torch.Tensor):
            if samples.ndim != 2 or samples.shape[1] != length or samples.dtype == torch.bool or samples.is_floating_point():
                raise ValueError(
                    f"samples: expected an integer tensor [S, {length}] (one outcome per row), got {samples.dtype} {tuple(samples.shape)}"
                )
            rows = [tuple(r) for r in samples.tolist()]
        else:
            rows = []
            for i, r in enumerate(samples):
                try:
                    if any(isinstance(t, bool) for t in r):
                        raise TypeError
                    rows.append(tuple(operator.index(t) for t in r))
                except TypeError:
                    raise ValueError(f"samples[{i}]: expected an outcome of integer token ids, got {r!r}") from None
            bad = next((r for r in rows if len(r) != length), None)
            if bad is not None:
                raise ValueError(f"samples: expected outcomes of {length} tokens (the law's), got {bad}")
        observed = Counter(rows)
        probs = torch.tensor([float(law[k]) for k in keys], dtype=torch.float64)
        counts = torch.tensor([observed.get(k, 0) for k in keys], dtype=torch.float64)
        impossible = len(rows) - int(counts.sum())
    else:
        probs = torch.as_tensor(law, dtype=torch.float64).cpu()
        if probs.ndim != 1:
            raise ValueError(
                f"law: expected a dict {{outcome: probability}} or a probability vector [V], got shape {tuple(probs.shape)}"
            )
        if (
            not isinstance(samples, torch.Tensor)
            or samples.ndim != 1
            or samples.dtype == torch.bool
            or samples.is_floating_point()
        ):
            raise ValueError(
                "samples: expected a 1-D integer tensor of ids with a probability-vector law, "
                f"got {getattr(samples, 'dtype', type(samples).__name__)} {tuple(getattr(samples, 'shape', ()))}"
            )
        ids = samples.long().cpu()
        outside = (ids < 0) | (ids >= probs.numel())
        counts = torch.bincount(ids[~outside], minlength=probs.numel()).double()
        impossible = int(outside.sum())
    _check_probabilities(probs)  # every cell, before any is dropped: a NaN or negative cell loses no sample silently
    keep = probs > 0
    impossible += int(counts[~keep].sum())
    return probs[keep], counts[keep], impossible


def _check_probabilities(probs: torch.Tensor) -> None:
    if probs.numel() == 0 or (probs < 0).any() or not torch.isfinite(probs).all() or abs(float(probs.sum()) - 1.0) > 1e-6:
        bad = probs[(probs < 0) | ~torch.isfinite(probs)]
        found = f"cells {bad.tolist()[:3]}" if bad.numel() else f"a sum of {float(probs.sum())!r}"
        raise ValueError(f"law: expected finite probabilities >= 0 summing to 1, got {found}")


def one_sample_chi2(samples, law: Law | torch.Tensor, *, min_expected: float = 5.0) -> OneSampleResult:
    """Pearson chi-square test of samples against an exact law.

    With ``n`` samples, cell ``i`` of the law expects ``n * p_i``. Cells expecting fewer than
    ``min_expected`` are pooled into one bin, from the rarest up; if that bin still expects fewer
    than ``min_expected``, the rarest kept cells join it until it does. The binning depends on the
    law and ``n`` only, so it is fixed before looking at the samples and the ``chi2(bins - 1)``
    reference holds. A sample outside the law's support refutes the law outright (``p = 0``).

    Args:
        samples: with a dict law, the outcomes: ``[S, m]`` int tensor or ``S`` sequences of ``m``
            tokens; with a probability vector, ``[S]`` token ids.
        law: ``{outcome tuple: probability}`` (e.g. :func:`autoregressive_law`) or ``[V]`` probabilities.
        min_expected: smallest expected count of a bin.

    Returns:
        :class:`OneSampleResult`. Samples must be independent draws (e.g. one run per sample).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> law = torch.tensor([0.5, 0.3, 0.15, 0.05])
        >>> r = one_sample_chi2(torch.multinomial(law, 400, replacement=True, generator=g), law)
        >>> r.dof, r.p_value > 0.01
        (3, True)
        >>> one_sample_chi2(torch.tensor([0, 1, 1]), {(0,): 0.5, (1,): 0.5, (2,): 0.0}, min_expected=0).dof
        1
    """
    if not (isinstance(min_expected, (int, float)) and not isinstance(min_expected, bool) and 0 <= min_expected < float("inf")):
        raise ValueError(f"min_expected: expected a finite float >= 0, got {min_expected!r}")
    if isinstance(samples, torch.Tensor) and isinstance(law, dict) and samples.ndim == 1:
        samples = samples[:, None]
    probs, counts, impossible = _law_cells(samples, law)
    n = int(counts.sum()) + impossible
    if n == 0:
        raise ValueError("samples: expected at least one sample, got none")
    expected = n * probs  # [C]
    order = torch.argsort(expected, stable=True)  # rarest first
    rare = expected[order] < min_expected
    num_rare = int(rare.sum())
    while 0 < num_rare < order.numel() and float(expected[order[:num_rare]].sum()) < min_expected:
        num_rare += 1
    pooled, own = order[:num_rare], order[num_rare:]
    bin_expected = torch.cat([expected[own], expected[pooled].sum().view(1)]) if num_rare else expected[own]
    bin_observed = torch.cat([counts[own], counts[pooled].sum().view(1)]) if num_rare else counts[own]
    num_bins = int(bin_expected.numel())
    dof = num_bins - 1
    if dof == 0 and probs.numel() > 1:
        raise ValueError(
            f"samples: {n} samples are too few for min_expected={min_expected}: all {probs.numel()} cells of the law pool "
            "into one bin (see chi2_sample_size for how many a test needs)"
        )
    tv = 0.5 * (float((counts / n - probs).abs().sum()) + impossible / n)
    if impossible:
        stat, p_value = float("inf"), 0.0
    else:
        stat = float(((bin_observed - bin_expected) ** 2 / bin_expected).sum())
        if dof == 0:
            # a one-bin law is matched whenever no sample falls outside it
            p_value = 1.0
        else:
            from scipy.stats import chi2 as chi2_dist

            p_value = float(chi2_dist.sf(stat, dof))
    return OneSampleResult(
        statistic=stat,
        dof=dof,
        p_value=p_value,
        num_samples=n,
        num_bins=num_bins,
        num_pooled_cells=num_rare,
        num_impossible=impossible,
        cohens_w=math.sqrt(stat / n),
        tv_distance=tv,
    )
