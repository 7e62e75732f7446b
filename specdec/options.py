"""Checks of command-line options that the three commands (``demo``, ``forcing``, ``pilot``) share."""

from __future__ import annotations

import torch

__all__ = ["device_option"]


def device_option(value: str, flag: str = "--device") -> str:
    """``value`` when torch can run on it here; else ``SystemExit`` naming ``flag`` and what it expected.

    Example:
        >>> device_option("cpu")
        'cpu'
        >>> device_option("gpu0")
        Traceback (most recent call last):
        ...
        SystemExit: --device: expected a torch device (cpu, cuda or cuda:N), got 'gpu0'
    """
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError) as err:
        raise SystemExit(f"{flag}: expected a torch device (cpu, cuda or cuda:N), got {value!r}") from err
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"{flag}: {value!r} asked for, but torch sees no CUDA device here")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SystemExit(f"{flag}: {value!r} asked for, but torch sees {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise SystemExit(f"{flag}: expected cpu, cuda or cuda:N, got {value!r}")
    return value
