"""Train a DSpark drafter (backbone + sequential head + confidence head) for a frozen target.

The data pipeline, anchors, block masks, frozen shared tables and optimiser are those of
:mod:`specdec.train.dflash` (DFlash). What DSpark changes (arXiv 2607.05147, Sec. 3 and 4; field
names as in DeepSpec's ``config/dspark``):

1. **All gamma rows predict.** The block of anchor ``p`` is ``[x_p, MASK x (gamma - 1)]``; row ``j``
   (``0 .. gamma-1``) predicts ``x_{p+1+j}``.
2. **Sequential head, teacher forced.** Row ``j``'s logits are ``U_j + b_j`` with the bias of the
   ``vanilla`` / ``gated`` / ``rnn`` head (:func:`specdec.drafters.block.heads.block_bias`) fed the target's
   own tokens ``x_p .. x_{p+j}`` as the previous tokens (the RNN state runs along the block from 0).
3. **Loss** ``L = 0.1 L_ce + 0.9 L_tv + 1.0 L_conf``, every term a mean over rows weighted by
   ``w_j = exp(-j / loss_decay_gamma)`` (``exp(-(k-1)/gamma)`` for position ``k = j + 1``):

   * ``L_ce``: cross-entropy against ``x_{p+1+j}``;
   * ``L_tv``: ``||p_d - p_t||_1`` between the drafter's softmax and the target's distribution at
     that position (temperature 1);
   * ``L_conf``: BCE of the confidence logit against the analytic acceptance
     ``c* = 1 - 0.5 ||p_d - p_t||_1`` (detached).

4. **Target distributions without storing logits.** Each sequence keeps the target's *last hidden
   state* after its final norm, ``[L, H]``; the target logits of the sampled rows are recomputed per
   step with the frozen ``lm_head``. At vocabulary 49152 this stores ``H`` values per token instead
   of ``V`` (DeepSpec does the same with ``target_last_hidden_states``).

After training, :func:`confidence_data` drafts greedily over held-out anchors exactly as
:class:`~specdec.drafters.block.dspark.DSparkDrafter` does and labels each position with the observed
greedy survival; :func:`~specdec.drafters.block.calibration.sequential_temperature_scaling` then fits the
per-position temperatures, which :func:`save` writes beside the checkpoint.

Example:
    >>> from specdec.testing import tiny_target
    >>> target = tiny_target(seed=0, vocab_size=8)
    >>> prompts = torch.randint(0, 8, (8, 5), generator=torch.Generator().manual_seed(0))
    >>> model, history = train_dspark(target, prompts, DSparkTrainingConfig(steps=3, block_size=4), progress=False)
    >>> len(history.loss), sorted(history.terms)
    (3, ['ce', 'confidence', 'tv'])
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

from specdec.decode import generate
from specdec.drafters.block.backbone import BlockDraftModel, layer_visibility, rotate_half
from specdec.drafters.block.calibration import save_calibration
from specdec.drafters.block.checkpoint import export_state_dict
from specdec.drafters.block.config import DSPARK, HEAD_TYPES, check_fits_target, read_dspark_config
from specdec.drafters.block.dspark import DSparkDrafter
from specdec.drafters.block.heads import block_bias, build_dspark_model, markov_step
from specdec.train import dflash as dflash_training
from specdec.train.dflash import (
    TrainingConfig,
    TrainingData,
    TrainingHistory,
    _anchor_ranges,
    _lr_at,
    _Optimiser,
    _progress,
    _prompt_list,
    backbone_config,
)

__all__ = [
    "DSparkTrainingConfig",
    "DSparkTrainingData",
    "DSparkTrainingHistory",
    "block_hidden",
    "confidence_data",
    "dspark_config",
    "dspark_losses",
    "init_dspark",
    "make_dspark_data",
    "save",
    "tokens_per_target_pass",
    "train_dspark",
]


@dataclass(frozen=True)
class DSparkTrainingConfig(TrainingConfig):
    """:class:`~specdec.train.dflash.TrainingConfig` plus DSpark's heads and loss weights.

    ``block_size`` is DSpark's ``gamma`` (anchor row included, all rows predict; DeepSpec: 7).

    Attributes:
        markov_rank: rank ``r`` of ``markov_w1 [V, r]`` / ``markov_w2 [V, r]`` (0 = no sequential head).
        markov_head_type: ``"vanilla"``, ``"gated"`` or ``"rnn"``.
        confidence_head: train a confidence head.
        confidence_head_with_markov: its features are ``[h_k ; W1[x_{k-1}]]`` (else ``h_k``).
        ce_weight, tv_weight, confidence_weight: ``L = ce_weight L_ce + tv_weight L_tv +
            confidence_weight L_conf`` (DeepSpec: 0.1, 0.9, 1.0).

    Example:
        >>> DSparkTrainingConfig(markov_head_type="lstm")
        Traceback (most recent call last):
        ...
        ValueError: markov_head_type: expected one of ['vanilla', 'gated', 'rnn'], got 'lstm'
    """

    block_size: int = 7
    markov_rank: int = 16
    markov_head_type: str = "vanilla"
    confidence_head: bool = True
    confidence_head_with_markov: bool = True
    ce_weight: float = 0.1
    tv_weight: float = 0.9
    confidence_weight: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.markov_rank, bool) or not isinstance(self.markov_rank, int) or self.markov_rank < 0:
            raise ValueError(f"markov_rank: expected an int >= 0, got {self.markov_rank!r}")
        if self.markov_head_type not in HEAD_TYPES:
            raise ValueError(f"markov_head_type: expected one of {list(HEAD_TYPES)}, got {self.markov_head_type!r}")
        for name in ("confidence_head", "confidence_head_with_markov"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}: expected a bool, got {getattr(self, name)!r}")
        if self.confidence_head and self.confidence_head_with_markov and self.markov_rank == 0:
            raise ValueError(
                "confidence_head_with_markov: needs markov_rank > 0 (the features include W1[x_{k-1}]), got markov_rank=0"
            )
        for name in ("ce_weight", "tv_weight", "confidence_weight"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        if self.ce_weight + self.tv_weight == 0:
            raise ValueError("tv_weight: ce_weight and tv_weight are both 0; nothing would train the drafted logits")

    def position_weights(self) -> torch.Tensor:
        """``[block_size]`` loss weights of block rows ``0 .. gamma-1`` (positions ``k = 1 .. gamma``).

        Example:
            >>> DSparkTrainingConfig(block_size=3, loss_decay_gamma=1.0).position_weights()
            tensor([1.0000, 0.3679, 0.1353])
        """
        k = torch.arange(self.block_size, dtype=torch.float32)
        if self.loss_decay_gamma is None:
            return torch.ones_like(k)
        return torch.exp(-k / self.loss_decay_gamma)


@dataclass
class DSparkTrainingData(TrainingData):
    """:class:`~specdec.train.dflash.TrainingData` plus the target's last hidden states.

    Attributes:
        last_hidden: per sequence ``[L, H]``, the target's final hidden state after its final norm:
            ``target.lm_head(last_hidden[i])`` are the target's logits for token ``i + 1``.

    :func:`make_dspark_data` builds it from a target.

    Example:
        >>> data = DSparkTrainingData(tokens=[torch.arange(6)], features=[torch.zeros(6, 64)], prompt_lengths=[4],
        ...                           last_hidden=[torch.zeros(6, 32)])
        >>> data.features[0].shape, data.last_hidden[0].shape     # [L, taps * H], [L, H]
        (torch.Size([6, 64]), torch.Size([6, 32]))
    """

    last_hidden: list[torch.Tensor] = field(default_factory=list)


@dataclass
class DSparkTrainingHistory(TrainingHistory):
    """:class:`~specdec.train.dflash.TrainingHistory` plus the loss terms per step.

    Attributes:
        terms: ``{"ce": [...], "tv": [...], "confidence": [...]}``, each weighted mean per step.
        acceptance: weighted mean analytic acceptance ``1 - 0.5 ||p_d - p_t||_1`` per step.

    Example:
        >>> history = DSparkTrainingHistory(loss=[1.5])
        >>> history.terms["tv"].append(0.8)
        >>> sorted(history.terms), history.terms["tv"], history.acceptance
        (['ce', 'confidence', 'tv'], [0.8], [])
    """

    terms: dict[str, list[float]] = field(default_factory=lambda: {"ce": [], "tv": [], "confidence": []})
    acceptance: list[float] = field(default_factory=list)


def dspark_config(target, config: DSparkTrainingConfig) -> dict:
    """The ``config.json`` (DeepSpec ``Qwen3DSparkModel`` layout, flat fields) of the drafter ``config`` describes.

    Example:
        >>> from specdec.testing import tiny_target
        >>> raw = dspark_config(tiny_target(seed=0), DSparkTrainingConfig(markov_head_type="rnn"))
        >>> raw["architectures"], raw["block_size"], raw["markov_head_type"]
        (['Qwen3DSparkModel'], 7, 'rnn')
    """
    if not isinstance(config, DSparkTrainingConfig):
        raise TypeError(f"config: expected a DSparkTrainingConfig, got {type(config).__name__}")
    tcfg = target.config
    raw, ids = backbone_config(target, config)
    raw.update(
        {
            "architectures": [DSPARK],
            "block_size": config.block_size,
            "mask_token_id": tcfg.vocab_size - 1 if config.mask_token_id is None else config.mask_token_id,
            "target_layer_ids": list(ids),
            "num_anchors": config.num_anchors,
            "enable_confidence_head": config.confidence_head,
            "markov_rank": config.markov_rank,
        }
    )
    if config.confidence_head:
        raw["confidence_head_with_markov"] = config.confidence_head_with_markov
    if config.markov_rank:
        raw["markov_head_type"] = config.markov_head_type
    check_fits_target(read_dspark_config(raw), target)
    return raw


def init_dspark(target, config: DSparkTrainingConfig) -> BlockDraftModel:
    """The untrained DSpark drafter: ``N(0, init_scale / fan_in)`` weights, unit norms, zero biases.

    ``markov_w2`` starts at zero, so the untrained sequential head adds no bias (its first gradient
    step is non-zero because ``markov_w1`` is random).

    Returns:
        a ``Qwen3DSparkModel`` :class:`BlockDraftModel` on the target's device, in its dtype.

    Example:
        >>> from specdec.testing import tiny_target
        >>> model = init_dspark(tiny_target(seed=0), DSparkTrainingConfig(block_size=4, markov_rank=8))
        >>> model.cfg.architecture, model.cfg.block_size, model.cfg.target_layer_ids
        ('Qwen3DSparkModel', 4, (0, 1))
        >>> w2 = model.markov_head.markov_w2.weight
        >>> tuple(w2.shape), bool((w2 == 0).all())      # markov_w2: [V, r], zero at the start
        ((97, 8), True)
    """
    raw = dspark_config(target, config)
    model = build_dspark_model(read_dspark_config(raw), target.config.vocab_size)
    gen = torch.Generator().manual_seed(config.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.zero_()
            elif name.endswith("markov_w2.weight"):
                p.zero_()
            elif name.endswith("markov_w1.weight"):
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (config.init_scale / p.shape[-1]) ** 0.5)
    return model.to(device=target.device, dtype=target.dtype)


@torch.no_grad()
def make_dspark_data(
    target, prompts, config: TrainingConfig, layer_ids: Sequence[int], *, progress: bool = False
) -> DSparkTrainingData:
    """The target's continuations of ``prompts``, its features at ``layer_ids`` and its last hidden states.

    One target forward per sequence returns both the tap layers and the last layer (HF numbering
    ``num_layers``), after the target's final norm: ``target.lm_head(last_hidden)`` are its logits.

    Args:
        target: a :class:`specdec.models.Target` (left reset afterwards).
        prompts: ``[N, T]`` int64 or a list of 1-D int64 tensors.
        config: ``continuation_tokens``, ``data_temperature`` and ``seed`` are used.
        layer_ids: tap ids (checkpoint numbering: id ``i`` reads HF ``hidden_states[i + 1]``).

    Returns:
        :class:`DSparkTrainingData`: ``tokens[j] [L_j]`` (``L_j = T_j + continuation_tokens``),
        ``features[j] [L_j, len(layer_ids) * H]``, ``last_hidden[j] [L_j, H]``.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)       # hidden size 32
        >>> prompts = torch.randint(0, 97, (2, 5), generator=torch.Generator().manual_seed(0))
        >>> data = make_dspark_data(target, prompts, DSparkTrainingConfig(continuation_tokens=4), (0, 1))
        >>> data.tokens[0].shape, data.features[0].shape, data.last_hidden[0].shape, data.prompt_lengths
        (torch.Size([9]), torch.Size([9, 64]), torch.Size([9, 32]), [5, 5])
    """

    hf_layers = tuple(i + 1 for i in layer_ids)
    last = target.config.num_layers
    tokens, features, plens, lasts = [], [], [], []
    for j, prompt in enumerate(_progress(_prompt_list(prompts, target.vocab_size), progress, "target continuations")):
        prompt = prompt.to(target.device)
        out = generate(
            target, prompt[None], config.continuation_tokens, temperature=config.data_temperature, seed=config.seed + j
        )
        seq = torch.cat([prompt, out.tokens[0]])  # [L]
        target.reset()
        out = target(seq[None], hidden_layers=hf_layers + (last,))
        target.reset()
        tokens.append(seq)
        features.append(torch.cat([h[0] for h in out.hidden[:-1]], dim=-1).detach())  # [L, taps * H]
        lasts.append(_normed_last_hidden(target, out.hidden[-1][0], out.logits[0]).detach())  # [L, H]
        plens.append(prompt.numel())
    return DSparkTrainingData(tokens=tokens, features=features, prompt_lengths=plens, last_hidden=lasts)


def _normed_last_hidden(target, last: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """The last layer's hidden state after the final norm, ``[L, H]``, checked against the logits.

    Targets that follow HF's convention already return it normed; others return the layer output.
    Whichever of ``last`` and ``norm(last)`` reproduces the target's logits through ``lm_head`` is it.
    """
    scale = logits.abs().max().clamp(min=1e-6)
    best, best_err = None, float("inf")
    for cand in (last, target.norm(last)):
        err = float((target.lm_head(cand).float() - logits).abs().max() / scale)
        if err < best_err:
            best, best_err = cand, err
    if best_err > 5e-2:
        raise RuntimeError(
            f"target: lm_head(last hidden state) does not reproduce the target's logits (relative error {best_err:.3g})"
        )
    return best


def block_hidden(
    model: BlockDraftModel, target, features: torch.Tensor, tokens: torch.Tensor, anchors: torch.Tensor
) -> torch.Tensor:
    """Backbone hidden states ``[A, B, H]`` (after the final norm) of the blocks at ``anchors``, all rows.

    The block of anchor ``p`` is ``[tokens[p], MASK x (B - 1)]`` at positions ``p .. p + B - 1`` and sees
    context rows ``0 .. p - 1`` and its own rows: what :class:`DSparkDrafter` computes when
    ``tokens[p]`` is the newest token. All anchors run in one attention call (a block mask keeps each
    block to its prefix and itself), as in :func:`specdec.train.dflash.block_logits`.

    Args:
        model: a DSpark :class:`BlockDraftModel` (block size ``B``).
        target: its target (``embed`` is read, never trained).
        features: ``[L, taps * H]`` context features of one sequence.
        tokens: ``[L]`` int64.
        anchors: ``[A]`` int64 anchor positions in ``[0, L)``.

    Returns:
        ``[A, B, H]`` in the drafter's dtype.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> model = init_dspark(target, DSparkTrainingConfig(block_size=4))
        >>> feats = torch.randn(10, 2 * target.config.hidden_size)        # [L, taps * H]
        >>> block_hidden(model, target, feats, torch.arange(10), torch.tensor([2, 5])).shape
        torch.Size([2, 4, 32])
    """
    cfg = model.cfg
    L, A, B = tokens.numel(), anchors.numel(), cfg.block_size
    device = features.device
    ctx = model.project_context(features.to(model.fc.weight.dtype))  # [L, H]
    ids = torch.full((A, B), cfg.mask_token_id, dtype=torch.long, device=device)
    ids[:, 0] = tokens[anchors]
    noise = (F.embedding(ids, target.embed.weight.detach()) * cfg.input_embedding_scale).reshape(A * B, -1)  # [A*B, H]
    noise = noise.to(model.fc.weight.dtype)
    q_pos = (anchors[:, None] + torch.arange(B, device=device)).reshape(-1)  # [A*B]
    ctx_pos = torch.arange(L, device=device)
    k_pos = torch.cat([ctx_pos, q_pos])  # [L + A*B]
    owner = torch.arange(A, device=device).repeat_interleave(B)  # [A*B]
    sees_ctx = ctx_pos[None] < anchors[owner][:, None]  # [A*B, L]
    sees_blk = owner[:, None] == owner[None]  # [A*B, A*B]
    base = torch.cat([sees_ctx, sees_blk], dim=1)  # [A*B, L + A*B]
    cos_c, sin_c = model.rope(ctx_pos, ctx.dtype)
    cos_q, sin_q = model.rope(q_pos, noise.dtype)
    x, rows = noise, A * B
    for i, layer in enumerate(model.layers):
        attn = layer.self_attn
        visible = base & layer_visibility(q_pos[:, None], k_pos[None], causal=cfg.layer_causal[i], window=cfg.sliding_window[i])
        k_ctx, v_ctx = model._kv(attn, ctx, cos_c, sin_c)  # [Hkv, L, D]
        h = layer.input_layernorm(x)
        q = attn.q_norm(attn.q_proj(h).view(rows, cfg.num_heads, cfg.head_dim)).transpose(0, 1)  # [Hq, A*B, D]
        q = q * cos_q + rotate_half(q) * sin_q
        k_blk, v_blk = model._kv(attn, h, cos_q, sin_q)  # [Hkv, A*B, D]
        k = torch.cat([k_ctx, k_blk], dim=1)  # [Hkv, L + A*B, D]
        v = torch.cat([v_ctx, v_blk], dim=1)
        group = cfg.num_heads // cfg.num_kv_heads
        q = q.reshape(cfg.num_kv_heads, group * rows, cfg.head_dim)  # [Hkv, G*A*B, D]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible.repeat(group, 1))
        out = out.reshape(cfg.num_heads, rows, cfg.head_dim).transpose(0, 1).reshape(rows, -1)  # [A*B, Hq*D]
        x = x + attn.o_proj(out)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return model.norm(x).reshape(A, B, -1)


def _draft_logits(model: BlockDraftModel, target, hidden: torch.Tensor) -> torch.Tensor:
    """``U`` [.., V] float32 from backbone rows with the target's frozen ``lm_head``."""
    cfg = model.cfg
    logits = F.linear(hidden, target.lm_head.weight.detach()).float() * cfg.output_multiplier
    if cfg.final_logit_softcapping is not None:
        logits = torch.tanh(logits / cfg.final_logit_softcapping) * cfg.final_logit_softcapping
    return logits


def _confidence_logits(model: BlockDraftModel, hidden: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    feats = hidden
    if model.cfg.confidence_head_with_markov:
        feats = torch.cat([hidden, model.markov_head.markov_w1(prev).to(hidden.dtype)], dim=-1)
    return model.confidence_head.proj(feats).float().squeeze(-1)


def _target_logits(target, last_hidden: torch.Tensor, label_pos: torch.Tensor) -> torch.Tensor:
    # the target's logits for token q come from its last hidden state at q - 1
    L = last_hidden.shape[0]
    rows = last_hidden[(label_pos - 1).clamp(0, L - 1)]  # [A, B, H]
    return F.linear(rows.to(target.lm_head.weight.dtype), target.lm_head.weight.detach()).float()


def dspark_losses(
    model: BlockDraftModel,
    target,
    features: torch.Tensor,
    last_hidden: torch.Tensor,
    tokens: torch.Tensor,
    anchors: torch.Tensor,
    weights: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Weighted *sums* of DSpark's loss terms over the blocks at ``anchors`` of one sequence.

    Args:
        features: ``[L, taps * H]``; last_hidden: ``[L, H]``; tokens: ``[L]``; anchors: ``[A]`` in ``[0, L - 1)``.
        weights: ``[B]`` position weights.

    Returns:
        ``ce``, ``tv`` (``||p_d - p_t||_1``), ``confidence`` (BCE vs ``1 - tv / 2``, detached), ``hits``
        (argmax == label), ``acceptance`` (``1 - tv / 2``): each ``sum_rows w * term``; ``weight`` =
        ``sum_rows w``; rows past the end of the sequence have weight 0. Each is a 0-d tensor; divide by
        ``weight`` for the means :func:`train_dspark` combines.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> config = DSparkTrainingConfig(block_size=4, continuation_tokens=4)
        >>> model = init_dspark(target, config)
        >>> prompts = torch.randint(0, 97, (1, 5), generator=torch.Generator().manual_seed(0))
        >>> data = make_dspark_data(target, prompts, config, model.cfg.target_layer_ids)    # L = 9
        >>> out = dspark_losses(model, target, data.features[0], data.last_hidden[0], data.tokens[0],
        ...                     torch.tensor([4, 6]), config.position_weights())
        >>> sorted(out)
        ['acceptance', 'ce', 'confidence', 'hits', 'tv', 'weight']
        >>> round(float(out["weight"]), 4)      # anchor 4: 4 rows; anchor 6: rows 7, 8 only
        4.6365
    """
    cfg = model.cfg
    L, B = tokens.numel(), cfg.block_size
    hidden = block_hidden(model, target, features, tokens, anchors)  # [A, B, H]
    label_pos = anchors[:, None] + torch.arange(1, B + 1, device=tokens.device)  # [A, B]
    valid = label_pos < L
    labels = tokens[label_pos.clamp(max=L - 1)]  # [A, B]
    # teacher forcing: the previous token of row j is the target's token x_{p+j} (the anchor for j = 0)
    prev = torch.cat([tokens[anchors][:, None], labels[:, :-1]], dim=1)  # [A, B]
    logits = _draft_logits(model, target, hidden)  # [A, B, V]
    if cfg.markov_rank:
        logits = logits + block_bias(model.markov_head, cfg.markov_head_type, prev, hidden).float()
    target_probs = torch.softmax(_target_logits(target, last_hidden, label_pos), dim=-1)
    draft_probs = torch.softmax(logits, dim=-1)
    w = weights[None] * valid  # [A, B]
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none").view_as(w)
    tv = (draft_probs - target_probs).abs().sum(-1)  # [A, B], the L1 distance (2 x total variation)
    acceptance = (1.0 - 0.5 * tv).clamp(0.0, 1.0)
    out = {
        "ce": (ce * w).sum(),
        "tv": (tv * w).sum(),
        "hits": ((logits.argmax(-1) == labels).float() * w).sum().detach(),
        "acceptance": (acceptance * w).sum().detach(),
        "weight": w.sum(),
    }
    if cfg.confidence_head:
        conf = _confidence_logits(model, hidden, prev)  # [A, B]
        bce = F.binary_cross_entropy_with_logits(conf, acceptance.detach(), reduction="none")
        out["confidence"] = (bce * w).sum()
    else:
        out["confidence"] = w.new_zeros(())
    return out


def train_dspark(
    target,
    prompts,
    config: DSparkTrainingConfig = DSparkTrainingConfig(),
    *,
    progress: bool = True,
    data: DSparkTrainingData | None = None,
):
    """Train a ``Qwen3DSparkModel`` drafter for the frozen ``target``.

    Args:
        target: a :class:`specdec.models.Target`; its weights and ``requires_grad`` flags are unchanged.
        prompts: ``[N, T]`` int64 or a list of 1-D prompts (continued by the target: the labels).
        config: :class:`DSparkTrainingConfig`.
        progress: tqdm bars.
        data: precomputed :class:`DSparkTrainingData` (:func:`make_dspark_data` with the same taps).

    Returns:
        ``(model, history)``: the trained :class:`BlockDraftModel` (eval mode; wrap it with
        ``DSparkDrafter(model, target)`` or :func:`save` it) and a :class:`DSparkTrainingHistory`.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> prompts = torch.randint(0, 97, (2, 5), generator=torch.Generator().manual_seed(0))
        >>> config = DSparkTrainingConfig(steps=2, block_size=4, continuation_tokens=4, num_anchors=4, batch_size=2)
        >>> model, history = train_dspark(target, prompts, config, progress=False)
        >>> len(history.loss), len(history.terms["tv"]), len(history.position_accuracy)    # steps, steps, B
        (2, 2, 4)
        >>> drafter = DSparkDrafter(model, target)
    """
    if not isinstance(config, DSparkTrainingConfig):
        raise TypeError(f"config: expected a DSparkTrainingConfig, got {type(config).__name__}")
    model = init_dspark(target, config)
    layer_ids = model.cfg.target_layer_ids
    if data is None:
        data = make_dspark_data(target, prompts, config, layer_ids, progress=progress)
    if not isinstance(data, DSparkTrainingData):
        raise TypeError(f"data: expected DSparkTrainingData (with last_hidden), got {type(data).__name__}")
    hidden = target.config.hidden_size
    for j, seq in enumerate(data.tokens):
        if j >= len(data.last_hidden) or data.last_hidden[j].shape != (seq.numel(), hidden):
            got = tuple(data.last_hidden[j].shape) if j < len(data.last_hidden) else None
            raise ValueError(f"data: last_hidden[{j}] expected shape ({seq.numel()}, {hidden}), got {got}")
    lengths, lows = _anchor_ranges(data, layer_ids, hidden, target.vocab_size)

    gen = torch.Generator().manual_seed(config.seed)
    weights = config.position_weights().to(target.device)
    history = DSparkTrainingHistory()
    steps = _progress(range(config.steps), progress, "dspark steps")
    start = time.perf_counter()
    with _Optimiser(model, target, config) as opt:
        for step in steps:
            elapsed = time.perf_counter() - start
            if config.max_seconds is not None and elapsed >= config.max_seconds:
                break
            lr = _lr_at(step, config, elapsed)
            seqs = torch.randint(0, len(data.tokens), (config.batch_size,), generator=gen).tolist()
            sums: dict[str, torch.Tensor] = {}
            for j in seqs:
                lo, L = lows[j], lengths[j]
                anchors = (lo + torch.randint(0, L - 1 - lo, (config.num_anchors,), generator=gen)).to(target.device)
                tokens = data.tokens[j].to(target.device)
                part = dspark_losses(
                    model,
                    target,
                    data.features[j].to(target.device),
                    data.last_hidden[j].to(target.device),
                    tokens,
                    anchors,
                    weights,
                )
                sums = {k: sums.get(k, 0.0) + v for k, v in part.items()}
            total = sums["weight"]
            terms = {k: sums[k] / total for k in ("ce", "tv", "confidence")}
            loss = (
                config.ce_weight * terms["ce"] + config.tv_weight * terms["tv"] + config.confidence_weight * terms["confidence"]
            )
            opt.step(loss, step, lr)
            history.loss.append(float(loss.detach()))
            history.accuracy.append(float(sums["hits"] / total))
            history.acceptance.append(float(sums["acceptance"] / total))
            history.lr.append(lr)
            history.seconds.append(time.perf_counter() - start)
            for k, v in terms.items():
                history.terms[k].append(float(v.detach()))
            if progress and hasattr(steps, "set_postfix"):
                steps.set_postfix(loss=f"{history.loss[-1]:.3f}", acc=f"{history.accuracy[-1]:.2f}")
    if not history.loss:
        raise ValueError(f"max_seconds: {config.max_seconds} s ended training before its first step")
    history.position_accuracy = _position_accuracy(model, target, data, lows, config, gen)
    return model, history


@torch.no_grad()
def _position_accuracy(model, target, data, lows, config, gen) -> list[float]:
    # teacher-forced argmax agreement per block row, after training: one anchor draw on up to 64 sequences
    hits = torch.zeros(config.block_size)
    count = torch.zeros(config.block_size)
    for j, tokens in enumerate(data.tokens[:64]):
        L = tokens.numel()
        anchors = (lows[j] + torch.randint(0, L - 1 - lows[j], (config.num_anchors,), generator=gen)).to(target.device)
        tokens = tokens.to(target.device)
        hidden = block_hidden(model, target, data.features[j].to(target.device), tokens, anchors)
        label_pos = anchors[:, None] + torch.arange(1, config.block_size + 1, device=tokens.device)
        valid = label_pos < L
        labels = tokens[label_pos.clamp(max=L - 1)]
        prev = torch.cat([tokens[anchors][:, None], labels[:, :-1]], dim=1)
        logits = _draft_logits(model, target, hidden)
        if model.cfg.markov_rank:
            logits = logits + block_bias(model.markov_head, model.cfg.markov_head_type, prev, hidden).float()
        hits += ((logits.argmax(-1) == labels) & valid).float().sum(0).cpu()
        count += valid.float().sum(0).cpu()
    return (hits / count.clamp(min=1)).tolist()


@torch.no_grad()
def confidence_data(
    model_or_drafter, target, data: DSparkTrainingData, *, anchors_per_sequence: int | None = None, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Confidence logits and observed greedy survival labels of blocks drafted at held-out anchors.

    Each block is drafted greedily left to right exactly as :class:`DSparkDrafter` does (the sequential
    head fed its own drafted tokens, the confidence head their ``W1`` rows). Under greedy
    verification draft ``j`` survives iff it equals the target's argmax after the context and drafts
    ``1 .. j-1``; that argmax is known from ``data.last_hidden`` while the drafts so far equal the
    data's tokens (always, for greedy data). A position after a miss is labelled 0; one whose
    context left the data (sampled data) is masked out.

    Args:
        model_or_drafter: a DSpark :class:`BlockDraftModel` or :class:`DSparkDrafter`.
        data: :class:`DSparkTrainingData` (held out from training).
        anchors_per_sequence: anchors drawn per sequence (``torch.Generator(seed)``); ``None`` = every
            anchor from the last prompt token to the second-to-last token.

    Returns:
        ``(confidence_logits [n, B], labels [n, B], mask [n, B], drafted [n, B])`` on the CPU: float32,
        float32, bool, int64; ``n`` is the total number of anchors. Labels are
        :func:`~specdec.drafters.block.calibration.survival_labels`-style prefix indicators.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> config = DSparkTrainingConfig(block_size=4, continuation_tokens=4)
        >>> model = init_dspark(target, config)
        >>> prompts = torch.randint(0, 97, (2, 5), generator=torch.Generator().manual_seed(0))
        >>> held_out = make_dspark_data(target, prompts, config, model.cfg.target_layer_ids)
        >>> logits, labels, mask, drafted = confidence_data(model, target, held_out)
        >>> logits.shape, mask.dtype                  # 2 sequences x anchors 4 .. 7
        (torch.Size([8, 4]), torch.bool)
        >>> bool((labels <= mask.float()).all())      # a masked-out entry is never labelled 1
        True
    """
    model = model_or_drafter.model if isinstance(model_or_drafter, DSparkDrafter) else model_or_drafter
    if not isinstance(model, BlockDraftModel) or model.cfg.architecture != DSPARK:
        raise TypeError(
            f"model_or_drafter: expected a DSpark BlockDraftModel or DSparkDrafter, got {type(model_or_drafter).__name__}"
        )
    if not model.cfg.confidence_head:
        raise ValueError("model_or_drafter: the drafter has no confidence head (enable_confidence_head is false)")
    if anchors_per_sequence is not None and (
        isinstance(anchors_per_sequence, bool) or not isinstance(anchors_per_sequence, int) or anchors_per_sequence < 1
    ):
        raise ValueError(f"anchors_per_sequence: expected None (every anchor) or an int >= 1, got {anchors_per_sequence!r}")
    cfg = model.cfg
    B = cfg.block_size
    gen = torch.Generator().manual_seed(seed)
    out_logits, out_labels, out_mask, out_drafted = [], [], [], []
    for j, tokens in enumerate(data.tokens):
        L = tokens.numel()
        lo = max(data.prompt_lengths[j] - 1, 0)
        if anchors_per_sequence is None:
            anchors = torch.arange(lo, L - 1)
        else:
            anchors = lo + torch.randint(0, L - 1 - lo, (anchors_per_sequence,), generator=gen)
        anchors, tokens = anchors.to(target.device), tokens.to(target.device)
        hidden = block_hidden(model, target, data.features[j].to(target.device), tokens, anchors)  # [A, B, H]
        base = _draft_logits(model, target, hidden)  # [A, B, V]
        prev, state = tokens[anchors], None
        drafted, conf = [], []
        for k in range(B):
            step = base[:, k]
            if cfg.markov_rank:
                bias, state = markov_step(model.markov_head, cfg.markov_head_type, prev, hidden[:, k], state)
                step = step + bias.float()
            conf.append(_confidence_logits(model, hidden[:, k], prev))
            prev = step.argmax(-1)
            drafted.append(prev)
        drafted = torch.stack(drafted, 1)  # [A, B]
        label_pos = anchors[:, None] + torch.arange(1, B + 1, device=tokens.device)
        valid = label_pos < L
        greedy = _target_logits(target, data.last_hidden[j].to(target.device), label_pos).argmax(-1)  # [A, B]
        on_data = (drafted == tokens[label_pos.clamp(max=L - 1)]).long().cumprod(1)  # [A, B]
        # the greedy argmax at a data position is the target's choice only while the drafts equal the data
        on_data_before = torch.cat([torch.ones_like(on_data[:, :1]), on_data[:, :-1]], 1).bool()
        miss = on_data_before & (drafted != greedy)
        dead = miss.long().cumsum(1) > 0  # a known miss at or before position k
        dead_before = torch.cat([torch.zeros_like(dead[:, :1]), dead[:, :-1]], 1)
        mask = valid & (dead_before | on_data_before)
        out_logits.append(torch.stack(conf, 1).cpu())
        out_labels.append((mask & ~dead).float().cpu())
        out_mask.append(mask.cpu())
        out_drafted.append(drafted.cpu())
    return torch.cat(out_logits), torch.cat(out_labels), torch.cat(out_mask), torch.cat(out_drafted)


@torch.no_grad()
def tokens_per_target_pass(target, model_or_drafter, prompts, max_new_tokens: int = 64, **generate_kwargs) -> float:
    """Mean tokens per target pass of greedy chain speculative decoding over ``prompts``.

    A DSpark :class:`BlockDraftModel` is wrapped in :class:`DSparkDrafter`; see
    :func:`specdec.train.dflash.tokens_per_target_pass`. ``prompts``: ``[N, T]`` or a list of
    1-D prompts.

    Returns:
        generated tokens / target passes, in ``[1, num_draft_tokens + 1]``.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> model = init_dspark(target, DSparkTrainingConfig(block_size=4))     # untrained
        >>> prompts = torch.randint(0, 97, (2, 4), generator=torch.Generator().manual_seed(0))
        >>> 1.0 <= tokens_per_target_pass(target, model, prompts, max_new_tokens=8) <= 5.0
        True
    """
    drafter = DSparkDrafter(model_or_drafter, target) if isinstance(model_or_drafter, BlockDraftModel) else model_or_drafter
    return dflash_training.tokens_per_target_pass(target, drafter, prompts, max_new_tokens, **generate_kwargs)


def save(
    model: BlockDraftModel,
    folder,
    *,
    target=None,
    config: DSparkTrainingConfig | None = None,
    history: DSparkTrainingHistory | None = None,
    temperatures: torch.Tensor | None = None,
) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (DeepSpec DSpark layout) into ``folder``.

    Args:
        target: when given, frozen copies of its ``embed_tokens`` / ``lm_head`` are written too, as
            DeepSpec checkpoints carry them (loaders shape-check and ignore them).
        temperatures: STS temperatures, written to ``confidence_calibration.json``
            (read back by :meth:`DSparkDrafter.from_pretrained`).

    Returns:
        the folder, ready for :meth:`DSparkDrafter.from_pretrained` / ``load_drafter``.

    Example:
        >>> import tempfile
        >>> from specdec.drafters.block.calibration import load_calibration
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> config = DSparkTrainingConfig(block_size=4)
        >>> folder = save(init_dspark(target, config), tempfile.mkdtemp(), config=config,
        ...               temperatures=torch.tensor([1.0, 1.5, 2.0, 2.0]))     # [B]
        >>> sorted(p.name for p in folder.iterdir())
        ['confidence_calibration.json', 'config.json', 'model.safetensors', 'training.json']
        >>> load_calibration(folder)
        tensor([1.0000, 1.5000, 2.0000, 2.0000])
        >>> type(DSparkDrafter.from_pretrained(folder, target)).__name__
        'DSparkDrafter'
    """
    from safetensors.torch import save_file

    if not isinstance(model, BlockDraftModel) or model.cfg.architecture != DSPARK:
        raise TypeError(f"model: expected a Qwen3DSparkModel BlockDraftModel, got {type(model).__name__}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(dict(model.cfg.raw), indent=2))
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in export_state_dict(model, target).items()}, str(folder / "model.safetensors")
    )
    meta = {}
    if config is not None:
        meta["config"] = asdict(config)
    if history is not None and history.loss:
        meta.update(
            final_loss=history.loss[-1],
            final_accuracy=history.accuracy[-1],
            steps=len(history.loss),
            final_terms={k: v[-1] for k, v in history.terms.items() if v},
            position_accuracy=history.position_accuracy,
        )
    if meta:
        (folder / "training.json").write_text(json.dumps(meta, indent=2))
    if temperatures is not None:
        save_calibration(folder, temperatures)
    return folder
