"""W12 format: bit-exact round trip for every bf16 pattern, window choice, views, I/O, convert."""

import copy
import json
import logging

import pytest
import torch
from torch import nn

from specdec.formats import W12Tensor, convert, load_file, load_into, save_file
from specdec.formats.w12 import W12_LAYOUT


def all_patterns() -> torch.Tensor:
    return torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


def test_all_65536_patterns_round_trip():
    w = all_patterns().reshape(256, 256).contiguous()
    w12 = W12Tensor.from_bf16(w)
    assert torch.equal(bits(w12.to_bf16()), bits(w))


@pytest.mark.parametrize("offset", range(16), ids=lambda o: f"E={o}")
def test_every_pattern_at_every_window_position(offset):
    # Row r: anchors pin the window to [e_r - offset, e_r - offset + 15], then the row holds all
    # 256 (sign, mantissa) combinations at exponent e_r, i.e. each pattern sits at window offset E.
    exps = torch.arange(1 + offset, 255 - (15 - offset))  # exponents with a full window around them
    sm = torch.arange(256)
    sign, mant = sm >> 7, sm & 0x7F
    rows = []
    for e in exps.tolist():
        lo, hi = e - offset, e - offset + 15
        body = (sign << 15) | (e << 7) | mant
        # Mantissa 1: (E = 0, m = 0) is the reserved zero code, an anchor there would not count.
        anchors = torch.tensor([(lo << 7) | 1, (hi << 7)] * 64)  # outvote any other window
        rows.append(torch.cat([body, anchors]))
    w = torch.stack(rows).to(torch.int32).to(torch.int16).view(torch.bfloat16).contiguous()
    w12 = W12Tensor.from_bf16(w)
    assert torch.equal(w12.base.long(), exps - offset)
    # At E = 0 the two patterns with mantissa 0 (±2^(base-127)) are the zero code's value: escaped.
    assert w12.num_escapes == (2 * len(exps) if offset == 0 else 0)
    assert torch.equal(bits(w12.to_bf16()), bits(w))


def test_special_values_are_exact_escapes():
    specials = torch.tensor(
        [0x0000, 0x8000, 0x0001, 0x807F, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0xFFFF, 0x0080, 0x7F7F, 0x3F80], dtype=torch.int32
    )
    w = specials.to(torch.int16).view(torch.bfloat16)[None, :].repeat(3, 1).contiguous()
    w12 = W12Tensor.from_bf16(w)
    out = w12.to_bf16()
    assert torch.equal(bits(out), bits(w))  # ±0, subnormals, ±inf, NaN payloads, extremes
    assert torch.isnan(out[0, 6]) and bits(out)[0, 7].item() == 0x7F81


def test_base_tie_goes_to_larger_base():
    # Two clusters 20 binades apart with equal counts: both windows hold 4 weights; pick the top.
    # Mantissas 0.5: exactly 2^(b-127) would be the zero code's value at base b and not count for it.
    w = torch.tensor([[1.5 * 2.0**-30] * 4 + [1.5] * 4], dtype=torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    assert w12.base.item() == 127  # every base in [112, 127] ties; the largest wins
    assert w12.num_escapes == 4
    assert torch.equal(bits(w12.to_bf16()), bits(w))


def test_base_minimises_escapes():
    # 5 small weights vs 3 large: the window follows the majority.
    w = torch.tensor([[2.0**-30] * 5 + [1.0] * 3], dtype=torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    assert w12.num_escapes == 3


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 9), (17, 33), (4, 64)], ids=str)
def test_awkward_shapes_and_sizes(shape):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(*shape, generator=g).to(torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    assert torch.equal(bits(w12.to_bf16()), bits(w))
    assert tuple(w12.shape) == shape and w12.dtype == torch.bfloat16
    k_pad = (shape[1] + 7) // 8 * 8
    tiles = -(-shape[0] // 256) * -(-shape[1] // 256)
    expected = shape[0] * k_pad + shape[0] * k_pad // 2 + shape[0] + 4 * (tiles + 1) + 4 * w12.num_escapes
    assert w12.nbytes == expected
    assert w12.bits_per_weight == pytest.approx(8 * expected / (shape[0] * shape[1]))


def test_plane_layout_matches_docs():
    # logical k -> AE byte at physical k0, k2, k1, k3; nibble slots k0, k2, k4, k6, k1, k3, k5, k7.
    w = torch.tensor([[1.0 + i / 128 for i in range(8)]], dtype=torch.bfloat16)  # E equal, m = i
    w12 = W12Tensor.from_bf16(w)
    assert w12.ae[0].tolist() == [(w12.ae_logical()[0, i]).item() for i in (0, 2, 1, 3, 4, 6, 5, 7)]
    word = int.from_bytes(bytes(w12.nib[0].tolist()), "little")
    slots = [(word >> (4 * s)) & 0xF for s in range(8)]
    assert slots == [0, 2, 4, 6, 1, 3, 5, 7]


def test_gaussian_escape_fraction_and_size():
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(256, 4096, generator=g) * 0.02).to(torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    assert w12.escape_fraction < 3e-4
    assert 12.0 < w12.bits_per_weight < 12.02


def test_q_view_is_midpoint_decode():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(8, 32, generator=g).to(torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    q = bits(w12.q_view()).to(torch.int32) & 0xFFFF
    orig = bits(w).to(torch.int32) & 0xFFFF
    inwin = torch.ones_like(orig, dtype=torch.bool)
    rows, cols = w12.escape_coordinates()
    inwin[rows, cols] = False
    inwin &= (w12.ae_logical() & 0x7F) != 0  # AE byte of the zero code reads as ±0 (tested below)
    assert inwin.float().mean() > 0.95
    assert torch.equal(q[inwin], ((orig & ~0xF) | 0x8)[inwin])


@pytest.mark.parametrize(
    "bad, exc",
    [
        (torch.zeros(4, 4), TypeError),
        (torch.zeros(4, dtype=torch.bfloat16), ValueError),
        (torch.zeros(2, 4, 4, dtype=torch.bfloat16), ValueError),
        (torch.zeros(4, 6, dtype=torch.bfloat16)[:, ::2], ValueError),
        ([[1.0]], TypeError),
    ],
    ids=["fp32", "1d", "3d", "non_contiguous", "list"],
)
def test_bad_weights_rejected(bad, exc):
    with pytest.raises(exc, match="weight"):
        W12Tensor.from_bf16(bad)


def test_safetensors_round_trip(tmp_path):
    w = all_patterns().reshape(512, 128).contiguous()
    w12 = W12Tensor.from_bf16(w)
    plain = torch.randn(3, 5)
    path = str(tmp_path / "w.safetensors")
    save_file({"a.weight": w12, "b": plain}, path)
    loaded = load_file(path)
    assert isinstance(loaded["a.weight"], W12Tensor)
    assert torch.equal(bits(loaded["a.weight"].to_bf16()), bits(w))
    assert torch.equal(loaded["b"], plain)


def tiny_model(seed=0, dtype=torch.bfloat16) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.ModuleDict(
        {
            "qkv": nn.Linear(64, 96, bias=False),
            "gate_up": nn.Linear(64, 128, bias=True),
            "lm_head": nn.Linear(64, 40, bias=False),
            "norm": nn.LayerNorm(64),
        }
    )
    return model.to(dtype)


def run(model, x):
    return [m(x) for k, m in model.items() if k != "norm"]


def test_convert_is_bit_identical_with_torch_backend():
    model = tiny_model()
    x = torch.randn(3, 5, 64).to(torch.bfloat16)
    before = run(model, x)
    report = convert(model, skip=("lm_head",), linear_backend="torch")
    assert set(report.tensors) == {"qkv.weight", "gate_up.weight"}
    assert "lm_head.weight" in report.skipped
    assert isinstance(model["qkv"].weight, W12Tensor) and isinstance(model["qkv"].weight, nn.Parameter)
    assert report.tensors["qkv.weight"].shape == (96, 64)
    after = run(model, x)
    for a, b in zip(before, after):
        assert torch.equal(a, b)


def test_convert_refuses_high_escape_fraction_and_leaves_module_untouched():
    model = tiny_model()
    with torch.no_grad():
        model["gate_up"].weight[:, :8] = 2.0**-130  # 1/8 subnormals -> escapes
    with pytest.raises(ValueError, match=r"gate_up\.weight: escape fraction 1\.250e-01"):
        convert(model, max_escape_fraction=1e-3)
    assert not any(isinstance(m.weight, W12Tensor) for k, m in model.items() if k != "norm")
    convert(model, max_escape_fraction=0.2)
    assert isinstance(model["gate_up"].weight, W12Tensor)


def test_mutation_bound_check_is_the_guard(monkeypatch):
    # Break the escape counter: the guard must then let the tensor through (proves the check bites).
    model = tiny_model()
    with torch.no_grad():
        model["qkv"].weight[:, :8] = 2.0**-130
    monkeypatch.setattr(W12Tensor, "escape_fraction", property(lambda self: 0.0))
    convert(model, max_escape_fraction=1e-3)
    assert isinstance(model["qkv"].weight, W12Tensor)


def test_converted_model_reloads_bit_exact(tmp_path):
    model = tiny_model()
    convert(model, linear_backend="torch")
    path = str(tmp_path / "m.safetensors")
    save_file(model, path)
    fresh = tiny_model(seed=1)
    convert(fresh, linear_backend="torch")
    load_into(fresh, path)
    for name, p in model.state_dict().items():
        q = fresh.state_dict()[name]
        a = p.to_bf16() if isinstance(p, W12Tensor) else p
        b = q.to_bf16() if isinstance(q, W12Tensor) else q
        assert torch.equal(bits(a), bits(b)), name


def test_w12_weight_is_read_only_and_other_ops_decode():
    w = torch.randn(4, 8).to(torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    assert torch.equal(w12 + 0, w + 0)
    with pytest.raises(TypeError, match="read-only"):
        w12.add_(1)
    with pytest.raises(TypeError, match="cannot be cast"):
        w12.to(torch.float32)
    assert isinstance(w12.to("cpu"), W12Tensor)


def test_only_ops_that_write_a_w12_weight_are_refused():
    # an op that reads the weight and writes a plain tensor decodes it: a copy, an out=, loading a state dict
    w = torch.randn(4, 8).to(torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    assert torch.equal(torch.empty(4, 8, dtype=torch.bfloat16).copy_(w12), w)
    assert torch.equal(torch.add(w12, 1, out=torch.empty(4, 8, dtype=torch.bfloat16)), w + 1)
    linear = torch.nn.Linear(8, 4, bias=False).to(torch.bfloat16)
    linear.load_state_dict({"weight": w12})
    assert torch.equal(linear.weight, w)
    for write in (lambda: w12.zero_(), lambda: w12.copy_(w), lambda: torch.add(w, 1, out=w12)):
        with pytest.raises(TypeError, match=r"W12Tensor is read-only; aten\.\w+"):
            write()
    assert torch.equal(w12.to_bf16(), w)


def test_convert_refuses_float32_weights_and_names_them():
    model = tiny_model(dtype=torch.float32)
    expected = r"module: expected bf16 weights, got qkv\.weight \(torch\.float32\).*dtype=torch\.bfloat16"
    with pytest.raises(TypeError, match=expected):
        convert(model)
    assert all(m.weight.dtype == torch.float32 and not isinstance(m.weight, W12Tensor) for m in model.values())


def test_convert_refuses_a_float32_layer_among_bf16_ones():
    model = tiny_model()
    model["gate_up"].float()
    with pytest.raises(TypeError, match=r"gate_up\.weight \(torch\.float32\)"):
        convert(model)
    assert not isinstance(model["qkv"].weight, W12Tensor)


def test_convert_with_dtype_casts_first_and_is_exact_for_the_bf16_weights():
    model = tiny_model(dtype=torch.float32)
    cast = copy.deepcopy(model).to(torch.bfloat16)  # what dtype=torch.bfloat16 promises to encode
    x = torch.randn(3, 64).to(torch.bfloat16)
    report = convert(model, dtype=torch.bfloat16, skip=("lm_head",), linear_backend="torch")
    assert set(report.tensors) == {"qkv.weight", "gate_up.weight"}
    assert torch.equal(bits(model["qkv"].weight.to_bf16()), bits(cast["qkv"].weight))
    assert model["gate_up"].bias.dtype == torch.bfloat16 and model["norm"].weight.dtype == torch.bfloat16
    assert model["lm_head"].weight.dtype == torch.bfloat16  # skipped from W12, still cast
    for a, b in zip(run(model, x), run(cast, x)):
        assert torch.equal(a, b)


def test_convert_rejects_a_dtype_other_than_bf16():
    with pytest.raises(ValueError, match=r"dtype: .*torch\.bfloat16, got torch\.float16"):
        convert(tiny_model(), dtype=torch.float16)


def test_convert_reports_and_logs_what_it_left_and_why(caplog):
    model = tiny_model()
    with caplog.at_level(logging.INFO, logger="specdec"):
        report = convert(model, skip=("lm_head",), linear_backend="torch")
    assert report.skipped == {"lm_head.weight": "matches skip entry 'lm_head'"}
    assert "left as it was: matches skip entry 'lm_head'" in str(report)
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "specdec")
    assert "qkv.weight" in logged and "gate_up.weight" in logged
    assert "left lm_head.weight as it was: matches skip entry 'lm_head'" in logged


def test_convert_raises_when_nothing_is_convertible():
    with pytest.raises(ValueError, match="module: expected at least one nn.Linear to convert, found none"):
        convert(nn.Sequential(nn.LayerNorm(8)).to(torch.bfloat16))
    model = tiny_model()
    convert(model)
    with pytest.raises(ValueError, match="already a W12Tensor"):
        convert(model)


def test_convert_encodes_a_strided_weight():
    model = tiny_model()
    strided = model["qkv"].weight.detach().t().contiguous().t()
    model["qkv"].weight = nn.Parameter(strided)
    report = convert(model)
    assert "qkv.weight" in report.tensors
    assert torch.equal(bits(model["qkv"].weight.to_bf16()), bits(strided))


def escaped_positions(w12: W12Tensor) -> set[tuple[int, int]]:
    rows, cols = w12.escape_coordinates()
    return set(zip(rows.tolist(), cols.tolist()))


def test_all_patterns_zeros_have_a_code_and_everything_else_escapes_as_expected():
    w = all_patterns().reshape(256, 256).contiguous()
    w12 = W12Tensor.from_bf16(w)
    raw = bits(w).to(torch.int32) & 0xFFFF
    escaped = escaped_positions(w12)
    assert (0, 0) not in escaped and (128, 0) not in escaped  # +0 is pattern 0x0000, -0 is 0x8000
    exp = (raw >> 7) & 0xFF
    special = (exp == 0) | (exp == 255)
    # Subnormals, inf and NaN have no code: all of them escape, the two zeros excepted.
    assert int(special.sum()) - 2 <= w12.num_escapes
    rows, cols = w12.escape_coordinates()
    assert not torch.any((raw[rows, cols] & 0x7FFF) == 0)


def test_zero_rows_columns_and_signed_zeros_are_not_escapes():
    g = torch.Generator().manual_seed(3)
    w = (torch.randn(40, 300, generator=g) * 0.02).to(torch.bfloat16)
    w[[2, 17, 39]] = 0.0
    w[:, [0, 5, 258, 299]] = 0.0
    w[5, 10:20] = -0.0
    w[17, 7] = -0.0  # a -0 inside a zero row
    w = w.contiguous()
    w12 = W12Tensor.from_bf16(w)
    out = w12.to_bf16()
    assert torch.equal(bits(out), bits(w))  # -0 keeps its sign bit
    assert bits(out)[5, 10].item() == -32768 and bits(out)[2, 0].item() == 0
    escaped = escaped_positions(w12)
    zeros = {(r, c) for r, c in zip(*torch.nonzero(w == 0, as_tuple=True)) for r, c in [(int(r), int(c))]}
    assert not escaped & zeros
    assert w12.base[2].item() == 239  # a row with nothing to place in a window


def test_all_zero_matrix_costs_twelve_bits_plus_base_and_offsets():
    w12 = W12Tensor.from_bf16(torch.zeros(512, 1024, dtype=torch.bfloat16))
    assert w12.num_escapes == 0
    assert torch.equal(bits(w12.to_bf16()), bits(torch.zeros(512, 1024, dtype=torch.bfloat16)))
    assert w12.bits_per_weight == pytest.approx(12 + 8 / 1024 + 8 * 4 * (2 * 4 + 1) / (512 * 1024))


def test_value_of_the_reserved_code_escapes_exactly():
    # Window [127, 142]: the tops are 1.x * 2^15 and 1.5 pins the bottom; 1.0 = 2^(127-127) would be
    # (E = 0, m = 0), the zero code.
    w = torch.tensor([[1.0, 1.5 * 2**15, 1.25 * 2**15, 1.75 * 2**15, -1.0, 0.0, 1.5]], dtype=torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    assert w12.base.item() == 127
    assert escaped_positions(w12) == {(0, 0), (0, 4)}
    assert torch.equal(bits(w12.to_bf16()), bits(w))


def test_window_choice_counts_the_reserved_code_as_an_escape():
    # Three 1.0 and two 1.5 * 2^15: base 127 holds all five only if 1.0 had a code; it does not, so the
    # best window is the largest base that holds the three 1.0 at E >= 1 (base 126), escaping the two tops.
    w = torch.tensor([[1.0, 1.0, 1.0, 1.5 * 2**15, 1.5 * 2**15]], dtype=torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    assert w12.base.item() == 126
    assert escaped_positions(w12) == {(0, 3), (0, 4)}
    assert torch.equal(bits(w12.to_bf16()), bits(w))


def test_escapes_in_several_tiles_and_a_crowded_tile_round_trip():
    g = torch.Generator().manual_seed(4)
    w = (torch.randn(300, 520, generator=g) * 0.02).to(torch.bfloat16)
    specials = torch.tensor([0x0001, 0x807F, 0x7F80, 0xFF80, 0x7FC1], dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    spots = [(0, 0), (255, 255), (256, 0), (299, 519), (10, 300), (260, 511)]
    for i, (r, c) in enumerate(spots):
        w[r, c] = specials[i % len(specials)]
    w[100:140, 260:300] = specials[0]  # 1600 escapes in tile (0, 1)
    w = w.contiguous()
    w12 = W12Tensor.from_bf16(w)
    assert torch.equal(bits(w12.to_bf16()), bits(w))
    assert set(spots) <= escaped_positions(w12)
    counts = (w12.esc_ptr[1:] - w12.esc_ptr[:-1]).tolist()
    assert len(counts) == 2 * 3 and counts[1] >= 1600 and sum(counts) == w12.num_escapes
    assert w12.esc_pos.dtype == torch.int16 and w12.esc_bits.dtype == torch.int16


def test_bits_per_weight_bound_on_gaussian_with_zero_rows_and_columns():
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(4096, 4096, generator=g) * 0.02).to(torch.bfloat16)
    w[[7, 1000, 4095]] = 0.0
    w[:, [0, 31, 2048, 4000]] = 0.0
    w12 = W12Tensor.from_bf16(w.contiguous())
    assert w12.escape_fraction < 2e-4
    assert w12.bits_per_weight <= 12.01
    assert torch.equal(bits(w12.to_bf16()), bits(w))


def test_q_view_reads_the_zero_code_as_signed_zero():
    w = torch.tensor([[1.0, 1.5 * 2**15, 0.0, -0.0, 1.0 + 3 / 128, 2.0**-130]], dtype=torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)  # base 127: 1.0 escapes; 1 + 3/128 is (E = 0, m_hi = 0, B = 3)
    q = bits(w12.q_view()).tolist()[0]
    assert q[2] == 0 and q[3] == -32768  # zeros
    assert q[0] == 0 and q[5] == 0  # escaped slots hold the zero code
    assert q[4] == 0  # in-window, but the AE byte alone is the zero code
    assert w12.q_view()[0, 1].item() == pytest.approx((1.5 + 8 / 128) * 2**15)


def test_loading_a_file_in_another_layout_names_the_expected_one(tmp_path):
    from safetensors.torch import save_file as raw_save

    # Planes as a file without the layout tag holds them: flat int32 rows/cols escape list.
    flat = {
        "lin.weight.__w12__.ae": torch.zeros(2, 8, dtype=torch.uint8),
        "lin.weight.__w12__.nib": torch.zeros(2, 4, dtype=torch.uint8),
        "lin.weight.__w12__.base": torch.full((2,), 127, dtype=torch.uint8),
        "lin.weight.__w12__.esc_rows": torch.zeros(1, dtype=torch.int32),
        "lin.weight.__w12__.esc_cols": torch.zeros(1, dtype=torch.int32),
        "lin.weight.__w12__.esc_bits": torch.zeros(1, dtype=torch.int16),
    }
    path = str(tmp_path / "other.safetensors")
    raw_save(flat, path, metadata={"format": "pt", "w12_shapes": '{"lin.weight": [2, 8]}'})
    with pytest.raises(ValueError, match=r"another layout.*esc_cols.*expected w12_layout .*esc_ptr, esc_pos, esc_bits") as err:
        load_file(path)
    assert W12_LAYOUT in str(err.value)


def test_loading_inconsistent_escape_offsets_names_the_plane(tmp_path):
    w = torch.tensor([[1.0, 2.0**-130, 3.0]], dtype=torch.bfloat16)
    w12 = W12Tensor.from_bf16(w)
    path = str(tmp_path / "w.safetensors")
    save_file({"a": w12}, path)
    assert load_file(path)["a"].num_escapes == 1
    broken = W12Tensor(w12.ae, w12.nib, w12.base, torch.tensor([0, 2], dtype=torch.int32), w12.esc_pos, w12.esc_bits, (1, 3))
    save_file({"a": broken}, path)
    with pytest.raises(ValueError, match=r"esc_ptr: expected non-decreasing offsets from 0 to 1"):
        load_file(path)


def test_convert_takes_one_skip_name_as_a_string_and_refuses_names_matching_nothing():
    model = tiny_model()
    report = convert(model, skip="lm_head", linear_backend="torch")  # one name, not the letters of one
    assert set(report.skipped) == {"lm_head.weight"} and not isinstance(model["lm_head"].weight, W12Tensor)
    fresh = tiny_model()
    with pytest.raises(ValueError, match=r"skip: entries \['lm_haed'\] match no nn.Linear of module"):
        convert(fresh, skip=("lm_haed",))
    assert not any(isinstance(m.weight, W12Tensor) for k, m in fresh.items() if k != "norm")  # nothing swapped
    with pytest.raises(TypeError, match="skip: expected module names"):
        convert(fresh, skip=(3,))


def test_file_keeps_each_weight_linear_backend_and_view(tmp_path):
    w = torch.randn(8, 16).to(torch.bfloat16)
    exact = W12Tensor.from_bf16(w, linear_backend="torch")
    path = str(tmp_path / "w.safetensors")
    save_file({"a": exact, "b": exact.as_q_weight(), "c": W12Tensor.from_bf16(w)}, path)
    loaded = load_file(path)
    assert [(loaded[n].linear_backend, loaded[n].linear_view) for n in "abc"] == [
        ("torch", "exact"),
        ("torch", "q"),
        ("auto", "exact"),
    ]


def test_tied_weights_save_once_and_reload_tied(tmp_path):
    """A tied embedding and lm_head (one tensor under two names) and a W12 linear beside them round-trip."""
    model = nn.ModuleDict({"embed": nn.Embedding(40, 64), "lm_head": nn.Linear(64, 40, bias=False), "up": nn.Linear(64, 32)})
    model = model.to(torch.bfloat16)
    model["lm_head"].weight = model["embed"].weight
    convert(model, skip=("lm_head",), linear_backend="torch")
    path = str(tmp_path / "tied.safetensors")
    save_file(model, path)
    loaded = load_file(path)
    assert loaded["lm_head.weight"] is loaded["embed.weight"]
    assert torch.equal(loaded["embed.weight"], model["embed"].weight)
    fresh = nn.ModuleDict({"embed": nn.Embedding(40, 64), "lm_head": nn.Linear(64, 40, bias=False), "up": nn.Linear(64, 32)})
    fresh = fresh.to(torch.bfloat16)
    fresh["lm_head"].weight = fresh["embed"].weight
    convert(fresh, skip=("lm_head",), linear_backend="torch")
    load_into(fresh, path)
    assert fresh["lm_head"].weight is fresh["embed"].weight
    assert torch.equal(fresh["embed"].weight, model["embed"].weight)
    assert torch.equal(bits(fresh["up"].weight.to_bf16()), bits(model["up"].weight.to_bf16()))


def test_tied_w12_weights_save_once_and_reload_tied(tmp_path):
    # state_dict() hands out a new W12Tensor wrapper for each name; the planes they share make them one weight
    from safetensors import safe_open

    model = nn.ModuleDict({"a": nn.Linear(64, 32, bias=False), "b": nn.Linear(64, 32, bias=False)}).to(torch.bfloat16)
    convert(model, linear_backend="torch")
    model["b"].weight = model["a"].weight
    path = str(tmp_path / "tied_w12.safetensors")
    save_file(model, path)
    with safe_open(path, "pt") as f:
        assert sorted(f.keys()) == sorted(f"a.weight.__w12__.{inner}" for inner in W12Tensor._INNER)
    loaded = load_file(path)
    assert loaded["b.weight"] is loaded["a.weight"]
    assert torch.equal(bits(loaded["a.weight"].to_bf16()), bits(model["a"].weight.to_bf16()))
    # two W12 weights that only look alike are two entries
    model["b"].weight = torch.nn.Parameter(W12Tensor.from_bf16(model["a"].weight.to_bf16()), requires_grad=False)
    save_file(model, path)
    loaded = load_file(path)
    assert loaded["b.weight"] is not loaded["a.weight"]
    with safe_open(path, "pt") as f:
        assert len(list(f.keys())) == 2 * len(W12Tensor._INNER)


def test_load_into_a_w12_target_skips_its_non_persistent_buffers_and_refuses_another_dtype(tmp_path):
    import specdec as sd
    from specdec.testing import tiny_hf_model

    target = sd.load_target(tiny_hf_model(seed=0), dtype=torch.bfloat16, device="cpu", weight_format="w12", progress=False)
    path = str(tmp_path / "t.safetensors")
    save_file(target, path)
    other = sd.load_target(tiny_hf_model(seed=1), dtype=torch.bfloat16, device="cpu", weight_format="w12", progress=False)
    load_into(other, path)
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(other(ids).logits, target(ids).logits)
    state = load_file(path)
    name = next(n for n, t in state.items() if not isinstance(t, W12Tensor) and t.is_floating_point())
    state[name] = state[name].float()
    save_file(state, path)
    with pytest.raises(ValueError, match=rf"{name}: expected dtype torch.bfloat16, file has torch.float32"):
        load_into(other, path)


def test_a_file_with_planes_but_no_shape_or_a_plain_tensor_for_a_w12_weight_is_refused(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file as raw_save

    import specdec as sd
    from specdec.testing import tiny_hf_model

    target = sd.load_target(tiny_hf_model(seed=0), dtype=torch.bfloat16, device="cpu", weight_format="w12", progress=False)
    path = str(tmp_path / "t.safetensors")
    save_file(target, path)
    with safe_open(path, framework="pt") as f:
        meta, flat = f.metadata(), {name: f.get_tensor(name) for name in f.keys()}
    shapes = json.loads(meta["w12_shapes"])
    name = sorted(shapes)[0]
    del shapes[name]
    unnamed = str(tmp_path / "unnamed.safetensors")
    raw_save(flat, unnamed, metadata={**meta, "w12_shapes": json.dumps(shapes)})
    with pytest.raises(ValueError, match="holds W12 planes without a shape entry"):
        load_file(unnamed)
    state = load_file(path)
    state[name] = state[name].to_bf16() if isinstance(state[name], W12Tensor) else state[name]
    plain = str(tmp_path / "plain.safetensors")
    save_file(state, plain)
    with pytest.raises(ValueError, match=rf"{name}: module holds a W12 weight but the file holds a plain tensor"):
        load_into(target, plain)


def test_planes_that_do_not_fit_the_shape_are_refused():
    w = torch.arange(1, 17, dtype=torch.float32).reshape(1, 16).to(torch.bfloat16)
    t = W12Tensor.from_bf16(w)
    planes = (t.ae, t.nib, t.base, t.esc_ptr, t.esc_pos, t.esc_bits)
    with pytest.raises(ValueError, match=r"ae: expected shape \(1, 24\) for a W12 weight of shape \(1, 24\), got \(1, 16\)"):
        W12Tensor(*planes, (1, 24))
    with pytest.raises(ValueError, match=r"ae: expected shape \(2, 16\) for a W12 weight of shape \(2, 16\), got \(1, 16\)"):
        W12Tensor(*planes, (2, 16))
    with pytest.raises(ValueError, match=r"nib: expected shape \(1, 8\) for a W12 weight of shape \(1, 16\), got \(1, 4\)"):
        W12Tensor(t.ae, t.nib[:, :4], *planes[2:], (1, 16))
    with pytest.raises(ValueError, match=r"shape: expected \(N, K\), got \(16,\)"):
        W12Tensor(*planes, (16,))


def test_load_file_refuses_a_shape_narrower_than_the_weights_it_holds(tmp_path):
    # K=15 on planes of 16 columns whose last column holds a weight: loading it would drop that weight silently
    from safetensors import safe_open
    from safetensors.torch import save_file as save_flat

    w = torch.arange(1, 17, dtype=torch.float32).reshape(1, 16).to(torch.bfloat16)
    path = str(tmp_path / "w.safetensors")
    save_file({"w": W12Tensor.from_bf16(w)}, path)
    with safe_open(path, "pt") as f:
        flat = {key: f.get_tensor(key) for key in f.keys()}
        meta = dict(f.metadata())
    meta["w12_shapes"] = json.dumps({"w": [1, 15]})
    save_flat(flat, path, metadata=meta)
    with pytest.raises(ValueError, match=r"w: expected the zero code in the padding columns 15\.\.15 \(w12_shapes says K=15\)"):
        load_file(path)
    narrow = W12Tensor.from_bf16(w[:, :15].contiguous())  # its own padding column holds the zero code: loads
    save_file({"w": narrow}, path)
    assert torch.equal(load_file(path)["w"].to_bf16(), w[:, :15])


def test_a_weight_tied_between_linears_is_encoded_once_and_stays_tied(tmp_path):
    from safetensors import safe_open

    model = nn.ModuleDict({"a": nn.Linear(64, 32, bias=False), "b": nn.Linear(64, 32, bias=False)}).to(torch.bfloat16)
    model["b"].weight = model["a"].weight
    report = convert(model, linear_backend="torch")
    assert model["b"].weight is model["a"].weight and set(report.tensors) == {"a.weight", "b.weight"}
    path = str(tmp_path / "tied.safetensors")
    save_file(model, path)
    with safe_open(path, "pt") as f:
        assert sorted(f.keys()) == sorted(f"a.weight.__w12__.{inner}" for inner in W12Tensor._INNER)


def test_two_skip_entries_naming_one_linear_are_both_used():
    model = nn.ModuleDict({"model": nn.ModuleDict({"lm_head": nn.Linear(16, 8), "proj": nn.Linear(16, 8)})})
    report = convert(model.to(torch.bfloat16), skip=("model.lm_head", "lm_head"), linear_backend="torch")
    assert set(report.skipped) == {"model.lm_head.weight"} and isinstance(model["model"]["proj"].weight, W12Tensor)


def test_load_file_refuses_a_base_outside_the_encoders_range(tmp_path):
    from safetensors.torch import load_file as raw_load
    from safetensors.torch import save_file as raw_save

    path = str(tmp_path / "w.safetensors")
    save_file({"w": W12Tensor.from_bf16(torch.randn(2, 16).to(torch.bfloat16))}, path)
    from safetensors import safe_open

    with safe_open(path, "pt") as f:
        metadata = f.metadata()
    for bad in (0, 240, 255):
        planes = raw_load(path)
        planes["w.__w12__.base"][1] = bad
        raw_save(planes, path, metadata=metadata)
        with pytest.raises(
            ValueError, match=rf"w: expected row bases in \[1, 239\] \(the encoder writes no other\), got {bad} at row 1"
        ):
            load_file(path)


def test_load_into_a_module_without_parameters_or_buffers_is_refused(tmp_path):
    path = str(tmp_path / "w.safetensors")
    save_file({"w": torch.zeros(2)}, path)
    with pytest.raises(
        ValueError, match="module: expected a module with parameters or buffers to load into, got an empty Identity"
    ):
        load_into(nn.Identity(), path)
