"""The ``"packed"`` forward of a :class:`~specdec.models.ragged_hybrid.RaggedHybridTarget`.

Every linear layer, norm, MLP and the lm_head run once over all requests' rows packed ``[1, R, H]`` (each
weight matrix is read once per forward, whatever the number of requests). What depends on a request's
history runs on its own rows with its own slot:

* GDN layers: the tree conv and the gated delta rule start from the request's committed conv and recurrent
  states (the ring entry its slot holds). Requests of up to 64 rows (decode and verify steps) share ONE
  batched call of :func:`~specdec.kernels.gdn.tree_causal_conv` and :func:`~specdec.kernels.gdn.gdn_tree`
  per layer: their trees padded to the longest one's ``Tb`` rows (padding rows are extra roots whose
  outputs are dropped) with one initial state per request, the kernels' ``[B, Tb]`` form. A longer request
  (a prefill) runs its own unpadded call, so a prefill in the batch does not pad every decode to its length.
* Attention layers: the requests of up to 64 rows write their K/V into their slots and attend them in ONE
  :func:`~specdec.models.packed_attention.sdpa_over_slots` call per layer (each row under its request's
  prefix-and-tree mask); a longer request (a prefill) attends its own slot alone
  (:func:`~specdec.models.dense.cached_attention`).

Each slot is then left exactly what the batch-1 :class:`~specdec.models.hybrid.HybridTarget` forward leaves
for its commit (per GDN layer the rows' pre-conv activations, keys, values, gates and betas; the tree's
parents), so commits, truncations and discards are the ``"per_request"`` layout's. The logits agree with
the batch-1 forward to float32 rounding, not bitwise: a GEMM's row results depend on how many rows it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec.contracts.target import TargetOutput
from specdec.kernels.gdn import TreeMeta, build_tree_meta, gdn_tree, tree_causal_conv
from specdec.models.dense import cached_attention, prefix_attention_mask
from specdec.models.hybrid import _WY_MAX_ROWS
from specdec.models.hybrid_layers import GatedAttention, GatedDeltaNet
from specdec.models.packed_attention import sdpa_over_slots, slot_mask
from specdec.models.ragged_hybrid_static import static_bucket, static_packed_forward
from specdec.models.slots import RequestRows

__all__ = ["packed_hybrid_forward"]


@dataclass(frozen=True)
class _Segment:
    """One request's rows ``[start, start + rows)`` of the packed forward."""

    slot: int
    start: int
    rows: int
    length: int
    parents: torch.Tensor | None
    attn_mask: torch.Tensor  # [1, 1, T, length + T]

    @property
    def stop(self) -> int:
        return self.start + self.rows


@dataclass(frozen=True)
class _GdnCall:
    """The requests that share one batched GDN kernel call, their trees padded to ``Tb`` rows."""

    rows: torch.Tensor  # [Rg] packed row of each real row
    batch: torch.Tensor  # [Rg] its request's index in the call
    node: torch.Tensor  # [Rg] its node index in that request's tree
    slots: torch.Tensor  # [B] request slots
    ring: torch.Tensor  # [B] ring entry holding each slot's committed GDN states
    meta: TreeMeta  # [B, Tb] trees
    method: str

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """``[R, ...]`` packed rows -> ``[B, Tb, ...]`` (zero padding rows)."""
        out = packed.new_zeros((self.meta.batch_size, self.meta.num_nodes, *packed.shape[1:]))
        out[self.batch, self.node] = packed[self.rows]
        return out


@dataclass(frozen=True)
class _SlotAttention:
    """The short requests' rows, attended in one call over every slot's cache."""

    rows: torch.Tensor  # [Rs] packed row of each of them
    row_slot: torch.Tensor  # [Rs] its slot
    row_index: torch.Tensor  # [Rs] its index within its request
    row_cache: torch.Tensor  # [Rs] its cache position
    mask: torch.Tensor  # slot_mask's [S, 1, G * Tb, span]

    @property
    def span(self) -> int:
        return self.mask.shape[-1]


def _slot_attention(ragged, segments: Sequence[_Segment]) -> _SlotAttention | None:
    """The :class:`_SlotAttention` of the forward's requests of at most ``_WY_MAX_ROWS`` rows (``None``: none)."""
    short = [seg for seg in segments if seg.rows <= _WY_MAX_ROWS]
    if not short:
        return None
    device, cfg = ragged.device, ragged.target.config
    width = max(seg.rows for seg in short)
    index = [[r for seg in short for r in range(seg.start, seg.stop)]]
    index.append([seg.slot for seg in short for _ in range(seg.rows)])
    index.append([t for seg in short for t in range(seg.rows)])
    index.append([seg.length for seg in short for _ in range(seg.rows)])
    rows, row_slot, row_index, row_len = torch.tensor(index, dtype=torch.long).to(device)
    local = torch.zeros(rows.numel(), width, dtype=torch.bool, device=device)  # row r sees its request's new row c
    at = 0
    for seg in short:
        local[at : at + seg.rows, : seg.rows] = seg.attn_mask[0, 0, :, seg.length :]
        at += seg.rows
    span = max(seg.length + seg.rows for seg in short)
    group = cfg.num_heads // cfg.num_kv_heads
    mask = slot_mask(row_slot, row_index, row_len, local, span, num_slots=ragged.slots + 1, group=group)
    return _SlotAttention(rows, row_slot, row_index, row_len + row_index, mask)


def _gdn_calls(ragged, segments: Sequence[_Segment]) -> tuple[list[_GdnCall], torch.Tensor]:
    """The batched GDN calls of a forward, and the rows' tree depths ``[R]`` (for their default positions)."""
    target, device = ragged.target, ragged.device
    short = [seg for seg in segments if seg.rows <= _WY_MAX_ROWS]
    groups = ([short] if short else []) + [[seg] for seg in segments if seg.rows > _WY_MAX_ROWS]
    depth = torch.zeros(sum(seg.rows for seg in segments), dtype=torch.long, device=device)
    calls = []
    for group in groups:
        width = max(seg.rows for seg in group)
        parents = torch.full((len(group), width), -1, dtype=torch.long, device=device)
        for b, seg in enumerate(group):
            if seg.parents is None:
                parents[b, : seg.rows] = torch.arange(-1, seg.rows - 1, device=device)
            else:
                parents[b, : seg.rows] = seg.parents
        # per real row: its packed row, its request in the call, its node in that request's tree
        index = [[r for seg in group for r in range(seg.start, seg.stop)]]
        index.append([b for b, seg in enumerate(group) for _ in range(seg.rows)])
        index.append([t for seg in group for t in range(seg.rows)])
        rows, batch, node = torch.tensor(index, dtype=torch.long).to(device)
        meta = build_tree_meta(parents, validate=False)
        call = _GdnCall(
            rows=rows,
            batch=batch,
            node=node,
            slots=torch.tensor([seg.slot for seg in group], device=device),
            ring=torch.tensor([ragged._states[seg.slot]["_slot"] for seg in group], device=device),
            meta=meta,
            method=target._method(width),
        )
        depth[call.rows] = meta.depth[call.batch, call.node].to(torch.long)
        calls.append(call)
    return calls, depth


def _packed_gdn(mixer: GatedDeltaNet, h: torch.Tensor, layer: int, calls: Sequence[_GdnCall], ragged, backend: str):
    """``h [1, R, H]`` -> ``(out [1, R, H], (mixed, k, v, g, beta))``, each stash entry ``[R, ...]``."""
    cfg = mixer.cfg
    num_rows = h.shape[1]
    hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    mixed, z, g, beta = mixer.project(h)  # [R, .]
    o = h.new_empty(num_rows, hv, dv)
    k_rows = h.new_empty(num_rows, hk, dk)
    v_rows = h.new_empty(num_rows, hv, dv)
    for call in calls:
        bsz, width = call.meta.batch_size, call.meta.num_nodes
        conv_state = ragged.conv[call.slots, call.ring, layer]  # [B, C, W - 1]
        y = tree_causal_conv(call.pad(mixed), call.meta, conv_state, mixer.conv_weight, activation="silu", backend=backend)
        q, k, v = y.split([cfg.key_dim, cfg.key_dim, cfg.value_dim], dim=-1)  # [B, Tb, .]
        q, k, v = q.reshape(bsz, width, hk, dk), k.reshape(bsz, width, hk, dk), v.reshape(bsz, width, hv, dv)
        state = ragged.recurrent[call.slots, call.ring, layer]  # [B, Hv, dk, dv]
        out = gdn_tree(
            q, k, v, call.pad(g), call.pad(beta), call.meta, state, use_qk_l2norm=True, method=call.method, backend=backend
        )
        o[call.rows] = out[call.batch, call.node]
        k_rows[call.rows] = k[call.batch, call.node]
        v_rows[call.rows] = v[call.batch, call.node]
    return mixer.finish(o, z), (mixed, k_rows, v_rows, g, beta)


def _packed_attention(
    mixer: GatedAttention, h, cos, sin, layer: int, segments: Sequence[_Segment], slotted: _SlotAttention | None, ragged
) -> torch.Tensor:
    """``h [1, R, H]`` -> ``[1, R, H]``: projections over all rows, each request's rows against its own KV slot."""
    cfg = mixer.cfg
    num_rows = h.shape[1]
    q, k, v, gate = mixer.project(h, cos, sin)  # [1, H, R, D], [1, Hkv, R, D] x 2, [1, R, H * D]
    k_cache, v_cache = ragged.k_caches[layer], ragged.v_caches[layer]  # [S, Hkv, max_seq_len, D]
    out = q.new_empty(num_rows, cfg.num_heads * cfg.head_dim)
    if slotted is not None:
        rows = slotted.rows
        k_cache[slotted.row_slot, :, slotted.row_cache] = k[0, :, rows].transpose(0, 1)  # [Rs, Hkv, D]
        v_cache[slotted.row_slot, :, slotted.row_cache] = v[0, :, rows].transpose(0, 1)
        span = slotted.span
        attended = sdpa_over_slots(
            q[:, :, rows], k_cache[:, :, :span], v_cache[:, :, :span], slotted.row_slot, slotted.row_index, slotted.mask
        )  # [Rs, H, D]
        out[rows] = attended.reshape(rows.numel(), -1)
    for seg in segments:
        if seg.rows <= _WY_MAX_ROWS:
            continue
        span = seg.length + seg.rows
        cache_rows = seg.length + torch.arange(seg.rows, device=h.device)
        out[seg.start : seg.stop] = cached_attention(
            q[:, :, seg.start : seg.stop],
            k[:, :, seg.start : seg.stop],
            v[:, :, seg.start : seg.stop],
            k_cache[seg.slot : seg.slot + 1, :, :span],
            v_cache[seg.slot : seg.slot + 1, :, :span],
            cache_rows,
            seg.attn_mask,
        )[0]
    return mixer.wo(out[None] * torch.sigmoid(gate))


def packed_hybrid_forward(
    ragged, requests: Sequence[RequestRows], parents: Sequence[torch.Tensor | None], hidden_layers: tuple[int, ...], view: str
) -> list[TargetOutput]:
    """One packed forward of checked rows over a :class:`~specdec.models.ragged_hybrid.RaggedHybridTarget`.

    Args:
        ragged: the ragged hybrid target (its slots' caches, GDN states and bookkeeping are read and written).
        requests: the requests' rows, checked (distinct slots, rows that fit).
        parents: per request its rows' tree parents ``[T_i]`` int64, or ``None`` for a chain.
        hidden_layers: taps (HF ``hidden_states`` numbering).
        view: the weight view, ``"exact"`` or ``"q"``.

    Returns:
        one :class:`~specdec.contracts.TargetOutput` per request, in their order: float32 logits ``[1, T_i, V]``.

    Example:
        >>> from specdec.testing import tiny_target
        >>> from specdec.models.ragged_hybrid import RaggedHybridTarget
        >>> ragged = RaggedHybridTarget(tiny_target("qwen3_5_text", seed=0), slots=2, layout="packed")
        >>> rows = [RequestRows(1, torch.tensor([[1, 2, 3]])), RequestRows(0, torch.tensor([[4]]))]
        >>> [o.logits.shape[1] for o in packed_hybrid_forward(ragged, rows, [None, None], (), "exact")]
        [3, 1]
    """
    bucket, key = static_bucket(ragged, requests), None
    if bucket is not None:
        outputs, (stash, kv), key = static_packed_forward(ragged, requests, parents, bucket, hidden_layers, view)
    else:
        (outputs, stash), kv = _eager_forward(ragged, requests, parents, hidden_layers, view), None
    ragged._forwards += 1
    # a graph replay's stash lives in the graph's buffers until the next forward's replay
    until = ragged._forwards if bucket is not None and ragged.uses_cuda_graphs else None
    start = 0
    for req, tree, out in zip(requests, parents, outputs):
        state = ragged._states[req.slot]
        # what the batch-1 forward leaves for its commit's checks; the GDN rows stay packed
        state["_stash"] = None
        state["_packed"] = (stash, kv, start, until, key)  # its commit gathers its rows from the packed stash
        state["_last_rows"] = out.logits.shape[1]
        state["_last_parents"] = tree
        state["_last_positions"] = None  # the packed rows run at length + depth
        state["_last_static"] = None
        state["_last_view"] = view
        start += out.logits.shape[1]
    return outputs


def _eager_forward(ragged, requests, parents, hidden_layers, view):
    """Every request at its own shape: ``(outputs, stash)``."""
    target, device = ragged.target, ragged.device
    segments, start = [], 0
    for req, tree in zip(requests, parents):
        length, seqlen = ragged._states[req.slot]["length"], req.tokens.shape[1]
        mask = req.mask
        if mask is None and tree is not None:
            mask = build_tree_meta(tree, validate=False).ancestors[0].bool()
        attn_mask = prefix_attention_mask(length, seqlen, mask, device)
        segments.append(_Segment(req.slot, start, seqlen, length, tree, attn_mask))
        start += seqlen
    calls, depth = _gdn_calls(ragged, segments)
    slotted = _slot_attention(ragged, segments)
    positions = torch.cat(
        [
            seg.length + depth[seg.start : seg.stop][None] if req.positions is None else req.positions
            for req, seg in zip(requests, segments)
        ],
        dim=1,
    )  # [1, R]
    tokens = torch.cat([req.tokens for req in requests], dim=1)  # [1, R]
    stash = []

    def gdn(g, mixer, h):
        out, saved = _packed_gdn(mixer, h, g, calls, ragged, target.backend)
        stash.append(saved)
        return out

    with target._views.use(view):
        cos, sin = target._rope(positions)

        def attention(a, mixer, h):
            return _packed_attention(mixer, h, cos, sin, a, segments, slotted, ragged)

        x, taps = target.layer_stack(target.embed(tokens), gdn, attention, hidden_layers)
        logits = target.lm_head(x).float()
    outputs = []
    for seg in segments:
        rows = slice(seg.start, seg.stop)
        outputs.append(TargetOutput(logits=logits[:, rows], hidden=tuple(t[:, rows] for t in taps)))
    return outputs, stash
