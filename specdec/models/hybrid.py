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

Static path and CUDA graphs (:meth:`HybridTarget.enable_cuda_graphs`): the decode step, the verify
step (rows padded to a bucket, padded rows extra roots of the tree) and the commit (accepted path
padded with ``-1``) run as fixed-shape bodies whose topology arrives as device tensors (the GDN tree
tables are built inside the body); validation happens on the host before the replay. The GDN state a
body reads is a ring slot, so graphs are keyed by slot too: a verifier-only target with
``state_slots=2`` captures two of each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.target import TargetOutput
from specdec.kernels.gdn import build_tree_meta, conv_state_commit, gdn_tree_commit
from specdec.kernels.gdn.path import gdn_tree_commit_triton
from specdec.models.base import LeanTarget, check_committed_path, check_parent_order, check_tree_parents, default_device
from specdec.models.dense import compact_kv, load_weights, prefix_attention_mask
from specdec.models.hybrid_checkpoint import hybrid_state_from_hf
from specdec.models.hybrid_config import HybridConfig
from specdec.models.hybrid_layers import CenteredRMSNorm, HybridLayer

__all__ = ["HybridConfig", "HybridTarget", "build_hybrid_target", "random_hybrid_target"]

_GDN_METHODS = ("auto", "path", "wy", "naive")
# the dense tree-WY kernel covers up to 64 rows and is the fastest there (benchmarks/NOTES.md, GDN tree kernels)
_WY_MAX_ROWS = 64
_BACKENDS = ("auto", "triton", "torch")


def conv_state_commit_static(x: torch.Tensor, path: torch.Tensor, conv_state: torch.Tensor) -> torch.Tensor:
    """:func:`~specdec.kernels.gdn.conv_state_commit` without its host-side path checks (graph-capturable).

    Args:
        x: ``[N, C]`` pre-conv rows of the verify step (batched: ``[B, N, C]``).
        path: ``[L]`` int64 accepted rows, root to leaf, then ``-1`` padding (checked by the caller;
            batched: ``[B, L]``, one request a row).
        conv_state: ``[C, S]`` committed conv state (batched: ``[B, C, S]``).

    Returns:
        ``[C, S]`` (batched ``[B, C, S]``): the committed columns followed by the path's, the last ``S`` kept.

    Example:
        >>> conv_state_commit_static(torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([0, 2, -1]), torch.tensor([[7.0, 8.0, 9.0]]))
        tensor([[9., 1., 3.]])
    """
    if x.ndim == 2:
        return conv_state_commit_static(x[None], path[None], conv_state[None])[0]
    s = conv_state.shape[-1]
    accepted = (path >= 0).sum(dim=1, keepdim=True)  # [B, 1]
    pos = accepted - s + torch.arange(s, device=path.device)  # [B, S] index into the accepted sequence
    node = path.gather(1, pos.clamp(0, path.shape[1] - 1))
    src = torch.where(pos >= 0, s + node, s + pos)  # into [old state columns | x rows]
    ext = torch.cat([conv_state.transpose(1, 2), x.to(conv_state.dtype)], dim=1)  # [B, S + N, C]
    return ext.gather(1, src[..., None].expand(-1, -1, ext.shape[-1])).transpose(1, 2)


class HybridTarget(LeanTarget):
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
        if isinstance(state_slots, bool) or not isinstance(state_slots, int) or state_slots < 2:
            raise ValueError(f"state_slots: expected an int >= 2, got {state_slots!r}")
        if gdn_method not in _GDN_METHODS:
            raise ValueError(f"gdn_method: expected one of {_GDN_METHODS}, got {gdn_method!r}")
        if backend not in _BACKENDS:
            raise ValueError(f"backend: expected one of {_BACKENDS}, got {backend!r}")
        # read by _allocate_cache, which the base constructor calls last
        self._state_slots = state_slots
        super().__init__(
            config,
            make_layer=lambda i: HybridLayer(config, i),
            make_norm=CenteredRMSNorm,
            max_seq_len=max_seq_len,
            inv_freq=inv_freq,
            attention_scaling=attention_scaling,
            dtype=dtype,
            device=device,
        )
        self.gdn_method = gdn_method
        self.backend = backend

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
        super().reset()
        self._forget_last()
        self._slot = 0
        self._slot_len = [0] + [-1] * (self._state_slots - 1)  # committed length each slot holds, -1 = none
        self._rec[0].zero_()
        self._conv[0].zero_()

    def _forget_last(self) -> None:
        self._stash = None
        self._last_parents = None
        self._last_positions: torch.Tensor | None = None
        self._last_static = None

    def discard(self) -> None:
        """Drop the scratch rows of the last forward (the committed states are unchanged)."""
        super().discard()
        self._forget_last()

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
        self._last_view = "exact"
        self._forget_last()
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

    def _enable_static(self, buckets: Sequence[int], *, capture: bool) -> None:
        if capture and self.backend == "torch":
            raise ValueError("backend: CUDA graphs need the Triton GDN kernels ('auto' or 'triton'), got 'torch'")
        super()._enable_static(buckets, capture=capture)

    def run_plan(self, plan: VerifyPlan, *, hidden_layers: Sequence[int] = (), view: str = "exact") -> TargetOutput:
        """The forward of a :class:`~specdec.contracts.VerifyPlan`; the GDN tree tables give mask and positions.

        The plan's tree was validated when it was built, so its parents go to the device path unchecked
        (no host read): a replay under CUDA graphs needs nothing from the host but the inputs.
        """
        plan.check_prefix(self.length)
        self._check_inputs(plan.tokens, None, None, hidden_layers)
        self._check_view(view)
        return self._forward_rows(plan.tokens, None, None, plan.row_parents, tuple(hidden_layers), view)

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
        """Run ``T`` new rows against the committed prefix; nothing is committed.

        Args:
            tokens: ``[1, T]`` int64 token ids.
            positions: ``[1, T]`` RoPE positions; default ``length + depth`` (a chain: ``length + t``).
                Explicit positions always run the eager forward.
            mask: ``[T, T]`` bool attention mask over the new rows. It must be the ancestor-or-self mask
                of the rows' tree (a GDN state can only follow a tree); without ``tree_parents`` the
                tree is read off it (parent = nearest earlier row the row sees).
            hidden_layers: layer indices whose outputs to return (HF ``hidden_states`` numbering).
            tree_parents: ``[T]`` integer parent row of each row, ``-1`` = child of the committed
                prefix, ``tree_parents[t] < t``. For a verify window ``[root, node_0, ...]`` of a
                :class:`~specdec.verify.tree.Tree`: ``[-1] + (tree.parents + 1)``. Default: a chain.
            view: ``"exact"`` or ``"q"`` (the 8-bit A+E weights; rows of a ``"q"`` forward cannot be
                committed, and the GDN states are only read, as in every forward).

        Returns:
            :class:`TargetOutput` with float32 logits ``[1, T, V]``.
        """
        self._check_inputs(tokens, positions, mask, hidden_layers)
        self._check_view(view)
        parents = self._checked_parents(tokens.shape[1], mask, tree_parents)
        return self._forward_rows(tokens, positions, mask, parents, tuple(hidden_layers), view)

    def _checked_parents(self, seqlen: int, mask, tree_parents) -> torch.Tensor | None:
        """The rows' parents as an int64 device tensor (``None`` for a chain), checked on the host."""
        device = self.device
        if tree_parents is None and mask is not None:
            # parent = the nearest earlier row a row attends (rows are in topological order)
            earlier = mask & torch.ones(seqlen, seqlen, dtype=torch.bool, device=device).tril(-1)
            idx = torch.arange(seqlen, device=device)
            tree_parents = torch.where(earlier, idx, -1).amax(dim=1)
        if tree_parents is None:
            return None
        parents = check_tree_parents(tree_parents, seqlen, device)
        check_parent_order(parents.tolist())
        if mask is not None and not torch.equal(mask, build_tree_meta(parents, validate=False).ancestors[0].bool()):
            raise ValueError("mask: expected the ancestor-or-self mask of the rows' tree; a GDN layer can only follow a tree")
        return parents

    def _method(self, rows: int) -> str:
        if self.gdn_method != "auto":
            return self.gdn_method
        return "wy" if rows <= _WY_MAX_ROWS else "path"

    def _forward_rows(self, tokens, positions, mask, parents, hidden_layers: tuple[int, ...], view: str) -> TargetOutput:
        """Checked rows (``parents``: int64 device tensor, or ``None`` for a chain) on the static or eager path."""
        with self._views.use(view):
            out = self._forward_rows_in_view(tokens, positions, mask, parents, hidden_layers, view)
        self._last_view = view
        return out

    def _forward_rows_in_view(self, tokens, positions, mask, parents, hidden_layers, view: str) -> TargetOutput:
        seqlen = tokens.shape[1]
        bucket = self._static_bucket(seqlen) if positions is None else None
        self._forget_last()
        if bucket is not None:
            return self._static_forward(bucket, tokens, parents, hidden_layers, view)
        device = self.device
        meta = build_tree_meta(torch.arange(-1, seqlen - 1, device=device) if parents is None else parents, validate=False)
        if mask is None and parents is not None:
            mask = meta.ancestors[0].bool()
        explicit_positions = positions  # checked by commit: the RoPE position a committed row ran at
        if positions is None:
            positions = self.length + meta.depth.to(torch.long)
        slots = self.length + torch.arange(seqlen, device=device)
        attn_mask = prefix_attention_mask(self.length, seqlen, mask, device)
        out, stash = self._run(
            tokens, positions, slots, attn_mask, self.length + seqlen, meta, self._slot, hidden_layers, self._method(seqlen)
        )
        self._last_rows = seqlen
        self._stash = stash
        self._last_parents = parents
        self._last_positions = explicit_positions
        return out

    def static_body(self, tokens, parents, length, slot: int, hidden_layers: tuple[int, ...] = ()):
        """The verify / decode forward on fixed-shape tensors, what a CUDA graph captures.

        Args:
            tokens: ``[1, Tb]`` int64 rows (a bucket; padded rows are extra roots, never committed).
            parents: ``[Tb]`` int64 parent rows, ``-1`` = child of the committed prefix (checked by the caller).
            length: ``[]`` int64 device scalar, the committed length.
            slot: the ring slot holding the committed GDN states (fixed per graph).
            hidden_layers: taps, as for :meth:`forward`.

        Returns:
            ``(TargetOutput, stash)``; the stash (per GDN layer: pre-conv rows, k, v, gate, beta; per
            attention layer: the rows' K/V ``[1, Hkv, Tb, D]``) is what :meth:`static_commit_body` commits.
        """
        bucket = tokens.shape[1]
        meta = build_tree_meta(parents, validate=False)
        positions = length + meta.depth.to(torch.long)  # [1, Tb]
        span = self.max_seq_len
        attn_mask = self._static_prefix_mask(length, meta.ancestors[0].bool(), span)
        slots = length + torch.arange(bucket, device=tokens.device)
        out, gdn = self._run(tokens, positions, slots, attn_mask, span, meta, slot, hidden_layers, self._method(bucket))
        # the rows' K/V, so that the commit reads them from here and compacts the cache idempotently
        kv = [
            (k_cache.index_select(2, slots), v_cache.index_select(2, slots))
            for k_cache, v_cache in zip(self.k_caches, self.v_caches)
        ]
        return out, {"gdn": gdn, "kv": kv}

    def static_commit_body(self, path, length, stash, cur: int, nxt: int) -> None:
        """The commit on fixed-shape tensors: replay ``path`` from ring slot ``cur`` into ``nxt``, compact K/V.

        Args:
            path: ``[Tb]`` int64 accepted rows root to leaf, then ``-1`` (checked by the caller).
            length: ``[]`` int64 device scalar, the committed length before the commit.
            stash: the stash of :meth:`static_body`.
            cur, nxt: ring slots read and written (fixed per graph).

        Reads only the stash and slot ``cur``, so running it again (graph warm-up) writes the same result.
        """
        for g, (mixed, k, v, gate, beta) in enumerate(stash["gdn"]):
            if self._triton(k.device):
                gdn_tree_commit_triton(
                    k[None].contiguous(),
                    v[None].contiguous(),
                    gate[None].contiguous(),
                    beta[None].contiguous(),
                    path.to(torch.int32)[None],
                    self._rec[cur, g][None],
                    self._rec[nxt, g][None],
                    use_qk_l2norm=True,
                )
            else:
                gdn_tree_commit(k, v, gate, beta, path, self._rec[cur, g], backend="torch", out=self._rec[nxt, g])
            self._conv[nxt, g].copy_(conv_state_commit_static(mixed, path, self._conv[cur, g]))
        index = torch.arange(path.numel(), device=path.device)
        src = torch.where(path >= 0, path, index)  # padding rewrites a scratch slot with its own row
        dst = length + index
        for k_cache, v_cache, (k_rows, v_rows) in zip(self.k_caches, self.v_caches, stash["kv"]):
            k_cache.index_copy_(2, dst, k_rows.index_select(2, src))
            v_cache.index_copy_(2, dst, v_rows.index_select(2, src))

    def _triton(self, device: torch.device) -> bool:
        return self.backend == "triton" or (self.backend == "auto" and device.type == "cuda")

    def _static_forward(self, bucket: int, tokens, parents, hidden_layers, view: str = "exact") -> TargetOutput:
        seqlen = tokens.shape[1]
        graphs = self._graphs
        static = graphs.buffers(
            ("rows", bucket),
            lambda: {
                "tokens": torch.zeros(1, bucket, dtype=torch.long),
                "parents": torch.full((bucket,), -1, dtype=torch.long),
                "chain": torch.arange(-1, bucket - 1),
                "roots": torch.full((bucket,), -1, dtype=torch.long),
                "path": torch.full((bucket,), -1, dtype=torch.long),
            },
        )
        static["tokens"][:, :seqlen].copy_(tokens)
        if parents is None:
            static["parents"].copy_(static["chain"])  # padded rows continue the chain; never committed
        else:
            static["parents"].copy_(static["roots"])
            static["parents"][:seqlen].copy_(parents)
        graphs.set_length(self.length)
        key = ("forward", bucket, self._slot, hidden_layers, view)
        slot = self._slot
        out, stash = graphs.run(
            key, lambda: self.static_body(static["tokens"], static["parents"], graphs.length, slot, hidden_layers)
        )
        self._last_rows = seqlen
        self._stash = stash
        self._last_parents = parents
        self._last_static = (key, static)
        return TargetOutput(logits=out.logits[:, :seqlen].clone(), hidden=tuple(h[:, :seqlen].clone() for h in out.hidden))

    def _run(self, tokens, positions, slots, attn_mask, kv_len, meta, slot: int, hidden_layers, method: str):
        """The layer stack on explicit tensors; returns ``(TargetOutput, stash)``."""
        cos, sin = self._rope(positions)
        stash = []
        rec, conv = self._rec[slot], self._conv[slot]

        def gdn(g, mixer, h):
            out, saved = mixer(h, rec[g], conv[g], meta, method=method, backend=self.backend)
            stash.append(saved)
            return out

        def attention(a, mixer, h):
            k_cache, v_cache = self.k_caches[a][:, :, :kv_len], self.v_caches[a][:, :, :kv_len]
            return mixer(h, cos, sin, k_cache, v_cache, slots, attn_mask)

        x, taps = self.layer_stack(self.embed(tokens), gdn, attention, hidden_layers)
        return TargetOutput(logits=self.lm_head(x).float(), hidden=taps), stash

    def layer_stack(self, x, gdn, attention, hidden_layers: Sequence[int]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """``x [1, R, H]`` through every layer, pre-norm with residuals; ``(final-normed x, taps)``.

        ``gdn(g, mixer, h)`` and ``attention(a, mixer, h)`` return the mixer's output ``[1, R, H]`` for the
        ``g``-th GDN / ``a``-th attention layer from its normed input ``h``; the MLPs, norms and taps are run
        here (HF ``hidden_states`` numbering; the last tap is the normed state), the same for every forward
        path (batch 1, packed, fixed-shape).
        """
        taps: dict[int, torch.Tensor] = {0: x} if 0 in hidden_layers else {}
        a = g = 0
        for i, layer in enumerate(self.layers):
            h = layer.attn_norm(x)
            if layer.is_gdn:
                out = gdn(g, layer.mixer, h)
                g += 1
            else:
                out = attention(a, layer.mixer, h)
                a += 1
            x = x + out
            x = x + layer.mlp(layer.mlp_norm(x))
            if i + 1 in hidden_layers:
                taps[i + 1] = x
        x = self.norm(x)
        if len(self.layers) in hidden_layers:  # HF's last hidden state is the normed one
            taps[len(self.layers)] = x
        return x, tuple(taps[t] for t in hidden_layers)

    def commit(self, accepted: int | torch.Tensor) -> None:
        """Keep the accepted rows of the last forward: replay their path into the GDN states, compact K/V.

        Args:
            accepted: ``n`` keeps the first ``n`` rows (they must form a path: a chain forward, or a
                tree whose first ``n`` rows are a chain); a LongTensor ``[n]`` of rows forming a
                root-to-node path of the last forward's tree (ascending; first row a child of the
                committed prefix, each next row a child of the previous).
        """
        rows, path = self._accepted_path(accepted)
        n = len(rows)
        if n and self._last_static is None and self._stash is None:
            raise RuntimeError("commit: the last forward's recurrent inputs are gone (not stashed by this target)")
        if n:
            nxt = self._free_slot()
            if self._last_static is not None:
                self._static_commit(path, nxt)
            else:
                self._eager_commit(path, rows, nxt)
            self._slot = nxt
            self._slot_len[nxt] = self.length + n
        self._advance(n)
        self._forget_last()

    def _accepted_path(self, accepted: int | torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """``accepted`` checked against the last forward's rows: ``(rows on the host, path [n] on the device)``."""
        self._accepted_count(accepted)
        if isinstance(accepted, int):
            rows = list(range(accepted))
            path = torch.arange(accepted, device=self.device)
        else:
            rows = accepted.tolist()
            path = accepted.to(self.device)
        parents = None if self._last_parents is None else self._last_parents.tolist()
        for j, r in enumerate(rows):
            want = rows[j - 1] if j else -1
            got = (r - 1 if parents is None else parents[r]) if 0 <= r < self._last_rows else None
            if got != want:
                raise ValueError(
                    f"accepted: expected a root-to-node path of the last forward's rows; row {r} at position {j} "
                    f"{'is out of range' if got is None else f'has parent {got}, not {want}'}"
                )
        if self._last_positions is not None:  # explicit positions (eager rows only): each row at its slot's position
            check_committed_path(rows, self.length, self._last_positions)
        return rows, path

    def _eager_commit(self, path: torch.Tensor, rows: list[int], nxt: int) -> None:
        cur_rec, cur_conv = self.recurrent_states, self.conv_states
        for g, (mixed, k, v, gate, beta) in enumerate(self._stash):
            gdn_tree_commit(k, v, gate, beta, path, cur_rec[g], backend=self.backend, out=self._rec[nxt, g])
            self._conv[nxt, g].copy_(conv_state_commit(mixed, path, cur_conv[g]))
        if rows != list(range(len(rows))):
            compact_kv(self.k_caches, self.v_caches, self.length, path)

    def _static_commit(self, path: torch.Tensor, nxt: int) -> None:
        forward_key, static = self._last_static
        graphs, stash, cur = self._graphs, self._stash, self._slot
        static["path"].fill_(-1)
        static["path"][: path.numel()].copy_(path)
        graphs.set_length(self.length)
        graphs.run(("commit", forward_key, nxt), lambda: self.static_commit_body(static["path"], graphs.length, stash, cur, nxt))

    def reference_logits(self, tokens: torch.Tensor, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Not available for hybrids: the layer-by-layer precision reference covers dense layers only (``TypeError``)."""
        raise TypeError("reference_logits: expected dense DecoderLayer layers only, got ['HybridLayer']")

    def _free_slot(self) -> int:
        """A ring slot to write the next state into: an empty one, else the one with the shortest length."""
        others = [s for s in range(self._state_slots) if s != self._slot]
        empty = [s for s in others if self._slot_len[s] < 0]
        return empty[0] if empty else min(others, key=lambda s: self._slot_len[s])


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
    """Allocate a :class:`HybridTarget` and copy HF-named weights (either layout) into it.

    Example:
        >>> from specdec.testing import tiny_hf_model
        >>> hf = tiny_hf_model("qwen3_5_text", seed=0)
        >>> target = build_hybrid_target(HybridConfig.from_hf(hf.config), hf.state_dict(), hf_config=hf.config,
        ...                              dtype=torch.float32, device="cpu", max_seq_len=64)
        >>> type(target).__name__, target(torch.tensor([[1, 2, 3]])).logits.shape
        ('HybridTarget', torch.Size([1, 3, 97]))
    """
    inv_freq, scaling = cfg.rope_inv_freq(hf_config)
    target = HybridTarget(
        cfg, max_seq_len=max_seq_len, inv_freq=inv_freq, attention_scaling=scaling, dtype=dtype, device=device, **kwargs
    )
    load_weights(target, hybrid_state_from_hf(cfg, hf_state), tied=cfg.tie_word_embeddings)
    return target.eval().requires_grad_(False)


def random_hybrid_target(
    cfg: HybridConfig,
    *,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str | None = None,
    max_seq_len: int = 4096,
    seed: int = 0,
    **kwargs: Any,
) -> HybridTarget:
    """A hybrid target with random weights at a real model's shape (timing and exactness work); ``device=None``:
    CUDA when available, else the CPU.

    Matrices ``N(0, 1 / fan_in)``, embeddings ``N(0, 1)``, (1 + w) norms 0, gated norms 1,
    ``A_log = log U(1, 16)`` and ``dt_bias = 1`` (transformers' init).

    Example:
        >>> from specdec.testing import tiny_target
        >>> cfg = tiny_target("qwen3_5_text", seed=0).config
        >>> target = random_hybrid_target(cfg, dtype=torch.float32, device="cpu", max_seq_len=64)
        >>> target(torch.tensor([[1, 2, 3]])).logits.shape
        torch.Size([1, 3, 97])
    """
    device = default_device() if device is None else device
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
