"""The CUDA skinny GEMM ops on CPU: argument checks, the reference path, fake shapes, the launch plans (the wide ops'
too), the switch that routes 17-128 rows to the wide ops, and the library loader's errors."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from specdec.formats.w12 import W12Tensor, q_linear_reference, w12_linear_reference
from specdec.kernels.cuda import KernelLibraryError, build, load_library
from specdec.kernels.cuda.ops import (
    WIDE_GEMM_ENV,
    WIDE_MAX_TOKENS,
    q_gemm_small_m,
    q_gemm_wide,
    skinny_gemm_bf16,
    w12_gemm_small_m,
    w12_gemm_wide,
    wide_gemm_enabled,
    wide_plan,
)


def planted(n: int, k: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.02
    w[0, :] = 0.0
    w[:, 1] = -0.0
    w[1, 2] = 2.0**-130  # subnormal: an escape
    w[2, 3] = 1e-30  # far below the window: an escape
    w[n - 1, k - 1] = 300.0  # above the window: an escape
    return w.to(torch.bfloat16).contiguous()


def planes(w12: W12Tensor) -> tuple[torch.Tensor, ...]:
    return (w12.ae, w12.nib, w12.base, w12.esc_ptr, w12.esc_pos, w12.esc_bits)


@pytest.mark.parametrize("m, n, k", [(1, 24, 64), (3, 17, 136), (8, 40, 8)])
def test_cpu_path_is_the_reference_bit_for_bit(m, n, k):
    w = planted(n, k)
    w12 = W12Tensor.from_bf16(w)
    assert w12.num_escapes >= 1
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    assert torch.equal(skinny_gemm_bf16(x, w), F.linear(x, w))
    assert torch.equal(w12_gemm_small_m(x, *planes(w12)), w12_linear_reference(x, w12))
    assert torch.equal(q_gemm_small_m(x, w12.ae, w12.base), q_linear_reference(x, w12))
    # the registered ops are the same functions
    assert torch.equal(torch.ops.specdec.w12_gemm_small_m(x, *planes(w12)), w12_linear_reference(x, w12))
    # the exact op is not the Q view (the references differ on these weights)
    assert not torch.equal(w12_linear_reference(x, w12), q_linear_reference(x, w12))


def test_fake_implementations_give_the_output_shape():
    w = planted(24, 64)
    w12 = W12Tensor.from_bf16(w)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x = mode.from_tensor(torch.zeros(5, 64, dtype=torch.bfloat16))
        fake_planes = [mode.from_tensor(t) for t in planes(w12)]
        assert tuple(torch.ops.specdec.skinny_gemm_bf16(x, mode.from_tensor(w)).shape) == (5, 24)
        assert tuple(torch.ops.specdec.w12_gemm_small_m(x, *fake_planes).shape) == (5, 24)
        assert tuple(torch.ops.specdec.q_gemm_small_m(x, fake_planes[0], fake_planes[2]).shape) == (5, 24)


def _x(m=2, k=64, dtype=torch.bfloat16):
    return torch.zeros(m, k, dtype=dtype)


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda w: (_x(dtype=torch.float32), w), TypeError, r"x: expected dtype torch.bfloat16, got torch.float32"),
        (lambda w: (_x(m=0), w), ValueError, r"x: expected 1 to 16 rows \(tokens\) at K=64, got M=0"),
        (lambda w: (_x(m=17), w), ValueError, r"x: expected 1 to 16 rows \(tokens\) at K=64, got M=17"),
        (lambda w: (_x(m=9, k=72), w), ValueError, r"x: expected 1 to 8 rows \(tokens\) at K=72, got M=9"),
        (lambda w: (torch.zeros(2, 3, 64, dtype=torch.bfloat16), w), ValueError, r"x: expected a 2-D tensor \[M, K\]"),
        (lambda w: (_x(k=60), w[:, :60].contiguous()), ValueError, r"x: expected K .* a positive multiple of 8, got K=60"),
        (lambda w: (_x(k=128)[:, ::2], w), ValueError, r"x: expected a contiguous tensor"),
        (lambda w: (_x(k=72), w), ValueError, r"weight: expected K=72 columns \(x's K\), got shape \(24, 64\)"),
        (lambda w: (_x(), w.float()), TypeError, r"weight: expected dtype torch.bfloat16, got torch.float32"),
        (lambda w: (_x(), w.t()), ValueError, r"weight: expected a contiguous tensor"),
    ],
)
def test_bf16_op_rejects_bad_arguments(make, exc, match):
    w = planted(24, 64)
    with pytest.raises(exc, match=match):
        skinny_gemm_bf16(*make(w))


def test_w12_and_q_ops_reject_bad_planes():
    w12 = W12Tensor.from_bf16(planted(24, 64))
    ae, nib, base, esc_ptr, esc_pos, esc_bits = planes(w12)
    x = _x()
    with pytest.raises(ValueError, match=r"x: expected K=64 columns \(the weight's K\), got 72"):
        w12_gemm_small_m(_x(k=72), *planes(w12))
    with pytest.raises(ValueError, match=r"nib: expected shape \(24, 32\), got \(24, 16\)"):
        w12_gemm_small_m(x, ae, nib[:, :16].contiguous(), base, esc_ptr, esc_pos, esc_bits)
    with pytest.raises(TypeError, match=r"base: expected dtype torch.uint8, got torch.int32"):
        w12_gemm_small_m(x, ae, nib, base.int(), esc_ptr, esc_pos, esc_bits)
    with pytest.raises(ValueError, match=r"esc_ptr: expected shape \(2,\), got \(3,\)"):
        w12_gemm_small_m(x, ae, nib, base, torch.zeros(3, dtype=torch.int32), esc_pos, esc_bits)
    with pytest.raises(ValueError, match=r"esc_bits: expected shape"):
        w12_gemm_small_m(x, ae, nib, base, esc_ptr, esc_pos, esc_bits[:0].contiguous())
    with pytest.raises(ValueError, match=r"ae: expected K \(its width\) a positive multiple of 8, got 12"):
        q_gemm_small_m(_x(k=12), torch.zeros(24, 12, dtype=torch.uint8), base)
    with pytest.raises(ValueError, match=r"x: expected 1 to 16 rows \(tokens\) at K=64, got M=17"):
        q_gemm_small_m(_x(m=17), ae, base)


@pytest.mark.parametrize("m", [9, 16])
def test_nine_to_sixteen_rows_only_where_the_tensor_map_kernels_run(monkeypatch, m):
    from specdec.kernels.cuda.ops import BF16_VARIANT_ENV, Q_VARIANT_ENV, W12_VARIANT_ENV, max_tokens

    for env in (BF16_VARIANT_ENV, Q_VARIANT_ENV, W12_VARIANT_ENV):
        monkeypatch.delenv(env, raising=False)
    w = planted(24, 64)
    w12 = W12Tensor.from_bf16(w)
    x = torch.randn(m, 64, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    # K % 32 == 0 and the tensor-map kernels picked: the ops take the rows (the CPU path is the reference)
    assert [max_tokens(op, 64) for op in ("bf16", "w12", "q")] == [16, 16, 16]
    assert torch.equal(skinny_gemm_bf16(x, w), F.linear(x, w))
    assert torch.equal(w12_gemm_small_m(x, *planes(w12)), w12_linear_reference(x, w12))
    assert torch.equal(q_gemm_small_m(x, w12.ae, w12.base), q_linear_reference(x, w12))
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        assert tuple(torch.ops.specdec.w12_gemm_small_m(mode.from_tensor(x), *planes(w12)).shape) == (m, 24)
    # a register kernel picked, or K % 32 != 0: 8 rows at most, named in the error
    for env, op, call in (
        (BF16_VARIANT_ENV, "bf16", lambda: skinny_gemm_bf16(x, w)),
        (W12_VARIANT_ENV, "w12", lambda: w12_gemm_small_m(x, *planes(w12))),
        (Q_VARIANT_ENV, "q", lambda: q_gemm_small_m(x, w12.ae, w12.base)),
    ):
        monkeypatch.setenv(env, "v1")
        assert max_tokens(op, 64) == 8
        with pytest.raises(ValueError, match=rf"x: expected 1 to 8 rows \(tokens\) at K=64, got M={m}"):
            call()
        monkeypatch.delenv(env)
    assert max_tokens("w12", 72) == 8 and max_tokens("q", 4104) == 8
    with pytest.raises(ValueError, match=r"op: expected one of \['bf16', 'q', 'w12'\], got 'fp8'"):
        max_tokens("fp8", 64)


def test_missing_library_named_in_the_error(monkeypatch, tmp_path):
    missing = tmp_path / "nowhere" / "specdec_cuda_kernels.so"
    monkeypatch.setenv(build.ENV_VAR, str(missing))
    with pytest.raises(
        KernelLibraryError, match=r"CUDA kernel library not found at .*nowhere/specdec_cuda_kernels.so \(SPECDEC_CUDA_KERNELS\)"
    ):
        load_library()


def test_unloadable_library_is_a_clear_error(monkeypatch, tmp_path):
    bogus = tmp_path / "bogus.so"
    bogus.write_text("not a shared object")
    monkeypatch.setenv(build.ENV_VAR, str(bogus))
    with pytest.raises(KernelLibraryError, match=r"cannot load the CUDA kernel library .*bogus.so"):
        load_library()


@pytest.mark.parametrize(
    "missing",
    [
        "specdec_w12_gemm_small_m_v3",
        "specdec_q_gemm_small_m_v2",
        "specdec_q_v2_plan",
        "specdec_skinny_gemm_bf16_v2",
        "specdec_bf16_v2_plan",
    ],
)
def test_library_from_an_older_source_is_a_clear_error(monkeypatch, tmp_path, missing):
    # a build/ library compiled before an entry point was added: loading must say "rebuild", not AttributeError
    class OlderLibrary:
        def __getattr__(self, name):
            if name == missing:
                raise AttributeError(f"undefined symbol: {name}")
            return type("Fn", (), {})()

    stale = tmp_path / "stale.so"
    stale.write_bytes(b"")
    monkeypatch.setenv(build.ENV_VAR, str(stale))
    monkeypatch.setattr(build.ctypes, "CDLL", lambda path: OlderLibrary())
    with pytest.raises(KernelLibraryError, match=r"stale.so does not match skinny_gemm.cu .*undefined symbol.*rebuild it"):
        load_library()


def test_build_command_names_its_one_target_and_refuses_another_arch():
    cmd = build.build_command("out.so", arch="sm_100a", source="probe.cu")
    assert "-gencode=arch=compute_100a,code=sm_100a" in cmd and cmd[-3:] == ["probe.cu", "-o", "out.so"]
    assert not any(c.startswith("-arch") for c in cmd)  # the shorthand would add a plain compute_90 pass
    with pytest.raises(ValueError, match=r"arch: expected an sm_XX GPU name such as 'sm_90a', got 'compute_90a'"):
        build.build_command("out.so", arch="compute_90a")


def test_the_source_is_one_translation_unit_that_lists_its_headers_in_the_order_they_build_on_each_other():
    # skinny_gemm.cu includes every header beside it once, each after the headers it includes: the file order the
    # compiler reads is the one a reader follows, and no header depends on one that comes after it (no cycle)
    folder = build.SOURCE.parent
    tu_order = [(folder / name).resolve() for name in build._QUOTED_INCLUDE.findall(build.SOURCE.read_text())]
    headers = sorted(p.resolve() for p in folder.rglob("*.cuh"))
    assert sorted(tu_order) == headers and len(set(tu_order)) == len(tu_order)
    assert build.source_files()[1:] == tu_order
    for index, header in enumerate(tu_order):
        text = header.read_text()
        name = header.relative_to(folder).as_posix()
        assert text.startswith("// ") and "\n#pragma once\n" in text, name  # what the file is, in its first line
        for included in build._QUOTED_INCLUDE.findall(text):
            assert (header.parent / included).resolve() in tu_order[:index], (name, included)
        assert text.count("namespace {") == text.count("}  // namespace") == 1, name  # one anonymous namespace, closed
    # the README's map names every header under its folder with the header's own first line
    readme = (folder / "README.md").read_text()
    files = readme[readme.index("## Files") : readme.index("## The byte floor")]
    for header in tu_order:
        first = header.read_text().split("\n", 1)[0][3:]
        assert f"| `{header.parent.name}/` |" in files and f"| | `{header.name}` | {first} |" in files, header.name


def test_source_files_names_the_file_whose_include_is_missing(tmp_path):
    (tmp_path / "a.cuh").write_text('#pragma once\n#include "b.cuh"\n')
    (tmp_path / "b.cuh").write_text("#pragma once\n")
    (tmp_path / "tu.cu").write_text('#include "a.cuh"\n#include "b.cuh"\n')
    assert [p.name for p in build.source_files(tmp_path / "tu.cu")] == ["tu.cu", "a.cuh", "b.cuh"]
    (tmp_path / "b.cuh").unlink()
    with pytest.raises(KernelLibraryError, match=r"a\.cuh includes 'b\.cuh': no such file"):
        build.source_files(tmp_path / "tu.cu")


def test_build_without_nvcc_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(build.shutil, "which", lambda name: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    with pytest.raises(KernelLibraryError, match=r"no nvcc found .* -gencode=arch=compute_90a,code=sm_90a -std=c\+\+17 --shared"):
        build.build_kernels(tmp_path / "k.so")
    # and the default path is not built silently either: the loader names the build command
    monkeypatch.delenv(build.ENV_VAR, raising=False)
    monkeypatch.setattr(build, "_DEFAULT", tmp_path / "absent.so")
    with pytest.raises(
        KernelLibraryError, match=r"not found at .*absent.so; build it with `.*nvcc -O3 -gencode=arch=compute_90a,code=sm_90a"
    ):
        load_library()


def test_build_replaces_the_library_only_when_nvcc_finished(tmp_path):
    # a stand-in for nvcc: writes "new" to its -o path, or fails (exit 1) after writing half a file
    def fake_nvcc(name: str, ok: bool):
        script = tmp_path / name
        body = 'echo new > "$out"' if ok else 'echo half > "$out"; exit 1'
        script.write_text(f'#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done; out="$2"\n{body}\n')
        script.chmod(0o755)
        return str(script)

    lib = tmp_path / "lib" / "k.so"
    lib.parent.mkdir()
    lib.write_text("old\n")
    with pytest.raises(KernelLibraryError, match="nvcc failed"):
        build.build_kernels(lib, nvcc=fake_nvcc("bad", ok=False))
    assert lib.read_text() == "old\n" and sorted(p.name for p in lib.parent.iterdir()) == ["k.so"]  # untouched, no leftovers
    assert build.build_kernels(lib, nvcc=fake_nvcc("good", ok=True)) == lib
    assert lib.read_text() == "new\n" and sorted(p.name for p in lib.parent.iterdir()) == ["k.so"]


def _library_or_skip():
    try:
        return load_library()
    except KernelLibraryError as err:  # no nvcc and no built library on this machine
        pytest.skip(f"CUDA kernel library unavailable: {err}")


@pytest.mark.parametrize("kind", ["bf16", "w12", "q"])
def test_plan_shares_staged_x_over_many_rows_and_fills_the_gpu(kind):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    sms = 132
    for m, n, k in [(8, 5120, 25600), (8, 4096, 12288), (1, 4096, 4096), (8, 6144, 4096), (1, 151936, 4096)]:
        plan = launch_plan(kind, m, n, k, sms)
        rows_per_cta = 16 * plan["row_tiles_per_cta"]
        assert rows_per_cta >= 64, (kind, m, n, k, plan)  # x bytes through L2 <= 2M/(64 x bytes/weight) of the weights
        ctas = plan["ctas_x"] * plan["k_splits"]
        assert ctas >= 0.9 * sms, (kind, m, n, k, plan)
        assert plan["shared_bytes"] <= 200 * 1024


def test_w12_variant_is_read_on_every_call_and_checked(monkeypatch):
    from specdec.kernels.cuda.ops import W12_VARIANT_ENV, W12_VARIANTS, w12_variant

    w12 = W12Tensor.from_bf16(planted(24, 64))
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    monkeypatch.delenv(W12_VARIANT_ENV, raising=False)
    # unset: the tensor-map kernel where it runs (K % 32 == 0), the register kernel elsewhere
    assert [w12_variant(k) for k in (4096, 25600, 4104, 8, 48)] == ["v10", "v10", "v1", "v1", "v1"]
    assert w12_variant() == "v1"
    monkeypatch.setenv(W12_VARIANT_ENV, "v4")
    assert w12_variant(4096) == "v4"  # a set variable wins at any K
    assert W12_VARIANTS == ("v1", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10")
    for variant in W12_VARIANTS:
        monkeypatch.setenv(W12_VARIANT_ENV, variant)
        assert w12_variant() == variant
        # CPU: every variant runs the reference
        assert torch.equal(w12_gemm_small_m(x, *planes(w12)), w12_linear_reference(x, w12)), variant
    monkeypatch.setenv(W12_VARIANT_ENV, "v2")
    with pytest.raises(
        ValueError,
        match=r"SPECDEC_W12_CUDA_VARIANT: expected one of \('v1', 'v3', 'v4', 'v5', 'v6', 'v7', 'v8', 'v9', 'v10'\) or unset, got 'v2'",
    ):
        w12_gemm_small_m(x, *planes(w12))


def test_q_variant_is_read_on_every_call_and_checked(monkeypatch):
    from specdec.kernels.cuda.ops import Q_VARIANT_ENV, Q_VARIANTS, W12_VARIANT_ENV, q_variant

    w12 = W12Tensor.from_bf16(planted(24, 64))
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    monkeypatch.delenv(Q_VARIANT_ENV, raising=False)
    # unset: the tensor-map kernel where it runs (K % 32 == 0), the register kernel elsewhere
    assert [q_variant(k) for k in (4096, 25600, 4104, 8, 48)] == ["v5", "v5", "v1", "v1", "v1"]
    assert q_variant() == "v1"
    # the W12 variable steers the W12 kernel only (v2 is no W12 variant)
    monkeypatch.setenv(W12_VARIANT_ENV, "v2")
    assert q_variant(4096) == "v5"
    assert torch.equal(q_gemm_small_m(x, w12.ae, w12.base), q_linear_reference(x, w12))
    monkeypatch.delenv(W12_VARIANT_ENV)
    monkeypatch.setenv(Q_VARIANT_ENV, "v1")
    assert q_variant(4096) == "v1"  # a set variable wins at any K
    assert Q_VARIANTS == ("v1", "v2", "v3", "v4", "v5")
    for variant in Q_VARIANTS:
        monkeypatch.setenv(Q_VARIANT_ENV, variant)
        assert q_variant() == variant
        # CPU: every variant runs the reference
        assert torch.equal(q_gemm_small_m(x, w12.ae, w12.base), q_linear_reference(x, w12)), variant
    monkeypatch.setenv(Q_VARIANT_ENV, "v7")
    with pytest.raises(
        ValueError, match=r"SPECDEC_Q_CUDA_VARIANT: expected one of \('v1', 'v2', 'v3', 'v4', 'v5'\) or unset, got 'v7'"
    ):
        q_gemm_small_m(x, w12.ae, w12.base)


def test_streaming_w12_plan_fits_shared_memory_and_fills_the_gpu():
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    sms = 132
    for m, n, k in [(8, 5120, 25600), (8, 4096, 12288), (1, 4096, 4096), (8, 6144, 4096), (1, 151936, 4096), (8, 151936, 4096)]:
        plan = launch_plan("w12_v3", m, n, k, sms)
        assert plan["row_tiles_per_cta"] == 4 and plan["ctas_x"] == -(-n // 64)
        assert plan["k_splits"] in (1, 2, 4, 8, 16)
        per_cta = -(-plan["chunks"] // plan["k_splits"])
        assert per_cta * 64 * m * 2 <= 48 * 1024, (m, n, k, plan)  # the K slice of x fits
        assert per_cta >= 4 or plan["k_splits"] == 1
        # at least one full wave of 7 CTAs per SM (2 where the rows allow it with >= 4 chunks per CTA)
        assert plan["ctas_x"] * plan["k_splits"] >= 7 * sms or plan["k_splits"] == 16, (m, n, k, plan)
    assert launch_plan("w12_v3", 1, 4096, 4096, sms, max_cluster=8)["k_splits"] == 8
    with pytest.raises(ValueError, match="max_cluster: expected 8 or 16"):
        launch_plan("w12_v3", 1, 4096, 4096, sms, max_cluster=4)


DECODE_SHAPES = [(8, 5120, 25600), (8, 4096, 12288), (1, 4096, 4096), (8, 4096, 4096), (8, 6144, 4096), (1, 24576, 4096)]
DECODE_SHAPES += [(1, 151936, 4096), (8, 151936, 4096), (1, 4096, 12288), (1, 5120, 25600), (8, 72, 25608), (1, 300, 1032)]


@pytest.mark.parametrize("m,n,k", DECODE_SHAPES)
def test_split_k_w12_plan_keeps_the_partials_small_and_fills_the_gpu(m, n, k):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    sms, per_sm = 132, 7
    plan = launch_plan("w12_v4", m, n, k, sms)
    ks, chunks, blocks = plan["k_splits"], plan["chunks"], plan["ctas_x"]
    assert plan["row_tiles_per_cta"] == 4 and blocks == -(-n // 64) and chunks == -(-k // 64)
    per_cta = -(-chunks // ks)
    assert per_cta * 64 * m * 2 <= 48 * 1024, plan  # the K slice of x fits

    def within_limits(splits):  # >= 4 chunks per CTA, partials (M N splits fp32, written + read) <= 5 % of 1.5 N K
        return splits <= 64 and chunks // splits >= 4 and 8 * m * n * splits <= 0.05 * 1.5 * n * k

    def ctas_per_sm(splits):
        smem = -(-chunks // splits) * 64 * m * 2 + plan["shared_bytes"] - per_cta * 64 * m * 2
        return min(per_sm, (227 * 1024) // (smem + 1024))

    fits_x = next(s for s in range(1, chunks + 1) if -(-chunks // s) * 64 * m * 2 <= 48 * 1024)
    assert within_limits(ks) or (ks == fits_x and ks > 1) or ks == 1, plan
    waves = blocks * ks / (sms * ctas_per_sm(ks))
    fewer_reach_two_waves = any(within_limits(s) and blocks * s >= 2 * sms * ctas_per_sm(s) for s in range(max(1, fits_x), ks))
    assert not fewer_reach_two_waves, plan  # the fewest splits that give two waves
    if waves < 2:  # two waves out of reach: as many splits as the limits allow
        assert not within_limits(ks + 1) or ks + 1 > 64, plan
    counters = -(-blocks * 4 // 256) * 256
    assert plan["workspace_bytes"] == (0 if ks == 1 else counters + blocks * ks * 64 * m * 4), plan


def test_split_k_w12_plan_examples():
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    # 8B down at M = 1: 29 splits of 192 chunks reach 2 waves (1856 CTAs on 132 x 7 slots); at M = 8 the partials'
    # 5 % cap stops at 14 splits (896 CTAs, under one wave); lm_head at M = 8: 2 splits for x to fit 48 KB.
    assert launch_plan("w12_v4", 1, 4096, 12288, 132)["k_splits"] == 29
    assert launch_plan("w12_v4", 8, 4096, 12288, 132)["k_splits"] == 14
    assert launch_plan("w12_v4", 8, 151936, 4096, 132)["k_splits"] == 2
    assert launch_plan("w12_v4", 1, 151936, 4096, 132)["workspace_bytes"] == 0
    with pytest.raises(ValueError, match="sms: expected a positive multiprocessor count, got 0"):
        launch_plan("w12_v4", 1, 4096, 4096, 0)


def test_split_k_workspace_per_layout_is_made_once_per_device_size_and_layout_and_zeroed(monkeypatch):
    from specdec.kernels.cuda import ops

    monkeypatch.setattr(ops, "_WORKSPACES", {})
    cpu = torch.device("cpu")
    first = ops.split_k_workspace(cpu, 1030, layout=())
    assert first.dtype == torch.int32 and first.numel() == 258 and not first.any()
    first[0] = 5  # a launch leaves its counters zero; the cache hands the same tensor back untouched
    assert ops.split_k_workspace(cpu, 1030, layout=()) is first
    assert ops.split_k_workspace(cpu, 1034, layout=()) is not first
    # one size, two layouts (other counts of row blocks): two workspaces (specdec_w12_v10_plan(1, 51200, 5120) and
    # specdec_bf16_v2_plan(10, 3, 27648) both ask for 138,496 bytes, with 3,328 and 256 bytes of counters)
    w12_32b = ops.split_k_workspace(cpu, 138_496, layout=(51200, 4, 2, 40, 264, 82944, 138496, 1))
    bf16_odd = ops.split_k_workspace(cpu, 138_496, layout=(3, 4, 54, 216, 1, 98944, 138496, 1))
    assert (
        w12_32b is not bf16_odd
        and ops.split_k_workspace(cpu, 138_496, layout=(51200, 4, 2, 40, 264, 82944, 138496, 1)) is w12_32b
    )
    with pytest.raises(ValueError, match="nbytes: expected a positive workspace size, got 0"):
        ops.split_k_workspace(cpu, 0)


def test_the_shared_split_k_workspace_holds_twice_the_largest_asked_and_keeps_the_ones_before(monkeypatch):
    from specdec.kernels.cuda import ops

    monkeypatch.setattr(ops, "_WORKSPACES", {})
    cpu = torch.device("cpu")
    # with twice the bytes of any plan it serves, a plan's partials (from the start) end below half of it and every
    # plan's counters (at the end) begin above, whatever their row blocks: the two plans of one size above share it
    first = ops.split_k_workspace(cpu, 138_496)
    assert first.dtype == torch.int32 and first.numel() * 4 >= 2 * 138_496 and not first.any()
    assert ops.split_k_workspace(cpu, 1030) is first and ops.split_k_workspace(cpu, 138_496) is first
    larger = ops.split_k_workspace(cpu, 138_497)
    assert larger is not first and larger.numel() * 4 >= 2 * 138_497 and not larger.any()
    assert ops.split_k_workspace(cpu, 1030) is larger
    assert [w is v for w, v in zip(ops._WORKSPACES[(-1,)], (first, larger))] == [
        True,
        True,
    ]  # a graph that captured the first keeps using it


def test_split_k_workspace_is_never_made_during_graph_capture(monkeypatch):
    from specdec.kernels.cuda import ops

    # checked before any allocation, so a CPU-only machine sees the refusal too
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(
        RuntimeError,
        match=r"q_gemm_small_m \(v2\): its 12344-byte workspace on cuda:0 would be made during CUDA graph capture; "
        r"call the op once on this shape before capturing",
    ):
        ops.split_k_workspace(torch.device("cuda", 0), 12344, op="q_gemm_small_m (v2)")


def test_split_k_launch_hands_the_planned_workspace_to_the_kernel(monkeypatch):
    from specdec.kernels.cuda import ops

    monkeypatch.delenv("SPECDEC_ROW_STAGE_GROUPS", raising=False)
    monkeypatch.delenv("SPECDEC_SPLIT_WORKSPACE", raising=False)
    monkeypatch.setattr(ops, "_WORKSPACES", {})
    calls = []

    class Library:
        def specdec_cuda_last_error(self):
            return b"M=9 is not a token count"

        def specdec_set_programmatic_launch(self, mode):
            calls.append(("programmatic", mode))

        def specdec_set_row_stage_groups(self, groups):
            calls.append(("stage groups", groups))

    def plan_of(nbytes, rc=0):
        def plan(m, n, k, sms, out):
            calls.append(("plan", m, n, k, sms))
            out[5] = nbytes
            return rc

        return plan

    def run(*args):
        calls.append(("run", *args))
        return 0

    cpu = torch.device("cpu")
    args = ("x", "ae", "base", "y", 8, 72, 4128)
    for nbytes in (2052, 0):
        calls.clear()
        assert ops._launch_split_k(Library(), "q_gemm_small_m (v2)", plan_of(nbytes), run, args, 8, 72, 4128, cpu, "s") == 0
        assert calls[0] == ("plan", 8, 72, 4128, 0)  # sms = 0: the current device's multiprocessors
        assert calls[1] == ("programmatic", 0)  # set before every launch: eager calls launch plainly
        assert calls[2] == ("stage groups", 2)  # $SPECDEC_ROW_STAGE_GROUPS unset: up to two, where the call takes them
        *given, ws_ptr, ws_bytes, stream = calls[3][1:]
        assert tuple(given) == args and stream == "s"
        shared = ops.split_k_workspace(cpu, nbytes) if nbytes else None  # the device's, all of it
        assert (ws_ptr.value, ws_bytes) == ((shared.data_ptr(), shared.numel() * 4) if nbytes else (None, 0))
    monkeypatch.setenv("SPECDEC_SPLIT_WORKSPACE", "per-layout")
    calls.clear()
    assert ops._launch_split_k(Library(), "q_gemm_small_m (v2)", plan_of(2052), run, args, 8, 72, 4128, cpu, "s") == 0
    *_, ws_ptr, ws_bytes, _ = calls[3][1:]
    layout = (72, 0, 0, 0, 0, 0, 2052, 0)  # N, then the plan (only its workspace bytes set here)
    assert (ws_ptr.value, ws_bytes) == (ops.split_k_workspace(cpu, 2052, layout=layout).data_ptr(), 2052)
    monkeypatch.delenv("SPECDEC_SPLIT_WORKSPACE")
    # launched programmatically (inside a captured graph): the launch code reaches the library
    monkeypatch.setattr(ops, "gemm_launch_code", lambda: 1)
    calls.clear()
    assert ops._launch_split_k(Library(), "q_gemm_small_m (v2)", plan_of(0), run, args, 8, 72, 4128, cpu, "s") == 0
    assert calls[1] == ("programmatic", 1)
    monkeypatch.setenv("SPECDEC_ROW_STAGE_GROUPS", "1")
    calls.clear()
    assert ops._launch_split_k(Library(), "q_gemm_small_m (v2)", plan_of(0), run, args, 8, 72, 4128, cpu, "s") == 0
    assert calls[2] == ("stage groups", 1)
    monkeypatch.setenv("SPECDEC_ROW_STAGE_GROUPS", "3")
    with pytest.raises(ValueError, match=r"\$SPECDEC_ROW_STAGE_GROUPS: expected '1' or '2'"):
        ops._launch_split_k(Library(), "q_gemm_small_m (v2)", plan_of(0), run, args, 8, 72, 4128, cpu, "s")
    monkeypatch.undo()
    calls.clear()
    with pytest.raises(RuntimeError, match=r"q_gemm_small_m \(v2\) plan: CUDA kernel launch failed \(3\): M=9 is not"):
        ops._launch_split_k(Library(), "q_gemm_small_m (v2)", plan_of(0, rc=3), run, args, 8, 72, 4128, cpu, "s")
    assert [c[0] for c in calls] == ["plan"]  # no launch after a failed plan


BULK_SHAPES = DECODE_SHAPES + [(8, 72, 25632), (1, 72, 4128), (1, 300, 1056), (8, 300, 1056), (8, 520, 2048)]


@pytest.mark.parametrize("m,n,k", BULK_SHAPES)
def test_bulk_copy_w12_plan_fits_two_ctas_per_sm_and_fills_the_gpu(m, n, k):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    sms = 132
    plan = launch_plan("w12_v5", m, n, k, sms)
    if k % 32:  # nib rows not 16-byte aligned: the split-K kernel and its plan run
        assert plan == {**launch_plan("w12_v4", m, n, k, sms), "bulk_copies": 0}
        return
    ks, stages, blocks = plan["k_splits"], plan["chunks"], plan["ctas_x"]
    assert plan["bulk_copies"] == 1 and plan["row_tiles_per_cta"] == 4
    assert blocks == -(-n // 64) and stages == -(-k // 128)
    assert plan["shared_bytes"] <= 110 * 1024 and 2 * (plan["shared_bytes"] + 1024) <= 227 * 1024, plan
    slots = 2 * sms

    def within_limits(splits):  # >= 2 stages per CTA, <= 64 splits, partials (fp32, written + read) <= 10 % of 1.5 N K
        return splits <= 64 and stages // splits >= 2 and 8 * m * n * splits <= 0.10 * 1.5 * n * k

    assert within_limits(ks) or ks == 1, plan
    assert not any(within_limits(s) and blocks * s >= 2 * slots for s in range(1, ks)), plan  # the fewest for 2 waves
    if blocks * ks < 2 * slots:  # two waves out of reach: as many splits as the limits allow
        assert not within_limits(ks + 1), plan
    counters = -(-blocks * 4 // 256) * 256
    assert plan["workspace_bytes"] == (0 if ks == 1 else counters + blocks * ks * 64 * m * 4), plan


# (N, K): Qwen3-8B o, qkv, gate_up, down, lm_head; Qwen3-32B down.
MODEL_SHAPES = ((4096, 4096), (6144, 4096), (24576, 4096), (4096, 12288), (151936, 4096), (5120, 25600))


@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize(
    ("kind", "splits"),
    [
        # the fewest splits reaching two waves (8B o at M = 8: 8 x 8 x 4096 x 9 bytes of partials, 9.4 % of its W12 bytes)
        ("w12_v5", (9, 6, 2, 9, 1, 7)),
        # the cheapest last wave: whole waves x (stages per CTA + 2)
        ("w12_v7", (4, 2, 2, 4, 1, 3)),
    ],
)
def test_staged_w12_plans_on_the_model_shapes(kind, splits, m):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    for (n, k), expected in zip(MODEL_SHAPES, splits, strict=True):
        plan = launch_plan(kind, m, n, k, 132)
        assert plan["k_splits"] == expected, (n, k, plan)
        if kind == "w12_v5":
            assert plan["ctas_x"] * plan["k_splits"] >= 2 * 2 * 132, (n, k, plan)


@pytest.mark.parametrize("m,n,k", BULK_SHAPES)
def test_four_producer_bulk_copy_plan_is_the_one_producer_plan_with_a_larger_cta(m, n, k):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    one, four = launch_plan("w12_v5", m, n, k, 132), launch_plan("w12_v6", m, n, k, 132)
    if k % 32:  # both run the split-K kernel and its plan
        assert four == one
        return
    # 96 more threads in the escape round (int2 + row byte each) and 3 more warps' counts
    assert four == {**one, "shared_bytes": one["shared_bytes"] + 96 * 9 + 3 * 4}, (four, one)
    assert 2 * (four["shared_bytes"] + 1024) <= 227 * 1024  # still two CTAs per SM


@pytest.mark.parametrize("m,n,k", BULK_SHAPES)
def test_tma_plan_keeps_the_bulk_limits_and_takes_the_cheapest_last_wave(m, n, k):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    one, tma = launch_plan("w12_v5", m, n, k, 132), launch_plan("w12_v7", m, n, k, 132)
    if k % 32:  # the split-K kernel and its plan run
        assert tma == one == {**launch_plan("w12_v4", m, n, k, 132), "bulk_copies": 0}
        return
    assert tma["bulk_copies"] == 1 and (tma["chunks"], tma["ctas_x"]) == (one["chunks"], one["ctas_x"]), (tma, one)
    # the splits count on two resident CTAs per SM, so the CTA must still fit twice
    assert 0 < tma["shared_bytes"] and 2 * (tma["shared_bytes"] + 1024) <= 227 * 1024, tma
    stages, blocks, slots = tma["chunks"], tma["ctas_x"], 2 * 132

    def allowed(ks):  # v5's limits: >= 2 stages per CTA, <= 64 splits, partials <= 10 % of the W12 bytes
        return ks == 1 or (ks <= stages // 2 and ks <= 64 and 8 * m * ks <= 0.10 * 1.5 * k)

    def cost(ks):  # whole waves x (stages per CTA + 2)
        return -(-blocks * ks // slots) * (-(-stages // ks) + 2)

    ks = tma["k_splits"]
    assert allowed(ks), tma
    assert all(cost(other) >= cost(ks) for other in range(1, 65) if allowed(other)), tma
    assert all(cost(other) > cost(ks) for other in range(1, ks) if allowed(other)), tma  # the fewest on a tie
    counters = -(-blocks * 4 // 256) * 256
    assert tma["workspace_bytes"] == (0 if ks == 1 else counters + blocks * ks * 64 * m * 4), tma


@pytest.mark.parametrize("m,n,k", BULK_SHAPES)
def test_q_tensor_map_plan_is_the_w12_pipeline_without_the_nib_plane(m, n, k):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    q = launch_plan("q_v2", m, n, k, 132)
    if k % 32:  # the register Q kernel runs: its plan, with no K splits over independent CTAs and no workspace
        register = launch_plan("q", m, n, k, 132)
        assert q == {**register, "k_splits": 1, "workspace_bytes": 0, "bulk_copies": 0}, (q, register)
        return
    ks, stages, blocks = q["k_splits"], q["chunks"], q["ctas_x"]
    assert q["bulk_copies"] == 1 and q["row_tiles_per_cta"] == 4, q
    assert blocks == -(-n // 64) and stages == -(-k // 128), q  # 64-row blocks, stages of 128 weights
    assert 1 <= ks <= min(64, stages), q
    # a stage holds the AE plane and x, not the nib plane: less shared memory than the W12 kernel's, still two CTAs per SM
    w12 = launch_plan("w12_v7", m, n, k, 132)
    assert 0 < q["shared_bytes"] < w12["shared_bytes"] and 2 * (q["shared_bytes"] + 1024) <= 227 * 1024, (q, w12)
    # the W12 split-K workspace: fp32 partials [row blocks][splits][64 rows][M], and the row-block counters
    counters = -(-blocks * 4 // 256) * 256
    assert q["workspace_bytes"] == (0 if ks == 1 else counters + blocks * ks * 64 * m * 4), q


@pytest.mark.parametrize("m", [1, 8])
def test_q_tensor_map_plan_on_the_model_shapes_fills_the_gpu(m):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    # (N, K): Qwen3-8B o, qkv, gate_up, down, lm_head; Qwen3-32B down
    for n, k in [(4096, 4096), (6144, 4096), (24576, 4096), (4096, 12288), (151936, 4096), (5120, 25600)]:
        plan = launch_plan("q_v2", m, n, k, 132)
        assert plan["bulk_copies"] == 1 and plan["ctas_x"] * plan["k_splits"] >= 132, (n, k, plan)


def test_bf16_variant_is_read_on_every_call_and_checked(monkeypatch):
    from specdec.kernels.cuda.ops import BF16_VARIANT_ENV, BF16_VARIANTS, bf16_variant

    monkeypatch.delenv(BF16_VARIANT_ENV, raising=False)
    # unset: the tensor-map kernel where K % 32 == 0, the register kernel elsewhere
    assert [bf16_variant(k) for k in (4096, 25600, 4104, 8, 48)] == ["v5", "v5", "v1", "v1", "v1"]
    assert bf16_variant() == "v1" and BF16_VARIANTS == ("v1", "v2", "v3", "v4", "v5")
    monkeypatch.setenv(BF16_VARIANT_ENV, "v1")
    assert bf16_variant(4096) == "v1"  # a set variable wins at any K
    monkeypatch.setenv(BF16_VARIANT_ENV, "v7")
    with pytest.raises(
        ValueError, match=r"SPECDEC_BF16_CUDA_VARIANT: expected one of \('v1', 'v2', 'v3', 'v4', 'v5'\) or unset, got 'v7'"
    ):
        bf16_variant(4096)
    # the op reads it on every call, before any work: also on the CPU reference path
    with pytest.raises(ValueError, match="SPECDEC_BF16_CUDA_VARIANT"):
        skinny_gemm_bf16(_x(), planted(24, 64))


@pytest.mark.parametrize("m,n,k", BULK_SHAPES)
def test_bf16_tensor_map_plan_is_the_staged_pipeline_with_bf16_stages(m, n, k):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    plan = launch_plan("bf16_v2", m, n, k, 132)
    if k % 32:  # the register bf16 kernel runs: its plan, with no K splits over independent CTAs and no workspace
        register = launch_plan("bf16", m, n, k, 132)
        assert plan == {**register, "k_splits": 1, "workspace_bytes": 0, "bulk_copies": 0}, (plan, register)
        return
    ks, stages, blocks = plan["k_splits"], plan["chunks"], plan["ctas_x"]
    assert plan["bulk_copies"] == 1 and plan["row_tiles_per_cta"] == 4, plan
    assert blocks == -(-n // 64) and stages == -(-k // 128), plan
    # five stages of [64 rows][128] bf16 weights and M x 128 x values, then one [64 rows][8 tokens] fp32 tile: still two
    # CTAs per SM
    fixed = 64 * 8 * 4
    assert plan["shared_bytes"] == 5 * (64 * 128 * 2 + m * 256) + fixed + 128, plan
    assert 2 * (plan["shared_bytes"] + 1024) <= 227 * 1024, plan

    def allowed(splits):  # the staged kernels' limits, with bf16's 2 bytes per weight in the partial-traffic cap
        return splits == 1 or (splits <= stages // 2 and splits <= 64 and 8 * m * splits <= 0.10 * 2.0 * k)

    def cost(splits):  # whole waves x (stages per CTA + 2)
        return -(-blocks * splits // 264) * (-(-stages // splits) + 2)

    assert allowed(ks) and all(cost(other) >= cost(ks) for other in range(1, 65) if allowed(other)), plan
    assert all(cost(other) > cost(ks) for other in range(1, ks) if allowed(other)), plan  # the fewest on a tie
    counters = -(-blocks * 4 // 256) * 256
    assert plan["workspace_bytes"] == (0 if ks == 1 else counters + blocks * ks * 64 * m * 4), plan


# (row blocks, stages, CTAs): one CTA, one unit a CTA, runs shorter and longer than a block, the 8B o / qkv / down and
# lm_head shapes on 264 CTAs
STREAM_K_CASES = [
    (2, 4, 3),
    (1, 1, 1),
    (3, 5, 15),
    (7, 5, 3),
    (5, 3, 7),
    (64, 32, 264),
    (96, 32, 264),
    (64, 96, 264),
    (2374, 32, 264),
]


@pytest.mark.parametrize("row_blocks,stages,ctas", STREAM_K_CASES)
def test_stream_k_segments_cover_every_unit_once_in_equal_runs(row_blocks, stages, ctas):
    from specdec.kernels.cuda.ops import stream_k_segments

    _library_or_skip()
    segments = stream_k_segments(row_blocks, stages, ctas)
    covered = [[0] * stages for _ in range(row_blocks)]
    runs = [[] for _ in range(ctas)]
    for cta, block, lo, hi, *_ in segments:
        assert 0 <= lo < hi <= stages, segments
        for s in range(lo, hi):
            covered[block][s] += 1
        runs[cta].append(block * stages + lo)
        runs[cta].append(block * stages + hi)
    assert all(c == 1 for row in covered for c in row), "every unit in exactly one segment"
    # each CTA's segments are one contiguous run of units, in order, and the runs differ by at most one unit
    for ends in runs:
        assert ends == sorted(ends) and all(ends[i] == ends[i + 1] for i in range(1, len(ends) - 1, 2)), ends
    lengths = [ends[-1] - ends[0] for ends in runs]
    assert max(lengths) - min(lengths) <= 1 and sum(lengths) == row_blocks * stages, lengths
    # a block's pieces are numbered in k order; one piece is stored at once, more get distinct slots of their CTA
    by_block = {}
    for cta, block, lo, _hi, piece, pieces, slot in segments:
        by_block.setdefault(block, []).append((lo, piece, pieces, slot, cta))
    slots = []
    for block, parts in by_block.items():
        parts.sort()
        assert [p[1] for p in parts] == list(range(len(parts))) and {p[2] for p in parts} == {len(parts)}, (block, parts)
        ctas_of_block = [p[4] for p in parts]
        assert ctas_of_block == list(range(ctas_of_block[0], ctas_of_block[0] + len(parts))), (block, parts)
        if len(parts) == 1:
            assert parts[0][3] == -1, parts
        else:
            assert all(p[3] // 2 == p[4] for p in parts), parts
            slots += [p[3] for p in parts]
    assert len(slots) == len(set(slots)) and all(0 <= s < 2 * ctas for s in slots), slots


def test_stream_k_segments_of_a_small_case():
    from specdec.kernels.cuda.ops import stream_k_segments

    _library_or_skip()
    # 8 units over 3 CTAs: runs [0, 2), [2, 5), [5, 8); block 0 = units 0-3, block 1 = units 4-7. CTA 1 starts inside
    # block 0 (its first segment: slot 2) and ends inside block 1 (its last: slot 3); CTA 2 starts inside block 1 (slot 4).
    assert stream_k_segments(2, 4, 3) == [
        (0, 0, 0, 2, 0, 2, 0),
        (1, 0, 2, 4, 1, 2, 2),
        (1, 1, 0, 1, 0, 2, 3),
        (2, 1, 1, 4, 1, 2, 4),
    ]
    with pytest.raises(ValueError, match=r"ctas: expected at most row_blocks x stages = 8 \(one unit a CTA\), got 9"):
        stream_k_segments(2, 4, 9)
    with pytest.raises(ValueError, match=r"stages: expected a positive int, got 0"):
        stream_k_segments(2, 0, 1)


@pytest.mark.parametrize("kind,split_kind", [("w12_v8", "w12_v7"), ("q_v3", "q_v2"), ("bf16_v3", "bf16_v2")])
@pytest.mark.parametrize("m,n,k", BULK_SHAPES)
def test_persistent_plans_fill_every_slot_once_with_the_split_k_stages(kind, split_kind, m, n, k):
    from specdec.kernels.cuda.ops import launch_plan, stream_k_segments

    _library_or_skip()
    plan, split = launch_plan(kind, m, n, k, 132), launch_plan(split_kind, m, n, k, 132)
    # K % 32 != 0: the split-K kernels' fallbacks run; one wave of split-K CTAs, or runs of more than 4 row blocks: the
    # split-K kernel runs. Both with their plans.
    blocks, stages = -(-n // 64), -(-k // 128)
    if k % 32 or split["ctas_x"] * split["k_splits"] <= 2 * 132 or 4 * min(2 * 132, blocks * stages // 2) < blocks:
        assert plan == split, (plan, split)
        return
    assert (plan["chunks"], plan["shared_bytes"], plan["bulk_copies"]) == (stages, split["shared_bytes"], 1), (plan, split)
    # two CTAs per SM, each a run of at least two stages, at most 62 a block (a block then meets at most 64 runs)
    assert plan["ctas_x"] == max(1, min(2 * 132, blocks * stages // 2, blocks * 62)), plan
    pieces = max(s[5] for s in stream_k_segments(blocks, stages, plan["ctas_x"]))
    counters = -(-blocks * 4 // 256) * 256
    assert plan["k_splits"] == pieces <= 64 and plan["workspace_bytes"] == counters + 2 * plan["ctas_x"] * 64 * m * 4, plan


# (M, N, K): multi-wave split-K plans that the persistent kernel takes over, and one-wave ones and lm_head (runs of ~9
# row blocks) it leaves
STREAM_K_TAKES = [
    (1, 24576, 4096, True),
    (16, 151936, 4096, False),
    (8, 51200, 5120, True),
    (8, 10240, 5120, True),
    (1, 4096, 4096, False),
    (16, 6144, 4096, False),
]


@pytest.mark.parametrize("m,n,k,takes", STREAM_K_TAKES)
def test_persistent_kernel_takes_the_shapes_whose_split_k_plan_needs_several_waves(m, n, k, takes):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    for kind, split_kind in (("w12_v8", "w12_v7"), ("q_v3", "q_v2"), ("bf16_v3", "bf16_v2")):
        plan, split = launch_plan(kind, m, n, k, 132), launch_plan(split_kind, m, n, k, 132)
        several_waves = split["ctas_x"] * split["k_splits"] > 2 * 132
        short_runs = 4 * 2 * 132 >= -(-n // 64)
        assert (several_waves and short_runs) == takes, (kind, split)
        assert (plan != split) == takes and (not takes or plan["ctas_x"] == 2 * 132), (kind, plan, split)


# (kind, the kind whose plan it takes where k % 32 != 0, weight bytes a stage row: W12 ae + nib, Q ae, bf16)
ROW_TILE_KINDS = [("w12_v9", "w12_v8", 384), ("q_v4", "q_v2", 256), ("bf16_v4", "bf16_v2", 512)]


@pytest.mark.parametrize("kind,fallback,row_bytes", ROW_TILE_KINDS)
@pytest.mark.parametrize("m,n,k", BULK_SHAPES + [(16, 6144, 4096), (9, 4096, 12288)])
def test_row_tile_plans_take_one_cta_a_16_row_tile_over_the_whole_of_k(kind, fallback, row_bytes, m, n, k):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    plan = launch_plan(kind, m, n, k, 132)
    if k % 32:
        assert plan == launch_plan(fallback, m, n, k, 132), plan
        return
    assert plan["row_tiles_per_cta"] == 1 and plan["k_splits"] == 1 and plan["workspace_bytes"] == 0, plan
    assert plan["ctas_x"] == -(-n // 16) and plan["chunks"] == -(-k // 256) and plan["bulk_copies"] == 1, plan
    # the ring: 6 stages of [16 rows][256] weights and [m][256] x for one MMA n-tile of tokens, 4 for two
    stages = 6 if m <= 8 else 4
    ring = stages * (16 * row_bytes + m * 256 * 2)
    assert ring < plan["shared_bytes"] <= ring + 8 * 1024, plan
    assert plan["shared_bytes"] <= 227 * 1024 // 2, plan  # two CTAs an SM at any m


# (M, N, K, whether W12 / Q / bf16 take row tiles), a wave being as many CTAs as the SMs hold (W12 and Q 5 an SM at one
# token, 3-4 at 8-16 by shared memory; bf16 4 at one token, 3 at 8-16): W12 wherever K <= 8192 (the 8B gate_up and
# lm_head, the 32B o over 320 uneven CTAs), past it over at most two waves within 10 % of even (the 8B down), not over
# 320 CTAs (32B down: the fullest SM holds 3 against a mean of 2.4); the Q view over up to 8 waves, at 9-16 tokens
# only where K <= 8192 (not the 8B down); bf16 at up to 8 tokens wherever K <= 8192 (the 8B gate_up and lm_head, the
# 32B qkv), else in one wave, even or not (the 32B o and down), never two (the 32B qkv and the 8B gate_up at 16 tokens)
ROW_TILE_CASES = [
    (1, 6144, 4096, (True, True, True)),
    (1, 4096, 4096, (True, True, True)),
    (1, 4096, 12288, (True, True, True)),
    (1, 10240, 5120, (True, True, True)),
    (1, 5120, 8192, (True, True, True)),
    (1, 5120, 25600, (False, True, True)),
    (8, 5120, 25600, (False, True, True)),
    (1, 24576, 4096, (True, True, True)),
    (8, 24576, 4096, (True, True, True)),
    (1, 151936, 4096, (True, False, True)),
    (16, 24576, 4096, (True, True, False)),
    (16, 6144, 4096, (True, True, True)),
    (8, 10240, 5120, (True, True, True)),
    (16, 10240, 5120, (True, True, False)),
    (16, 4096, 12288, (True, False, True)),
    (16, 5120, 8192, (True, True, True)),
    (1, 14336, 12288, (True, True, False)),  # K past 8192, 896 CTAs: two waves of 660, the fullest SM 7 against 6.8
    (1, 11264, 12288, (False, True, False)),  # 704: the fullest SM 6 against a mean of 5.3
    (1, 22528, 12288, (False, True, False)),  # 1,408: even, but over two waves
    (1, 22528, 4096, (True, True, True)),  # K <= 8192: row tiles over any waves (bf16 at up to 8 tokens)
]
DEFAULT_KINDS = [("w12_v10", "w12_v9", "w12_v8"), ("q_v5", "q_v4", "q_v2"), ("bf16_v5", "bf16_v4", "bf16_v3")]


@pytest.mark.parametrize("m,n,k,pays", ROW_TILE_CASES)
@pytest.mark.parametrize("which", range(3), ids=["w12", "q", "bf16"])
def test_default_plans_take_row_tiles_where_they_pay(which, m, n, k, pays):
    from specdec.kernels.cuda.ops import launch_plan

    _library_or_skip()
    kind, rows, fallback = DEFAULT_KINDS[which]
    plan = launch_plan(kind, m, n, k, 132)
    assert plan == launch_plan(rows if pays[which] else fallback, m, n, k, 132), plan
    any_waves = k <= 8192 and (kind == "w12_v10" or (kind == "bf16_v5" and m <= 8))
    if pays[which] and not any_waves:  # at most 5 CTAs an SM: W12 past K 8192 two waves within
        ctas = plan["ctas_x"]  # 10 % of even, Q 8 waves, bf16 one
        assert ctas <= {"w12_v10": 2, "q_v5": 8, "bf16_v5": 1}[kind] * 5 * 132, plan
        if kind == "w12_v10":
            assert ctas >= 0.9 * 132 * -(-ctas // 132), plan
    if m <= 8:  # K % 32 != 0 (at most 8 tokens there): the fallback's own fallback, as the entry point runs
        assert launch_plan(kind, m, n, k + 8, 132) == launch_plan(fallback, m, n, k + 8, 132)


# (M, N, K, stage groups of the Q view when two are asked for): two at up to 8 tokens where every CTA is resident at
# once at three an SM: the 8B qkv (384 CTAs), o and down (256) and the 32B o and down (320); not at 9-16 tokens, not
# the 32B qkv (640) nor the multi-wave calls; W12 and bf16 never (measured no faster)
ROW_STAGE_GROUP_CASES = [
    (1, 6144, 4096, 2),
    (1, 4096, 12288, 2),
    (1, 5120, 25600, 2),
    (8, 6144, 4096, 2),
    (8, 4096, 4096, 2),
    (8, 5120, 5120, 2),
    (9, 4096, 4096, 1),
    (16, 6144, 4096, 1),
    (1, 10240, 5120, 1),
    (8, 10240, 5120, 1),
    (1, 24576, 4096, 1),
    (1, 151936, 4096, 1),
]


@pytest.mark.parametrize("m,n,k,groups", ROW_STAGE_GROUP_CASES)
def test_two_stage_groups_only_where_every_cta_is_resident_at_three_an_sm(m, n, k, groups):
    from specdec.kernels.cuda.ops import rows_stage_groups

    _library_or_skip()
    assert rows_stage_groups("q", m, n, k, 132, 2) == groups
    for kind in ("w12", "q", "bf16"):
        assert rows_stage_groups(kind, m, n, k, 132, 1) == 1, kind  # one asked for: one
    assert rows_stage_groups("w12", m, n, k, 132, 2) == rows_stage_groups("bf16", m, n, k, 132, 2) == 1
    with pytest.raises(ValueError, match="sms, wanted: expected >= 1 and 1 or 2, got 132 and 3"):
        rows_stage_groups("w12", m, n, k, 132, 3)
    with pytest.raises(ValueError, match=r"rows_stage_groups: expected 1 <= m <= 16"):
        rows_stage_groups("w12", 17, n, k, 132, 2)


@pytest.mark.parametrize("m", [1, 17, 64, 128])
def test_wide_ops_cpu_path_is_the_reference_bit_for_bit(m):
    w12 = W12Tensor.from_bf16(planted(40, 128))
    assert w12.num_escapes >= 1
    x = torch.randn(m, 128, generator=torch.Generator().manual_seed(m)).to(torch.bfloat16)
    assert torch.equal(w12_gemm_wide(x, *planes(w12)), w12_linear_reference(x, w12))
    assert torch.equal(torch.ops.specdec.q_gemm_wide(x, w12.ae, w12.base), q_linear_reference(x, w12))
    assert not torch.equal(w12_linear_reference(x, w12), q_linear_reference(x, w12))


def test_wide_ops_fake_implementations_give_the_output_shape():
    w12 = W12Tensor.from_bf16(planted(24, 64))
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x = mode.from_tensor(torch.zeros(100, 64, dtype=torch.bfloat16))
        fake = [mode.from_tensor(t) for t in planes(w12)]
        assert tuple(torch.ops.specdec.w12_gemm_wide(x, *fake).shape) == (100, 24)
        assert tuple(torch.ops.specdec.q_gemm_wide(x, fake[0], fake[2]).shape) == (100, 24)
        with pytest.raises(ValueError, match=r"x: expected 1 to 128 rows \(tokens\) at K=64, got M=129"):
            torch.ops.specdec.w12_gemm_wide(mode.from_tensor(torch.zeros(129, 64, dtype=torch.bfloat16)), *fake)


def test_wide_ops_name_wrong_arguments():
    w12 = W12Tensor.from_bf16(planted(24, 64))
    x = torch.zeros(20, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"x: expected 1 to 128 rows \(tokens\) at K=64, got M=129"):
        w12_gemm_wide(torch.zeros(WIDE_MAX_TOKENS + 1, 64, dtype=torch.bfloat16), *planes(w12))
    narrow = W12Tensor.from_bf16(planted(24, 96))  # K a multiple of 32, not of the ring stage's 64
    with pytest.raises(ValueError, match=r"ae: expected K \(its width\) a multiple of 64 for the wide kernels, got 96"):
        w12_gemm_wide(torch.zeros(20, 96, dtype=torch.bfloat16), *planes(narrow))
    with pytest.raises(ValueError, match=r"ae: expected K \(its width\) a multiple of 64 for the wide kernels, got 96"):
        q_gemm_wide(torch.zeros(20, 96, dtype=torch.bfloat16), narrow.ae, narrow.base)
    with pytest.raises(TypeError, match=r"x: expected dtype torch.bfloat16, got torch.float32"):
        q_gemm_wide(x.float(), w12.ae, w12.base)
    with pytest.raises(ValueError, match=r"x: expected K=64 columns \(the weight's K\), got 128"):
        w12_gemm_wide(torch.zeros(20, 128, dtype=torch.bfloat16), *planes(w12))


def test_wide_switch_is_read_on_every_call_and_checked(monkeypatch):
    monkeypatch.delenv(WIDE_GEMM_ENV, raising=False)
    views = ("exact", "q")
    # the measured default: the exact view at 17-128 rows, the Q view from 33
    assert [wide_gemm_enabled(v, rows) for v in views for rows in (17, 32, 33, 128)] == [True] * 4 + [False, False, True, True]
    for value, expected in (("1", [True, True]), ("0", [False, False]), ("exact", [True, False]), ("", [True, False])):
        monkeypatch.setenv(WIDE_GEMM_ENV, value)
        assert [wide_gemm_enabled(v, 32) for v in views] == expected, value
    monkeypatch.setenv(WIDE_GEMM_ENV, "auto")
    assert [wide_gemm_enabled("q", rows) for rows in (32, 33)] == [False, True]
    monkeypatch.setenv(WIDE_GEMM_ENV, "yes")
    with pytest.raises(ValueError, match=r"\$SPECDEC_WIDE_GEMM: expected 'auto' or '1' or 'exact' or '0' .*, got 'yes'"):
        wide_gemm_enabled("exact")
    monkeypatch.setenv(WIDE_GEMM_ENV, "1")
    with pytest.raises(ValueError, match=r"view: expected 'exact' or 'q', got 'Q'"):
        wide_gemm_enabled("Q")


# Qwen3-8B and 32B linears (N, K)
_WIDE_SHAPES = [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288), (151936, 4096), (10240, 5120), (5120, 5120)]
_WIDE_SHAPES += [(51200, 5120), (5120, 25600)]


@pytest.mark.parametrize("kind", ["w12", "q"])
@pytest.mark.parametrize("m", [17, 32, 33, 64, 65, 96, 128])
@pytest.mark.parametrize("asked", [1, 2])
def test_wide_plan_fits_the_sm_and_fills_the_gpu(monkeypatch, kind, m, asked):
    _library_or_skip()
    monkeypatch.delenv("SPECDEC_WIDE_PIPELINE", raising=False)
    monkeypatch.setenv("SPECDEC_WIDE_STREAM_K", "0")  # the split-K plan (the persistent one's: the test below)
    monkeypatch.setenv("SPECDEC_WIDE_CTAS", str(asked))
    sms = 132
    for n, k in _WIDE_SHAPES:
        plan = wide_plan(kind, m, n, k, sms)
        assert plan["row_tiles_per_cta"] == 8 and plan["ctas_x"] == -(-n // 128) and plan["chunks"] == k // 64
        # up to 64 tokens two CTAs share an SM, past that one: each with the 1 KB the SM reserves for it (and under
        # 1 KB of static shared memory) fits the SM's 228 KB
        ctas_per_sm = 2 if m <= 64 and asked == 2 else 1
        assert ctas_per_sm * (plan["shared_bytes"] + 2048) <= 228 * 1024, (n, k, plan)
        splits = plan["k_splits"]
        # every slice at least 16 stages, 8 where two CTAs share an SM
        assert 1 <= splits <= 8 and k // 64 // splits >= 16 // ctas_per_sm, (n, k, plan)
        ctas = plan["ctas_x"] * splits
        # too few row blocks for one wave and room to split: split, unless at many tokens the partials' bytes (8 M s
        # per K bytes of weights) outweigh the idle CTA slots
        if plan["ctas_x"] < sms * ctas_per_sm and k // 64 >= 32 and m <= 64:
            assert ctas >= 0.7 * sms * ctas_per_sm, (n, k, plan)
        counters = -(-plan["ctas_x"] * 4 // 256) * 256
        # a partial tile is [32 NB][128] fp32 (the token columns of the kernel's MMAs), of which the first m are used
        cols = -(-m // 32) * 32
        expected = 0 if splits == 1 else counters + plan["ctas_x"] * splits * 128 * cols * 4
        assert plan["workspace_bytes"] == expected, (n, k, plan)
        assert plan["bulk_copies"] == 1


@pytest.mark.parametrize("env", [("SPECDEC_WIDE_PIPELINE", "1"), ("SPECDEC_WIDE_CTAS", "1")])
def test_wide_plan_keeps_one_cta_an_sm_for_the_pipelined_loop_or_when_asked(monkeypatch, env):
    _library_or_skip()
    monkeypatch.delenv("SPECDEC_WIDE_PIPELINE", raising=False)
    monkeypatch.setenv("SPECDEC_WIDE_CTAS", "2")
    two = wide_plan("w12", 32, 4096, 4096, 132)
    monkeypatch.setenv(*env)  # the pipelined loop with two asked for, or one asked for
    one = wide_plan("w12", 32, 4096, 4096, 132)
    # one CTA an SM (the pipelined loop's registers are over 96 a thread): 132 slots filled with slices of at least
    # 16 stages and a ring as deep as 200 KB holds; two: 264 slots with slices of 8
    assert one["k_splits"] == 4 and one["shared_bytes"] > 114 * 1024, one
    assert two["k_splits"] == 8 and 2 * (two["shared_bytes"] + 2048) <= 228 * 1024, two


@pytest.mark.parametrize(
    ("env", "reader", "default", "other", "bad"),
    [
        ("SPECDEC_WIDE_CTAS", "wide_ctas_per_sm", 1, 2, "4"),
        ("SPECDEC_WIDE_GROUPS", "wide_stage_groups", 2, 1, "3"),
        ("SPECDEC_WIDE_PIPELINE", "wide_pipeline", False, True, "yes"),
    ],
)
def test_the_wide_kernels_settings_read_the_environment(monkeypatch, env, reader, default, other, bad):
    from specdec.kernels.cuda import ops

    read = getattr(ops, reader)
    monkeypatch.delenv(env, raising=False)
    assert read() == default
    monkeypatch.setenv(env, str(int(other)))
    assert read() == other
    monkeypatch.setenv(env, bad)
    with pytest.raises(ValueError, match=rf"\${env}: expected '[01]' or '[12]' .*, got '{bad}'"):
        read()


@pytest.mark.parametrize(
    ("env", "reader", "default", "others", "bad", "expected"),
    [
        ("SPECDEC_WIDE_UNROLL", "wide_unroll", "auto", ("1", "0", "auto"), "2", "'auto' or '1' or '0'"),
        ("SPECDEC_WIDE_STREAM_K", "wide_stream_k", "auto", ("1", "0", "auto"), "ragged", "'auto' or '1' or '0'"),
        (
            "SPECDEC_SPLIT_WORKSPACE",
            "split_workspace_mode",
            "shared",
            ("per-layout", "shared"),
            "private",
            "'shared' or 'per-layout'",
        ),
    ],
)
def test_the_named_modes_read_the_environment(monkeypatch, env, reader, default, others, bad, expected):
    from specdec.kernels.cuda import ops

    read = getattr(ops, reader)
    monkeypatch.delenv(env, raising=False)
    assert read() == default
    for mode in others:
        monkeypatch.setenv(env, mode)
        assert read() == mode
    monkeypatch.setenv(env, bad)
    with pytest.raises(ValueError, match=rf"\${env}: expected {expected} .*, got '{bad}'"):
        read()


def test_the_library_as_built_leaves_no_part_of_the_wide_kernels_out():
    from specdec.kernels.cuda.ops import wide_ablation

    _library_or_skip()
    assert wide_ablation() == 0  # a build with -DSPECDEC_WIDE_ABLATE times parts of the kernels and multiplies wrongly


def test_the_trace_field_names_follow_the_kernels_record_order():
    # ops.WIDE_TRACE_FIELDS names the columns wide_trace_read returns; the WideTrace enum (common/trace.cuh) is where
    # the kernels write them: kTraceRingDone -> "ring_done", in the same order
    from specdec.kernels.cuda.ops import WIDE_TRACE_FIELDS

    source = "\n".join(path.read_text() for path in build.source_files())
    body = re.search(r"enum WideTrace \{(.*?)\};", source, re.S).group(1)
    names = re.findall(r"\bkTrace(\w+?),", body)
    assert [re.sub(r"(?<!^)(?=[A-Z])", "_", n).lower() for n in names] == list(WIDE_TRACE_FIELDS)


def test_the_library_as_built_records_no_trace_and_says_so():
    from specdec.kernels.cuda.ops import wide_trace_fields, wide_trace_read

    _library_or_skip()
    assert wide_trace_fields() == 0  # a build with -DSPECDEC_WIDE_TRACE stores the clock at every phase of the wide kernels
    with pytest.raises(RuntimeError, match=r"without -DSPECDEC_WIDE_TRACE=1 records no trace"):
        wide_trace_read(1)


def test_wide_unrolled_keeps_w12_rolled_up_to_32_tokens_by_default(monkeypatch):
    _library_or_skip()
    from specdec.kernels.cuda.ops import wide_unrolled

    monkeypatch.delenv("SPECDEC_WIDE_UNROLL", raising=False)
    # the measured choice: the Q view unrolled at every width, W12 from 33 tokens (one wgmma n-tile of 32 rolled)
    assert [wide_unrolled("q", m) for m in (17, 32, 33, 128)] == [True] * 4
    assert [wide_unrolled("w12", m) for m in (17, 32, 33, 64, 128)] == [False, False, True, True, True]
    assert all(wide_unrolled(kind, m, "1") for kind in ("w12", "q") for m in (17, 32, 128))
    assert not any(wide_unrolled(kind, m, "0") for kind in ("w12", "q") for m in (17, 32, 128))
    monkeypatch.setenv("SPECDEC_WIDE_UNROLL", "0")
    assert not wide_unrolled("q", 64)
    with pytest.raises(ValueError, match=r"m: expected 1 <= m <= 128, got 129"):
        wide_unrolled("q", 129)
    with pytest.raises(ValueError, match=r"kind: expected 'w12' or 'q', got 'bf16'"):
        wide_unrolled("bf16", 32)
    with pytest.raises(ValueError, match=r"mode: expected one of \('auto', '1', '0'\), got 'yes'"):
        wide_unrolled("q", 32, "yes")


def test_the_persistent_wide_kernel_takes_the_calls_it_was_measured_faster_on_and_one_cta_an_sm(monkeypatch):
    _library_or_skip()
    from specdec.kernels.cuda.ops import wide_stream_k_takes

    for env in ("SPECDEC_WIDE_PIPELINE", "SPECDEC_WIDE_CTAS", "SPECDEC_WIDE_GROUPS", "SPECDEC_WIDE_STREAM_K"):
        monkeypatch.delenv(env, raising=False)
    sms = 132
    # auto: a split plan whose last wave is under half full, the Q view at every width and W12 up to 64 tokens (the
    # 32B gate_up: 400 row blocks x 2 splits, 800 CTAs, 8 in the seventh wave)
    for m in (17, 32, 64, 96, 128):
        assert wide_stream_k_takes("q", m, 51200, 5120, sms, "auto")
        assert wide_stream_k_takes("w12", m, 51200, 5120, sms, "auto") == (m <= 64)
    # the Q view on a split plan of two or three waves (the 8B gate_up: 384 CTAs, 120 in the third; the 32B qkv at 17
    # rows: 240, 108 in the second), W12 up to 64 tokens on three (not the 32B qkv's two, nor past 64 tokens); neither
    # on the lm_head's nine waves (1187 blocks, 131 in the ninth) or a one-wave call (the 8B o: 128 CTAs)
    assert wide_stream_k_takes("q", 32, 24576, 4096, sms, "auto")
    assert wide_stream_k_takes("q", 17, 10240, 5120, sms, "auto")
    assert [wide_stream_k_takes("w12", m, 24576, 4096, sms, "auto") for m in (17, 32, 64, 96)] == [True, True, True, False]
    assert not wide_stream_k_takes("w12", 64, 10240, 5120, sms, "auto")
    assert not wide_stream_k_takes("w12", 64, 151936, 4096, sms, "auto")
    assert not wide_stream_k_takes("q", 32, 151936, 4096, sms, "auto")
    assert not wide_stream_k_takes("q", 64, 4096, 4096, sms, "auto")
    assert not wide_stream_k_takes("w12", 64, 4096, 4096, sms, "auto")
    assert wide_stream_k_takes("w12", 64, 4096, 4096, sms, "1")
    assert not wide_stream_k_takes("w12", 64, 51200, 5120, sms, "0")
    assert wide_stream_k_takes("w12", 64, 51200, 5120, sms)  # unset: auto
    monkeypatch.setenv("SPECDEC_WIDE_STREAM_K", "0")
    assert not wide_stream_k_takes("w12", 64, 51200, 5120, sms)
    monkeypatch.delenv("SPECDEC_WIDE_STREAM_K")
    # its unit arithmetic is 32-bit: units x (CTAs + 1) must fit in an int (65,536 row blocks x 240 stages x 133 does,
    # x 256 stages does not)
    assert wide_stream_k_takes("w12", 64, 128 * 65536, 64 * 240, sms, "1")
    assert not wide_stream_k_takes("w12", 64, 128 * 65536, 64 * 256, sms, "1")
    # the persistent kernel runs the one-set loop with one CTA an SM and, up to 64 tokens, two stage groups
    monkeypatch.setenv("SPECDEC_WIDE_PIPELINE", "1")
    assert not wide_stream_k_takes("w12", 64, 51200, 5120, sms, "1")
    monkeypatch.delenv("SPECDEC_WIDE_PIPELINE")
    monkeypatch.setenv("SPECDEC_WIDE_CTAS", "2")
    assert not wide_stream_k_takes("q", 64, 51200, 5120, sms, "1")
    assert wide_stream_k_takes("q", 96, 51200, 5120, sms, "1")  # past 64 tokens one CTA an SM whatever is asked
    monkeypatch.delenv("SPECDEC_WIDE_CTAS")
    monkeypatch.setenv("SPECDEC_WIDE_GROUPS", "1")
    assert not wide_stream_k_takes("w12", 32, 51200, 5120, sms, "1")
    assert wide_stream_k_takes("w12", 96, 51200, 5120, sms, "1")  # one group past 64 tokens anyway
    with pytest.raises(ValueError, match=r"mode: expected one of \('auto', '1', '0'\), got 'ragged'"):
        wide_stream_k_takes("w12", 64, 4096, 4096, sms, "ragged")
    with pytest.raises(ValueError, match=r"kind: expected 'w12' or 'q', got 'bf16'"):
        wide_stream_k_takes("bf16", 64, 4096, 4096, sms, "1")
    with pytest.raises(ValueError, match=r"got m=129 n=4096 k=4096 sms=132"):
        wide_stream_k_takes("q", 129, 4096, 4096, sms, "1")


@pytest.mark.parametrize("kind", ["w12", "q"])
@pytest.mark.parametrize("m", [17, 64, 128])
def test_the_persistent_wide_plan_cuts_the_units_into_equal_runs(monkeypatch, kind, m):
    _library_or_skip()
    from specdec.kernels.cuda.ops import wide_plan

    for env in ("SPECDEC_WIDE_PIPELINE", "SPECDEC_WIDE_CTAS", "SPECDEC_WIDE_GROUPS"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("SPECDEC_WIDE_STREAM_K", "1")
    sms = 132
    for n, k in _WIDE_SHAPES + [(128, 1024), (300, 64 * 40)]:
        plan = wide_plan(kind, m, n, k, sms)
        blocks, stages = -(-n // 128), k // 64
        units = blocks * stages
        # one CTA an SM, a run of at least 16 units each, a row block met by at most 64 runs
        ctas = max(1, min(sms, units // 16, blocks * 62))
        assert plan["ctas_x"] == ctas and plan["chunks"] == stages and plan["row_tiles_per_cta"] == 8, (n, k, plan)
        bounds = [c * units // ctas for c in range(ctas + 1)]
        runs_of = [
            sum(1 for c in range(ctas) if bounds[c] < (b + 1) * stages and bounds[c + 1] > b * stages) for b in range(blocks)
        ]
        # the most runs (pieces) a row block is cut into, reported in the k_splits field
        assert plan["k_splits"] == max(runs_of) <= 64, (n, k, plan)
        counters = -(-blocks * 4 // 256) * 256
        cols = -(-m // 32) * 32  # a slot holds a [32 NB][128] fp32 tile; each CTA has two (its first and last block)
        assert plan["workspace_bytes"] == counters + 2 * ctas * 128 * cols * 4, (n, k, plan)
        assert (plan["shared_bytes"] + 2048) <= 228 * 1024


def test_wide_plan_refuses_what_the_kernel_cannot_take():
    _library_or_skip()
    with pytest.raises(ValueError, match=r"wide_plan: expected 1 <= m <= 128, n >= 1 and k a positive multiple of 64"):
        wide_plan("w12", 129, 4096, 4096, 132)
    with pytest.raises(ValueError, match=r"got m=20 n=4096 k=4128"):
        wide_plan("q", 20, 4096, 4128, 132)
    with pytest.raises(ValueError, match=r"kind: expected 'w12' or 'q', got 'bf16'"):
        wide_plan("bf16", 20, 4096, 4096, 132)


def _word(plane: torch.Tensor, rows: torch.Tensor, byte: torch.Tensor) -> torch.Tensor:
    # the little-endian 32-bit word at byte offsets `byte` of `rows` of a uint8 plane, as int64
    b = [plane[rows, byte + i].long() for i in range(4)]
    return b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24)


def _rotr(w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    return ((w >> r) | (w << ((32 - r) % 32))) & 0xFFFFFFFF


def _decode_natural(w: torch.Tensor, n: torch.Tensor, x: torch.Tensor, odd: torch.Tensor) -> torch.Tensor:
    # decode_natural (wide/decode_natural.cuh) on int64 lanes: E|m_hi by a rotation right of 28 (even lanes) or 4 (odd),
    # the signs by 24 or 0, the base added where the half is not the zero code
    t = (_rotr(w, torch.where(odd, 4, 28)) & 0x07F007F0) | n
    nonzero = ((t & 0xFFFF) != 0).long() | (((t >> 16) != 0).long() << 16)
    return ((nonzero * x + t) & 0xFFFFFFFF) | (_rotr(w, torch.where(odd, 0, 24)) & 0x80008000)


def _swizzle_64b(plane: torch.Tensor, width: int) -> torch.Tensor:
    """A uint8 plane ``[N, K]`` as the wide kernel's ring holds it, stage after stage: each stage's box of ``width``
    bytes a row copied by a tensor map in the 64-byte swizzle (16-byte chunk c of CTA row r at chunk c ^ (r // 2 % 4)),
    returned as ``[N, K]`` again (row r, stage s at bytes s * width of the row)."""
    n, k = plane.shape
    r = torch.arange(n)[:, None, None]
    stage = torch.arange(k // width)[None, :, None] * width
    c = torch.arange(width // 16)[None, None, :]
    out = torch.empty_like(plane)
    for b in range(16):
        out[r, stage + 16 * (c ^ ((r % 128) // 2 % 4)) + b] = plane[r, stage + 16 * c + b]
    return out


def test_natural_order_fragment_decode_rule():
    """The wide kernel's A fragment in natural k order: lane (g, t) of a warp reads, for the k16 step q of a stage, the
    AE words at bytes 16 (q ^ (g // 2 % 4)) + 4 (t >> 1) and + 8 of its row in the ring (the 64-byte swizzle the ae
    tensor map lays the stage out in) and the nibble words at 8q and 8q + 4, decodes the (k0, k1) pair of an AE word
    for even t and the (k2, k3) pair for odd t (rotations by lane-dependent amounts) with nibble slot t; the two bf16x2
    words are then the weights (16q + 2t, +1) and (16q + 2t + 8, +9) of the stage, bit for bit (escaped slots: a signed
    zero). Checked on planted weights for every lane, row and step: the format's byte order (``_perm_ae``,
    ``_perm_nib``) and the ring's swizzle are what the kernel's indexing assumes."""
    from specdec.kernels.w12_gemm import escape_coordinates

    n, k = 48, 256
    w12 = W12Tensor.from_bf16(planted(n, k))
    assert _swizzle_64b(w12.ae, 64).sum() == w12.ae.sum() and not torch.equal(_swizzle_64b(w12.ae, 64), w12.ae)
    ring = _swizzle_64b(w12.ae, 64)
    rows = torch.arange(n).repeat_interleave(4 * (k // 16))  # every (row, t, step)
    t = torch.arange(4).repeat_interleave(k // 16).repeat(n)
    kb = (torch.arange(k // 16) * 16).repeat(4 * n)
    stage, q = kb // 64 * 64, kb % 64 // 16
    chunk = stage + 16 * (q ^ ((rows % 8) // 2 % 4))  # g = row % 8 (and g + 8 alike)
    x = w12.base.long()[rows] << 7
    odd, shift = (t & 1) == 1, 4 * t
    lo = _decode_natural(_word(ring, rows, chunk + 4 * (t >> 1)), (_word(w12.nib, rows, kb // 2) >> shift) & 0x000F000F, x, odd)
    hi = _decode_natural(
        _word(ring, rows, chunk + 8 + 4 * (t >> 1)), (_word(w12.nib, rows, kb // 2 + 4) >> shift) & 0x000F000F, x, odd
    )
    got = torch.zeros(n, k, dtype=torch.long)
    for word, col in ((lo, kb + 2 * t), (hi, kb + 2 * t + 8)):
        got[rows, col] = word & 0xFFFF
        got[rows, col + 1] = word >> 16
    want = w12.to_bf16().view(torch.int16).long() & 0xFFFF
    esc_rows, esc_cols = escape_coordinates(w12.esc_ptr, w12.esc_pos, n=n, k=k)
    kept = torch.ones(n, k, dtype=torch.bool)
    kept[esc_rows.long(), esc_cols.long()] = False
    assert int((~kept).sum()) == w12.num_escapes >= 3
    assert torch.equal(got[kept], want[kept])
    assert bool(((got[~kept] & 0x7FFF) == 0).all())  # an escaped slot decodes to a signed zero


def test_launchers_keep_what_they_set_per_device():
    """Kernel attributes are per device: a launcher that remembered 'set' once per process would leave a second GPU of
    the process without its shared-memory size (every launch there refused). Host-side state is PerDevice."""
    source = "\n".join(path.read_text() for path in build.source_files())
    host_statics = re.findall(
        r"^[ \t]+static (?!constexpr|__shared__|TensorMapEncodeTiled|PerDevice<)(\w[\w<>, ]*) (\w+)", source, re.M
    )
    assert host_statics == [("int", "cached")], host_statics  # sm_count's cache is indexed by device already


def test_a_row_tile_plan_reports_the_shared_memory_of_the_stage_groups_it_launches():
    from specdec.kernels.cuda import ops

    lib = _library_or_skip()
    assert ops.rows_stage_groups("q", 8, 6144, 4096, 132, 2) == 2  # the 8B qkv at 8 tokens takes two groups
    try:
        lib.specdec_set_row_stage_groups(1)
        one = ops.launch_plan("q_v4", 8, 6144, 4096, 132)["shared_bytes"]
        lib.specdec_set_row_stage_groups(2)
        two = ops.launch_plan("q_v4", 8, 6144, 4096, 132)["shared_bytes"]
    finally:
        lib.specdec_set_row_stage_groups(ops.row_stage_groups())
    # the second group's four consumer warps each sum [16 rows][8 tokens] fp32 in shared memory
    assert two - one == 4 * 16 * 8 * 4


def test_one_shared_workspace_keeps_every_wide_plan_s_partials_off_every_plan_s_counters(monkeypatch):
    _library_or_skip()
    from specdec.kernels.cuda.ops import wide_plan, wide_split_layout

    monkeypatch.delenv("SPECDEC_WIDE_CTAS", raising=False)
    monkeypatch.delenv("SPECDEC_WIDE_PIPELINE", raising=False)
    calls = [(kind, m, n, k) for kind in ("w12", "q") for m in (17, 32, 64, 100, 128) for n, k in _WIDE_SHAPES]
    needs = {call: wide_plan(call[0], call[1], call[2], call[3], 132)["workspace_bytes"] for call in calls}
    split = [call for call in calls if needs[call] > 0]
    assert len(split) > 10 and len({needs[c] for c in split}) > 5  # plans of many sizes and row-block counts
    size = -(-2 * max(needs.values()) // 4) * 4  # what split_k_workspace hands every launch: twice the largest
    layouts = {call: wide_split_layout(*call, 132, size) for call in split}
    lowest_counters = min(at["counters_at"] for at in layouts.values())
    highest_partial = max(at["partials_at"] + at["partial_bytes"] for at in layouts.values())
    assert highest_partial <= lowest_counters, (highest_partial, lowest_counters)
    for call, at in layouts.items():
        assert at["partials_at"] == 0 and at["counters_at"] % 4 == 0
        assert at["counters_at"] + at["counter_bytes"] <= size and at["partial_bytes"] + at["counter_bytes"] == needs[call]
    # the plan's own workspace: its counters right after its partials
    call = split[0]
    exact = wide_split_layout(*call, 132, needs[call])
    assert exact["counters_at"] == exact["partial_bytes"]
    with pytest.raises(ValueError, match=r"workspace_bytes: M=\d+ N=\d+ K=\d+ needs a workspace of \d+ bytes, got 4"):
        wide_split_layout(*call, 132, 4)
