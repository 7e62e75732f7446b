"""What :func:`specdec.generate` accepts: prompts in every form, and the checks on its other arguments.

Prompts arrive as a 2-D batch (optionally with a transformers ``attention_mask``), a list of 1-D
prompts of different lengths, or text (one string or a list) with a ``tokenizer``. All of them become
a list of 1-D prompts that the loop decodes one after another, each exactly as if it were alone.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from specdec.contracts.drafter import Drafter
from specdec.contracts.proposal import check_proposal_size

__all__ = ["Requests", "check_decode_args", "check_proposal_size", "prepare_requests", "request_seeds"]

_RAGGED_HINT = "pass a list of 1-D prompts of different lengths instead: sd.generate(target, [ids_a, ids_b], ...)"


@dataclass
class Requests:
    """Prompts ready for the decode loop.

    Attributes:
        prompts: 1-D int64 prompts on the target's device, one per request.
        as_list: return ``tokens`` as a list (the prompts came as a list).
        text_form: ``"str"`` for one string prompt, ``"list"`` for a list of strings, else ``None``.
    """

    prompts: list[torch.Tensor]
    as_list: bool = False
    text_form: str | None = None


def _strip_left_padding(input_ids: torch.Tensor, attention_mask) -> list[torch.Tensor]:
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        desc = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__
        raise ValueError(f"attention_mask: expected a tensor of the shape of input_ids {tuple(input_ids.shape)}, got {desc}")
    if attention_mask.is_floating_point() or not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError(
            f"attention_mask: expected 0/1 integer or bool values (1 = real token), got {attention_mask.dtype} "
            f"with values {sorted(set(attention_mask.flatten().tolist()))[:5]}"
        )
    real = attention_mask.bool().to(input_ids.device)  # [batch, prompt_len]
    prompts = []
    for row, keep in enumerate(real):
        if not keep.any():
            raise ValueError(f"attention_mask: row {row} has no real token (all zeros); every request needs a prompt")
        if not bool((keep[1:] >= keep[:-1]).all()):
            kind = "right padding" if bool((keep[1:] <= keep[:-1]).all()) else "a hole (padding between real tokens)"
            raise ValueError(
                f"attention_mask: row {row} has {kind}: {keep.int().tolist()}; only left padding (each row's real tokens "
                f"a contiguous suffix) can be stripped exactly. Ragged batches are not run from a mask: {_RAGGED_HINT}"
            )
        prompts.append(input_ids[row][keep])
    return prompts


def _encode(tokenizer, text: str, name: str) -> torch.Tensor:
    ids = tokenizer(text)["input_ids"]
    if not ids:
        raise ValueError(f"{name}: the tokenizer encodes {text!r} to no tokens; every request needs a prompt")
    return torch.tensor(ids, dtype=torch.long)


def prepare_requests(target, input_ids, attention_mask=None, tokenizer=None) -> Requests:
    """Turn ``input_ids`` (and ``attention_mask``) into one 1-D prompt per request, checked against ``target``.

    Args:
        input_ids: ``[batch, prompt_len]`` integer tensor; a list of 1-D integer tensors (any lengths);
            a string or a list of strings (needs ``tokenizer``).
        attention_mask: ``[batch, prompt_len]`` (1 = real token) with a 2-D ``input_ids``: all ones is the
            batch itself; left padding is stripped from each row; right padding or holes raise ``ValueError``.
        tokenizer: a transformers tokenizer, for text prompts.

    Example:
        >>> from specdec.testing import tiny_target
        >>> ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 10]])
        >>> mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
        >>> [p.tolist() for p in prepare_requests(tiny_target(seed=0), ids, mask).prompts]
        [[5, 6], [7, 8, 9, 10]]
    """
    text_form = None
    if isinstance(input_ids, str) or (
        isinstance(input_ids, (list, tuple)) and input_ids and all(isinstance(t, str) for t in input_ids)
    ):
        if tokenizer is None:
            raise ValueError("tokenizer: text prompts need a transformers tokenizer (tokenizer=...), got None")
        text_form = "str" if isinstance(input_ids, str) else "list"
        texts = [input_ids] if isinstance(input_ids, str) else list(input_ids)
        input_ids = [_encode(tokenizer, t, f"input_ids[{i}]") for i, t in enumerate(texts)]
        if attention_mask is not None:
            raise ValueError("attention_mask: text prompts are tokenized one by one and need no mask, got a mask")
    if isinstance(input_ids, (list, tuple)):
        if not input_ids:
            raise ValueError("input_ids: expected at least one prompt, got an empty list")
        if attention_mask is not None:
            raise ValueError("attention_mask: a list of prompts carries its own lengths and takes no mask, got a mask")
        prompts = []
        for i, seq in enumerate(input_ids):
            if not isinstance(seq, torch.Tensor) or seq.ndim != 1 or seq.dtype not in (torch.long, torch.int32):
                desc = f"{seq.dtype} with shape {tuple(seq.shape)}" if isinstance(seq, torch.Tensor) else type(seq).__name__
                raise TypeError(f"input_ids[{i}]: expected a 1-D integer tensor (one prompt), got {desc}")
            prompts.append(seq)
        requests = Requests(prompts=prompts, as_list=True, text_form=text_form)
    else:
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or input_ids.dtype not in (torch.long, torch.int32):
            desc = (
                f"{input_ids.dtype} with shape {tuple(input_ids.shape)}"
                if isinstance(input_ids, torch.Tensor)
                else type(input_ids).__name__
            )
            raise TypeError(
                f"input_ids: expected a 2-D integer tensor [batch, prompt_len], a list of 1-D prompts or text, got {desc}"
            )
        if input_ids.shape[0] < 1:
            raise ValueError(f"input_ids: expected at least one request, got shape {tuple(input_ids.shape)}")
        prompts = list(input_ids) if attention_mask is None else _strip_left_padding(input_ids, attention_mask)
        requests = Requests(prompts=prompts)
    for i, seq in enumerate(requests.prompts):
        name = f"input_ids[{i}]"
        if seq.numel() < 1:
            raise ValueError(f"{name}: expected a prompt of at least one token, got none")
        if seq.device != target.device:
            if text_form is None:
                raise ValueError(f"input_ids: expected device {target.device} (the target's), got {seq.device}")
            seq = seq.to(target.device)
        lo, hi = int(seq.min()), int(seq.max())
        if lo < 0 or hi >= target.vocab_size:
            raise ValueError(
                f"input_ids: token ids must lie in [0, {target.vocab_size}), got values in [{lo}, {hi}] in request {i}"
            )
        requests.prompts[i] = seq.long()
    return requests


def check_decode_args(target, prompts: Sequence[torch.Tensor], max_new_tokens, drafter, num_draft_tokens) -> None:
    """Raise ``ValueError``/``TypeError`` naming the argument when ``generate``'s settings cannot run on ``target``.

    Example:
        >>> from specdec.testing import tiny_target
        >>> check_decode_args(tiny_target(seed=0), [torch.tensor([1, 2])], 0, None, 4)
        Traceback (most recent call last):
        ...
        ValueError: max_new_tokens: expected an int >= 1, got 0
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected an int >= 1, got {max_new_tokens!r}")
    longest = max(p.numel() for p in prompts)
    if longest + max_new_tokens > target.max_seq_len:
        raise ValueError(
            f"input_ids: prompt length {longest} + max_new_tokens {max_new_tokens} exceeds the target's max_seq_len {target.max_seq_len}"
        )
    if isinstance(num_draft_tokens, bool) or not isinstance(num_draft_tokens, int) or num_draft_tokens < 0:
        raise ValueError(f"num_draft_tokens: expected an int >= 0, got {num_draft_tokens!r}")
    if drafter is not None:
        if isinstance(drafter, type):  # a class passes the protocol's attribute check
            raise TypeError(f"drafter: expected a drafter instance, got the class {drafter.__name__} (pass {drafter.__name__}())")
        if not isinstance(drafter, Drafter):
            raise TypeError(
                f"drafter: expected an object with reset() and propose() (specdec.drafters.Drafter), got {type(drafter).__name__}"
            )
        if drafter.vocab_size is not None and drafter.vocab_size != target.vocab_size:
            raise ValueError(f"drafter: vocabulary size {drafter.vocab_size} differs from the target's {target.vocab_size}")


def request_seeds(seed, batch: int) -> list[int | None]:
    """One seed per request: ``None`` (torch's global RNG), ``seed + row`` for an int, or the given ints.

    Example:
        >>> request_seeds(7, 3), request_seeds(None, 2)
        ([7, 8, 9], [None, None])
    """

    def is_int(value) -> bool:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)

    if seed is None or is_int(seed):
        seeds = [None if seed is None else int(seed) + i for i in range(batch)]
    else:
        if isinstance(seed, (str, bytes)) or not isinstance(seed, Iterable):
            raise TypeError(f"seed: expected None, an int or {batch} ints (one per request), got {seed!r}")
        seeds = list(seed)
        if len(seeds) != batch or not all(is_int(s) for s in seeds):
            raise ValueError(f"seed: expected an int or {batch} ints (one per request), got {seeds!r}")
        seeds = [int(s) for s in seeds]
    for i, s in enumerate(seeds):
        if s is not None and not -(2**63) <= s < 2**64:
            raise ValueError(f"seed: expected ints in [-2**63, 2**64) (torch.Generator seeds), got {s} for request {i}")
    return seeds
