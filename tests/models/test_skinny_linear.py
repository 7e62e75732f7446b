"""bf16 linears through the CUDA skinny GEMM: the CPU path is ``F.linear`` bit for bit, the swap and when the kernel runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specdec.models import SkinnyLinearWeight, random_target, use_skinny_linears
from specdec.models.skinny_linear import SKINNY_MAX_ROWS, skinny_linear, skinny_takes
from specdec.testing import tiny_target


def test_a_swapped_layer_computes_f_linear_bit_for_bit_on_cpu():
    gen = torch.Generator().manual_seed(0)
    layer = nn.Linear(64, 24).to(torch.bfloat16)
    x = torch.randn(2, 3, 64, generator=gen).to(torch.bfloat16)
    want = F.linear(x, layer.weight, layer.bias)
    plain = layer.weight.data
    assert use_skinny_linears(layer) == 1
    # the same storage, no copy
    assert isinstance(layer.weight, SkinnyLinearWeight) and layer.weight.data.plain.data_ptr() == plain.data_ptr()
    assert torch.equal(layer(x), want)
    assert use_skinny_linears(layer) == 0  # already swapped
    assert torch.equal(layer.weight * 2, plain * 2)  # any other op runs on the plain weight
    assert set(layer.state_dict()) == {"weight", "bias"}


def test_a_target_with_skinny_linears_gives_the_same_logits_on_cpu():
    target = random_target(tiny_target(seed=0).config, dtype=torch.bfloat16, device="cpu", max_seq_len=32, seed=0)
    ids = torch.tensor([[1, 5, 9, 2]])
    target.reset()
    want = target(ids).logits
    linears = sum(isinstance(m, nn.Linear) for m in target.modules())
    assert use_skinny_linears(target) == linears > 0
    target.reset()
    assert torch.equal(target(ids).logits, want)


def test_only_bf16_linears_are_swapped_and_bad_arguments_are_named():
    model = nn.Sequential(nn.Linear(16, 8), nn.Linear(8, 8).to(torch.bfloat16))
    assert use_skinny_linears(model) == 1
    assert type(model[0].weight.data) is torch.Tensor and isinstance(model[1].weight, SkinnyLinearWeight)
    with pytest.raises(TypeError, match="module: expected an nn.Module, got Tensor"):
        use_skinny_linears(torch.zeros(2))
    with pytest.raises(TypeError, match=r"plain: expected a 2-D bf16 tensor \[N, K\], got torch.float32 \(8, 16\)"):
        SkinnyLinearWeight(torch.zeros(8, 16))
    with pytest.raises(TypeError, match="plain: expected a 2-D bf16 tensor \\[N, K\\], got list"):
        SkinnyLinearWeight([[1.0]])


def _input(rows: int, k: int, **overrides) -> SimpleNamespace:
    # what skinny_takes reads of its input
    fields = dict(is_cuda=True, dtype=torch.bfloat16, shape=(rows, k), requires_grad=False)
    fields.update(overrides)
    return SimpleNamespace(numel=lambda: fields["shape"][0] * fields["shape"][-1], **fields)


def test_the_kernel_takes_cuda_bf16_inputs_of_few_rows_only(monkeypatch):
    for env in ("SPECDEC_BF16_CUDA_VARIANT",):
        monkeypatch.delenv(env, raising=False)
    # one MMA n-tile of tokens (the kernels take 16 where K % 32 == 0, measured slower than cuBLAS there)
    assert SKINNY_MAX_ROWS == 8
    assert skinny_takes(_input(8, 4096), 4096) and not skinny_takes(_input(9, 4096), 4096)
    assert skinny_takes(_input(8, 4104), 4104) and not skinny_takes(_input(16, 4104), 4104)
    assert not skinny_takes(_input(4, 4096, is_cuda=False), 4096)
    assert not skinny_takes(_input(4, 4096, dtype=torch.float16), 4096)
    assert not skinny_takes(_input(4, 4096), 2048)  # x's width is not the weight's
    assert not skinny_takes(_input(4, 100), 100)  # K % 8 != 0
    assert not skinny_takes(_input(4, 4096, requires_grad=True), 4096)
    with torch.no_grad():
        assert skinny_takes(_input(4, 4096, requires_grad=True), 4096)


def test_skinny_linear_falls_back_to_f_linear_where_the_kernel_does_not_take_the_input():
    w = torch.randn(8, 32).to(torch.bfloat16)
    x = torch.randn(40, 32).to(torch.bfloat16)  # more rows than any kernel takes
    b = torch.randn(8).to(torch.bfloat16)
    assert torch.equal(skinny_linear(x, w, b), F.linear(x, w, b))
