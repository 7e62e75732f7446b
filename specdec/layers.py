"""The layer order of specdec's packages: imports point from a higher layer to a lower or equal one.

``tests/test_layers.py`` walks every import in ``specdec/`` (module level, inside functions and under
``TYPE_CHECKING`` alike) and fails on an import from a lower layer into a higher one and on any import
cycle between modules. Packages of one layer may import each other only without cycles.

Example:
    >>> LAYERS["contracts"] < LAYERS["verify"] < LAYERS["decode"]
    True
"""

from __future__ import annotations

import ast
from pathlib import Path

LAYERS: dict[str, int] = {
    "contracts": 0,
    "layers": 0,
    "options": 0,
    "kernels": 1,
    "formats": 2,
    "models": 3,
    "verify": 4,
    "drafters": 5,
    "generation": 6,
    "decode": 6,
    "engine": 6,
    "data": 6,
    "train": 7,
    "forcing": 7,
    "testing": 8,
    "pilot": 9,
    "demo": 10,
    "cli_forcing": 10,
    "__main__": 10,
    "__init__": 10,
}

__all__ = ["LAYERS", "import_cycles", "import_graph", "layer_of", "layer_violations"]


def layer_of(module: str) -> int:
    """Layer of a dotted ``specdec.<package>...`` module name (``specdec`` itself is the top).

    Example:
        >>> layer_of("specdec.verify.tree"), layer_of("specdec")
        (4, 10)
    """
    parts = module.split(".")
    if parts[0] != "specdec":
        raise ValueError(f"module: expected a name under specdec, got {module!r}")
    head = parts[1] if len(parts) > 1 else "__init__"
    if head not in LAYERS:
        raise ValueError(f"module: {module!r} belongs to no layer; add {head!r} to specdec.layers.LAYERS")
    return LAYERS[head]


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Every ``specdec`` module under ``package_dir`` mapped to the ``specdec`` modules it imports.

    All imports count: module level, inside functions and under ``TYPE_CHECKING``. ``from a import b``
    counts as an import of ``a.b`` when that is a module, else of ``a``.

    Example:
        >>> from pathlib import Path
        >>> import specdec
        >>> "specdec.contracts.tree" in import_graph(Path(specdec.__file__).parent)["specdec.contracts.plan"]
        True
    """
    package_dir = Path(package_dir)
    modules: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target.startswith("specdec") and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a lower layer into a higher one, as ``"importer -> imported"`` lines.

    A package's ``__init__`` may import its own submodules; the top-level ``specdec`` may import all.
    """
    bad = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            if target.startswith(module + "."):
                continue
            if layer_of(target) > layer_of(module):
                bad.append(f"{module} (layer {layer_of(module)}) -> {target} (layer {layer_of(target)})")
    return bad


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (each one an import cycle), by Tarjan's algorithm.

    A package ``__init__`` importing its submodules and a submodule importing a sibling through the
    package is not counted: edges into a module's own parent package are dropped.

    Example:
        >>> import_cycles({"specdec.a": {"specdec.b"}, "specdec.b": {"specdec.a"}, "specdec.c": set()})
        [['specdec.a', 'specdec.b']]
    """
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(groups)
