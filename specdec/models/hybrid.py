"""Lean runtime for hybrid targets: Gated DeltaNet (GDN) layers mixed with gated attention layers.

Covers the Qwen3.5 (``qwen3_5_text``) and Qwen3-Next (``qwen3_next``) layouts with one implementation
described by :class:`HybridConfig`. Attention layers keep a static KV cache exactly like the dense
:class:`~specdec.models.dense.DenseTarget` (the cache write, attention and compaction are shared code).
GDN layers keep a committed recurrent state ``[Hv, dk, dv]`` (fp32) and a conv state ``[C, W - 1]``.

How the recurrent state follows a draft tree (``docs/hybrid.md`` has the long form):

* :meth:`HybridTarget.forward` over ``T`` new rows treats them as a forest hanging below the committed
  prefix: ``tree_parents[t]`` is the parent row of row ``t`` (``-1`` = child of the committed prefix);
  without it the rows are a chain (``tree_parents = [-1, 0, 1, ...]``). Every row's GDN output is
  computed from its own root-to-row path (:func:`specdec.kernels.gdn.gdn_tree`; conv window = the row,
  its ancestors, then the committed conv state: :func:`~specdec.kernels.gdn.tree_causal_conv`). The
  committed states are only read.
* :meth:`HybridTarget.commit` replays the accepted rows' path exactly
  (:func:`~specdec.kernels.gdn.gdn_tree_commit`, :func:`~specdec.kernels.gdn.conv_state_commit`) and
  compacts the attention K/V of those rows.
* Recurrent state cannot be cut back, so the states live in a ring of ``state_slots`` buffers: each
  commit writes the new state into another slot (no extra copy) and remembers its length, and
  :meth:`HybridTarget.truncate` can go back exactly to any length still held in the ring (the
  drafter use), and raises otherwise.

``HybridTarget`` subclasses the dense ``Target`` only to share its plain API (devices, input checks,
RoPE tables, ``room``) and so that code that accepts a lean target (``ModelDrafter``) accepts it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from specdec.kernels.gdn import build_tree_meta, conv_state_commit, gdn_tree, gdn_tree_commit, tree_causal_conv
from specdec.models.config import HYBRID_MODEL_TYPES, rope_inv_freq
from specdec.contracts.plan import VerifyPlan
from specdec.models.dense import (
    MLP,
    DenseTarget,
    TargetOutput,
    _rotate_half,
    cached_attention,
    compact_kv,
    load_weights,
    prefix_attention_mask,
)

__all__ = ["HybridConfig", "HybridTarget", "build_hybrid_target", "random_hybrid_target"]

_GDN_METHODS = ("auto", "path", "wy", "naive")
# the dense tree-WY kernel covers up to 64 rows and is the fastest there (benchmarks/NOTES.md, GDN tree kernels)
_WY_MAX_ROWS = 64
_BACKENDS = ("auto", "triton", "torch")
_LAYER_TYPES = ("linear_attention", "full_attention")


@dataclass(frozen=True)
class HybridConfig:
    """Shape and numerics of a GDN / attention hybrid (Qwen3.5 text, Qwen3-Next), from an HF config.

    ``layer_types[i]`` is ``"linear_attention"`` (a GDN layer) or ``"full_attention"``. Attention:
    ``q_proj`` emits a query and an output gate per head, per-head (1 + w) RMSNorm on q and k, RoPE on
    the first ``rotary_dim`` channels of each head. GDN: ``Hk`` key heads and ``Hv`` value heads of
    ``dk`` / ``dv`` channels, a depthwise causal conv of width ``conv_kernel`` over ``[q | k | v]``.
    ``num_experts > 0`` makes the MLP of layer ``i`` a sparse MoE when :meth:`is_moe` says so.

    Example:
        >>> cfg = HybridConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_layers=2,
        ...                    layer_types=("linear_attention", "full_attention"), num_heads=4, num_kv_heads=2,
        ...                    head_dim=16, rotary_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
        ...                    linear_key_head_dim=8, linear_value_head_dim=8)
        >>> cfg.conv_dim, cfg.gdn_layers, cfg.attention_layers
        (64, (0,), (1,))
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    layer_types: tuple[str, ...]
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rotary_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int = 4
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_parameters: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    model_type: str = "qwen3_5_text"
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        if len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types: expected {self.num_layers} entries, got {len(self.layer_types)}")
        bad = [t for t in self.layer_types if t not in _LAYER_TYPES]
        if bad:
            raise ValueError(f"layer_types: expected entries in {_LAYER_TYPES}, got {bad[0]!r}")
        hk, hv = self.linear_num_key_heads, self.linear_num_value_heads
        if hk < 1 or hv % hk != 0:
            raise ValueError(f"linear_num_value_heads: expected a multiple of linear_num_key_heads = {hk}, got {hv}")
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(f"num_heads: expected a multiple of num_kv_heads = {self.num_kv_heads}, got {self.num_heads}")
        if not (0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0):
            raise ValueError(f"rotary_dim: expected an even int in (0, head_dim = {self.head_dim}], got {self.rotary_dim}")

    # ---- derived sizes ------------------------------------------------------------------------
    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the short conv: ``[q (Hk dk) | k (Hk dk) | v (Hv dv)]``."""
        return 2 * self.key_dim + self.value_dim

    @property
    def gdn_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == "linear_attention")

    @property
    def attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == "full_attention")

    def is_moe(self, layer: int) -> bool:
        """Whether layer ``layer`` has a sparse MoE MLP (transformers' Qwen3-Next rule)."""
        return (self.num_experts > 0 and layer not in self.mlp_only_layers
                and (layer + 1) % self.decoder_sparse_step == 0)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_hf(cls, hf_config: Any) -> "HybridConfig":
        """Build from a transformers ``Qwen3_5TextConfig`` / ``Qwen3NextConfig``."""
        model_type = getattr(hf_config, "model_type", None)
        if model_type not in HYBRID_MODEL_TYPES:
            raise ValueError(f"model_type: expected one of {HYBRID_MODEL_TYPES} (hybrids), got {model_type!r}")
        act = getattr(hf_config, "hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise ValueError(f"hidden_act: expected 'silu', got {act!r}")
        hidden = hf_config.hidden_size
        num_heads = hf_config.num_attention_heads
        head_dim = getattr(hf_config, "head_dim", None) or hidden // num_heads
        rope = dict(getattr(hf_config, "rope_parameters", None) or {})
        partial = float(rope.get("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", 1.0)))
        theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
        eos = getattr(hf_config, "eos_token_id", None)
        eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))
        moe = model_type == "qwen3_next" and getattr(hf_config, "num_experts", 0) > 0
        return cls(
            vocab_size=hf_config.vocab_size,
            hidden_size=hidden,
            intermediate_size=hf_config.intermediate_size,
            num_layers=hf_config.num_hidden_layers,
            layer_types=tuple(hf_config.layer_types),
            num_heads=num_heads,
            num_kv_heads=getattr(hf_config, "num_key_value_heads", None) or num_heads,
            head_dim=head_dim,
            rotary_dim=int(head_dim * partial),
            linear_num_key_heads=hf_config.linear_num_key_heads,
            linear_num_value_heads=hf_config.linear_num_value_heads,
            linear_key_head_dim=hf_config.linear_key_head_dim,
            linear_value_head_dim=hf_config.linear_value_head_dim,
            linear_conv_kernel_dim=hf_config.linear_conv_kernel_dim,
            rms_norm_eps=hf_config.rms_norm_eps,
            rope_theta=float(theta),
            rope_parameters=rope,
            max_position_embeddings=getattr(hf_config, "max_position_embeddings", 4096),
            tie_word_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            attention_bias=bool(getattr(hf_config, "attention_bias", False)),
            num_experts=int(hf_config.num_experts) if moe else 0,
            num_experts_per_tok=int(hf_config.num_experts_per_tok) if moe else 0,
            moe_intermediate_size=int(hf_config.moe_intermediate_size) if moe else 0,
            shared_expert_intermediate_size=int(hf_config.shared_expert_intermediate_size) if moe else 0,
            norm_topk_prob=bool(getattr(hf_config, "norm_topk_prob", True)),
            decoder_sparse_step=int(getattr(hf_config, "decoder_sparse_step", 1) or 1),
            mlp_only_layers=tuple(getattr(hf_config, "mlp_only_layers", None) or ()),
            model_type=model_type,
            eos_token_ids=eos_ids,
        )

    def rope_inv_freq(self, hf_config: Any | None = None) -> tuple[torch.Tensor, float]:
        """Inverse RoPE frequencies ``[rotary_dim // 2]`` (fp32) and the attention scaling factor.

        Qwen3.5's interleaved M-RoPE reduces to this for text: its three position components are equal.
        """
        return rope_inv_freq(self.rope_parameters, self.rope_theta, self.rotary_dim, hf_config)


# --------------------------------------------------------------------------------------------------
class CenteredRMSNorm(nn.Module):
    """RMSNorm with a zero-centred weight, ``x_hat * (1 + w)`` computed in fp32 (Qwen3-Next / Qwen3.5)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.float()
        out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class GatedRMSNorm(nn.Module):
    """GDN output norm: RMS-normalise over dv, plain weight, then multiply by SiLU(z)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        out = x.float()
        out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + self.eps)
        out = self.weight * out.to(dtype)
        return (out * F.silu(gate.float())).to(dtype)


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
        cfg = self.cfg
        bsz, seqlen, _ = x.shape
        qg, k, v = self.wqkv(x).split([2 * cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
        q, gate = qg.view(bsz, seqlen, cfg.num_heads, 2 * cfg.head_dim).chunk(2, dim=-1)
        gate = gate.reshape(bsz, seqlen, cfg.q_size)
        q = self.q_norm(q).transpose(1, 2)  # [B, H, T, D]
        k = self.k_norm(k.view(bsz, seqlen, cfg.num_kv_heads, cfg.head_dim)).transpose(1, 2)
        v = v.view(bsz, seqlen, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        r = cos.shape[-1]  # partial RoPE: only the first r channels of each head rotate
        q = torch.cat([q[..., :r] * cos + _rotate_half(q[..., :r]) * sin, q[..., r:]], dim=-1)
        k = torch.cat([k[..., :r] * cos + _rotate_half(k[..., :r]) * sin, k[..., r:]], dim=-1)
        out = cached_attention(q, k, v, k_cache, v_cache, slots, attn_mask)  # [B, T, H*D]
        return self.wo(out * torch.sigmoid(gate))


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
        mixed, z, b, a = self.in_proj(x[0]).split([cfg.conv_dim, cfg.value_dim, hv, hv], dim=-1)  # [T, .]
        y = tree_causal_conv(mixed, meta, conv_state, self.conv_weight, activation="silu", backend=backend)  # [T, C]
        q, k, v = y.split([cfg.key_dim, cfg.key_dim, cfg.value_dim], dim=-1)
        q = q.reshape(seqlen, hk, dk)
        k = k.reshape(seqlen, hk, dk)
        v = v.reshape(seqlen, hv, dv)
        beta = b.sigmoid()  # [T, Hv]
        # fp32 gates: in half precision exp(A_log) may overflow (transformers does the same)
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)  # [T, Hv]
        o = gdn_tree(q, k, v, g, beta, meta, state, use_qk_l2norm=True, method=method, backend=backend)  # [T, Hv, dv]
        o = self.norm(o.reshape(-1, dv), z.reshape(-1, dv)).reshape(1, seqlen, cfg.value_dim)
        return self.out_proj(o), (mixed, k, v, g, beta)


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
        self.shared = MLP(SimpleNamespace(hidden_size=h, intermediate_size=cfg.shared_expert_intermediate_size))
        self.shared_gate = nn.Linear(h, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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
    def __init__(self, cfg: HybridConfig, index: int):
        super().__init__()
        self.is_gdn = cfg.layer_types[index] == "linear_attention"
        self.attn_norm = CenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mixer = GatedDeltaNet(cfg) if self.is_gdn else GatedAttention(cfg)
        self.mlp_norm = CenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SparseMoE(cfg) if cfg.is_moe(index) else MLP(cfg)


# --------------------------------------------------------------------------------------------------
class HybridTarget(DenseTarget):
    """A GDN / attention hybrid with a static KV cache and exact tree-path GDN state (batch 1).

    Same contract as :class:`~specdec.models.dense.DenseTarget`: :meth:`forward` runs ``T`` new rows
    without committing them; :meth:`commit` keeps the accepted rows and advances ``length``.

    Args:
        config: the model's shape.
        max_seq_len: KV cache capacity in tokens.
        inv_freq: RoPE inverse frequencies ``[rotary_dim // 2]``; default from ``config``.
        attention_scaling: RoPE cos/sin scale.
        state_slots: GDN state buffers kept in a ring (>= 2): :meth:`truncate` can go back to the
            lengths of the last ``state_slots - 1`` commits. Memory: ``state_slots`` x (all GDN states).
        gdn_method: ``"auto"`` (``"wy"`` for forwards of up to 64 rows, ``"path"`` above) | ``"path"`` |
            ``"wy"`` | ``"naive"``, passed to :func:`~specdec.kernels.gdn.gdn_tree`.
        backend: ``"auto"`` (Triton on CUDA) | ``"triton"`` | ``"torch"`` for the GDN kernels.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target("qwen3_5_text", seed=0)
        >>> out = target(torch.tensor([[1, 2, 3]]))
        >>> out.logits.shape
        torch.Size([1, 3, 97])
        >>> out = target(torch.tensor([[1, 2, 3]]), tree_parents=torch.tensor([-1, 0, 0]))  # rows 1, 2 siblings
        >>> target.commit(torch.tensor([0, 2])); target.length
        2
    """

    def __init__(
        self,
        config: HybridConfig,
        *,
        max_seq_len: int = 4096,
        inv_freq: torch.Tensor | None = None,
        attention_scaling: float = 1.0,
        state_slots: int = 8,
        gdn_method: str = "auto",
        backend: str = "auto",
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        nn.Module.__init__(self)  # the dense constructor builds dense layers; only the API is shared
        if max_seq_len < 2:
            raise ValueError(f"max_seq_len: expected >= 2, got {max_seq_len}")
        if isinstance(state_slots, bool) or not isinstance(state_slots, int) or state_slots < 2:
            raise ValueError(f"state_slots: expected an int >= 2, got {state_slots!r}")
        if gdn_method not in _GDN_METHODS:
            raise ValueError(f"gdn_method: expected one of {_GDN_METHODS}, got {gdn_method!r}")
        if backend not in _BACKENDS:
            raise ValueError(f"backend: expected one of {_BACKENDS}, got {backend!r}")
        self.config = config
        self.max_seq_len = max_seq_len
        self.gdn_method = gdn_method
        self.backend = backend
        with torch.device(device):
            self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
            self.layers = nn.ModuleList(HybridLayer(config, i) for i in range(config.num_layers))
            self.norm = CenteredRMSNorm(config.hidden_size, config.rms_norm_eps)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.to(dtype=dtype, device=device)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        if inv_freq is None:
            inv_freq, attention_scaling = config.rope_inv_freq()
        self.register_buffer("inv_freq", inv_freq.float().to(device), persistent=False)
        self.attention_scaling = attention_scaling
        self.length = 0
        self._last_rows = 0
        self._graph_pad = 0
        self._graphs = None
        self._state_slots = state_slots
        self._allocate_cache()

    # ---- caches -------------------------------------------------------------------------------------
    def _allocate_cache(self) -> None:
        cfg = self.config
        n_attn, n_gdn = len(cfg.attention_layers), len(cfg.gdn_layers)
        shape = (1, cfg.num_kv_heads, self.max_seq_len, cfg.head_dim)
        self.k_caches = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(n_attn)]
        self.v_caches = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(n_attn)]
        hv, dk, dv = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
        slots = self._state_slots
        # [slot, GDN layer, ...]; recurrent state in fp32 whatever the weights (as the kernels require)
        self._rec = torch.zeros(slots, n_gdn, hv, dk, dv, dtype=torch.float32, device=self.device)
        self._conv = torch.zeros(slots, n_gdn, cfg.conv_dim, cfg.linear_conv_kernel_dim - 1, dtype=self.dtype, device=self.device)
        self.reset()

    def reset(self) -> None:
        """Forget every cached token: empty KV, zero GDN states (buffers are kept)."""
        self.length = 0
        self._last_rows = 0
        self._stash = None
        self._last_parents = None
        self._slot = 0
        self._slot_len = [0] + [-1] * (self._state_slots - 1)  # committed length each slot holds, -1 = none
        self._rec[0].zero_()
        self._conv[0].zero_()

    @property
    def recurrent_states(self) -> torch.Tensor:
        """``[num_gdn_layers, Hv, dk, dv]`` fp32 committed recurrent states (a view)."""
        return self._rec[self._slot]

    @property
    def conv_states(self) -> torch.Tensor:
        """``[num_gdn_layers, conv_dim, W - 1]`` committed conv states, oldest column first (a view)."""
        return self._conv[self._slot]

    def truncate(self, length: int) -> None:
        """Roll back to the first ``length`` committed tokens.

        Exact, but only to a length whose GDN state is still in the ring (0, the current length, or the
        lengths after the last ``state_slots - 1`` commits); any other length raises ``ValueError``.
        """
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.length:
            raise ValueError(f"length: expected 0 <= length <= {self.length}, got {length!r}")
        self._last_rows = 0
        self._stash = None
        if length == self.length:
            return
        if length == 0:
            self.reset()
            return
        held = [s for s, n in enumerate(self._slot_len) if n == length]
        if not held:
            kept = sorted(n for n in self._slot_len if n >= 0)
            raise ValueError(
                f"length: a hybrid target can only roll back to a length whose recurrent state it still "
                f"holds (0 or one of {kept}); got {length}. Raise state_slots to keep more."
            )
        self._slot = held[0]
        # states past the new length belong to a discarded continuation
        self._slot_len = [n if n <= length else -1 for n in self._slot_len]
        self.length = length

    def enable_cuda_graphs(self, *args, **kwargs) -> None:
        raise NotImplementedError("enable_cuda_graphs: not implemented for hybrid targets (eager forwards only)")

    def run_plan(self, plan: VerifyPlan, *, hidden_layers: Sequence[int] = ()) -> TargetOutput:
        """The forward of a :class:`~specdec.contracts.VerifyPlan`; the GDN tree tables give mask and positions.

        The plan's parents are the only topology read, so the tree is not derived a second time here.
        """
        return self(plan.tokens, hidden_layers=hidden_layers, tree_parents=plan.row_parents)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        hidden_layers: Sequence[int] = (),
        tree_parents: torch.Tensor | None = None,
    ) -> TargetOutput:
        """Run ``T`` new rows against the committed prefix; nothing is committed.

        Args:
            tokens: ``[1, T]`` int64 token ids.
            positions: ``[1, T]`` RoPE positions; default ``length + depth`` (a chain: ``length + t``).
            mask: ``[T, T]`` bool attention mask over the new rows. It must be the ancestor-or-self mask
                of the rows' tree (a GDN state can only follow a tree); without ``tree_parents`` the
                tree is read off it (parent = nearest earlier row the row sees).
            hidden_layers: layer indices whose outputs to return (HF ``hidden_states`` numbering).
            tree_parents: ``[T]`` integer parent row of each row, ``-1`` = child of the committed
                prefix, ``tree_parents[t] < t``. For a verify window ``[root, node_0, ...]`` of a
                :class:`~specdec.verify.tree.Tree`: ``[-1] + (tree.parents + 1)``. Default: a chain.

        Returns:
            :class:`TargetOutput` with float32 logits ``[1, T, V]``.
        """
        self._check_inputs(tokens, positions, mask, hidden_layers)
        seqlen = tokens.shape[1]
        device = self.device
        meta, host_parents = self._tree(seqlen, mask, tree_parents)
        if mask is None and host_parents is not None:
            mask = meta.ancestors[0].bool()
        if positions is None:
            positions = (self.length + meta.depth.to(torch.long))
        slots = self.length + torch.arange(seqlen, device=device)
        attn_mask = prefix_attention_mask(self.length, seqlen, mask, device)
        kv_len = self.length + seqlen
        cos, sin = self._rope(positions)
        x = self.embed(tokens)
        taps: dict[int, torch.Tensor] = {0: x} if 0 in hidden_layers else {}
        stash = []
        rec, conv = self.recurrent_states, self.conv_states
        a = g = 0
        method = self.gdn_method
        if method == "auto":
            method = "wy" if seqlen <= _WY_MAX_ROWS else "path"
        for i, layer in enumerate(self.layers):
            h = layer.attn_norm(x)
            if layer.is_gdn:
                out, saved = layer.mixer(h, rec[g], conv[g], meta, method=method, backend=self.backend)
                stash.append(saved)
                g += 1
            else:
                k_cache, v_cache = self.k_caches[a][:, :, :kv_len], self.v_caches[a][:, :, :kv_len]
                out = layer.mixer(h, cos, sin, k_cache, v_cache, slots, attn_mask)
                a += 1
            x = x + out
            x = x + layer.mlp(layer.mlp_norm(x))
            if i + 1 in hidden_layers:
                taps[i + 1] = x
        x = self.norm(x)
        if len(self.layers) in hidden_layers:  # HF's last hidden state is the normed one
            taps[len(self.layers)] = x
        logits = self.lm_head(x).float()
        self._last_rows = seqlen
        self._stash = stash
        self._last_parents = host_parents
        return TargetOutput(logits=logits, hidden=tuple(taps[layer] for layer in hidden_layers))

    def _tree(self, seqlen: int, mask, tree_parents):
        """The rows' topology: ``(TreeMeta, host parent list or None for a chain)``."""
        device = self.device
        if tree_parents is None and mask is not None:
            # parent = the nearest earlier row a row attends (rows are in topological order)
            earlier = mask & torch.ones(seqlen, seqlen, dtype=torch.bool, device=device).tril(-1)
            idx = torch.arange(seqlen, device=device)
            tree_parents = torch.where(earlier, idx, -1).amax(dim=1)
        if tree_parents is None:
            meta = build_tree_meta(torch.arange(-1, seqlen - 1, device=device), validate=False)
            return meta, None
        if not isinstance(tree_parents, torch.Tensor):
            raise TypeError(f"tree_parents: expected an integer tensor [{seqlen}], got {type(tree_parents).__name__}")
        if tree_parents.dtype == torch.bool or tree_parents.is_floating_point() or tree_parents.is_complex():
            raise TypeError(f"tree_parents: expected an integer dtype, got {tree_parents.dtype}")
        if tuple(tree_parents.shape) != (seqlen,):
            raise ValueError(f"tree_parents: expected shape ({seqlen},) (one parent per row), got {tuple(tree_parents.shape)}")
        if tree_parents.device != device:
            raise ValueError(f"tree_parents: expected device {device}, got {tree_parents.device}")
        host = tree_parents.tolist()
        for t, p in enumerate(host):
            if not -1 <= p < t:
                raise ValueError(
                    f"tree_parents: expected -1 <= tree_parents[t] < t (topological order), got tree_parents[{t}] = {p}"
                )
        meta = build_tree_meta(tree_parents.to(torch.long), validate=False)
        if mask is not None and not torch.equal(mask, meta.ancestors[0].bool()):
            raise ValueError("mask: expected the ancestor-or-self mask of the rows' tree; a GDN layer can only follow a tree")
        return meta, host

    # ---- commit ---------------------------------------------------------------------------------------
    def commit(self, accepted: int | torch.Tensor) -> None:
        """Keep the accepted rows of the last forward: replay their path into the GDN states, compact K/V.

        Args:
            accepted: ``n`` keeps the first ``n`` rows (they must form a path: a chain forward, or a
                tree whose first ``n`` rows are a chain); a LongTensor ``[n]`` of rows forming a
                root-to-node path of the last forward's tree (ascending; first row a child of the
                committed prefix, each next row a child of the previous).
        """
        parents = self._last_parents
        if isinstance(accepted, int) and not isinstance(accepted, bool):
            if not 0 <= accepted <= self._last_rows:
                raise ValueError(f"accepted: expected 0 <= n <= {self._last_rows} (rows of the last forward), got {accepted}")
            rows = list(range(accepted))
            path = torch.arange(accepted, device=self.device)
            move = False
        elif isinstance(accepted, torch.Tensor) and accepted.ndim == 1 and accepted.dtype == torch.long:
            if accepted.numel() > self._last_rows:
                raise ValueError(f"accepted: expected at most {self._last_rows} rows, got {accepted.numel()}")
            rows = accepted.tolist()
            path = accepted.to(self.device)
            move = rows != list(range(len(rows)))
        else:
            desc = f"{accepted.dtype} {tuple(accepted.shape)}" if isinstance(accepted, torch.Tensor) else type(accepted).__name__
            raise TypeError(f"accepted: expected an int or a 1-D int64 tensor, got {desc}")
        for j, r in enumerate(rows):
            want = rows[j - 1] if j else -1
            got = (r - 1 if parents is None else parents[r]) if 0 <= r < self._last_rows else None
            if got != want:
                raise ValueError(
                    f"accepted: expected a root-to-node path of the last forward's rows; row {r} at position {j} "
                    f"{'is out of range' if got is None else f'has parent {got}, not {want}'}"
                )
        n = len(rows)
        if n:
            nxt = self._free_slot()
            cur_rec, cur_conv = self.recurrent_states, self.conv_states
            for g, (mixed, k, v, gate, beta) in enumerate(self._stash):
                gdn_tree_commit(k, v, gate, beta, path, cur_rec[g], backend=self.backend, out=self._rec[nxt, g])
                self._conv[nxt, g].copy_(conv_state_commit(mixed, path, cur_conv[g]))
            if move:
                compact_kv(self.k_caches, self.v_caches, self.length, path)
            self._slot = nxt
            self._slot_len[nxt] = self.length + n
        self.length += n
        self._last_rows = 0
        self._stash = None

    def _free_slot(self) -> int:
        """A ring slot to write the next state into: an empty one, else the one with the shortest length."""
        others = [s for s in range(self._state_slots) if s != self._slot]
        empty = [s for s in others if self._slot_len[s] < 0]
        return empty[0] if empty else min(others, key=lambda s: self._slot_len[s])


# --------------------------------------------------------------------------------------------------
def _hybrid_state_from_hf(cfg: HybridConfig, hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map HF tensor names of either layout to the runtime's (Qwen3-Next's GDN rows regrouped)."""

    def take(name: str) -> torch.Tensor:
        if name not in hf_state:
            raise ValueError(f"checkpoint: missing tensor {name!r}")
        return hf_state[name]

    state: dict[str, torch.Tensor] = {"embed.weight": take("model.embed_tokens.weight"), "norm.weight": take("model.norm.weight")}
    if not cfg.tie_word_embeddings:
        state["lm_head.weight"] = hf_state.get("lm_head.weight", state["embed.weight"])
    hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv, r = cfg.linear_key_head_dim, cfg.linear_value_head_dim, hv // hk
    for i in range(cfg.num_layers):
        hf, ours = f"model.layers.{i}.", f"layers.{i}."
        state[ours + "attn_norm.weight"] = take(hf + "input_layernorm.weight")
        state[ours + "mlp_norm.weight"] = take(hf + "post_attention_layernorm.weight")
        if cfg.layer_types[i] == "linear_attention":
            lin, mix = hf + "linear_attn.", ours + "mixer."
            if cfg.model_type == "qwen3_next":
                # per key group g: [q_g (dk) | k_g (dk) | v_g (r dv) | z_g (r dv)] and [b_g (r) | a_g (r)]
                w = take(lin + "in_proj_qkvz.weight")
                w = w.view(hk, 2 * dk + 2 * r * dv, -1)
                q, k, v, z = w.split([dk, dk, r * dv, r * dv], dim=1)
                ba = take(lin + "in_proj_ba.weight").view(hk, 2 * r, -1)
                b, a = ba.split([r, r], dim=1)
                flat = [t.reshape(-1, w.shape[-1]) for t in (q, k, v, z, b, a)]
            else:
                flat = [take(lin + f"in_proj_{p}.weight") for p in ("qkv", "z", "b", "a")]
            state[mix + "in_proj.weight"] = torch.cat(flat)
            state[mix + "conv_weight"] = take(lin + "conv1d.weight")[:, 0, :]
            for p in ("A_log", "dt_bias", "norm.weight", "out_proj.weight"):
                state[mix + p] = take(lin + p)
        else:
            attn, mix = hf + "self_attn.", ours + "mixer."
            state[mix + "wqkv.weight"] = torch.cat([take(attn + f"{p}_proj.weight") for p in "qkv"])
            state[mix + "wo.weight"] = take(attn + "o_proj.weight")
            if cfg.attention_bias:
                state[mix + "wqkv.bias"] = torch.cat([take(attn + f"{p}_proj.bias") for p in "qkv"])
                state[mix + "wo.bias"] = take(attn + "o_proj.bias")
            state[mix + "q_norm.weight"] = take(attn + "q_norm.weight")
            state[mix + "k_norm.weight"] = take(attn + "k_norm.weight")
        mlp, om = hf + "mlp.", ours + "mlp."
        if cfg.is_moe(i):
            state[om + "router.weight"] = take(mlp + "gate.weight")
            if mlp + "experts.gate_up_proj" in hf_state:
                state[om + "gate_up_proj"] = take(mlp + "experts.gate_up_proj")
                state[om + "down_proj"] = take(mlp + "experts.down_proj")
            else:  # per-expert modules (older transformers)
                ex = [f"{mlp}experts.{e}." for e in range(cfg.num_experts)]
                state[om + "gate_up_proj"] = torch.stack(
                    [torch.cat([take(p + "gate_proj.weight"), take(p + "up_proj.weight")]) for p in ex])
                state[om + "down_proj"] = torch.stack([take(p + "down_proj.weight") for p in ex])
            sh = mlp + "shared_expert."
            state[om + "shared.w13.weight"] = torch.cat([take(sh + "gate_proj.weight"), take(sh + "up_proj.weight")])
            state[om + "shared.w2.weight"] = take(sh + "down_proj.weight")
            state[om + "shared_gate.weight"] = take(mlp + "shared_expert_gate.weight")
        else:
            state[om + "w13.weight"] = torch.cat([take(mlp + "gate_proj.weight"), take(mlp + "up_proj.weight")])
            state[om + "w2.weight"] = take(mlp + "down_proj.weight")
    return state


def build_hybrid_target(
    cfg: HybridConfig,
    hf_state: Mapping[str, torch.Tensor],
    *,
    hf_config: Any = None,
    dtype: torch.dtype,
    device: torch.device | str,
    max_seq_len: int,
    **kwargs: Any,
) -> HybridTarget:
    """Allocate a :class:`HybridTarget` and copy HF-named weights (either layout) into it."""
    inv_freq, scaling = cfg.rope_inv_freq(hf_config)
    target = HybridTarget(cfg, max_seq_len=max_seq_len, inv_freq=inv_freq, attention_scaling=scaling, dtype=dtype,
                          device=device, **kwargs)
    load_weights(target, _hybrid_state_from_hf(cfg, hf_state), tied=cfg.tie_word_embeddings)
    return target.eval().requires_grad_(False)


def random_hybrid_target(
    cfg: HybridConfig,
    *,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str = "cuda",
    max_seq_len: int = 4096,
    seed: int = 0,
    **kwargs: Any,
) -> HybridTarget:
    """A hybrid target with random weights at a real model's shape (timing and exactness work).

    Matrices ``N(0, 1 / fan_in)``, embeddings ``N(0, 1)``, (1 + w) norms 0, gated norms 1,
    ``A_log = log U(1, 16)`` and ``dt_bias = 1`` (transformers' init).
    """
    target = HybridTarget(cfg, max_seq_len=max_seq_len, dtype=dtype, device=device, **kwargs)
    gen = torch.Generator(device=target.device).manual_seed(seed)
    with torch.no_grad():
        for name, param in target.named_parameters():
            if name.endswith("mixer.norm.weight") or name.endswith("dt_bias"):
                param.fill_(1.0)
            elif name.endswith("norm.weight") or name.endswith("bias"):
                param.zero_()
            elif name.endswith("A_log"):
                param.uniform_(1.0, 16.0, generator=gen).log_()
            elif name == "embed.weight":
                param.normal_(0.0, 1.0, generator=gen)
            else:
                param.normal_(0.0, param.shape[-1] ** -0.5, generator=gen)
    return target.eval().requires_grad_(False)
