"""Speculative decoding in ten lines, and the proof that it changed nothing.

A random-weight Llama-style model stands in for a real target (``sd.load_target`` takes an HF model,
a checkpoint folder or a .gguf file). Runs on the CPU in about a second.
"""

import torch

import specdec as sd
from specdec.testing import tiny_target

target = tiny_target(seed=1)  # float32, CPU
draft_model = tiny_target(seed=1, hidden_size=32, max_seq_len=256)  # same weights: a perfect drafter
prompt = torch.tensor([[3, 14, 15, 92, 65, 35, 89, 79]])

ar = sd.generate(target, prompt, max_new_tokens=48)
for name, drafter in [("n-gram", sd.NGramDrafter()), ("model", sd.ModelDrafter(draft_model))]:
    spec = sd.generate(target, prompt, max_new_tokens=48, drafter=drafter, num_draft_tokens=4)
    assert torch.equal(spec.tokens, ar.tokens), "greedy speculative output must equal AR token for token"
    print(
        f"{name:7} drafter: {spec.stats.tokens_per_target_pass:.2f} tokens per target pass, "
        f"accepted-length histogram {spec.stats.accepted_histogram}"
    )
print("identical to autoregressive decoding: yes")
