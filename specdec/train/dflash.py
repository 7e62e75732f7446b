"""Train a DFlash block drafter for a frozen target on the target's own continuations.

The recipe (DFlash, arXiv 2602.06036; the DSpark paper uses the same data pipeline):

1. **Data**: the target continues every prompt (:func:`specdec.generate`), so the labels are the
   target's own tokens; one extra target forward over each full sequence gives the hidden states at
   ``target_layer_ids`` (HF ``hidden_states[id + 1]``), the drafter's context features. The target is
   frozen, so the features are computed once.
2. **Blocks**: every step draws random anchor positions per sequence (``torch.Generator``). The block
   of anchor ``p`` is ``[x_p, MASK, ..., MASK]`` at positions ``p .. p + B - 1``; it sees the context
   features of rows ``0 .. p - 1`` (exactly what the drafter's cache holds at inference) and itself.
   All anchors of a sequence run in one attention call: the context K/V are computed once and a mask
   keeps each block to its own prefix and its own rows.
3. **Loss**: cross-entropy of row ``k`` (``1 <= k < B``) against ``x_{p + k}``, weighted by
   ``exp(-(k - 1) / loss_decay_gamma)`` -- an early miss ends the accepted prefix, so early rows
   matter most. Rows past the end of the sequence are left out.
4. **Frozen, shared tables**: the target's embedding and ``lm_head`` are used as they are and get no
   gradient; only the drafter's own parameters (``fc``, ``hidden_norm``, the layers, ``norm``) train.

The result is a :class:`~specdec.drafters.block.backbone.BlockDraftModel` of architecture
``DFlashDraftModel``; :func:`save` writes it in the z-lab checkpoint format, which
:meth:`DFlashDrafter.from_pretrained` and :func:`load_drafter` read.

Example:
    >>> from specdec.testing import tiny_target
    >>> target = tiny_target(seed=0)
    >>> prompts = torch.randint(0, 97, (8, 6), generator=torch.Generator().manual_seed(0))
    >>> model, history = train_drafter(target, prompts, TrainingConfig(steps=5), progress=False)
    >>> len(history.loss)
    5
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from specdec.decode import generate
from specdec.drafters.block.backbone import BlockDraftModel, layer_visibility, rotate_half
from specdec.drafters.block.checkpoint import export_state_dict
from specdec.drafters.block.config import DFLASH, check_fits_target, read_drafter_config
from specdec.drafters.block.dflash import DFlashDrafter

__all__ = [
    "TrainingConfig",
    "TrainingData",
    "TrainingHistory",
    "block_logits",
    "default_target_layer_ids",
    "drafter_config",
    "init_drafter",
    "make_training_data",
    "make_training_data_hf",
    "plot_history",
    "save",
    "tokens_per_target_pass",
    "train_drafter",
]


@dataclass(frozen=True)
class TrainingConfig:
    """Drafter shape, data and optimisation settings.

    Attributes:
        num_layers: draft decoder layers.
        block_size: rows of one draft forward (anchor included; ``block_size - 1`` drafts).
        target_layer_ids: target layers whose outputs are the context features (checkpoint
            numbering: id ``i`` is HF ``hidden_states[i + 1]``); ``None`` = :func:`default_target_layer_ids`.
        mask_token_id: id embedded at the masked rows; ``None`` = ``vocab_size - 1``.
        num_heads, num_kv_heads, head_dim, intermediate_size: draft layer shape; ``None`` = the
            target's heads / head_dim and ``2 * hidden_size``.
        continuation_tokens: tokens the target generates per prompt (the labels).
        data_temperature: temperature of those continuations (0 = greedy, what greedy serving sees).
        num_anchors: random anchors per sequence per step.
        batch_size: sequences per step.
        steps: optimiser steps.
        lr: AdamW peak learning rate (linear warm-up over ``warmup_steps``, cosine decay to 10 %).
        weight_decay: AdamW weight decay.
        warmup_steps: warm-up length.
        grad_clip: global gradient-norm clip (``None`` = off).
        loss_decay_gamma: position weight ``exp(-(k - 1) / gamma)`` of block row ``k``; ``None`` = flat.
        init_scale: initial weights ``N(0, init_scale / fan_in)``.
        seed: seeds data generation, initialisation and anchor draws.
        max_seconds: wall-clock budget of the optimisation loop; training stops at ``steps`` or at
            this budget, whichever comes first, and the learning-rate decay follows the nearer one
            (``None`` = steps only, fully deterministic).

    Example:
        >>> TrainingConfig(block_size=1)
        Traceback (most recent call last):
        ...
        ValueError: block_size: expected an int >= 2 (anchor + at least one draft row), got 1
    """

    num_layers: int = 1
    block_size: int = 8
    target_layer_ids: tuple[int, ...] | None = None
    mask_token_id: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None
    continuation_tokens: int = 64
    data_temperature: float = 0.0
    num_anchors: int = 16
    batch_size: int = 4
    steps: int = 200
    lr: float = 3e-3
    weight_decay: float = 0.0
    warmup_steps: int = 10
    grad_clip: float | None = 1.0
    loss_decay_gamma: float | None = 4.0
    init_scale: float = 1.0
    seed: int = 0
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        def positive_int(name: str, minimum: int = 1, why: str = "") -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name}: expected an int >= {minimum}{why}, got {value!r}")

        positive_int("num_layers")
        positive_int("block_size", 2, " (anchor + at least one draft row)")
        positive_int("continuation_tokens")
        positive_int("num_anchors")
        positive_int("batch_size")
        positive_int("steps")
        positive_int("warmup_steps", 0)
        for name in ("num_heads", "num_kv_heads", "head_dim", "intermediate_size"):
            if getattr(self, name) is not None:
                positive_int(name)
        if self.head_dim is not None and self.head_dim % 2:
            raise ValueError(f"head_dim: expected an even int (RoPE rotates pairs), got {self.head_dim}")
        if self.num_heads is not None and self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: expected a divisor of num_heads {self.num_heads}, got {self.num_kv_heads}")
        if self.target_layer_ids is not None:
            ids = self.target_layer_ids
            if not isinstance(ids, tuple) or not ids or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
                raise ValueError(f"target_layer_ids: expected a non-empty tuple of ints or None, got {ids!r}")
        if self.mask_token_id is not None and (
            isinstance(self.mask_token_id, bool) or not isinstance(self.mask_token_id, int) or self.mask_token_id < 0
        ):
            raise ValueError(f"mask_token_id: expected an int >= 0 or None, got {self.mask_token_id!r}")
        for name in ("lr", "init_scale"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
        for name in ("weight_decay", "data_temperature"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        for name in ("grad_clip", "loss_decay_gamma", "max_seconds"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0
            ):
                raise ValueError(f"{name}: expected a finite number > 0 or None, got {value!r}")

    def position_weights(self) -> torch.Tensor:
        """``[block_size - 1]`` loss weights of block rows ``1 .. B - 1``.

        Example:
            >>> TrainingConfig(block_size=3, loss_decay_gamma=1.0).position_weights()
            tensor([1.0000, 0.3679])
        """
        k = torch.arange(self.block_size - 1, dtype=torch.float32)
        if self.loss_decay_gamma is None:
            return torch.ones_like(k)
        return torch.exp(-k / self.loss_decay_gamma)


@dataclass
class TrainingHistory:
    """Per-step records of :func:`train_drafter`.

    Attributes:
        loss: weighted block cross-entropy per step.
        accuracy: weighted share of block rows whose argmax equals the target's token, per step.
        lr: learning rate per step.
        position_accuracy: per block row (``1 .. B - 1``), the accuracy over the last 10 % of steps
            (over the last step when a time budget ended training earlier).
        seconds: wall-clock time since the first step, after each step.

    Example:
        >>> history = TrainingHistory(loss=[2.5, 1.75], accuracy=[0.1, 0.25])
        >>> len(history.loss), history.loss[-1], history.position_accuracy
        (2, 1.75, [])
    """

    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    position_accuracy: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


@dataclass
class TrainingData:
    """Token sequences and their context features.

    Attributes:
        tokens: per sequence ``[L]`` int64 (prompt + the target's continuation).
        features: per sequence ``[L, taps * H]``, the target's hidden states at the tap layers.
        prompt_lengths: per sequence, where the continuation starts.

    :func:`make_training_data` builds it from a target.

    Example:
        >>> data = TrainingData(tokens=[torch.arange(6)], features=[torch.zeros(6, 64)], prompt_lengths=[4])
        >>> data.tokens[0].shape, data.features[0].shape     # [L], [L, taps * H]
        (torch.Size([6]), torch.Size([6, 64]))
    """

    tokens: list[torch.Tensor]
    features: list[torch.Tensor]
    prompt_lengths: list[int]


def default_target_layer_ids(num_target_layers: int, num_taps: int) -> tuple[int, ...]:
    """Tap layers when none are given: the z-lab rule, ``num_taps`` ids spread over ``1 .. L - 3``.

    One tap takes the middle layer. Targets too shallow for the rule (``L - 3 <= 1``) use their last
    ``min(num_taps, L)`` layers.

    Example:
        >>> default_target_layer_ids(36, 5), default_target_layer_ids(2, 3)
        ((1, 9, 17, 25, 33), (0, 1))
    """
    if num_taps == 1:
        return (num_target_layers // 2,)
    start, end = 1, num_target_layers - 3
    if end - start < num_taps - 1:
        n = min(num_taps, num_target_layers)
        return tuple(range(num_target_layers - n, num_target_layers))
    span = end - start
    return tuple(int(round(start + i * span / (num_taps - 1))) for i in range(num_taps))


def backbone_config(target, config) -> tuple[dict, tuple[int, ...]]:
    """The Qwen3-style backbone fields of a drafter ``config.json`` and its tap layers.

    Shared by the DFlash and DSpark trainers: ``config`` needs ``num_layers``, ``target_layer_ids``,
    ``num_heads``, ``num_kv_heads``, ``head_dim`` and ``intermediate_size`` (``None`` = the target's
    heads / head_dim and ``2 * hidden_size``). The caller adds ``architectures`` and its own fields.
    """
    tcfg = target.config
    ids = config.target_layer_ids
    if ids is None:
        ids = default_target_layer_ids(tcfg.num_layers, min(max(config.num_layers, 2), tcfg.num_layers))
    heads = config.num_heads or tcfg.num_heads
    kv = config.num_kv_heads or (tcfg.num_kv_heads if heads % tcfg.num_kv_heads == 0 else heads)
    if heads % kv:
        raise ValueError(f"num_kv_heads: expected a divisor of num_heads {heads}, got {kv}")
    raw = {
        "model_type": "qwen3",
        "hidden_size": tcfg.hidden_size,
        "intermediate_size": config.intermediate_size or 2 * tcfg.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": config.head_dim or tcfg.head_dim,
        "rms_norm_eps": 1e-6,
        "vocab_size": tcfg.vocab_size,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "max_position_embeddings": target.max_seq_len,
        "tie_word_embeddings": False,
        "layer_types": ["full_attention"] * config.num_layers,
        "sliding_window": None,
        "num_target_layers": tcfg.num_layers,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    }
    return raw, tuple(ids)


def drafter_config(target, config: TrainingConfig) -> dict:
    """The ``config.json`` (z-lab ``DFlashDraftModel`` format) of the drafter ``config`` describes.

    Example:
        >>> from specdec.testing import tiny_target
        >>> drafter_config(tiny_target(seed=0), TrainingConfig(block_size=4))["dflash_config"]
        {'block_size': 4, 'mask_token_id': 96, 'target_layer_ids': [0, 1]}
    """
    raw, ids = backbone_config(target, config)
    mask = target.config.vocab_size - 1 if config.mask_token_id is None else config.mask_token_id
    raw.update(
        architectures=[DFLASH],
        use_sliding_window=False,
        dflash_config={"block_size": config.block_size, "mask_token_id": mask, "target_layer_ids": list(ids)},
    )
    # the same checks a published checkpoint gets when it is loaded, before any work is done
    check_fits_target(read_drafter_config(raw), target)
    return raw


def init_drafter(target, config: TrainingConfig) -> BlockDraftModel:
    """The untrained drafter of ``config`` for ``target``: ``N(0, init_scale / fan_in)`` weights, unit norms.

    Returns:
        a ``DFlashDraftModel`` :class:`BlockDraftModel` on the target's device, in its dtype
        (``fc`` maps context features ``[.., taps * H]`` to ``[.., H]``).

    Example:
        >>> from specdec.testing import tiny_target
        >>> model = init_drafter(tiny_target(seed=0), TrainingConfig(block_size=4))
        >>> model.cfg.architecture, model.cfg.block_size, model.cfg.target_layer_ids
        ('DFlashDraftModel', 4, (0, 1))
        >>> model.fc.weight.shape     # [H, taps * H]
        torch.Size([32, 64])
    """
    raw = drafter_config(target, config)
    cfg = read_drafter_config(raw)
    model = BlockDraftModel(cfg, target.config.vocab_size)
    gen = torch.Generator().manual_seed(config.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (config.init_scale / p.shape[-1]) ** 0.5)
    return model.to(device=target.device, dtype=target.dtype)


def _prompt_list(prompts, vocab: int) -> list[torch.Tensor]:
    if isinstance(prompts, torch.Tensor):
        if prompts.ndim == 1:
            prompts = [prompts]
        elif prompts.ndim == 2:
            prompts = list(prompts)
        else:
            raise ValueError(f"prompts: expected [N, T] or a list of 1-D tensors, got shape {tuple(prompts.shape)}")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts: expected at least one prompt, got none")
    out = []
    for i, p in enumerate(prompts):
        if not isinstance(p, torch.Tensor) or p.ndim != 1 or p.numel() < 1 or p.dtype not in (torch.long, torch.int32):
            desc = f"{p.dtype} shape {tuple(p.shape)}" if isinstance(p, torch.Tensor) else type(p).__name__
            raise ValueError(f"prompts[{i}]: expected a non-empty 1-D integer tensor, got {desc}")
        if int(p.min()) < 0 or int(p.max()) >= vocab:
            raise ValueError(f"prompts[{i}]: token ids must lie in [0, {vocab}), got values in [{int(p.min())}, {int(p.max())}]")
        out.append(p.long())
    return out


@torch.no_grad()
def make_training_data(
    target, prompts, config: TrainingConfig, layer_ids: Sequence[int], *, progress: bool = False
) -> TrainingData:
    """The target's continuations of ``prompts`` and its hidden states at ``layer_ids`` (checkpoint numbering).

    Args:
        target: a :class:`specdec.models.Target` (left reset afterwards).
        prompts: ``[N, T]`` int64 or a list of 1-D int64 tensors.
        config: ``continuation_tokens``, ``data_temperature`` and ``seed`` are used.
        layer_ids: tap ids; id ``i`` reads HF ``hidden_states[i + 1]``.

    Returns:
        :class:`TrainingData` with ``tokens[j]`` of shape ``[L_j]`` (``L_j = T_j + continuation_tokens``)
        and ``features[j]`` of shape ``[L_j, len(layer_ids) * H]``.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)       # hidden size 32
        >>> prompts = torch.randint(0, 97, (2, 5), generator=torch.Generator().manual_seed(0))
        >>> data = make_training_data(target, prompts, TrainingConfig(continuation_tokens=3), (0, 1))
        >>> data.tokens[0].shape, data.features[0].shape, data.prompt_lengths
        (torch.Size([8]), torch.Size([8, 64]), [5, 5])
    """

    hf_layers = tuple(i + 1 for i in layer_ids)
    tokens, features, plens = [], [], []
    rows = _prompt_list(prompts, target.vocab_size)
    for j, prompt in enumerate(_progress(rows, progress, "target continuations")):
        prompt = prompt.to(target.device)
        out = generate(
            target, prompt[None], config.continuation_tokens, temperature=config.data_temperature, seed=config.seed + j
        )
        seq = torch.cat([prompt, out.tokens[0]])  # [L]
        target.reset()
        hidden = target(seq[None], hidden_layers=hf_layers).hidden  # taps x [1, L, H]
        target.reset()
        tokens.append(seq)
        features.append(torch.cat([h[0] for h in hidden], dim=-1).detach())  # [L, taps * H]
        plens.append(prompt.numel())
    return TrainingData(tokens=tokens, features=features, prompt_lengths=plens)


@torch.no_grad()
def make_training_data_hf(
    model,
    prompts,
    config: TrainingConfig,
    layer_ids: Sequence[int],
    *,
    batch_size: int = 64,
    eos_token_id: int | Sequence[int] | None = None,
    progress: bool = False,
) -> TrainingData:
    """:func:`make_training_data` with a transformers causal LM, batched: the fast path on a GPU.

    The continuations come from ``model.generate`` over left-padded batches of prompts (greedy when
    ``config.data_temperature == 0``, else sampled at that temperature from a fork of torch's RNG seeded with
    ``config.seed``, so the caller's global RNG state is unchanged); a continuation ends at its first EOS, kept as a label. The features are the
    model's ``hidden_states[i + 1]`` at every tap ``i`` from one forward per right-padded batch of full
    sequences (right padding never reaches a causal row, so every kept row is exact).

    Args:
        model: a transformers causal LM (the target, in the form that batches).
        prompts: ``[N, T]`` int64 or a list of 1-D int64 tensors.
        config: ``continuation_tokens``, ``data_temperature`` and ``seed`` are used.
        layer_ids: tap ids (checkpoint numbering).
        batch_size: sequences per ``generate`` / forward call.
        eos_token_id: ends continuations; ``None`` = always ``continuation_tokens`` tokens.

    Returns:
        :class:`TrainingData`; tokens on the CPU, features ``[L_j, taps * H]`` on the model's device
        in its dtype. Sequences whose continuation is empty are dropped.

    Example:
        >>> from specdec.testing import tiny_hf_model
        >>> hf = tiny_hf_model("llama", seed=0)
        >>> data = make_training_data_hf(hf, torch.randint(0, 97, (3, 5)), TrainingConfig(continuation_tokens=4), (0, 1))
        >>> data.features[0].shape[-1] == 2 * hf.config.hidden_size, data.tokens[0].shape
        (True, torch.Size([9]))
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected an int >= 1, got {batch_size!r}")
    vocab = model.config.vocab_size
    rows = _prompt_list(prompts, vocab)
    num_layers = model.config.num_hidden_layers
    bad = [i for i in layer_ids if not 0 <= i < num_layers]
    if bad:
        raise ValueError(f"layer_ids: expected ids in [0, {num_layers}), got {list(layer_ids)}")
    eos = (
        [] if eos_token_id is None else ([int(eos_token_id)] if isinstance(eos_token_id, int) else [int(e) for e in eos_token_id])
    )
    pad = eos[0] if eos else 0
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    order = sorted(range(len(rows)), key=lambda i: rows[i].numel())  # similar lengths share a batch
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    seqs: dict[int, torch.Tensor] = {}
    # transformers samples from torch's global RNG: seed a fork of it, so the caller's state is left as it was
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(config.seed)
        for batch in _progress(batches, progress, "target continuations"):
            width = max(rows[i].numel() for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros(len(batch), width, dtype=torch.long)
            for r, i in enumerate(batch):
                n = rows[i].numel()
                ids[r, width - n :] = rows[i]
                mask[r, width - n :] = 1
            sample = config.data_temperature > 0
            out = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=config.continuation_tokens,
                min_new_tokens=0,
                do_sample=sample,
                temperature=config.data_temperature if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=pad,
                eos_token_id=eos or None,
            )
            cont = out[:, width:].cpu()  # [b, <= continuation_tokens]
            for r, i in enumerate(batch):
                c = cont[r]
                if eos:
                    hit = torch.isin(c, torch.tensor(eos)).nonzero()
                    if hit.numel():
                        c = c[: int(hit[0]) + 1]
                seqs[i] = torch.cat([rows[i], c])
    kept = [i for i in range(len(rows)) if seqs[i].numel() > rows[i].numel()]
    hf_layers = [i + 1 for i in layer_ids]
    features: dict[int, torch.Tensor] = {}
    kept_order = sorted(kept, key=lambda i: seqs[i].numel())
    for start in range(0, len(kept_order), batch_size):
        batch = kept_order[start : start + batch_size]
        lens = [seqs[i].numel() for i in batch]
        ids = pad_sequence([seqs[i] for i in batch], batch_first=True, padding_value=pad).to(device)
        mask = (torch.arange(ids.shape[1])[None] < torch.tensor(lens)[:, None]).long().to(device)
        hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        taps = torch.cat([hidden[h] for h in hf_layers], dim=-1)  # [b, Lmax, taps * H]
        for r, i in enumerate(batch):
            features[i] = taps[r, : lens[r]].clone()
    model.train(was_training)
    return TrainingData(
        tokens=[seqs[i] for i in kept], features=[features[i] for i in kept], prompt_lengths=[rows[i].numel() for i in kept]
    )


def _progress(iterable, enabled: bool, desc: str):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, leave=False)


def block_logits(
    model: BlockDraftModel, target, features: torch.Tensor, tokens: torch.Tensor, anchors: torch.Tensor
) -> torch.Tensor:
    """Draft logits of the blocks at ``anchors``, as inference would compute them.

    The block of anchor ``p`` is ``[tokens[p], MASK x (B - 1)]`` at positions ``p .. p + B - 1`` and
    sees the context rows ``0 .. p - 1`` -- what :class:`DFlashDrafter` holds in its cache when
    ``tokens[p]`` is the newest token. Equal to the inference path up to float rounding.

    One sequence (``tokens [L]``) or a padded batch (``tokens [S, L]``): a block never sees a row at
    or after its anchor, so padding after a sequence's end is never read and needs no mask.

    Args:
        model: a ``DFlashDraftModel`` :class:`BlockDraftModel`.
        target: its target (``embed`` and ``lm_head`` are read, never trained).
        features: ``[L, taps * H]`` or ``[S, L, taps * H]`` context features.
        tokens: ``[L]`` or ``[S, L]`` int64.
        anchors: ``[A]`` or ``[S, A]`` int64 anchor positions, each below its sequence's length.

    Returns:
        float32 ``[A, B - 1, V]`` (or ``[S, A, B - 1, V]``) logits of block rows ``1 .. B - 1``.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> model = init_drafter(target, TrainingConfig(block_size=4))
        >>> feats = torch.randn(10, 2 * target.config.hidden_size)
        >>> block_logits(model, target, feats, torch.arange(10), torch.tensor([2, 5])).shape
        torch.Size([2, 3, 97])
    """
    cfg = model.cfg
    if cfg.conv_kernel_size or cfg.selector_rank or cfg.markov_rank:
        raise ValueError(f"model: training supports the DFlash backbone only, got architecture {cfg.architecture!r}")
    single = tokens.ndim == 1
    if single:
        features, tokens, anchors = features[None], tokens[None], anchors[None]
    if tokens.ndim != 2 or features.ndim != 3 or anchors.ndim != 2:
        raise ValueError(
            f"tokens/features/anchors: expected [S, L] / [S, L, F] / [S, A], got {tuple(tokens.shape)} / "
            f"{tuple(features.shape)} / {tuple(anchors.shape)}"
        )
    S, L = tokens.shape
    A, B = anchors.shape[1], cfg.block_size
    AB = A * B
    Hq, Hkv, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    group = Hq // Hkv
    device = features.device
    dtype = model.fc.weight.dtype
    ctx = model.project_context(features.to(dtype))  # [S, L, H]
    ids = torch.full((S, A, B), cfg.mask_token_id, dtype=torch.long, device=device)
    ids[:, :, 0] = tokens.gather(1, anchors)
    # the target's table, frozen: no gradient flows into it
    noise = (
        (F.embedding(ids, target.embed.weight.detach()) * cfg.input_embedding_scale).reshape(S, AB, -1).to(dtype)
    )  # [S, AB, H]
    q_pos = (anchors[:, :, None] + torch.arange(B, device=device)).reshape(S, AB)  # [S, AB]
    ctx_pos = torch.arange(L, device=device)
    k_pos = torch.cat([ctx_pos.expand(S, L), q_pos], dim=1)  # [S, L + AB]
    owner = torch.arange(A, device=device).repeat_interleave(B)  # [AB] block index of each row
    sees_ctx = ctx_pos[None, None] < anchors[:, owner][:, :, None]  # [S, AB, L]: rows before the anchor
    sees_blk = (owner[:, None] == owner[None]).expand(S, AB, AB)  # [S, AB, AB]: its own block only
    base = torch.cat([sees_ctx, sees_blk], dim=2)  # [S, AB, L + AB]
    cos_c, sin_c = model.rope(ctx_pos, dtype)  # [L, D], broadcast over S and heads
    cos_q, sin_q = (t.view(S, 1, AB, D) for t in model.rope(q_pos.reshape(-1), dtype))

    def heads(proj, x, n):  # [S, T, H] -> [S, n, T, D]
        return proj(x).view(S, x.shape[1], n, D).transpose(1, 2)

    def rotate(x, cos, sin):
        return x * cos + rotate_half(x) * sin

    x = noise
    for i, layer in enumerate(model.layers):
        attn = layer.self_attn
        visible = base & layer_visibility(
            q_pos[:, :, None], k_pos[:, None, :], causal=cfg.layer_causal[i], window=cfg.sliding_window[i]
        )
        k_ctx = rotate(attn.k_norm(heads(attn.k_proj, ctx, Hkv)), cos_c, sin_c)  # [S, Hkv, L, D]
        v_ctx = heads(attn.v_proj, ctx, Hkv)
        h = layer.input_layernorm(x)
        q = rotate(attn.q_norm(heads(attn.q_proj, h, Hq)), cos_q, sin_q)  # [S, Hq, AB, D]
        k_blk = rotate(attn.k_norm(heads(attn.k_proj, h, Hkv)), cos_q, sin_q)  # [S, Hkv, AB, D]
        v_blk = heads(attn.v_proj, h, Hkv)
        k = torch.cat([k_ctx, k_blk], dim=2)  # [S, Hkv, L + AB, D]
        v = torch.cat([v_ctx, v_blk], dim=2)
        # GQA without copying K/V: the q heads that share a kv head become extra query rows
        q = q.reshape(S, Hkv, group * AB, D)  # [S, Hkv, G*AB, D]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible.repeat(1, group, 1)[:, None])
        out = out.reshape(S, Hq, AB, D).transpose(1, 2).reshape(S, AB, Hq * D)  # [S, AB, Hq*D]
        x = x + attn.o_proj(out)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    hidden = model.norm(x).reshape(S, A, B, -1)[:, :, 1:]  # [S, A, B-1, H]
    logits = F.linear(hidden, target.lm_head.weight.detach()).float() * cfg.output_multiplier
    if cfg.final_logit_softcapping is not None:
        cap = cfg.final_logit_softcapping
        logits = torch.tanh(logits / cap) * cap
    return logits[0] if single else logits


def _block_loss(model, target, features, tokens, anchors, lengths, weights):
    """Weighted CE and accuracy sums over the blocks at ``anchors [S, A]``; rows past each end are left out."""
    B = model.cfg.block_size
    L = tokens.shape[1]
    logits = block_logits(model, target, features, tokens, anchors)  # [S, A, B-1, V]
    label_pos = anchors[:, :, None] + torch.arange(1, B, device=tokens.device)  # [S, A, B-1]
    valid = label_pos < lengths[:, None, None]
    labels = tokens.gather(1, label_pos.clamp(max=L - 1).flatten(1)).view_as(label_pos)
    w = weights * valid  # [S, A, B-1]
    ce = F.cross_entropy(logits.flatten(0, 2), labels.reshape(-1), reduction="none").view_as(w)
    hits = (logits.argmax(-1) == labels).float()
    return (ce * w).sum(), (hits * w).sum(), w.sum(), (hits * valid).sum((0, 1)), valid.sum((0, 1))


def _lr_at(step: int, config: TrainingConfig, elapsed: float = 0.0) -> float:
    if step < config.warmup_steps:
        return config.lr * (step + 1) / (config.warmup_steps + 1)
    span = max(config.steps - config.warmup_steps, 1)
    progress = (step - config.warmup_steps) / span
    if config.max_seconds is not None:
        # a time budget ends the run first when the steps would take longer: decay on whichever is nearer
        progress = max(progress, elapsed / config.max_seconds)
    progress = min(progress, 1.0)
    return config.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _anchor_ranges(data, layer_ids, hidden: int, vocab_size: int | None = None) -> tuple[list[int], list[int]]:
    """Check ``data`` (one prompt length and one feature matrix a sequence, int64 token ids in the vocabulary, the
    features against the taps); per sequence its length and lowest anchor."""
    n = len(data.tokens)
    if n == 0:
        raise ValueError("data: expected at least one sequence, got none")
    for name in ("prompt_lengths", "features"):
        if len(getattr(data, name)) != n:
            raise ValueError(f"data.{name}: expected one entry a sequence ({n}), got {len(getattr(data, name))}")
    for j, t in enumerate(data.tokens):
        if not isinstance(t, torch.Tensor) or t.ndim != 1 or t.dtype != torch.long:
            desc = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"data.tokens[{j}]: expected a 1-D int64 tensor, got {desc}")
        if vocab_size is not None and t.numel() and not (0 <= int(t.min()) and int(t.max()) < vocab_size):
            raise ValueError(f"data.tokens[{j}]: expected token ids in [0, {vocab_size}), got [{int(t.min())}, {int(t.max())}]")
    width = len(layer_ids) * hidden
    for j, f in enumerate(data.features):
        if f.shape != (data.tokens[j].numel(), width):
            raise ValueError(
                f"data: features[{j}] expected shape ({data.tokens[j].numel()}, {width}) for taps {list(layer_ids)}, got {tuple(f.shape)}"
            )
    lengths = [t.numel() for t in data.tokens]
    # anchors lie where the block predicts target-generated tokens: from the last prompt token on
    lows = [max(p - 1, 0) for p in data.prompt_lengths]
    if any(L - 1 <= lo for L, lo in zip(lengths, lows)):
        raise ValueError("data: every sequence needs at least one generated token after its prompt")
    return lengths, lows


class _Optimiser:
    """AdamW over the drafter's trainable parameters while the target is frozen (restored on close).

    Shared by the DFlash and DSpark trainers: the target's ``requires_grad`` flags are switched off
    for the run and put back, with the target's cache reset, whatever happens inside.
    """

    def __init__(self, model, target, config):
        self.model, self.target, self.config = model, target, config
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.95))

    def __enter__(self) -> _Optimiser:
        self._grads = [p.requires_grad for p in self.target.parameters()]
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.model.train()
        return self

    def __exit__(self, *exc) -> None:
        for p, g in zip(self.target.parameters(), self._grads):
            p.requires_grad_(g)
        self.target.reset()
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    def step(self, loss: torch.Tensor, step: int, lr: float) -> None:
        """One update at learning rate ``lr``; a non-finite loss stops the run with the step and lr."""
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss: became {float(loss)} at step {step}; lower lr (now {lr:.3g})")
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
        self.opt.step()


def train_drafter(
    target, prompts, config: TrainingConfig = TrainingConfig(), *, progress: bool = True, data: TrainingData | None = None
):
    """Train a ``DFlashDraftModel`` drafter for the frozen ``target``.

    Args:
        target: a :class:`specdec.models.Target`; its weights are not changed.
        prompts: ``[N, T]`` int64 or a list of 1-D int64 tensors; the target continues each one by
            ``config.continuation_tokens`` tokens and those continuations are the training labels.
        config: :class:`TrainingConfig`.
        progress: show tqdm bars (data generation and steps).
        data: precomputed :class:`TrainingData` (from :func:`make_training_data` with the same tap
            layers); ``prompts`` is then ignored.

    Returns:
        ``(model, history)``: the trained :class:`BlockDraftModel` (eval mode, the target's device and
        dtype; wrap it with ``DFlashDrafter(model, target)`` or :func:`save` it) and a
        :class:`TrainingHistory`.

    Example:
        >>> from specdec.drafters import DFlashDrafter
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> prompts = torch.randint(0, 97, (4, 6), generator=torch.Generator().manual_seed(0))
        >>> model, history = train_drafter(target, prompts, TrainingConfig(block_size=4, steps=2), progress=False)
        >>> drafter = DFlashDrafter(model, target)
        >>> len(history.loss), drafter.max_draft_tokens
        (2, 3)
    """
    if not isinstance(config, TrainingConfig):
        raise TypeError(f"config: expected a TrainingConfig, got {type(config).__name__}")
    rows = config.position_weights().numel()
    if rows != config.block_size - 1:  # a config of another drafter (DSpark's weighs block_size rows)
        raise TypeError(
            f"config: expected a DFlash TrainingConfig (loss weights for block_size - 1 = {config.block_size - 1} rows), "
            f"got a {type(config).__name__} weighing {rows}; train_dspark trains a DSparkTrainingConfig"
        )
    model = init_drafter(target, config)
    layer_ids = model.cfg.target_layer_ids
    if data is None:
        data = make_training_data(target, prompts, config, layer_ids, progress=progress)
    lengths, lows = _anchor_ranges(data, layer_ids, target.config.hidden_size, target.vocab_size)

    # the target is frozen: nothing of it is optimised, and the optimiser only holds drafter parameters
    gen = torch.Generator().manual_seed(config.seed)
    weights = config.position_weights().to(target.device)
    history = TrainingHistory()
    tail = max(1, config.steps // 10)
    pos_hits = torch.zeros(config.block_size - 1)
    pos_count = torch.zeros(config.block_size - 1)
    steps = _progress(range(config.steps), progress, "drafter steps")
    device = target.device
    start = time.perf_counter()
    with _Optimiser(model, target, config) as opt:
        for step in steps:
            elapsed = time.perf_counter() - start
            if config.max_seconds is not None and elapsed >= config.max_seconds:
                break
            lr = _lr_at(step, config, elapsed)
            seqs = torch.randint(0, len(data.tokens), (config.batch_size,), generator=gen).tolist()
            lo = torch.tensor([lows[j] for j in seqs])
            span = torch.tensor([lengths[j] - 1 for j in seqs]) - lo
            # anchors uniform in [lo, L - 2] per sequence: a block always has at least one label
            anchors = lo[:, None] + (torch.rand(len(seqs), config.num_anchors, generator=gen) * span[:, None]).long()  # [S, A]
            tokens = pad_sequence([data.tokens[j] for j in seqs], batch_first=True).to(device)  # [S, Lmax]
            feats = pad_sequence([data.features[j] for j in seqs], batch_first=True).to(device)  # [S, Lmax, F]
            seq_len = torch.tensor([lengths[j] for j in seqs], device=device)
            loss_sum, hit_sum, w_sum, ph, pc = _block_loss(model, target, feats, tokens, anchors.to(device), seq_len, weights)
            if step >= config.steps - tail:
                pos_hits += ph.cpu()
                pos_count += pc.cpu()
            loss = loss_sum / w_sum
            opt.step(loss, step, lr)
            history.loss.append(float(loss.detach()))
            history.accuracy.append(float(hit_sum / w_sum))
            history.lr.append(lr)
            history.seconds.append(time.perf_counter() - start)
            if progress and hasattr(steps, "set_postfix"):
                steps.set_postfix(loss=f"{history.loss[-1]:.3f}", acc=f"{history.accuracy[-1]:.2f}")
    if not history.loss:
        raise ValueError(f"max_seconds: {config.max_seconds} s ended training before its first step")
    if pos_count.sum() == 0:  # stopped by the time budget before the last 10 % of the planned steps
        pos_hits, pos_count = ph.cpu(), pc.cpu()
    history.position_accuracy = (pos_hits / pos_count.clamp(min=1)).tolist()
    return model, history


def save(model: BlockDraftModel, folder, *, config: TrainingConfig | None = None, history: TrainingHistory | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (z-lab DFlash layout) into ``folder``.

    The training settings and the final loss go to ``training.json`` beside them (ignored by loaders).

    Returns:
        the folder, ready for :meth:`DFlashDrafter.from_pretrained` / :func:`load_drafter`.

    Example:
        >>> import tempfile
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> config = TrainingConfig(block_size=4)
        >>> folder = save(init_drafter(target, config), tempfile.mkdtemp(), config=config)
        >>> sorted(p.name for p in folder.iterdir())
        ['config.json', 'model.safetensors', 'training.json']
        >>> DFlashDrafter.from_pretrained(folder, target).max_draft_tokens
        3
    """
    from safetensors.torch import save_file

    if not isinstance(model, BlockDraftModel) or model.cfg.architecture != DFLASH:
        raise TypeError(f"model: expected a DFlashDraftModel BlockDraftModel, got {type(model).__name__}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(dict(model.cfg.raw), indent=2))
    save_file({k: v.detach().cpu().contiguous() for k, v in export_state_dict(model).items()}, str(folder / "model.safetensors"))
    meta = {}
    if config is not None:
        meta["config"] = asdict(config)
    if history is not None and history.loss:
        meta.update(
            final_loss=history.loss[-1],
            final_accuracy=history.accuracy[-1],
            steps=len(history.loss),
            position_accuracy=history.position_accuracy,
        )
    if meta:
        (folder / "training.json").write_text(json.dumps(meta, indent=2))
    return folder


@torch.no_grad()
def tokens_per_target_pass(target, model_or_drafter, prompts, max_new_tokens: int = 64, **generate_kwargs) -> float:
    """Mean tokens per target pass of greedy chain speculative decoding over ``prompts``.

    Args:
        model_or_drafter: a :class:`BlockDraftModel` (wrapped in :class:`DFlashDrafter`) or a drafter.
        prompts: ``[N, T]`` or a list of 1-D prompts.
        generate_kwargs: passed to :func:`specdec.generate` (default ``num_draft_tokens`` =
            the drafter's ``max_draft_tokens``).

    Returns:
        generated tokens / target passes, in ``[1, num_draft_tokens + 1]``.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> model = init_drafter(target, TrainingConfig(block_size=4))        # untrained: 3 drafts
        >>> prompts = torch.randint(0, 97, (2, 4), generator=torch.Generator().manual_seed(0))
        >>> 1.0 <= tokens_per_target_pass(target, model, prompts, max_new_tokens=8) <= 4.0
        True
    """

    drafter = DFlashDrafter(model_or_drafter, target) if isinstance(model_or_drafter, BlockDraftModel) else model_or_drafter
    generate_kwargs.setdefault("num_draft_tokens", getattr(drafter, "max_draft_tokens", 4))
    new, passes = 0, 0
    for prompt in _prompt_list(prompts, target.vocab_size):
        out = generate(target, prompt.to(target.device)[None], max_new_tokens, drafter=drafter, **generate_kwargs)
        new += out.stats.new_tokens
        passes += out.stats.target_passes
    return new / max(passes, 1)


def plot_history(history: TrainingHistory, path) -> Path:
    """Save the loss curve (and the block accuracy) of ``history`` as an image at ``path``.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Example:
        >>> import os, tempfile
        >>> history = TrainingHistory(loss=[2.0, 1.2, 0.9], accuracy=[0.1, 0.3, 0.4])
        >>> plot_history(history, os.path.join(tempfile.mkdtemp(), "loss.png")).name
        'loss.png'
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history.loss:
        raise ValueError("history: expected at least one step, got an empty history")
    path = Path(path)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = range(1, len(history.loss) + 1)
    ax.plot(steps, history.loss, color="tab:blue", label="weighted block CE")
    ax.set_xlabel("step")
    ax.set_ylabel("loss", color="tab:blue")
    ax.set_yscale("log")
    if history.accuracy:
        ax2 = ax.twinx()
        ax2.plot(steps, history.accuracy, color="tab:orange", alpha=0.7, label="weighted accuracy")
        ax2.set_ylabel("accuracy", color="tab:orange")
        ax2.set_ylim(0, 1)
    ax.set_title("drafter training")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
