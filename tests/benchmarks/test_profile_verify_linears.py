"""The labelling of a captured step's GEMM kernels by linear (``benchmarks/kernels/profile_verify_linears.py``)."""

import pytest

from benchmarks.kernels.profile_verify_linears import fold_split_k_reductions, label_linears


def test_a_split_k_reduction_is_counted_with_the_gemm_before_it():
    kernels = [
        ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT", 10.0),
        ("void cublasLt::splitKreduce_kernel<32, 16, int, float>", 2.0),
        ("nvjet_sm90_tst_192x8_64x8_2x1_v_bz_TNT", 7.0),
        ("tma_rows_kernel<0, 8, false, 1>", 3.0),
        ("void cublasLt::splitKreduce_kernel<32, 16, int, float>", 0.5),
    ]
    assert fold_split_k_reductions(kernels) == [
        ("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_splitK_TNT", 12.0),
        ("nvjet_sm90_tst_192x8_64x8_2x1_v_bz_TNT", 7.0),
        ("tma_rows_kernel<0, 8, false, 1>", 3.5),
    ]


def test_a_reduction_without_a_gemm_before_it_is_refused():
    with pytest.raises(ValueError, match="before any GEMM kernel"):
        fold_split_k_reductions([("cublasLt::splitKreduce_kernel", 1.0), ("nvjet_TNT", 2.0)])


def test_a_step_with_reductions_labels_each_linear_once():
    # one layer: qkv and gate_up split K (a reduction each), then lm_head; nine kernels, five linears
    names = ["qkv", "red", "o", "gate_up", "red", "down", "lm_head"]
    kernels = [("splitKreduce" if n == "red" else n, float(i)) for i, n in enumerate(names)]
    folded = fold_split_k_reductions(kernels)
    labelled = label_linears([name for name, _ in folded], layers=1)
    assert labelled == {"qkv": ["qkv"], "o": ["o"], "gate_up": ["gate_up"], "down": ["down"], "lm_head": ["lm_head"]}
    assert [us for _, us in folded] == [0.0 + 1.0, 2.0, 3.0 + 4.0, 5.0, 6.0]


def test_a_kernel_count_other_than_four_a_layer_plus_one_is_refused():
    with pytest.raises(ValueError, match="expected 9 GEMM kernels"):
        label_linears(list(range(10)), layers=2)


def test_the_triton_kernels_split_k_reduction_is_counted_with_its_gemm():
    from specdec.kernels.w12_gemm import _splitk_reduce_kernel, _w12_gemm_kernel

    gemm, reduction = _w12_gemm_kernel.fn.__name__, _splitk_reduce_kernel.fn.__name__
    assert fold_split_k_reductions([(gemm, 9.0), (reduction, 1.0), (gemm, 4.0)]) == [(gemm, 10.0), (gemm, 4.0)]


def test_the_q_view_is_refused_without_w12_weights(capsys):
    from benchmarks.kernels.profile_verify_linears import main

    with pytest.raises(SystemExit):
        main(["--view", "q", "--weights", "bf16", "--smoke"])
    assert "--view q: expected --weights w12 (the Q view is W12's), got --weights bf16" in capsys.readouterr().err


def test_calls_grouped_by_linear_are_labelled_back_to_their_linears():
    from benchmarks.kernels.profile_verify_linears import by_linear_order, to_step_order

    layers = 3
    step = [f"{name}{layer}" for layer in range(layers) for name in ("qkv", "o", "gate_up", "down")] + ["lm_head"]
    order = by_linear_order(len(step), layers)
    launched = [step[i] for i in order]
    assert launched[:layers] == ["qkv0", "qkv1", "qkv2"] and launched[-1] == "lm_head"
    labelled = label_linears(to_step_order(launched, order), layers)
    assert labelled["o"] == ["o0", "o1", "o2"] and labelled["down"] == ["down0", "down1", "down2"]
    with pytest.raises(ValueError, match="expected 13 linears"):
        by_linear_order(12, layers)
    with pytest.raises(ValueError, match="expected a permutation of 0..2"):
        to_step_order(["a", "b", "c"], [0, 0, 1])
