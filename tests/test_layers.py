"""The package's layers: no import from a lower layer into a higher one, no import cycle."""

import shutil
from pathlib import Path

import pytest

import specdec
from specdec.layers import LAYERS, import_cycles, import_graph, layer_of, layer_violations

PACKAGE = Path(specdec.__file__).parent


def test_every_module_belongs_to_a_layer():
    for module in import_graph(PACKAGE):
        layer_of(module)


def test_no_import_points_up_the_layers():
    assert layer_violations(import_graph(PACKAGE)) == []


def test_no_import_cycles():
    assert import_cycles(import_graph(PACKAGE)) == []


def test_contracts_import_nothing_else_of_specdec():
    graph = import_graph(PACKAGE)
    outside = {
        m: sorted(t for t in ts if not t.startswith("specdec.contracts"))
        for m, ts in graph.items()
        if m.startswith("specdec.contracts")
    }
    assert {m: ts for m, ts in outside.items() if ts} == {}


def test_w12_kernels_do_not_import_formats():
    assert not any(t.startswith("specdec.formats") for t in import_graph(PACKAGE)["specdec.kernels.w12_gemm"])


@pytest.mark.parametrize("planted", ["function-level", "type-checking"])
def test_a_planted_cycle_and_upward_import_are_caught(tmp_path, planted):
    copy = tmp_path / "specdec"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "assets"))
    plan = copy / "contracts" / "plan.py"
    if planted == "function-level":
        line = "\n\ndef _planted():\n    from specdec.decode import generate\n    return generate\n"
    else:
        line = "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specdec.verify.tree import TreeVerifier\n"
    plan.write_text(plan.read_text() + line)
    graph = import_graph(copy)
    assert any(v.startswith("specdec.contracts.plan (layer 0) ->") for v in layer_violations(graph))
    assert any("specdec.contracts.plan" in group for group in import_cycles(graph))


def test_cycle_finder_on_a_known_graph():
    graph = {
        "specdec.a": {"specdec.b"},
        "specdec.b": {"specdec.c"},
        "specdec.c": {"specdec.a"},
        "specdec.d": {"specdec.a"},
        "specdec.e": set(),
    }
    assert import_cycles(graph) == [["specdec.a", "specdec.b", "specdec.c"]]


def test_a_package_without_a_layer_is_named():
    with pytest.raises(ValueError, match="belongs to no layer; add 'pilotx'"):
        layer_of("specdec.pilotx.loop")
    assert LAYERS["contracts"] == min(LAYERS.values())
