"""The engine benchmark's real SmolLM2 pair: what it refuses, and the systems it builds.

Its CPU smoke run (``--smoke --model smollm2-pair``, the real 135M model) takes ~50 s, too long for a test here.
"""

import pytest
import torch

from benchmarks.decode import bench_engine
from specdec.drafters.block import BatchedBlockDrafter, DFlashDrafter, fixture_config, random_block_model
from specdec.testing import tiny_target
from specdec.verify import ChainVerifier, TreeVerifier


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--weights", "planted"), ("--weights", "random"), ("--profile", "specpilot-one-level"), ("--prompt-len", "64")],
)
def test_pair_refuses_what_only_the_simulated_models_read(flag, value, tmp_path):
    argv = ["--smoke", "--model", "smollm2-pair", flag, value, "--out", str(tmp_path / "x.json")]
    with pytest.raises(ValueError, match=f"{flag}: .*smollm2-pair.*got '?{value}'?"):
        bench_engine.main(argv)
    assert not (tmp_path / "x.json").exists()


def test_pair_refuses_prompts_past_the_held_out_problems(tmp_path):
    argv = ["--model", "smollm2-pair", "--requests", "41", "--concurrency", "1", "--out", str(tmp_path / "x.json")]
    with pytest.raises(ValueError, match=r"--requests: expected 1\.\.40 .* got 41"):
        bench_engine.main(argv)


def test_pair_smoke_restores_the_thread_count(tmp_path):
    before = torch.get_num_threads()
    with pytest.raises(ValueError):
        bench_engine.main(["--smoke", "--model", "smollm2-pair", "--weights", "planted", "--out", str(tmp_path / "x.json")])
    assert torch.get_num_threads() == before


def test_pair_systems_draft_batched_over_one_draft_model_and_switch_each_mechanism_off():
    target = tiny_target(seed=0)
    trained = DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target)
    systems = bench_engine.pair_systems(trained, target, tree_budget=5, slots=3, max_context=64)
    assert list(systems) == [
        "trained chain",
        "trained tree",
        "trained chain, batched eager",
        "trained chain, drafts per request",
        "n-gram",
    ]
    chain, chain_verifier, k, batched = systems["trained chain"]
    assert isinstance(chain, BatchedBlockDrafter) and batched and chain.uses_static_path  # graphs on a GPU
    assert chain.drafter.model is trained.model and chain.drafter.tree_budget is None and chain.slots == 3
    assert chain.cache.max_context == 64 and k == trained.max_draft_tokens
    assert type(chain_verifier()) is ChainVerifier
    tree, tree_verifier, nodes, batched = systems["trained tree"]
    assert isinstance(tree, BatchedBlockDrafter) and batched and tree.drafter.tree_budget == 5 and nodes == 5
    assert type(tree_verifier()) is TreeVerifier
    eager, _, _, batched = systems["trained chain, batched eager"]
    assert isinstance(eager, BatchedBlockDrafter) and batched and not eager.uses_static_path
    make_alone, _, _, batched = systems["trained chain, drafts per request"]
    first, second = make_alone(), make_alone()
    assert not batched and first is not second and first.model is trained.model is second.model
    ngram, ngram_verifier, ngram_k, batched = systems["n-gram"]
    assert type(ngram).__name__ == "NGramDrafter" and ngram_k == trained.max_draft_tokens and not batched


def test_cases_run_every_spec_system_with_the_budget_auto_then_off():
    names = [name for _, c, name in bench_engine.cases([16, 4], ("packed",), ("trained chain", "n-gram")) if c == 16]
    assert names == ["AR", "trained chain, budget auto", "n-gram, budget auto", "trained chain, budget off", "n-gram, budget off"]
    assert [bench_engine.split_system(n) for n in names[1:4:2]] == [("trained chain", "auto"), ("trained chain", None)]
