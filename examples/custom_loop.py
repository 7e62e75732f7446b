"""Compose your own decode loop from the blocks: drafter -> verifier -> commit, one round at a time.

This is what ``sd.generate`` does (see specdec/decode.py); writing it out shows the contract each block
keeps: the target's cache holds every committed token except the newest (the root), a verifier runs one
target forward over [root, drafts...], decides, and commits; the drafter sees the whole context next round.
"""

import torch

import specdec as sd
from specdec.testing import tiny_target

target = tiny_target(seed=3)
drafter = sd.NGramDrafter(max_ngram=3, max_paths=4)  # several continuations -> a tree
verifier = sd.TreeVerifier(budget=16)
greedy = sd.SamplingConfig()

prompt = torch.tensor([5, 6, 7, 5, 6, 8, 5, 6, 7, 5])
target.reset()
target(prompt[None, :-1])
target.commit(prompt.numel() - 1)  # prefill all but the root
context = prompt.clone()
rounds = 0
while context.numel() < prompt.numel() + 40:
    proposal = drafter.propose(context, 16, sampling=greedy, generator=None)
    result = verifier.verify(target, context[-1:], proposal, sampling=greedy)
    context = torch.cat([context, result.emitted])
    rounds += 1

reference = sd.generate(target, prompt[None], max_new_tokens=context.numel() - prompt.numel())
assert torch.equal(context[prompt.numel() :], reference.tokens[0])
print(f"{context.numel() - prompt.numel()} tokens in {rounds} verify passes; equal to AR: yes")
