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
    for bad, at in ((-3, 2), (30, 2), (5, 2)):  # else proposed as drafts: ids outside the drafter's vocabulary
        with pytest.raises(ValueError, match=rf"sequence: expected token ids in \[0, 5\), got sequence\[{at}\] = {bad}"):
            OracleDrafter("dspark-qwen3-8b-gsm8k", vocab_size=5, references=[torch.tensor([1, 2, bad, 4])])


def test_model_drafter_names_a_context_id_outside_its_vocabulary_and_keeps_its_cache_consistent():
    import warnings

    from specdec.contracts import SamplingConfig

    drafter = ModelDrafter(tiny_target(seed=1, max_seq_len=64))
    drafter.reset()
    context = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8])
    first = drafter.propose(context, 3, sampling=SamplingConfig(), generator=None)
    with pytest.raises(ValueError, match=r"context: expected token ids in \[0, 97\), got context\[2\] = 300"):
        drafter.propose(torch.tensor([1, 2, 300]), 3, sampling=SamplingConfig(), generator=None)
    assert drafter._cached.numel() == drafter.target.length
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no rollback warning: the cache and its record agree
        again = drafter.propose(torch.cat([context, first.tokens[:1]]), 3, sampling=SamplingConfig(), generator=None)
    fresh = ModelDrafter(tiny_target(seed=1, max_seq_len=64))
    fresh.reset()
    assert torch.equal(
        again.tokens, fresh.propose(torch.cat([context, first.tokens[:1]]), 3, sampling=SamplingConfig(), generator=None).tokens
    )


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


def _drafters():
    from specdec.drafters import AgentSpecDrafter, SpeculativeSpeculationDrafter
    from specdec.drafters.agentspec import TokenPieces
    from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model
    from specdec.testing.tokenizers import tiny_tokenizer

    target = tiny_target(seed=0)
    return {
        "ngram": NGramDrafter(),
        "model": ModelDrafter(tiny_target(seed=1)),
        "dflash": DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target),
        "oracle": OracleDrafter("dspark-qwen3-8b-gsm8k", references=[torch.tensor([5, 6, 7, 5, 6, 7, 8])], vocab_size=97),
        "agentspec": AgentSpecDrafter(TokenPieces.from_tokenizer(tiny_tokenizer())),
        "ssd": SpeculativeSpeculationDrafter(ModelDrafter(tiny_target(seed=1)), transport="sequential"),
    }


@pytest.mark.parametrize("name", ["ngram", "model", "dflash", "oracle", "agentspec", "ssd"])
def test_every_drafter_refuses_a_context_or_length_it_would_misread(name):
    from specdec.contracts import SamplingConfig

    drafter = _drafters()[name]
    drafter.reset()
    propose = lambda context, k: drafter.propose(context, k, sampling=SamplingConfig(), generator=None)  # noqa: E731
    for context in (torch.tensor([5.0, 6.0, 7.0]), torch.tensor([[5, 6, 7]]), torch.zeros(0, dtype=torch.long)):
        with pytest.raises(TypeError, match="context: expected a non-empty 1-D int64 tensor"):
            propose(context, 2)
    for k in (2.7, -1, True):
        with pytest.raises(ValueError, match=rf"max_tokens: expected an int >= 0, got {k!r}"):
            propose(torch.tensor([5, 6, 7]), k)


def test_a_block_drafter_with_a_tree_budget_proposes_a_tree_of_that_many_nodes():
    from specdec.contracts import SamplingConfig
    from specdec.drafters.block import DFlash2Drafter, DFlashDrafter, fixture_config, random_block_model

    target = tiny_target(seed=0)
    for kind, arch in ((DFlashDrafter, "DFlashDraftModel"), (DFlash2Drafter, "DFlash2DraftModel")):
        drafter = kind(random_block_model(fixture_config(arch, target), target), target, tree_budget=12)
        drafter.reset()
        context = torch.tensor([1, 2, 3])
        hidden = torch.stack(target(context[None], hidden_layers=drafter.target_layer_ids).hidden, dim=2)[0, :2]
        tree = drafter.propose(context, 16, sampling=SamplingConfig(), generator=None, target_hidden=hidden).tree
        assert tree.num_nodes == 12 and tree.max_depth <= drafter.max_draft_tokens  # the budget, not the block's depth
    # DFlash's marginals do not depend on the path: its tree is the one a TreeVerifier of that budget builds
    from specdec.verify import TreeVerifier

    plain = DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target)
    budgeted = DFlashDrafter(plain.model, target, tree_budget=12)
    for drafter in (plain, budgeted):
        drafter.reset()
    chain = plain.propose(context, 16, sampling=SamplingConfig(), generator=None, target_hidden=hidden)
    given = budgeted.propose(context, 16, sampling=SamplingConfig(), generator=None, target_hidden=hidden).tree
    built = TreeVerifier(budget=12).build_tree(chain, room=64)
    assert torch.equal(given.tokens, built.tokens) and torch.equal(given.parents, built.parents)


def test_dspark_refuses_a_scheduler_beside_a_tree_budget():
    from specdec.drafters.block import DSparkDrafter, fixture_config, random_block_model

    target = tiny_target(seed=0)
    model = random_block_model(fixture_config("Qwen3DSparkModel", target), target)
    with pytest.raises(ValueError, match="scheduler: cuts a chain, and with tree_budget = 4 the drafter proposes trees"):
        DSparkDrafter(model, target, tree_budget=4, scheduler=PrefixScheduler([1.0, 0.5]))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(min_ngram=3, max_ngram=2), "min_ngram/max_ngram: expected 1 <= min_ngram <= max_ngram, got 3, 2"),
        (dict(min_ngram=0), "min_ngram/max_ngram: expected 1 <= min_ngram <= max_ngram"),
        (dict(max_paths=0), "max_paths: expected >= 1, got 0"),
        (dict(depth=0), "depth: expected >= 1 or None, got 0"),
    ],
)
def test_ngram_drafter_refuses_sizes_out_of_range(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NGramDrafter(**kwargs)


def test_ngram_drafter_proposes_at_most_max_tokens_and_each_path_once():
    from specdec.contracts import SamplingConfig

    context = torch.tensor([1, 2, 3, 4, 1, 2, 3, 4, 1, 2])  # "1 2" was followed by "3 4 1 2" and "3 4"
    deep = NGramDrafter(max_ngram=2, depth=6).propose(context, 2, sampling=SamplingConfig(), generator=None)
    assert deep.tokens.tolist() == [3, 4]
    # the two latest matches of "1 2" continue "3 4": one path, so max_paths = 2 still reaches the older "5 6"
    context = torch.tensor([1, 2, 5, 6, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2])
    tree = NGramDrafter(max_ngram=2, max_paths=2, depth=2).propose(context, 8, sampling=SamplingConfig(), generator=None).tree
    assert sorted(tree.tokens.tolist()) == [3, 4, 5, 6]
