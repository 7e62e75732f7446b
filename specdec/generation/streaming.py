"""Streaming: hand each request's tokens to a transformers streamer or a callback as they are emitted."""

from __future__ import annotations

import torch

__all__ = ["Stream"]


class Stream:
    """The ``streamer=`` argument of :func:`specdec.generate`, in one shape.

    ``target`` is either an object with ``put(token_ids)`` and ``end()`` (transformers' ``TextStreamer``,
    ``TextIteratorStreamer`` or any look-alike), which gets transformers' sequence of calls for each
    request -- ``put(prompt [1, prompt_len])``, then ``put(new_tokens [m])`` per round, then ``end()`` -- or a
    plain callable, called with each round's new tokens ``[m]`` only. Tokens are on the CPU and never
    include tokens past ``max_new_tokens``, an EOS or a stop string.

    Example:
        >>> chunks = []
        >>> stream = Stream(chunks.append)
        >>> stream.start(torch.tensor([1, 2])); stream.put(torch.tensor([5, 6])); stream.end()
        >>> chunks
        [tensor([5, 6])]
    """

    def __init__(self, target):
        has_put = callable(getattr(target, "put", None)) and callable(getattr(target, "end", None))
        if not has_put and not callable(target):
            raise TypeError(
                f"streamer: expected an object with put(token_ids) and end() or a callable, got {type(target).__name__}"
            )
        self.target = target
        self.is_streamer = has_put

    def start(self, prompt: torch.Tensor) -> None:
        """Announce a request with its prompt ``[prompt_len]`` (streamer objects only, as transformers does)."""
        if self.is_streamer:
            self.target.put(prompt[None].cpu())

    def put(self, tokens: torch.Tensor) -> None:
        """Hand over newly emitted tokens ``[m]`` (nothing is sent for ``m == 0``)."""
        if tokens.numel() == 0:
            return
        if self.is_streamer:
            self.target.put(tokens.cpu())
        else:
            self.target(tokens.cpu())

    def end(self) -> None:
        """Close the request (``end()`` of a streamer object)."""
        if self.is_streamer:
            self.target.end()
