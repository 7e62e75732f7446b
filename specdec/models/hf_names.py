"""What dense and hybrid checkpoints share when HF tensor names are mapped to the runtime's."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

__all__ = ["embedding_and_head", "tensor_reader"]


def tensor_reader(hf_state: Mapping[str, torch.Tensor]) -> Callable[[str], torch.Tensor]:
    """``take(name)``: the checkpoint's tensor ``name``, or ``ValueError`` naming the missing tensor.

    Example:
        >>> take = tensor_reader({"a": torch.zeros(1)})
        >>> take("b")
        Traceback (most recent call last):
        ...
        ValueError: checkpoint: missing tensor 'b'
    """

    def take(name: str) -> torch.Tensor:
        if name not in hf_state:
            raise ValueError(f"checkpoint: missing tensor {name!r}")
        return hf_state[name]

    return take


def embedding_and_head(tie_word_embeddings: bool, hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The runtime's ``embed``, final ``norm`` and (untied) ``lm_head`` weights from HF names.

    An untied model without ``lm_head.weight`` in the checkpoint reuses the embedding, as HF does.

    Example:
        >>> state = {"model.embed_tokens.weight": torch.ones(4, 2), "model.norm.weight": torch.ones(2)}
        >>> sorted(embedding_and_head(False, state))
        ['embed.weight', 'lm_head.weight', 'norm.weight']
    """
    take = tensor_reader(hf_state)
    state = {"embed.weight": take("model.embed_tokens.weight"), "norm.weight": take("model.norm.weight")}
    if not tie_word_embeddings:
        state["lm_head.weight"] = hf_state.get("lm_head.weight", state["embed.weight"])
    return state
