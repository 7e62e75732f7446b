import pytest

from specdec.pilot.directions import DIRECTIONS, Direction, Preconditions, applicable, drafter_choice, register_direction
from specdec.pilot.spec import SystemSpec


def test_preconditions_filter_by_device_drafter_and_regime():
    cpu = SystemSpec()
    names = {d.name for d in applicable(cpu)}
    assert "cuda_graphs" not in names and "weight_format" not in names
    assert {"draft_length", "tree_verifier", "ngram_order"} <= names
    gpu = SystemSpec(device="cuda", drafter={"kind": "dflash", "path": "x"})
    gpu_names = {d.name for d in applicable(gpu)}
    assert {"cuda_graphs", "weight_format", "block_drafter_tree"} <= gpu_names and "ngram_order" not in gpu_names
    assert not DIRECTIONS["draft_length"].applies(SystemSpec().autoregressive())
    assert Preconditions(regimes=("batched",)).failing(cpu) == ["regime 'c1' not in ('batched',)"]


def test_apply_checks_knobs_values_and_declared_fields():
    d = DIRECTIONS["tree_verifier"]
    spec = d.apply(SystemSpec(), {"budget": 16, "paths": 4})
    assert spec.verifier == {"kind": "tree", "budget": 16} and spec.drafter["max_paths"] == 4
    with pytest.raises(ValueError, match="unknown knobs"):
        d.apply(SystemSpec(), {"width": 3})
    with pytest.raises(ValueError, match="expected one of"):
        d.apply(SystemSpec(), {"budget": 17, "paths": 2})
    sneaky = Direction(
        "sneaky",
        "",
        ("verify",),
        Preconditions(),
        {"k": (1,)},
        lambda spec, s: spec.with_changes(num_draft_tokens=9, graphs=False, weight_format="w12"),
        fields=("num_draft_tokens",),
    )
    with pytest.raises(ValueError, match="outside its declared fields"):
        sneaky.apply(SystemSpec(), {"k": 1})


def test_registering_a_direction_needs_knobs_and_a_unique_name():
    with pytest.raises(ValueError, match="already registered"):
        register_direction(DIRECTIONS["draft_length"])
    with pytest.raises(ValueError, match="knobs"):
        register_direction(Direction("empty", "", ("other",), Preconditions(), {"k": ()}, lambda s, k: s))
    with pytest.raises(TypeError, match="Direction"):
        register_direction("draft_length")


def test_two_level_direction_builds_a_lossless_system():
    import torch

    import specdec as sd
    from specdec.pilot.spec import build

    spec = DIRECTIONS["two_level_verifier"].apply(SystemSpec(), {"budget": 16, "gate": "always"})
    assert spec.verifier == {"kind": "two_level", "budget": 16, "q_budget": 16, "gate": "always"}
    system = build(spec)
    assert isinstance(system.verifier, sd.TwoLevelVerifier)
    prompt = torch.tensor([[1, 2, 3, 1, 2, 3]])
    out = system.generate(prompt, 12)
    assert torch.equal(out.tokens, sd.generate(system.target, prompt, 12).tokens)
    assert system.verifier.stats.q_passes > 0


def test_drafter_choice_puts_a_drafter_on_plain_ar_and_checks_its_options():
    d = drafter_choice({"ngram2": {"kind": "ngram", "max_ngram": 2}, "ngram4": {"kind": "ngram", "max_ngram": 4}})
    ar = SystemSpec().autoregressive()
    assert d.applies(ar) and d.settings() == [{"drafter": "ngram2"}, {"drafter": "ngram4"}]
    assert d.apply(ar, {"drafter": "ngram4"}).drafter == {"kind": "ngram", "max_ngram": 4}
    with pytest.raises(ValueError, match="settings"):
        d.apply(ar, {"drafter": "dflash"})
    with pytest.raises(ValueError, match="options"):
        drafter_choice({})
    with pytest.raises(ValueError, match="options\\['ar'\\]"):
        drafter_choice({"ar": {"kind": "none"}})


def test_verifier_directions_leave_a_chain_only_drafter_unchanged():
    oracle = SystemSpec(drafter={"kind": "oracle", "profile": "specpilot-one-level"})
    names = [d.name for d in applicable(oracle)]
    assert {"draft_length", "tree_verifier", "two_level_verifier", "chain_verifier"} <= set(names)
    two_level = DIRECTIONS["two_level_verifier"].apply(oracle, {"budget": 32, "gate": "auto"})
    tree = DIRECTIONS["tree_verifier"].apply(oracle, {"budget": 16, "paths": 2})
    assert two_level.drafter == oracle.drafter and two_level.verifier["kind"] == "two_level"
    assert tree.drafter == oracle.drafter and tree.verifier == {"kind": "tree", "budget": 16}
    block = SystemSpec(drafter={"kind": "dflash", "path": "smollm2"})
    assert DIRECTIONS["tree_verifier"].apply(block, {"budget": 16, "paths": 2}).drafter["tree_budget"] == 16


def test_preconditions_stages_and_fields_are_not_misread():
    with pytest.raises(TypeError, match="drafter_kinds: expected a tuple of str or None, got 'dflash2'"):
        Preconditions(drafter_kinds="dflash2")  # a string would admit its substrings ("dflash")
    assert Preconditions(drafter_kinds=("dflash2",)).failing(SystemSpec(drafter={"kind": "ngram"}))
    edit = lambda spec, s: spec.with_changes(num_draft_tokens=9)  # noqa: E731
    for stages, message in [("acceptance", "direction.stages"), (("acceptence",), "direction.stages")]:
        with pytest.raises(ValueError, match=message):
            register_direction(Direction("typo", "m", stages, Preconditions(), {"x": (1,)}, edit))
    with pytest.raises(TypeError, match="direction.edit: expected a callable"):
        register_direction(Direction("no_edit", "m", ("verify",), Preconditions(), {"x": (1,)}, "not a function"))
    undeclared = Direction("undeclared", "m", ("verify",), Preconditions(), {"x": (1,)}, edit)  # fields=(): none may change
    with pytest.raises(ValueError, match=r"changed fields \['num_draft_tokens'\] outside its declared fields \(\)"):
        undeclared.apply(SystemSpec(), {"x": 1})


def test_a_setting_equal_to_a_knob_value_only_by_coercion_is_refused():
    d = DIRECTIONS["draft_length"]
    value = d.knobs["num_draft_tokens"][0]
    with pytest.raises(ValueError, match="settings: num_draft_tokens="):
        d.apply(SystemSpec(), {"num_draft_tokens": float(value)})  # 6.0 is not the knob value 6
    assert d.apply(SystemSpec(), {"num_draft_tokens": value}).num_draft_tokens == value
