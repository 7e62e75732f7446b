"""The examples in specdec's docstrings run and print what they show.

Every module that :func:`pkgutil.walk_packages` finds under :mod:`specdec` has its examples run by
:mod:`doctest` in the module's own namespace, with ``ELLIPSIS`` and ``NORMALIZE_WHITESPACE``. Triton
kernels run on CPU tensors through the interpreter: ``tests/conftest.py`` sets ``TRITON_INTERPRET=1``
before any specdec import.

An example that cannot run here (it needs a real checkpoint or a GPU-sized model) is marked
``# doctest: +SKIP`` with its reason in a comment on the same line, e.g.
``>>> target = smollm2_target()  # loads the real 135M model  # doctest: +SKIP``;
:data:`SKIPPED_EXAMPLES` pins how many there are, so a new skip is a visible change to this file.
"""

import doctest
import importlib
import inspect
import pkgutil
import re

import pytest
import torch

import specdec

MODULES = ["specdec"] + sorted(info.name for info in pkgutil.walk_packages(specdec.__path__, prefix="specdec."))
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
SKIPPED_EXAMPLES = 13
# a comment that is not the directive, then the directive, on one line
SKIP_REASON = re.compile(r"#\s*(?!doctest:)[^#\s][^#]*#\s*doctest:.*\+SKIP")


def module_doctests(module_name: str) -> list[doctest.DocTest]:
    return doctest.DocTestFinder().find(importlib.import_module(module_name), module_name)


def run_examples(module_name: str) -> tuple[doctest.TestResults, str]:
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    report: list[str] = []
    torch.manual_seed(0)
    for test in module_doctests(module_name):
        runner.run(test, out=report.append)
    return runner.summarize(verbose=False), "".join(report)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    results, report = run_examples(module_name)
    assert results.failed == 0, f"{module_name}: {results.failed} of {results.attempted} examples failed\n{report}"


def test_skipped_examples_give_a_reason_and_their_number_is_pinned():
    skipped = [
        (test.name, example.source.strip())
        for name in MODULES
        for test in module_doctests(name)
        for example in test.examples
        if example.options.get(doctest.SKIP)
    ]
    without_reason = [f"{name}: {source}" for name, source in skipped if not SKIP_REASON.search(source)]
    assert not without_reason, "skipped examples without a reason comment:\n" + "\n".join(without_reason)
    assert len(skipped) == SKIPPED_EXAMPLES, "skipped examples:\n" + "\n".join(f"{n}: {s}" for n, s in skipped)


def test_a_wrong_example_fails(monkeypatch):
    from specdec.testing.laws import markov

    doc = markov.MarkovLaw.key.__doc__
    assert "((1, 4), (0, 4), (2, 3))" in doc
    monkeypatch.setattr(markov.MarkovLaw.key, "__doc__", doc.replace("((1, 4), (0, 4), (2, 3))", "((1, 4), (0, 4), (3, 2))"))
    results, report = run_examples("specdec.testing.laws.markov")
    assert results.failed == 1 and "(3, 2)" in report


PUBLIC_PACKAGES = [
    "specdec",
    "specdec.contracts",
    "specdec.models",
    "specdec.verify",
    "specdec.drafters",
    "specdec.engine",
    "specdec.forcing",
    "specdec.formats",
    "specdec.kernels",
    "specdec.testing",
    "specdec.train",
    "specdec.pilot",
]


def names_without_example(packages: list[str]) -> list[str]:
    """``package.name`` of every class or function in a package's ``__all__`` whose docstring has no ``>>>`` example."""
    missing = []
    for package in packages:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and ">>>" not in (inspect.getdoc(obj) or ""):
                missing.append(f"{package}.{name}")
    return missing


def test_every_public_class_and_function_has_an_example(monkeypatch):
    assert names_without_example(PUBLIC_PACKAGES) == []
    # the check sees a docstring that loses its example
    from specdec.verify import ChainVerifier

    monkeypatch.setattr(ChainVerifier, "__doc__", "Chain verification.")
    assert names_without_example(["specdec.verify"]) == ["specdec.verify.ChainVerifier"]
