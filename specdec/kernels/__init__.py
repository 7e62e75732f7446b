"""Triton kernels, each beside its pure-PyTorch reference.

``w12_gemm`` (exact and Q-view W12 linears), ``gdn`` (Gated DeltaNet along tree paths) and the layers'
element-wise kernels: ``norm`` (RMSNorms, residual add + norm), ``rope`` (q/k norm + RoPE), ``act`` (SwiGLU);
``attention`` (split-KV decode attention over a KV cache). The first two are imported on first use; the others come
with the models or benchmarks that call them.
"""

from __future__ import annotations

import importlib

_GDN_NAMES = (
    "TreeMeta",
    "build_tree_meta",
    "conv_state_commit",
    "gdn_tree",
    "gdn_tree_commit",
    "naive_gdn_tree",
    "naive_gdn_tree_commit",
    "tree_causal_conv",
)

__all__ = ["gdn", "w12_gemm", *_GDN_NAMES]


def __getattr__(name: str):
    if name in ("gdn", "w12_gemm"):
        return importlib.import_module(f"{__name__}.{name}")
    if name in _GDN_NAMES:
        return getattr(importlib.import_module(f"{__name__}.gdn"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
