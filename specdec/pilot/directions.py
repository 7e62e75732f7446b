"""Directions: one entry per mechanism specdec has, with where it applies, its knobs and how it edits a spec.

A :class:`Direction` is data: the loop asks :meth:`Direction.applies` and :meth:`Direction.settings`, and
agents call :meth:`Direction.apply`. :func:`register_direction` adds a mechanism; the loop does not change.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specdec.pilot.profile import STAGES
from specdec.pilot.spec import SystemSpec

__all__ = ["DIRECTIONS", "Direction", "Preconditions", "applicable", "drafter_choice", "register_direction"]


@dataclass(frozen=True)
class Preconditions:
    """Where a mechanism applies; ``None`` means any.

    Attributes:
        architectures: ``"dense"`` / ``"hybrid"``.
        devices: ``"cpu"`` / ``"cuda"``.
        regimes: ``"c1"`` / ``"batched"``.
        drafter_kinds: drafter kinds of the spec (``"none"`` is AR).

    Example:
        >>> Preconditions(devices=("cuda",)).failing(SystemSpec())
        ["device 'cpu' not in ('cuda',)"]
    """

    architectures: tuple[str, ...] | None = None
    devices: tuple[str, ...] | None = None
    regimes: tuple[str, ...] | None = None
    drafter_kinds: tuple[str, ...] | None = None

    def __post_init__(self):
        for name, value in self.__dict__.items():  # a string would match its substrings ("ngram" admits "gram")
            if value is not None and (not isinstance(value, tuple) or not all(isinstance(v, str) for v in value)):
                raise TypeError(f"{name}: expected a tuple of str or None, got {value!r}")

    def failing(self, spec: SystemSpec) -> list[str]:
        """The preconditions ``spec`` does not meet (empty: it applies)."""
        facts = {
            "architecture": (spec.architecture, self.architectures),
            "device": ("cuda" if spec.is_cuda else "cpu", self.devices),
            "regime": (spec.regime, self.regimes),
            "drafter kind": (spec.drafter["kind"], self.drafter_kinds),
        }
        return [
            f"{name} {value!r} not in {allowed}"
            for name, (value, allowed) in facts.items()
            if allowed is not None and value not in allowed
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (tuples as lists)."""
        return {k: None if v is None else list(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Direction:
    """One mechanism the pilot can try.

    Attributes:
        name: registry key.
        mechanism: one line on what it changes and why it can be faster.
        stages: the gaps it addresses (``draft``, ``verify``, ``commit``, ``other``, ``acceptance``).
        preconditions: :class:`Preconditions`.
        knobs: each knob's candidate values; :meth:`settings` is their grid.
        edit: ``edit(spec, settings) -> spec``.
        fields: the spec fields ``edit`` may change; an edit that changes another raises (none declared: none may change).

    Example:
        >>> d = DIRECTIONS["draft_length"]
        >>> d.apply(SystemSpec(), {"num_draft_tokens": 8}).num_draft_tokens
        8
    """

    name: str
    mechanism: str
    stages: tuple[str, ...]
    preconditions: Preconditions
    knobs: Mapping[str, tuple]
    edit: Callable[[SystemSpec, Mapping[str, Any]], SystemSpec]
    fields: tuple[str, ...] = field(default=())

    def applies(self, spec: SystemSpec) -> bool:
        """Whether every precondition holds for ``spec``."""
        return not self.preconditions.failing(spec)

    def settings(self) -> list[dict[str, Any]]:
        """Every combination of knob values.

        Example:
            >>> len(DIRECTIONS["tree_verifier"].settings())
            6
        """
        names = list(self.knobs)
        return [dict(zip(names, values)) for values in itertools.product(*(self.knobs[n] for n in names))]

    def apply(self, spec: SystemSpec, settings: Mapping[str, Any]) -> SystemSpec:
        """``spec`` with this mechanism at ``settings``; unknown knobs and values outside :attr:`knobs` raise."""
        unknown = sorted(set(settings) - set(self.knobs))
        if unknown:
            raise ValueError(f"settings: unknown knobs {unknown} for direction {self.name!r}; expected {sorted(self.knobs)}")
        for name, value in settings.items():
            if not any(value == v and type(value) is type(v) for v in self.knobs[name]):  # 1 is not True, 16.0 not 16
                raise ValueError(f"settings: {name}={value!r} for direction {self.name!r}; expected one of {self.knobs[name]}")
        new = self.edit(spec, dict(settings))
        stray = sorted(set(new.diff(spec)) - set(self.fields))
        if stray:
            raise ValueError(f"direction {self.name!r} changed fields {stray} outside its declared fields {self.fields}")
        return new


DIRECTIONS: dict[str, Direction] = {}
"""Every registered direction by name."""


def register_direction(direction: Direction, *, replace: bool = False) -> Direction:
    """Add a direction to :data:`DIRECTIONS`.

    Example:
        >>> d = Direction("bigger_cache", "room for longer prompts", ("other",), Preconditions(), {"max_seq_len": (1024,)},
        ...               lambda spec, s: spec.with_changes(**s), fields=("max_seq_len",))
        >>> register_direction(d, replace=True).name in DIRECTIONS
        True
        >>> del DIRECTIONS["bigger_cache"]
    """
    if not isinstance(direction, Direction):
        raise TypeError(f"direction: expected a Direction, got {type(direction).__name__}")
    if direction.name in DIRECTIONS and not replace:
        raise ValueError(f"direction: {direction.name!r} is already registered (pass replace=True to replace it)")
    if not direction.knobs or any(not isinstance(v, tuple) or not v for v in direction.knobs.values()):
        raise ValueError(f"direction.knobs: expected non-empty tuples of values per knob, got {dict(direction.knobs)!r}")
    known = STAGES + ("acceptance",)
    if not isinstance(direction.stages, tuple) or not direction.stages or any(s not in known for s in direction.stages):
        raise ValueError(f"direction.stages: expected a non-empty tuple of {known}, got {direction.stages!r}")
    if not callable(direction.edit):
        raise TypeError(f"direction.edit: expected a callable (spec, settings) -> spec, got {type(direction.edit).__name__}")
    DIRECTIONS[direction.name] = direction
    return direction


def applicable(spec: SystemSpec, stages: Sequence[str] | None = None) -> list[Direction]:
    """Registered directions whose preconditions hold for ``spec`` (and, if given, that address one of ``stages``).

    Example:
        >>> [d.name for d in applicable(SystemSpec(), ["acceptance"])][:2]
        ['draft_length', 'tree_verifier']
    """
    found = [d for d in DIRECTIONS.values() if d.applies(spec)]
    if stages is not None:
        found = [d for d in found if set(d.stages) & set(stages)]
    return found


def _with_drafter(spec: SystemSpec, **knobs: Any) -> SystemSpec:
    return spec.with_changes(drafter={**spec.drafter, **knobs})


_ANY_DRAFTER = ("ngram", "dflash", "dflash2", "dspark", "oracle")
_BLOCK = ("dflash", "dflash2", "dspark")


def _two_level(spec: SystemSpec, s: Mapping[str, Any]) -> SystemSpec:
    budget = s["budget"]
    new = spec.with_changes(verifier={"kind": "two_level", "budget": budget, "q_budget": budget, "gate": s["gate"]})
    if spec.drafter["kind"] == "ngram":
        return _with_drafter(new, max_paths=spec.drafter.get("max_paths", 1))
    if spec.drafter["kind"] in _BLOCK:
        return _with_drafter(new, tree_budget=budget)
    return new  # a drafter without tree knobs (the oracle) proposes chains; the verifier changes alone


def _tree(spec: SystemSpec, s: Mapping[str, Any]) -> SystemSpec:
    new = spec.with_changes(verifier={"kind": "tree", "budget": s["budget"]})
    if spec.drafter["kind"] == "ngram":
        return _with_drafter(new, max_paths=s["paths"])
    if spec.drafter["kind"] in _BLOCK:
        return _with_drafter(new, tree_budget=s["budget"])
    return new


def drafter_choice(options: Mapping[str, Mapping[str, Any]], *, name: str = "drafter_choice") -> Direction:
    """A direction that puts one of the deployment's drafters in place (from plain AR, or instead of another).

    Which drafters exist depends on the deployment (a trained checkpoint, an n-gram table, a simulated
    oracle), so this direction is made per deployment and registered with :func:`register_direction`.

    Args:
        options: a name per drafter section (``{"kind": ..., **knobs}``, as in :attr:`SystemSpec.drafter`).
        name: the direction's registry name.

    Example:
        >>> d = drafter_choice({"ngram3": {"kind": "ngram", "max_ngram": 3}})
        >>> d.apply(SystemSpec().autoregressive(), {"drafter": "ngram3"}).drafter
        {'kind': 'ngram', 'max_ngram': 3}
    """
    if not isinstance(options, Mapping) or not options:
        raise ValueError(f"options: expected a non-empty mapping of name -> drafter section, got {options!r}")
    sections = {}
    for key, section in options.items():
        if not isinstance(section, Mapping) or not isinstance(section.get("kind"), str) or section["kind"] == "none":
            raise ValueError(f"options[{key!r}]: expected a drafter section with a 'kind' other than 'none', got {section!r}")
        sections[key] = dict(section)

    def edit(spec: SystemSpec, settings: Mapping[str, Any]) -> SystemSpec:
        return spec.with_changes(drafter=dict(sections[settings["drafter"]]))

    return Direction(
        name,
        "decode with a drafter: every accepted draft token saves one target pass",
        ("acceptance",),
        Preconditions(),
        {"drafter": tuple(sections)},
        edit,
        fields=("drafter",),
    )


for _direction in (
    Direction(
        "weight_format",
        "W12: lossless 12-bit weights, 0.75x the bytes of bf16 in every target pass",
        ("verify",),
        Preconditions(devices=("cuda",), architectures=("dense",)),
        {"weight_format": ("w12",)},
        lambda spec, s: spec.with_changes(**s),
        fields=("weight_format",),
    ),
    Direction(
        "draft_length",
        "longer proposals raise tau where the drafter is right; shorter ones save verify rows where it is not",
        ("acceptance", "draft", "verify"),
        Preconditions(drafter_kinds=_ANY_DRAFTER),
        {"num_draft_tokens": (2, 3, 4, 6, 8, 12)},
        lambda spec, s: spec.with_changes(**s),
        fields=("num_draft_tokens",),
    ),
    Direction(
        "tree_verifier",
        "verify a tree of alternatives in one pass: more tokens per round at the same pass count",
        ("acceptance",),
        Preconditions(drafter_kinds=_ANY_DRAFTER),
        {"budget": (8, 16, 32), "paths": (2, 4)},
        _tree,
        fields=("verifier", "drafter"),
    ),
    Direction(
        "two_level_verifier",
        "a Q pass on the 8-bit weight view picks the chain, the drafter drafts again, one exact pass decides",
        ("acceptance", "verify"),
        Preconditions(drafter_kinds=_ANY_DRAFTER),
        {"budget": (16, 32, 64), "gate": ("auto", "always")},
        _two_level,
        fields=("verifier", "drafter"),
    ),
    Direction(
        "chain_verifier",
        "verify a single chain (the narrowest target pass) without the per-round host check of the proposal",
        ("verify",),
        Preconditions(drafter_kinds=_ANY_DRAFTER),
        {"validate_proposals": (False,)},
        lambda spec, s: spec.with_changes(verifier={"kind": "chain", **s}),
        fields=("verifier",),
    ),
    Direction(
        "ngram_order",
        "the longest context an n-gram drafter matches: longer is more precise, shorter matches more often",
        ("acceptance", "draft"),
        Preconditions(drafter_kinds=("ngram",)),
        {"max_ngram": (2, 3, 4, 5)},
        lambda spec, s: _with_drafter(spec, **s),
        fields=("drafter",),
    ),
    Direction(
        "prefix_scheduler",
        "DSpark's prefix scheduler: verify only the drafts whose survival pays for their verify rows",
        ("verify", "acceptance"),
        Preconditions(drafter_kinds=("dspark",)),
        {"early_stop": (True, False), "lag": (0, 2)},
        lambda spec, s: spec.with_changes(scheduler={"steps_per_second": spec.scheduler.get("steps_per_second", [1.0]), **s}),
        fields=("scheduler",),
    ),
    Direction(
        "cuda_graphs",
        "replay captured CUDA graphs: no per-kernel launch cost",
        ("other", "verify", "draft"),
        Preconditions(devices=("cuda",)),
        {"graphs": (True,)},
        lambda spec, s: spec.with_changes(**s),
        fields=("graphs",),
    ),
    Direction(
        "block_drafter_tree",
        "a block drafter's best-first tree from its per-position marginals",
        ("acceptance",),
        Preconditions(drafter_kinds=_BLOCK),
        {"tree_budget": (8, 16, 32, 64)},
        lambda spec, s: _with_drafter(spec.with_changes(verifier={"kind": "tree", "budget": s["tree_budget"]}), **s),
        fields=("verifier", "drafter"),
    ),
):
    register_direction(_direction)
