"""What every verifier's round takes besides the proposal: the root token and the tokens so far."""

from __future__ import annotations

import torch

from specdec.contracts.target import Target


def check_round_inputs(target: Target, root: object, context: object) -> None:
    """Raise ``TypeError`` / ``ValueError`` naming ``root`` or ``context`` when a verify round could only misread them.

    ``root`` must be a one-element integer tensor (``[1]``) on the target's device, ``context`` ``None`` or a 1-D
    integer tensor of every token so far, the root last: ``target.length + 1`` ids (the target's cache holds all but
    the root). On the CPU the ids are also checked against the vocabulary and ``context[-1]`` against ``root`` (host
    reads are free there; on an accelerator they would stall the round, and the decode loops pass ids they already
    checked).

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0)
        >>> check_round_inputs(target, torch.tensor([3.7]), None)
        Traceback (most recent call last):
        ...
        TypeError: root: expected a [1] integer tensor (the newest emitted token), got torch.float32 (1,)
    """
    if not isinstance(root, torch.Tensor) or root.numel() != 1 or root.is_floating_point() or root.dtype == torch.bool:
        desc = f"{root.dtype} {tuple(root.shape)}" if isinstance(root, torch.Tensor) else type(root).__name__
        raise TypeError(f"root: expected a [1] integer tensor (the newest emitted token), got {desc}")
    if root.device != target.device:
        raise ValueError(f"root: expected device {target.device} (the target's), got {root.device}")
    if context is not None:
        if (
            not isinstance(context, torch.Tensor)
            or context.ndim != 1
            or context.is_floating_point()
            or context.dtype == torch.bool
        ):
            desc = f"{context.dtype} {tuple(context.shape)}" if isinstance(context, torch.Tensor) else type(context).__name__
            raise TypeError(f"context: expected a 1-D integer tensor of every token so far, got {desc}")
        if context.numel() != target.length + 1:
            raise ValueError(
                f"context: expected every token so far, the root last: target.length + 1 = {target.length + 1} ids "
                f"(the target's cache holds {target.length}), got {context.numel()}"
            )
    if root.device.type == "cpu":
        token = int(root.reshape(()))
        if not 0 <= token < target.vocab_size:
            raise ValueError(f"root: expected a token id in [0, {target.vocab_size}), got {token}")
        if context is not None and context.device.type == "cpu":
            bad = ((context < 0) | (context >= target.vocab_size)).nonzero()
            if bad.numel():
                i = int(bad[0, 0])
                raise ValueError(f"context: expected token ids in [0, {target.vocab_size}), got context[{i}] = {int(context[i])}")
            if int(context[-1]) != token:
                raise ValueError(f"context: expected the root {token} last, got {int(context[-1])}")
