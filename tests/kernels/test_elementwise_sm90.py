"""The element-wise Triton kernels through Triton's real code generator for the H200 (sm_90), on the CPU.

The other kernel tests run the Triton interpreter, which never lowers a kernel. Here this file, run as a script in a
process without ``TRITON_INTERPRET``, compiles every variant of the q/k norm + RoPE (+ cache write), SwiGLU and
add + norm kernels to PTX and a cubin for sm_90, and reports what the tests below check in the PTX: the float32 RoPE
launch contracts nothing into an FMA (its bitwise claim), SwiGLU divides with correct rounding (``div.rn``), and the
SwiGLU, norm, q/k norm + RoPE and split-KV attention kernels launched programmatically (``specdec.kernels.launch``) let
the next kernel start and wait for the one before them, in the order their ``PDL`` constexpr says, before they load
anything; it also lowers the split-KV decode attention kernels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch


def compile_all() -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from specdec.kernels.act.swiglu import _silu_mul_kernel
    from specdec.kernels.norm.rms import _rms_norm_kernel
    from specdec.kernels.rope.rotary import LAUNCH_OPTIONS, _qk_norm_rope_kernel

    target = GPUTarget("cuda", 90, 32)

    def build(fn, types: dict, consts: dict, **options) -> str:
        signature = {n: "constexpr" if n in consts else types.get(n, "i32") for n in fn.arg_names}
        kernel = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=consts), target=target, options=options)
        assert "cubin" in kernel.asm
        return kernel.asm["ptx"]

    out: dict = {"rope": {}, "silu": {}, "add_norm": {}, "pdl": {}, "attention": {}}
    for dt in ("fp32", "bf16", "fp16"):
        ptrs = ("q_ptr", "k_ptr", "cos_ptr", "sin_ptr", "qw_ptr", "kw_ptr", "q_out_ptr", "k_out_ptr", "v_ptr")
        types = {n: f"*{dt}" for n in (*ptrs, "k_cache_ptr", "v_cache_ptr")} | {
            "slot_ptr": "*i64",
            "pos_ptr": "*i64",
            "q_index_ptr": "*i64",
        }
        types["eps"] = "fp32"
        variants = ((False, False, False, False), (False, False, True, False), (True, False, True, False),
                    (True, True, False, False), (True, True, True, True))  # fmt: skip
        for cache, slots, norm, scatter in variants:
            consts = dict(BLOCK=64, NORM=norm, CACHE=cache, SLOTS=slots, Q_SCATTER=scatter, PDL=0)
            ptx = build(_qk_norm_rope_kernel, types, consts, num_warps=2, **LAUNCH_OPTIONS)
            out["rope"][f"{dt} cache={cache} slots={slots} norm={norm} q_scatter={scatter}"] = {"fma": ptx.count("fma.rn.f32")}
        for pdl in PDL_VALUES:  # the decode step's launch: cache writes and the norm
            consts = dict(BLOCK=64, NORM=True, CACHE=True, SLOTS=False, Q_SCATTER=False, PDL=pdl)
            ptx = build(_qk_norm_rope_kernel, types, consts, num_warps=2, launch_pdl=pdl > 0, **LAUNCH_OPTIONS)
            out["pdl"][f"rope {dt} pdl={pdl}"] = griddep_order(ptx)
        for pdl in PDL_VALUES:
            ptx = build(_silu_mul_kernel, {"gu_ptr": f"*{dt}", "out_ptr": f"*{dt}", "stride_row": "i64"},
                        dict(BLOCK=1024, ACCURATE_EXP=True, PDL=pdl), num_warps=4, launch_pdl=pdl > 0)  # fmt: skip
            out["silu"][f"{dt} pdl={pdl}"] = {"div_rn": "div.rn.f32" in ptx, "div_full": "div.full.f32" in ptx}
            out["pdl"][f"silu {dt} pdl={pdl}"] = griddep_order(ptx)
            types = {n: f"*{dt}" for n in ("x_ptr", "gate_ptr", "w_ptr", "out_ptr", "delta_ptr", "res_ptr")} | {"eps": "fp32"}
            consts = dict(BLOCK=4096, GATED=False, SCALED=True, ADD=True, PDL=pdl)
            out["pdl"][f"add_norm {dt} pdl={pdl}"] = griddep_order(
                build(_rms_norm_kernel, types, consts, num_warps=8, launch_pdl=pdl > 0)
            )
            out["add_norm"][f"{dt} pdl={pdl}"] = True
    from specdec.kernels.attention.split_kv import _combine_kernel, _split_kernel, dot_precision

    for dt in ("bf16", "fp16", "fp32"):
        types = {n: f"*{dt}" for n in ("q_ptr", "k_ptr", "v_ptr", "mask_ptr")}
        types |= {n: "*fp32" for n in ("m_ptr", "l_ptr", "acc_ptr")} | {"scale": "fp32"}
        precision = dot_precision({"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dt])
        consts = dict(BLOCK_R=16, BLOCK_N=64, D=128, UPCAST=False, PRECISION=precision)
        ptx = build(_split_kernel, types, consts | dict(PDL=0), num_warps=4)
        for pdl in PDL_VALUES[1:]:
            split = build(_split_kernel, types, consts | dict(PDL=pdl), num_warps=4, launch_pdl=True)
            out["pdl"][f"attention split {dt} pdl={pdl}"] = griddep_order(split)
        types = {n: "*fp32" for n in ("m_ptr", "l_ptr", "acc_ptr")} | {"out_ptr": f"*{dt}"}
        for pdl in PDL_VALUES:
            combine = build(_combine_kernel, types, dict(BLOCK_S=32, D=128, PDL=pdl), num_warps=4, launch_pdl=pdl > 0)
            out["pdl"][f"attention combine {dt} pdl={pdl}"] = griddep_order(combine)
        out["attention"][dt] = {"mma": "mma.sync" in ptx or "wgmma" in ptx, "tf32": ".tf32" in ptx}
    return out


PDL_VALUES = (0, 1)  # the ``PDL`` constexprs a kernel is built with: plain, then programmatic (specdec.kernels.launch)


def griddep_order(ptx: str) -> list[str]:
    """The PTX's ``griddepcontrol`` instructions and its first global load, in program order."""
    seen = []
    for line in ptx.splitlines():
        words = line.split()
        op = (words[1] if words and words[0].startswith("@") and len(words) > 1 else words[0] if words else "").rstrip(";")
        if op.startswith("griddepcontrol."):
            seen.append(op)
        elif op.startswith("ld.global") and "ld.global" not in seen:
            seen.append("ld.global")
    return seen


def test_every_variant_compiles_for_sm90_as_the_rounding_claims_need():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(out["rope"]) == 15 and len(out["add_norm"]) == 3 * len(PDL_VALUES)
    # the split-KV attention kernels lower for sm_90, their 16-bit dot products on tensor cores
    assert out["attention"]["bf16"]["mma"] and out["attention"]["fp16"]["mma"], out["attention"]
    # float32 inputs: IEEE products, no TF32 (Triton's default for float32 dots on NVIDIA GPUs), as the reference
    assert not out["attention"]["fp32"]["tf32"], out["attention"]
    # float32 RoPE: no product fused into the sum (the norm variants keep no FMA either, so the claim holds there too)
    assert all(v["fma"] == 0 for k, v in out["rope"].items() if k.startswith("fp32")), out["rope"]
    assert all(v["div_rn"] and not v["div_full"] for v in out["silu"].values()), out["silu"]
    # programmatic launch, both instructions before the first global load: wait for the kernel before, then let the next
    # one start; a plain build has neither
    wait, signal = "griddepcontrol.wait", "griddepcontrol.launch_dependents"
    order = {0: ["ld.global"], 1: [wait, signal, "ld.global"]}
    assert len(out["pdl"]) == 2 * 3 * 4 + 1 * 3, sorted(out["pdl"])  # PDL values x dtypes x kernels; the split: PDL 1
    assert all(v == order[int(k.rsplit("pdl=", 1)[1])] for k, v in out["pdl"].items()), out["pdl"]


if __name__ == "__main__":
    print(json.dumps(compile_all()))
