import json

import pytest
import torch

import specdec as sd
from specdec.pilot.spec import (
    ORACLE_REFERENCES,
    SPEC_VERSION,
    VERIFIERS,
    SystemSpec,
    TargetCache,
    add_oracle_references,
    build,
    register_verifier,
)


def test_spec_round_trips_through_json_and_is_versioned():
    spec = SystemSpec(
        drafter={"kind": "ngram", "max_ngram": 4},
        verifier={"kind": "tree", "budget": 16},
        num_draft_tokens=6,
        regime="batched",
        batch_size=8,
    )
    text = spec.to_json()
    assert json.loads(text)["version"] == SPEC_VERSION
    assert SystemSpec.from_json(text) == spec
    with pytest.raises(ValueError, match="version"):
        SystemSpec.from_dict({**spec.to_dict(), "version": SPEC_VERSION + 1})


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"weight_format": "int4"}, "weight_format"),
        ({"regime": "c1", "batch_size": 4}, "batch_size"),
        ({"num_draft_tokens": -1}, "num_draft_tokens"),
        ({"dtype": "float64"}, "dtype"),
        ({"verifier": {"budget": 8}}, "verifier"),
        ({"regime": "offline"}, "regime"),
    ],
)
def test_bad_fields_raise_naming_the_field(changes, match):
    with pytest.raises((ValueError, TypeError), match=match):
        SystemSpec(**changes)


def test_unknown_fields_and_unserialisable_knobs_raise():
    with pytest.raises(ValueError, match="unknown spec fields"):
        SystemSpec.from_dict({"num_draft_tokes": 3})
    with pytest.raises(TypeError, match="drafter"):
        SystemSpec(drafter={"kind": "ngram", "fn": object()})


def test_diff_and_apply_diff_are_inverse():
    a = SystemSpec()
    b = a.with_changes(num_draft_tokens=7, verifier={"kind": "tree", "budget": 8})
    assert b.diff(a) == {"num_draft_tokens": 7, "verifier": {"kind": "tree", "budget": 8}}
    assert a.apply_diff(b.diff(a)) == b


def test_build_gives_what_generate_runs_and_is_lossless():
    spec = SystemSpec(drafter={"kind": "ngram", "max_ngram": 3}, num_draft_tokens=5)
    system = build(spec)
    assert isinstance(system.drafter, sd.NGramDrafter) and system.drafter.max_ngram == 3
    assert isinstance(system.verifier, sd.ChainVerifier)
    prompt = torch.tensor([[1, 2, 3, 1, 2, 3, 1, 2]])
    spec_out = sd.generate(system.target, prompt, 16, drafter=system.drafter, verifier=system.verifier, **system.kwargs)
    ar_out = sd.generate(system.target, prompt, 16)
    assert torch.equal(spec_out.tokens, ar_out.tokens)
    assert torch.equal(system.generate(prompt, 16).tokens, ar_out.tokens)


def test_tree_verifier_budget_and_unknown_kinds():
    system = build(SystemSpec(verifier={"kind": "tree", "budget": 12}))
    assert isinstance(system.verifier, sd.TreeVerifier) and system.verifier.budget == 12
    two = build(SystemSpec(verifier={"kind": "two_level", "budget": 8, "q_budget": 6, "gate": "always"}))
    assert isinstance(two.verifier, sd.TwoLevelVerifier) and (two.verifier.budget, two.verifier.q_budget) == (8, 6)
    with pytest.raises(ValueError, match="verifier: expected a kind in"):
        build(SystemSpec(verifier={"kind": "three_level"}))
    with pytest.raises(ValueError, match="cannot import"):
        build(SystemSpec(verifier={"kind": "specdec.verify:NoSuchVerifier"}))


def test_graphs_need_cuda_and_scheduler_needs_dspark():
    with pytest.raises(ValueError, match="graphs"):
        build(SystemSpec(graphs=True))
    with pytest.raises(ValueError, match="scheduler"):
        build(SystemSpec(scheduler={"steps_per_second": [1.0, 0.9]}))


def test_registered_verifier_kind_is_built_and_duplicates_raise():
    register_verifier("chain_unchecked", lambda knobs, spec: sd.ChainVerifier(validate_proposals=False), replace=True)
    try:
        assert build(SystemSpec(verifier={"kind": "chain_unchecked"})).verifier.validate_proposals is False
        with pytest.raises(ValueError, match="already registered"):
            register_verifier("chain_unchecked", lambda knobs, spec: None)
    finally:
        del VERIFIERS["chain_unchecked"]


def test_target_cache_shares_weights_only_between_equal_weight_fields():
    cache = TargetCache()
    a = cache.get(SystemSpec(num_draft_tokens=2))
    assert cache.get(SystemSpec(drafter={"kind": "none"})) is a
    assert cache.get(SystemSpec(target={"kind": "tiny", "seed": 1})) is not a


def test_target_cache_keeps_plain_and_graph_captured_targets_apart():
    spec = SystemSpec()
    assert TargetCache.key(spec) != TargetCache.key(spec.with_changes(graphs=True))
    cache = TargetCache()
    with pytest.raises(ValueError, match="CUDA graphs"):
        cache.put(spec.with_changes(graphs=True), build(spec.autoregressive()).target)
    target = cache.get(spec)
    cache.clear()
    assert cache.get(spec) is not target


def test_random_target_kind_builds_a_shape_from_its_fields():
    shape = {
        "vocab_size": 128,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_layers": 2,
        "num_heads": 2,
        "num_kv_heads": 1,
        "head_dim": 16,
        "model_type": "qwen3",
    }
    spec = SystemSpec(target={"kind": "random", "shape": shape, "seed": 3}, max_seq_len=64)
    a, b = build(spec.autoregressive()).target, build(spec.autoregressive()).target
    assert a.vocab_size == 128 and torch.equal(a.lm_head.weight, b.lm_head.weight)
    with pytest.raises(ValueError, match="shape"):
        build(SystemSpec(target={"kind": "random", "shape": "qwen3-9b"}))
    with pytest.raises(ValueError, match="knobs"):
        build(SystemSpec(target={"kind": "random", "shape": shape, "layers": 3}))


def test_oracle_drafter_kind_proposes_the_targets_own_decode_and_needs_references():
    spec = SystemSpec(
        target={"kind": "tiny", "seed": 5}, drafter={"kind": "oracle", "profile": "dspark-qwen3-8b-gsm8k", "seed": 0}
    )
    with pytest.raises(ValueError, match="add_oracle_references"):
        build(spec)
    stock = build(spec.autoregressive()).target
    prompt = torch.tensor([1, 2, 3, 4, 5])
    ar = sd.generate(stock, prompt[None], 24)
    add_oracle_references(spec.target, [torch.cat([prompt, ar.tokens[0]])])
    try:
        out = build(spec, target=stock).generate(prompt[None], 16, seed=0)
        assert torch.equal(out.tokens[0], ar.tokens[0, :16])
        assert out.stats.target_passes < 16  # drafts were accepted
        with pytest.raises(ValueError, match="knobs"):
            build(spec.with_changes(drafter={"kind": "oracle", "tree_budget": 8}), target=stock)
    finally:
        ORACLE_REFERENCES.clear()


def test_a_spec_equals_the_spec_read_back_from_its_json():
    spec = SystemSpec(drafter={"kind": "ngram", "x": (1, 2)}, scheduler={"steps_per_second": (1.0,)})
    assert SystemSpec.from_json(spec.to_json()) == spec
    with pytest.raises(TypeError, match="drafter: expected string keys"):
        SystemSpec(drafter={"kind": "ngram", 1: 2})
    with pytest.raises(TypeError, match="scheduler: expected JSON-serialisable knobs"):
        SystemSpec(scheduler={"x": object()})
