"""Sampling is lossless too: the exact law of one speculative round equals the target's law.

``chain_laws`` exposes what the verifier samples from (acceptance probabilities, residual laws), so the
law of the emitted tokens can be computed by enumeration on a small vocabulary -- no sampling noise.
"""

import torch

from specdec.verify import SamplingConfig, chain_laws, logits_to_probs

V, sampling = 3, SamplingConfig(temperature=0.8, top_k=2)
gen = torch.Generator().manual_seed(0)
target_logits = torch.randn(V + 1, V, V, generator=gen)  # [prefix token + 1, next-next ...]
draft_probs = torch.softmax(torch.randn(V, generator=gen), -1)

p1 = logits_to_probs(target_logits[0, 0], sampling)  # target law of token 1
law = torch.zeros(V)
for d in range(V):  # enumerate the draft token
    target_probs = torch.stack([p1, logits_to_probs(target_logits[d + 1, 0], sampling)])
    laws = chain_laws(target_probs, torch.tensor([d]), draft_probs[None])
    law[d] += draft_probs[d] * laws.accept_probs[0]  # accepted
    law += draft_probs[d] * (1 - laws.accept_probs[0]) * laws.residual_probs[0]  # rejected -> residual
print("target law of the first token:", p1.numpy().round(6))
print("law after one speculative round:", law.numpy().round(6))
assert torch.allclose(law, p1, atol=1e-6)
