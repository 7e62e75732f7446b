"""Every public module, class, function and method of specdec carries a docstring (``help()`` is useful).

Walks every module under :mod:`specdec` that :func:`pkgutil.walk_packages` finds (modules and packages whose
dotted name has a part starting with ``_`` are private and skipped). A module's public names are its
``__all__``; a module without ``__all__`` exposes the classes and functions it defines at top level whose
names do not start with ``_``. Methods, properties, class- and static methods count when a public class
defines them itself (dunder methods and what a class inherits, from torch or elsewhere, are not walked).
The signature that :func:`dataclasses.dataclass` writes into ``__doc__`` of an undocumented class is not
a docstring.
"""

import dataclasses
import functools
import importlib
import inspect
import pkgutil

import specdec


def public_module_names() -> list[str]:
    found = (info.name for info in pkgutil.walk_packages(specdec.__path__, prefix="specdec."))
    return ["specdec"] + sorted(name for name in found if not any(part.startswith("_") for part in name.split(".")))


def public_objects(module) -> list:
    if hasattr(module, "__all__"):
        objects = [getattr(module, name) for name in module.__all__]
    else:
        objects = [
            obj
            for name, obj in vars(module).items()
            if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__
        ]
    return [obj for obj in objects if inspect.isclass(obj) or inspect.isfunction(obj)]


def _documented(obj) -> bool:
    return bool((getattr(obj, "__doc__", None) or "").strip())


def _class_documented(cls) -> bool:
    doc = vars(cls).get("__doc__") or ""
    if dataclasses.is_dataclass(cls) and doc.startswith(cls.__name__ + "("):
        return False
    return bool(doc.strip())


def _member_function(value):
    if isinstance(value, property):
        return value.fget
    if isinstance(value, functools.cached_property):
        return value.func
    member = getattr(value, "__func__", value)
    return member if inspect.isfunction(member) else None


def public_names_without_docstrings() -> set[str]:
    missing = set()
    for module_name in public_module_names():
        module = importlib.import_module(module_name)
        if not _documented(module):
            missing.add(module_name)
        for obj in public_objects(module):
            qualified = f"{obj.__module__}.{obj.__qualname__}"
            if not (_class_documented(obj) if inspect.isclass(obj) else _documented(obj)):
                missing.add(qualified)
            if not inspect.isclass(obj):
                continue
            for attr, value in vars(obj).items():
                member = _member_function(value)
                if not attr.startswith("_") and member is not None and not _documented(member):
                    missing.add(f"{qualified}.{attr}")
    return missing


def test_the_walk_reaches_every_public_module():
    names = set(public_module_names())
    for expected in (
        "specdec.drafters.block.drafter",
        "specdec.models.hybrid_layers",
        "specdec.generation.inputs",
        "specdec.train.dflash",
        "specdec.layers",
        "specdec.testing.laws.markov",
        "specdec.forcing.runner",
    ):
        assert expected in names
    assert "specdec.__main__" not in names


def test_every_public_name_has_a_docstring():
    missing = public_names_without_docstrings()
    assert not missing, f"public names without a docstring: {sorted(missing)}"


def test_an_undocumented_name_is_caught(monkeypatch):
    from specdec.testing.laws import MarkovTarget

    monkeypatch.setattr(MarkovTarget.reset, "__doc__", None)
    assert public_names_without_docstrings() == {"specdec.testing.laws.markov.MarkovTarget.reset"}


def test_decode_and_verify_docstrings_show_shapes_and_an_example():
    from specdec.drafters.oracle import OracleDrafter

    for obj in (
        specdec.generate,
        specdec.ChainVerifier.verify,
        specdec.TreeVerifier.verify,
        specdec.TreeVerifier.build_tree,
        specdec.NGramDrafter.propose,
        OracleDrafter.propose,
        specdec.GenerationStats.record_round,
        specdec.verify.process_logits,
        specdec.verify.logits_to_probs,
        specdec.verify.sample,
    ):
        doc = inspect.getdoc(obj)
        assert ">>> " in doc and "[" in doc, f"{obj.__qualname__}: expected shapes and a doctest example"
