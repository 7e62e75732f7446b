"""W12Tensor.as_q_weight: the same planes, read by F.linear through the 8-bit view; every other op stays exact."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specdec.formats import W12Tensor


@pytest.fixture
def w12() -> W12Tensor:
    g = torch.Generator().manual_seed(3)
    return W12Tensor.from_bf16(torch.randn(24, 64, generator=g).to(torch.bfloat16))


def test_as_q_weight_shares_every_plane(w12):
    q = w12.as_q_weight()
    assert isinstance(q, W12Tensor) and q.linear_view == "q" and w12.linear_view == "exact"
    assert tuple(q.shape) == tuple(w12.shape) and q.linear_backend == w12.linear_backend
    for name in W12Tensor._INNER:
        assert getattr(q, name).data_ptr() == getattr(w12, name).data_ptr(), name


@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_with_the_q_weight_is_linear_with_the_q_view(w12, with_bias):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(5, 64, generator=g).to(torch.bfloat16)
    bias = torch.randn(24, generator=g).to(torch.bfloat16) if with_bias else None
    q = w12.as_q_weight()
    assert torch.equal(F.linear(x, q, bias), F.linear(x, w12.q_view(), bias))
    assert torch.equal(F.linear(x, w12, bias), F.linear(x, w12.to_bf16(), bias))
    assert not torch.equal(F.linear(x, q, bias), F.linear(x, w12, bias))


def test_q_weight_is_exact_outside_f_linear(w12):
    q = w12.as_q_weight()
    assert torch.equal(q.to_bf16(), w12.to_bf16())
    assert q.detach().linear_view == "q" and q.clone().linear_view == "q"
