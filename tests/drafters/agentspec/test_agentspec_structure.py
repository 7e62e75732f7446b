"""StructureSpec / Delimiter: what a spec accepts and what it refuses, naming the argument."""

import pytest

from specdec.drafters.agentspec import Delimiter, StructureSpec


def test_default_spec_has_tool_and_code_blocks():
    spec = StructureSpec.agent_default()
    assert spec.by_name("tool_call") == Delimiter("tool_call", "<tool_call>", "</tool_call>")
    assert spec.by_name("code").open == spec.by_name("code").close == "```"
    with pytest.raises(KeyError, match="name"):
        spec.by_name("latex")


@pytest.mark.parametrize(
    ("pairs", "error", "match"),
    [
        ([("a", "", "x")], ValueError, "Delimiter.open"),
        ([("", "x", "y")], ValueError, "Delimiter.name"),
        ([("a", "x", "y"), ("a", "z", "w")], ValueError, "distinct names"),
        ([("inline", "$", "$"), ("display", "$$", "$$")], ValueError, r"'\$' completes inside opening '\$\$'"),
        ([("tag", "b>", "</b>"), ("bold", "<b>", "</bold>")], ValueError, "completes at the end of, and is tried before,"),
        ([("lt", "<", ">"), ("call", "@<call>", "@</call>")], ValueError, r"'<' completes inside opening '@<call>'"),
        ([("a", "x", "y"), ("b", "x", "z")], ValueError, "distinct opening"),
    ],
    ids=["empty-open", "empty-name", "duplicate-name", "shadowed-open", "suffix-tried-first", "inside", "duplicate-open"],
)
def test_bad_specs_are_refused(pairs, error, match):
    with pytest.raises(error, match=match):
        StructureSpec.of(pairs)


def test_bad_resets_are_refused():
    with pytest.raises(ValueError, match=r"resets\[1\]"):
        StructureSpec.of([("a", "x", "y")], resets=["<|im_start|>", ""])
    with pytest.raises(TypeError, match="resets"):
        StructureSpec.of([("a", "x", "y")], resets="<|im_start|>")


def test_non_delimiters_are_refused():
    with pytest.raises(TypeError, match=r"delimiters\[0\]"):
        StructureSpec(("tool_call",))
    with pytest.raises(TypeError, match="nests"):
        Delimiter("a", "x", "y", nests="no")


def test_an_opening_ending_another_may_come_after_it():
    """Tried in declared order: '<b>' first, then 'b>', opens each where it should."""
    from specdec.drafters.agentspec import BlockTracker

    tracker = BlockTracker(StructureSpec.of([("bold", "<b>", "</bold>"), ("tag", "b>", "</b>")]))
    tracker.feed(b"<b>")
    assert tracker.stack == ("bold",)
