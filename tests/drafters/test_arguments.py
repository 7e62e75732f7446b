"""The drafters' constructors and the scheduler refuse arguments they could only misread, naming them."""

from __future__ import annotations

import pytest
import torch

from specdec.drafters import ModelDrafter, NGramDrafter, OracleDrafter, PrefixScheduler
from specdec.testing import tiny_target


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(max_ngram=2.5), "max_ngram: expected an int, got 2.5"),
        (dict(max_ngram="3"), "max_ngram: expected an int, got '3'"),
        (dict(depth=2.5), "depth: expected an int, got 2.5"),
        (dict(max_paths=True), "max_paths: expected an int, got True"),
    ],
)
def test_ngram_drafter_refuses_non_integer_sizes(kwargs, message):
    with pytest.raises(TypeError, match=message):
        NGramDrafter(**kwargs)


def test_model_drafter_refuses_a_vocabulary_other_than_its_model_s():
    with pytest.raises(ValueError, match=r"vocab_size: expected the draft model's own \(6\), got 10"):
        ModelDrafter(tiny_target(seed=1, vocab_size=6), vocab_size=10)
    assert ModelDrafter(tiny_target(seed=1, vocab_size=6), vocab_size=6).vocab_size == 6


def test_oracle_drafter_refuses_a_bad_vocabulary_and_float_references():
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match=f"vocab_size: expected a positive int, got {bad}"):
            OracleDrafter("dspark-qwen3-8b-gsm8k", vocab_size=bad)
    with pytest.raises(TypeError, match="sequence: expected a 1-D int tensor, got dtype torch.float32"):
        OracleDrafter("dspark-qwen3-8b-gsm8k", vocab_size=5, references=[torch.tensor([1.5, 2.0])])


def test_prefix_scheduler_refuses_tables_and_confidences_it_would_reshape_or_clamp():
    with pytest.raises(ValueError, match="steps_per_second: expected a non-empty 1-D table of finite positive values"):
        PrefixScheduler([[1.0, 0.5], [0.4, 0.3]])
    with pytest.raises(ValueError, match="steps_per_second: expected a non-empty 1-D table of finite positive values"):
        PrefixScheduler([1.0, float("inf")])
    with pytest.raises(TypeError, match="early_stop: expected a bool, got 'no'"):
        PrefixScheduler([1.0, 0.5], early_stop="no")
    with pytest.raises(ValueError, match=r"confidences: expected probabilities in \[0, 1\], got \[nan\]"):
        PrefixScheduler([1.0, 0.9, 0.8]).schedule(torch.tensor([[float("nan"), 0.9]]))
    with pytest.raises(ValueError, match=r"confidences: expected probabilities in \[0, 1\], got \[1.5, 3.0\]"):
        PrefixScheduler([1.0, 0.99, 0.98]).schedule(torch.tensor([[1.5, 3.0]]))


def test_speculative_speculation_refuses_a_base_that_reads_target_features():
    from specdec.drafters.ssd import SpeculativeSpeculationDrafter

    class Tapped(NGramDrafter):
        target_layer_ids = (1,)

    with pytest.raises(ValueError, match=r"base: Tapped reads target features \(target_layer_ids \(1,\)\)"):
        SpeculativeSpeculationDrafter(Tapped())
