"""The dense runtime's attention mask, made additive once a forward: the same bits out of SDPA as the boolean mask."""

from __future__ import annotations

import pytest
import torch

from specdec.kernels.attention import additive_mask
from specdec.models.dense import attend_cache, grouped_mask, prefix_attention_mask


def test_additive_mask_is_zero_where_allowed_and_minus_infinity_elsewhere():
    mask = torch.tensor([[True, False, True], [False, False, True]])
    add = additive_mask(mask, torch.bfloat16)
    assert add.dtype == torch.bfloat16 and add.shape == mask.shape
    assert torch.equal(add == float("-inf"), ~mask) and (add[mask] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5])
def test_attention_under_the_additive_mask_equals_the_boolean_one_bitwise(dtype, rows):
    gen = torch.Generator().manual_seed(rows)
    heads, kv_heads, dim, span, length = 6, 2, 16, 24, 11
    q = torch.randn(1, heads, rows, dim, generator=gen).to(dtype)
    k_cache, v_cache = (torch.randn(1, kv_heads, span, dim, generator=gen).to(dtype) for _ in range(2))
    full = torch.zeros(1, 1, rows, span, dtype=torch.bool)
    full[..., : length + rows] = prefix_attention_mask(length, rows, None, "cpu")
    mask = grouped_mask(full, heads // kv_heads)
    want = attend_cache(q, k_cache, v_cache, mask)
    assert torch.equal(attend_cache(q, k_cache, v_cache, additive_mask(mask, dtype)), want)
    # the masked slots (past the new rows) do not count: changing their values changes nothing
    v_cache[:, :, length + rows :] += 100
    assert torch.equal(attend_cache(q, k_cache, v_cache, additive_mask(mask, dtype)), want)
