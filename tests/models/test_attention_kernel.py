"""The dense layers' cached attention through the split-KV kernel (Triton interpreter on the CPU) instead of SDPA.

* the choice: by default the kernel on CUDA and SDPA elsewhere; SDPA wherever the kernel cannot take the call (over
  128 rows a KV head, a head dim that is not a power of two from 16 to 256, a gradient); bad names raise;
* a tiny Qwen3-layout target's logits through the kernel equal SDPA's to float32 rounding, prefill and decode;
* greedy speculative decoding stays equal to greedy AR token for token with the kernel in every layer;
* the kernel is really called (a spy counts its calls).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch

import specdec as sd
import specdec.models.dense as dense
from specdec.models.attention_kernel import attention_choice, attention_kernel
from specdec.testing import tiny_target


@functools.cache
def _target():
    return tiny_target("qwen3", seed=2, max_seq_len=64, head_dim=16)


def test_the_choice_follows_the_block_and_what_the_kernel_takes():
    q = torch.ones(1, 2, 8, 16)
    assert attention_choice(q) == ("sdpa", None)
    with attention_kernel("split_kv", backend="triton"):
        assert attention_choice(q) == ("split_kv", "triton")
        assert attention_choice(torch.ones(1, 2, 129, 16)) == ("sdpa", None)
        assert attention_choice(torch.ones(1, 2, 8, 24)) == ("sdpa", None)
        assert attention_choice(torch.ones(1, 2, 8, 8)) == ("sdpa", None)
        assert attention_choice(torch.ones(1, 2, 8, 16, requires_grad=True)) == ("sdpa", None)
    assert attention_choice(q) == ("sdpa", None)
    with attention_kernel("sdpa"):
        assert attention_choice(q) == ("sdpa", None)
    with pytest.raises(ValueError, match=r"kernel: expected one of \('auto', 'sdpa', 'split_kv'\), got 'flash'"):
        with attention_kernel("flash"):
            pass
    with pytest.raises(ValueError, match=r"backend: expected one of"):
        with attention_kernel("split_kv", backend="cuda"):
            pass


def cuda_query(rows: int = 8, head_dim: int = 16, requires_grad: bool = False):
    """What :func:`attention_choice` reads of a CUDA query ``[1, 2, rows, head_dim]``, without a GPU."""
    return SimpleNamespace(shape=(1, 2, rows, head_dim), is_cuda=True, requires_grad=requires_grad)


def test_by_default_cuda_queries_take_the_kernel_and_sdpa_keeps_the_rest():
    assert attention_choice(cuda_query()) == ("split_kv", "auto")
    assert attention_choice(cuda_query(rows=129)) == ("sdpa", None)
    assert attention_choice(cuda_query(head_dim=24)) == ("sdpa", None)
    assert attention_choice(cuda_query(requires_grad=True)) == ("sdpa", None)
    with attention_kernel("sdpa"):
        assert attention_choice(cuda_query()) == ("sdpa", None)


def test_logits_through_the_kernel_equal_sdpa_to_rounding(monkeypatch):
    target = _target()
    calls = []
    kernel = dense.decode_attention_token_major
    monkeypatch.setattr(dense, "decode_attention_token_major", lambda *a, **k: calls.append(a[0].shape) or kernel(*a, **k))
    prompt = torch.tensor([[5, 9, 3, 11, 7, 2]])
    outs = {}
    for name in ("sdpa", "split_kv"):
        with attention_kernel(name, backend="triton"):
            target.reset()
            first = target(prompt).logits
            target.commit(prompt.shape[1])
            second = target(torch.tensor([[4]])).logits
        outs[name] = (first, second)
    assert calls and all(shape[-2] <= 128 for shape in calls)  # the kernel ran (prefill and decode rows)
    for got, want in zip(outs["split_kv"], outs["sdpa"]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_greedy_speculative_equals_greedy_ar_through_the_kernel():
    target = _target()
    prompt = torch.tensor([[4, 5, 6, 4, 5, 6, 4]])
    with attention_kernel("split_kv", backend="triton"):
        ar = sd.generate(target, prompt, 10).tokens
        spec = sd.generate(target, prompt, 10, drafter=sd.NGramDrafter()).tokens
    assert torch.equal(spec, ar)
