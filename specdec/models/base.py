"""What every lean target shares: cache-length bookkeeping, input checks, RoPE, plans, commits, graphs.

:class:`LeanTarget` is the one constructor path of :class:`~specdec.models.dense.DenseTarget` and
:class:`~specdec.models.hybrid.HybridTarget`: it builds the embedding, the layer stack (one module
per layer from the subclass's ``make_layer``), the final norm and the head, ties the head when the
config says so, sets up RoPE and allocates the cache. Subclasses supply the layers, the cache and
the forward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.target import TargetOutput
from specdec.kernels.gdn.meta import build_tree_meta
from specdec.models.graphs import StaticGraphs, pick_bucket
from specdec.models.weight_views import WEIGHT_VIEWS, WeightViews

DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def default_device() -> torch.device:
    """CUDA when available, else the CPU: where a target goes when no device is named."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def check_token_ids(tokens: torch.Tensor, vocab_size: int, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` when an id of ``tokens`` lies outside ``[0, vocab_size)``.

    Checked on the CPU only, where the read is free; on an accelerator the embedding's own bounds check
    stands (the decode loops and the engine check their prompts once, before any forward).

    Example:
        >>> check_token_ids(torch.tensor([[1, 200]]), 97, "tokens")
        Traceback (most recent call last):
        ...
        ValueError: tokens: expected token ids in [0, 97), got ids in [1, 200]
    """
    if tokens.device.type == "cpu" and tokens.numel():
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(f"{name}: expected token ids in [0, {vocab_size}), got ids in [{low}, {high}]")


def check_positions(positions: torch.Tensor | None, shape: tuple[int, ...], device: torch.device, name: str) -> None:
    """Raise naming ``name`` unless ``positions`` is ``None`` or an integer tensor of ``shape`` on ``device``.

    Example:
        >>> check_positions(torch.tensor([[0.0, 1.5]]), (1, 2), torch.device("cpu"), "positions")
        Traceback (most recent call last):
        ...
        TypeError: positions: expected an integer tensor (RoPE positions), got torch.float32
    """
    if positions is None:
        return
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{name}: expected an integer tensor {list(shape)} or None, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_floating_point() or positions.is_complex():
        raise TypeError(f"{name}: expected an integer tensor (RoPE positions), got {positions.dtype}")
    if tuple(positions.shape) != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {tuple(positions.shape)}")
    if positions.device != device:
        raise ValueError(f"{name}: expected device {device}, got {positions.device}")


def check_rows_mask(mask: torch.Tensor | None, seqlen: int, device: torch.device, name: str) -> None:
    """Raise naming ``name`` unless ``mask`` is ``None`` or a bool ``[seqlen, seqlen]`` tensor on ``device``."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != (seqlen, seqlen):
        desc = f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{name}: expected bool [{seqlen}, {seqlen}], got {desc}")
    if mask.device != device:
        raise ValueError(f"{name}: expected device {device}, got {mask.device}")


def check_tree_parents(tree_parents: object, seqlen: int, device: torch.device) -> torch.Tensor:
    """``tree_parents`` as int64 after its type, shape and device checks (no host read; see :func:`check_parent_order`)."""
    if not isinstance(tree_parents, torch.Tensor):
        raise TypeError(f"tree_parents: expected an integer tensor [{seqlen}], got {type(tree_parents).__name__}")
    if tree_parents.dtype == torch.bool or tree_parents.is_floating_point() or tree_parents.is_complex():
        raise TypeError(f"tree_parents: expected an integer dtype, got {tree_parents.dtype}")
    if tuple(tree_parents.shape) != (seqlen,):
        raise ValueError(f"tree_parents: expected shape ({seqlen},) (one parent per row), got {tuple(tree_parents.shape)}")
    if tree_parents.device != device:
        raise ValueError(f"tree_parents: expected device {device}, got {tree_parents.device}")
    return tree_parents.to(torch.long)


def check_parent_order(parents: Sequence[int]) -> None:
    """Raise unless every row's parent comes before it (``-1 <= parents[t] < t``), read on the host.

    Example:
        >>> check_parent_order([-1, 0, 2])
        Traceback (most recent call last):
        ...
        ValueError: tree_parents: expected -1 <= tree_parents[t] < t (topological order), got tree_parents[2] = 2
    """
    for t, p in enumerate(parents):
        if not -1 <= p < t:
            raise ValueError(f"tree_parents: expected -1 <= tree_parents[t] < t (topological order), got tree_parents[{t}] = {p}")


def check_committed_path(
    rows: Sequence[int],
    length: int,
    positions: torch.Tensor | None,
    parents: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> None:
    """Raise unless the last forward's ``rows`` can be committed to slots ``[length, length + n)``, read on the host.

    Row ``rows[j]`` must have run at RoPE position ``length + j`` (``positions [1, T]``; ``None``: a chain, row
    ``r`` at ``length + r``), where the forward's tree is known (``parents [T]``) be a child of ``rows[j - 1]``
    (of the prefix for ``j = 0``), and where its mask is known (``mask [T, T]``, row ``t`` attends row ``i`` where
    true) have attended exactly ``rows[0..j]`` of the forward's rows: otherwise its K/V would hold another
    position or another context than the slot it lands in.

    Example:
        >>> check_committed_path([0, 2], 5, torch.tensor([[5, 6, 6]]), torch.tensor([-1, 0, 0]))
        >>> check_committed_path([0, 1], 5, torch.tensor([[5, 5]]))
        Traceback (most recent call last):
        ...
        ValueError: accepted: expected the rows of one root-to-node path; row 1 (accepted[1]) ran at position 5, not 6
    """
    pos = None if positions is None else positions.reshape(-1).tolist()
    par = None if parents is None else parents.tolist()
    for j, r in enumerate(rows):
        at = length + r if pos is None else pos[r]
        if at != length + j:
            raise ValueError(
                f"accepted: expected the rows of one root-to-node path; row {r} (accepted[{j}]) ran at position {at}, "
                f"not {length + j}"
            )
        want = rows[j - 1] if j else -1
        if par is not None and par[r] != want:
            raise ValueError(
                f"accepted: expected the rows of one root-to-node path; row {r} (accepted[{j}]) has parent {par[r]}, not {want}"
            )
    if mask is not None:
        for j, r in enumerate(rows):
            seen, path = torch.nonzero(mask[r]).reshape(-1).tolist(), sorted(rows[: j + 1])
            if seen != path:
                raise ValueError(
                    f"accepted: expected the rows of one root-to-node path; row {r} (accepted[{j}]) attended rows "
                    f"{seen}, not {path}"
                )


def tree_rows_inputs(
    tree_parents: torch.Tensor,
    mask: torch.Tensor | None,
    positions: torch.Tensor | None,
    *,
    seqlen: int,
    length: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(mask [T, T], positions [1, T])`` of rows given as a tree: what is not given is derived from the parents.

    A missing ``mask`` is the ancestor-or-self mask of ``tree_parents [T]`` and missing ``positions`` are
    ``length + depth``, as a hybrid target derives them; a given ``mask`` must be that mask (checked with the
    parents' values on the CPU only, where the read is free).

    Example:
        >>> mask, positions = tree_rows_inputs(torch.tensor([-1, 0, 0]), None, None, seqlen=3, length=5,
        ...                                    device=torch.device("cpu"))
        >>> mask.int().tolist(), positions.tolist()
        ([[1, 0, 0], [1, 1, 0], [1, 0, 1]], [[5, 6, 6]])
    """
    parents = check_tree_parents(tree_parents, seqlen, device)
    on_cpu = device.type == "cpu"
    if mask is not None and positions is not None and not on_cpu:
        return mask, positions
    if on_cpu:
        check_parent_order(parents.tolist())
    meta = build_tree_meta(parents, validate=False)
    tree_mask = meta.ancestors[0].bool()
    if mask is None:
        mask = tree_mask
    elif on_cpu and not torch.equal(mask, tree_mask):
        raise ValueError("mask: expected the ancestor-or-self mask of tree_parents (the rows' tree), got another mask")
    if positions is None:
        positions = (length + meta.depth[0])[None]
    return mask, positions


class LeanTarget(nn.Module):
    """Base of the lean runtime's targets: a batch-1 cache of ``length`` committed tokens.

    Args:
        config: the model's shape (``vocab_size``, ``hidden_size``, ``num_layers``, ``rms_norm_eps``,
            ``tie_word_embeddings``, ``rope_inv_freq()``).
        make_layer: ``make_layer(i)`` builds decoder layer ``i``.
        make_norm: ``make_norm(dim, eps)`` builds the final norm.
        max_seq_len: cache capacity in tokens (>= 2).
        inv_freq: RoPE inverse frequencies; default from the config.
        attention_scaling: RoPE cos/sin scale.
        dtype, device: of the weights and the cache.

    Subclasses implement ``_allocate_cache()`` (called last here) and ``forward``; a subclass that sets
    attributes its ``_allocate_cache`` reads does so before calling this constructor.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> isinstance(target, LeanTarget), target.room()
        (True, 256)
    """

    def __init__(
        self,
        config: Any,
        *,
        make_layer: Callable[[int], nn.Module],
        make_norm: Callable[[int, float], nn.Module],
        max_seq_len: int,
        inv_freq: torch.Tensor | None,
        attention_scaling: float,
        dtype: torch.dtype,
        device: torch.device | str,
    ):
        super().__init__()
        if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 2:
            raise ValueError(f"max_seq_len: expected an int >= 2, got {max_seq_len!r}")
        self.config = config
        self.max_seq_len = max_seq_len
        with torch.device(device):
            self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
            self.layers = nn.ModuleList(make_layer(i) for i in range(config.num_layers))
            self.norm = make_norm(config.hidden_size, config.rms_norm_eps)
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
        # the last forward's (positions, tree_parents, mask), for commit's path check (dense targets)
        self._last_tree: tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None] = (None, None, None)
        self._last_view = "exact"
        self._views = WeightViews(self)
        self._graphs: StaticGraphs | None = None
        self._buckets: tuple[int, ...] = ()
        self._allocate_cache()

    def _allocate_cache(self) -> None:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        """``V``, the size of the logits' last dimension (int)."""
        return self.config.vocab_size

    @property
    def device(self) -> torch.device:
        """The device of the weights and the cache (:class:`torch.device`)."""
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the weights, the cache and the hidden states; logits are float32 (:class:`torch.dtype`)."""
        return self.embed.weight.dtype

    @property
    def supports_trees(self) -> bool:
        """Tree plans are verified in one pass."""
        return True

    @property
    def weight_views(self) -> tuple[str, ...]:
        """``("exact", "q")``: the exact weights and the 8-bit A+E view (see :mod:`specdec.models.weight_views`)."""
        return WEIGHT_VIEWS

    def room(self) -> int:
        """Tokens that still fit in the cache."""
        return self.max_seq_len - self.length

    def reset(self) -> None:
        """Forget every cached token (the buffers are kept; nothing is reallocated)."""
        self.length = 0
        self._last_rows = 0
        self._last_view = "exact"

    def truncate(self, length: int) -> None:
        """Roll the cache back to its first ``length`` committed tokens (used by drafters)."""
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.length:
            raise ValueError(f"length: expected 0 <= length <= {self.length}, got {length!r}")
        self.length = length
        self._last_rows = 0
        self._last_view = "exact"

    def discard(self) -> None:
        """Drop the scratch rows of the last forward (nothing is committed; the cache is unchanged)."""
        self._last_rows = 0
        self._last_view = "exact"

    def set_q_view_storage(self, storage: str) -> None:
        """Hold the ``"q"`` weight view ``"packed"`` (8 bits read per weight, the default) or ``"dense"``.

        ``"dense"`` keeps the view's values in the weights' dtype, read by the dense GEMM: the same Q
        logits at 16 bits per weight (what a bf16 target's Q pass costs without an 8-bit kernel). The
        view is rebuilt at its next use. Call it before :meth:`enable_cuda_graphs` / :meth:`enable_static_path`
        (a captured graph holds the weights it was captured with).

        Example:
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> target.set_q_view_storage("dense")
            >>> target.forward(torch.tensor([[1, 2]]), view="q").logits.shape
            torch.Size([1, 2, 97])
        """
        if self._graphs is not None:
            raise ValueError("set_q_view_storage: the static path is on (graphs hold their weights); call it before enabling it")
        self._views = WeightViews(self, q_storage=storage)

    def _check_view(self, view: str) -> None:
        if view not in WEIGHT_VIEWS:
            raise ValueError(f"view: expected one of {WEIGHT_VIEWS} (this target's weight_views), got {view!r}")

    def run_plan(self, plan: VerifyPlan, *, hidden_layers: Sequence[int] = (), view: str = "exact") -> TargetOutput:
        """The forward of a :class:`~specdec.contracts.VerifyPlan`: its rows, positions and mask (chains: causal).

        Example:
            >>> from specdec.testing import tiny_target
            >>> from specdec.contracts import Tree, VerifyPlan
            >>> target = tiny_target(seed=0)
            >>> plan = VerifyPlan.for_tree(torch.tensor([3]), Tree(tokens=[7, 8], parents=[-1, -1]), prefix_len=0)
            >>> target.run_plan(plan).logits.shape
            torch.Size([1, 3, 97])
        """
        plan.check_prefix(self.length)
        return self(plan.tokens, plan.positions, plan.mask, hidden_layers=hidden_layers, tree_parents=plan.row_parents, view=view)

    def _accepted_count(self, accepted: int | torch.Tensor) -> int:
        """Check ``accepted`` against the last forward; returns how many rows it keeps."""
        if self._last_view != "exact":
            raise RuntimeError(
                f"commit: the last forward ran the {self._last_view!r} weight view; its rows are proposals and are "
                "never committed (discard() them, then run the exact view)"
            )
        if isinstance(accepted, int) and not isinstance(accepted, bool):
            if not 0 <= accepted <= self._last_rows:
                raise ValueError(f"accepted: expected 0 <= n <= {self._last_rows} (rows of the last forward), got {accepted}")
            return accepted
        if not isinstance(accepted, torch.Tensor) or accepted.ndim != 1 or accepted.dtype != torch.long:
            desc = f"{accepted.dtype} {tuple(accepted.shape)}" if isinstance(accepted, torch.Tensor) else type(accepted).__name__
            raise TypeError(f"accepted: expected an int or a 1-D int64 tensor, got {desc}")
        if accepted.numel() > self._last_rows:
            raise ValueError(f"accepted: expected at most {self._last_rows} rows, got {accepted.numel()}")
        if accepted.device.type == "cpu":  # free there; on an accelerator a host read a round (the verifiers' rows are valid)
            rows = accepted.tolist()
            if any(not 0 <= r < self._last_rows for r in rows) or any(b <= a for a, b in zip(rows, rows[1:])):
                raise ValueError(
                    f"accepted: expected ascending row indices in [0, {self._last_rows}) (rows of the last forward), got {rows}"
                )
        return accepted.numel()

    def _advance(self, n: int) -> None:
        """Commit bookkeeping: ``n`` more committed tokens, no scratch rows left."""
        self.length += n
        self._last_rows = 0
        self._last_view = "exact"

    def _check_inputs(self, tokens, positions, mask, hidden_layers) -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.dtype != torch.long:
            desc = f"{tokens.dtype} {tuple(tokens.shape)}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise TypeError(f"tokens: expected an int64 tensor [1, T], got {desc}")
        if tokens.shape[0] != 1:
            raise ValueError(f"tokens: expected batch 1 (one request per cache), got batch {tokens.shape[0]}")
        seqlen = tokens.shape[1]
        if seqlen < 1:
            raise ValueError("tokens: expected at least one token, got T = 0")
        if tokens.device != self.device:
            raise ValueError(f"tokens: expected device {self.device}, got {tokens.device}")
        check_token_ids(tokens, self.config.vocab_size, "tokens")
        if self.length + seqlen > self.max_seq_len:
            raise ValueError(
                f"tokens: {seqlen} new rows do not fit: length {self.length} + {seqlen} > max_seq_len {self.max_seq_len}"
            )
        check_positions(positions, tuple(tokens.shape), self.device, "positions")
        check_rows_mask(mask, seqlen, self.device, "mask")
        for layer in hidden_layers:
            if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= self.config.num_layers:
                raise ValueError(f"hidden_layers: expected indices in [0, {self.config.num_layers}], got {layer!r}")

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)``, each ``[1, 1, T, D]``, of ``positions [1, T]``."""
        dtype = self.dtype if dtype is None else dtype
        freqs = positions[..., None].float() * self.inv_freq  # [1, T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.attention_scaling).to(dtype)[:, None]  # [1, 1, T, D]
        sin = (emb.sin() * self.attention_scaling).to(dtype)[:, None]
        return cos, sin

    @staticmethod
    def _static_prefix_mask(length: torch.Tensor, local: torch.Tensor, span: int) -> torch.Tensor:
        """``[1, 1, Tb, span]`` bool: slots before the device-side ``length``, then the new rows by ``local [Tb, Tb]``."""
        bucket = local.shape[0]
        rel = torch.arange(span, device=local.device) - length  # [S] slot relative to the first new row
        in_new = (rel >= 0) & (rel < bucket)
        cols = local[:, rel.clamp(0, bucket - 1)] & in_new  # [Tb, S]
        return ((rel < 0)[None, :] | cols)[None, None]

    def enable_cuda_graphs(self, buckets: Sequence[int] = DEFAULT_BUCKETS, **kwargs: Any) -> None:
        """Run forwards of up to ``max(buckets)`` rows as CUDA-graph replays (see :meth:`enable_static_path`).

        Graphs are captured at the first use of each key; a replay needs no host work beyond copying
        the inputs into static buffers. Empties the cache.
        """
        if self.device.type != "cuda":
            raise ValueError(f"enable_cuda_graphs: expected a CUDA target, got device {self.device}")
        self._enable_static(buckets, capture=True, **kwargs)

    def enable_static_path(self, buckets: Sequence[int] = DEFAULT_BUCKETS, **kwargs: Any) -> None:
        """Run forwards of up to ``max(buckets)`` rows through the fixed-shape body that CUDA graphs capture, eagerly.

        A forward of ``T`` rows is padded to the smallest bucket ``>= T`` (padded rows attend only to
        themselves and are never committed) and attends over the whole cache under a mask built from a
        device-side length. A forward that does not fit (more rows than the largest bucket, or a bucket
        that would run past the cache) runs the plain eager forward. Works on any device: this is what
        the CPU tests compare with the eager forward. Empties the cache.

        Example:
            >>> from specdec.testing import tiny_target
            >>> target = tiny_target(seed=0)
            >>> target.enable_static_path((1, 4))
            >>> target(torch.tensor([[1, 2, 3]])).logits.shape     # padded to 4 rows inside
            torch.Size([1, 3, 97])
        """
        self._enable_static(buckets, capture=False, **kwargs)

    def disable_static_path(self) -> None:
        """Back to eager forwards only (drops any graphs)."""
        self._graphs = None
        self._buckets = ()

    def _enable_static(self, buckets: Sequence[int], *, capture: bool) -> None:
        if not buckets or any(isinstance(b, bool) or int(b) != b or int(b) < 1 for b in buckets):
            raise ValueError(f"buckets: expected positive row counts, got {tuple(buckets)}")
        self._buckets = tuple(sorted({int(b) for b in buckets}))
        self._graphs = StaticGraphs(self.device, capture=capture)
        self.reset()

    def _static_bucket(self, seqlen: int) -> int | None:
        """The bucket a ``seqlen``-row forward runs in on the static path, or ``None`` (eager)."""
        if self._graphs is None:
            return None
        bucket = pick_bucket(self._buckets, seqlen)
        if bucket is None or self.length + bucket > self.max_seq_len:
            return None
        return bucket

    @property
    def uses_cuda_graphs(self) -> bool:
        """Whether forwards replay CUDA graphs."""
        return self._graphs is not None and self._graphs.capture
