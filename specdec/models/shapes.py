"""Configurations of real models, for random-weight targets at realistic shapes (benchmarks)."""

from specdec.models.config import TargetConfig

# Qwen3-8B: config.json of Qwen/Qwen3-8B.
QWEN3_8B = TargetConfig(
    vocab_size=151936,
    hidden_size=4096,
    intermediate_size=12288,
    num_layers=36,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    max_position_embeddings=40960,
    tie_word_embeddings=False,
    qk_norm=True,
    model_type="qwen3",
)

# Qwen3-32B: config.json of Qwen/Qwen3-32B.
QWEN3_32B = TargetConfig(
    vocab_size=151936,
    hidden_size=5120,
    intermediate_size=25600,
    num_layers=64,
    num_heads=64,
    num_kv_heads=8,
    head_dim=128,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    max_position_embeddings=40960,
    tie_word_embeddings=False,
    qk_norm=True,
    model_type="qwen3",
)

# Qwen3-0.6B: a small real shape for GPU checks that generate thousands of tokens.
QWEN3_0_6B = TargetConfig(
    vocab_size=151936,
    hidden_size=1024,
    intermediate_size=3072,
    num_layers=28,
    num_heads=16,
    num_kv_heads=8,
    head_dim=128,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    max_position_embeddings=40960,
    tie_word_embeddings=True,
    qk_norm=True,
    model_type="qwen3",
)

SHAPES = {"qwen3-0.6b": QWEN3_0_6B, "qwen3-8b": QWEN3_8B, "qwen3-32b": QWEN3_32B}
