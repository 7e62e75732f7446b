"""DSpark's sequential heads (``vanilla`` Markov, ``gated``, ``rnn``): one step, a teacher-forced block,
and the backbone built with the head's extra tensors."""

from __future__ import annotations

import torch
from torch import nn

from specdec.drafters.block.backbone import BlockDraftModel
from specdec.drafters.block.config import DSPARK, HEAD_TYPES, BlockDrafterConfig

__all__ = ["HEAD_TYPES", "block_bias", "build_dspark_model", "markov_step"]


def build_dspark_model(cfg: BlockDrafterConfig, vocab_size: int) -> BlockDraftModel:
    """A :class:`BlockDraftModel` with the head ``cfg.markov_head_type`` names, under DeepSpec's tensor names.

    ``gated`` adds ``markov_head.gate_proj`` (``Linear(hidden + rank, rank)``), ``rnn`` adds
    ``markov_head.joint_proj`` (``Linear(2 * rank + hidden, 3 * rank)``, rows: gate, candidate, output).

    Example:
        >>> from specdec.drafters.block.config import read_dspark_config
        >>> from specdec.drafters.block.fixtures import fixture_config
        >>> from specdec.testing import tiny_target
        >>> cfg = read_dspark_config(fixture_config("Qwen3DSparkModel", tiny_target(seed=0), markov_head_type="gated"))
        >>> build_dspark_model(cfg, 97).markov_head.gate_proj.weight.shape     # rank 8, hidden 32
        torch.Size([8, 40])
    """
    if cfg.architecture != DSPARK:
        raise ValueError(f"cfg: expected architecture {DSPARK!r}, got {cfg.architecture!r}")
    head = cfg.markov_head_type
    if cfg.markov_rank and head not in HEAD_TYPES:
        raise ValueError(f"markov_head_type: expected one of {list(HEAD_TYPES)}, got {head!r}")
    model = BlockDraftModel(cfg, vocab_size)
    h, r = cfg.hidden_size, cfg.markov_rank
    if head == "gated" and not hasattr(model.markov_head, "gate_proj"):
        model.markov_head.gate_proj = nn.Linear(h + r, r)
    elif head == "rnn" and not hasattr(model.markov_head, "joint_proj"):
        model.markov_head.joint_proj = nn.Linear(2 * r + h, 3 * r)
    return model


def markov_step(
    head: nn.Module, head_type: str, prev: torch.Tensor, hidden: torch.Tensor | None = None, state: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One step of the sequential head: the logit bias of position ``k`` and the new recurrent state.

    Args:
        head: the ``markov_head`` module (``markov_w1``, ``markov_w2`` and ``gate_proj`` / ``joint_proj``).
        head_type: ``"vanilla"``, ``"gated"`` or ``"rnn"``.
        prev: ``[...]`` int64, the previous token ``x_{k-1}`` (the anchor at the first position).
        hidden: ``[..., H]`` backbone hidden ``h_k`` (gated and rnn; ignored by vanilla).
        state: ``[..., r]`` RNN state ``s_{k-1}``; ``None`` = zeros (the first position).

    Returns:
        ``(bias [..., V], state [..., r] or None)`` in the head's dtype.

    Example:
        >>> head = torch.nn.Module(); head.markov_w1 = torch.nn.Embedding(3, 2); head.markov_w2 = torch.nn.Linear(2, 3, bias=False)
        >>> markov_step(head, "vanilla", torch.tensor(1))[0].shape
        torch.Size([3])
    """
    emb = head.markov_w1(prev)  # [..., r]
    if head_type == "vanilla":
        return head.markov_w2(emb), state
    if hidden is None:
        raise ValueError(f"hidden: the {head_type!r} head reads the backbone hidden state h_k, got None")
    hidden = hidden.to(emb.dtype)
    if head_type == "gated":
        gate = torch.sigmoid(head.gate_proj(torch.cat([hidden, emb], dim=-1)))  # [..., r]
        return head.markov_w2(gate * emb), state
    if head_type == "rnn":
        if state is None:
            state = torch.zeros_like(emb)
        gate_raw, cand_raw, out_raw = head.joint_proj(torch.cat([state, emb, hidden], dim=-1)).chunk(3, dim=-1)
        gate = torch.sigmoid(gate_raw)
        state = gate * state + (1.0 - gate) * torch.tanh(cand_raw)
        return head.markov_w2(torch.tanh(out_raw)), state
    raise ValueError(f"head_type: expected one of {list(HEAD_TYPES)}, got {head_type!r}")


def block_bias(head: nn.Module, head_type: str, prev: torch.Tensor, hidden: torch.Tensor | None = None) -> torch.Tensor:
    """Teacher-forced biases of a whole block: ``prev [..., B]`` tokens, ``hidden [..., B, H]`` -> ``[..., B, V]``.

    Position ``k`` gets the bias :func:`markov_step` gives after consuming ``prev[..., :k+1]`` (the RNN
    state is carried along the block from zero), i.e. what left-to-right drafting computes when the
    drafted tokens are ``prev[..., 1:]``.
    """
    if head_type in ("vanilla", "gated"):
        return markov_step(head, head_type, prev, hidden)[0]
    if hidden is None:
        raise ValueError(f"hidden: the {head_type!r} head reads the backbone hidden state h_k, got None")
    out, state = [], None
    for k in range(prev.shape[-1]):
        bias, state = markov_step(head, head_type, prev[..., k], hidden[..., k, :], state)
        out.append(bias)
    return torch.stack(out, dim=-2)
