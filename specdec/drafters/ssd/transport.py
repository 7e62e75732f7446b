"""Where pre-drafting runs while the target verifies: inline, on a worker thread, or on a CUDA side stream.

A transport takes one job per round (:meth:`submit`, called before ``propose`` returns) and hands its
result back at the next round (:meth:`wait`). The drafter's schedule is the same for all of them, and
each job draws from its own generator, so every transport gives the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["CudaStreamTransport", "PredraftTransport", "SequentialTransport", "ThreadTransport"]


@runtime_checkable
class PredraftTransport(Protocol):
    """Runs the pre-draft job of a round and returns its result at the next round."""

    def submit(self, job: Callable[[], Any]) -> None:
        """Start ``job`` (at most one in flight; a transport may run it right away)."""

    def wait(self) -> Any:
        """The result of the last submitted job (re-raising its exception); blocks until it is done."""

    def close(self) -> None:
        """Finish any job in flight and release workers."""


class SequentialTransport:
    """Runs the job inside :meth:`submit`: the CPU schedule (pre-draft, then verify).

    Example:
        >>> t = SequentialTransport(); t.submit(lambda: 3); t.wait()
        3
    """

    def __init__(self):
        self._result: Any = None

    def submit(self, job: Callable[[], Any]) -> None:
        """Run ``job`` now and keep its result for :meth:`wait`."""
        self._result = job()

    def wait(self) -> Any:
        """The kept result (``None`` once read)."""
        result, self._result = self._result, None
        return result

    def close(self) -> None:
        """Drop any kept result."""
        self._result = None


class ThreadTransport:
    """Runs the job on one worker thread, overlapping it with whatever the caller does next.

    The job must not share mutable state with the caller until :meth:`wait` returns (the SSD drafter's
    job owns the base drafter and its own generator in between).

    Example:
        >>> t = ThreadTransport(); t.submit(lambda: 3); t.wait()
        3
    """

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future | None = None

    def submit(self, job: Callable[[], Any]) -> None:
        """Start ``job`` on the worker thread (``RuntimeError`` if one is still in flight)."""
        if self._future is not None:
            raise RuntimeError("submit: a job is still in flight; call wait() first")
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specdec-predraft")
        self._future = self._pool.submit(job)

    def wait(self) -> Any:
        """Block until the job is done and return its result (re-raising its exception); ``None`` without a job."""
        if self._future is None:
            return None
        future, self._future = self._future, None
        return future.result()

    def close(self) -> None:
        """Wait for a job in flight (discarding its error) and stop the worker thread."""
        if self._future is not None:
            try:
                self.wait()
            except Exception:  # noqa: BLE001 - a failed job being discarded at reset has nothing left to report to
                pass
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class CudaStreamTransport(ThreadTransport):
    """A worker thread that issues the job's kernels on a side CUDA stream.

    :meth:`submit` makes the side stream wait for the caller's stream (the job reads tensors made
    there); :meth:`wait` makes the caller's stream wait for the side stream. Host reads inside the job
    (the cache keys) block the worker only, so the caller launches the verification meanwhile and the
    GPU runs both.

    Known limitation: on an H200 (torch 2.11, CUDA 13) a base drafter that replays CUDA graphs inside the
    job, while the caller replays the target's graphs, hung the process in four runs of four: host reads on
    both streams never returned (the GPU work of the two streams did not finish). With the drafter run
    eagerly, or with both on one stream (:class:`ThreadTransport`), the same schedule runs. Give this
    transport a base drafter without CUDA graphs until the cause is known.

    Args:
        device: the CUDA device of the drafter.
    """

    def __init__(self, device: torch.device | str):
        super().__init__()
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"device: expected a CUDA device, got {self.device}")
        self.stream = torch.cuda.Stream(device=self.device)
        self._done: torch.cuda.Event | None = None

    def submit(self, job: Callable[[], Any]) -> None:
        """Start ``job`` on the worker thread with its kernels on the side stream, after the caller's pending work."""
        caller = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(caller)
        done = torch.cuda.Event()
        self._done = done

        def on_side_stream():
            with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
                result = job()
                done.record(self.stream)
            return result

        super().submit(on_side_stream)

    def wait(self) -> Any:
        """The job's result; the caller's stream then waits for the side stream's work."""
        result = super().wait()
        if self._done is not None:
            torch.cuda.current_stream(self.device).wait_event(self._done)
            self._done = None
        return result
