"""A planted next-token rule: random weights whose greedy continuation is known in advance and robust to rounding.

Benchmarks on random weights simulate acceptance (:class:`~specdec.drafters.oracle.OracleDrafter`): the
drafter proposes the target's own greedy continuation, with misses drawn from a published acceptance
profile. That continuation has to be the one the target produces in the measured run. With plain random
weights the top two logits are often within bf16 rounding of each other, so a verify pass of 16 rows and
an AR step of one row (different GEMM shapes, different reduction orders) pick different tokens, the output
leaves the continuation the drafter follows, and the run measures rounding instead of acceptance.

:func:`plant_successor_rule` rewrites the embedding and the head so that, whatever the context, the greedy
token after token ``t`` is ``successor[t]``, by a margin far above any rounding:

* the embedding is scaled so that the token's own row dominates the residual stream after every layer
  (the layers still run on normalised inputs and cost exactly what they cost before);
* head row ``v`` is the unit direction of the embedding row of ``t = successor^-1(v)``, times ``head_scale``.

After the final norm the hidden state points along ``E[t]`` (norm ``sqrt(H)``), so the logit of ``successor[t]``
is about ``head_scale * sqrt(H)`` and every other logit is a random projection of size ``head_scale * O(1)``.
The shapes, kernels and bytes of every forward are unchanged: only the values differ, so a timing on a
planted target is a timing of the random-weight target, with a known greedy continuation.
"""

from __future__ import annotations

import operator

import torch

__all__ = ["plant_successor_rule", "successor_chain"]


@torch.no_grad()
def plant_successor_rule(
    target: torch.nn.Module,
    successor: torch.Tensor | None = None,
    *,
    embed_scale: float = 32.0,
    head_scale: float = 1.0,
    seed: int = 0,
) -> torch.Tensor:
    """Make ``target``'s greedy next token after ``t`` be ``successor[t]`` in any context; returns ``successor``.

    Args:
        target: a lean target (:class:`~specdec.models.dense.DenseTarget` or
            :class:`~specdec.models.hybrid.HybridTarget`) with untied embeddings; its ``embed`` and
            ``lm_head`` weights are rewritten in place.
        successor: ``[V]`` int64, a permutation of ``0..V-1``; default a random one from ``seed``.
        embed_scale: factor on the embedding rows (their entries are ~N(0, 1)), so the token's own row
            outweighs what the layers add to the residual stream.
        head_scale: norm of each head row; the successor's logit is about ``head_scale * sqrt(H)``, the
            others about ``head_scale * N(0, 1)``.
        seed: seeds the default permutation.

    Returns:
        ``successor`` ``[V]`` int64 on the CPU.

    Raises:
        ValueError: tied embeddings (the head is the embedding, so it cannot hold a separate rule), a
            ``successor`` that is not a permutation of the vocabulary, a non-positive scale.

    Example:
        >>> from specdec.testing import tiny_target
        >>> target = tiny_target(seed=0, tie_word_embeddings=False)
        >>> succ = plant_successor_rule(target)
        >>> logits = target.forward(torch.tensor([[5, 9, 2]])).logits
        >>> torch.equal(logits[0].argmax(-1), succ[[5, 9, 2]])
        True
    """
    cfg = target.config
    if cfg.tie_word_embeddings:
        raise ValueError("target: expected untied embeddings (config.tie_word_embeddings False), got tied ones")
    for name, value in (("embed_scale", embed_scale), ("head_scale", head_scale)):
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ValueError(f"{name}: expected a positive number, got {value!r}")
    vocab = cfg.vocab_size
    if successor is None:
        successor = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))
    if not isinstance(successor, torch.Tensor) or successor.dtype != torch.long or successor.shape != (vocab,):
        desc = f"{successor.dtype} {tuple(successor.shape)}" if isinstance(successor, torch.Tensor) else type(successor).__name__
        raise ValueError(f"successor: expected an int64 tensor of shape ({vocab},), got {desc}")
    successor = successor.cpu()
    if not torch.equal(torch.sort(successor).values, torch.arange(vocab)):
        raise ValueError("successor: expected a permutation of 0..V-1 (every token the successor of exactly one token)")
    embed, head = target.embed.weight, target.lm_head.weight  # [V, H] each
    predecessor = torch.empty_like(successor)
    predecessor[successor] = torch.arange(vocab)
    rows = 65536  # in row blocks: the float32 copy of a 152k x 4096 embedding would be 2.5 GB
    for start in range(0, vocab, rows):
        src = embed[predecessor[start : start + rows].to(embed.device)].float()
        head[start : start + rows] = (src * (head_scale / src.norm(dim=1, keepdim=True))).to(head.dtype)
    embed.mul_(embed_scale)
    return successor


def successor_chain(successor: torch.Tensor, start: int, length: int) -> torch.Tensor:
    """``[length]`` int64: ``successor[start], successor[successor[start]], ...``, the planted greedy continuation.

    Example:
        >>> successor_chain(torch.tensor([1, 2, 0]), 0, 4).tolist()
        [1, 2, 0, 1]
    """
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length: expected an int >= 0, got {length!r}")
    vocab = successor.numel()
    try:
        token = operator.index(start)
    except TypeError:
        token = None
    if isinstance(start, bool) or token is None or not 0 <= token < vocab:
        raise ValueError(f"start: expected a token id in [0, {vocab}), got {start!r}")
    out = []
    for _ in range(length):
        token = int(successor[token])
        out.append(token)
    return torch.tensor(out, dtype=torch.long)
