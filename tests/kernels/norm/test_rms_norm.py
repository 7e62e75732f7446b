"""The hybrid layers' RMSNorm kernel (Triton interpreter on the CPU) against its PyTorch reference.

* centred and gated forms, float32, float16 and bfloat16, awkward widths (not powers of two, one element) and row
  counts, leading dimensions kept: float32 to 1e-6; float16 bitwise but for at most 2 % of the elements, and those
  within two units in the last place; bfloat16 to a few units (the interpreter's bfloat16 casts truncate, where the
  GPU rounds to nearest: the GPU run checks it against the static path and batched AR);
* the layers use the reference off CUDA, so the hybrid's CPU tests stay bitwise against transformers;
* wrong weight or gate shapes, another device and an unknown backend raise, naming the argument.

The gated form rounds twice to bfloat16 after its float32 statistics; where the kernel's sum of squares lands one
float32 step from the reference's, a rounding can flip, so a few elements differ by up to two units in the last place.
"""

from __future__ import annotations

import pytest
import torch

from specdec.kernels.norm import centered_rms_norm, gated_rms_norm, scaled_rms_norm
from specdec.kernels.norm.naive import centered_rms_norm_torch, gated_rms_norm_torch, scaled_rms_norm_torch


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
