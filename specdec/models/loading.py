"""Build a :class:`DenseTarget` from an HF model, a local HF checkpoint folder, or a ``.gguf`` file."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from specdec.models.base import default_device
from specdec.models.config import DENSE_MODEL_TYPES, HYBRID_MODEL_TYPES, SUPPORTED_MODEL_TYPES, TargetConfig
from specdec.models.dense import DenseTarget, load_weights
from specdec.models.hf_names import embedding_and_head, tensor_reader

logger = logging.getLogger("specdec")

_WEIGHT_FORMATS = ("bf16", "w12")


def _hf_to_runtime(cfg: TargetConfig, hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map HF tensor names (``model.layers.{i}.self_attn.q_proj.weight`` ...) to the runtime's names."""

    take = tensor_reader(hf_state)
    state = embedding_and_head(cfg.tie_word_embeddings, take)
    for i in range(cfg.num_layers):
        hf, ours = f"model.layers.{i}.", f"layers.{i}."
        attn = hf + "self_attn."
        state[ours + "attn_norm.weight"] = take(hf + "input_layernorm.weight")
        state[ours + "mlp_norm.weight"] = take(hf + "post_attention_layernorm.weight")
        state[ours + "attn.wqkv.weight"] = torch.cat([take(attn + f"{p}_proj.weight") for p in "qkv"])
        if cfg.attention_bias:
            state[ours + "attn.wqkv.bias"] = torch.cat([take(attn + f"{p}_proj.bias") for p in "qkv"])
        state[ours + "attn.wo.weight"] = take(attn + "o_proj.weight")
        if cfg.o_proj_bias:
            state[ours + "attn.wo.bias"] = take(attn + "o_proj.bias")
        if cfg.qk_norm:
            state[ours + "attn.q_norm.weight"] = take(attn + "q_norm.weight")
            state[ours + "attn.k_norm.weight"] = take(attn + "k_norm.weight")
        mlp = hf + "mlp."
        state[ours + "mlp.w13.weight"] = torch.cat([take(mlp + "gate_proj.weight"), take(mlp + "up_proj.weight")])
        state[ours + "mlp.w2.weight"] = take(mlp + "down_proj.weight")
        if cfg.mlp_bias:
            state[ours + "mlp.w13.bias"] = torch.cat([take(mlp + "gate_proj.bias"), take(mlp + "up_proj.bias")])
            state[ours + "mlp.w2.bias"] = take(mlp + "down_proj.bias")
    take.check_all_taken()
    return state


def build_target(
    cfg: TargetConfig,
    hf_state: Mapping[str, torch.Tensor],
    *,
    hf_config: Any = None,
    dtype: torch.dtype,
    device: torch.device | str,
    max_seq_len: int,
) -> DenseTarget:
    """Allocate a :class:`DenseTarget` and copy HF-named weights into it (converted to ``dtype``).

    Example:
        >>> from specdec.testing import tiny_hf_model
        >>> hf, ids = tiny_hf_model("qwen3", seed=0), torch.tensor([[1, 2, 3]])
        >>> cfg = TargetConfig.from_hf(hf.config)
        >>> target = build_target(cfg, hf.state_dict(), dtype=torch.float32, device="cpu", max_seq_len=64)
        >>> torch.allclose(target(ids).logits, hf(ids).logits, atol=1e-4)
        True
    """
    target = empty_target(cfg, hf_config=hf_config, dtype=dtype, device=device, max_seq_len=max_seq_len)
    load_weights(target, _hf_to_runtime(cfg, hf_state), tied=cfg.tie_word_embeddings)
    return target


def empty_target(cfg: TargetConfig, *, hf_config: Any = None, dtype: torch.dtype, device, max_seq_len: int) -> DenseTarget:
    """A :class:`DenseTarget` whose weights are allocated on ``device`` but not initialised (no fp32 detour).

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = empty_target(tiny_target(seed=0).config, dtype=torch.float32, device="cpu", max_seq_len=64)
        >>> target.embed.weight.shape, target.length, target.max_seq_len
        (torch.Size([97, 32]), 0, 64)
    """
    inv_freq, scaling = cfg.rope_inv_freq(hf_config)
    target = DenseTarget(cfg, max_seq_len=max_seq_len, inv_freq=inv_freq, attention_scaling=scaling, dtype=dtype, device="meta")
    target = target.to_empty(device=device)
    if cfg.tie_word_embeddings:
        target.lm_head.weight = target.embed.weight
    target.register_buffer("inv_freq", inv_freq.float().to(device), persistent=False)
    target.reset()
    target._allocate_cache()
    return target.eval().requires_grad_(False)


def random_target(
    cfg: TargetConfig,
    *,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str | None = None,
    max_seq_len: int = 4096,
    seed: int = 0,
) -> DenseTarget:
    """A target with random weights at a real model's shape, for timing and exactness work.

    Weights are ``N(0, 1 / fan_in)`` (embeddings ``N(0, 1)``, norms 1), so activations keep their scale
    through the depth and the logits are not flat. ``device=None``: CUDA when available, else the CPU.

    Example:
        >>> from specdec.testing import tiny_target
        >>> small = random_target(tiny_target(seed=0).config, dtype=torch.float32, device="cpu", max_seq_len=64)
        >>> small(torch.tensor([[1, 2]])).logits.shape
        torch.Size([1, 2, 97])
        >>> from specdec.models.shapes import QWEN3_8B
        >>> target = random_target(QWEN3_8B)    # 16 GB of bf16 weights, on the GPU when there is one  # doctest: +SKIP
    """
    device = default_device() if device is None else device
    target = empty_target(cfg, dtype=dtype, device=device, max_seq_len=max_seq_len)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in target.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith("bias"):
                param.zero_()
            elif name == "embed.weight":
                param.normal_(0.0, 1.0, generator=gen)
            else:
                param.normal_(0.0, param.shape[-1] ** -0.5, generator=gen)
    return target


def read_safetensors(folder: Path, *, argument: str = "model_or_path") -> dict[str, torch.Tensor]:
    """Every tensor of the ``*.safetensors`` files in ``folder`` (errors name ``argument``)."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise ValueError(f"{argument}: no *.safetensors files in {str(folder)!r}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state


def gguf_architectures() -> tuple[str, ...]:
    """GGUF ``general.architecture`` values that :func:`load_target` accepts.

    transformers' own list of GGUF architectures (``GGUF_SUPPORTED_ARCHITECTURES``) intersected with
    the dense families of the runtime (:data:`~specdec.models.config.DENSE_MODEL_TYPES`; transformers
    reads no Gated DeltaNet hybrid from GGUF).

    Example:
        >>> gguf_architectures()
        ('llama', 'qwen2', 'qwen3')
    """
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return tuple(arch for arch in DENSE_MODEL_TYPES if arch in GGUF_SUPPORTED_ARCHITECTURES)


def read_gguf_architecture(path: str | os.PathLike) -> str:
    """The ``general.architecture`` field of a GGUF file (``"llama"``, ``"qwen3"``, ...), read with ``gguf``.

    Example:
        >>> read_gguf_architecture("SmolLM2-135M-Instruct.Q4_1.gguf")  # needs that GGUF file on disk  # doctest: +SKIP
        'llama'
    """
    try:
        from gguf import GGUFReader
    except ImportError as err:
        raise ImportError("model_or_path: reading a .gguf file needs the 'gguf' package (pip install gguf)") from err
    try:
        field = GGUFReader(str(path)).fields.get("general.architecture")
    except (ValueError, OSError) as err:
        raise ValueError(f"model_or_path: {str(path)!r} is not a readable GGUF file: {err}") from err
    if field is None:
        raise ValueError(f"model_or_path: {str(path)!r} has no general.architecture field")
    return str(field.contents())


def _gguf_to_hf(path: Path, progress: bool) -> Any:
    from transformers import AutoModelForCausalLM

    architecture = read_gguf_architecture(path)
    supported = gguf_architectures()
    if architecture not in supported:
        raise ValueError(
            f"model_or_path: {path.name} holds GGUF architecture {architecture!r}; expected one of {supported} "
            "(transformers' GGUF architectures that the runtime supports)"
        )
    if progress:
        print(f"[specdec] dequantising {path.name} with transformers + gguf (one-off, ~20 s)", flush=True)
    return AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)


def _choose_device_and_dtype(
    model_device: torch.device | None, device, dtype, weight_format: str
) -> tuple[torch.device, torch.dtype]:
    """Fills ``device`` / ``dtype`` left as None and logs the choice; explicit values are kept."""
    if device is None:
        if model_device is not None and model_device.type != "meta":
            device, why = model_device, "the model's device"
        else:
            device = default_device()
            why = "CUDA is available" if device.type == "cuda" else "no CUDA device"
        logger.info("load_target: device=%s (%s)", device, why)
    device = torch.device(device)
    if dtype is None:
        if weight_format == "w12":
            dtype, why = torch.bfloat16, "weight_format 'w12' stores bf16 weights"
        elif device.type == "cuda":
            dtype, why = torch.bfloat16, "default on CUDA"
        else:
            dtype, why = torch.float32, f"default on {device.type}"
        logger.info("load_target: dtype=%s (%s)", dtype, why)
    return device, dtype


def load_target(
    model_or_path: Any,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    max_seq_len: int = 4096,
    weight_format: str = "bf16",
    progress: bool = True,
    state_slots: int | None = None,
    gdn_method: str | None = None,
) -> DenseTarget:
    """Load a dense decoder (or a Gated DeltaNet hybrid) into the lean runtime.

    Args:
        model_or_path: an HF ``PreTrainedModel`` (Llama / Qwen2 / Qwen3 families, or the Qwen3.5 /
            Qwen3-Next Gated DeltaNet hybrids, which load as a ``HybridTarget``), a local HF
            checkpoint folder (``config.json`` + ``*.safetensors``), or a ``.gguf`` file.
        dtype: compute and weight dtype (``torch.float32`` for exactness tests). None chooses
            bf16 on CUDA, float32 elsewhere (bf16 for ``weight_format="w12"``).
        device: where the weights and cache live. None chooses the HF model's device when given a
            model object, else CUDA when available, else the CPU. Choices are logged (logger
            ``"specdec"``, INFO).
        max_seq_len: KV cache capacity in tokens.
        weight_format: ``"bf16"`` (plain weights in ``dtype``) or ``"w12"`` (lossless 12-bit).
        progress: show a progress bar while a GGUF file is read and converted.
        state_slots, gdn_method: a Gated DeltaNet hybrid's :class:`~specdec.models.HybridTarget` options (None: its
            defaults, 8 and ``"auto"``): the recurrent-state slots bound how far back a hybrid can roll back (a drafter
            over a hybrid model needs more than its draft tokens); refused for a dense model, which has neither.

    Returns:
        a :class:`specdec.models.DenseTarget` with an empty cache.

    Example:
        >>> import tempfile
        >>> import specdec as sd
        >>> from specdec.testing import tiny_hf_model
        >>> hf = tiny_hf_model("qwen3", seed=0)
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = save_hf_checkpoint(hf, folder)
        ...     target = sd.load_target(folder, dtype=torch.float32, device="cpu", progress=False)
        >>> type(target).__name__, target.config.model_type, target.vocab_size
        ('DenseTarget', 'qwen3', 97)
        >>> sd.load_target(hf, progress=False).device        # a model object: its own device (dtype float32 off CUDA)
        device(type='cpu')
    """
    if weight_format not in _WEIGHT_FORMATS:
        raise ValueError(f"weight_format: expected one of {_WEIGHT_FORMATS}, got {weight_format!r}")
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype: expected a floating torch.dtype or None, got {dtype!r}")
    if device is not None and not isinstance(device, (str, torch.device)):
        raise TypeError(f"device: expected a torch.device, a str or None, got {type(device).__name__}")
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 2:
        raise ValueError(f"max_seq_len: expected an int >= 2, got {max_seq_len!r}")
    if weight_format == "w12" and dtype is not None and dtype != torch.bfloat16:
        raise ValueError(f"dtype: weight_format 'w12' stores bf16 weights exactly, expected torch.bfloat16, got {dtype}")
    hybrid_options = {k: v for k, v in (("state_slots", state_slots), ("gdn_method", gdn_method)) if v is not None}

    hf_model = None
    if isinstance(model_or_path, (str, os.PathLike)):
        path = Path(model_or_path)
        if path.is_file() and path.suffix == ".gguf":
            hf_model = _gguf_to_hf(path, progress)
        elif path.is_dir():
            from transformers import AutoConfig

            if not (path / "config.json").exists():
                raise ValueError(f"model_or_path: {str(path)!r} has no config.json")
            hf_config = AutoConfig.from_pretrained(str(path))
            device, dtype = _choose_device_and_dtype(None, device, dtype, weight_format)
            if getattr(hf_config, "model_type", None) in HYBRID_MODEL_TYPES:
                return _load_hybrid(hf_config, read_safetensors(path), dtype, device, max_seq_len, weight_format, hybrid_options)
            _refuse_hybrid_options(hybrid_options, hf_config)
            cfg = TargetConfig.from_hf(hf_config)
            target = build_target(
                cfg, read_safetensors(path), hf_config=hf_config, dtype=dtype, device=device, max_seq_len=max_seq_len
            )
            return _apply_weight_format(target, weight_format)
        else:
            raise ValueError(f"model_or_path: expected an HF checkpoint folder or a .gguf file, got {str(path)!r}")
    else:
        hf_model = model_or_path
    if not hasattr(hf_model, "config") or not hasattr(hf_model, "state_dict"):
        raise TypeError(f"model_or_path: expected a PreTrainedModel, a folder or a .gguf path, got {type(hf_model).__name__}")
    model_type = getattr(hf_model.config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model_or_path: model_type {model_type!r} is not supported; expected one of {SUPPORTED_MODEL_TYPES}")
    state = {k: v.detach() for k, v in hf_model.state_dict().items()}
    # A model that the GGUF path dequantised sits on the CPU only because transformers put it there.
    given_model = not isinstance(model_or_path, (str, os.PathLike))
    model_device = next(iter(state.values())).device if given_model and state else None
    device, dtype = _choose_device_and_dtype(model_device, device, dtype, weight_format)
    if model_type in HYBRID_MODEL_TYPES:
        return _load_hybrid(hf_model.config, state, dtype, device, max_seq_len, weight_format, hybrid_options)
    _refuse_hybrid_options(hybrid_options, hf_model.config)
    cfg = TargetConfig.from_hf(hf_model.config)
    target = build_target(cfg, state, hf_config=hf_model.config, dtype=dtype, device=device, max_seq_len=max_seq_len)
    return _apply_weight_format(target, weight_format)


def _load_hybrid(hf_config, state, dtype, device, max_seq_len, weight_format, options):
    """Gated DeltaNet hybrids (Qwen3.5 text, Qwen3-Next) go to :class:`~specdec.models.hybrid.HybridTarget`."""
    from specdec.models.hybrid import HybridConfig, build_hybrid_target

    if weight_format != "bf16":
        raise ValueError(f"weight_format: hybrid targets support only 'bf16' (plain weights), got {weight_format!r}")
    cfg = HybridConfig.from_hf(hf_config)
    return build_hybrid_target(cfg, state, hf_config=hf_config, dtype=dtype, device=device, max_seq_len=max_seq_len, **options)


def _refuse_hybrid_options(options: dict, hf_config) -> None:
    if options:
        raise ValueError(
            f"{', '.join(options)}: options of a Gated DeltaNet hybrid target, but model_type "
            f"{getattr(hf_config, 'model_type', None)!r} loads as a dense one"
        )


def _apply_weight_format(target: DenseTarget, weight_format: str) -> DenseTarget:
    if weight_format == "w12":
        from specdec.formats import convert

        convert(target)
    return target


def save_hf_checkpoint(hf_model: Any, folder: str | os.PathLike, *, dtype: torch.dtype = torch.float32) -> Path:
    """Write an HF model's config and weights as a plain safetensors checkpoint folder.

    Used to cache a dequantised GGUF so later loads take a second instead of a conversion.

    Example:
        >>> import tempfile
        >>> from specdec.testing import tiny_hf_model
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     sorted(p.name for p in save_hf_checkpoint(tiny_hf_model("qwen3", seed=0), tmp).iterdir())
        ['config.json', 'model.safetensors']
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype).contiguous() for k, v in hf_model.state_dict().items()}
    if getattr(hf_model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    tmp = folder / "model.safetensors.tmp"
    save_file(state, str(tmp))
    config = hf_model.config.to_dict()
    config.pop("quantization_config", None)
    (folder / "config.json").write_text(json.dumps(config, indent=2, default=str))
    tmp.rename(folder / "model.safetensors")
    return folder
