"""Lean runtime for dense decoders (Llama, Qwen2, Qwen3): static KV cache, explicit positions,
tree masks, hidden-state taps, and a commit that keeps only accepted rows.

The whole model is one class described by :class:`TargetConfig`; there is no per-family file.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from specdec.contracts.target import TargetOutput
from specdec.kernels.act import silu_mul
from specdec.kernels.attention import additive_mask, decode_attention_token_major
from specdec.kernels.norm import add_scaled_rms_norm, scaled_rms_norm
from specdec.kernels.rope import qk_norm_rope_cached
from specdec.models.attention_kernel import attention_choice
from specdec.models.base import LeanTarget, check_committed_path, tree_rows_inputs
from specdec.models.config import TargetConfig
from specdec.models.elementwise import elementwise_backend


def load_weights(module: nn.Module, state: dict[str, torch.Tensor], *, tied: bool) -> None:
    """Copy runtime-named weights into ``module`` (cast to its dtype); every parameter must be given.

    A tied ``lm_head`` shares the embedding parameter, so it never appears in ``state``.
    """
    dtype = next(module.parameters()).dtype
    missing, unexpected = module.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
    missing = [m for m in missing if not (tied and m == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"checkpoint: missing tensors {missing}, unexpected tensors {unexpected}")


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension, normalised in fp32, then scaled by ``weight [dim]`` (Llama / Qwen).

    Example:
        >>> RMSNorm(4, eps=0.0)(torch.tensor([[2.0, -2.0, 2.0, -2.0]])).detach()
        tensor([[ 1., -1.,  1., -1.]])
    """

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., dim]`` -> ``weight * x / rms(x)``, ``[..., dim]`` in ``x``'s dtype.

        One Triton launch on CUDA (:func:`specdec.kernels.norm.scaled_rms_norm`), the reference elsewhere and where
        :func:`~specdec.models.elementwise.elementwise_backend` picks it (a gradient wanted, ``torch.compile``,
        :func:`~specdec.models.elementwise.elementwise_kernels` ``("torch")``).
        """
        return scaled_rms_norm(x, self.weight, self.eps, backend=elementwise_backend(x, self.weight))


def cached_attention(q, k, v, k_cache, v_cache, slots, attn_mask) -> torch.Tensor:
    """Write the new rows' K/V into a static cache, then attend over it (shared by every runtime).

    Args:
        q: ``[B, H, T, D]`` queries (RoPE applied); k, v: ``[B, Hkv, T, D]``.
        k_cache, v_cache: ``[B, Hkv, S, D]`` views of the cache slots in use; written at ``slots [T]``.
        attn_mask: ``[1, 1, T, S]`` bool, ``True`` where a row may attend a slot.

    Returns:
        ``[B, T, H * D]`` attention output (before the output projection).
    """
    k_cache.index_copy_(2, slots, k)  # [B, Hkv, S, D]
    v_cache.index_copy_(2, slots, v)
    return attend_cache(q, k_cache, v_cache, attn_mask)


def attend_cache(q, k_cache, v_cache, attn_mask) -> torch.Tensor:
    """``q [B, H, T, D]`` over a cache that already holds the rows' own K/V -> ``[B, T, H * D]`` (see
    :func:`cached_attention`); ``attn_mask`` ``[1, 1, T, S]``, or :func:`grouped_mask`'s ``[1, 1, G * T, S]``, boolean
    or :func:`specdec.kernels.attention.additive_mask`'s (what the dense runtime passes: built once a forward). SDPA, or the split-KV kernel
    within :func:`specdec.models.attention_kernel.attention_kernel` ``("split_kv")``."""
    bsz, num_heads, seqlen, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    # GQA without copying K/V: the q heads that share a kv head become extra query rows.
    group = num_heads // num_kv_heads
    q = q.reshape(bsz, num_kv_heads, group * seqlen, head_dim)  # [B, Hkv, G*T, D]
    mask = attn_mask if attn_mask.shape[2] == group * seqlen else grouped_mask(attn_mask, group)  # [1, 1, G*T, S]
    kernel, backend = attention_choice(q)
    if kernel == "split_kv":  # written token-major: no transposing copy before the output projection
        return decode_attention_token_major(q, k_cache, v_cache, mask, seqlen, backend=backend)  # [B, T, H*D]
    out = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)  # [B, Hkv, G*T, D]
    out = out.reshape(bsz, num_heads, seqlen, head_dim)  # SDPA output may be strided
    return out.transpose(1, 2).reshape(bsz, seqlen, num_heads * head_dim)


def grouped_mask(attn_mask: torch.Tensor, group: int) -> torch.Tensor:
    """``attn_mask [1, 1, T, S]`` repeated for the ``group`` query heads that share a KV head: ``[1, 1, G * T, S]``
    (what :func:`attend_cache` feeds SDPA; a runtime builds it once a forward, not once a layer).

    Example:
        >>> grouped_mask(torch.tensor([[[[True, False]]]]), 2).shape
        torch.Size([1, 1, 2, 2])
    """
    return attn_mask.repeat(1, 1, group, 1) if group > 1 else attn_mask


def prefix_attention_mask(length: int, seqlen: int, mask: torch.Tensor | None, device) -> torch.Tensor:
    """``[1, 1, T, length + T]`` bool: the committed prefix, then the new rows by ``mask`` (default causal)."""
    local = torch.tril(torch.ones(seqlen, seqlen, dtype=torch.bool, device=device)) if mask is None else mask
    attn_mask = torch.cat([torch.ones(seqlen, length, dtype=torch.bool, device=device), local], dim=1)
    return attn_mask[None, None]


def compact_kv(k_caches, v_caches, length: int, accepted: torch.Tensor) -> None:
    """Move the K/V of verify rows ``accepted [n]`` (ascending) to slots ``[length, length + n)``."""
    device = k_caches[0].device if k_caches else accepted.device
    src = length + accepted.to(device)
    dst = length + torch.arange(accepted.numel(), device=device)
    # Ascending order and src >= dst make the in-place gather-then-scatter safe.
    for k_cache, v_cache in zip(k_caches, v_caches):
        k_cache[:, :, dst] = k_cache[:, :, src]
        v_cache[:, :, dst] = v_cache[:, :, src]


class Attention(nn.Module):
    """Grouped-query attention with fused q/k/v, optional q/k RMSNorm (Qwen3) and RoPE, on a static KV cache.

    Example:
        >>> from specdec.testing import tiny_target
        >>> cfg = tiny_target(seed=0).config                     # 4 heads, 2 kv heads, head_dim 8
        >>> attn = Attention(cfg)
        >>> T = 3; cos, sin = torch.ones(1, 1, T, 8), torch.zeros(1, 1, T, 8)       # RoPE at position 0
        >>> k_cache, v_cache = torch.zeros(1, 2, T, 8), torch.zeros(1, 2, T, 8)
        >>> out = attn(torch.randn(1, T, 32), cos, sin, k_cache, v_cache, torch.arange(T), prefix_attention_mask(0, T, None, "cpu"))
        >>> out.shape, bool(k_cache.any())
        (torch.Size([1, 3, 32]), True)
    """

    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.cfg = cfg
        # q, k and v in one matmul: one weight read per step instead of three launches.
        self.wqkv = nn.Linear(cfg.hidden_size, cfg.q_size + 2 * cfg.kv_size, bias=cfg.attention_bias)
        self.wo = nn.Linear(cfg.q_size, cfg.hidden_size, bias=cfg.o_proj_bias)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(self, x, cos, sin, k_cache, v_cache, slots, attn_mask):
        """``x [B, T, hidden_size]`` -> ``[B, T, hidden_size]``; writes the new rows' K/V into the cache.

        Args:
            cos, sin: ``[1, 1, T, head_dim]`` RoPE tables of the rows' positions.
            k_cache, v_cache, slots, attn_mask: as for :func:`cached_attention`.
        """
        cfg = self.cfg
        bsz, seqlen, _ = x.shape
        q, k, v = self.wqkv(x).split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
        q = q.view(bsz, seqlen, cfg.num_heads, cfg.head_dim)
        k = k.view(bsz, seqlen, cfg.num_kv_heads, cfg.head_dim)
        v = v.view(bsz, seqlen, cfg.num_kv_heads, cfg.head_dim)
        q = self.norm_rope_write(q, k, v, cos, sin, k_cache, v_cache, slots)  # [B, H, T, D]
        return self.wo(attend_cache(q, k_cache, v_cache, attn_mask))

    def norm_rope_write(
        self, q, k, v, cos, sin, k_cache, v_cache, cache_pos, cache_slot=None, q_out=None, q_index=None
    ) -> torch.Tensor:
        """q_norm / k_norm (Qwen3) and RoPE of ``q [B, T, H, D]``, ``k [B, T, Hkv, D]`` (views of the qkv projection),
        the rotated ``k`` and ``v`` written into the caches at ``cache_pos [T]`` (and ``cache_slot [T]``); returns
        ``q [B, H, T, D]``, or ``q_out`` with row ``t``'s q at ``[cache_slot[t], :, q_index[t]]``. One launch on
        CUDA (:func:`specdec.kernels.rope.qk_norm_rope_cached`)."""
        weights = (None, None) if self.q_norm is None else (self.q_norm.weight, self.k_norm.weight)
        eps = self.cfg.rms_norm_eps if self.q_norm is None else self.q_norm.eps
        backend = elementwise_backend(q, k, *weights)
        return qk_norm_rope_cached(
            q, k, v, cos, sin, *weights, eps, k_cache, v_cache, cache_pos, cache_slot, q_out, q_index, backend=backend
        )


class MLP(nn.Module):
    """SwiGLU MLP, ``w2(silu(gate) * up)``, with the gate and up projections fused into one ``w13``.

    Example:
        >>> MLP(32, 64)(torch.randn(1, 3, 32)).shape
        torch.Size([1, 3, 32])
    """

    def __init__(self, hidden_size: int, intermediate_size: int, *, bias: bool = False):
        super().__init__()
        self.w13 = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)  # gate and up, fused
        self.w2 = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., hidden_size]`` -> ``[..., hidden_size]``."""
        gate_up = self.w13(x)
        return self.w2(silu_mul(gate_up, backend=elementwise_backend(gate_up)))  # silu(gate) * up


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer: ``x + attn(norm(x))``, then ``+ mlp(norm(x))``.

    Example:
        >>> from specdec.testing import tiny_target
        >>> layer = DecoderLayer(tiny_target(seed=0).config)
        >>> T = 2; cos, sin = torch.ones(1, 1, T, 8), torch.zeros(1, 1, T, 8)
        >>> k_cache, v_cache = torch.zeros(1, 2, T, 8), torch.zeros(1, 2, T, 8)
        >>> layer(torch.randn(1, T, 32), cos, sin, k_cache, v_cache, torch.arange(T), prefix_attention_mask(0, T, None, "cpu")).shape
        torch.Size([1, 2, 32])
    """

    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size, bias=cfg.mlp_bias)

    def forward(self, x, cos, sin, k_cache, v_cache, slots, attn_mask):
        """``x [B, T, hidden_size]`` -> ``[B, T, hidden_size]``; arguments as for :meth:`Attention.forward`."""
        delta = self.attn(self.attn_norm(x), cos, sin, k_cache, v_cache, slots, attn_mask)
        x, h = self.add_mlp_norm(x, delta)
        return x + self.mlp(h)

    def add_mlp_norm(self, x: torch.Tensor, delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The residual ``x + delta`` and its ``mlp_norm``, one launch on CUDA
        (:func:`specdec.kernels.norm.add_scaled_rms_norm`)."""
        return add_norm(x, delta, self.mlp_norm)

    def forward_normed(self, x, h, next_norm: RMSNorm, cos, sin, k_cache, v_cache, slots, attn_mask):
        """The layer on the residual ``x`` and its ``attn_norm`` ``h`` (both ``[B, T, hidden_size]``), ending with
        the next norm's input: ``(x_out, next_norm(x_out))``, the residual add and the next layer's (or the final)
        norm in one launch on CUDA. ``forward(x, ...)`` is ``forward_normed(x, attn_norm(x), ...)[0]``."""
        delta = self.attn(h, cos, sin, k_cache, v_cache, slots, attn_mask)
        x, h = self.add_mlp_norm(x, delta)
        return add_norm(x, self.mlp(h), next_norm)


def add_norm(x: torch.Tensor, delta: torch.Tensor, norm: RMSNorm) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x + delta, norm(x + delta))`` for a scaled :class:`RMSNorm`: one launch on CUDA
    (:func:`specdec.kernels.norm.add_scaled_rms_norm`), the reference where
    :func:`~specdec.models.elementwise.elementwise_backend` picks it."""
    return add_scaled_rms_norm(x, delta, norm.weight, norm.eps, backend=elementwise_backend(x, delta, norm.weight))


class DenseTarget(LeanTarget):
    """A dense decoder with a static KV cache (batch 1), the object every verifier drives.

    The cache holds ``length`` committed tokens. :meth:`forward` appends ``T`` new rows at cache slots
    ``[length, length + T)`` without committing them; :meth:`commit` keeps the accepted rows (compacted
    in place) and advances ``length``. The newest emitted token of a speculative round (the *root*) is
    not yet in the cache: a verify forward is over ``[root, d_1, ..., d_k]``.

    Args:
        config: the model's shape.
        max_seq_len: cache capacity in tokens (prompt + generated + one verify window).
        inv_freq: RoPE inverse frequencies ``[head_dim // 2]``; default from ``config.rope_theta``.
        attention_scaling: RoPE cos/sin scale (non-default RoPE types).

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)                   # random-weight Llama-style model, fp32, CPU
        >>> out = target(torch.tensor([[1, 2, 3]]))        # causal over the new rows
        >>> out.logits.shape
        torch.Size([1, 3, 97])
        >>> target.commit(3); target.length
        3
    """

    def __init__(
        self,
        config: TargetConfig,
        *,
        max_seq_len: int = 4096,
        inv_freq: torch.Tensor | None = None,
        attention_scaling: float = 1.0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        super().__init__(
            config,
            make_layer=lambda i: DecoderLayer(config),
            make_norm=RMSNorm,
            max_seq_len=max_seq_len,
            inv_freq=inv_freq,
            attention_scaling=attention_scaling,
            dtype=dtype,
            device=device,
        )

    def _allocate_cache(self) -> None:
        cfg = self.config
        shape = (1, cfg.num_kv_heads, self.max_seq_len, cfg.head_dim)
        self.k_caches = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
        self.v_caches = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        hidden_layers: Sequence[int] = (),
        tree_parents: torch.Tensor | None = None,
        view: str = "exact",
    ) -> TargetOutput:
        """Run ``T`` new rows against the committed prefix; their K/V go to slots ``[length, length+T)``.

        Args:
            tokens: ``[1, T]`` int64 token ids.
            positions: ``[1, T]`` integer RoPE positions; default ``length + arange(T)``, or ``length + depth``
                with ``tree_parents``.
            mask: ``[T, T]`` bool over the new rows, ``True`` where row ``t`` may attend row ``j``
                (the committed prefix is always visible). Default: causal, or the ancestor-or-self mask of
                ``tree_parents``.
            hidden_layers: layer indices whose outputs to return (HF ``hidden_states`` numbering).
            tree_parents: ``[T]`` integer parent row of each row (``-1``: a child of the prefix), or ``None`` for a
                chain; what ``mask`` and ``positions`` leave out is derived from it (:func:`tree_rows_inputs`).
            view: ``"exact"`` or ``"q"`` (the 8-bit A+E weights; rows of a ``"q"`` forward cannot be committed).

        Returns:
            :class:`TargetOutput` with float32 logits ``[1, T, V]``.
        """
        self._check_inputs(tokens, positions, mask, hidden_layers)
        self._check_view(view)
        seqlen = tokens.shape[1]
        device = self.device
        if tree_parents is not None:
            mask, positions = tree_rows_inputs(tree_parents, mask, positions, seqlen=seqlen, length=self.length, device=device)
        new = torch.arange(seqlen, device=device)
        self._last_tree = (positions, tree_parents, mask)  # for commit's check
        if positions is None:
            positions = (self.length + new)[None]
        bucket = self._static_bucket(seqlen)
        with self._views.use(view):
            if bucket is not None:
                out = self._static_forward(bucket, tokens, positions, mask, tuple(hidden_layers), view)
            else:
                slots = self.length + new  # [T]
                # Attention reads only the slots in use: the committed prefix, then the new rows by `mask`.
                kv_len = self.length + seqlen
                attn_mask = prefix_attention_mask(self.length, seqlen, mask, device)
                out = self._run(tokens, positions, slots, attn_mask, kv_len, hidden_layers)
        self._last_rows = seqlen
        self._last_view = view
        return out

    def _enable_static(self, buckets: Sequence[int], *, capture: bool, compile: bool = False) -> None:
        """``compile=True`` runs the body through ``torch.compile`` first (one compilation per bucket, at
        first use), which fuses the norms, RoPE and SwiGLU element-wise work into a few kernels per layer."""
        super()._enable_static(buckets, capture=capture)
        self._graph_body = torch.compile(self.static_body, dynamic=False) if compile else self.static_body

    def static_body(self, tokens, positions, length, local, hidden_layers: tuple[int, ...] = ()) -> TargetOutput:
        """The forward on fixed-shape tensors, what a CUDA graph captures.

        Args:
            tokens, positions: ``[1, Tb]`` int64 (a bucket of rows; padded rows attend only to themselves).
            length: ``[]`` int64 device scalar, the committed length.
            local: ``[Tb, Tb]`` bool mask over the new rows.
            hidden_layers: taps, as for :meth:`forward`.

        Attention spans the whole cache (``max_seq_len`` slots) under a mask built from ``length``.
        """
        bucket = tokens.shape[1]
        span = self.k_caches[0].shape[2]
        attn_mask = self._static_prefix_mask(length, local, span)
        slots = length + torch.arange(bucket, device=tokens.device)
        return self._run(tokens, positions, slots, attn_mask, span, hidden_layers)

    def _static_forward(self, bucket, tokens, positions, mask, hidden_layers, view: str = "exact") -> TargetOutput:
        seqlen = tokens.shape[1]
        graphs = self._graphs
        key = (bucket, hidden_layers, view)
        static = graphs.buffers(
            key,
            lambda: {
                "tokens": torch.zeros(1, bucket, dtype=torch.long),
                "positions": torch.zeros(1, bucket, dtype=torch.long),
                "causal": torch.tril(torch.ones(bucket, bucket, dtype=torch.bool)),
                "eye": torch.eye(bucket, dtype=torch.bool),
                "local": torch.zeros(bucket, bucket, dtype=torch.bool),
            },
        )
        static["tokens"][:, :seqlen].copy_(tokens)
        static["positions"][:, :seqlen].copy_(positions)
        if mask is None:
            static["local"].copy_(static["causal"])
        else:
            static["local"].copy_(static["eye"])
            static["local"][:seqlen, :seqlen] = mask
        graphs.set_length(self.length)
        out = graphs.run(
            key, lambda: self._graph_body(static["tokens"], static["positions"], graphs.length, static["local"], hidden_layers)
        )
        self._last_rows = seqlen
        return TargetOutput(logits=out.logits[:, :seqlen].clone(), hidden=tuple(h[:, :seqlen].clone() for h in out.hidden))

    def _run(self, tokens, positions, slots, attn_mask, kv_len, hidden_layers) -> TargetOutput:
        """The layer stack on explicit tensors (a CUDA graph captures exactly this)."""
        cos, sin = self._rope(positions)
        x = self.embed(tokens)
        taps: dict[int, torch.Tensor] = {0: x} if 0 in hidden_layers else {}
        h = self.layers[0].attn_norm(x)
        attn_mask = additive_mask(grouped_mask(attn_mask, self.config.num_heads // self.config.num_kv_heads), x.dtype)
        for i, layer in enumerate(self.layers):
            k_cache, v_cache = self.k_caches[i][:, :, :kv_len], self.v_caches[i][:, :, :kv_len]
            next_norm = self.layers[i + 1].attn_norm if i + 1 < len(self.layers) else self.norm
            x, h = layer.forward_normed(x, h, next_norm, cos, sin, k_cache, v_cache, slots, attn_mask)
            if i + 1 in hidden_layers:
                taps[i + 1] = x
        x = h  # the final norm's output
        if len(self.layers) in hidden_layers:  # HF's last hidden state is the normed one
            taps[len(self.layers)] = x
        logits = self.lm_head(x).float()
        return TargetOutput(logits=logits, hidden=tuple(taps[layer] for layer in hidden_layers))

    @torch.no_grad()
    def reference_logits(self, tokens: torch.Tensor, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Logits of a causal forward over ``tokens`` from position 0, computed in ``dtype`` one layer at a time.

        A precision reference for error budgets: each decoder layer is copied to ``dtype`` just before
        it runs and dropped after, so a float32 reference of a target that only fits in memory in
        bfloat16 needs one layer's float32 weights at a time (a float32 copy of the whole model would
        need twice the bf16 weights again). The KV cache, ``length`` and CUDA graphs are not touched.

        Args:
            tokens: ``[1, T]`` int64 token ids on the target's device (the whole sequence, prompt included).
            dtype: a floating dtype to compute in (default float32).

        Returns:
            float32 logits ``[1, T, V]``.

        Example:
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0, dtype=torch.bfloat16)
            >>> target.reference_logits(torch.tensor([[1, 2, 3]])).shape   # float32, layer by layer
            torch.Size([1, 3, 97])
        """
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
        kinds = sorted({type(layer).__name__ for layer in self.layers if not isinstance(layer, DecoderLayer)})
        if kinds:
            raise TypeError(f"reference_logits: expected dense DecoderLayer layers only, got {kinds}")
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.dtype != torch.long or tokens.shape[0] != 1:
            desc = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise TypeError(f"tokens: expected an int64 tensor [1, T], got {desc}")
        if tokens.shape[1] < 1:
            raise ValueError("tokens: expected at least one token, got T = 0")
        if tokens.device != self.device:
            raise ValueError(f"tokens: expected device {self.device}, got {tokens.device}")
        cfg, device, seqlen = self.config, self.device, tokens.shape[1]
        slots = torch.arange(seqlen, device=device)
        cos, sin = self._rope(slots[None], dtype)
        attn_mask = prefix_attention_mask(0, seqlen, None, device)
        shape = (1, cfg.num_kv_heads, seqlen, cfg.head_dim)
        # every layer writes all T slots before it reads them, so one pair of buffers serves all layers
        k_cache = torch.empty(shape, dtype=dtype, device=device)
        v_cache = torch.empty(shape, dtype=dtype, device=device)
        x = self.embed(tokens).to(dtype)  # [1, T, hidden]
        for layer in self.layers:
            x = copy.deepcopy(layer).to(dtype)(x, cos, sin, k_cache, v_cache, slots, attn_mask)
        x = copy.deepcopy(self.norm).to(dtype)(x)
        return F.linear(x, self.lm_head.weight.to(dtype)).float()

    def commit(self, accepted: int | torch.Tensor) -> None:
        """Keep accepted rows of the last forward and advance ``length``.

        Args:
            accepted: ``n`` keeps the first ``n`` rows; a LongTensor ``[n]`` of ascending row indices
                (a tree's accepted path, root row 0 first) moves those rows' K/V to slots
                ``[length, length + n)`` in place. The rows must form one root-to-node path of the last
                forward (:func:`~specdec.models.base.check_committed_path`, checked on the CPU).
        """
        n = self._accepted_count(accepted)
        positions, parents, mask = self._last_tree
        if self.device.type == "cpu":  # free there; on an accelerator a host read a round (the verifiers' rows are valid)
            rows = list(range(accepted)) if isinstance(accepted, int) else accepted.tolist()
            check_committed_path(rows, self.length, positions, parents, mask)
        if isinstance(accepted, torch.Tensor):
            compact_kv(self.k_caches, self.v_caches, self.length, accepted.to(self.device))
        self._advance(n)
