"""The engine benchmark's real SmolLM2 pair: what it refuses, and the systems it builds.

Its CPU smoke run (``--smoke --model smollm2-pair``, the real 135M model) takes ~50 s, too long for a test here.
"""

import pytest
import torch

from benchmarks.decode import bench_engine
from specdec.drafters.block import DFlashDrafter, fixture_config, random_block_model
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


def test_pair_systems_give_each_request_its_own_drafter_over_one_draft_model():
    target = tiny_target(seed=0)
    trained = DFlashDrafter(random_block_model(fixture_config("DFlashDraftModel", target), target), target)
    systems = bench_engine.pair_systems(trained, target, tree_budget=5)
    assert list(systems) == ["trained chain", "trained tree", "n-gram"]
    make_chain, chain_verifier, k = systems["trained chain"]
    first, second = make_chain(), make_chain()
    assert first is not second and first.model is trained.model is second.model
    assert first.tree_budget is None and k == trained.max_draft_tokens
    assert type(chain_verifier()) is ChainVerifier
    make_tree, tree_verifier, nodes = systems["trained tree"]
    assert make_tree().tree_budget == 5 and nodes == 5
    assert type(tree_verifier()) is TreeVerifier
    ngram, ngram_verifier, ngram_k = systems["n-gram"]
    assert type(ngram).__name__ == "NGramDrafter" and ngram_k == trained.max_draft_tokens


def test_cases_run_every_spec_system_with_the_budget_auto_then_off():
    names = [name for _, c, name in bench_engine.cases([16, 4], ("packed",), ("trained chain", "n-gram")) if c == 16]
    assert names == ["AR", "trained chain, budget auto", "n-gram, budget auto", "trained chain, budget off", "n-gram, budget off"]
    assert [bench_engine.split_system(n) for n in names[1:4:2]] == [("trained chain", "auto"), ("trained chain", None)]
