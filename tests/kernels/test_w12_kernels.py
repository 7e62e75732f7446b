"""W12 GEMM kernels under the Triton interpreter against the torch references."""

import ast
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import specdec
from specdec.formats import W12KernelConfig, W12Tensor, q_linear, w12_linear
from specdec.formats.w12 import decode_tiles
from specdec.kernels import w12_gemm
from specdec.kernels.w12_gemm import bf16_linear_triton, decode_w12_tiles, escape_tile_index, q_matmul, w12_matmul

SMALL = W12KernelConfig(block_m=16, block_n=16, block_k=32, split_k=1, num_warps=1)


def make_weight(n, k, seed=0, specials=True):
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.05).to(torch.bfloat16)
    if specials:
        w[0, 0] = 0.0
        w[n - 1, k - 1] = -0.0
        w[n // 2, k // 3] = 1e-30  # far below the window
        w[min(1, n - 1), k // 2] = 2.0**-130  # subnormal
    return w.contiguous()


def bits(t):
    return t.contiguous().view(torch.int16)


@pytest.mark.parametrize("n, k", [(40, 96), (17, 200), (32, 64)], ids=lambda v: str(v))
@pytest.mark.parametrize("mode", ["exact", "q"])
def test_decoded_tile_is_bit_identical(n, k, mode):
    w = make_weight(n, k)
    w12 = W12Tensor.from_bf16(w)
    tiles = decode_tiles(w12, mode=mode, config=W12KernelConfig(block_n=32, block_k=64))
    ref = w if mode == "exact" else w12.q_view()
    assert torch.equal(bits(tiles), bits(ref))


def test_decoded_tile_inf_nan_escapes():
    w = make_weight(16, 64)
    w[3, 5] = float("inf")
    w[4, 6] = float("-inf")
    w[5, 7] = torch.tensor(0x7F81, dtype=torch.int16).view(torch.bfloat16)  # NaN payload
    w12 = W12Tensor.from_bf16(w)
    assert torch.equal(bits(decode_tiles(w12, config=SMALL)), bits(w))


def test_mutation_escape_patch_is_needed():
    # The same planes with the escape list dropped: the decoded tile must differ.
    w = make_weight(16, 64)
    w12 = W12Tensor.from_bf16(w)
    assert w12.num_escapes > 0
    no_ptr = torch.zeros_like(w12.esc_ptr)
    stripped = decode_w12_tiles(w12.ae, w12.nib, w12.base, no_ptr, w12.esc_pos[:0], w12.esc_bits[:0], k=64, config=SMALL)
    assert not torch.equal(bits(stripped), bits(w))


def test_kernel_module_never_imports_formats():
    source = Path(w12_gemm.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not {name for name in imported if name.startswith("specdec")}, imported


def test_kernels_take_hand_built_planes():
    # Row of eight weights 1.0 (base 126, E = 1: AE byte 8), except the zero code at k = 3 and an
    # escape (4.0) over the zero code at k = 5; no W12Tensor. Groups of 4 are stored k0, k2, k1, k3,
    # so logical k = 3 is physical column 3 and k = 5 physical column 6.
    ae, nib = torch.full((1, 8), 8, dtype=torch.uint8), torch.zeros(1, 4, dtype=torch.uint8)
    ae[0, 3] = 0
    ae[0, 6] = 0
    base = torch.tensor([126], dtype=torch.uint8)
    esc_ptr, esc_pos = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([5], dtype=torch.int16)
    four = torch.tensor([0x4080], dtype=torch.int16)
    x = torch.arange(1, 9, dtype=torch.bfloat16)[None]
    exact = w12_matmul(x, ae, nib, base, esc_ptr, esc_pos, four, k=8)
    assert torch.equal(exact, torch.tensor([[36.0 - 4.0 - 6.0 + 4.0 * 6.0]], dtype=torch.bfloat16))
    # Q view: the weights read 1 + 8/128; the zero code and the unpatched escape slot read 0.
    assert torch.equal(q_matmul(x, ae, base, k=8), torch.tensor([[26.0 * 1.0625]], dtype=torch.bfloat16))
    tiles = decode_w12_tiles(ae, nib, base, esc_ptr, esc_pos, four, k=8)
    assert tiles.tolist() == [[1.0, 1.0, 1.0, 0.0, 1.0, 4.0, 1.0, 1.0]]


def test_public_names_still_resolve():
    assert specdec.formats.w12_linear is w12_linear and specdec.formats.q_linear is q_linear
    assert specdec.formats.W12KernelConfig is w12_gemm.W12KernelConfig
    assert specdec.kernels.w12_gemm is w12_gemm


def test_check_planes_refuses_a_row_base_the_decode_would_carry_out_of():
    """base 250 + E = 15 overflows the 8-bit exponent add into the sign bit and the next weight."""
    from specdec.kernels.w12_gemm import MAX_BASE, check_planes

    w12 = W12Tensor.from_bf16(make_weight(8, 64))
    planes = [w12.ae, w12.nib, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits]
    assert check_planes(*planes, k=64) == 8
    planes[2] = torch.full_like(w12.base, MAX_BASE)
    assert check_planes(*planes, k=64) == 8
    planes[2] = torch.full_like(w12.base, 250)
    with pytest.raises(ValueError, match=r"base: expected row bases <= 239 .*, got 250"):
        check_planes(*planes, k=64)


@pytest.mark.parametrize(
    "field, make, exc",
    [
        ("ae", lambda p: dict(p, ae=p["ae"].to(torch.int32)), TypeError),
        ("nib", lambda p: dict(p, nib=p["nib"][:, :-1].contiguous()), ValueError),
        ("base", lambda p: dict(p, base=p["base"][:-1]), ValueError),
        ("esc_bits", lambda p: dict(p, esc_bits=p["esc_bits"].to(torch.int32)), TypeError),
        ("esc_bits", lambda p: dict(p, esc_bits=p["esc_bits"][:0]), ValueError),
        ("esc_pos", lambda p: dict(p, esc_pos=p["esc_pos"].to(torch.int32)), TypeError),
        ("esc_ptr", lambda p: dict(p, esc_ptr=p["esc_ptr"][:-1]), ValueError),
        ("esc_ptr", lambda p: dict(p, esc_ptr=p["esc_ptr"] + 1), ValueError),
        ("esc_pos", lambda p: dict(p, esc_pos=p["esc_pos"] | 0x7F00), ValueError),
        ("k", lambda p: dict(p, k=p["k"] + 8), ValueError),
    ],
    ids=[
        "ae_dtype",
        "nib_width",
        "base_length",
        "esc_bits_dtype",
        "esc_bits_length",
        "esc_pos_dtype",
        "esc_ptr_length",
        "esc_ptr_offsets",
        "esc_pos_outside",
        "k_vs_width",
    ],
)
def test_bad_planes_name_the_argument(field, make, exc):
    w12 = W12Tensor.from_bf16(make_weight(8, 64))
    assert w12.num_escapes > 0
    planes = {name: getattr(w12, name) for name in W12Tensor._INNER} | {"k": 64}
    x = torch.randn(2, 64).to(torch.bfloat16)
    with pytest.raises(exc, match=field):
        w12_matmul(x, **make(planes))


@pytest.mark.parametrize(
    "lead, n, k, config",
    [
        ((1,), 48, 96, SMALL),
        ((3,), 40, 200, W12KernelConfig(block_n=32, block_k=64, split_k=2)),
        ((2, 9), 33, 64, SMALL),
        ((20,), 16, 128, W12KernelConfig(block_m=16, block_n=16, block_k=64, split_k=3)),
    ],
    ids=["M1", "M3_splitk_oddK", "M18_3d", "M20_two_m_tiles_split3"],
)
def test_exact_equals_same_tiling_bf16_and_reference(lead, n, k, config):
    w = make_weight(n, k)
    w12 = W12Tensor.from_bf16(w)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(*lead, k, generator=g).to(torch.bfloat16)
    bias = torch.randn(n, generator=g).to(torch.bfloat16)
    y = w12_linear(x, w12, bias, backend="triton", config=config)
    assert y.shape == (*lead, n)
    assert torch.equal(y, bf16_linear_triton(x, w, bias, config=config))
    ref = w12_linear(x, w12, bias, backend="torch")
    assert torch.equal(ref, F.linear(x, w, bias))
    torch.testing.assert_close(y.float(), ref.float(), rtol=2e-2, atol=2e-2)
    yq = q_linear(x, w12, backend="triton", config=config)
    torch.testing.assert_close(yq.float(), F.linear(x, w12.q_view()).float(), rtol=2e-2, atol=2e-2)


def test_output_written_everywhere_not_poisoned():
    w = make_weight(24, 64)
    w12 = W12Tensor.from_bf16(w)
    x = torch.randn(5, 64).to(torch.bfloat16)
    real_empty = torch.empty

    def poisoned(*a, **kw):
        t = real_empty(*a, **kw)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    torch.empty = poisoned
    try:
        y = w12_linear(x, w12, backend="triton", config=W12KernelConfig(block_n=16, block_k=32, split_k=2))
    finally:
        torch.empty = real_empty
    assert not torch.isnan(y).any()


def test_rebias_equals_exact_in_normal_range():
    w = make_weight(32, 64, specials=False)
    w[0, 0] = 0.0
    w12 = W12Tensor.from_bf16(w)
    x = torch.randn(3, 64).to(torch.bfloat16)
    cfg = W12KernelConfig(block_n=32, block_k=64)
    assert torch.equal(
        w12_linear(x, w12, backend="triton", rebias=True, config=cfg), w12_linear(x, w12, backend="triton", config=cfg)
    )
    scaled = decode_tiles(w12, mode="rebias", config=cfg).double()
    expect = w.double() * torch.exp2(112 - w12.base.double())[:, None]
    assert torch.equal(scaled, expect)


def test_rebias_edge_cases():
    # (1) overflow: half the row at 1.5 * 2^-12, half at 1.5 * 2^-27 forces base 100 < 112, so the rebiased
    # weights are 2^12 times larger; 2^126 activations overflow the fp32 sum there only.
    w = torch.full((16, 64), 1.5 * 2.0**-12, dtype=torch.bfloat16)
    w[:, 32:] = 1.5 * 2.0**-27
    w12 = W12Tensor.from_bf16(w)
    assert (w12.base == 100).all()
    x = torch.full((1, 64), 2.0**126, dtype=torch.bfloat16)
    cfg = W12KernelConfig(block_n=16, block_k=64)
    exact = w12_linear(x, w12, backend="triton", config=cfg)
    rebias = w12_linear(x, w12, backend="triton", rebias=True, config=cfg)
    assert torch.isfinite(exact).all() and not torch.isfinite(rebias).all()
    # (2) an escape that loses bits when rescaled is refused.
    w = make_weight(16, 64, specials=False)
    w[2, :] = 2.0**10  # base 137 -> scale 2^-25 would flush the subnormal below
    w[2, 3] = torch.tensor(0x0003, dtype=torch.int16).view(torch.bfloat16)  # subnormal, 2 bits
    with pytest.raises(ValueError, match="rebias"):
        w12_linear(torch.ones(1, 64, dtype=torch.bfloat16), W12Tensor.from_bf16(w), backend="triton", rebias=True, config=cfg)


def test_linear_module_with_w12_weight_triton_backend():
    lin = torch.nn.Linear(64, 48).to(torch.bfloat16)
    w = lin.weight.detach().clone()
    x = torch.randn(2, 64).to(torch.bfloat16)
    lin.weight = torch.nn.Parameter(W12Tensor.from_bf16(w, linear_backend="triton"), requires_grad=False)
    cfg_out = lin(x)
    torch.testing.assert_close(cfg_out.float(), F.linear(x, w, lin.bias).float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda w12: (torch.randn(2, 64), w12), TypeError, "x: expected dtype"),
        (lambda w12: (torch.randn(2, 63).to(torch.bfloat16), w12), ValueError, r"\[\.\.\., 64\]"),
        (lambda w12: (torch.randn(2, 64).to(torch.bfloat16), w12.to_bf16()), TypeError, "W12Tensor"),
        (lambda w12: (torch.randn(2, 64).to(torch.bfloat16).to("meta"), w12), ValueError, "device"),
    ],
    ids=["x_fp32", "k_mismatch", "plain_weight", "device_mix"],
)
def test_bad_inputs(make, exc, match):
    w12 = W12Tensor.from_bf16(make_weight(8, 64))
    x, w = make(w12)
    with pytest.raises(exc, match=match):
        w12_linear(x, w, backend="triton")
    with pytest.raises(exc, match=match):
        q_linear(x, w, backend="torch")


def test_bad_bias_and_backend():
    w12 = W12Tensor.from_bf16(make_weight(8, 64))
    x = torch.randn(2, 64).to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"bias: expected shape \(8,\)"):
        w12_linear(x, w12, torch.zeros(7, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="backend"):
        w12_linear(x, w12, backend="cuda")
    with pytest.raises(ValueError, match="block_k"):
        W12KernelConfig(block_k=48)


def weight_with_zeros_and_crowded_tile(n, k, seed=7):
    """Gaussian weight with zero rows/columns, signed zeros, a value with E = 0 and m_hi = 0, the value
    of the zero code, and one SMALL kernel tile (16 x 32) full of escapes."""
    w = make_weight(n, k, seed=seed)
    w[3] = 0.0
    w[:, [1, 6, k - 2]] = 0.0
    w[n - 2, 8:16] = -0.0
    w[16:32, 32:64] = torch.tensor(0x0005, dtype=torch.int16).view(torch.bfloat16)  # 512 subnormal escapes
    w[20, 40] = float("inf")
    # Row 5 has window [127, 142] (1.5 at the bottom, two tops near 2^15): 1 + 3/128 is in-window with
    # E = 0, m_hi = 0, B = 3, and -1.0 is the zero code's value, escaped.
    w[5] = 1.5
    w[5, 0], w[5, 1] = 1.5 * 2**15, 1.25 * 2**15
    w[5, 2], w[5, 3] = 1 + 3 / 128, -1.0
    w12 = W12Tensor.from_bf16(w.contiguous())
    assert int(w12.base[5]) == 127 and (5, 3) in set(zip(*(t.tolist() for t in w12.escape_coordinates())))
    return w.contiguous(), w12


@pytest.mark.parametrize("n, k", [(37, 200), (48, 72)], ids=str)
@pytest.mark.parametrize("mode", ["exact", "q"])
def test_decoded_tiles_with_zeros_and_crowded_escape_tile(n, k, mode):
    w, w12 = weight_with_zeros_and_crowded_tile(n, k)
    per_tile = escape_tile_index(w12.esc_ptr, w12.esc_pos, w12.esc_bits, n=n, k=k, block_n=16, block_k=32)[0]
    counts = (per_tile[1:] - per_tile[:-1]).tolist()
    assert max(counts) >= 512 and sum(c > 0 for c in counts) >= 3  # escapes in several kernel tiles
    tiles = decode_tiles(w12, mode=mode, config=SMALL)
    ref = w if mode == "exact" else w12.q_view()
    assert torch.equal(bits(tiles), bits(ref))
    if mode == "q":
        assert bits(tiles)[5, 2].item() == 0 and bits(tiles)[n - 2, 9].item() == -32768


@pytest.mark.parametrize("n, k, lead", [(37, 200, (3,)), (48, 72, (1,))], ids=str)
def test_gemm_with_zeros_and_crowded_escape_tile_equals_same_tiling_bf16(n, k, lead):
    w, w12 = weight_with_zeros_and_crowded_tile(n, k)
    w[20, 40] = 1.0  # keep the output finite; the inf decode is checked above
    w12 = W12Tensor.from_bf16(w.contiguous())
    g = torch.Generator().manual_seed(8)
    x = torch.randn(*lead, k, generator=g).to(torch.bfloat16)
    for config in (SMALL, W12KernelConfig(block_n=32, block_k=64, split_k=2)):
        y = w12_linear(x, w12, backend="triton", config=config)
        assert torch.equal(y, bf16_linear_triton(x, w, config=config))
        yq = q_linear(x, w12, backend="triton", config=config)
        assert torch.equal(yq, bf16_linear_triton(x, w12.q_view(), config=config))


def test_rebias_decodes_the_zero_code_to_zero():
    w = make_weight(32, 64, specials=False)
    w[3] = 0.0
    w[:, [1, 6]] = 0.0
    w[30, 8:16] = -0.0
    w12 = W12Tensor.from_bf16(w.contiguous())
    scaled = decode_tiles(w12, mode="rebias", config=SMALL)
    expect = w.double() * torch.exp2(112 - w12.base.double())[:, None]
    assert torch.equal(scaled.double(), expect)
    zeros = w == 0
    assert torch.equal(bits(scaled)[zeros], bits(w)[zeros])  # ±0 keep their sign


def test_mutation_zero_code_needs_the_masked_base():
    # With the base added to every half, the zero code would decode to ±2^(base-127): prove the test data hits it.
    w, w12 = weight_with_zeros_and_crowded_tile(37, 200)
    naive = w12.ae_logical().to(torch.int32)
    e = ((naive >> 3) & 0xF) + w12.base.to(torch.int32)[:, None]
    naive_bits = ((naive & 0x80) << 8) | (e << 7) | ((naive & 7) << 4) | w12.nibbles_logical()
    zeros = w == 0
    assert not torch.equal(naive_bits[zeros].to(torch.int16), bits(w)[zeros])
    assert torch.equal(bits(decode_tiles(w12, config=SMALL))[zeros], bits(w)[zeros])


@pytest.mark.parametrize("m", [1, 16, 33, 65, 128])
@pytest.mark.parametrize("k", [576, 4096, 12288])
def test_default_tiles_fit_the_shared_memory_budget(monkeypatch, m, k):
    """The H200 refused (128, 64, 256) x 3 stages (237,568 B > 232,448 B) for a 65-row verify pass."""
    import specdec.kernels.w12_gemm as w12_gemm

    monkeypatch.setattr(w12_gemm, "INTERPRET", False)
    monkeypatch.setattr(w12_gemm, "_num_sms", lambda device: 132)
    config = w12_gemm.default_config(m, 4096, k, torch.device("cpu"))
    need = w12_gemm.shared_memory_estimate(config.block_m, config.block_n, config.block_k, config.num_stages)
    assert need <= w12_gemm.SHARED_MEMORY_BUDGET < 232_448
    assert config.block_m >= min(m, 128)


def test_pack_escape_tiles_names_what_it_cannot_store():
    rows, cols, bits = torch.tensor([0, 1]), torch.tensor([258, 3]), torch.tensor([7, 9], dtype=torch.int16)
    with pytest.raises(ValueError, match=r"rows, cols, bits: expected one entry each an escape, got 2, 2, 3"):
        w12_gemm.pack_escape_tiles(rows, cols, torch.tensor([7, 9, 11], dtype=torch.int16), n=2, k=300)
    with pytest.raises(ValueError, match=r"rows, cols, bits: expected one entry each an escape, got 2, 1, 2"):
        w12_gemm.pack_escape_tiles(rows, torch.tensor([3]), bits, n=2, k=300)
    with pytest.raises(ValueError, match=r"rows: expected values in \[0, 2\), got 0\.\.5"):
        w12_gemm.pack_escape_tiles(torch.tensor([0, 5]), cols, bits, n=2, k=300)
    with pytest.raises(ValueError, match=r"cols: expected values in \[0, 300\), got -1\.\.258"):
        w12_gemm.pack_escape_tiles(rows, torch.tensor([258, -1]), bits, n=2, k=300)
    with pytest.raises(ValueError, match=r"cols: expected a 1-D integer tensor \[num_escapes\], got torch.float32 \(2,\)"):
        w12_gemm.pack_escape_tiles(rows, cols.float(), bits, n=2, k=300)
    ptr, pos, stored = w12_gemm.pack_escape_tiles(rows, cols, bits, n=2, k=300)
    assert ptr.tolist() == [0, 1, 2] and stored.tolist() == [9, 7]


def test_triton_path_takes_a_strided_bias_and_refuses_an_exact_read_without_nibbles():
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(16, 64, generator=g) * 0.1).to(torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    x = torch.randn(2, 64, generator=g).to(torch.bfloat16)
    bias = torch.randn(32, generator=g).to(torch.bfloat16)[::2]  # a view with stride 2
    assert torch.equal(w12_linear(x, w12, bias, backend="triton"), w12_linear(x, w12, bias.contiguous(), backend="triton"))
    with pytest.raises(TypeError, match=r"nib: expected a torch.Tensor, got NoneType"):
        w12_matmul(x, w12.ae, None, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits, k=64)
