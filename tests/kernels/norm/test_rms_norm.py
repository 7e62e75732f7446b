"""The hybrid layers' RMSNorm kernel (Triton interpreter on the CPU) against its PyTorch reference.

* centred and gated forms, float32, float16 and bfloat16, awkward widths (not powers of two, one element) and row
  counts, leading dimensions kept: float32 to 1e-6; float16 bitwise but for at most 2 % of the elements, and those
  within two units in the last place; bfloat16 to a few units (the interpreter's bfloat16 casts truncate, where the
  GPU rounds to nearest: the GPU run checks it against the static path and batched AR);
* the layers use the reference off CUDA, so the hybrid's CPU tests stay bitwise against transformers;
* wrong weight or gate shapes, another device and an unknown backend raise, naming the argument;
* the residual add + scaled norm: the residual bitwise ``x + delta`` in every dtype (bfloat16 too: the kernel rounds
  it to nearest even by hand), the normed output as the scaled form's; mixed dtypes take the reference; zero rows;
  mutations (a truncated residual, a norm of the unrounded sum) would fail these checks.

The gated form rounds twice to bfloat16 after its float32 statistics; where the kernel's sum of squares lands one
float32 step from the reference's, a rounding can flip, so a few elements differ by up to two units in the last place.
"""

from __future__ import annotations

import pytest
import torch

from specdec.kernels.norm import add_scaled_rms_norm, centered_rms_norm, gated_rms_norm, scaled_rms_norm
from specdec.kernels.norm.naive import (
    add_scaled_rms_norm_torch,
    centered_rms_norm_torch,
    gated_rms_norm_torch,
    scaled_rms_norm_torch,
)


def inputs(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=gen) * 3).to(dtype)
    gate = torch.randn(*shape, generator=gen).to(dtype)
    weight = (torch.randn(shape[-1], generator=gen) * 0.5).to(dtype)
    return x, gate, weight


def assert_agrees(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    elif got.dtype == torch.float16:
        ulps = (got.view(torch.int16).int() - want.view(torch.int16).int()).abs()  # same-sign neighbours
        assert (ulps > 0).float().mean() <= 0.02 and int(ulps.max()) <= 2, (
            f"{int((ulps > 0).sum())} differ, up to {int(ulps.max())} ulp"
        )
    else:  # the interpreter's bfloat16 casts truncate (hardware rounds to nearest): a few units in the last place
        torch.testing.assert_close(got, want, rtol=2**-5, atol=2**-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (3, 48), (2, 5, 100), (7, 128)])
def test_centred_kernel_matches_the_reference(shape, dtype):
    x, _, weight = inputs(shape, dtype)
    assert_agrees(centered_rms_norm(x, weight, 1e-6, backend="triton"), centered_rms_norm_torch(x, weight, 1e-6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (3, 48), (2, 5, 100), (7, 128)])
def test_gated_kernel_matches_the_reference(shape, dtype):
    x, gate, weight = inputs(shape, dtype, seed=1)
    assert_agrees(gated_rms_norm(x, gate, weight, 1e-6, backend="triton"), gated_rms_norm_torch(x, gate, weight, 1e-6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (3, 48), (2, 5, 100), (7, 128)])
def test_scaled_kernel_matches_the_reference(shape, dtype):
    x, _, weight = inputs(shape, dtype, seed=3)
    assert_agrees(scaled_rms_norm(x, weight, 1e-6, backend="triton"), scaled_rms_norm_torch(x, weight, 1e-6))


def test_scaled_norm_with_a_weight_of_another_dtype_runs_the_reference_and_promotes():
    x, _, weight = inputs((3, 48), torch.bfloat16, seed=4)
    out = scaled_rms_norm(x, weight.float(), 1e-6, backend="triton")
    assert out.dtype == torch.float32 and torch.equal(out, scaled_rms_norm_torch(x, weight.float(), 1e-6))


def test_scaled_reference_is_the_dense_layers_norm():
    from specdec.models.dense import RMSNorm

    x, _, weight = inputs((2, 5, 100), torch.bfloat16, seed=5)
    norm = RMSNorm(100, eps=1e-6).to(torch.bfloat16)
    norm.weight.data.copy_(weight)
    # the Llama / Qwen3 formula written out: float32 statistics, one rounding to x's dtype, then the weight
    xf = x.float()
    want = weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert torch.equal(scaled_rms_norm_torch(x, weight, 1e-6), want)
    with torch.no_grad():
        assert torch.equal(norm(x), want)


def test_dense_norm_asks_for_the_kernel_only_without_gradients(monkeypatch):
    import specdec.models.dense as dense

    backends = []

    def recording(x, weight, eps, *, backend):
        backends.append(backend)
        return scaled_rms_norm_torch(x, weight, eps)

    monkeypatch.setattr(dense, "scaled_rms_norm", recording)
    norm = dense.RMSNorm(8, eps=1e-6)
    x = torch.randn(2, 8)
    with torch.no_grad():
        norm(x)
    norm(x)  # the weight wants a gradient: the kernel has no backward
    norm.weight.requires_grad_(False)
    norm(x)
    norm(x.requires_grad_())
    assert backends == ["auto", "torch", "auto", "torch"]


def test_off_cuda_auto_is_the_reference_bitwise():
    x, gate, weight = inputs((4, 64), torch.float32, seed=2)
    assert torch.equal(centered_rms_norm(x, weight, 1e-6), centered_rms_norm_torch(x, weight, 1e-6))
    assert torch.equal(gated_rms_norm(x, gate, weight, 1e-6), gated_rms_norm_torch(x, gate, weight, 1e-6))
    assert torch.equal(scaled_rms_norm(x, weight, 1e-6), scaled_rms_norm_torch(x, weight, 1e-6))


def test_bad_arguments_raise_naming_them():
    x, gate, weight = inputs((2, 8), torch.float32)
    with pytest.raises(ValueError, match=r"weight: expected shape \(8,\) \(x's last dim\), got \(7,\)"):
        centered_rms_norm(x, weight[:7], 1e-6)
    with pytest.raises(ValueError, match=r"gate: expected x's shape \(2, 8\), got \(2, 4\)"):
        gated_rms_norm(x, gate[:, :4], weight, 1e-6)
    with pytest.raises(ValueError, match=r"backend: expected one of \('auto', 'triton', 'torch'\), got 'cuda'"):
        centered_rms_norm(x, weight, 1e-6, backend="cuda")
    with pytest.raises(ValueError, match="weight: expected device cpu"):
        centered_rms_norm(x, weight.to("meta"), 1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (3, 48), (2, 5, 100), (7, 128)])
def test_add_scaled_kernel_matches_the_reference(shape, dtype):
    x, delta, weight = inputs(shape, dtype, seed=6)
    residual, normed = add_scaled_rms_norm(x, delta, weight, 1e-6, backend="triton")
    want_residual, want_normed = add_scaled_rms_norm_torch(x, delta, weight, 1e-6)
    assert torch.equal(residual, x + delta) and torch.equal(residual, want_residual)  # bitwise, bfloat16 too
    assert residual.is_contiguous() and normed.is_contiguous()
    assert_agrees(normed, want_normed)


def test_add_scaled_reference_is_the_dense_layers_residual_and_norm():
    from specdec.models.dense import RMSNorm

    x, delta, weight = inputs((2, 5, 100), torch.bfloat16, seed=7)
    norm = RMSNorm(100, eps=1e-6).to(torch.bfloat16)
    norm.weight.data.copy_(weight)
    residual, normed = add_scaled_rms_norm_torch(x, delta, weight, 1e-6)
    # DecoderLayer.forward before the kernel: x = x + attn(...), then mlp_norm(x)
    assert torch.equal(residual, x + delta)
    with torch.no_grad():
        assert torch.equal(normed, norm(x + delta))


def test_add_scaled_with_mixed_dtypes_runs_the_reference_and_promotes():
    x, delta, weight = inputs((3, 48), torch.bfloat16, seed=8)
    residual, normed = add_scaled_rms_norm(x, delta.float(), weight, 1e-6, backend="triton")
    want_residual, want_normed = add_scaled_rms_norm_torch(x, delta.float(), weight, 1e-6)
    assert residual.dtype == normed.dtype == torch.float32
    assert torch.equal(residual, want_residual) and torch.equal(normed, want_normed)


def test_add_scaled_off_cuda_auto_is_the_reference_bitwise():
    x, delta, weight = inputs((4, 64), torch.float32, seed=9)
    got, want = add_scaled_rms_norm(x, delta, weight, 1e-6), add_scaled_rms_norm_torch(x, delta, weight, 1e-6)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 8)])
def test_add_scaled_zero_rows(shape):
    x, delta, weight = inputs(shape, torch.bfloat16)
    residual, normed = add_scaled_rms_norm(x, delta, weight, 1e-6, backend="triton")
    assert residual.shape == normed.shape == shape


def test_add_scaled_bad_arguments_raise_naming_them():
    x, delta, weight = inputs((2, 8), torch.float32)
    with pytest.raises(ValueError, match=r"delta: expected x's shape \(2, 8\), got \(1, 8\)"):
        add_scaled_rms_norm(x, delta[:1], weight, 1e-6)
    with pytest.raises(ValueError, match="delta: expected device cpu"):
        add_scaled_rms_norm(x, delta.to("meta"), weight, 1e-6)
    with pytest.raises(TypeError, match="delta: expected a tensor, got float"):
        add_scaled_rms_norm(x, 1.0, weight, 1e-6)
    with pytest.raises(ValueError, match=r"weight: expected shape \(8,\) \(x's last dim\), got \(7,\)"):
        add_scaled_rms_norm(x, delta, weight[:7], 1e-6)
    with pytest.raises(ValueError, match=r"backend: expected one of \('auto', 'triton', 'torch'\), got 'gpu'"):
        add_scaled_rms_norm(x, delta, weight, 1e-6, backend="gpu")


def test_mutation_residual_rounded_by_truncation_is_caught():
    # the interpreter's plain float32 -> bfloat16 cast truncates: a kernel that stored x + delta through it would
    # fail the bitwise residual check above (the kernel rounds to nearest even by hand, as PyTorch and the GPU)
    x, delta, weight = inputs((7, 128), torch.bfloat16, seed=6)
    residual, _ = add_scaled_rms_norm(x, delta, weight, 1e-6, backend="triton")
    truncated = ((x.float() + delta.float()).view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)
    assert not torch.equal(truncated, x + delta)
    assert torch.equal(residual, x + delta)


def test_mutation_norm_of_the_unrounded_residual_is_caught():
    # normalising x + delta kept in float32 (the residual's rounding skipped) fails the float16 tolerance above
    x, delta, weight = inputs((7, 128), torch.float16, seed=6)
    _, normed = add_scaled_rms_norm(x, delta, weight, 1e-6, backend="triton")
    s = x.float() + delta.float()
    mutant = weight * (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.float16)
    with pytest.raises(AssertionError, match="differ"):
        assert_agrees(normed, mutant)


def test_gated_norm_with_a_weight_of_another_dtype_runs_as_its_reference():
    """A float32 weight on float16 x promotes the product in the reference; the backends must agree on it."""
    g = torch.Generator().manual_seed(0)
    x, gate = torch.randn(8, 128, generator=g).half(), torch.randn(8, 128, generator=g).half()
    weight = torch.randn(128, generator=g) * 3
    expected = gated_rms_norm(x, gate, weight, 1e-6, backend="torch")
    assert torch.equal(gated_rms_norm(x, gate, weight, 1e-6, backend="triton"), expected)


def test_float64_runs_the_reference_on_every_backend():
    """The kernel computes in float32: a float64 residual would lose a small delta (1e-9 next to 1), a float64 norm its
    last bits."""
    gen = torch.Generator().manual_seed(0)
    x, gate = torch.randn(2, 16, generator=gen, dtype=torch.float64), torch.randn(2, 16, generator=gen, dtype=torch.float64)
    delta = torch.randn(2, 16, generator=gen, dtype=torch.float64) * 1e-9
    w = torch.randn(16, generator=gen, dtype=torch.float64)
    residual, normed = add_scaled_rms_norm(x, delta, w, 1e-6, backend="triton")
    assert torch.equal(residual, x + delta)
    assert torch.equal(normed, add_scaled_rms_norm_torch(x, delta, w, 1e-6)[1])
    assert torch.equal(scaled_rms_norm(x, w, 1e-6, backend="triton"), scaled_rms_norm_torch(x, w, 1e-6))
    assert torch.equal(gated_rms_norm(x, gate, w, 1e-6, backend="triton"), gated_rms_norm_torch(x, gate, w, 1e-6))
    assert torch.equal(centered_rms_norm(x, w, 1e-6, backend="triton"), centered_rms_norm_torch(x, w, 1e-6))
