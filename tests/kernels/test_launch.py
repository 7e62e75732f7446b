"""``specdec.kernels.launch``: who launches programmatically under ``$SPECDEC_PDL``, and the interpreter left out.

The compiled side (the PTX's ``griddepcontrol`` order in the SwiGLU and norm kernels) is in
``test_elementwise_sm90.py``; the CUDA GEMMs read the same variable in their host code.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specdec.kernels.act import silu_mul
from specdec.kernels.launch import (
    PDL_ENV,
    gemm_launch_code,
    gemm_launch_programmatic,
    pdl_mode,
    triton_launch_options,
)
from specdec.kernels.norm.rms import add_rms_norm_triton

ON_CUDA = SimpleNamespace(is_cuda=True, shape=(16, 4096))  # what triton_launch_options reads of its rows


@pytest.mark.parametrize(
    ("value", "mode", "pdl"),
    [(None, "1", 1), ("", "1", 1), ("0", "0", 0), ("gemm", "gemm", 0), ("elementwise", "elementwise", 1), ("1", "1", 1)],
)
def test_mode_from_the_environment(monkeypatch, value, mode, pdl):
    if value is None:
        monkeypatch.delenv(PDL_ENV, raising=False)
    else:
        monkeypatch.setenv(PDL_ENV, value)
    assert pdl_mode() == mode
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    want = {"PDL": pdl, "launch_pdl": True} if pdl else {"PDL": 0}
    assert triton_launch_options(ON_CUDA) == want
    assert triton_launch_options(SimpleNamespace(is_cuda=True, shape=(17, 4096))) == {"PDL": 0}  # cuBLAS after it
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert triton_launch_options(ON_CUDA) == {"PDL": 0}  # eager launches stay plain


@pytest.mark.parametrize("value", ["on", "true", "2", "GEMM", "early", "late"])
def test_an_unknown_mode_names_the_variable(monkeypatch, value):
    monkeypatch.setenv(PDL_ENV, value)
    with pytest.raises(ValueError, match=rf"\$SPECDEC_PDL: expected one of .*got '{value}'"):
        pdl_mode()


@pytest.mark.parametrize(("mode", "code"), [("0", 0), ("gemm", 1), ("elementwise", 0), ("1", 1)])
@pytest.mark.parametrize("capturing", [False, True])
def test_gemms_launch_programmatically_only_while_captured(monkeypatch, mode, code, capturing):
    # A GEMM reads its first weights before it waits: only inside a captured forward is the kernel before it sure not
    # to write them. The code is what the CUDA library's specdec_set_programmatic_launch takes.
    monkeypatch.setenv(PDL_ENV, mode)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
    assert gemm_launch_programmatic() == (capturing and code == 1)
    assert gemm_launch_code() == (code if capturing else 0)


def test_tensors_off_cuda_never_launch_programmatically(monkeypatch):
    monkeypatch.setenv(PDL_ENV, "1")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert triton_launch_options(torch.zeros(2, 8)) == {"PDL": 0}


def test_the_row_limit_is_the_tensor_map_gemms():
    from specdec.kernels.cuda.ops import TENSOR_MAP_MAX_TOKENS
    from specdec.kernels.launch import PDL_MAX_ROWS

    assert PDL_MAX_ROWS == TENSOR_MAP_MAX_TOKENS


def test_kernels_in_the_interpreter_are_unchanged_with_the_launch_asked_for(monkeypatch):
    gen = torch.Generator().manual_seed(0)
    gate_up = torch.randn(3, 2 * 70, generator=gen).to(torch.bfloat16)
    x, delta = (torch.randn(2, 96, generator=gen).to(torch.bfloat16) for _ in range(2))
    weight = torch.randn(96, generator=gen).to(torch.bfloat16)
    outs = {}
    for mode in ("0", "1"):
        monkeypatch.setenv(PDL_ENV, mode)
        outs[mode] = (silu_mul(gate_up, backend="triton"), *add_rms_norm_triton(x, delta, weight, 1e-6))
    assert all(torch.equal(a, b) for a, b in zip(outs["0"], outs["1"]))
    assert not torch.equal(outs["1"][0], torch.zeros_like(outs["1"][0]))
