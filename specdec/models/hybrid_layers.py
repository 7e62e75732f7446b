"""The layers of a hybrid target: (1 + w) and gated RMSNorms, gated attention, Gated DeltaNet, sparse MoE.

Attention layers write and read the static KV cache through the dense runtime's shared primitives
(:func:`~specdec.models.dense.cached_attention`); GDN layers read a committed recurrent state and
conv state and return what a commit replays.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specdec.kernels.gdn import gdn_tree, tree_causal_conv
from specdec.kernels.norm import centered_rms_norm, gated_rms_norm
from specdec.kernels.rope.naive import rotate_half
from specdec.models.dense import MLP, cached_attention
from specdec.models.hybrid_config import HybridConfig

__all__ = ["CenteredRMSNorm", "GatedAttention", "GatedDeltaNet", "GatedRMSNorm", "HybridLayer", "SparseMoE"]


class CenteredRMSNorm(nn.Module):
    """RMSNorm with a zero-centred weight, ``x_hat * (1 + w)`` computed in fp32 (Qwen3-Next / Qwen3.5)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., dim]`` -> the normalised ``[..., dim]`` in ``x``'s dtype (one Triton launch on CUDA)."""
        return centered_rms_norm(x, self.weight, self.eps)


class GatedRMSNorm(nn.Module):
    """GDN output norm: RMS-normalise over dv, plain weight, then multiply by SiLU(z)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        """``weight * rms_norm(x) * silu(gate)`` for ``x``, ``gate`` ``[..., dim]``, in ``x``'s dtype (one Triton
        launch on CUDA)."""
        return gated_rms_norm(x, gate, self.weight, self.eps)


class GatedAttention(nn.Module):
    """Attention with a sigmoid output gate, (1 + w) q/k norms and partial RoPE, on the shared KV cache."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.cfg = cfg
        # rows: q_proj (per head [query | gate]), then k_proj, v_proj: one matmul per step
        self.wqkv = nn.Linear(cfg.hidden_size, 2 * cfg.q_size + 2 * cfg.kv_size, bias=cfg.attention_bias)
        self.wo = nn.Linear(cfg.q_size, cfg.hidden_size, bias=cfg.attention_bias)
        self.q_norm = CenteredRMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = CenteredRMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, k_cache, v_cache, slots, attn_mask):
        """``x [B, T, H]`` -> ``[B, T, H]``; writes the new rows' K/V into the cache.

        Args:
            cos, sin: ``[1, 1, T, rotary_dim]`` RoPE tables of the rows' positions.
            k_cache, v_cache, slots, attn_mask: as for :func:`specdec.models.dense.cached_attention`.
        """
        q, k, v, gate = self.project(x, cos, sin)
        out = cached_attention(q, k, v, k_cache, v_cache, slots, attn_mask)  # [B, T, H*D]
        return self.wo(out * torch.sigmoid(gate))

    def project(self, x, cos, sin):
        """``x [B, T, H]`` -> ``(q [B, H, T, D], k [B, Hkv, T, D], v [B, Hkv, T, D], gate [B, T, H * D])``.

        q and k normed and rotated (partial RoPE: the first ``rotary_dim`` channels of each head); the
        output gate is applied after attention, ``wo(attention * sigmoid(gate))``.
        """
        cfg = self.cfg
        bsz, seqlen, _ = x.shape
        qg, k, v = self.wqkv(x).split([2 * cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
        q, gate = qg.view(bsz, seqlen, cfg.num_heads, 2 * cfg.head_dim).chunk(2, dim=-1)
        gate = gate.reshape(bsz, seqlen, cfg.q_size)
        q = self.q_norm(q).transpose(1, 2)  # [B, H, T, D]
        k = self.k_norm(k.view(bsz, seqlen, cfg.num_kv_heads, cfg.head_dim)).transpose(1, 2)
        v = v.view(bsz, seqlen, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        r = cos.shape[-1]
        q = torch.cat([q[..., :r] * cos + rotate_half(q[..., :r]) * sin, q[..., r:]], dim=-1)
        k = torch.cat([k[..., :r] * cos + rotate_half(k[..., :r]) * sin, k[..., r:]], dim=-1)
        return q, k, v, gate


class GatedDeltaNet(nn.Module):
    """A GDN layer; both checkpoint layouts are loaded into one fused ``in_proj``.

    ``in_proj`` rows: ``[q (Hk dk) | k (Hk dk) | v (Hv dv) | z (Hv dv) | b (Hv) | a (Hv)]``, value
    head ``h`` reading key head ``h // (Hv / Hk)`` (Qwen3-Next's per-key-group layout is regrouped
    into this at load time).
    """

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.cfg = cfg
        hv = cfg.linear_num_value_heads
        self.in_proj = nn.Linear(cfg.hidden_size, cfg.conv_dim + cfg.value_dim + 2 * hv, bias=False)
        self.conv_weight = nn.Parameter(torch.empty(cfg.conv_dim, cfg.linear_conv_kernel_dim))  # [C, W]
        nn.init.normal_(self.conv_weight, 0.0, cfg.linear_conv_kernel_dim**-0.5)
        self.A_log = nn.Parameter(torch.zeros(hv))
        self.dt_bias = nn.Parameter(torch.ones(hv))
        self.norm = GatedRMSNorm(cfg.linear_value_head_dim, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(cfg.value_dim, cfg.hidden_size, bias=False)

    def forward(self, x, state, conv_state, meta, *, method: str, backend: str):
        """``x [1, T, H]``; returns ``(out [1, T, H], stash)`` with what :meth:`HybridTarget.commit` replays."""
        cfg = self.cfg
        seqlen = x.shape[1]
        hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        mixed, z, g, beta = self.project(x)
        y = tree_causal_conv(mixed, meta, conv_state, self.conv_weight, activation="silu", backend=backend)  # [T, C]
        q, k, v = y.split([cfg.key_dim, cfg.key_dim, cfg.value_dim], dim=-1)
        q = q.reshape(seqlen, hk, dk)
        k = k.reshape(seqlen, hk, dk)
        v = v.reshape(seqlen, hv, dv)
        o = gdn_tree(q, k, v, g, beta, meta, state, use_qk_l2norm=True, method=method, backend=backend)  # [T, Hv, dv]
        return self.finish(o, z), (mixed, k, v, g, beta)

    def project(self, x):
        """``x [1, T, H]`` -> ``(mixed [T, C], z [T, Hv * dv], g [T, Hv] float32, beta [T, Hv])``: the rows'
        pre-conv activations, output-gate input, log decay and write strength."""
        cfg = self.cfg
        hv = cfg.linear_num_value_heads
        mixed, z, b, a = self.in_proj(x[0]).split([cfg.conv_dim, cfg.value_dim, hv, hv], dim=-1)  # [T, .]
        beta = b.sigmoid()
        # fp32 gates: in half precision exp(A_log) may overflow (transformers does the same)
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        return mixed, z, g, beta

    def finish(self, o, z):
        """The recurrence's output ``o [T, Hv, dv]`` and ``z [T, Hv * dv]`` -> ``[1, T, H]``: RMSNorm gated by
        ``z``, then ``out_proj``."""
        dv = self.cfg.linear_value_head_dim
        return self.out_proj(self.norm(o.reshape(-1, dv), z.reshape(-1, dv)).reshape(1, o.shape[0], -1))


class SparseMoE(nn.Module):
    """Qwen3-Next's MLP: top-k softmax router over experts plus a sigmoid-gated shared expert.

    A plain reference path (a loop over the experts that received tokens), not a fused kernel.
    """

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.cfg = cfg
        e, h, i = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.router = nn.Linear(h, e, bias=False)
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))  # [E, 2I, H]: gate rows, then up rows
        self.down_proj = nn.Parameter(torch.empty(e, h, i))  # [E, H, I]
        nn.init.normal_(self.gate_up_proj, 0.0, h**-0.5)
        nn.init.normal_(self.down_proj, 0.0, i**-0.5)
        self.shared = MLP(h, cfg.shared_expert_intermediate_size)
        self.shared_gate = nn.Linear(h, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., H]`` -> ``[..., H]``: the top-k experts weighted by the router, plus the gated shared expert."""
        shape = x.shape
        flat = x.reshape(-1, shape[-1])  # [N, H]
        logits = self.router(flat)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        top_p, top_i = torch.topk(probs, self.cfg.num_experts_per_tok, dim=-1)  # [N, K]
        if self.cfg.norm_topk_prob:
            top_p = top_p / top_p.sum(dim=-1, keepdim=True)
        top_p = top_p.to(logits.dtype)
        out = torch.zeros_like(flat)
        for e in top_i.unique().tolist():  # ascending, as transformers accumulates
            tok, slot = torch.where(top_i == e)
            gate, up = F.linear(flat[tok], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down_proj[e]) * top_p[tok, slot, None]
            out.index_add_(0, tok, y.to(out.dtype))
        out = out + torch.sigmoid(self.shared_gate(flat)) * self.shared(flat)
        return out.reshape(shape)


class HybridLayer(nn.Module):
    """One decoder layer's modules: ``attn_norm`` + ``mixer`` (GDN or gated attention), ``mlp_norm`` + ``mlp``.

    :class:`~specdec.models.hybrid.HybridTarget` runs them pre-norm with residuals:
    ``x = x + mixer(attn_norm(x))``, then ``x = x + mlp(mlp_norm(x))``.
    """

    def __init__(self, cfg: HybridConfig, index: int):
        super().__init__()
        self.is_gdn = cfg.layer_types[index] == "linear_attention"
        self.attn_norm = CenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mixer = GatedDeltaNet(cfg) if self.is_gdn else GatedAttention(cfg)
        self.mlp_norm = CenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SparseMoE(cfg) if cfg.is_moe(index) else MLP(cfg.hidden_size, cfg.intermediate_size)
