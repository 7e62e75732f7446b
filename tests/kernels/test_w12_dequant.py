"""The W12 dequant kernel: bit for bit ``to_bf16()`` / ``q_view()`` on awkward shapes, row ranges and every pattern."""

import pytest
import torch

from specdec.formats import W12Tensor
from specdec.kernels.w12_dequant import w12_dequant
from tests.kernels.test_w12_kernels import bits, make_weight, weight_with_zeros_and_crowded_tile


def planes(w12, mode="exact"):
    if mode == "q":
        return w12.ae, None, w12.base, None, None, None
    return w12.ae, w12.nib, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits


@pytest.mark.parametrize("n, k", [(37, 200), (48, 72)], ids=str)
@pytest.mark.parametrize("mode", ["exact", "q"])
def test_dequant_is_bit_identical_with_zeros_and_a_crowded_escape_tile(n, k, mode):
    w, w12 = weight_with_zeros_and_crowded_tile(n, k)
    got = w12_dequant(*planes(w12, mode), k=k, mode=mode)
    ref = w if mode == "exact" else w12.q_view()
    assert got.shape == (n, k) and got.is_contiguous()
    assert torch.equal(bits(got), bits(ref))


def test_every_bf16_pattern_comes_back():
    w = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).reshape(256, 256).contiguous()
    w12 = W12Tensor.from_bf16(w)
    assert torch.equal(bits(w12_dequant(*planes(w12), k=256)), bits(w))


@pytest.mark.parametrize("rows", [(0, 1), (3, 36), (16, 32), (36, 37), (5, 21)], ids=str)
def test_a_row_range_is_those_rows_with_their_escapes(rows):
    # ranges that start and end inside a 16-row block, inside the crowded escape tile (rows 16-31) and at the last row
    w, w12 = weight_with_zeros_and_crowded_tile(37, 200)
    got = w12_dequant(*planes(w12), k=200, rows=rows, coordinates=w12.escape_coordinates())
    assert torch.equal(bits(got), bits(w[rows[0] : rows[1]]))


def test_the_escape_patch_is_needed():
    # the same planes with the escape list dropped decode to another weight: the patch is what makes it exact
    w, w12 = weight_with_zeros_and_crowded_tile(37, 200)
    no_ptr = torch.zeros_like(w12.esc_ptr)
    stripped = w12_dequant(w12.ae, w12.nib, w12.base, no_ptr, w12.esc_pos[:0], w12.esc_bits[:0], k=200)
    assert w12.num_escapes > 500 and not torch.equal(bits(stripped), bits(w))


def test_rows_past_the_range_are_not_written():
    # the kernel's last block of rows reads past r1: none of those rows may land in the output (nor past it)
    w = make_weight(40, 96)
    w12 = W12Tensor.from_bf16(w)
    got = w12_dequant(*planes(w12), k=96, rows=(0, 17))
    assert got.shape == (17, 96) and torch.equal(bits(got), bits(w[:17]))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"mode": "rebias"}, ValueError, r"mode: expected one of \('exact', 'q'\), got 'rebias'"),
        ({"rows": (5, 5)}, ValueError, r"rows: expected 0 <= r0 < r1 <= N = 40, got \(5, 5\)"),
        ({"rows": (0, 41)}, ValueError, r"rows: expected 0 <= r0 < r1 <= N = 40, got \(0, 41\)"),
        ({"rows": (-1, 3)}, ValueError, r"rows: expected 0 <= r0 < r1 <= N = 40, got \(-1, 3\)"),
        ({"rows": [0, 3]}, TypeError, r"rows: expected a tuple \(r0, r1\) of two ints, got \[0, 3\]"),
        ({"rows": (0, 3, 5)}, TypeError, r"rows: expected a tuple \(r0, r1\) of two ints, got \(0, 3, 5\)"),
        ({"rows": (0.0, 3)}, TypeError, r"rows: expected a tuple \(r0, r1\) of two ints"),
        ({"k": 100}, ValueError, r"k: expected an int with k_padded = ceil\(k / 8\) \* 8 = 96 \(ae.s width\), got 100"),
        (
            {"coordinates": (torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int64))},
            ValueError,
            r"coordinates: expected two tensors of shape \(\d+,\)",
        ),
    ],
    ids=["mode", "empty-rows", "rows-past-n", "negative-row", "rows-list", "rows-three", "rows-float", "k", "coordinates"],
)
def test_bad_arguments_are_named(kwargs, exc, match):
    w12 = W12Tensor.from_bf16(make_weight(40, 96))
    assert w12.num_escapes > 1
    call = {"k": 96, **kwargs}
    with pytest.raises(exc, match=match):
        w12_dequant(*planes(w12), **call)


def test_an_exact_decode_without_nibbles_is_refused():
    w12 = W12Tensor.from_bf16(make_weight(16, 64))
    with pytest.raises(TypeError, match=r"nib: expected a torch.Tensor, got NoneType"):
        w12_dequant(w12.ae, None, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits, k=64)
