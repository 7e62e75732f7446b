"""Weight views of a lean target: the exact weights, or the 8-bit A+E view a two-level Q pass reads.

The ``"q"`` view keeps, for every bf16 weight bit, the sign, the exponent (within the row's 16-binade
W12 window) and the top 3 mantissa bits, and sets the low 4 mantissa bits to their midpoint
(:meth:`specdec.formats.W12Tensor.q_view`). What one ``"q"`` weight is depends on how the target
stores its weights:

* W12 weights: the same planes (:meth:`~specdec.formats.W12Tensor.as_q_weight`), no extra memory;
  ``F.linear`` reads only the 8-bit plane.
* bf16 weights on CUDA: a W12 copy built once, used through its 8-bit plane (extra memory: 12 bits
  per weight).
* any other weights (float32 CPU targets, the tests' reference): the view's values as a plain tensor
  of the weight's dtype (bf16 values are exact in float32 and float16 ranges used here).

Only ``nn.Linear`` weights change; embeddings, norms and convolutions stay exact. A view is built at
its first use and kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from specdec.formats.w12 import W12Tensor

WEIGHT_VIEWS = ("exact", "q")
Q_STORAGES = ("packed", "dense")

__all__ = ["Q_STORAGES", "WEIGHT_VIEWS", "WeightViews", "q_view_weight"]


def q_view_weight(weight: torch.Tensor, *, storage: str = "packed") -> torch.Tensor:
    """The 8-bit A+E view of one weight matrix ``[N, K]``, usable as an ``nn.Linear`` weight.

    ``storage="packed"`` keeps the 8-bit plane where a kernel reads it (W12 weights, bf16 weights on
    CUDA); ``"dense"`` always gives the view's values as a plain tensor of the weight's dtype (the
    dense GEMM reads 16 bits: the view's accuracy without its byte saving).

    Example:
        >>> w = torch.tensor([[1.0, 2.0, 0.3]])
        >>> q_view_weight(w)                     # the low 4 of 7 mantissa bits at their midpoint, 8/128
        tensor([[1.0625, 2.1250, 0.2969]])
    """
    if storage not in Q_STORAGES:
        raise ValueError(f"storage: expected one of {Q_STORAGES}, got {storage!r}")
    if isinstance(weight, W12Tensor):
        return weight.as_q_weight() if storage == "packed" else weight.q_view()
    if weight.ndim != 2:
        raise ValueError(f"weight: expected a 2-D [N, K] matrix, got shape {tuple(weight.shape)}")
    w12 = W12Tensor.from_bf16(weight.detach().to(torch.bfloat16).contiguous())
    if storage == "packed" and weight.is_cuda and weight.dtype == torch.bfloat16:
        return w12.as_q_weight()
    return w12.q_view().to(weight.dtype)


class WeightViews:
    """Swap every ``nn.Linear`` weight of a module for a view's weights while a forward runs.

    Args:
        module: the target (its ``nn.Linear`` submodules are found once, at the first swap).
        q_storage: how ``"q"`` weights are held (:func:`q_view_weight`'s ``storage``).

    Example:
        >>> layer = nn.Sequential(nn.Linear(3, 2, bias=False))
        >>> views = WeightViews(layer)
        >>> x = torch.ones(1, 3)
        >>> with views.use("q"):
        ...     q = layer(x)
        >>> torch.equal(layer(x), q), views.built
        (False, ('q',))
    """

    def __init__(self, module: nn.Module, *, q_storage: str = "packed"):
        if q_storage not in Q_STORAGES:
            raise ValueError(f"q_storage: expected one of {Q_STORAGES}, got {q_storage!r}")
        self.q_storage = q_storage
        self._module = module
        self._weights: dict[str, list[tuple[nn.Linear, nn.Parameter]]] = {}
        self._sources: dict[str, list[tuple[torch.Tensor, int]]] = {}  # the exact weights (and versions) each view is of

    @property
    def built(self) -> tuple[str, ...]:
        """The views built so far (``"exact"`` never needs building) (tuple of str)."""
        return tuple(self._weights)

    def _build(self, view: str) -> list[tuple[nn.Linear, nn.Parameter]]:
        made: dict[int, nn.Parameter] = {}  # tied weights share one view
        pairs = []
        for sub in self._module.modules():
            if isinstance(sub, nn.Linear):
                w = sub.weight
                if id(w) not in made:
                    made[id(w)] = nn.Parameter(q_view_weight(w, storage=self.q_storage), requires_grad=False)
                pairs.append((sub, made[id(w)]))
        return pairs

    def _stale(self, view: str) -> bool:
        sources = self._sources[view]
        return any(sub.weight is not w or w._version != version for (sub, _), (w, version) in zip(self._weights[view], sources))

    @contextmanager
    def use(self, view: str) -> Iterator[None]:
        """Run the body with ``view``'s weights in place (``"exact"``: nothing changes).

        Raises:
            ValueError: ``view`` is not one of :data:`WEIGHT_VIEWS`.
        """
        if view not in WEIGHT_VIEWS:
            raise ValueError(f"view: expected one of {WEIGHT_VIEWS}, got {view!r}")
        if view == "exact":
            yield
            return
        if view not in self._weights or self._stale(view):  # built, or rebuilt after a weight was replaced or written
            self._weights[view] = self._build(view)
            self._sources[view] = [(sub.weight, sub.weight._version) for sub, _ in self._weights[view]]
        pairs = self._weights[view]
        exact = [sub._parameters["weight"] for sub, _ in pairs]
        try:
            for sub, w in pairs:
                sub._parameters["weight"] = w
            yield
        finally:
            for (sub, _), w in zip(pairs, exact):
                sub._parameters["weight"] = w
