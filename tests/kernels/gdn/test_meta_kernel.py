"""The one-program Triton topology build equals the tensor-op build, tensor for tensor (torch.equal)."""

from __future__ import annotations

import types

import pytest
import torch
from test_gdn_tree import KINDS, make_parents

from specdec.kernels.gdn import build_tree_meta
from specdec.kernels.gdn import meta as meta_mod

FIELDS = ("parents", "ancestors", "depth", "paths", "leaf_slots", "emit_from")


def assert_same_meta(a, b):
    assert a.batched == b.batched
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, (name, x.dtype, y.dtype, x.shape, y.shape)
        assert torch.equal(x, y), f"{name}: {x.tolist()} != {y.tolist()}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 6, 17, 40])
def test_meta_kernel_equals_tensor_build(kind, n):
    parents = make_parents(kind, n, seed=n)
    assert_same_meta(build_tree_meta(parents, backend="triton"), build_tree_meta(parents, backend="torch"))


def test_meta_kernel_batched_with_padding_roots():
    parents = torch.stack([make_parents("random", 9, 1), torch.tensor([-1, 0, 1, 0, -1, -1, -1, 3, 7])])
    assert_same_meta(build_tree_meta(parents, backend="triton"), build_tree_meta(parents, backend="torch"))


def test_meta_backend_checked_and_large_trees_fall_back():
    with pytest.raises(ValueError, match="backend"):
        build_tree_meta(torch.tensor([-1, 0]), backend="cuda")
    n = meta_mod._KERNEL_MAX_NODES + 1
    parents = torch.arange(n) - 1
    # above the kernel's tile size the tensor-op build runs, whatever the backend
    assert_same_meta(build_tree_meta(parents, backend="triton"), build_tree_meta(parents, backend="torch"))


def test_mutation_meta_kernel_closure_one_squaring_short(monkeypatch):
    # a 20-chain needs 5 squarings of (I + E) for its ancestor closure (2^5 >= 20): with 4 the
    # deepest ancestors are missing and the comparison must fail
    parents = torch.arange(20) - 1
    want = build_tree_meta(parents, backend="torch")
    assert_same_meta(build_tree_meta(parents, backend="triton"), want)
    real_math = meta_mod.math
    fake = types.SimpleNamespace(ceil=lambda x: real_math.ceil(x) - 1, log2=real_math.log2)
    monkeypatch.setattr(meta_mod, "math", fake)
    with pytest.raises(AssertionError, match="ancestors"):
        assert_same_meta(build_tree_meta(parents, backend="triton"), want)
