"""The dense MLP's SwiGLU kernel ``silu(gate) * up`` (Triton interpreter on the CPU) against its PyTorch reference.

* float16 and bfloat16 at awkward widths (F not a power of two, F over one 1024-wide block) and rows 1 and 3,
  leading dims kept: within one unit in the last place, and at least 99 % of the elements exactly;
* float32: PyTorch's CPU silu takes its own vectorised ``exp`` and differs from ``x / (1 + exp(-x))`` with a
  correctly rounded ``exp`` by a few float32 units on a few percent of elements. The interpreter's kernel computes
  that form (``exp`` in float64, rounded to float32; compiled, it calls CUDA's ``expf``, as PyTorch's CUDA silu), so
  in float32 it is checked bitwise against the form and within four units against the reference;
* a row-strided view of a wider tensor is read in place; zero rows and F = 0 work; bad arguments raise, naming them;
* mutation: a kernel that kept ``silu(gate)`` in float32 (one rounding, after the product) would fail the checks.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specdec.kernels.act import silu_mul
from specdec.kernels.act.naive import silu_mul_torch

SHAPES = [(1, 2 * 37), (3, 2 * 100), (2, 1, 2 * 1500)]


def gate_up_input(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=gen) * 4).to(dtype)


def ulps(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Units in the last place between two tensors of one float dtype (across zero too)."""
    keys = []
    for t in (got, want):
        if t.dtype == torch.float32:
            bits = t.view(torch.int32).long()
            keys.append(torch.where(bits < 0, -(bits + 2**31), bits))
        else:
            bits = t.view(torch.int16).int()
            keys.append(torch.where(bits < 0, -(bits + 2**15), bits))
    return (keys[0] - keys[1]).abs()


def assert_agrees(got: torch.Tensor, want: torch.Tensor, *, max_ulp: int = 1, min_equal: float = 0.99) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    diff = ulps(got, want)
    equal, worst = (float((diff == 0).float().mean()), int(diff.max())) if diff.numel() else (1.0, 0)
    assert equal >= min_equal and worst <= max_ulp, f"{int((diff > 0).sum())} of {diff.numel()} differ, up to {worst} ulp"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_kernel_matches_the_reference(shape, dtype):
    gate_up = gate_up_input(shape, dtype)
    out = silu_mul(gate_up, backend="triton")
    assert out.shape == (*shape[:-1], shape[-1] // 2) and out.is_contiguous()
    assert_agrees(out, silu_mul_torch(gate_up))


@pytest.mark.parametrize("shape", SHAPES)
def test_float32_kernel_is_the_accurate_form_and_near_the_cpu_reference(shape):
    gate_up = gate_up_input(shape, torch.float32, seed=1)
    out = silu_mul(gate_up, backend="triton")
    gate, up = gate_up.chunk(2, dim=-1)
    accurate = gate / (1 + torch.exp(-gate.double()).float()) * up  # silu with a correctly rounded exp, then * up
    assert torch.equal(out, accurate)
    assert_agrees(out, silu_mul_torch(gate_up), max_ulp=4, min_equal=0.9)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the interpreter's exp(88.5) and beyond
def test_extreme_inputs():
    # silu saturates (-> 0 and -> x) and exp overflows to inf for gate < -88: x / inf = -0, as PyTorch's
    values = torch.tensor([-1e4, -100.0, -88.5, -20.0, -1e-30, 0.0, 1e-30, 20.0, 100.0, 3e4])
    gate_up = torch.cat([values, torch.linspace(-3, 3, values.numel())])[None]
    for dtype in (torch.float16, torch.bfloat16):
        half = gate_up.to(dtype)
        assert_agrees(silu_mul(half, backend="triton"), silu_mul_torch(half), max_ulp=0)


def test_row_strided_view_is_read_in_place():
    wide = gate_up_input((3, 2 * 50 + 6), torch.bfloat16, seed=2)
    gate_up = wide[:, 3:-3]  # rows 106 apart
    assert not gate_up.is_contiguous()
    assert torch.equal(silu_mul(gate_up, backend="triton"), silu_mul(gate_up.contiguous(), backend="triton"))
    assert_agrees(silu_mul(gate_up, backend="triton"), silu_mul_torch(gate_up))


def test_reference_is_the_mlp_code():
    # MLP.forward before the kernel, written out: gate, up = w13(x).chunk(2, dim=-1); F.silu(gate) * up
    gate_up = gate_up_input((2, 3, 2 * 24), torch.bfloat16, seed=3)
    gate, up = gate_up.chunk(2, dim=-1)
    assert torch.equal(silu_mul_torch(gate_up), F.silu(gate) * up)
    # silu's float32 form, rounded to the dtype, then the product rounded again
    silu = (gate.float() / (1 + torch.exp(-gate.float()))).to(torch.bfloat16)
    assert torch.equal(silu_mul_torch(gate_up), (silu.float() * up.float()).to(torch.bfloat16))


def test_off_cuda_auto_is_the_reference_bitwise():
    gate_up = gate_up_input((3, 2 * 20), torch.float32, seed=4)
    for backend in ("auto", "torch"):
        out = silu_mul(gate_up, backend=backend)
        assert torch.equal(out, silu_mul_torch(gate_up)) and out.is_contiguous()


@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 8), (3, 0)])
def test_zero_rows_and_zero_width(shape):
    gate_up = gate_up_input(shape, torch.float16)
    out = silu_mul(gate_up, backend="triton")
    assert out.shape == (*shape[:-1], shape[-1] // 2) and out.dtype == torch.float16


def test_bad_arguments_raise_naming_them():
    gate_up = gate_up_input((2, 8), torch.float32)
    with pytest.raises(ValueError, match=r"gate_up: expected a last dim of even size 2F \(gate, then up\), got shape \(2, 7\)"):
        silu_mul(gate_up[:, :7])
    with pytest.raises(ValueError, match=r"gate_up: expected a last dim of even size 2F \(gate, then up\), got shape \(\)"):
        silu_mul(gate_up[0, 0])
    with pytest.raises(ValueError, match="gate_up: expected a floating dtype, got torch.int64"):
        silu_mul(gate_up.long())
    with pytest.raises(TypeError, match="gate_up: expected a tensor, got list"):
        silu_mul([1.0, 2.0])
    with pytest.raises(ValueError, match=r"backend: expected one of \('auto', 'triton', 'torch'\), got 'cuda'"):
        silu_mul(gate_up, backend="cuda")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mutation_silu_kept_in_float32_is_caught(dtype):
    gate_up = gate_up_input((3, 2 * 100), dtype)
    out = silu_mul(gate_up, backend="triton")
    gate, up = gate_up.float().chunk(2, dim=-1)
    mutant = (F.silu(gate) * up).to(dtype)  # silu(gate) not rounded to the dtype before the product
    with pytest.raises(AssertionError, match="differ"):
        assert_agrees(out, mutant)


def test_float64_runs_the_reference_on_every_backend():
    """The kernel computes in float32: float64 inputs keep their precision through the reference."""
    x = torch.randn(3, 10, dtype=torch.float64)
    assert torch.equal(silu_mul(x, backend="triton"), silu_mul_torch(x))
