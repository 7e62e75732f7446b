"""HF tensor names of hybrid checkpoints (Qwen3.5 text and Qwen3-Next layouts) mapped to the runtime's."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from specdec.models.hf_names import embedding_and_head, tensor_reader
from specdec.models.hybrid_config import HybridConfig

__all__ = ["hybrid_state_from_hf"]


def hybrid_state_from_hf(cfg: HybridConfig, hf_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map HF tensor names of either layout to the runtime's (Qwen3-Next's GDN rows regrouped)."""

    take = tensor_reader(hf_state)
    state = embedding_and_head(cfg.tie_word_embeddings, take)
    hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv, r = cfg.linear_key_head_dim, cfg.linear_value_head_dim, hv // hk
    for i in range(cfg.num_layers):
        hf, ours = f"model.layers.{i}.", f"layers.{i}."
        state[ours + "attn_norm.weight"] = take(hf + "input_layernorm.weight")
        state[ours + "mlp_norm.weight"] = take(hf + "post_attention_layernorm.weight")
        if cfg.layer_types[i] == "linear_attention":
            lin, mix = hf + "linear_attn.", ours + "mixer."
            if cfg.model_type == "qwen3_next":
                # per key group g: [q_g (dk) | k_g (dk) | v_g (r dv) | z_g (r dv)] and [b_g (r) | a_g (r)]
                w = take(lin + "in_proj_qkvz.weight")
                w = w.view(hk, 2 * dk + 2 * r * dv, -1)
                q, k, v, z = w.split([dk, dk, r * dv, r * dv], dim=1)
                ba = take(lin + "in_proj_ba.weight").view(hk, 2 * r, -1)
                b, a = ba.split([r, r], dim=1)
                flat = [t.reshape(-1, w.shape[-1]) for t in (q, k, v, z, b, a)]
            else:
                flat = [take(lin + f"in_proj_{p}.weight") for p in ("qkv", "z", "b", "a")]
            state[mix + "in_proj.weight"] = torch.cat(flat)
            state[mix + "conv_weight"] = take(lin + "conv1d.weight")[:, 0, :]
            for p in ("A_log", "dt_bias", "norm.weight", "out_proj.weight"):
                state[mix + p] = take(lin + p)
        else:
            attn, mix = hf + "self_attn.", ours + "mixer."
            state[mix + "wqkv.weight"] = torch.cat([take(attn + f"{p}_proj.weight") for p in "qkv"])
            state[mix + "wo.weight"] = take(attn + "o_proj.weight")
            if cfg.attention_bias:
                state[mix + "wqkv.bias"] = torch.cat([take(attn + f"{p}_proj.bias") for p in "qkv"])
                state[mix + "wo.bias"] = take(attn + "o_proj.bias")
            state[mix + "q_norm.weight"] = take(attn + "q_norm.weight")
            state[mix + "k_norm.weight"] = take(attn + "k_norm.weight")
        mlp, om = hf + "mlp.", ours + "mlp."
        if cfg.is_moe(i):
            state[om + "router.weight"] = take(mlp + "gate.weight")
            if mlp + "experts.gate_up_proj" in take:
                state[om + "gate_up_proj"] = take(mlp + "experts.gate_up_proj")
                state[om + "down_proj"] = take(mlp + "experts.down_proj")
            else:  # per-expert modules (older transformers)
                ex = [f"{mlp}experts.{e}." for e in range(cfg.num_experts)]
                state[om + "gate_up_proj"] = torch.stack(
                    [torch.cat([take(p + "gate_proj.weight"), take(p + "up_proj.weight")]) for p in ex]
                )
                state[om + "down_proj"] = torch.stack([take(p + "down_proj.weight") for p in ex])
            sh = mlp + "shared_expert."
            state[om + "shared.w13.weight"] = torch.cat([take(sh + "gate_proj.weight"), take(sh + "up_proj.weight")])
            state[om + "shared.w2.weight"] = take(sh + "down_proj.weight")
            state[om + "shared_gate.weight"] = take(mlp + "shared_expert_gate.weight")
        else:
            state[om + "w13.weight"] = torch.cat([take(mlp + "gate_proj.weight"), take(mlp + "up_proj.weight")])
            state[om + "w2.weight"] = take(mlp + "down_proj.weight")
    take.check_all_taken(ignored_prefixes=("mtp.",))  # the multi-token-prediction head: a drafter, not the target
    return state
