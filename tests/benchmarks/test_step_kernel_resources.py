import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton

from benchmarks.kernels import step_kernel_resources as skr


def test_room_counts_the_scarcest_resource():
    gemm = skr.Footprint(threads=192, registers=80, shared=skr.W12_ROWS16_SHARED[3])
    rms = skr.Footprint(threads=256, registers=64, shared=1056)
    # four 80-register CTAs hold 61,440 registers: 4,096 left, a quarter of one 256-thread 64-register CTA
    assert skr.room(gemm, 4, rms) == 0
    assert skr.room(skr.Footprint(192, 64, gemm.shared), 4, rms) == 1
    # shared memory: 228 KB less four CTAs of ~50 KB (and 1 KB reserved each) leaves no room for an 80 KB CTA
    assert skr.room(skr.Footprint(192, 32, gemm.shared), 4, skr.Footprint(128, 32, 82944)) == 0
    assert skr.room(skr.Footprint(192, 32, gemm.shared), 1, skr.Footprint(128, 32, 82944)) == 2


def test_room_rejects_a_negative_count():
    with pytest.raises(ValueError, match="gemm_ctas: expected >= 0, got -1"):
        skr.room(skr.Footprint(32, 32, 0), -1, skr.Footprint(32, 32, 0))


def test_registers_round_up_to_a_warp_granule():
    assert skr.Footprint(32, 44, 0).warp_registers() == 1536  # 44 x 32 = 1,408 -> 6 granules of 256
    assert skr.held(skr.Footprint(192, 80, 1000), 3) == (3 * 6 * 2560, 3 * 2024, 576)


def test_parse_res_usage_wants_one_function():
    line = "  REG:255 STACK:240 SHARED:1024 LOCAL:0 CONSTANT[0]:688"
    assert skr.parse_res_usage(" Function f:\n" + line) == {"REG": 255, "STACK": 240, "SHARED": 1024, "LOCAL": 0}
    with pytest.raises(ValueError, match="expected one function's line, got 2"):
        skr.parse_res_usage(line + "\n" + line)


def test_compiles_a_step_kernel_for_sm90_on_cpu(tmp_path):
    # the suite runs kernels in the interpreter; compiling for sm_90 needs them defined as JIT functions: a process of its own
    out = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.kernels.step_kernel_resources",
        "--rows",
        "1",
        "--kernels",
        "silu_mul",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, env=env, cwd=Path(__file__).parents[2], capture_output=True, timeout=300)
    result = json.loads(out.read_text())
    (record,) = result["kernels"]
    assert record["kernel"] == "silu_mul" and record["threads"] == 128
    assert 16 <= record["registers"] <= 255 and record["stack"] == 0
    assert result["room"][0]["room"]["4 stages, bound 5"] >= 1


def test_interpreted_kernels_are_refused():
    from specdec.kernels.act import swiglu

    if isinstance(swiglu._silu_mul_kernel, triton.runtime.jit.JITFunction):
        pytest.fail("expected the suite's kernels defined for the interpreter (TRITON_INTERPRET=1)")
    with pytest.raises(RuntimeError, match="unset TRITON_INTERPRET"):
        skr.compile_footprint(swiglu._silu_mul_kernel, {}, {}, {"num_warps": 4})


def test_unknown_kernel_names_the_choices():
    with pytest.raises(SystemExit, match="--kernels: expected names from"):
        skr.main(["--rows", "1", "--kernels", "nope"])


class LaunchRecorder:
    """Stands in for a Triton kernel: ``kernel[grid](*args, **kwargs)`` records the keyword arguments, runs nothing."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append(kwargs)


def test_the_compiled_constants_are_the_launchers_own(monkeypatch):
    # each launcher of the step at the 8B shapes, 16 tokens, a 256-slot cache; what it passes its kernel must be what
    # step_kernels compiles (the programmatic-launch flag aside: it is 0 off a captured CUDA stream)
    from specdec.kernels.act import swiglu
    from specdec.kernels.attention import split_kv
    from specdec.kernels.norm import rms
    from specdec.kernels.rope import rotary

    recorders = {}
    for name, (module, attr) in {
        "rms_norm (residual add)": (rms, "_rms_norm_kernel"),
        "silu_mul": (swiglu, "_silu_mul_kernel"),
        "qk_norm_rope": (rotary, "_qk_norm_rope_kernel"),
        "split_kv split": (split_kv, "_split_kernel"),
        "split_kv combine": (split_kv, "_combine_kernel"),
    }.items():
        recorders[name] = LaunchRecorder()
        monkeypatch.setattr(module, attr, recorders[name])
    for module in (swiglu, split_kv):  # nothing runs: the launchers choose their compiled-kernel constants
        monkeypatch.setattr(module, "_INTERPRET", False)
    t, bf16 = 16, torch.bfloat16
    x = torch.zeros(t, 4096, dtype=bf16)
    rms.add_rms_norm_triton(x, x, torch.zeros(4096, dtype=bf16), 1e-6)
    swiglu.silu_mul_triton(torch.zeros(t, 2 * 12288, dtype=bf16))
    q, k = torch.zeros(1, t, 32, 128, dtype=bf16), torch.zeros(1, t, 8, 128, dtype=bf16)
    cos = torch.zeros(1, 1, t, 128)
    k_cache = torch.zeros(1, 8, 256, 128, dtype=bf16)
    cache = (k, k_cache, k_cache.clone(), None, torch.arange(t))
    rotary.qk_norm_rope_triton(q, k, cos, cos, torch.zeros(128, dtype=bf16), torch.zeros(128, dtype=bf16), 1e-6, cache)
    grouped = torch.zeros(1, 8, 4 * t, 128, dtype=bf16)
    split_kv.decode_attention_triton(grouped, k_cache, k_cache, torch.zeros(1, 1, 4 * t, 256), tokens=t)

    for name, (_, constants, _, options) in skr.step_kernels(t, 256).items():
        (launched,) = recorders[name].launches
        want = {**{k: v for k, v in constants.items() if k != "PDL"}, **options}
        triton_defaults = {"num_warps": 4, "num_stages": 3}  # what Triton compiles with where a launch names none
        got = {k: launched.get(k, triton_defaults.get(k)) for k in want}
        assert got == want, name
