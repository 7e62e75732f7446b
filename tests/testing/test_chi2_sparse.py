"""two_sample_chi2 with context: counts the observed (context, token) cells only."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from specdec.testing import two_sample_chi2

# Runs in a child process whose address space is capped at what it uses after start-up plus 3 GiB:
# a dense table of 49,152**2 cells (19 GB of int64 counts) cannot be allocated there.
BIG_VOCAB_SCRIPT = textwrap.dedent(
    """
    import resource, time
    import torch
    from specdec.testing import two_sample_chi2

    torch.set_num_threads(1)
    vm_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:"))
    limit = vm_kib * 1024 + 3 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    vocab = 49_152
    g = torch.Generator().manual_seed(0)
    zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
    a = torch.multinomial(zipf, 100 * 400, replacement=True, generator=g).view(100, 400)
    b = torch.multinomial(zipf, 100 * 400, replacement=True, generator=g).view(100, 400)
    a[0, 0] = b[0, 0] = vocab - 1  # the largest id occurs: the full vocabulary is in play
    start = time.perf_counter()
    r = two_sample_chi2(a, b, context=1, permutations=20, generator=g)
    print(r.dof, r.num_a, r.num_b, round(time.perf_counter() - start, 2))
    """
)


def test_context_table_on_a_49k_vocabulary_runs_in_bounded_memory():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", BIG_VOCAB_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    dof, num_a, num_b, seconds = done.stdout.split()
    assert int(num_a) == int(num_b) == 100 * 399  # one context token per sequence is only context
    assert 1 <= int(dof) <= 200
    assert float(seconds) < 30


def _pairs_as_ids(tokens: torch.Tensor, vocab: int) -> list[torch.Tensor]:
    """Each sequence's (previous token, token) pairs as ids of a dense V**2 vocabulary."""
    return [row[:-1] * vocab + row[1:] for row in tokens]


@pytest.mark.parametrize("min_expected", [5.0, 0.0], ids=["binned", "every-cell"])
def test_context_statistic_equals_the_dense_pair_table(min_expected):
    vocab = 5
    g = torch.Generator().manual_seed(0)
    law = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05])
    a = torch.multinomial(law, 60 * 12, replacement=True, generator=g).view(60, 12)
    b = torch.multinomial(law.flip(0), 60 * 12, replacement=True, generator=g).view(60, 12)
    sparse = two_sample_chi2(a, b, context=1, min_expected=min_expected, max_categories=vocab**2 + 1)
    dense = two_sample_chi2(
        _pairs_as_ids(a, vocab), _pairs_as_ids(b, vocab), context=0, min_expected=min_expected, max_categories=vocab**2 + 1
    )
    assert sparse.statistic == pytest.approx(dense.statistic, rel=1e-12) and sparse.dof == dense.dof
    assert sparse.p_value == pytest.approx(dense.p_value, rel=1e-9)
    assert [p * vocab + t for p, t in sparse.categories] == list(dense.categories)


def test_every_observed_pair_kept_matches_scipy_on_the_dense_table():
    from scipy.stats import chi2_contingency

    vocab = 4
    g = torch.Generator().manual_seed(1)
    a = torch.randint(0, vocab, (30, 20), generator=g)
    b = torch.randint(0, vocab, (30, 20), generator=g)
    result = two_sample_chi2(a, b, context=1, min_expected=0, max_categories=vocab**2 + 1)
    table = torch.stack([torch.bincount(torch.cat(_pairs_as_ids(x, vocab)), minlength=vocab**2) for x in (a, b)])
    table = table[:, table.sum(0) > 0]
    ref = chi2_contingency(table.numpy(), correction=False)
    assert result.statistic == pytest.approx(ref.statistic, rel=1e-9) and result.dof == ref.dof


def test_context_categories_name_the_pair():
    a = torch.tensor([[3, 7] * 20])
    b = torch.tensor([[3, 7] * 10 + [7, 3] * 10])
    result = two_sample_chi2(a, b, context=1, min_expected=1)
    assert set(result.categories) <= {(3, 7), (7, 3), (7, 7), (3, 3)}
    assert result.categories[0] == (3, 7)


def test_context_longer_than_every_sequence_is_named():
    with pytest.raises(ValueError, match="context: every sequence of tokens_a is at most 3 tokens long"):
        two_sample_chi2(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2, 3, 4, 5]]), context=3)
