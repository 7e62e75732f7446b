"""Which implementation a W12 linear runs: the reference off CUDA, the CUDA small-M kernel for few rows, else Triton."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from specdec.formats import w12 as w12_module
from specdec.formats.w12 import CUDA_SMALL_M_ENV, W12Tensor, linear_path, q_linear_reference, w12_linear_reference


def _weight(n: int = 24, k: int = 64) -> W12Tensor:
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16)
    w[1, 2] = 2.0**-130  # an escape
    return W12Tensor.from_bf16(w)


def _cuda_rows(rows: int, k: int = 64):
    """A bf16 ``[rows, k]`` tensor that reports device cuda (fake: no GPU needed)."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        return torch.empty(rows, k, dtype=torch.bfloat16, device="cuda")


def test_cpu_runs_the_reference_and_never_the_cuda_kernel(monkeypatch):
    def no_cuda(*args, **kwargs):
        raise AssertionError("the CUDA kernel path was taken on CPU")

    monkeypatch.setattr(w12_module, "_cuda_small_m", no_cuda)
    w = _weight()
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    assert linear_path(x, w) == "torch"
    assert torch.equal(F.linear(x, w), w12_linear_reference(x, w))
    assert torch.equal(F.linear(x, w.as_q_weight()), q_linear_reference(x, w))


@pytest.mark.parametrize("rows", [1, 2, 8])
def test_cuda_kernel_for_at_most_8_rows_when_the_library_loads(monkeypatch, rows):
    monkeypatch.setattr(w12_module, "cuda_small_m_available", lambda: True)
    monkeypatch.delenv(CUDA_SMALL_M_ENV, raising=False)
    assert linear_path(_cuda_rows(rows), _weight()) == "cuda"
    assert linear_path(_cuda_rows(rows, k=72), _weight(k=72)) == "cuda"  # the register kernel's width


@pytest.mark.parametrize("rows", [9, 16])
def test_cuda_kernel_for_9_to_16_rows_only_with_the_tensor_map_kernel(monkeypatch, rows):
    from specdec.kernels.cuda.ops import Q_VARIANT_ENV, W12_VARIANT_ENV, WIDE_GEMM_ENV

    monkeypatch.setattr(w12_module, "cuda_small_m_available", lambda: True)
    for env in (CUDA_SMALL_M_ENV, W12_VARIANT_ENV, Q_VARIANT_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv(WIDE_GEMM_ENV, "0")  # rows past a small-M call stay off the wide kernels
    w = _weight()
    # K % 32 == 0 with the default variants (W12 v8, Q v2): both views run the CUDA kernel
    assert linear_path(_cuda_rows(rows), w) == "cuda" and linear_path(_cuda_rows(rows), w, view="q") == "cuda"
    assert linear_path(_cuda_rows(rows, k=72), _weight(k=72)) == "triton"  # K % 32 != 0: the register kernel, 8 rows
    # each view follows its own kernel variable
    monkeypatch.setenv(W12_VARIANT_ENV, "v1")
    assert linear_path(_cuda_rows(rows), w) == "triton" and linear_path(_cuda_rows(rows), w, view="q") == "cuda"
    monkeypatch.delenv(W12_VARIANT_ENV)
    monkeypatch.setenv(Q_VARIANT_ENV, "v1")
    assert linear_path(_cuda_rows(rows), w) == "cuda" and linear_path(_cuda_rows(rows), w, view="q") == "triton"
    with pytest.raises(ValueError, match=r"view: expected 'exact' or 'q', got 'fp8'"):
        linear_path(_cuda_rows(rows), w, view="fp8")


@pytest.mark.parametrize("rows", [17, 32])
def test_exact_17_to_32_rows_run_as_two_tensor_map_calls_and_the_q_view_runs_triton(monkeypatch, rows):
    from specdec.kernels.cuda.ops import W12_VARIANT_ENV, WIDE_GEMM_ENV

    monkeypatch.setattr(w12_module, "cuda_small_m_available", lambda: True)
    for env in (CUDA_SMALL_M_ENV, W12_VARIANT_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv(WIDE_GEMM_ENV, "0")
    w = _weight()
    assert w12_module.EXACT_CUDA_CALLS == 2
    assert linear_path(_cuda_rows(rows), w) == "cuda" and linear_path(_cuda_rows(rows), w, view="q") == "triton"
    monkeypatch.setenv(W12_VARIANT_ENV, "v1")  # the register kernel (8 rows a call) is not split
    assert linear_path(_cuda_rows(rows), w) == "triton"
    monkeypatch.delenv(W12_VARIANT_ENV)
    # the op takes at most 16 rows a call, so this equals the reference only if the rows are split
    x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    assert torch.equal(w12_module._cuda_small_m(x, w, "exact"), w12_linear_reference(x, w))
    assert torch.equal(w12_module._cuda_small_m(x.view(1, rows, 64), w, "exact"), w12_linear_reference(x, w)[None])


def test_triton_where_the_cuda_kernel_does_not_apply(monkeypatch):
    from specdec.kernels.cuda.ops import WIDE_GEMM_ENV

    monkeypatch.setattr(w12_module, "cuda_small_m_available", lambda: True)
    monkeypatch.delenv(CUDA_SMALL_M_ENV, raising=False)
    monkeypatch.setenv(WIDE_GEMM_ENV, "0")
    w = _weight()
    assert linear_path(_cuda_rows(33), w) == "triton"  # more rows than two exact calls take
    assert linear_path(_cuda_rows(17), w, view="q") == "triton"  # more rows than one Q call takes
    assert linear_path(_cuda_rows(1), w, torch.zeros(24, dtype=torch.bfloat16)) == "triton"  # bias
    assert linear_path(_cuda_rows(1), w, plain=False) == "triton"  # rebias / config
    assert linear_path(_cuda_rows(1), w, backend="triton") == "triton"  # the weight's backend asks for Triton
    monkeypatch.setattr(w12_module, "cuda_small_m_available", lambda: False)
    assert linear_path(_cuda_rows(1), w) == "triton"  # no library


def test_env_forces_the_triton_path(monkeypatch):
    monkeypatch.setattr(w12_module, "cuda_small_m_available", lambda: True)
    monkeypatch.setenv(CUDA_SMALL_M_ENV, "0")
    assert linear_path(_cuda_rows(1), _weight()) == "triton"


def test_explicit_cuda_backend_says_why_it_cannot_run(monkeypatch):
    from specdec.kernels.cuda.ops import WIDE_GEMM_ENV

    monkeypatch.setattr(w12_module, "cuda_small_m_available", lambda: True)
    monkeypatch.setenv(WIDE_GEMM_ENV, "0")
    w = _weight()
    with pytest.raises(ValueError, match=r"backend: 'cuda' cannot run here: x has 33 rows \(at most 32\)"):
        linear_path(_cuda_rows(33), w, backend="cuda")
    with pytest.raises(ValueError, match=r"backend: 'cuda' cannot run here: x has 17 rows \(at most 16\)"):
        linear_path(_cuda_rows(17), w, backend="cuda", view="q")
    with pytest.raises(ValueError, match=r"backend: 'cuda' cannot run here: x has 9 rows \(at most 8\)"):
        linear_path(_cuda_rows(9, k=72), _weight(k=72), backend="cuda")
    with pytest.raises(ValueError, match=r"backend: 'cuda' cannot run here: x is on cpu"):
        linear_path(torch.ones(1, 64, dtype=torch.bfloat16), w, backend="cuda")
    monkeypatch.setattr(w12_module, "cuda_small_m_available", lambda: False)
    with pytest.raises(ValueError, match=r"the CUDA kernel library does not load"):
        linear_path(_cuda_rows(1), w, backend="cuda")
    with pytest.raises(ValueError, match=r"backend: expected 'auto', 'cuda', 'triton', 'torch' or 'dequant', got 'cublas'"):
        linear_path(_cuda_rows(1), w, backend="cublas")


def test_weight_accepts_the_cuda_backend_and_names_the_choices():
    w = _weight()
    planes = (w.ae, w.nib, w.base, w.esc_ptr, w.esc_pos, w.esc_bits)
    assert W12Tensor(*planes, tuple(w.shape), "cuda").linear_backend == "cuda"
    with pytest.raises(ValueError, match=r"linear_backend: expected 'auto', 'cuda', 'triton', 'torch' or 'dequant', got 'x'"):
        W12Tensor(*planes, tuple(w.shape), "x")


def test_cuda_call_glue_keeps_leading_dims_and_view():
    # On CPU the custom ops run their references, so this checks the reshaping and the view choice.
    w = _weight()
    wide = torch.randn(2, 1, 72, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    x = wide[..., 3:67]  # not contiguous, base not 16-byte aligned
    y = w12_module._cuda_small_m(x, w, "exact")
    assert y.shape == (2, 1, 24)
    assert torch.equal(y, w12_linear_reference(x.contiguous(), w))
    assert torch.equal(w12_module._cuda_small_m(x, w, "q"), q_linear_reference(x.contiguous(), w))


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_triton_only_options_are_refused_where_the_reference_runs(backend):
    """``rebias`` and ``config`` steer the Triton kernel; on the reference path they would be dropped without a word."""
    from specdec.formats.w12 import q_linear, w12_linear
    from specdec.kernels.w12_gemm import default_config

    w, x = _weight(), torch.ones(1, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"rebias: options of the Triton kernel, but this call runs the 'torch' path"):
        w12_linear(x, w, backend=backend, rebias=True)
    with pytest.raises(ValueError, match=r"config: options of the Triton kernel, but this call runs the 'torch' path"):
        q_linear(x, w, backend=backend, config=default_config(1, 24, 64, x.device))
    with pytest.raises(TypeError, match="config: expected a W12KernelConfig or None, got str"):
        w12_linear(x, w, backend=backend, config="fast")
    assert torch.equal(w12_linear(x, w, backend=backend), w12_linear_reference(x, w))


@pytest.mark.parametrize("rows", [17, 33, 128])
def test_by_default_the_exact_view_s_17_to_128_rows_and_the_q_view_s_33_to_128_take_the_wide_ops(monkeypatch, rows):
    from specdec.kernels.cuda.ops import WIDE_GEMM_ENV

    monkeypatch.setattr(w12_module, "cuda_small_m_available", lambda: True)
    monkeypatch.delenv(CUDA_SMALL_M_ENV, raising=False)
    monkeypatch.delenv(WIDE_GEMM_ENV, raising=False)
    w = _weight()
    q_path = "cuda" if rows > 32 else "triton"  # the Q view's 17-32 rows stay on Triton (the measured default)
    assert linear_path(_cuda_rows(rows), w) == "cuda" and linear_path(_cuda_rows(rows), w, view="q") == q_path
    assert linear_path(_cuda_rows(32), w, view="q") == "triton" and linear_path(_cuda_rows(33), w, view="q") == "cuda"

    def refused(*args):
        raise AssertionError("the small-M op ran")

    for op in ("w12_gemm_small_m", "q_gemm_small_m"):
        monkeypatch.setattr(torch.ops.specdec, op, refused)
    x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(rows)).to(torch.bfloat16)
    assert torch.equal(w12_module._cuda_small_m(x, w, "exact"), w12_linear_reference(x, w))
    x = torch.randn(max(rows, 33), 64, generator=torch.Generator().manual_seed(rows)).to(torch.bfloat16)
    assert torch.equal(w12_module._cuda_small_m(x, w, "q"), q_linear_reference(x, w))
    monkeypatch.setenv(WIDE_GEMM_ENV, "exact")  # the exact view only: the Q view's rows past one call go to Triton
    assert linear_path(_cuda_rows(rows), w) == "cuda" and linear_path(_cuda_rows(rows), w, view="q") == "triton"


@pytest.mark.parametrize("rows", [17, 33, 128])
def test_wide_switch_sends_17_to_128_rows_to_the_wide_ops(monkeypatch, rows):
    from specdec.kernels.cuda.ops import WIDE_GEMM_ENV

    monkeypatch.setattr(w12_module, "cuda_small_m_available", lambda: True)
    monkeypatch.delenv(CUDA_SMALL_M_ENV, raising=False)
    w = _weight()
    monkeypatch.setenv(WIDE_GEMM_ENV, "1")
    assert linear_path(_cuda_rows(rows), w) == "cuda" and linear_path(_cuda_rows(rows), w, view="q") == "cuda"
    assert linear_path(_cuda_rows(129), w) == "triton"  # past the wide kernels' 128
    assert linear_path(_cuda_rows(rows, k=96), _weight(k=96), view="q") == "triton"  # K % 64 != 0

    # on CPU the ops run their references: the wide ones, and not the small-M ones, answer with the switch on
    def refused(*args):
        raise AssertionError("the small-M op ran")

    for op in ("w12_gemm_small_m", "q_gemm_small_m"):
        monkeypatch.setattr(torch.ops.specdec, op, refused)
    x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(rows)).to(torch.bfloat16)
    assert torch.equal(w12_module._cuda_small_m(x, w, "exact"), w12_linear_reference(x, w))
    assert torch.equal(w12_module._cuda_small_m(x.view(1, rows, 64), w, "q"), q_linear_reference(x, w)[None])
    monkeypatch.setenv(WIDE_GEMM_ENV, "0")
    with pytest.raises(AssertionError, match="the small-M op ran"):
        w12_module._cuda_small_m(x, w, "exact")
    assert linear_path(_cuda_rows(rows), w, view="q") == "triton"
