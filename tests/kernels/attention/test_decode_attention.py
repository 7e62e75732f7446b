"""Split-KV decode attention (Triton interpreter on the CPU) against its reference, and the reference against SDPA.

* awkward shapes: 1, 5, 17 and 40 rows a KV head (padded to 16 / 32 / 64 in the kernel), 1 to 2200 slots, head
  dims 16 and 32, one to 35 splits (more than one combine tile, splits past the last slot, splits whose slots are all
  masked), a mask per batch;
* the reference against ``torch.nn.functional.scaled_dot_product_attention`` on the same boolean mask;
* a row with no allowed slot is zeros in both, as in SDPA; bad arguments raise naming them;
* a batch item's output equals its output alone, bit for bit (the split count does not depend on the batch);
* the token-major form equals the head-major output transposed, bit for bit, with several query heads a KV head and
  several tokens (a combine that stored row ``g * T + t`` at the wrong head or token fails), and its programmatic launch
  is decided by the rows the output projection reads (``B * T``), not the attention's rows (``B * G * T``);
* mutation: a combine that summed the splits without rescaling them to a common maximum fails the multi-split cases.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from specdec.kernels.attention import decode_attention, decode_attention_token_major, split_kv
from specdec.kernels.attention.naive import decode_attention_torch

CASES = [  # (batch, kv heads, rows, slots, head dim, splits)
    (1, 2, 4, 70, 16, None),
    (2, 1, 5, 33, 32, 3),
    (1, 1, 1, 200, 16, 7),
    (1, 1, 17, 40, 16, 2),
    (1, 2, 3, 1, 16, 1),
    (2, 1, 2, 64, 16, 5),
    (1, 1, 2, 2200, 16, 35),  # more splits than the combine's 32-split tile
    (1, 2, 40, 50, 16, 2),  # 40 rows padded to 64
]


def case(batch, heads, rows, slots, dim, *, per_batch=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, rows, dim, generator=gen)
    k, v = (torch.randn(batch, heads, slots, dim, generator=gen) for _ in range(2))
    lengths = torch.randint(1, slots + 1, (batch if per_batch else 1, rows), generator=gen)
    mask = torch.arange(slots) < lengths[..., None]  # [B or 1, R, S]: row r sees its first lengths[r] slots
    return q, k, v, mask[:, None]


@pytest.mark.parametrize("batch,heads,rows,slots,dim,splits", CASES)
def test_triton_matches_the_reference(batch, heads, rows, slots, dim, splits):
    q, k, v, mask = case(batch, heads, rows, slots, dim, per_batch=batch > 1)
    got = decode_attention(q, k, v, mask, splits=splits, backend="triton")
    want = decode_attention(q, k, v, mask, backend="torch")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_batch_item_equals_its_output_alone_bit_for_bit():
    # 1100 slots: enough that a split count taken from batch x heads would differ between batch 1 and batch 3
    q, k, v, mask = case(3, 2, 4, 1100, 16, per_batch=True, seed=4)
    batched = decode_attention(q, k, v, mask, backend="triton")
    for i in range(3):
        alone = decode_attention(q[i : i + 1], k[i : i + 1], v[i : i + 1], mask[i : i + 1], backend="triton")
        assert torch.equal(batched[i : i + 1], alone), i


def test_bfloat16_inputs_stay_within_bfloat16_rounding():
    q, k, v, mask = (t.to(torch.bfloat16) if t.is_floating_point() else t for t in case(1, 2, 5, 90, 32))
    got = decode_attention(q, k, v, mask, splits=3, backend="triton")
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(
        got.float(), decode_attention_torch(q, k, v, torch.where(mask, 0.0, float("-inf"))).float(), rtol=0, atol=2e-2
    )


@pytest.mark.parametrize("per_batch", [False, True])
def test_reference_matches_torch_sdpa(per_batch):
    q, k, v, mask = case(2, 3, 6, 50, 16, per_batch=per_batch)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(decode_attention(q, k, v, mask, backend="torch"), want, rtol=1e-5, atol=1e-6)


def test_a_row_with_no_allowed_slot_gives_sdpa_s_zeros_in_both():
    """A NaN row would reach every row of the next layer through the cache (``NaN + -inf`` is NaN)."""
    q, k, v, mask = case(1, 1, 3, 20, 16)
    mask = mask.clone()
    mask[..., 1, :] = False
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(want[0, 0, 1], torch.zeros(16))
    for backend in ("torch", "triton"):
        out = decode_attention(q, k, v, mask, splits=3, backend=backend)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6, msg=backend)


def test_masked_slots_do_not_count():
    q, k, v, _ = case(1, 1, 4, 48, 16)
    mask = (torch.arange(48) < torch.tensor([10, 20, 30, 5])[:, None])[None, None]  # no row sees slots 30-47
    before = decode_attention(q, k, v, mask, splits=4, backend="triton")
    v2 = v.clone()
    v2[:, :, 30:] = 1e3
    assert torch.equal(decode_attention(q, k, v2, mask, splits=4, backend="triton"), before)


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda q, k, v, m: (q[0], k, v, m), r"q: expected a 4-D tensor"),
        (lambda q, k, v, m: (q, k[:, :, :, :8], v, m), r"k_cache, v_cache: expected \[B=1, Hkv=1, S, D=16\]"),
        (lambda q, k, v, m: (q, k, v, m[..., :-1]), r"mask: expected \[1 or 1, 1, R=4, S=20\]"),
        (lambda q, k, v, m: (q, k, v, m.int()), r"mask: expected a boolean or floating"),
        (lambda q, k, v, m: (q[..., :12], k[..., :12], v[..., :12], m), r"q: expected a head dim that is a power of two"),
        (
            lambda q, k, v, m: (q, k.bfloat16(), v.bfloat16(), m),
            r"k_cache, v_cache: expected q's dtype torch.float32, got torch.bfloat16",
        ),
    ],
)
def test_bad_arguments_name_themselves(change, match):
    args = change(*case(1, 1, 4, 20, 16))
    with pytest.raises(ValueError, match=match):
        decode_attention(*args)
    with pytest.raises(ValueError, match=r"splits: expected a positive int or None, got 0"):
        decode_attention(*case(1, 1, 4, 20, 16), splits=0)
    with pytest.raises(ValueError, match=r"splits: expected a positive int or None, got True"):
        decode_attention(*case(1, 1, 4, 20, 16), splits=True)


def test_float64_runs_the_reference_on_every_backend():
    """The kernel's dots take 32- and 16-bit inputs (a float64 dot may not compile on the GPU)."""
    q, k, v, mask = (t.double() if t.is_floating_point() else t for t in case(1, 2, 3, 40, 16))
    assert torch.equal(decode_attention(q, k, v, mask, backend="triton"), decode_attention(q, k, v, mask, backend="torch"))


def test_triton_takes_a_permuted_query_and_an_empty_cache_as_the_reference():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 3, 2, 16, generator=g).transpose(1, 2)  # [B, Hkv, R, D], not contiguous
    k, v = torch.randn(1, 2, 5, 16, generator=g), torch.randn(1, 2, 5, 16, generator=g)
    mask = torch.ones(1, 1, 3, 5, dtype=torch.bool)
    torch.testing.assert_close(decode_attention(q, k, v, mask, backend="triton"), decode_attention_torch(q, k, v, mask))
    empty = decode_attention(q, k[:, :, :0], v[:, :, :0], mask[..., :0], backend="triton")
    assert torch.equal(empty, decode_attention_torch(q, k[:, :, :0], v[:, :, :0], mask[..., :0]))


TOKEN_MAJOR_CASES = [  # (batch, kv heads, query heads a KV head, tokens, slots, splits)
    (2, 2, 3, 5, 40, 3),
    (1, 1, 1, 4, 70, None),
    (1, 2, 4, 1, 33, 2),
    (1, 3, 2, 16, 90, 4),
]


def head_major_to_token_major(out: torch.Tensor, tokens: int) -> torch.Tensor:
    bsz, hkv, r, d = out.shape
    return out.reshape(bsz, hkv * (r // tokens), tokens, d).transpose(1, 2).reshape(bsz, tokens, -1)


@pytest.mark.parametrize("batch,heads,group,tokens,slots,splits", TOKEN_MAJOR_CASES)
def test_token_major_is_the_head_major_output_transposed_bit_for_bit(batch, heads, group, tokens, slots, splits):
    q, k, v, mask = case(batch, heads, group * tokens, slots, 16, per_batch=batch > 1, seed=3)
    got = decode_attention_token_major(q, k, v, mask, tokens, splits=splits, backend="triton")
    head_major = decode_attention(q, k, v, mask, splits=splits, backend="triton")
    assert got.shape == (batch, tokens, heads * group * 16) and got.is_contiguous()
    assert torch.equal(got, head_major_to_token_major(head_major, tokens))
    reference = decode_attention_token_major(q, k, v, mask, tokens, backend="torch")
    assert torch.equal(reference, head_major_to_token_major(decode_attention(q, k, v, mask, backend="torch"), tokens))
    torch.testing.assert_close(got, reference, rtol=1e-5, atol=1e-5)


def test_token_major_with_an_empty_cache_is_zeros():
    q, k, v, mask = case(1, 2, 6, 4, 16)
    got = decode_attention_token_major(q, k[:, :, :0], v[:, :, :0], mask[..., :0], 3, backend="triton")
    assert got.shape == (1, 3, 2 * 2 * 16) and not got.any()


@pytest.mark.parametrize("tokens", [0, 3, True, 2.0])
def test_token_major_names_a_bad_token_count(tokens):
    with pytest.raises(ValueError, match=rf"tokens: expected a positive int that divides q's 4 rows a KV head, got {tokens!r}"):
        decode_attention_token_major(*case(1, 1, 4, 20, 16), tokens)


def test_programmatic_launch_is_decided_by_the_rows_the_projection_reads(monkeypatch):
    """At 16 tokens with 4 query heads a KV head the attention has 64 rows a KV head but the output projection after
    it reads 16: the launch options see the 16 (at most ``PDL_MAX_ROWS``, so the pair launches programmatically)."""
    seen = []
    monkeypatch.setattr(split_kv, "triton_launch_options", lambda rows: seen.append(tuple(rows.shape)) or {"PDL": 0})
    q, k, v, mask = case(1, 2, 4 * 16, 30, 16)
    decode_attention_token_major(q, k, v, mask, 16, backend="triton")
    assert seen == [(16, 2 * 4 * 16)]


@pytest.mark.parametrize("num_warps", [0, 3, 32, 4.0, "8"])
def test_a_bad_warp_count_names_itself(num_warps):
    q, k, v = torch.ones(1, 1, 2, 16), torch.ones(1, 1, 3, 16), torch.ones(1, 1, 3, 16)
    mask = torch.zeros(1, 1, 2, 3)
    with pytest.raises(ValueError, match=r"num_warps: expected 1, 2, 4, 8 or 16, got"):
        split_kv.decode_attention_triton(q, k, v, mask, num_warps=num_warps)


def test_eight_warps_match_the_reference():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (
        torch.randn(1, 2, 8, 16, generator=gen),
        torch.randn(1, 2, 40, 16, generator=gen),
        torch.randn(1, 2, 40, 16, generator=gen),
    )
    mask = torch.zeros(1, 1, 8, 40)
    mask[..., 30:] = float("-inf")
    got = split_kv.decode_attention_triton(q, k, v, mask, splits=3, num_warps=8)
    torch.testing.assert_close(got, decode_attention_torch(q, k, v, mask), rtol=1e-5, atol=1e-5)
