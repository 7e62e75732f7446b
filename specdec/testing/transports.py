"""A pre-draft transport for tests: it holds each job until ``wait()``, so a test can see work left in flight."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["HeldJobTransport"]


class HeldJobTransport:
    """A :class:`~specdec.drafters.ssd.PredraftTransport` that runs a job only when :meth:`wait` asks for it.

    ``held`` is the job submitted and not yet waited for: after a request ends it must be ``None``, or the
    drafter left work that would still be running on a real worker.

    Example:
        >>> t = HeldJobTransport(); t.submit(lambda: 3); t.held is not None
        True
        >>> t.wait(), t.held
        (3, None)
    """

    def __init__(self):
        self.held: Callable[[], Any] | None = None

    def submit(self, job: Callable[[], Any]) -> None:
        """Hold ``job`` (``RuntimeError`` if one is already held: at most one is in flight)."""
        if self.held is not None:
            raise RuntimeError("submit: a job is still held; call wait() first")
        self.held = job

    def wait(self) -> Any:
        """Run the held job and return its result (``None`` without one)."""
        job, self.held = self.held, None
        return None if job is None else job()

    def close(self) -> None:
        """Drop the held job without running it."""
        self.held = None
