"""The backbone shared by DFlash, DFlash2 and DSpark, with the published parameter names.

The block ``[anchor, MASK, ..., MASK]`` attends, without a causal mask inside the block (unless the
layer is causal), to itself and to the *context*: the target's hidden states at ``target_layer_ids``,
concatenated, projected by ``fc`` and normalised by ``hidden_norm``, then turned into keys and values by
each layer's own ``k_proj`` / ``v_proj`` ("KV injection").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from specdec.drafters.block.cache import DraftKVCache, StaticDraftKVCache
from specdec.drafters.block.config import BlockDrafterConfig
from specdec.models.dense import RMSNorm

__all__ = ["BlockDraftModel", "GroupedDynamicCausalConv", "grouped_dynamic_conv", "layer_visibility", "rotate_half"]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[..., D]`` -> ``[..., D]``: the halves ``(x1, x2)`` of the last dimension become ``(-x2, x1)`` (RoPE's rotation).

    Example:
        >>> rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0]))
        tensor([-3., -4.,  1.,  2.])
    """
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def grouped_dynamic_conv(x: torch.Tensor, dynamic: torch.Tensor, base: torch.Tensor, group_size: int) -> torch.Tensor:
    """Block-local causal convolution with per-row, per-group dynamic taps (DFlash2).

    ``out[i, c] = sum_t (base[t, c] + dynamic[i, t, c // group_size]) * x[i - t, c]``, with
    ``x[i - t] = 0`` before the block start. Leading dimensions are separate blocks (one per request).

    Args:
        x: ``[..., T, H]``.
        dynamic: ``[..., T, k, G]`` with ``G = H / group_size``.
        base: ``[k, H]``.

    Example:
        >>> x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> grouped_dynamic_conv(x, torch.zeros(2, 2, 1), torch.tensor([[1.0, 1.0], [1.0, 0.0]]), 2)
        tensor([[1., 2.],
                [4., 4.]])
    """
    rows = x.shape[-2]
    out = torch.zeros_like(x)
    for t in range(base.shape[0]):
        shifted = x if t == 0 else F.pad(x[..., : rows - t, :], (0, 0, t, 0))  # [..., T, H]
        # each group's tap spread over its channels; a view + copy (repeat_interleave may read its size back from the device)
        spread = dynamic[..., t, :, None].expand(*x.shape[:-1], dynamic.shape[-1], group_size).reshape(x.shape)  # [..., T, H]
        taps = base[t].to(x.dtype) + spread
        out = out + taps * shifted
    return out


def layer_visibility(q_pos: torch.Tensor, k_pos: torch.Tensor, *, causal: bool, window: int | None) -> torch.Tensor:
    """Which keys a draft layer's queries see: ``q_pos [..., Q, 1]``, ``k_pos [..., 1, K]`` -> bool ``[..., Q, K]``.

    The windows are transformers' (``masking_utils``): a causal layer sees the last ``window`` positions,
    itself included (``0 <= q - k < window``, ``sliding_window_causal_mask_function``); a bidirectional
    layer sees every position within distance ``window`` (``|q - k| <= window``,
    ``sliding_window_bidirectional_mask_function``). ``window=None`` is full attention.

    Example:
        >>> q, k = torch.tensor([[3]]), torch.arange(6)[None]
        >>> layer_visibility(q, k, causal=False, window=2).int().tolist()
        [[0, 1, 1, 1, 1, 1]]
        >>> layer_visibility(q, k, causal=True, window=2).int().tolist()
        [[0, 0, 1, 1, 0, 0]]
    """
    distance = q_pos - k_pos
    visible = torch.ones_like(distance, dtype=torch.bool)
    if causal:
        visible = distance >= 0
        if window is not None:
            visible = visible & (distance < window)
    elif window is not None:
        visible = distance.abs() <= window
    return visible


class GroupedDynamicCausalConv(nn.Module):
    """DFlash2's pair of block-local convolutions around a sublayer, with taps predicted from its input.

    :meth:`prepare` convolves the sublayer input and predicts the output taps from the same
    projection; :meth:`finish` convolves the sublayer output with them (see :func:`grouped_dynamic_conv`).

    Args:
        hidden: channels ``H``.
        kernel: taps ``k`` per convolution.
        group: channels sharing one dynamic tap (``G = H / group`` groups).

    Example:
        >>> conv = GroupedDynamicCausalConv(hidden=4, kernel=2, group=2)
        >>> x, taps = conv.prepare(torch.randn(3, 4))
        >>> x.shape, taps.shape, conv.finish(x, taps).shape
        (torch.Size([3, 4]), torch.Size([3, 2, 2]), torch.Size([3, 4]))
    """

    def __init__(self, hidden: int, kernel: int, group: int):
        super().__init__()
        self.kernel, self.group = kernel, group
        self.base_kernel = nn.Parameter(torch.zeros(2, kernel, hidden))
        self.kernel_projection = nn.Linear(hidden, 2 * kernel * (hidden // group), bias=False)

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [..., T, H]`` -> ``(convolved x [..., T, H], output taps [..., T, k, G])`` for :meth:`finish`."""
        # one projection of the sublayer input gives both halves: [..., T, 2, k, G]
        dyn = self.kernel_projection(x).view(*x.shape[:-1], 2, self.kernel, -1)
        return grouped_dynamic_conv(x, dyn[..., 0, :, :], self.base_kernel[0], self.group), dyn[..., 1, :, :]

    def finish(self, x: torch.Tensor, dyn: torch.Tensor) -> torch.Tensor:
        """The sublayer output ``x [..., T, H]`` convolved with ``base_kernel[1]`` plus the taps ``dyn [..., T, k, G]``."""
        return grouped_dynamic_conv(x, dyn, self.base_kernel[1], self.group)


class _Attention(nn.Module):
    def __init__(self, cfg: BlockDrafterConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=cfg.attention_bias)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)


class _MLP(nn.Module):
    def __init__(self, cfg: BlockDrafterConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Layer(nn.Module):
    def __init__(self, cfg: BlockDrafterConfig):
        super().__init__()
        self.self_attn = _Attention(cfg)
        self.mlp = _MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.conv_kernel_size:
            self.attention_conv = GroupedDynamicCausalConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
            self.mlp_conv = GroupedDynamicCausalConv(cfg.hidden_size, cfg.conv_kernel_size, cfg.conv_group_size)
        else:
            self.attention_conv = self.mlp_conv = None


class _Selector(nn.Module):
    def __init__(self, cfg: BlockDrafterConfig, vocab: int):
        super().__init__()
        self.hidden_projection = nn.Linear(cfg.hidden_size, cfg.selector_rank, bias=False)
        self.predecessor_codebook = nn.Parameter(torch.zeros(vocab, cfg.selector_rank))
        self.successor_codebook = nn.Parameter(torch.zeros(vocab, cfg.selector_rank))


class _Markov(nn.Module):
    def __init__(self, cfg: BlockDrafterConfig, vocab: int):
        super().__init__()
        self.markov_w1 = nn.Embedding(vocab, cfg.markov_rank)
        self.markov_w2 = nn.Linear(cfg.markov_rank, vocab, bias=False)


class _Confidence(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.proj = nn.Linear(features, 1)


class BlockDraftModel(nn.Module):
    """The backbone shared by DFlash, DFlash2 and DSpark, with the published parameter names.

    Args:
        cfg: the drafter config.
        vocab_size: rows of the vocabulary-sized tensors (codebooks, Markov head).

    Example:
        >>> from specdec.drafters.block.config import read_drafter_config
        >>> from specdec.drafters.block.fixtures import fixture_config
        >>> from specdec.testing import tiny_target
        >>> cfg = read_drafter_config(fixture_config("DFlashDraftModel", tiny_target(seed=0)))
        >>> sorted(BlockDraftModel(cfg, 97).state_dict())[:2]
        ['fc.weight', 'hidden_norm.weight']
    """

    def __init__(self, cfg: BlockDrafterConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(len(cfg.target_layer_ids) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.selector_rank:
            self.candidate_selector = _Selector(cfg, vocab_size)
        if cfg.markov_rank:
            self.markov_head = _Markov(cfg, vocab_size)
        if cfg.confidence_head:
            self.confidence_head = _Confidence(cfg.hidden_size + (cfg.markov_rank if cfg.confidence_head_with_markov else 0))
        self.register_buffer("inv_freq", self._inv_freq(), persistent=False)

    def _inv_freq(self) -> torch.Tensor:
        d = self.cfg.head_dim
        return (1.0 / (self.cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))).float()

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        # RoPE frequencies stay float32 when the weights go to bf16 (a bf16 inv_freq is off by up to
        # 0.4%, radians of phase at positions in the hundreds); recomputed, since the cast lost bits
        if self.inv_freq.dtype != torch.float32:
            self.inv_freq = self._inv_freq().to(self.inv_freq.device)
        return self

    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)``, each ``[..., T, head_dim]`` in ``dtype``, of ``positions [..., T]`` (frequencies in float32)."""
        freqs = positions.float()[..., None] * self.inv_freq.to(positions.device)  # [..., T, D/2]
        emb = torch.cat([freqs, freqs], dim=-1)  # [T, D]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def project_context(self, features: torch.Tensor) -> torch.Tensor:
        """``[r, taps * H]`` target features -> ``[r, H]`` draft context."""
        return self.hidden_norm(self.fc(features))

    def _kv(self, attn: _Attention, x: torch.Tensor, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [..., T, H]`` -> roped keys and values ``[..., Hkv, T, D]``; ``cos``, ``sin`` broadcast to them."""
        cfg = self.cfg
        heads = (*x.shape[:-1], cfg.num_kv_heads, cfg.head_dim)
        k = attn.k_norm(attn.k_proj(x).view(heads)).transpose(-3, -2)  # [..., Hkv, T, D]
        v = attn.v_proj(x).view(heads).transpose(-3, -2)
        return k * cos + rotate_half(k) * sin, v

    def append_context(self, cache: DraftKVCache, context: torch.Tensor, positions: torch.Tensor) -> None:
        """Project ``context [r, H]`` (output of :meth:`project_context`) into every layer's cache."""
        cos, sin = self.rope(positions, context.dtype)
        for i, layer in enumerate(self.layers):
            k, v = self._kv(layer.self_attn, context, cos, sin)
            cache.append(i, k, v)

    def append_context_static(self, cache: StaticDraftKVCache, context: torch.Tensor, start: torch.Tensor) -> None:
        """:meth:`append_context` into a :class:`StaticDraftKVCache` at slots ``start + [0, r)``.

        ``start`` is a 0-d int64 device tensor (the rows already cached), so a CUDA graph can capture
        this once per row count ``r``.
        """
        positions = start + torch.arange(context.shape[0], device=context.device)  # [r] slot = position
        self.append_context_slots(
            [k[None] for k in cache.k], [v[None] for v in cache.v], context, torch.zeros_like(positions), positions
        )

    def append_context_slots(
        self,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        context: torch.Tensor,
        slots: torch.Tensor,
        positions: torch.Tensor,
    ) -> None:
        """Project ``context [r, H]`` (rows of :meth:`project_context`, of any requests) into per-request caches.

        ``keys[i]``, ``values[i]``: layer ``i``'s ``[S, Hkv, P, D]`` (``S`` request slots of ``P``
        positions). Row ``j`` goes to slot ``slots[j]`` at position ``positions[j]`` (its RoPE position);
        ``slots``, ``positions``: ``[r]`` int64 on the device.

        Example:
            >>> from specdec.drafters.block import fixture_config, random_block_model
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> model = random_block_model(fixture_config("DFlashDraftModel", target), target)
            >>> cfg = model.cfg
            >>> keys = [torch.zeros(2, cfg.num_kv_heads, 8, cfg.head_dim) for _ in model.layers]
            >>> values = [torch.zeros_like(k) for k in keys]
            >>> rows = model.project_context(torch.randn(3, model.fc.in_features))
            >>> model.append_context_slots(keys, values, rows, torch.tensor([1, 1, 0]), torch.tensor([0, 1, 0]))
            >>> [int(keys[0][s].abs().sum(dim=(0, 2)).gt(0).sum()) for s in (0, 1)]   # positions written per slot
            [1, 2]
        """
        cos, sin = self.rope(positions, context.dtype)  # [r, D]
        for i, layer in enumerate(self.layers):
            k, v = self._kv(layer.self_attn, context, cos, sin)  # [Hkv, r, D]
            keys[i][slots, :, positions] = k.transpose(0, 1)  # [r, Hkv, D]
            values[i][slots, :, positions] = v.transpose(0, 1)

    def _masks(self, q_pos: torch.Tensor, k_pos: torch.Tensor, base: torch.Tensor | None) -> list[torch.Tensor]:
        """Per layer bool visibility ``[..., Q, K]`` of queries ``q_pos [..., Q, 1]`` on keys ``k_pos [..., K]``,
        and ``base`` when given; layers with the same (causal, window) share one mask."""
        cfg = self.cfg
        built: dict[tuple[bool, int | None], torch.Tensor] = {}
        out = []
        for i in range(cfg.num_layers):
            key = (cfg.layer_causal[i], cfg.sliding_window[i])
            if key not in built:
                visible = layer_visibility(q_pos, k_pos, causal=cfg.layer_causal[i], window=cfg.sliding_window[i])
                visible = visible.expand(*q_pos.shape[:-1], k_pos.shape[-1])
                built[key] = visible if base is None else visible & base
            out.append(built[key])
        return out

    def _layers(self, x: torch.Tensor, cos, sin, keys_values, masks: list[torch.Tensor]) -> torch.Tensor:
        """The layer stack over ``n`` blocks' rows ``x [n, B, H]`` (``cos``, ``sin``: ``[n, B, D]``).

        ``keys_values(i, k_blk, v_blk)`` takes the blocks' ``[n, Hkv, B, D]`` keys / values and gives the
        layer's full ``[n, Hkv, K, D]`` ones (context and block) that ``masks[i] [n, B, K]`` indexes.
        """
        cfg = self.cfg
        n, rows = x.shape[:2]
        group = cfg.num_heads // cfg.num_kv_heads
        cos, sin = cos[:, None], sin[:, None]  # [n, 1, B, D]: shared by the heads
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            kernel = None
            if layer.attention_conv is not None:
                h, kernel = layer.attention_conv.prepare(h)
            q = attn.q_norm(attn.q_proj(h).view(n, rows, cfg.num_heads, cfg.head_dim)).transpose(1, 2)  # [n, Hq, B, D]
            q = q * cos + rotate_half(q) * sin
            k_blk, v_blk = self._kv(attn, h, cos, sin)
            k, v = keys_values(i, k_blk, v_blk)  # [n, Hkv, K, D]
            # GQA without copying K/V: the q heads that share a kv head become extra query rows
            q = q.reshape(n, cfg.num_kv_heads, group * rows, cfg.head_dim)  # [n, Hkv, G*B, D]
            mask = masks[i].repeat(1, group, 1)[:, None]  # [n, 1, G*B, K]
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [n, Hkv, G*B, D]
            out = out.reshape(n, cfg.num_heads, rows, cfg.head_dim).transpose(1, 2).reshape(n, rows, -1)  # [n, B, Hq*D]
            h = attn.o_proj(out)
            if kernel is not None:
                h = layer.attention_conv.finish(h, kernel)
            x = x + h
            h = layer.post_attention_layernorm(x)
            kernel = None
            if layer.mlp_conv is not None:
                h, kernel = layer.mlp_conv.prepare(h)
            h = layer.mlp(h)
            if kernel is not None:
                h = layer.mlp_conv.finish(h, kernel)
            x = x + h
        return self.norm(x)

    def block_forward(self, noise: torch.Tensor, positions: torch.Tensor, cache: DraftKVCache) -> torch.Tensor:
        """Draft hidden states ``[B, H]`` (after the final norm) of the block ``noise [B, H]``.

        The block attends to every cached context row (subject to the layer's sliding window) and to
        itself: fully, or causally for causal layers. Context rows have positions ``0 .. S-1``.
        """
        ctx = cache.length
        cos, sin = self.rope(positions, noise.dtype)
        q_pos = positions[None, :, None]  # [1, B, 1]
        k_pos = torch.cat([torch.arange(ctx, device=noise.device), positions])  # [S + B]

        def keys_values(i, k_blk, v_blk):
            k_ctx, v_ctx = cache.keys(i), cache.values(i)
            if k_ctx is None:
                return k_blk, v_blk
            return torch.cat([k_ctx[None], k_blk], dim=2), torch.cat([v_ctx[None], v_blk], dim=2)  # [1, Hkv, S + B, D]

        return self._layers(noise[None], cos[None], sin[None], keys_values, self._masks(q_pos, k_pos, None))[0]

    def block_forward_static(self, noise: torch.Tensor, start: torch.Tensor, cache: StaticDraftKVCache) -> torch.Tensor:
        """:meth:`block_forward` on fixed shapes: the block starts at position ``start`` (a 0-d int64
        device tensor equal to the cached context rows); its K/V go to slots ``start + [0, B)`` and
        attention spans every slot of ``cache`` under a mask built from ``start`` on the device."""
        keys, values = [k[None] for k in cache.k], [v[None] for v in cache.v]
        return self.block_forward_slots(noise[None], start.reshape(1), keys, values)[0]

    def block_forward_slots(
        self,
        noise: torch.Tensor,
        starts: torch.Tensor,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
        slots: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Draft hidden states ``[n, B, H]`` of ``n`` requests' blocks ``noise [n, B, H]``, each over its own cache.

        Request ``j`` is in slot ``slots[j]`` of the per-layer caches ``keys[i]``, ``values[i]``
        ``[S, Hkv, P, D]`` (``slots=None``: slot ``j``, and the caches hold exactly ``n`` slots); its
        block starts at position ``starts[j]`` (its cached context rows). ``starts``, ``slots``: ``[n]``
        int64 on the device. The blocks' K/V go to positions ``starts[j] + [0, B)`` of their slots
        (scratch) and attention spans all ``P`` positions under a mask built on the device: fixed
        shapes for a given ``n``, no host sync.

        Example:
            >>> from specdec.drafters.block import fixture_config, random_block_model
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> model = random_block_model(fixture_config("DFlashDraftModel", target), target)
            >>> cfg = model.cfg
            >>> keys = [torch.zeros(3, cfg.num_kv_heads, 32, cfg.head_dim) for _ in model.layers]
            >>> values = [torch.zeros_like(k) for k in keys]
            >>> noise = torch.randn(2, cfg.block_size, cfg.hidden_size)
            >>> model.block_forward_slots(noise, torch.tensor([0, 5]), keys, values, slots=torch.tensor([2, 0])).shape
            torch.Size([2, 8, 32])
        """
        n, rows = noise.shape[:2]
        device = noise.device
        positions = starts[:, None] + torch.arange(rows, device=device)  # [n, B]
        cos, sin = self.rope(positions, noise.dtype)  # [n, B, D]
        k_pos = torch.arange(keys[0].shape[2], device=device)  # [P]: position p sits at index p
        # context rows and the block; later positions are stale scratch
        in_use = k_pos < (starts + rows)[:, None, None]  # [n, 1, P]
        index = torch.arange(n, device=device)[:, None] if slots is None else slots[:, None]  # [n, 1]

        def keys_values(i, k_blk, v_blk):
            keys[i][index, :, positions] = k_blk.transpose(1, 2)  # [n, B, Hkv, D]
            values[i][index, :, positions] = v_blk.transpose(1, 2)
            if slots is None:
                return keys[i], values[i]
            return keys[i].index_select(0, slots), values[i].index_select(0, slots)

        return self._layers(noise, cos, sin, keys_values, self._masks(positions[..., None], k_pos, in_use))

    def logits(self, hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """Target ``lm_head`` -> x ``output_multiplier`` -> ``tanh`` softcap; float32 ``[.., V]``."""
        logits = lm_head(hidden).float() * self.cfg.output_multiplier
        cap = self.cfg.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits
