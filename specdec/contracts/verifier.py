"""The ``RequestScopedVerifier`` protocol: a verifier whose state belongs to one request."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class RequestScopedVerifier(Protocol):
    """A verifier that learns from a request's rounds (the two-level verifier's gate measures its rates as it goes).

    :func:`specdec.generate` calls ``start_request()`` once before each request's first round, so what one request
    taught the verifier does not change another's tokens: a request decodes as it would alone, and a seeded
    sampled request gives the same tokens whatever was decoded before it (the engine keeps such state per request
    the same way).

    Example:
        >>> from specdec.verify import ChainVerifier, TwoLevelVerifier
        >>> isinstance(TwoLevelVerifier(), RequestScopedVerifier), isinstance(ChainVerifier(), RequestScopedVerifier)
        (True, False)
    """

    def start_request(self) -> None:
        """Forget what earlier requests taught the verifier: its state as constructed again."""
