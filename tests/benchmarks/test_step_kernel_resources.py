import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
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
        skr.compile_footprint(swiglu._silu_mul_kernel, {}, {}, 4)


def test_unknown_kernel_names_the_choices():
    with pytest.raises(SystemExit, match="--kernels: expected names from"):
        skr.main(["--rows", "1", "--kernels", "nope"])
