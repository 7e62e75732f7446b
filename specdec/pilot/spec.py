"""``SystemSpec``: a serialisable, versioned description of one decode system, and :func:`build`.

A spec names its parts by *kind* plus that kind's knobs. A kind is a key of :data:`TARGETS`,
:data:`DRAFTERS` or :data:`VERIFIERS` (its factory is called as ``factory(knobs, spec)``, drafters as
``factory(knobs, target, spec)``), or an import path ``"package.module:name"`` for a part that lives
outside the registries (called as ``name(**knobs)``, drafters as ``name(target, **knobs)``).
:func:`build` turns a spec into the arguments :func:`specdec.generate` runs.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "DRAFTERS",
    "SPEC_VERSION",
    "TARGETS",
    "VERIFIERS",
    "BuiltSystem",
    "SystemSpec",
    "TargetCache",
    "add_oracle_references",
    "build",
    "register_drafter",
    "register_target",
    "register_verifier",
    "resolve",
]

SPEC_VERSION = 1
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_WEIGHT_FORMATS = ("bf16", "w12")
_REGIMES = ("c1", "batched")


def _tiny_target(knobs: Mapping[str, Any], spec: SystemSpec):
    from specdec.testing import tiny_target

    rest = {k: v for k, v in knobs.items() if k not in ("model_type", "seed")}
    return tiny_target(
        knobs.get("model_type", "llama"),
        seed=knobs.get("seed", 0),
        max_seq_len=spec.max_seq_len,
        dtype=_DTYPES[spec.dtype],
        device=spec.device,
        **rest,
    )


def _smollm2_target(knobs: Mapping[str, Any], spec: SystemSpec):
    from specdec import data
    from specdec.models import load_target

    return load_target(
        data.smollm2_checkpoint(progress=False),
        dtype=_DTYPES[spec.dtype],
        device=spec.device,
        max_seq_len=spec.max_seq_len,
        weight_format=spec.weight_format,
        progress=False,
    )


def _path_target(knobs: Mapping[str, Any], spec: SystemSpec):
    from specdec.models import load_target

    if "path" not in knobs:
        raise ValueError(f"target: kind 'path' expects a 'path' knob, got {dict(knobs)!r}")
    return load_target(
        knobs["path"],
        dtype=_DTYPES[spec.dtype],
        device=spec.device,
        max_seq_len=spec.max_seq_len,
        weight_format=spec.weight_format,
        progress=False,
    )


def _random_target(knobs: Mapping[str, Any], spec: SystemSpec):
    from specdec.models import SHAPES, TargetConfig, random_target

    unknown = sorted(set(knobs) - {"shape", "seed"})
    if unknown or "shape" not in knobs:
        raise ValueError(f"target: kind 'random' expects knobs 'shape' (and 'seed'), got {dict(knobs)!r}")
    shape = knobs["shape"]
    if isinstance(shape, str):
        if shape not in SHAPES:
            raise ValueError(f"target: shape expected one of {sorted(SHAPES)} or a mapping of TargetConfig fields, got {shape!r}")
        cfg = SHAPES[shape]
    elif isinstance(shape, Mapping):
        cfg = TargetConfig(**shape)
    else:
        raise TypeError(f"target: shape expected a name or a mapping of TargetConfig fields, got {type(shape).__name__}")
    return random_target(
        cfg, dtype=_DTYPES[spec.dtype], device=spec.device, max_seq_len=spec.max_seq_len, seed=knobs.get("seed", 0)
    )


ORACLE_REFERENCES: dict[str, list[torch.Tensor]] = {}
"""Reference decodes the ``oracle`` drafter proposes from, by target (see :func:`add_oracle_references`)."""


def _target_key(target_section: Mapping[str, Any]) -> str:
    return json.dumps(dict(target_section), sort_keys=True)


def add_oracle_references(target_section: Mapping[str, Any], sequences: Sequence[torch.Tensor]) -> None:
    """Record the stock target's own greedy decodes (prompt + continuation, 1-D) for the ``oracle`` drafter kind.

    The ``oracle`` kind (:class:`specdec.OracleDrafter`: simulated acceptance) proposes from the references of
    the spec's target section, so a spec diff naming it carries over between deployments.

    Example:
        >>> add_oracle_references({"kind": "tiny", "seed": 0}, [torch.tensor([1, 2, 3, 4])])
        >>> system = build(SystemSpec(drafter={"kind": "oracle", "profile": "dspark-qwen3-8b-gsm8k"}))
        >>> system.drafter.label, len(system.drafter.references)
        ('simulated acceptance', 1)
        >>> ORACLE_REFERENCES.clear()
    """
    sequences = list(sequences)
    if any(not isinstance(s, torch.Tensor) or s.ndim != 1 for s in sequences):
        raise TypeError("sequences: expected 1-D token tensors (prompt followed by the target's greedy continuation)")
    ORACLE_REFERENCES.setdefault(_target_key(target_section), []).extend(s.detach().cpu().long() for s in sequences)


def _oracle_drafter(knobs: Mapping[str, Any], target, spec: SystemSpec):
    from specdec.drafters.oracle import OracleDrafter

    unknown = sorted(set(knobs) - {"profile", "seed"})
    if unknown:
        raise ValueError(f"drafter: kind 'oracle' takes the knobs 'profile' and 'seed', got {dict(knobs)!r}")
    references = ORACLE_REFERENCES.get(_target_key(spec.target))
    if not references:
        raise ValueError(
            f"drafter: kind 'oracle' needs the target's reference decodes (add_oracle_references), none for target {spec.target!r}"
        )
    return OracleDrafter(
        knobs.get("profile", "specpilot-one-level"),
        references=references,
        vocab_size=target.vocab_size,
        seed=knobs.get("seed", 1),
    )


def _ngram_drafter(knobs: Mapping[str, Any], target, spec: SystemSpec):
    from specdec.drafters import NGramDrafter

    return NGramDrafter(**knobs)


def _prefix_scheduler(spec: SystemSpec):
    if not spec.scheduler:
        return None
    from specdec.drafters import PrefixScheduler

    return PrefixScheduler(**spec.scheduler)


def _block_drafter(cls_name: str) -> Callable:
    def factory(knobs: Mapping[str, Any], target, spec: SystemSpec):
        from specdec import drafters

        knobs = dict(knobs)
        if "path" not in knobs:
            raise ValueError(f"drafter: kind {cls_name!r} expects a 'path' knob (checkpoint folder), got {knobs!r}")
        path = knobs.pop("path")
        if path == "smollm2":
            from specdec import data

            path = data.smollm2_drafter_path()
        extra = {"scheduler": _prefix_scheduler(spec)} if cls_name == "DSparkDrafter" and spec.scheduler else {}
        return getattr(drafters, cls_name).from_pretrained(path, target, dtype=_DTYPES[spec.dtype], **knobs, **extra)

    return factory


def _chain_verifier(knobs: Mapping[str, Any], spec: SystemSpec):
    from specdec.verify import ChainVerifier

    return ChainVerifier(**knobs)


def _tree_verifier(knobs: Mapping[str, Any], spec: SystemSpec):
    from specdec.verify import TreeVerifier

    return TreeVerifier(**knobs)


TARGETS: dict[str, Callable] = {"tiny": _tiny_target, "smollm2": _smollm2_target, "path": _path_target, "random": _random_target}
"""Target kinds: ``factory(knobs, spec) -> Target``."""

DRAFTERS: dict[str, Callable] = {
    "ngram": _ngram_drafter,
    "dflash": _block_drafter("DFlashDrafter"),
    "dflash2": _block_drafter("DFlash2Drafter"),
    "dspark": _block_drafter("DSparkDrafter"),
    "oracle": _oracle_drafter,
}
"""Drafter kinds: ``factory(knobs, target, spec) -> Drafter``; the kind ``"none"`` is plain AR decoding."""


def _two_level_verifier(knobs: Mapping[str, Any], spec: SystemSpec):
    from specdec.verify import TwoLevelVerifier

    return TwoLevelVerifier(**knobs)


VERIFIERS: dict[str, Callable] = {"chain": _chain_verifier, "tree": _tree_verifier, "two_level": _two_level_verifier}
"""Verifier kinds: ``factory(knobs, spec) -> verifier``."""


def _register(registry: dict[str, Callable], what: str, kind: str, factory: Callable, replace: bool) -> None:
    if not isinstance(kind, str) or not kind or ":" in kind:
        raise ValueError(f"kind: expected a non-empty name without ':', got {kind!r}")
    if not callable(factory):
        raise TypeError(f"factory: expected a callable, got {type(factory).__name__}")
    if kind in registry and not replace:
        raise ValueError(f"kind: {what} kind {kind!r} is already registered (pass replace=True to replace it)")
    registry[kind] = factory


def register_target(kind: str, factory: Callable, *, replace: bool = False) -> None:
    """Add a target kind: ``factory(knobs, spec) -> Target``.

    Example:
        >>> register_target("tiny_qwen3", lambda knobs, spec: _tiny_target({"model_type": "qwen3"}, spec), replace=True)
        >>> "tiny_qwen3" in TARGETS
        True
    """
    _register(TARGETS, "target", kind, factory, replace)


def register_drafter(kind: str, factory: Callable, *, replace: bool = False) -> None:
    """Add a drafter kind: ``factory(knobs, target, spec) -> Drafter``.

    Example:
        >>> from specdec.drafters import NGramDrafter
        >>> register_drafter("bigram", lambda knobs, target, spec: NGramDrafter(max_ngram=2), replace=True)
        >>> "bigram" in DRAFTERS
        True
    """
    _register(DRAFTERS, "drafter", kind, factory, replace)


def register_verifier(kind: str, factory: Callable, *, replace: bool = False) -> None:
    """Add a verifier kind (two-level verification joins this way): ``factory(knobs, spec) -> verifier``.

    Example:
        >>> from specdec.verify import TreeVerifier
        >>> register_verifier("tree_k2", lambda knobs, spec: TreeVerifier(knobs.get("budget", 16), top_k=2), replace=True)
        >>> "tree_k2" in VERIFIERS
        True
    """
    _register(VERIFIERS, "verifier", kind, factory, replace)


def resolve(registry: Mapping[str, Callable], kind: str, argument: str) -> Callable:
    """The factory of ``kind``: a registry key, or an import path ``"package.module:name"``.

    Example:
        >>> resolve(VERIFIERS, "chain", "verifier") is VERIFIERS["chain"]
        True
        >>> resolve(VERIFIERS, "specdec.verify:ChainVerifier", "verifier").__name__
        'ChainVerifier'
    """
    if kind in registry:
        return registry[kind]
    if isinstance(kind, str) and ":" in kind:
        module, _, name = kind.partition(":")
        try:
            obj = importlib.import_module(module)
            for part in name.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"{argument}: cannot import kind {kind!r}: {err}") from err
        return obj
    raise ValueError(f"{argument}: expected a kind in {sorted(registry)} or an import path 'module:name', got {kind!r}")


def _section(name: str, value: Any, *, allow_none_kind: bool = False) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name}: expected a mapping with a 'kind' key, got {type(value).__name__}")
    if "kind" not in value or not isinstance(value["kind"], str):
        raise ValueError(f"{name}: expected a 'kind' string, got {dict(value)!r}")
    return _json_form(name, value)


def _json_form(name: str, value: Mapping) -> dict[str, Any]:
    """``value`` as its JSON round trip gives it back (tuples as lists), so a spec equals the spec read from its JSON;
    string keys only, as JSON has."""
    if any(not isinstance(k, str) for k in value):
        raise TypeError(f"{name}: expected string keys (JSON objects have no other), got {sorted(map(repr, value))}")
    try:
        return json.loads(json.dumps(dict(value)))
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name}: expected JSON-serialisable knobs, got {dict(value)!r} ({err})") from err


@dataclass(frozen=True)
class SystemSpec:
    """One decode system: target, weight format, drafter, verifier, scheduler, graphs and batch regime.

    Attributes:
        target: ``{"kind": ..., **knobs}``; kinds in :data:`TARGETS`: ``tiny`` (knobs: those of
            :func:`specdec.testing.tiny_hf_model`), ``smollm2``, ``path`` (knob ``path``), ``random``
            (random weights at a real shape: knob ``shape``, a name of :data:`specdec.models.SHAPES` or a
            mapping of :class:`~specdec.models.TargetConfig` fields, and ``seed``).
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"`` ...
        max_seq_len: the target's KV capacity.
        weight_format: ``"bf16"`` (plain weights in ``dtype``) or ``"w12"``.
        drafter: ``{"kind": ..., **knobs}``; kinds in :data:`DRAFTERS`, or ``{"kind": "none"}`` (AR). The
            ``oracle`` kind is simulated acceptance (knobs ``profile``, ``seed``; see :func:`add_oracle_references`).
        verifier: ``{"kind": ..., **knobs}``; kinds in :data:`VERIFIERS` (``chain``; ``tree`` with ``budget``;
            ``two_level`` with ``budget``, ``q_budget``, ``gate``).
        num_draft_tokens: the most tokens the drafter proposes per round.
        scheduler: :class:`specdec.drafters.PrefixScheduler` arguments (DSpark drafters); ``{}`` = none.
        graphs: capture CUDA graphs for the target (CUDA only).
        regime: ``"c1"`` (one request at a time) or ``"batched"``.
        batch_size: concurrent requests the system is tuned for (1 in the ``c1`` regime).
        version: the schema version (:data:`SPEC_VERSION`).

    Example:
        >>> spec = SystemSpec(drafter={"kind": "ngram", "max_ngram": 3})
        >>> SystemSpec.from_json(spec.to_json()) == spec
        True
        >>> spec.with_changes(verifier={"kind": "tree", "budget": 8}).diff(spec)
        {'verifier': {'kind': 'tree', 'budget': 8}}
    """

    target: dict[str, Any] = field(default_factory=lambda: {"kind": "tiny", "seed": 0})
    dtype: str = "float32"
    device: str = "cpu"
    max_seq_len: int = 512
    weight_format: str = "bf16"
    drafter: dict[str, Any] = field(default_factory=lambda: {"kind": "ngram"})
    verifier: dict[str, Any] = field(default_factory=lambda: {"kind": "chain"})
    num_draft_tokens: int = 4
    scheduler: dict[str, Any] = field(default_factory=dict)
    graphs: bool = False
    regime: str = "c1"
    batch_size: int = 1
    version: int = SPEC_VERSION

    def __post_init__(self):
        object.__setattr__(self, "target", _section("target", self.target))
        object.__setattr__(self, "drafter", _section("drafter", self.drafter))
        object.__setattr__(self, "verifier", _section("verifier", self.verifier))
        if not isinstance(self.scheduler, Mapping):
            raise TypeError(f"scheduler: expected a mapping of PrefixScheduler arguments, got {type(self.scheduler).__name__}")
        object.__setattr__(self, "scheduler", _json_form("scheduler", self.scheduler))
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype: expected one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if not isinstance(self.device, str) or not self.device:
            raise TypeError(f"device: expected a device string like 'cpu' or 'cuda', got {self.device!r}")
        for name in ("max_seq_len", "num_draft_tokens", "batch_size", "version"):
            value = getattr(self, name)
            low = 0 if name == "num_draft_tokens" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}: expected an int >= {low}, got {value!r}")
        if self.version != SPEC_VERSION:
            raise ValueError(f"version: expected {SPEC_VERSION} (this specdec's spec schema), got {self.version}")
        if self.weight_format not in _WEIGHT_FORMATS:
            raise ValueError(f"weight_format: expected one of {_WEIGHT_FORMATS}, got {self.weight_format!r}")
        if not isinstance(self.graphs, bool):
            raise TypeError(f"graphs: expected a bool, got {type(self.graphs).__name__}")
        if self.regime not in _REGIMES:
            raise ValueError(f"regime: expected one of {_REGIMES}, got {self.regime!r}")
        if self.regime == "c1" and self.batch_size != 1:
            raise ValueError(f"batch_size: expected 1 in the 'c1' regime, got {self.batch_size}")

    @property
    def is_cuda(self) -> bool:
        """Whether the system runs on a CUDA device.

        Example:
            >>> SystemSpec().is_cuda, SystemSpec(device="cuda:0").is_cuda
            (False, True)
        """
        return self.device.startswith("cuda")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field.

        Example:
            >>> SystemSpec().to_dict()["version"]
            1
        """
        return dataclasses.asdict(self)

    def to_json(self, **kwargs: Any) -> str:
        """The spec as JSON (keys sorted, so equal specs give equal text)."""
        return json.dumps(self.to_dict(), sort_keys=True, **kwargs)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SystemSpec:
        """Read a spec back; unknown keys and other schema versions raise ``ValueError``.

        Example:
            >>> SystemSpec.from_dict({"num_draft_tokens": 6}).num_draft_tokens
            6
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"data: expected a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"data: unknown spec fields {unknown}; expected a subset of {sorted(known)}")
        return cls(**dict(data))

    @classmethod
    def from_json(cls, text: str) -> SystemSpec:
        """Inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))

    def with_changes(self, **changes: Any) -> SystemSpec:
        """A copy with ``changes`` applied (validated like a new spec).

        Example:
            >>> SystemSpec().with_changes(num_draft_tokens=8).num_draft_tokens
            8
        """
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"changes: unknown spec fields {unknown}; expected a subset of {sorted(known)}")
        return dataclasses.replace(self, **changes)

    def diff(self, base: SystemSpec) -> dict[str, Any]:
        """The fields whose value differs from ``base`` (this spec's values).

        Example:
            >>> SystemSpec(num_draft_tokens=6).diff(SystemSpec())
            {'num_draft_tokens': 6}
        """
        mine, theirs = self.to_dict(), base.to_dict()
        return {k: v for k, v in mine.items() if theirs.get(k) != v}

    def apply_diff(self, diff: Mapping[str, Any]) -> SystemSpec:
        """Apply a :meth:`diff` (or any field mapping) to this spec.

        Example:
            >>> a, b = SystemSpec(), SystemSpec(num_draft_tokens=7)
            >>> a.apply_diff(b.diff(a)) == b
            True
        """
        return self.with_changes(**dict(diff))

    @property
    def uses_drafter(self) -> bool:
        """``False`` for plain AR decoding (``drafter={"kind": "none"}``)."""
        return self.drafter["kind"] != "none"

    @property
    def architecture(self) -> str:
        """``"hybrid"`` for Gated DeltaNet targets (``model_type`` knob ``qwen3_5``/``qwen3_next``), else ``"dense"``."""
        return "hybrid" if self.target.get("model_type") in ("qwen3_5", "qwen3_next") else "dense"

    def autoregressive(self) -> SystemSpec:
        """The same target without a drafter: the AR baseline speedups are measured against.

        Example:
            >>> SystemSpec().autoregressive().uses_drafter
            False
        """
        return self.with_changes(drafter={"kind": "none"}, verifier={"kind": "chain"}, scheduler={})


@dataclass
class BuiltSystem:
    """What :func:`specdec.generate` runs for a spec: ``generate(target, prompts, drafter=..., verifier=..., **kwargs)``.

    Example:
        >>> system = build(SystemSpec(drafter={"kind": "ngram"}))
        >>> out = system.generate(torch.tensor([[1, 2, 3, 1, 2]]), max_new_tokens=8, seed=0)
        >>> out.tokens.shape
        torch.Size([1, 8])
    """

    spec: SystemSpec
    target: Any
    drafter: Any
    verifier: Any
    kwargs: dict[str, Any]

    def generate(self, prompts, max_new_tokens: int, **overrides: Any):
        """:func:`specdec.generate` on this system (``overrides`` win over :attr:`kwargs`)."""
        from specdec.decode import generate

        kwargs = {**self.kwargs, **overrides}
        verifier = self.verifier if self.drafter is not None else None  # plain AR: no rounds to verify
        return generate(self.target, prompts, max_new_tokens, drafter=self.drafter, verifier=verifier, **kwargs)


def _make(registry: Mapping[str, Callable], kind: str, argument: str, knobs: dict[str, Any], spec: SystemSpec, *target: Any):
    factory = resolve(registry, kind, argument)
    if kind in registry:
        return factory(knobs, *target, spec)
    try:
        return factory(*target, **knobs)
    except TypeError as err:
        raise TypeError(f"{argument}: {kind!r} does not take the knobs {sorted(knobs)}: {err}") from err


def build(spec: SystemSpec, *, target: Any = None) -> BuiltSystem:
    """Build the target, drafter and verifier a spec describes.

    Args:
        spec: the :class:`SystemSpec`.
        target: an already built target to reuse (its weights must be what ``spec`` describes); ``None``
            builds one.

    Returns:
        :class:`BuiltSystem` (``kwargs`` holds ``num_draft_tokens``).

    Example:
        >>> system = build(SystemSpec(verifier={"kind": "tree", "budget": 8}, drafter={"kind": "ngram", "max_paths": 2}))
        >>> type(system.verifier).__name__, system.kwargs
        ('TreeVerifier', {'num_draft_tokens': 4})
        >>> build(SystemSpec(verifier={"kind": "specdec.verify:ChainVerifier", "validate_proposals": False})).verifier.validate_proposals
        False
    """
    if not isinstance(spec, SystemSpec):
        raise TypeError(f"spec: expected a SystemSpec, got {type(spec).__name__}")
    if spec.graphs and not spec.is_cuda:
        raise ValueError(f"graphs: CUDA graphs need a CUDA device, got device={spec.device!r}")
    if target is None:
        knobs = {k: v for k, v in spec.target.items() if k != "kind"}
        target = _make(TARGETS, spec.target["kind"], "target", knobs, spec)
        if spec.weight_format == "w12" and spec.target["kind"] in ("tiny", "random"):
            from specdec.formats import convert

            convert(target)
    if spec.graphs and not target.uses_cuda_graphs:
        target.enable_cuda_graphs()
    drafter = None
    if spec.uses_drafter:
        knobs = {k: v for k, v in spec.drafter.items() if k != "kind"}
        drafter = _make(DRAFTERS, spec.drafter["kind"], "drafter", knobs, spec, target)
    elif spec.scheduler:
        raise ValueError(f"scheduler: a prefix scheduler needs a DSpark drafter, got drafter kind 'none' and {spec.scheduler}")
    if spec.scheduler and spec.drafter["kind"] != "dspark":
        raise ValueError(f"scheduler: a prefix scheduler needs drafter kind 'dspark', got {spec.drafter['kind']!r}")
    knobs = {k: v for k, v in spec.verifier.items() if k != "kind"}
    verifier = _make(VERIFIERS, spec.verifier["kind"], "verifier", knobs, spec)
    return BuiltSystem(
        spec=spec, target=target, drafter=drafter, verifier=verifier, kwargs={"num_draft_tokens": spec.num_draft_tokens}
    )


class TargetCache:
    """Built targets by the spec fields that decide their weights and graphs, so systems on the same weights share one.

    A spec with ``graphs=True`` gets its own target (capturing graphs changes it), shared by every such
    spec on the same weights: at most two copies of the weights, one plain and one with graphs.

    Example:
        >>> cache = TargetCache()
        >>> a = cache.get(SystemSpec(num_draft_tokens=2))
        >>> a is cache.get(SystemSpec(num_draft_tokens=8)), a is cache.get(SystemSpec(max_seq_len=1024))
        (True, False)
    """

    KEYS = ("target", "dtype", "device", "max_seq_len", "weight_format", "graphs")

    def __init__(self):
        self._targets: dict[str, Any] = {}

    @classmethod
    def key(cls, spec: SystemSpec) -> str:
        """The weights- and graphs-deciding fields of ``spec`` as text."""
        return json.dumps({k: getattr(spec, k) for k in cls.KEYS}, sort_keys=True)

    def put(self, spec: SystemSpec, target: Any) -> None:
        """Record ``target`` as the one built for ``spec``'s weights."""
        if spec.graphs != bool(getattr(target, "uses_cuda_graphs", False)):
            raise ValueError(
                f"target: expected a target {'with' if spec.graphs else 'without'} CUDA graphs for spec.graphs={spec.graphs}"
            )
        self._targets[self.key(spec)] = target

    def get(self, spec: SystemSpec) -> Any:
        """The target for ``spec``'s weights and graphs setting (built on first use)."""
        key = self.key(spec)
        if key not in self._targets:
            self._targets[key] = build(spec.autoregressive()).target
        return self._targets[key]

    def clear(self) -> None:
        """Drop every target (frees their memory once no system holds them)."""
        self._targets.clear()

    def build(self, spec: SystemSpec) -> BuiltSystem:
        """:func:`build` with the cached target."""
        return build(spec, target=self.get(spec))
