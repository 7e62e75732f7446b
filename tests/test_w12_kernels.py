"""W12 GEMM kernels under the Triton interpreter against the torch references."""

import pytest
import torch
import torch.nn.functional as F

from specdec.formats import W12KernelConfig, W12Tensor, q_linear, w12_linear
from specdec.kernels import w12_gemm
from specdec.kernels.w12_gemm import bf16_linear_triton, decode_tiles

SMALL = W12KernelConfig(block_m=16, block_n=16, block_k=32, split_k=1, num_warps=1)


def make_weight(n, k, seed=0, specials=True):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
    if specials:
        w[0, 0] = 0.0
        w[n - 1, k - 1] = -0.0
        w[n // 2, k // 3] = 1e-30  # far below the window
        w[min(1, n - 1), k // 2] = 2.0**-130  # subnormal
    return w.contiguous()


def bits(t):
    return t.contiguous().view(torch.int16)


@pytest.mark.parametrize("n, k", [(40, 96), (17, 200), (32, 64)], ids=lambda v: str(v))
@pytest.mark.parametrize("mode", ["exact", "q"])
def test_decoded_tile_is_bit_identical(n, k, mode):
    w = make_weight(n, k)
    w12 = W12Tensor.from_bf16(w)
    tiles = decode_tiles(w12, mode=mode, config=W12KernelConfig(block_n=32, block_k=64))
    ref = w if mode == "exact" else w12.q_view()
    assert torch.equal(bits(tiles), bits(ref))


def test_decoded_tile_inf_nan_escapes():
    w = make_weight(16, 64)
    w[3, 5] = float("inf")
    w[4, 6] = float("-inf")
    w[5, 7] = torch.tensor(0x7F81, dtype=torch.int16).view(torch.bfloat16)  # NaN payload
    w12 = W12Tensor.from_bf16(w)
    assert torch.equal(bits(decode_tiles(w12, config=SMALL)), bits(w))


def test_mutation_escape_patch_is_needed(monkeypatch):
    # Drop the escape patch (no escapes seen by the kernel): the decoded tile must differ.
    w = make_weight(16, 64)
    w12 = W12Tensor.from_bf16(w)
    real_launch = w12_gemm._launch

    def no_escapes(x, weight, bias, **kw):
        stripped = W12Tensor(weight.ae, weight.nib, weight.base, weight.esc_rows[:0], weight.esc_cols[:0],
                             weight.esc_bits[:0], tuple(weight.shape))
        return real_launch(x, stripped, bias, **kw)

    monkeypatch.setattr(w12_gemm, "_launch", no_escapes)
    assert not torch.equal(bits(decode_tiles(w12, config=SMALL)), bits(w))


@pytest.mark.parametrize(
    "lead, n, k, config",
    [
        ((1,), 48, 96, SMALL),
        ((3,), 40, 200, W12KernelConfig(block_n=32, block_k=64, split_k=2)),
        ((2, 9), 33, 64, SMALL),
        ((20,), 16, 128, W12KernelConfig(block_m=16, block_n=16, block_k=64, split_k=3)),
    ],
    ids=["M1", "M3_splitk_oddK", "M18_3d", "M20_two_m_tiles_split3"],
)
def test_exact_equals_same_tiling_bf16_and_reference(lead, n, k, config):
    w = make_weight(n, k)
    w12 = W12Tensor.from_bf16(w)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(*lead, k, generator=g).to(torch.bfloat16)
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    y = w12_linear(x, w12, bias, backend="triton", config=config)
    assert y.shape == (*lead, n)
    assert torch.equal(y, bf16_linear_triton(x, w, bias, config=config))
    ref = w12_linear(x, w12, bias, backend="torch")
    assert torch.equal(ref, F.linear(x, w, bias))
    torch.testing.assert_close(y.float(), ref.float(), rtol=2e-2, atol=2e-2)
    yq = q_linear(x, w12, backend="triton", config=config)
    torch.testing.assert_close(yq.float(), F.linear(x, w12.q_view()).float(), rtol=2e-2, atol=2e-2)


def test_output_written_everywhere_not_poisoned():
    w = make_weight(24, 64)
    w12 = W12Tensor.from_bf16(w)
    x = torch.randn(5, 64).to(torch.bfloat16)
    real_empty = torch.empty

    def poisoned(*a, **kw):
        t = real_empty(*a, **kw)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    torch.empty = poisoned
    try:
        y = w12_linear(x, w12, backend="triton", config=W12KernelConfig(block_n=16, block_k=32, split_k=2))
    finally:
        torch.empty = real_empty
    assert not torch.isnan(y).any()


def test_rebias_equals_exact_in_normal_range():
    w = make_weight(32, 64, specials=False)
    w[0, 0] = 0.0
    w12 = W12Tensor.from_bf16(w)
    x = torch.randn(3, 64).to(torch.bfloat16)
    cfg = W12KernelConfig(block_n=32, block_k=64)
    assert torch.equal(w12_linear(x, w12, backend="triton", rebias=True, config=cfg),
                       w12_linear(x, w12, backend="triton", config=cfg))
    scaled = decode_tiles(w12, mode="rebias", config=cfg).double()
    expect = w.double() * torch.exp2(112 - w12.base.double())[:, None]
    assert torch.equal(scaled, expect)


def test_rebias_edge_cases():
    # (1) overflow: half the row at 2^-12, half at 2^-27 forces base 100 < 112, so the rebiased
    # weights are 2^12 times larger; 2^126 activations overflow the fp32 sum there only.
    w = torch.full((16, 64), 2.0**-12, dtype=torch.bfloat16)
    w[:, 32:] = 2.0**-27
    w12 = W12Tensor.from_bf16(w)
    assert (w12.base == 100).all()
    x = torch.full((1, 64), 2.0**126, dtype=torch.bfloat16)
    cfg = W12KernelConfig(block_n=16, block_k=64)
    exact = w12_linear(x, w12, backend="triton", config=cfg)
    rebias = w12_linear(x, w12, backend="triton", rebias=True, config=cfg)
    assert torch.isfinite(exact).all() and not torch.isfinite(rebias).all()
    # (2) an escape that loses bits when rescaled is refused.
    w = make_weight(16, 64, specials=False)
    w[2, :] = 2.0**10  # base 137 -> scale 2^-25 would flush the subnormal below
    w[2, 3] = torch.tensor(0x0003, dtype=torch.int16).view(torch.bfloat16)  # subnormal, 2 bits
    with pytest.raises(ValueError, match="rebias"):
        w12_linear(torch.ones(1, 64, dtype=torch.bfloat16), W12Tensor.from_bf16(w), backend="triton", rebias=True,
                   config=cfg)


def test_linear_module_with_w12_weight_triton_backend():
    lin = torch.nn.Linear(64, 48).to(torch.bfloat16)
    w = lin.weight.detach().clone()
    x = torch.randn(2, 64).to(torch.bfloat16)
    lin.weight = torch.nn.Parameter(W12Tensor.from_bf16(w, linear_backend="triton"), requires_grad=False)
    cfg_out = lin(x)
    torch.testing.assert_close(cfg_out.float(), F.linear(x, w, lin.bias).float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda w12: (torch.randn(2, 64), w12), TypeError, "x: expected dtype"),
        (lambda w12: (torch.randn(2, 63).to(torch.bfloat16), w12), ValueError, r"\[\.\.\., 64\]"),
        (lambda w12: (torch.randn(2, 64).to(torch.bfloat16), w12.to_bf16()), TypeError, "W12Tensor"),
        (lambda w12: (torch.randn(2, 64).to(torch.bfloat16).to("meta"), w12), ValueError, "device"),
    ],
    ids=["x_fp32", "k_mismatch", "plain_weight", "device_mix"],
)
def test_bad_inputs(make, exc, match):
    w12 = W12Tensor.from_bf16(make_weight(8, 64))
    x, w = make(w12)
    with pytest.raises(exc, match=match):
        w12_linear(x, w, backend="triton")
    with pytest.raises(exc, match=match):
        q_linear(x, w, backend="torch")


def test_bad_bias_and_backend():
    w12 = W12Tensor.from_bf16(make_weight(8, 64))
    x = torch.randn(2, 64).to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"bias: expected shape \(8,\)"):
        w12_linear(x, w12, torch.zeros(7, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="backend"):
        w12_linear(x, w12, backend="cuda")
    with pytest.raises(ValueError, match="block_k"):
        W12KernelConfig(block_k=48)
