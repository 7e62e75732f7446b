"""Prefix-dependent logits processing: repetition penalty and transformers ``LogitsProcessor`` objects.

A verify pass scores several rows at once, and each row's law depends on its own prefix: the context
so far, then the draft tokens on the row's path (the chain's first ``i`` drafts, or a tree node's
root-to-node path). :func:`row_prefixes` builds those prefixes from a :class:`~specdec.contracts.VerifyPlan`
and :func:`process_logits` runs the processors row by row, exactly as transformers' ``generate`` calls
them on a batch of one (``input_ids [1, L]``, ``scores [1, V]`` float32).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.sampling import SamplingConfig

__all__ = ["apply_repetition_penalty", "process_logits", "row_prefixes"]


def apply_repetition_penalty(input_ids: torch.Tensor, scores: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' repetition penalty: ``[B, L]`` ids, ``[B, V]`` scores -> ``[B, V]`` float32.

    The score of every token present in a row's ``input_ids`` is divided by ``penalty`` when positive
    and multiplied by it when negative (CTRL, arXiv 1909.05858); the others are left as they are.

    Example:
        >>> apply_repetition_penalty(torch.tensor([[0, 2]]), torch.tensor([[2.0, 1.0, -1.0]]), 2.0)
        tensor([[ 1.,  1., -2.]])
    """
    scores = scores.float()
    seen = torch.gather(scores, 1, input_ids)  # [B, L]
    penalised = torch.where(seen < 0, seen * penalty, seen / penalty)
    return scores.scatter(1, input_ids, penalised)


def row_prefixes(context: torch.Tensor, plan: VerifyPlan) -> list[torch.Tensor]:
    """The prefix each verify row's logits condition on: ``context`` then the draft tokens of its path.

    Args:
        context: ``[n]`` int64, every token so far, the plan's root (newest emitted token) last.
        plan: the verify pass; row 0 is the root, row ``i + 1`` is tree node ``i``.

    Returns:
        ``N + 1`` int64 tensors; row ``r``'s is ``[n + depth(r)]``.

    Example:
        >>> from specdec.contracts import Tree
        >>> plan = VerifyPlan.for_tree(torch.tensor([3]), Tree(tokens=[7, 8, 9], parents=[-1, -1, 0]), prefix_len=2)
        >>> [p.tolist() for p in row_prefixes(torch.tensor([1, 2, 3]), plan)]
        [[1, 2, 3], [1, 2, 3, 7], [1, 2, 3, 8], [1, 2, 3, 7, 9]]
    """
    if context.ndim != 1 or context.numel() < 1:
        raise ValueError(f"context: expected a 1-D tensor of at least the root token, got shape {tuple(context.shape)}")
    tree = plan.tree
    context = context.to(tree.device, torch.long)
    if tree.is_chain:
        return [torch.cat([context, tree.tokens[:i]]) for i in range(tree.num_nodes + 1)]
    return [context] + [torch.cat([context, tree.tokens[tree.path(node)]]) for node in range(tree.num_nodes)]


def process_logits(logits: torch.Tensor, prefixes: Sequence[torch.Tensor], sampling: SamplingConfig) -> torch.Tensor:
    """Apply the prefix-dependent part of ``sampling`` to each row: ``[R, V]`` -> ``[R, V]`` float32.

    Row ``r`` is processed with ``input_ids = prefixes[r][None]`` (its own prefix, the prompt included):
    first ``sampling.repetition_penalty``, then every ``sampling.logits_processor`` in order. Settings
    without such parts return the logits unchanged. Temperature, top-k and top-p come later
    (:func:`specdec.verify.sampling.logits_to_probs`).

    Example:
        >>> s = SamplingConfig(repetition_penalty=2.0)
        >>> process_logits(torch.tensor([[2.0, 1.0], [2.0, 1.0]]), [torch.tensor([1]), torch.tensor([1, 0])], s)
        tensor([[2.0000, 0.5000],
                [1.0000, 0.5000]])
    """
    if not sampling.needs_prefix:
        return logits
    if logits.ndim != 2 or len(prefixes) != logits.shape[0]:
        raise ValueError(f"prefixes: expected one prefix per logits row ({logits.shape[0]}), got {len(prefixes)}")
    rows = []
    for row, prefix in zip(logits.float(), prefixes):
        ids = prefix.to(row.device, torch.long)[None]  # [1, L]
        scores = row[None]  # [1, V]
        if sampling.repetition_penalty != 1.0:
            scores = apply_repetition_penalty(ids, scores, sampling.repetition_penalty)
        for proc in sampling.logits_processor:
            scores = proc(ids, scores)
        if not isinstance(scores, torch.Tensor) or scores.shape != (1, logits.shape[-1]):
            raise ValueError(
                f"logits_processor: expected each processor to return scores [1, {logits.shape[-1]}], "
                f"got {getattr(scores, 'shape', type(scores).__name__)}"
            )
        rows.append(scores[0].float())
    return torch.stack(rows)
