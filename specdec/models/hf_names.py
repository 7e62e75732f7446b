"""What dense and hybrid checkpoints share when HF tensor names are mapped to the runtime's."""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["TensorReader", "embedding_and_head", "tensor_reader"]

# Checkpoint tensors no runtime reads: RoPE frequencies some exports keep (the runtime computes its own).
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class TensorReader:
    """``take(name)``: the checkpoint's tensor ``name``, or ``ValueError`` naming the missing tensor.

    It remembers what was taken, so that :meth:`check_all_taken` refuses a checkpoint holding tensors the
    runtime would drop (a bias it has no place for, a layer it does not know).

    Example:
        >>> take = tensor_reader({"a": torch.zeros(1), "b": torch.ones(1)})
        >>> take("a")
        tensor([0.])
        >>> take("c")
        Traceback (most recent call last):
        ...
        ValueError: checkpoint: missing tensor 'c'
        >>> take.check_all_taken()
        Traceback (most recent call last):
        ...
        ValueError: checkpoint: expected every tensor mapped to the runtime, got 1 it has no place for: ['b']
    """

    def __init__(self, hf_state: Mapping[str, torch.Tensor]):
        self.hf_state = hf_state
        self.taken: set[str] = set()

    def __call__(self, name: str) -> torch.Tensor:
        if name not in self.hf_state:
            raise ValueError(f"checkpoint: missing tensor {name!r}")
        self.taken.add(name)
        return self.hf_state[name]

    def __contains__(self, name: str) -> bool:
        return name in self.hf_state

    def check_all_taken(self, *, ignored_prefixes: tuple[str, ...] = ()) -> None:
        """Raise ``ValueError`` listing the tensors not taken (but those under ``ignored_prefixes`` or RoPE caches)."""
        left = sorted(
            name
            for name in self.hf_state
            if name not in self.taken and not name.startswith(ignored_prefixes) and not name.endswith(IGNORED_SUFFIXES)
        )
        if left:
            shown = left if len(left) <= 8 else left[:8] + ["..."]
            raise ValueError(
                f"checkpoint: expected every tensor mapped to the runtime, got {len(left)} it has no place for: {shown}"
            )


def tensor_reader(hf_state: Mapping[str, torch.Tensor]) -> TensorReader:
    """A :class:`TensorReader` over ``hf_state`` (the checkpoint's HF-named tensors)."""
    return TensorReader(hf_state)


def embedding_and_head(tie_word_embeddings: bool, take: TensorReader) -> dict[str, torch.Tensor]:
    """The runtime's ``embed``, final ``norm`` and (untied) ``lm_head`` weights from HF names.

    An untied model needs ``lm_head.weight`` (transformers would start a missing head from random values;
    the runtime refuses). A tied model's ``lm_head.weight``, which some exports keep, is the embedding.

    Example:
        >>> take = tensor_reader({"model.embed_tokens.weight": torch.ones(4, 2), "model.norm.weight": torch.ones(2)})
        >>> sorted(embedding_and_head(True, take))
        ['embed.weight', 'norm.weight']
        >>> embedding_and_head(False, take)
        Traceback (most recent call last):
        ...
        ValueError: checkpoint: missing tensor 'lm_head.weight'
    """
    state = {"embed.weight": take("model.embed_tokens.weight"), "norm.weight": take("model.norm.weight")}
    if not tie_word_embeddings:
        state["lm_head.weight"] = take("lm_head.weight")
    elif "lm_head.weight" in take:
        take("lm_head.weight")
    return state
