"""Two-level verification and the batching engine on a tiny CPU model, both checked against plain decoding.

Two-level: a Q pass on the target's 8-bit weight view picks how far the draft is probably right, the
drafter drafts again from there, one exact pass decides (docs/two_level.md). Engine: several requests
decoded together, each exactly as if alone (docs/engine.md).
"""

import torch

import specdec as sd
from specdec.testing import tiny_target

target = tiny_target(seed=0)
prompt = torch.tensor([[1, 2, 3, 1, 2, 3, 1]])
reference = sd.generate(target, prompt, 32).tokens

verifier = sd.TwoLevelVerifier(budget=16, q_budget=16, gate="always")
out = sd.generate(target, prompt, 32, drafter=sd.NGramDrafter(), verifier=verifier, num_draft_tokens=8)
assert torch.equal(out.tokens, reference)
stats = verifier.stats
print(f"two-level: {stats.tokens_per_exact_pass:.2f} tokens per exact pass, Q/exact agreement {stats.agreement:.2f}")

engine = sd.Engine(target, sd.NGramDrafter, max_batch=3)
prompts = [torch.tensor([1, 2, 3, 1, 2]), torch.tensor([7, 8, 9]), torch.tensor([4, 4, 5, 4, 4])]
ids = [engine.add_request(p, max_new_tokens=12) for p in prompts]
engine.run()
for rid, p in zip(ids, prompts):
    alone = sd.generate(target, p[None], 12).tokens[0]
    assert torch.equal(engine.output(rid), alone)
print(f"engine: {len(ids)} requests decoded together, each equal to decoding it alone")
