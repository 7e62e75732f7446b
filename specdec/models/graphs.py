"""CUDA graphs of fixed-shape functions: static input buffers, side-stream warm-up, one capture per key.

A runtime that wants graph replays writes its step as a *static body*: a function of preallocated
tensors only (no host reads, no shapes that depend on values, no allocation that outlives the call
except its outputs). :class:`StaticGraphs` owns those tensors per key (typically a padded row count),
captures the body at the first call of a key and replays it afterwards. With ``capture=False`` it
runs the same body eagerly on the same buffers (the *static path*), on any device, which is how the
CPU tests check that what a graph captures computes what the eager forward does.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

__all__ = ["StaticGraphs", "pick_bucket"]


def pick_bucket(buckets: tuple[int, ...], rows: int) -> int | None:
    """The smallest bucket ``>= rows`` (``buckets`` ascending), or ``None`` when ``rows`` exceeds them all.

    Example:
        >>> pick_bucket((1, 4, 16), 5), pick_bucket((1, 4, 16), 17)
        (16, None)
    """
    return next((b for b in buckets if b >= rows), None)


class StaticGraphs:
    """Static buffers and CUDA graphs of fixed-shape bodies, one per key.

    Args:
        device: where buffers live and graphs run.
        capture: ``True`` captures a CUDA graph per key (CUDA only); ``False`` runs the body eagerly on
            the same static buffers (the static path, any device).
        warmup: eager runs on a side stream before a capture (allocator and kernel selection).

    Attributes:
        length: ``[]`` int64 device scalar that bodies read as the committed length; set it with
            :meth:`set_length` before :meth:`run` (a host-to-device copy, no sync).

    A body may write anything it owns (scratch cache slots, its outputs); warm-up runs execute it too,
    so it must not change committed state unless the caller restores or overwrites it (a commit body
    that writes the next ring slot is fine: the replay writes it again).

    Example:
        >>> graphs = StaticGraphs("cpu", capture=False)
        >>> buf = graphs.buffers("double-4", lambda: {"x": torch.zeros(4)})
        >>> buf["x"].copy_(torch.arange(4.0))
        tensor([0., 1., 2., 3.])
        >>> graphs.run("double-4", lambda: buf["x"] * 2)
        tensor([0., 2., 4., 6.])

        On a GPU, ``StaticGraphs("cuda", capture=True)`` captures that lambda at the first ``run`` and
        replays it afterwards; the returned tensor is then the graph's static output.
    """

    def __init__(self, device: torch.device | str, *, capture: bool, warmup: int = 2):
        device = torch.device(device)
        if capture and device.type != "cuda":
            raise ValueError(f"capture: CUDA graphs need a CUDA device, got {device}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"warmup: expected an int >= 1, got {warmup!r}")
        self.device = device
        self.capture = capture
        self.warmup = warmup
        self.length = torch.zeros((), dtype=torch.long, device=device)
        self._buffers: dict[Hashable, dict[str, torch.Tensor]] = {}
        self._graphs: dict[Hashable, tuple[torch.cuda.CUDAGraph, Any]] = {}
        # one memory pool for every graph: they never run concurrently, and each keeps its outputs alive
        self._pool = torch.cuda.graph_pool_handle() if capture else None

    def __len__(self) -> int:
        """Graphs captured so far."""
        return len(self._graphs)

    def set_length(self, length: int) -> None:
        """Write the host int ``length`` into the device scalar :attr:`length` (no host sync).

        Example:
            >>> graphs = StaticGraphs("cpu", capture=False)
            >>> graphs.set_length(5); graphs.length
            tensor(5)
        """
        self.length.fill_(length)

    def buffers(self, key: Hashable, make: Callable[[], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """The static tensors of ``key``, made by ``make()`` the first time (on :attr:`device`)."""
        if key not in self._buffers:
            with torch.device(self.device):
                self._buffers[key] = make()
        return self._buffers[key]

    def run(self, key: Hashable, body: Callable[[], Any]) -> Any:
        """``body()`` for ``key``: eagerly on the static path, else captured once and replayed.

        ``body`` must read only the static buffers (and module state at fixed addresses); under capture
        its return value (a tensor or a structure of tensors) is the graph's static output, valid until
        the next replay of any key (the graphs share one memory pool: a graph captured later may keep
        its outputs where an earlier one keeps its scratch).
        """
        if not self.capture:
            return body()
        if key not in self._graphs:
            self._graphs[key] = self._capture(body)
        return self.replay(key)

    def replay(self, key: Hashable) -> Any:
        """Replay the graph :meth:`run` captured for ``key`` and return its static output (for timing a
        replay alone, without the caller's body at hand).

        Raises:
            ValueError: nothing was captured for ``key`` (on the static path nothing ever is).

        Example:
            >>> StaticGraphs("cpu", capture=False).replay(4)
            Traceback (most recent call last):
            ...
            ValueError: key: expected a key with a captured graph (none captured: static path), got 4
        """
        if key not in self._graphs:
            captured = f"captured: {list(self._graphs)}" if self.capture else "none captured: static path"
            raise ValueError(f"key: expected a key with a captured graph ({captured}), got {key!r}")
        graph, out = self._graphs[key]
        graph.replay()
        return out

    def _capture(self, body: Callable[[], Any]):
        device = self.device
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(self.warmup):
                body()
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out = body()
        return graph, out
