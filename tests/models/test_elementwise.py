"""The dense layers' element-wise backend: the switch, and the Triton kernels (interpreter) inside whole forwards."""

from __future__ import annotations

import pytest
import torch

import specdec.kernels.act as act
import specdec.kernels.norm as norm
import specdec.kernels.rope as rope
from specdec.models.elementwise import elementwise_backend, elementwise_kernels
from specdec.models.ragged import RaggedDenseTarget, RequestRows
from specdec.testing import tiny_target

TOKENS = torch.tensor([[5, 17, 3, 42, 8]])


def counting(monkeypatch) -> dict[str, int]:
    """Count the calls of each Triton entry point the dense layers reach, still running the kernels."""
    calls: dict[str, int] = {}
    for module, name in ((rope, "qk_norm_rope_triton"), (act, "silu_mul_triton"), (norm, "add_rms_norm_triton")):
        real = getattr(module, name)

        def wrapped(*args, _real=real, _name=name, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapped)
    return calls


def test_switch_checks_its_argument_restores_itself_and_yields_to_gradients():
    x = torch.ones(3)
    with pytest.raises(ValueError, match="backend"):
        with elementwise_kernels("cuda"):
            pass
    with elementwise_kernels("triton"):
        assert elementwise_backend(x) == "triton"
        assert elementwise_backend(x, torch.ones(3, requires_grad=True)) == "torch"  # the kernels have no backward
        with torch.no_grad():
            assert elementwise_backend(x, torch.ones(3, requires_grad=True)) == "triton"
    assert elementwise_backend(x) == "auto"


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_dense_forward_through_the_kernels_matches_the_reference(monkeypatch, model_type):
    target = tiny_target(model_type, seed=1)
    with torch.no_grad():
        ref = target(TOKENS).logits
        target.reset()
        calls = counting(monkeypatch)
        with elementwise_kernels("triton"):
            out = target(TOKENS).logits
    layers = target.config.num_layers
    # per layer: the MLP's norm after attention's residual add, the next layer's (or the final) norm after the MLP's
    assert calls == {"qk_norm_rope_triton": layers, "silu_mul_triton": layers, "add_rms_norm_triton": 2 * layers}
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert torch.equal(out.argmax(-1), ref.argmax(-1))


def test_packed_forward_through_the_kernels_matches_the_reference(monkeypatch):
    packed = RaggedDenseTarget(tiny_target("qwen3", seed=2), slots=2, layout="packed")
    requests = [RequestRows(0, TOKENS), RequestRows(1, TOKENS[:, :2])]
    with torch.no_grad():
        ref = packed.forward(requests)
        for slot in (0, 1):
            packed.reset(slot)
        calls = counting(monkeypatch)
        with elementwise_kernels("triton"):
            out = packed.forward(requests)
    layers = packed.config.num_layers
    assert calls == {"qk_norm_rope_triton": layers, "silu_mul_triton": layers, "add_rms_norm_triton": 2 * layers}
    for a, b in zip(out, ref):
        torch.testing.assert_close(a.logits, b.logits, rtol=1e-5, atol=1e-5)


def test_reference_switch_keeps_the_kernels_out(monkeypatch):
    target = tiny_target("qwen3", seed=1)
    calls = counting(monkeypatch)
    with torch.no_grad(), elementwise_kernels("torch"):
        target(TOKENS)
    assert calls == {}
