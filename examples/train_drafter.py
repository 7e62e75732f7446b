"""Train a DFlash block drafter for a target on the target's own continuations, then use it.

A random-weight Llama-style model with an 8-token vocabulary stands in for the target: its greedy
continuations are low-entropy (they settle into short cycles), so a one-layer drafter learns them in
a few seconds on the CPU. The same calls train a drafter for a real target on a GPU (more prompts,
more steps, a bigger block; see docs/training.md).
"""

import tempfile
from pathlib import Path

import torch

import specdec as sd
from specdec.drafters import load_drafter
from specdec.testing import tiny_target
from specdec.train.dflash import TrainingConfig, init_drafter, plot_history, save, tokens_per_target_pass, train_drafter

target = tiny_target(seed=0, vocab_size=8)
gen = torch.Generator().manual_seed(0)
prompts = torch.randint(0, 8, (16, 5), generator=gen)  # training prompts; the target writes the labels
held_out = torch.randint(0, 8, (4, 5), generator=gen)  # never seen in training

config = TrainingConfig(block_size=5, steps=150, continuation_tokens=32, num_anchors=16, batch_size=4, seed=0)
before = tokens_per_target_pass(target, init_drafter(target, config).eval(), held_out, max_new_tokens=32)
model, history = train_drafter(target, prompts, config, progress=False)
after = tokens_per_target_pass(target, model, held_out, max_new_tokens=32)

print(f"loss: {history.loss[0]:.3f} (step 1) -> {sum(history.loss[-10:]) / 10:.3f} (mean of the last 10 steps)")
print(f"tokens per target pass on held-out prompts: untrained {before:.2f} -> trained {after:.2f}")
print("per-position accuracy at the end of training:", [round(a, 2) for a in history.position_accuracy])
assert after > before, "training should raise acceptance"

with tempfile.TemporaryDirectory() as tmp:
    folder = save(model, Path(tmp) / "tiny-dflash", config=config, history=history)
    drafter = load_drafter(folder, target)  # the published DFlash layout, read back
    ar = sd.generate(target, held_out, max_new_tokens=32)
    spec = sd.generate(target, held_out, max_new_tokens=32, drafter=drafter, num_draft_tokens=drafter.max_draft_tokens)
    assert torch.equal(ar.tokens, spec.tokens), "greedy speculative output must equal AR token for token"
    plot = plot_history(history, Path(tmp) / "loss.png")
    print(
        f"reloaded drafter: {spec.stats.tokens_per_target_pass:.2f} tokens per target pass, identical to AR; "
        f"loss curve written to {plot.name} ({plot.stat().st_size} bytes)"
    )
