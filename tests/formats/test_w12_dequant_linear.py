"""The "dequant" path of a W12 linear: the weight decoded to bf16 by the Triton kernel, chunk by chunk, then F.linear."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specdec.formats import w12 as w12_module
from specdec.formats.w12 import W12KernelConfig, W12Tensor, linear_path, q_linear, w12_linear


def _weight(n: int = 40, k: int = 96, seed: int = 0) -> tuple[torch.Tensor, W12Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16)
    w[1, 2] = 2.0**-130  # an escape in the first chunk
    w[n - 3, k - 1] = float("inf")  # and one in the last
    w[7] = 0.0
    return w, W12Tensor.from_bf16(w)


def _x(rows: int, k: int = 96, lead: tuple[int, ...] = ()) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(*lead, rows, k, generator=g).to(torch.bfloat16)


def test_one_chunk_is_f_linear_of_the_exact_weight():
    w, w12 = _weight()
    x = _x(5, lead=(2,))
    bias = torch.randn(40, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    assert linear_path(x, w12, backend="dequant") == "dequant"
    assert torch.equal(w12_linear(x, w12, backend="dequant"), F.linear(x, w))
    assert torch.equal(w12_linear(x, w12, bias, backend="dequant"), F.linear(x, w, bias))


@pytest.mark.parametrize("chunk_rows", [1, 7, 39])
def test_chunks_of_rows_are_f_linear_of_those_rows(monkeypatch, chunk_rows):
    # a weight larger than DEQUANT_CHUNK_BYTES is decoded and multiplied a chunk of rows at a time; each chunk's
    # columns of the output are F.linear with exactly those rows of the weight (and of the bias)
    monkeypatch.setattr(w12_module, "DEQUANT_CHUNK_BYTES", 2 * 96 * chunk_rows)
    w, w12 = _weight()
    x = _x(6, lead=(3,))
    bias = torch.randn(40, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    got = w12_linear(x, w12, bias, backend="dequant")
    want = torch.cat([F.linear(x, w[r : r + chunk_rows], bias[r : r + chunk_rows]) for r in range(0, 40, chunk_rows)], dim=-1)
    assert got.shape == (3, 6, 40) and torch.equal(got, want)


def test_the_q_view_decodes_its_8_bit_plane():
    _, w12 = _weight()
    x = _x(4)
    assert torch.equal(q_linear(x, w12, backend="dequant"), F.linear(x, w12.q_view()))


def test_a_weight_can_ask_for_it_and_auto_never_takes_it():
    w, w12 = _weight()
    x = _x(300)
    assert linear_path(x, w12) == "torch"  # off CUDA the reference, at any row count
    as_dequant = W12Tensor(w12.ae, w12.nib, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits, (40, 96), linear_backend="dequant")
    assert torch.equal(F.linear(x, as_dequant), F.linear(x, w))


def test_the_triton_kernel_s_options_are_refused_on_it():
    _, w12 = _weight()
    with pytest.raises(ValueError, match=r"config: options of the Triton kernel, but this call runs the 'dequant' path"):
        w12_linear(_x(2), w12, backend="dequant", config=W12KernelConfig())
    with pytest.raises(ValueError, match=r"rebias: options of the Triton kernel, but this call runs the 'dequant' path"):
        w12_linear(_x(2), w12, backend="dequant", rebias=True)


def test_the_escapes_coordinates_are_read_once_a_weight(monkeypatch):
    # escape_coordinates reads the offsets on the host; the dequant path keeps them on the weight, so a second call
    # (and every chunk of one) decodes without waiting for the device
    monkeypatch.setattr(w12_module, "DEQUANT_CHUNK_BYTES", 2 * 96 * 7)
    w, w12 = _weight()
    calls = []
    read = W12Tensor.escape_coordinates
    monkeypatch.setattr(W12Tensor, "escape_coordinates", lambda self: calls.append(1) or read(self))
    x = _x(3)
    first, second = w12_linear(x, w12, backend="dequant"), w12_linear(x, w12, backend="dequant")
    assert len(calls) == 1 and torch.equal(first, second) and torch.equal(first, F.linear(x, w))
