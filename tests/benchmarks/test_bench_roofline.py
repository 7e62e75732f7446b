"""The roofline benchmark's CPU smoke mode runs end to end; a kernel that decodes one weight wrong fails the run."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks.kernels import bench_roofline
from specdec.kernels.cuda import ops


def test_smoke_mode_runs_and_checks_pass(tmp_path, q_variants_called):
    out = tmp_path / "roofline.json"
    assert bench_roofline.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["provenance"]["seed"] == 0 and result["decode_checks_passed"]
    shared = [c for c in result["decode_checks"] if "only" not in c]
    assert shared and all(c["w12_decode_exact"] and c["q_decode_exact"] and c["escapes"] > 0 for c in shared)
    checks = result["decode_checks"]
    assert bench_roofline.BULK_VARIANTS == ("v5", "v6", "v7", "v8", "v9")
    for variant in ("v3", "v4", *bench_roofline.BULK_VARIANTS):  # the shared shapes and the variant's own
        mine = [c for c in checks if c.get("only", f"w12_{variant}") == f"w12_{variant}"]
        assert len(mine) > len(shared), variant
        assert all(c[f"w12_{variant}_decode_exact"] and c[f"w12_{variant}_deterministic"] for c in mine), variant
    for variant in ("v4", *bench_roofline.BULK_VARIANTS):
        wide = [12, 16] if variant in ("v7", "v8", "v9") else []  # the tensor-map kernels' second n-tile of tokens
        tall = [1, 8, 16] if variant == "v8" else []  # the persistent kernel's own tall, short shape
        assert sorted(c["M"] for c in checks if c.get("only") == f"w12_{variant}") == sorted([1, 8, *wide, *tall]), variant
    # the Q tensor-map kernel: the shared shapes and the staged kernels' own, against q_view()
    mine = [c for c in checks if c.get("only", "q_v2") == "q_v2"]
    assert sorted(c.get("M", 0) for c in mine) == [0] * len(shared) + [1, 8, 12, 16]
    assert all(c["q_v2_decode_exact"] and c["q_v2_deterministic"] for c in mine)
    # the persistent Q and bf16 kernels: the staged kernels' own shapes and the second n-tile
    for name in ("q_v3", "bf16_v2", "bf16_v3", "q_v4", "bf16_v4"):
        mine = [c for c in checks if c.get("only") == name]
        tall = [1, 8, 16] if name.endswith("_v3") else []  # the persistent kernels' own tall, short shape
        assert sorted(c["M"] for c in mine) == sorted([1, 8, 12, 16, *tall]), name
        assert all(c[f"{name}_decode_exact"] and c[f"{name}_deterministic"] for c in mine), name
    assert [(r["linear"], r["M"]) for r in result["rows"]] == [(s, m) for s in "ab" for m in (1, 8, 16)]
    for row in result["rows"]:
        wide = row["M"] > 8
        # 16 tokens: the references, and the tensor-map kernels where they run (K % 32 == 0: shape "a", K = 64)
        kinds = [k for k in bench_roofline.TWO_TILE_KERNELS if row["K"] % 32 == 0 or not k.startswith("cuda")]
        for kind in kinds if wide else bench_roofline.KERNELS:
            assert row[f"{kind}_s"] > 0, (kind, row)
        assert not wide or all(f"{kind}_s" not in row for kind in bench_roofline.KERNELS if kind not in kinds), row
    assert (tmp_path / "roofline.png").stat().st_size > 0
    # the cuda_q column at M = 1 (no register-kernel check calls one token) runs v1 even at K = 64, where it would run
    # v2 unpinned; the cuda_q_v2 column runs v2 at any K
    assert {("v1", 1, 64), ("v1", 1, 136), ("v2", 1, 64), ("v2", 1, 136)} <= set(q_variants_called)


def test_a_wrong_decoded_weight_fails_the_run(tmp_path, monkeypatch):
    exact = ops.w12_gemm_small_m

    def one_weight_off(x, *planes):
        y = exact(x, *planes).clone()
        if x.shape[0] == 8 and bool((x[:, 0] == 1).any()):  # the one-hot call that reads column 0
            y[0, 2] = y[0, 2] + 1
        return y

    monkeypatch.setattr(ops, "w12_gemm_small_m", one_weight_off)
    out = tmp_path / "roofline.json"
    assert bench_roofline.main(["--smoke", "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    assert not result["decode_checks_passed"]
    assert result["decode_checks"][0]["w12_first_mismatches"] == [[2, 0]]


def test_a_product_off_the_reference_fails_the_run_though_the_decode_is_exact(tmp_path, monkeypatch, capsys):
    exact = ops.q_gemm_small_m

    def off_on_dense_x(x, ae, base):
        y = exact(x, ae, base)
        return y * 1.5 if bool(((x != 0).sum(dim=1) > 1).all()) else y  # the timed products, not the one-hot checks

    monkeypatch.setattr(ops, "q_gemm_small_m", off_on_dense_x)
    out = tmp_path / "roofline.json"
    assert bench_roofline.main(["--smoke", "--out", str(out)]) == 1
    result = json.loads(out.read_text())
    assert result["decode_checks_passed"]
    failed = bench_roofline.failed_kernels(result["rows"])
    assert failed and all("product off the float32 reference" in line for line in failed)
    assert f"FAILED {failed[0]}" in capsys.readouterr().out


def test_ar_step_smoke_compares_the_bf16_and_w12_targets(tmp_path):
    out = tmp_path / "ar_step.json"
    assert bench_roofline.main(["--smoke", "--ar-step", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    # on CPU both targets run the same F.linear on the same bf16 weights: the logits are equal
    assert result["greedy_tokens_equal"] and result["max_abs_logit_diff"] == 0.0
    assert len(result["greedy_tokens_bf16"]) == bench_roofline.AR_TOKENS
    # the logits' digests: equal where the logits are (here bit for bit), 64 hex digits each
    assert result["bf16_greedy_logits_sha256"] == result["w12_greedy_logits_sha256"]
    assert len(result["w12_greedy_logits_sha256"]) == 64
    assert result["w12_linear_path"] == "torch"
    assert result["w12_weight_bytes"] < result["bf16_weight_bytes"]
    for key in (
        "bf16_step_s",
        "w12_step_s",
        "w12_triton_step_s",
        "bf16_verify_s",
        "w12_verify_s",
        "bf16_reference_elementwise_step_s",
        "bf16_split_kv_step_s",
        "w12_split_kv_step_s",
    ):
        assert result[key] > 0, key
    assert result["attention_default"] == "sdpa"  # on a CPU; the split-KV step is the other
    assert result["verify_rows"] == bench_roofline.VERIFY_ROWS == 16
    assert result["bf16_verify_x_step"] == result["bf16_verify_s"] / result["bf16_step_s"]


def test_ar_step_times_the_verify_step_at_the_rows_asked_for(tmp_path):
    out = tmp_path / "ar_step.json"
    assert bench_roofline.main(["--smoke", "--ar-step", "--verify-rows", "20", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["verify_rows"] == 20 and result["w12_verify_s"] > 0 and result["bf16_verify_s"] > 0
    with pytest.raises(SystemExit):
        bench_roofline.main(["--smoke", "--ar-step", "--verify-rows", "65", "--out", str(out)])


def test_ar_step_records_a_failing_attention_step_and_runs_the_rest(tmp_path, monkeypatch):
    def fails(target, name, *args):
        raise RuntimeError(f"{name}: no kernel here")

    monkeypatch.setattr(bench_roofline, "attention_step", fails)
    out = tmp_path / "ar_step.json"
    assert bench_roofline.main(["--smoke", "--ar-step", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["bf16_split_kv_error"] == "RuntimeError: bf16: no kernel here"
    assert result["w12_split_kv_error"] == "RuntimeError: w12: no kernel here"
    assert result["bf16_reference_elementwise_step_s"] > 0 and result["w12_triton_step_s"] > 0


def test_ar_step_alternates_a_setting_in_one_process_capturing_each_turns_graphs_under_it(tmp_path, monkeypatch):
    captured = []
    use_step_graphs = bench_roofline._use_step_graphs

    def recording(target, device, verify_rows=bench_roofline.VERIFY_ROWS):
        captured.append((os.environ.get("SPECDEC_EXAMPLE_SETTING"), verify_rows))
        use_step_graphs(target, device, verify_rows)

    monkeypatch.setattr(bench_roofline, "_use_step_graphs", recording)
    monkeypatch.delenv("SPECDEC_EXAMPLE_SETTING", raising=False)
    out = tmp_path / "ar_step.json"
    argv = [
        "--smoke",
        "--ar-step",
        "--verify-rows",
        "20",
        "--alternate",
        "SPECDEC_EXAMPLE_SETTING=a,b",
        "--alternate-rounds",
        "2",
    ]
    argv += ["--out", str(out)]
    assert bench_roofline.main(argv) == 0
    result = json.loads(out.read_text())
    turns = [(t["value"], t["round"]) for t in result["alternated"]]
    assert turns == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert all(t["step_s"] > 0 and t["verify_s"] > 0 for t in result["alternated"])
    # the turns' graphs under their values, then the graphs captured again under the environment as it was
    first = captured.index(("a", 20))
    assert captured[first : first + 5] == [("a", 20), ("b", 20), ("a", 20), ("b", 20), (None, 20)]
    assert "SPECDEC_EXAMPLE_SETTING" not in os.environ
    lines = bench_roofline.alternated_lines(result)
    assert lines[1].startswith("  a: step ") and lines[2].startswith("  b: step ") and len(lines) == 3


def test_ar_step_alternates_a_setting_on_the_skinny_bf16_target_when_asked(tmp_path, monkeypatch):
    targets = []
    alternated_steps = bench_roofline.alternated_steps
    monkeypatch.setattr(
        bench_roofline,
        "alternated_steps",
        lambda target, *a, **k: (
            targets.append(type(target.layers[0].mlp.w13.weight).__name__) or alternated_steps(target, *a, **k)
        ),
    )
    monkeypatch.delenv("SPECDEC_EXAMPLE_SETTING", raising=False)
    out = tmp_path / "ar_step.json"
    argv = ["--smoke", "--ar-step", "--verify-rows", "4", "--alternate", "SPECDEC_EXAMPLE_SETTING=a,b"]
    argv += ["--alternate-rounds", "1", "--alternate-target", "bf16_skinny", "--out", str(out)]
    assert bench_roofline.main(argv) == 0
    result = json.loads(out.read_text())
    assert targets == ["SkinnyLinearWeight"]  # once, on the bf16 target after its linears were swapped
    assert result["alternate_target"] == "bf16_skinny"
    assert [(t["value"], t["round"]) for t in result["alternated"]] == [("a", 0), ("b", 0)]
    assert "(bf16 target, skinny linears)" in bench_roofline.alternated_lines(result)[0]


def test_ar_step_builds_its_targets_with_the_layers_asked_for(tmp_path):
    whole, one = tmp_path / "whole.json", tmp_path / "one.json"
    assert bench_roofline.main(["--smoke", "--ar-step", "--out", str(whole)]) == 0
    assert bench_roofline.main(["--smoke", "--ar-step", "--ar-layers", "1", "--out", str(one)]) == 0
    whole, one = json.loads(whole.read_text()), json.loads(one.read_text())
    assert whole["layers"] > 1 and one["layers"] == 1
    # the lm_head is the same, so one layer fewer is exactly one layer's linears fewer
    per_layer = (whole["bf16_weight_bytes"] - one["bf16_weight_bytes"]) / (whole["layers"] - 1)
    assert per_layer > 0 and one["bf16_weight_bytes"] > per_layer
    assert one["greedy_tokens_equal"] and one["w12_step_s"] > 0


def test_ar_step_takes_at_most_the_models_layers(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench_roofline.main(["--ar-step", "--ar-model", "qwen3-32b", "--ar-layers", "65", "--out", str(tmp_path / "x.json")])
    assert "--ar-layers: expected 1 to 64 layers" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--ar-step", "--ar-layers", "0"], "--ar-layers"),
        (["--ar-step", "--ar-layers", "99"], "--ar-layers"),
        (["--ar-layers", "1"], "--ar-step"),
        (["--ar-step", "--ar-model", "qwen3-32b"], "--ar-model"),
        (["--ar-step", "--alternate-target", "bf16_skinny"], "--alternate-target"),
        (["--alternate", "SPECDEC_EXAMPLE_SETTING=a,b"], "--ar-step"),
        (["--ar-step", "--alternate", "SPECDEC_EXAMPLE_SETTING=a"], "--alternate"),
        (["--ar-step", "--alternate", "lower=a,b"], "--alternate"),
        (["--ar-step", "--alternate-rounds", "0"], "--alternate-rounds"),
    ],
)
def test_ar_step_alternation_names_what_it_cannot_take(argv, named, tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench_roofline.main(["--smoke", *argv, "--out", str(tmp_path / "x.json")])
    assert named in capsys.readouterr().err


def smoke_with_a_wrong_weight(tmp_path, monkeypatch, variant, reads, cell, delta=1, op="w12"):
    """The smoke run with ``<op>_gemm_small_m`` (``op``: "w12" or "q") off by ``delta`` at output ``cell`` under ``variant`` in the calls ``reads(x)``."""
    exact = getattr(ops, f"{op}_gemm_small_m")
    variant_now = getattr(ops, f"{op}_variant")

    def off(x, *planes):
        y = exact(x, *planes).clone()
        if variant_now() == variant and reads(x):
            y[cell] = y[cell] + delta
        return y

    monkeypatch.setattr(ops, f"{op}_gemm_small_m", off)
    monkeypatch.delenv(ops.W12_VARIANT_ENV, raising=False)
    monkeypatch.delenv(ops.Q_VARIANT_ENV, raising=False)
    out = tmp_path / "roofline.json"
    return bench_roofline.main(["--smoke", "--out", str(out)]), json.loads(out.read_text())


def test_a_wrong_weight_of_the_streaming_w12_kernel_alone_fails_the_run(tmp_path, monkeypatch):
    rc, result = smoke_with_a_wrong_weight(
        tmp_path, monkeypatch, "v3", lambda x: x.shape[0] == 8 and bool((x[:, 0] == 1).any()), (0, 2)
    )
    assert rc == 1
    first = result["decode_checks"][0]
    assert first["w12_decode_exact"] and not first["w12_v3_decode_exact"]
    assert first["w12_v3_first_mismatches"] == [[2, 0]]


def test_a_wrong_weight_of_the_split_k_w12_kernel_alone_fails_the_run(tmp_path, monkeypatch):
    # the single-token call reading column 3
    rc, result = smoke_with_a_wrong_weight(tmp_path, monkeypatch, "v4", lambda x: x.shape[0] == 1 and bool(x[0, 3] == 1), (0, 2))
    assert rc == 1
    checks = result["decode_checks"]
    assert all(c.get("w12_decode_exact", True) and c.get("w12_v3_decode_exact", True) for c in checks)
    bad = [c for c in checks if not c.get("w12_v4_decode_exact", True)]
    assert [(c["only"], c["M"], c["w12_v4_first_mismatches"]) for c in bad] == [("w12_v4", 1, [[2, 3]])]


BULK = bench_roofline.BULK_VARIANTS


def others_exact(checks: list[dict], variant: str | None) -> bool:
    """Every W12 decode check of ``checks`` holds but those of ``variant`` (``None``: every one)."""
    return all(
        c.get(f"w12{v}_decode_exact", True) for c in checks for v in ("", "_v3", "_v4", *(f"_{b}" for b in BULK if b != variant))
    )


@pytest.mark.parametrize("variant", BULK)
def test_a_wrong_weight_of_one_staged_kernel_alone_fails_the_run(tmp_path, monkeypatch, variant):
    rc, result = smoke_with_a_wrong_weight(tmp_path, monkeypatch, variant, reads_column_5_alone_or_column_0_of_eight, (0, 4))
    assert rc == 1 and not result["decode_checks_passed"]
    checks = result["decode_checks"]
    assert others_exact(checks, variant)
    bad = [
        (c.get("only", "shared"), c.get("M"), c[f"w12_{variant}_first_mismatches"])
        for c in checks
        if not c.get(f"w12_{variant}_decode_exact", True)
    ]
    # row 4 of column 0 on the shared shapes and the variant's own M = 8 shape, row 4 of column 5 on its M = 1 shape
    # (the persistent kernel: on its tall shape too)
    mine = f"w12_{variant}"
    shared = [("shared", None, [[4, 0]])] * len(bench_roofline.SMOKE_DECODE_SHAPES)
    own = [(mine, 8, [[4, 0]]), (mine, 1, [[4, 5]])] * (2 if variant == "v8" else 1)
    assert sorted(bad, key=str) == sorted([*shared, *own], key=str)


def reads_column_5_alone_or_column_0_of_eight(x) -> bool:
    """The single-token calls reading column 5 (a staged kernel's own M = 1 shape) and the 8-token calls reading column 0."""
    return bool(x[0, 5] == 1) if x.shape[0] == 1 else x.shape[0] == 8 and bool((x[:, 0] == 1).any())


def test_a_wrong_weight_of_the_q_tensor_map_kernel_alone_fails_the_run(tmp_path, monkeypatch):
    rc, result = smoke_with_a_wrong_weight(tmp_path, monkeypatch, "v2", reads_column_5_alone_or_column_0_of_eight, (0, 4), op="q")
    assert rc == 1 and not result["decode_checks_passed"]
    checks = result["decode_checks"]
    assert others_exact(checks, None) and all(c.get("q_decode_exact", True) for c in checks)
    bad = [
        (c.get("only", "shared"), c.get("M"), c["q_v2_first_mismatches"]) for c in checks if not c.get("q_v2_decode_exact", True)
    ]
    # row 4 of column 0 on the shared shapes and the staged kernels' M = 8 shape, row 4 of column 5 on their M = 1 shape
    shared = [("shared", None, [[4, 0]])] * len(bench_roofline.SMOKE_DECODE_SHAPES)
    assert sorted(bad, key=str) == sorted([*shared, ("q_v2", 8, [[4, 0]]), ("q_v2", 1, [[4, 5]])], key=str)


@pytest.mark.parametrize("variant", BULK)
def test_probe_runs_only_its_kernel_and_fails_on_its_wrong_output(tmp_path, monkeypatch, variant):
    out = tmp_path / "probe.json"
    assert bench_roofline.main(["--smoke", "--probe", variant, "--out", str(out)]) == 0
    probe = json.loads(out.read_text())
    # the tensor-map kernels: 16 tokens too; the persistent kernel: its tall shape at 1 and 16 tokens
    wide = [bench_roofline.SMOKE_TWO_TILE_PROBE_CASE] if variant in ("v7", "v8", "v9") else []
    wide += [(n, k, m) for n, k in bench_roofline.SMOKE_STREAM_K_SHAPES for m in (1, 16)] if variant == "v8" else []
    cases = [*bench_roofline.SMOKE_V5_PROBE_CASES, *wide]
    assert probe[f"{variant}_probe_passed"] and [(c["N"], c["K"], c["M"]) for c in probe[f"{variant}_probe"]] == cases
    exact = ops.w12_gemm_small_m
    variants = []

    def off_under_variant(x, *planes):
        variants.append(ops.w12_variant())
        y = exact(x, *planes).clone()
        if ops.w12_variant() == variant and x.shape[0] == 8:
            y[3, 0] = y[3, 0] + 64
        return y

    monkeypatch.setattr(ops, "w12_gemm_small_m", off_under_variant)
    assert bench_roofline.main(["--smoke", "--probe", variant, "--out", str(out)]) == 1
    probe = json.loads(out.read_text())
    assert not probe[f"{variant}_probe_passed"] and [c["ok"] for c in probe[f"{variant}_probe"]] == [
        True,
        False,
        *[True] * len(wide),
    ]
    assert set(variants) == {variant}
    for other in BULK:  # the others are not affected
        if other != variant:
            assert bench_roofline.main(["--smoke", "--probe", other, "--out", str(out)]) == 0, other


def test_probe_and_skip_refuse_an_unknown_variant(tmp_path):
    for flag in ("--probe", "--skip-variant"):
        with pytest.raises(SystemExit):
            bench_roofline.main(["--smoke", flag, "v4", "--out", str(tmp_path / "r.json")])


@pytest.mark.parametrize("variant", BULK)
def test_skip_variant_leaves_only_that_kernel_out(tmp_path, w12_variants_called, variant):
    variants = w12_variants_called
    out = tmp_path / "roofline.json"
    assert bench_roofline.main(["--smoke", "--skip-variant", variant, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert variant not in variants and {"v1", "v3", "v4", *BULK} - {variant} <= set(variants)
    assert result["kernels_left_out"] == [f"cuda_w12_{variant}"]
    assert not any(key.startswith(f"w12_{variant}") for c in result["decode_checks"] for key in c)
    kept = [f"cuda_w12_{v}_s" for v in BULK if v != variant]
    narrow = [r for r in result["rows"] if r["M"] <= 8]  # the bulk-copy kernels take at most 8 tokens
    assert narrow and all(f"cuda_w12_{variant}_s" not in r and all(r[key] > 0 for key in kept) for r in narrow)


def test_skip_variant_repeated_leaves_every_staged_kernel_out_of_the_sanitizer(tmp_path, w12_variants_called):
    variants = w12_variants_called
    skips = [arg for v in BULK for arg in ("--skip-variant", v)]
    assert bench_roofline.main(["--smoke", "--sanitize", *skips, "--out", str(tmp_path / "r.json")]) == 0
    assert not set(BULK) & set(variants) and "v4" in variants
    variants.clear()
    assert bench_roofline.main(["--smoke", "--sanitize", "--skip-variant", "v7", "--out", str(tmp_path / "r.json")]) == 0
    assert "v7" not in variants and {"v5", "v6"} <= set(variants)


def test_q_probe_runs_only_the_q_tensor_map_kernel_and_fails_on_its_wrong_output(tmp_path, monkeypatch, w12_variants_called):
    out = tmp_path / "probe.json"
    assert bench_roofline.main(["--smoke", "--probe", "q_v2", "--out", str(out)]) == 0
    probe = json.loads(out.read_text())
    assert probe["q_v2_probe_passed"] and [(c["N"], c["K"], c["M"]) for c in probe["q_v2_probe"]] == [
        *bench_roofline.SMOKE_V5_PROBE_CASES,
        bench_roofline.SMOKE_TWO_TILE_PROBE_CASE,
    ]
    assert w12_variants_called == []  # no W12 kernel runs
    exact = ops.q_gemm_small_m
    variants = []

    def off_under_v2(x, ae, base):
        variants.append(ops.q_variant())
        y = exact(x, ae, base).clone()
        if ops.q_variant() == "v2" and x.shape[0] == 8:
            y[3, 0] = y[3, 0] + 64
        return y

    monkeypatch.setattr(ops, "q_gemm_small_m", off_under_v2)
    assert bench_roofline.main(["--smoke", "--probe", "q_v2", "--out", str(out)]) == 1
    probe = json.loads(out.read_text())
    assert not probe["q_v2_probe_passed"] and [c["ok"] for c in probe["q_v2_probe"]] == [True, False, True]
    assert set(variants) == {"v2"}
    assert bench_roofline.main(["--smoke", "--probe", "v7", "--out", str(out)]) == 0  # the W12 kernels are not affected


def test_skip_variant_q_v2_leaves_only_the_q_tensor_map_kernel_out(tmp_path, w12_variants_called, q_variants_called):
    out = tmp_path / "roofline.json"
    assert bench_roofline.main(["--smoke", "--skip-variant", "q_v2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    # the persistent and row-tile Q kernels (v3, v4) still run
    assert {v for v, *_ in q_variants_called} == {"v1", "v3", "v4"} and {"v1", "v3", "v4", *BULK} <= set(w12_variants_called)
    assert result["kernels_left_out"] == ["cuda_q_v2"] and result["decode_checks_passed"]
    assert not any(key.startswith("q_v2") for c in result["decode_checks"] for key in c)
    assert all("cuda_q_v2_s" not in r for r in result["rows"])
    assert all(r["cuda_q_s"] > 0 and r["cuda_q_v3_s"] > 0 and r["cuda_w12_v7_s"] > 0 for r in result["rows"] if r["M"] <= 8)


def test_sanitize_runs_the_q_tensor_map_kernel_unless_skipped(tmp_path, q_variants_called):
    assert bench_roofline.main(["--smoke", "--sanitize", "--out", str(tmp_path / "r.json")]) == 0
    # the shared shapes (K % 32 != 0 in the GPU run) and the staged kernels' own shapes (K % 32 == 0)
    assert {v for v, *_ in q_variants_called} == {"v1", "v2", "v3", "v4"}
    # M = 1 and 8 on the shared shapes, 1, 8 and 16 on the staged kernels' own; the same for the persistent and row-tile
    # kernels (the persistent kernel on its tall shape as well)
    for variant, staged in (
        ("v2", bench_roofline.V5_SANITIZE_SHAPES),
        ("v4", bench_roofline.V5_SANITIZE_SHAPES),
        ("v3", bench_roofline.V5_SANITIZE_SHAPES + bench_roofline.STREAM_K_SHAPES),
    ):
        assert sum(v == variant for v, *_ in q_variants_called) == 2 * len(bench_roofline.SANITIZE_SHAPES) + 3 * len(staged)
        assert sum(m == 16 and v == variant for v, m, _ in q_variants_called) == len(staged)
    q_variants_called.clear()
    skip = ["--skip-variant", "q_v2", "--skip-variant", "q_v3", "--skip-variant", "q_v4"]
    assert bench_roofline.main(["--smoke", "--sanitize", *skip, "--out", str(tmp_path / "r.json")]) == 0
    assert {v for v, *_ in q_variants_called} == {"v1"}


def test_bf16_tensor_map_kernel_is_checked_timed_and_left_out_on_request(tmp_path, bf16_variants_called):
    out = tmp_path / "roofline.json"
    assert bench_roofline.main(["--smoke", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    # its own one-hot checks on the staged kernels' shapes (M = 1 and 8) and with a second n-tile (M = 12, 16)
    mine = [c for c in result["decode_checks"] if c.get("only") == "bf16_v2"]
    assert sorted(c["M"] for c in mine) == [1, 8, 12, 16]
    assert all(c["bf16_v2_decode_exact"] and c["bf16_v2_deterministic"] for c in mine)
    assert all(r["cuda_bf16_v2_s"] > 0 and r["cuda_bf16_s"] > 0 for r in result["rows"] if r["M"] <= 8)
    assert [r["M"] for r in result["rows"] if "cuda_bf16_v2_s" in r and "cuda_bf16_s" not in r] == [16]  # K = 64 only
    # the cuda_bf16 column runs the register kernel even at K = 64, where it would run v2 unpinned
    assert {("v1", 1, 64), ("v1", 8, 64), ("v2", 1, 64), ("v2", 8, 64)} <= set(bf16_variants_called)
    bf16_variants_called.clear()
    assert bench_roofline.main(["--smoke", "--skip-variant", "bf16_v2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert {v for v, *_ in bf16_variants_called} == {"v1", "v3", "v4"} and result["kernels_left_out"] == ["cuda_bf16_v2"]
    assert not any(key.startswith("bf16_v2") for c in result["decode_checks"] for key in c)


def test_a_wrong_weight_of_the_bf16_tensor_map_kernel_alone_fails_the_run(tmp_path, monkeypatch):
    exact = ops.skinny_gemm_bf16

    def off_under_v2(x, weight):
        y = exact(x, weight).clone()
        if ops.bf16_variant() == "v2" and reads_column_5_alone_or_column_0_of_eight(x):
            y[0, 4] = y[0, 4] + 1
        return y

    monkeypatch.setattr(ops, "skinny_gemm_bf16", off_under_v2)
    out = tmp_path / "roofline.json"
    assert bench_roofline.main(["--smoke", "--out", str(out)]) == 1
    checks = json.loads(out.read_text())["decode_checks"]
    bad = [(c["M"], c["bf16_v2_first_mismatches"]) for c in checks if not c.get("bf16_v2_decode_exact", True)]
    assert sorted(bad) == [(1, [[4, 5]]), (8, [[4, 0]])]
    assert others_exact(checks, None) and all(c.get("q_v2_decode_exact", True) for c in checks)


def test_bf16_probe_runs_only_the_bf16_tensor_map_kernel_and_fails_on_its_wrong_output(
    tmp_path, monkeypatch, w12_variants_called
):
    out = tmp_path / "probe.json"
    assert bench_roofline.main(["--smoke", "--probe", "bf16_v2", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["bf16_v2_probe_passed"] and w12_variants_called == []
    exact = ops.skinny_gemm_bf16

    def off_under_v2(x, weight):
        y = exact(x, weight).clone()
        if ops.bf16_variant() == "v2" and x.shape[0] == 8:
            y[3, 0] = y[3, 0] + 64
        return y

    monkeypatch.setattr(ops, "skinny_gemm_bf16", off_under_v2)
    assert bench_roofline.main(["--smoke", "--probe", "bf16_v2", "--out", str(out)]) == 1
    assert [c["ok"] for c in json.loads(out.read_text())["bf16_v2_probe"]] == [True, False, True]
    assert bench_roofline.main(["--smoke", "--probe", "v7", "--out", str(out)]) == 0  # the W12 kernels are not affected


def test_a_wrong_token_of_the_second_tile_fails_the_run(tmp_path, monkeypatch):
    # token 9 (second MMA n-tile) of the 16-token one-hot call that reads columns 0..15: weight [3, 9] reads back wrong
    rc, result = smoke_with_a_wrong_weight(tmp_path, monkeypatch, "v7", lambda x: x.shape[0] == 16 and bool(x[0, 0] == 1), (9, 3))
    assert rc == 1 and not result["decode_checks_passed"]
    bad = [(c.get("M"), c["w12_v7_first_mismatches"]) for c in result["decode_checks"] if not c.get("w12_v7_decode_exact", True)]
    assert bad == [(16, [[3, 9]])]
