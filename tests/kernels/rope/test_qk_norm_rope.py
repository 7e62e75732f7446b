"""The dense attention's q/k RMSNorm + RoPE kernel (Triton interpreter on the CPU) against its PyTorch reference.

* q and k are strided views of one fused qkv tensor (``split`` then ``view``), as the model passes them; heads of
  awkward width (D = 2, 12: half not a power of two) and few rows, float32, float16 and bfloat16;
* without norm weights (Llama) the kernel is the reference bitwise in every dtype; with them (Qwen3) the norm's sum
  of squares is a tree reduction, so float32 agrees to 1e-6 and float16 / bfloat16 bitwise but for at most 2 % of
  the elements, those within two units in the last place;
* the reference is the dense attention's code before the kernel, written out;
* outputs are contiguous ``[B, H, T, D]`` / ``[B, Hkv, T, D]`` on both backends, zero rows work, mixed dtypes take
  the reference, and bad arguments raise naming the argument;
* mutations: a kernel that rounded once at the end, or skipped the norm's rounding of ``x_hat``, would fail the
  checks above.
"""

from __future__ import annotations

import pytest
import torch

from specdec.kernels.norm.naive import scaled_rms_norm_torch
from specdec.kernels.rope import qk_norm_rope, qk_norm_rope_cached
from specdec.kernels.rope.naive import qk_norm_rope_cached_torch, qk_norm_rope_torch, rotate_half

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (B, T, H, Hkv, D): one head each; a half of 6; grouped heads at a model's D = 64 (programs: B * T * (H + Hkv))
SHAPES = [(1, 1, 1, 1, 2), (2, 3, 3, 1, 12), (1, 2, 4, 2, 64)]


def qkv_views(shape, dtype, seed=0):
    """q ``[B, T, H, D]`` and k ``[B, T, Hkv, D]`` as the model makes them: views of the fused projection."""
    bsz, seqlen, heads, kv_heads, dim = shape
    gen = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(bsz, seqlen, (heads + 2 * kv_heads) * dim, generator=gen) * 3).to(dtype)
    q, k, _ = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    return q.view(bsz, seqlen, heads, dim), k.view(bsz, seqlen, kv_heads, dim)


def rope_tables(seqlen, dim, dtype, seed=0):
    """``cos``, ``sin [1, 1, T, D]`` as the model builds them, at random positions."""
    gen = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 4096, (seqlen,), generator=gen).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2).float() / dim))
    freqs = positions[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[None, None], emb.sin().to(dtype)[None, None]


def norm_weights(dim, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed + 100)
    return tuple((1 + 0.5 * torch.randn(dim, generator=gen)).to(dtype) for _ in range(2))


def ulps(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Units in the last place between two float16 / bfloat16 tensors (across zero too)."""
    keys = []
    for t in (got, want):
        bits = t.view(torch.int16).int()
        keys.append(torch.where(bits < 0, -(bits + 32768), bits))
    return (keys[0] - keys[1]).abs()


def assert_agrees(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    else:
        diff = ulps(got, want)
        assert (diff > 0).float().mean() <= 0.02 and int(diff.max()) <= 2, (
            f"{int((diff > 0).sum())} of {diff.numel()} differ, up to {int(diff.max())} ulp"
        )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rope_kernel_is_the_reference_bitwise(shape, dtype):
    q, k = qkv_views(shape, dtype)
    cos, sin = rope_tables(shape[1], shape[4], dtype)
    q_out, k_out = qk_norm_rope(q, k, cos, sin, None, None, 1e-6, backend="triton")
    q_want, k_want = qk_norm_rope_torch(q, k, cos, sin, None, None, 1e-6)
    bsz, seqlen, heads, kv_heads, dim = shape
    assert q_out.shape == (bsz, heads, seqlen, dim) and k_out.shape == (bsz, kv_heads, seqlen, dim)
    assert q_out.is_contiguous() and k_out.is_contiguous() and q_out.dtype == k_out.dtype == dtype
    assert torch.equal(q_out, q_want) and torch.equal(k_out, k_want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_norm_rope_kernel_matches_the_reference(shape, dtype):
    q, k = qkv_views(shape, dtype, seed=1)
    cos, sin = rope_tables(shape[1], shape[4], dtype, seed=1)
    q_weight, k_weight = norm_weights(shape[4], dtype, seed=1)
    q_out, k_out = qk_norm_rope(q, k, cos, sin, q_weight, k_weight, 1e-6, backend="triton")
    q_want, k_want = qk_norm_rope_torch(q, k, cos, sin, q_weight, k_weight, 1e-6)
    assert q_out.is_contiguous() and k_out.is_contiguous()
    assert_agrees(q_out, q_want)
    assert_agrees(k_out, k_want)


def test_any_input_strides_are_read_in_place():
    # q with a head-dim stride of 3, k transposed in (T, Hkv), cos and sin every other column of wider tables
    bsz, seqlen, heads, kv_heads, dim = 2, 2, 2, 3, 6
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(bsz, seqlen, heads, dim * 3, generator=gen).to(torch.bfloat16)[..., ::3]
    k = torch.randn(bsz, kv_heads, seqlen, dim, generator=gen).to(torch.bfloat16).transpose(1, 2)
    cos_wide, sin_wide = (t.repeat_interleave(2, dim=-1) for t in rope_tables(seqlen, dim, torch.bfloat16, seed=7))
    cos, sin = cos_wide[..., ::2], sin_wide[..., ::2]
    assert not any(t.is_contiguous() for t in (q, k, cos, sin))
    weights = norm_weights(dim, torch.bfloat16, seed=7)
    for q_weight, k_weight in ((None, None), weights):
        got = qk_norm_rope(q, k, cos, sin, q_weight, k_weight, 1e-6, backend="triton")
        want = qk_norm_rope_torch(q.contiguous(), k.contiguous(), cos.contiguous(), sin.contiguous(), q_weight, k_weight, 1e-6)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("qk_norm", [False, True])
def test_reference_is_the_dense_attention_code(qk_norm):
    # Attention.forward before the kernel, written out: q_norm / k_norm (the dense RMSNorm), transpose to
    # [B, H, T, D], then x * cos + _rotate_half(x) * sin with _rotate_half(x) = cat(-x2, x1)
    shape = (2, 3, 4, 2, 8)
    q, k = qkv_views(shape, torch.bfloat16, seed=2)
    cos, sin = rope_tables(3, 8, torch.bfloat16, seed=2)
    q_weight, k_weight = norm_weights(8, torch.bfloat16, seed=2) if qk_norm else (None, None)

    def rms_norm(x, weight):
        xf = x.float()
        return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    def rotate(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    want_q, want_k = (rms_norm(q, q_weight), rms_norm(k, k_weight)) if qk_norm else (q, k)
    want_q, want_k = want_q.transpose(1, 2), want_k.transpose(1, 2)
    want_q = want_q * cos + rotate(want_q) * sin
    want_k = want_k * cos + rotate(want_k) * sin
    got_q, got_k = qk_norm_rope_torch(q, k, cos, sin, q_weight, k_weight, 1e-6)
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
    assert torch.equal(rotate_half(q), rotate(q))


def test_off_cuda_auto_is_the_reference_bitwise_and_contiguous():
    q, k = qkv_views((2, 3, 4, 2, 8), torch.float32, seed=3)
    cos, sin = rope_tables(3, 8, torch.float32, seed=3)
    q_weight, k_weight = norm_weights(8, torch.float32, seed=3)
    for backend in ("auto", "torch"):
        got = qk_norm_rope(q, k, cos, sin, q_weight, k_weight, 1e-6, backend=backend)
        want = qk_norm_rope_torch(q, k, cos, sin, q_weight, k_weight, 1e-6)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert got[0].is_contiguous() and got[1].is_contiguous()


def test_mixed_dtypes_take_the_reference_and_promote():
    q, k = qkv_views((1, 2, 2, 1, 4), torch.bfloat16, seed=4)
    cos, sin = rope_tables(2, 4, torch.float32, seed=4)
    q_out, k_out = qk_norm_rope(q, k, cos, sin, None, None, 1e-6, backend="triton")
    q_want, k_want = qk_norm_rope_torch(q, k, cos, sin, None, None, 1e-6)
    assert q_out.dtype == k_out.dtype == torch.float32
    assert torch.equal(q_out, q_want) and torch.equal(k_out, k_want)


@pytest.mark.parametrize("shape", [(0, 3, 2, 1, 4), (2, 0, 2, 1, 4)])
def test_zero_rows(shape):
    q, k = qkv_views(shape, torch.float16)
    cos, sin = rope_tables(shape[1], shape[4], torch.float16)
    q_weight, k_weight = norm_weights(shape[4], torch.float16)
    for weights in ((None, None), (q_weight, k_weight)):
        q_out, k_out = qk_norm_rope(q, k, cos, sin, *weights, 1e-6, backend="triton")
        bsz, seqlen, heads, kv_heads, dim = shape
        assert q_out.shape == (bsz, heads, seqlen, dim) and k_out.shape == (bsz, kv_heads, seqlen, dim)


def test_bad_arguments_raise_naming_them():
    q, k = qkv_views((2, 3, 4, 2, 8), torch.float32)
    cos, sin = rope_tables(3, 8, torch.float32)
    w, _ = norm_weights(8, torch.float32)
    call = lambda **kw: qk_norm_rope(
        kw.get("q", q), kw.get("k", k), kw.get("cos", cos), kw.get("sin", sin), kw.get("qw"), kw.get("kw"), 1e-6,
        backend=kw.get("backend", "auto"),
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"q: expected 4 dims \[B, T, H, D\], got shape \(2, 3, 32\)"):
        call(q=q.reshape(2, 3, 32))
    with pytest.raises(ValueError, match=r"q: expected an even head dim D \(RoPE rotates its halves\), got D = 7"):
        call(q=q[..., :7], k=k[..., :7], cos=cos[..., :7], sin=sin[..., :7])
    with pytest.raises(ValueError, match=r"k: expected shape \(2, 3, Hkv, 8\) \(q's B, T and D\), got \(2, 3, 2, 6\)"):
        call(k=k[..., :6])
    with pytest.raises(ValueError, match=r"k: expected shape \(2, 3, Hkv, 8\) \(q's B, T and D\), got \(2, 2, 2, 8\)"):
        call(k=k[:, :2])
    with pytest.raises(ValueError, match=r"cos: expected shape \(1, 1, 3, 8\) \(q's T and D\), got \(1, 1, 2, 8\)"):
        call(cos=cos[:, :, :2])
    with pytest.raises(ValueError, match=r"sin: expected shape \(1, 1, 3, 8\) \(q's T and D\), got \(1, 3, 8\)"):
        call(sin=sin[0])
    with pytest.raises(ValueError, match="q_weight, k_weight: expected both tensors or both None, got Tensor and NoneType"):
        call(qw=w)
    with pytest.raises(ValueError, match=r"k_weight: expected shape \(8,\) \(q's head dim D\), got \(4,\)"):
        call(qw=w, kw=w[:4])
    with pytest.raises(TypeError, match="q_weight: expected a tensor or None, got list"):
        call(qw=[1.0] * 8, kw=w)
    with pytest.raises(TypeError, match="cos: expected a tensor, got float"):
        call(cos=1.0)
    with pytest.raises(ValueError, match="k: expected device cpu .q's., got meta"):
        call(k=k.to("meta"))
    with pytest.raises(ValueError, match="sin: expected device cpu .q's., got meta"):
        call(sin=sin.to("meta"))
    with pytest.raises(ValueError, match="k_weight: expected device cpu .q's., got meta"):
        call(qw=w, kw=w.to("meta"))
    with pytest.raises(ValueError, match=r"backend: expected one of \('auto', 'triton', 'torch'\), got 'cuda'"):
        call(backend="cuda")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mutation_rope_rounded_once_at_the_end_is_caught(dtype):
    # the bitwise check above fails a kernel that kept x * cos + rotate_half(x) * sin in float32 and rounded once
    shape = (2, 3, 3, 1, 12)
    q, k = qkv_views(shape, dtype)
    cos, sin = rope_tables(shape[1], shape[4], dtype)
    q_out, _ = qk_norm_rope(q, k, cos, sin, None, None, 1e-6, backend="triton")
    qf = q.float().transpose(1, 2)
    once = (qf * cos.float() + rotate_half(qf) * sin.float()).to(dtype)
    assert not torch.equal(q_out, once)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mutation_norm_without_its_intermediate_rounding_is_caught(dtype):
    # the tolerance above fails a kernel whose norm rounded w * x_hat once, skipping x_hat.to(dtype)
    shape = (1, 2, 4, 2, 64)
    q, k = qkv_views(shape, dtype, seed=1)
    cos, sin = rope_tables(shape[1], shape[4], dtype, seed=1)
    q_weight, k_weight = norm_weights(shape[4], dtype, seed=1)
    q_out, _ = qk_norm_rope(q, k, cos, sin, q_weight, k_weight, 1e-6, backend="triton")
    qf = q.float()
    skipped = (q_weight.float() * (qf * torch.rsqrt(qf.pow(2).mean(-1, keepdim=True) + 1e-6))).to(dtype)
    assert not torch.equal(skipped, scaled_rms_norm_torch(q, q_weight, 1e-6))
    mutant, _ = qk_norm_rope_torch(skipped, k, cos, sin, None, None, 1e-6)
    with pytest.raises(AssertionError, match="differ"):
        assert_agrees(q_out, mutant)


def caches(n, kv_heads, length, dim, dtype, heads_first=False):
    """Two zeroed ``[N, Hkv, L, D]`` caches; ``heads_first``: stored heads-major, as the packed runtimes keep them."""
    if heads_first:
        return tuple(torch.zeros(kv_heads, n, length, dim, dtype=dtype).transpose(0, 1) for _ in range(2))
    return tuple(torch.zeros(n, kv_heads, length, dim, dtype=dtype) for _ in range(2))


def v_view(shape, dtype):
    bsz, seqlen, _, kv_heads, dim = shape
    return (torch.randn(bsz, seqlen, kv_heads, 2 * dim) * 2).to(dtype)[..., ::2]  # strided along D


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("qk_norm", [False, True])
def test_cache_write_per_batch_row_is_the_reference(dtype, qk_norm):
    shape = (2, 3, 3, 1, 12)
    q, k = qkv_views(shape, dtype)
    v = v_view(shape, dtype)
    cos, sin = rope_tables(3, 12, dtype)
    weights = norm_weights(12, dtype) if qk_norm else (None, None)
    pos = torch.tensor([4, 0, 2])
    got, want = caches(2, 1, 6, 12, dtype), caches(2, 1, 6, 12, dtype)
    q_got = qk_norm_rope_cached(q, k, v, cos, sin, *weights, 1e-6, *got, pos, backend="triton")
    q_want = qk_norm_rope_cached_torch(q, k, v, cos, sin, *weights, 1e-6, *want, pos)
    check = torch.equal if not qk_norm else assert_agrees
    for a, b in ((q_got, q_want), *zip(got, want)):
        assert check(a, b) is not False
    assert torch.equal(got[1], want[1]) and not got[0][:, :, [1, 3, 5]].any()  # v copied exactly; other entries kept


@pytest.mark.parametrize("dtype", DTYPES)
def test_cache_write_of_packed_rows_into_heads_first_caches_is_the_reference_bitwise(dtype):
    shape = (1, 4, 4, 2, 64)
    q, k = qkv_views(shape, dtype, seed=3)
    v = v_view(shape, dtype)
    cos, sin = rope_tables(4, 64, dtype, seed=3)
    slot, pos = torch.tensor([2, 0, 2, 2]), torch.tensor([1, 0, 2, 3])
    got, want = caches(3, 2, 5, 64, dtype, heads_first=True), caches(3, 2, 5, 64, dtype, heads_first=True)
    q_got = qk_norm_rope_cached(q, k, v, cos, sin, None, None, 1e-6, *got, pos, slot, backend="triton")
    q_want = qk_norm_rope_cached_torch(q, k, v, cos, sin, None, None, 1e-6, *want, pos, slot)
    assert torch.equal(q_got, q_want) and q_got.is_contiguous()
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert torch.equal(got[0][2, :, 1], qk_norm_rope(q, k, cos, sin, None, None, 1e-6)[1][0, :, 0])  # row 0's k


def test_cache_positions_outside_the_cache_are_never_written():
    shape = (1, 2, 1, 1, 4)
    q, k = qkv_views(shape, torch.float32)
    v = v_view(shape, torch.float32)
    cos, sin = rope_tables(2, 4, torch.float32)
    stores = caches(1, 1, 4, 4, torch.float32)  # position 3 lies right after each 3-position cache view
    k_view, v_view_ = (t[:, :, :3] for t in stores)
    pos = torch.tensor([1, 3])
    qk_norm_rope_cached(q, k, v, cos, sin, None, None, 0.0, k_view, v_view_, pos, backend="triton")
    assert k_view[0, 0, 1].any() and v_view_[0, 0, 1].any()
    assert not any(t[0, 0, 3].any() for t in stores)  # position 3 = L: skipped, not written past the end
    with pytest.raises(IndexError):
        qk_norm_rope_cached(q, k, v, cos, sin, None, None, 0.0, k_view, v_view_, pos, backend="torch")


def test_cache_arguments_are_checked_by_name():
    shape = (1, 2, 2, 1, 4)
    q, k = qkv_views(shape, torch.float32)
    v = v_view(shape, torch.float32)
    cos, sin = rope_tables(2, 4, torch.float32)
    kc, vc = caches(1, 1, 5, 4, torch.float32)
    pos = torch.tensor([0, 1])
    cases = [
        (dict(v=v[:, :1]), "v: expected k's shape"),
        (dict(k_cache=torch.zeros(1, 2, 5, 4)), "k_cache: expected shape"),
        (dict(v_cache=torch.zeros(1, 1, 6, 4)), "v_cache: expected k_cache's shape"),
        (dict(v_cache=vc.half()), "v_cache: expected q's dtype"),
        (dict(cache_pos=pos.int()), "cache_pos: expected an int64 tensor of shape \\(2,\\)"),
        (dict(cache_pos=torch.tensor([0])), "cache_pos: expected an int64"),
        (dict(cache_slot=torch.tensor([0, 0, 0])), "cache_slot: expected an int64"),
        (dict(k_cache=torch.zeros(2, 1, 5, 4), v_cache=torch.zeros(2, 1, 5, 4)), "one cache a batch row"),
    ]
    base = dict(v=v, k_cache=kc, v_cache=vc, cache_pos=pos, cache_slot=None)
    for change, message in cases:
        args = {**base, **change}
        with pytest.raises(ValueError, match=message):
            qk_norm_rope_cached(q, k, args["v"], cos, sin, None, None, 0.0, args["k_cache"], args["v_cache"],
                                args["cache_pos"], args["cache_slot"])  # fmt: skip
    q2, k2 = qkv_views((2, 2, 2, 1, 4), torch.float32)
    with pytest.raises(ValueError, match="cache_slot: expected batch 1"):
        qk_norm_rope_cached(q2, k2, torch.zeros(2, 2, 1, 4), cos, sin, None, None, 0.0, *caches(2, 1, 5, 4, torch.float32),
                            pos, torch.tensor([0, 1]))  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
def test_q_scattered_into_the_slot_layout_is_the_reference_bitwise(dtype):
    shape = (1, 5, 4, 2, 12)
    q, k = qkv_views(shape, dtype, seed=4)
    v = v_view(shape, dtype)
    cos, sin = rope_tables(5, 12, dtype, seed=4)
    slot, pos, index = torch.tensor([1, 0, 1, 2, 2]), torch.tensor([3, 0, 4, 1, 2]), torch.tensor([0, 0, 1, 0, 1])
    out = {}
    for backend in ("triton", "torch"):
        kv = caches(3, 2, 5, 12, dtype, heads_first=True)
        buffer = torch.full((3, 4, 2, 12), 7.0, dtype=dtype)  # entries no row maps to keep their values
        got = qk_norm_rope_cached(q, k, v, cos, sin, None, None, 0.0, *kv, pos, slot, buffer, index, backend=backend)
        assert got is buffer
        out[backend] = (buffer, *kv)
    assert all(torch.equal(a, b) for a, b in zip(out["triton"], out["torch"]))
    q_rot = qk_norm_rope(q, k, cos, sin, None, None, 0.0)[0]  # [1, H, T, D]
    assert torch.equal(out["triton"][0][2, :, 1], q_rot[0, :, 4]) and bool((out["triton"][0][0, :, 1] == 7).all())


def test_q_scatter_skips_rows_outside_its_buffer_and_checks_its_arguments():
    shape = (1, 2, 2, 1, 4)
    q, k = qkv_views(shape, torch.float32)
    v = v_view(shape, torch.float32)
    cos, sin = rope_tables(2, 4, torch.float32)
    kv = caches(2, 1, 3, 4, torch.float32)
    slot, pos = torch.tensor([0, 1]), torch.tensor([0, 1])
    store = torch.zeros(2, 2, 2, 4)  # index 1 lies right after the one-row buffer view
    buffer = store[:, :, :1]
    qk_norm_rope_cached(q, k, v, cos, sin, None, None, 0.0, *kv, pos, slot, buffer, torch.tensor([0, 1]), backend="triton")
    assert buffer[0].any() and not store[:, :, 1].any()
    with pytest.raises(ValueError, match="q_out, q_index: expected both with a cache_slot"):
        qk_norm_rope_cached(q, k, v, cos, sin, None, None, 0.0, *kv, pos, slot, buffer, None)
    with pytest.raises(ValueError, match="q_out: expected a tensor of shape \\(N, 2, L, 4\\)"):
        qk_norm_rope_cached(q, k, v, cos, sin, None, None, 0.0, *kv, pos, slot, torch.zeros(2, 1, 1, 4), pos)
    with pytest.raises(ValueError, match="q_index: expected an int64"):
        qk_norm_rope_cached(q, k, v, cos, sin, None, None, 0.0, *kv, pos, slot, buffer, pos.int())


def test_float64_runs_the_reference_on_every_backend():
    g = torch.Generator().manual_seed(2)
    q, k = torch.randn(1, 3, 2, 8, generator=g).double(), torch.randn(1, 3, 1, 8, generator=g).double()
    cos, sin = torch.randn(1, 1, 3, 8, generator=g).double(), torch.randn(1, 1, 3, 8, generator=g).double()
    weights = torch.randn(8, generator=g).double(), torch.randn(8, generator=g).double()
    got = qk_norm_rope(q, k, cos, sin, *weights, 1e-6, backend="triton")
    expected = qk_norm_rope_torch(q, k, cos, sin, *weights, 1e-6)
    assert all(torch.equal(a, b.contiguous()) for a, b in zip(got, expected))


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_cached_form_names_a_table_or_weight_not_of_q_s_dtype(backend):
    """The reference promoted K and then failed to write it into q's-dtype caches with an error naming nothing."""
    q, k, v = (torch.randn(1, 2, heads, 8).bfloat16() for heads in (2, 1, 1))
    cos, sin = torch.randn(1, 1, 2, 8), torch.randn(1, 1, 2, 8)  # float32 tables
    k_cache, v_cache = torch.zeros(1, 1, 4, 8, dtype=torch.bfloat16), torch.zeros(1, 1, 4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"cos: expected q's dtype torch.bfloat16 \(the caches hold it\), got torch.float32"):
        qk_norm_rope_cached(q, k, v, cos, sin, None, None, 1e-6, k_cache, v_cache, torch.tensor([0, 1]), backend=backend)
    weights = (torch.ones(8), torch.ones(8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"q_weight: expected q's dtype"):
        qk_norm_rope_cached(q, k, v, cos.bfloat16(), sin.bfloat16(), *weights, 1e-6, k_cache, v_cache, torch.tensor([0, 1]))
