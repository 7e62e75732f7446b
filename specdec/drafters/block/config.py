"""What a block drafter checkpoint declares: its ``config.json`` parsed into :class:`BlockDrafterConfig`,
and the check that it fits a target."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "ARCHITECTURES",
    "DFLASH",
    "DFLASH2",
    "DSPARK",
    "HEAD_TYPES",
    "LAYER_TYPES",
    "MUSE_ASSISTANT",
    "BlockDrafterConfig",
    "check_fits_target",
    "read_drafter_config",
    "read_dspark_config",
]


DFLASH = "DFlashDraftModel"
DFLASH2 = "DFlash2DraftModel"
MUSE_ASSISTANT = "muse_glimmer_assistant"
DSPARK = "Qwen3DSparkModel"
ARCHITECTURES = (DFLASH, DFLASH2, MUSE_ASSISTANT, DSPARK)

# the sequential heads DeepSpec's ``markov_head_type`` names (read case-insensitively, as DeepSpec does)
HEAD_TYPES = ("vanilla", "gated", "rnn")
# the attention kinds of transformers' ``layer_types`` that a block drafter's layers take
LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclass(frozen=True)
class BlockDrafterConfig:
    """Shape and behaviour of a block drafter, read from its published ``config.json``.

    Attributes:
        architecture: one of ``DFlashDraftModel``, ``DFlash2DraftModel``, ``muse_glimmer_assistant``,
            ``Qwen3DSparkModel``.
        target_layer_ids: layer ids as the checkpoint spells them; the target hidden state used for id
            ``i`` is HF ``hidden_states[i + 1]`` (DSpark's ``-1`` is the embedding output).
        block_size: rows of one draft forward (anchor included).
        mask_token_id: the id embedded at the masked rows.
        layer_causal: per draft layer, causal inside the block (z-lab rule: an explicit ``is_causal``
            wins; otherwise sliding layers are causal and full layers are not; the transformers
            assistant and DSpark are never causal).
        sliding_window: per draft layer, the window (``None`` = full attention).
        output_multiplier, final_logit_softcapping, input_embedding_scale: logit / embedding scaling.
        conv_kernel_size, conv_group_size: DFlash2 convolution (0 = none).
        selector_rank, selector_top_k: DFlash2 candidate selector (0 = none).
        markov_rank, markov_head_type: DSpark sequential head (0 = none).
        confidence_head, confidence_head_with_markov: DSpark confidence head.

    Example:
        >>> cfg = BlockDrafterConfig(architecture="DFlashDraftModel", hidden_size=32, intermediate_size=64,
        ...     num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8, target_layer_ids=(0,), block_size=4,
        ...     mask_token_id=3, layer_causal=(False,), sliding_window=(None,))
        >>> cfg.hf_layer_ids
        (1,)
    """

    architecture: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    target_layer_ids: tuple[int, ...]
    block_size: int
    mask_token_id: int
    layer_causal: tuple[bool, ...]
    sliding_window: tuple[int | None, ...]
    vocab_size: int | None = None
    num_target_layers: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention_bias: bool = False
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None
    input_embedding_scale: float = 1.0
    conv_kernel_size: int = 0
    conv_group_size: int = 0
    selector_rank: int = 0
    selector_top_k: int = 0
    markov_rank: int = 0
    markov_head_type: str | None = None
    confidence_head: bool = False
    confidence_head_with_markov: bool = False
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def hf_layer_ids(self) -> tuple[int, ...]:
        """Indices into HF ``hidden_states`` (0 = embeddings): ``id + 1``."""
        return tuple(i + 1 for i in self.target_layer_ids)


def _need(raw: Mapping[str, Any], name: str, where: str = "config.json") -> Any:
    if name not in raw or raw[name] is None:
        raise ValueError(f"{name}: missing from {where} (expected a value, found none)")
    return raw[name]


def _rope_theta(raw: Mapping[str, Any], default: float) -> float:
    params = raw.get("rope_parameters") or {}
    if "rope_theta" in params:
        return float(params["rope_theta"])
    return float(raw.get("rope_theta", default))


def _architecture(raw: Mapping[str, Any]) -> str:
    if raw.get("model_type") == MUSE_ASSISTANT:
        return MUSE_ASSISTANT
    archs = raw.get("architectures") or []
    for arch in archs:
        if arch in ARCHITECTURES:
            return arch
    raise ValueError(
        f"architectures: expected one of {list(ARCHITECTURES[:2]) + [DSPARK]} (or model_type {MUSE_ASSISTANT!r}), "
        f"got architectures={list(archs)!r}, model_type={raw.get('model_type')!r}"
    )


def read_drafter_config(raw: Mapping[str, Any]) -> BlockDrafterConfig:
    """Parse a published drafter ``config.json`` (already loaded as a dict).

    DFlash / DFlash2 keep their drafting fields in ``dflash_config`` (top-level values are the
    fallback, as in the z-lab reference); the transformers assistant and DSpark keep them at the top
    level.

    Raises:
        ValueError: unknown architecture, or a missing field (the message names it).

    Example:
        >>> read_drafter_config({"architectures": ["Nope"]})
        Traceback (most recent call last):
        ...
        ValueError: architectures: expected one of ['DFlashDraftModel', 'DFlash2DraftModel', 'Qwen3DSparkModel'] (or model_type 'muse_glimmer_assistant'), got architectures=['Nope'], model_type=None
    """
    arch = _architecture(raw)
    nested = dict(raw.get("dflash_config") or {}) if arch in (DFLASH, DFLASH2) else {}

    def draft(name: str, default: Any = None) -> Any:
        return nested.get(name, raw.get(name, default))

    def draft_need(name: str) -> Any:
        value = draft(name)
        if value is None:
            where = "config.json (dflash_config or top level)" if arch in (DFLASH, DFLASH2) else "config.json"
            raise ValueError(f"{name}: missing from {where} (expected a value, found none)")
        return value

    hidden = int(_need(raw, "hidden_size"))
    heads = int(_need(raw, "num_attention_heads"))
    num_layers = int(_need(raw, "num_hidden_layers"))
    layer_types = list(raw.get("layer_types") or ["full_attention"] * num_layers)
    if len(layer_types) != num_layers:
        raise ValueError(f"layer_types: expected {num_layers} entries (num_hidden_layers), got {len(layer_types)}")
    unknown = [t for t in layer_types if t not in LAYER_TYPES]
    if unknown:
        raise ValueError(f"layer_types: expected entries of {list(LAYER_TYPES)}, got {unknown[0]!r}")
    window = raw.get("sliding_window")
    if "sliding_attention" in layer_types and (window is None or isinstance(window, bool) or int(window) < 1):
        raise ValueError(f"sliding_window: expected an int >= 1 for the sliding_attention layers, got {window!r}")
    windows = tuple(int(window) if (t == "sliding_attention" and window is not None) else None for t in layer_types)
    if arch in (DFLASH, DFLASH2):
        is_causal = raw.get("is_causal", None)
        causal = tuple((t == "sliding_attention") if is_causal is None else bool(is_causal) for t in layer_types)
    else:
        causal = (False,) * num_layers
    ids = draft_need("target_layer_ids")
    mask = draft("mask_token_id")
    if mask is None:
        raise ValueError("mask_token_id: missing from config.json; a block drafter needs the id it embeds at masked rows")
    softcap = draft("final_logit_softcapping")
    cfg = BlockDrafterConfig(
        architecture=arch,
        hidden_size=hidden,
        intermediate_size=int(_need(raw, "intermediate_size")),
        num_layers=num_layers,
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads", heads)),
        head_dim=int(raw.get("head_dim") or hidden // heads),
        target_layer_ids=tuple(int(i) for i in ids),
        block_size=int(draft_need("block_size")) if arch != MUSE_ASSISTANT else int(raw.get("block_size", 16)),
        mask_token_id=int(mask),
        layer_causal=causal,
        sliding_window=windows,
        vocab_size=None if raw.get("vocab_size") is None else int(raw["vocab_size"]),
        num_target_layers=None if raw.get("num_target_layers") is None else int(raw["num_target_layers"]),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=_rope_theta(raw, 500000.0 if arch == MUSE_ASSISTANT else 10000.0),
        attention_bias=bool(raw.get("attention_bias", False)),
        output_multiplier=float(draft("output_multiplier", 1.0)),
        final_logit_softcapping=None if softcap is None or float(softcap) <= 0 else float(softcap),
        input_embedding_scale=float(draft("input_embedding_scale", 1.0)),
        raw=dict(raw),
    )
    if arch == DFLASH2:
        cfg = replace(
            cfg,
            conv_kernel_size=int(draft_need("conv_kernel_size")),
            conv_group_size=int(draft_need("conv_group_size")),
            selector_rank=int(draft_need("selector_rank")),
            selector_top_k=int(draft_need("selector_top_k")),
        )
        for name in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
            if getattr(cfg, name) < 1:
                raise ValueError(f"{name}: expected an int >= 1 (DFlash2), got {getattr(cfg, name)}")
        if hidden % cfg.conv_group_size:
            raise ValueError(f"conv_group_size: expected a divisor of hidden_size {hidden}, got {cfg.conv_group_size}")
    if arch == DSPARK:
        rank = int(_need(raw, "markov_rank"))
        head_type = raw.get("markov_head_type") if rank > 0 else None
        # DeepSpec reads the head type case-insensitively; the gated / RNN variants add tensors (build_dspark_model in heads.py)
        if isinstance(head_type, str):
            head_type = head_type.lower()
        if rank > 0 and head_type not in ("vanilla", "gated", "rnn"):
            raise ValueError(
                f"markov_head_type: expected one of ['vanilla', 'gated', 'rnn'], got {raw.get('markov_head_type')!r}"
            )
        if rank < 0:
            raise ValueError(f"markov_rank: expected an int >= 0 (0: no sequential head), got {rank}")
        conf = bool(_need(raw, "enable_confidence_head"))
        with_markov = bool(_need(raw, "confidence_head_with_markov")) if conf else False
        if with_markov and rank == 0:
            raise ValueError(
                "confidence_head_with_markov: expected false when markov_rank is 0 (the confidence head would read "
                "the sequential head's features, and there is none), got true"
            )
        cfg = replace(
            cfg,
            markov_rank=rank,
            markov_head_type=head_type,
            confidence_head=conf,
            confidence_head_with_markov=with_markov,
        )
    return cfg


def check_fits_target(cfg: BlockDrafterConfig, target) -> None:
    """Raise ``ValueError`` naming the config field when a checkpoint does not fit ``target``."""
    tcfg = target.config
    if cfg.hidden_size != tcfg.hidden_size:
        raise ValueError(
            f"hidden_size: the drafter's fc reads len(target_layer_ids) x hidden_size = "
            f"{len(cfg.target_layer_ids)} x {cfg.hidden_size} features, but the target's hidden size is {tcfg.hidden_size}"
        )
    if cfg.vocab_size is not None and cfg.vocab_size != tcfg.vocab_size:
        raise ValueError(f"vocab_size: checkpoint has {cfg.vocab_size}, the target has {tcfg.vocab_size}")
    if not cfg.target_layer_ids:
        raise ValueError("target_layer_ids: expected at least one layer id, got []")
    for i in cfg.target_layer_ids:
        if not -1 <= i < tcfg.num_layers:
            raise ValueError(
                f"target_layer_ids: id {i} does not exist in a target of {tcfg.num_layers} layers "
                f"(expected ids in [-1, {tcfg.num_layers - 1}], got {list(cfg.target_layer_ids)})"
            )
    if cfg.num_target_layers is not None and cfg.num_target_layers != tcfg.num_layers:
        raise ValueError(
            f"num_target_layers: checkpoint was trained on a {cfg.num_target_layers}-layer target, this one has {tcfg.num_layers}"
        )
    if not 0 <= cfg.mask_token_id < tcfg.vocab_size:
        raise ValueError(
            f"mask_token_id: expected an id in [0, {tcfg.vocab_size}) (the target's vocabulary), got {cfg.mask_token_id}"
        )
    if cfg.block_size < 2:
        raise ValueError(f"block_size: expected >= 2, got {cfg.block_size}")
    if cfg.selector_top_k > tcfg.vocab_size:
        raise ValueError(f"selector_top_k: expected <= vocab size {tcfg.vocab_size}, got {cfg.selector_top_k}")


def _head_type(raw: Mapping[str, Any]) -> str | None:
    rank = raw.get("markov_rank")
    if rank is None or int(rank) <= 0:
        return None
    value = raw.get("markov_head_type")
    if value is None:
        raise ValueError(f"markov_head_type: missing from config.json (expected one of {list(HEAD_TYPES)} when markov_rank > 0)")
    head = str(value).lower()
    if head not in HEAD_TYPES:
        raise ValueError(f"markov_head_type: expected one of {list(HEAD_TYPES)}, got {value!r}")
    return head


def read_dspark_config(raw: Mapping[str, Any]) -> BlockDrafterConfig:
    """Parse a DeepSpec ``Qwen3DSparkModel`` ``config.json`` (as a dict), all three head types included.

    The backbone fields go through :func:`read_drafter_config`; the head type
    is read here, so ``gated`` and ``rnn`` checkpoints parse too.

    Raises:
        ValueError: not a DSpark config (``architectures``), an unknown ``markov_head_type``, or any
            field ``read_drafter_config`` rejects; the message names the field.

    Example:
        >>> from specdec.drafters.block.fixtures import fixture_config
        >>> from specdec.testing import tiny_target
        >>> read_dspark_config(fixture_config("Qwen3DSparkModel", tiny_target(seed=0), markov_head_type="rnn")).markov_head_type
        'rnn'
    """
    head = _head_type(raw)
    # the backbone parser knows only the vanilla head; the variants add tensors, not backbone fields
    shim = dict(raw)
    if head is not None:
        shim["markov_head_type"] = "vanilla"
    cfg = read_drafter_config(shim)
    if cfg.architecture != DSPARK:
        raise ValueError(f"architectures: expected [{DSPARK!r}], got {list(raw.get('architectures') or [])!r}")
    return replace(cfg, markov_head_type=head, raw=dict(raw))
