"""The fixed-shape ``"packed"`` forward of a :class:`~specdec.models.ragged_hybrid.RaggedHybridTarget`.

What a CUDA graph captures: :func:`static_packed_body` reads only the static buffers of its bucket
``(Rb, Bb, Tb, Lb)`` (total rows, requests, rows per request, attended span) and the target's caches at
fixed addresses. Every linear layer runs over the ``Rb`` packed rows; each GDN layer runs ONE batched
:func:`~specdec.kernels.gdn.tree_causal_conv` and :func:`~specdec.kernels.gdn.gdn_tree` call over ``[Bb,
Tb]`` trees gathered from the packed rows (committed states gathered by slot and ring entry); each
attention layer writes the rows' K/V into their slots and attends in one
:func:`~specdec.models.packed_attention.sdpa_over_slots` call, under masks made from the trees' ancestor
tables. Padding rows and padding requests live in a scratch slot no request owns (slot ``S``, with its own
KV and a zero GDN state), so they never touch a request's cache or states; their outputs are dropped.

The eager packed forward (:mod:`~specdec.models.ragged_hybrid_packed`) runs what does not fit a bucket: a
request of more than 64 rows (a prefill), or more rows or requests than the largest bucket. Either way the forward leaves its GDN rows packed for the batched commits
(:mod:`~specdec.models.ragged_hybrid_commit`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec.contracts.target import TargetOutput
from specdec.kernels.gdn import build_tree_meta, gdn_tree, tree_causal_conv
from specdec.models.graphs import pick_bucket
from specdec.models.hybrid import _WY_MAX_ROWS
from specdec.models.hybrid_layers import GatedAttention, GatedDeltaNet
from specdec.models.packed_attention import sdpa_over_slots, slot_mask
from specdec.models.slots import RequestRows

__all__ = ["scratch_slot", "static_bucket", "static_packed_body", "static_packed_forward"]

# index rows of the "rows" buffer: per packed row
_SLOT, _INDEX, _LEN, _FLAT, _HAS_POS = range(5)


def static_bucket(ragged, requests: Sequence[RequestRows]) -> tuple[int, int, int, int] | None:
    """The bucket ``(Rb, Bb, Tb, Lb)`` of a forward, or ``None`` when it runs the eager packed forward.

    Example:
        >>> from specdec.testing import tiny_target
        >>> from specdec.models.ragged_hybrid import RaggedHybridTarget
        >>> ragged = RaggedHybridTarget(tiny_target("qwen3_5_text", seed=0), slots=3, layout="packed")
        >>> ragged.enable_static_path((1, 4, 16), span_step=8)
        >>> static_bucket(ragged, [RequestRows(0, torch.tensor([[1, 2, 3]])), RequestRows(2, torch.tensor([[4]]))])
        (4, 4, 4, 8)
    """
    buckets = ragged.row_buckets
    if not buckets:
        return None
    rows = [req.tokens.shape[1] for req in requests]
    if max(rows) > _WY_MAX_ROWS:
        return None
    rows_b, requests_b, per_request_b = (pick_bucket(buckets, n) for n in (sum(rows), len(rows), max(rows)))
    if rows_b is None or requests_b is None or per_request_b is None or per_request_b > _WY_MAX_ROWS:
        return None
    step = ragged._span_step
    longest = max(ragged.length(req.slot) + n for req, n in zip(requests, rows))
    return rows_b, requests_b, per_request_b, min(ragged.max_seq_len, -(-longest // step) * step)


def scratch_slot(ragged) -> int:
    """The cache slot of padding rows and requests: ``S``, one past the requests' slots."""
    return ragged.slots


def _buffers(rows: int, requests: int, per_request: int, span: int) -> dict[str, torch.Tensor]:
    return {
        "tokens": torch.zeros(1, rows, dtype=torch.long),
        "positions": torch.zeros(1, rows, dtype=torch.long),
        "rows": torch.zeros(5, rows, dtype=torch.long),  # per packed row: slot, index, length, b * Tb + t, explicit position
        "requests": torch.zeros(2, requests, dtype=torch.long),  # per request: slot, ring entry
        "gather": torch.full((requests * per_request,), rows, dtype=torch.long),  # packed row of (b, t); Rb = a zero row
        "parents": torch.full((requests, per_request), -1, dtype=torch.long),
        "span": torch.arange(span),
    }


def static_packed_forward(
    ragged,
    requests: Sequence[RequestRows],
    parents: Sequence[torch.Tensor | None],
    bucket: tuple[int, int, int, int],
    hidden_layers: tuple[int, ...],
    view: str,
) -> tuple[list[TargetOutput], tuple[tuple[torch.Tensor, ...], ...], tuple]:
    """Fill the bucket's buffers from ``requests`` (one host-to-device copy of the indices), run the body.

    Returns the per-request outputs (logits ``[1, T_i, V]`` float32, copied out of the graph's buffers), the
    packed stash ``(GDN rows per GDN layer, K/V rows per attention layer)``, each ``[Rb, ...]`` (under graphs the
    graph's own output, valid until its next replay; the next forward commits first) and the forward's static key.
    """
    rows_b, requests_b, per_request_b, span = bucket
    scratch = scratch_slot(ragged)
    key = (*bucket, hidden_layers, view)
    buf = ragged._graphs.buffers(key, lambda: _buffers(rows_b, requests_b, per_request_b, span))
    counts = [req.tokens.shape[1] for req in requests]
    num_rows = sum(counts)
    row_slot, row_index, row_len = [scratch] * rows_b, [0] * rows_b, [0] * rows_b
    row_flat, has_pos = [0] * rows_b, [0] * rows_b
    gather = [rows_b] * (requests_b * per_request_b)
    req_slot, req_ring = [scratch] * requests_b, [0] * requests_b
    tree = [-1] * (requests_b * per_request_b)  # chains' parents here; trees' copied from the device below
    start = 0
    for b, (req, n, tree_parents) in enumerate(zip(requests, counts, parents)):
        state = ragged._states[req.slot]
        stop = start + n
        row_slot[start:stop] = [req.slot] * n
        row_index[start:stop] = range(n)
        row_len[start:stop] = [state["length"]] * n
        row_flat[start:stop] = range(b * per_request_b, b * per_request_b + n)
        has_pos[start:stop] = [int(req.positions is not None)] * n
        gather[b * per_request_b : b * per_request_b + n] = range(start, stop)
        req_slot[b], req_ring[b] = req.slot, state["_slot"]
        if tree_parents is None:
            tree[b * per_request_b : b * per_request_b + n] = range(-1, n - 1)
        start = stop
    host = [*row_slot, *row_index, *row_len, *row_flat, *has_pos, *req_slot, *req_ring, *gather, *tree]
    host = torch.tensor(host, dtype=torch.long)
    ends = [5 * rows_b, 2 * requests_b, requests_b * per_request_b, requests_b * per_request_b]
    for name, part in zip(("rows", "requests", "gather", "parents"), host.split(ends)):
        buf[name].view(-1).copy_(part, non_blocking=True)
    buf["tokens"][:, :num_rows].copy_(torch.cat([req.tokens for req in requests], dim=1))
    start = 0
    for b, (req, tree_parents, n) in enumerate(zip(requests, parents, counts)):
        if tree_parents is not None:
            buf["parents"][b, :n] = tree_parents
        if req.positions is not None:
            buf["positions"][:, start : start + n] = req.positions
        start += n
    with ragged.target._views.use(view):  # a graph keeps the weights it was captured with: one per view
        logits, taps, stash = ragged._graphs.run(key, lambda: static_packed_body(ragged, buf, hidden_layers))
    logits, taps = logits[:, :num_rows].clone(), tuple(t[:, :num_rows].clone() for t in taps)
    outputs, start = [], 0
    for n in counts:
        outputs.append(TargetOutput(logits=logits[:, start : start + n], hidden=tuple(t[:, start : start + n] for t in taps)))
        start += n
    return outputs, stash, key


def static_packed_body(ragged, buf: dict[str, torch.Tensor], hidden_layers: tuple[int, ...]):
    """The packed forward on ``buf``'s fixed shapes: ``(logits [1, Rb, V] float32, taps, (stash, kv))``.

    ``stash`` holds per GDN layer the rows' ``(mixed [Rb, C], k [Rb, Hk, dk], v [Rb, Hv, dv], g [Rb, Hv],
    beta [Rb, Hv])`` and ``kv`` per attention layer the rows' ``(K, V)``, each ``[Rb, Hkv, D]``, for the commits
    (which then write the cache from them, so a commit body run twice writes the same). Reads only ``buf``, the
    weights and the caches, so CUDA graphs can capture it.
    """
    target, cfg = ragged.target, ragged.target.config
    row_slot, row_index, row_len, row_flat, has_pos = buf["rows"]
    req_slot, req_ring = buf["requests"]
    gather = buf["gather"]
    requests_b, per_request_b = buf["parents"].shape
    meta = build_tree_meta(buf["parents"], validate=False)
    depth = meta.depth.reshape(-1)[row_flat].to(torch.long)
    positions = torch.where(has_pos.bool(), buf["positions"][0], row_len + depth)[None]  # [1, Rb]
    local = meta.ancestors.reshape(requests_b * per_request_b, per_request_b)[row_flat].bool()  # [Rb, Tb]
    span = buf["span"].numel()
    group = cfg.num_heads // cfg.num_kv_heads
    mask = slot_mask(row_slot, row_index, row_len, local, span, num_slots=ragged.slots + 1, group=group)
    row_cache = row_len + row_index
    method = target._method(per_request_b)
    cos, sin = target._rope(positions)
    stash, kv = [], []

    def gdn(g, mixer, h):
        out, saved = _gdn(mixer, h, g, meta, gather, row_flat, req_slot, req_ring, ragged, method)
        stash.append(saved)
        return out

    def attention(a, mixer, h):
        out, rows_kv = _attention(mixer, h, cos, sin, a, row_slot, row_index, row_cache, mask, span, ragged)
        kv.append(rows_kv)
        return out

    x, taps = target.layer_stack(target.embed(buf["tokens"]), gdn, attention, hidden_layers)
    return target.lm_head(x).float(), taps, (tuple(stash), tuple(kv))


def _gdn(mixer: GatedDeltaNet, h, layer: int, meta, gather, row_flat, req_slot, req_ring, ragged, method: str):
    cfg = mixer.cfg
    requests_b, per_request_b = meta.parents.shape
    hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    mixed, z, g, beta = mixer.project(h)

    def trees(rows: torch.Tensor) -> torch.Tensor:  # [Rb, ...] -> [Bb, Tb, ...], padding from a zero row
        padded = torch.cat([rows, rows.new_zeros(1, *rows.shape[1:])])
        return padded[gather].view(requests_b, per_request_b, *rows.shape[1:])

    backend = ragged.target.backend
    y = tree_causal_conv(
        trees(mixed), meta, ragged.conv[req_slot, req_ring, layer], mixer.conv_weight, activation="silu", backend=backend
    )
    q, k, v = y.split([cfg.key_dim, cfg.key_dim, cfg.value_dim], dim=-1)
    q = q.reshape(requests_b, per_request_b, hk, dk)
    k = k.reshape(requests_b, per_request_b, hk, dk)
    v = v.reshape(requests_b, per_request_b, hv, dv)
    state = ragged.recurrent[req_slot, req_ring, layer]  # [Bb, Hv, dk, dv]
    out = gdn_tree(q, k, v, trees(g), trees(beta), meta, state, use_qk_l2norm=True, method=method, backend=backend)
    o = out.reshape(-1, hv, dv)[row_flat]  # [Rb, Hv, dv]
    k_rows, v_rows = k.reshape(-1, hk, dk)[row_flat], v.reshape(-1, hv, dv)[row_flat]
    return mixer.finish(o, z), (mixed, k_rows, v_rows, g, beta)


def _attention(mixer: GatedAttention, h, cos, sin, layer: int, row_slot, row_index, row_cache, mask, span: int, ragged):
    q, k, v, gate = mixer.project(h, cos, sin)  # [1, H, Rb, D], [1, Hkv, Rb, D] x 2, [1, Rb, q_size]
    k_cache, v_cache = ragged.k_caches[layer], ragged.v_caches[layer]  # [S + 1, Hkv, max_seq_len, D]
    k_rows, v_rows = k[0].transpose(0, 1), v[0].transpose(0, 1)  # [Rb, Hkv, D]
    k_cache[row_slot, :, row_cache] = k_rows
    v_cache[row_slot, :, row_cache] = v_rows
    out = sdpa_over_slots(q, k_cache[:, :, :span], v_cache[:, :, :span], row_slot, row_index, mask)  # [Rb, H, D]
    return mixer.wo(out.reshape(1, q.shape[2], -1) * torch.sigmoid(gate)), (k_rows, v_rows)
