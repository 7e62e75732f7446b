"""Target.reference_logits: a float32 (or float64) forward of a low-precision target, one layer at a time."""

import pytest
import torch

from specdec.models import HybridConfig, empty_target, random_hybrid_target
from specdec.testing import tiny_target


def float32_copy(target):
    copy = empty_target(target.config, dtype=torch.float32, device="cpu", max_seq_len=target.max_seq_len)
    for name, tensor in copy.state_dict().items():
        tensor.copy_(target.state_dict()[name])
    return copy


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_reference_logits_equal_a_float32_copy_of_a_bf16_target(model_type):
    target = tiny_target(model_type, seed=1, dtype=torch.bfloat16)
    tokens = torch.randint(0, target.vocab_size, (1, 37), generator=torch.Generator().manual_seed(0))
    want = float32_copy(target)(tokens).logits
    got = target.reference_logits(tokens)
    assert got.dtype == torch.float32 and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # the bf16 forward is far outside that tolerance, so the comparison can tell the two apart
    assert (target(tokens).logits - want).abs().max() > 1e-3


def test_reference_logits_in_float64_is_closer_than_bf16():
    target = tiny_target(seed=2, dtype=torch.bfloat16)
    tokens = torch.randint(0, target.vocab_size, (1, 19), generator=torch.Generator().manual_seed(1))
    want = float32_copy(target)(tokens).logits
    got = target.reference_logits(tokens, dtype=torch.float64)
    assert (got - want).abs().max() < 1e-4


def test_reference_logits_leave_the_cache_alone():
    target = tiny_target(seed=3, dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(2)
    prefix, rows = (torch.randint(0, target.vocab_size, (1, n), generator=gen) for n in (11, 4))
    target(prefix)
    target.commit(11)
    caches = [c.clone() for c in target.k_caches + target.v_caches]
    target.reference_logits(torch.cat([prefix, rows], dim=1))
    assert target.length == 11
    assert all(torch.equal(a, b) for a, b in zip(caches, target.k_caches + target.v_caches))
    after = target(rows).logits
    target.truncate(11)
    fresh = tiny_target(seed=3, dtype=torch.bfloat16)
    fresh(prefix)
    fresh.commit(11)
    assert torch.equal(after, fresh(rows).logits)


def test_reference_logits_reject_bad_inputs():
    target = tiny_target(seed=0)
    with pytest.raises(TypeError, match="dtype"):
        target.reference_logits(torch.tensor([[1, 2]]), dtype=torch.int32)
    with pytest.raises(TypeError, match=r"tokens: expected an int64 tensor \[1, T\], got torch.int32"):
        target.reference_logits(torch.tensor([[1, 2]], dtype=torch.int32))
    with pytest.raises(TypeError, match="tokens"):
        target.reference_logits(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="T = 0"):
        target.reference_logits(torch.zeros(1, 0, dtype=torch.long))


def test_reference_logits_refuse_hybrid_layers():
    cfg = HybridConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_layers=2,
        layer_types=("linear_attention", "full_attention"),
        num_heads=2,
        num_kv_heads=1,
        head_dim=16,
        rotary_dim=8,
        linear_num_key_heads=1,
        linear_num_value_heads=2,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_conv_kernel_dim=4,
        model_type="qwen3_5_text",
    )
    target = random_hybrid_target(cfg, dtype=torch.float32, device="cpu", max_seq_len=16)
    with pytest.raises(TypeError, match="reference_logits: expected dense DecoderLayer layers only"):
        target.reference_logits(torch.tensor([[1, 2]]))
