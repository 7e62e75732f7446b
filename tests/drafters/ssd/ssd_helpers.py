"""Shared pieces of the SSD tests: a table drafter with a known law, and the exact law of an SSD run.

:func:`ssd_law` runs the real :class:`SpeculativeSpeculationDrafter` on every branch of its own draws
(a scripted sampler replays a prefix of choices and stops at the first new draw, which becomes a
branch point) and verifies each proposal with the law harness's :func:`chain_round_law`. States that
can no longer differ -- same emitted tokens, same cache entry for the actual outcome -- are merged,
which keeps the enumeration to seconds.
"""

from __future__ import annotations

import copy

import torch

from specdec.contracts.proposal import DraftProposal
from specdec.testing.laws import MarkovLaw, chain_round_law
from specdec.testing.laws.exact import reference_chain_decide


class LawDrafter:
    """A drafter whose next-token scores are a :class:`MarkovLaw` lookup (it reports ``tree_logprobs``)."""

    def __init__(self, law: MarkovLaw):
        self.law = law
        self.vocab_size = law.vocab_size
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    def propose(self, context, max_tokens, *, sampling, generator) -> DraftProposal:
        self.calls += 1
        ctx = context.tolist()
        tokens, scores = [], []
        for _ in range(max_tokens):
            s = torch.log_softmax(self.law(ctx), -1)
            scores.append(s)
            tokens.append(int(s.argmax()))
            ctx.append(tokens[-1])
        return DraftProposal(
            tokens=torch.tensor(tokens, dtype=torch.long),
            tree_logprobs=torch.stack(scores) if scores else None,
        )


class _Branch(Exception):
    def __init__(self, probs: torch.Tensor):
        super().__init__("new draw")
        self.probs = probs


class ScriptedSampler:
    """Returns the scripted tokens in order (tracking their probability), then raises at the next draw."""

    def __init__(self, script: tuple[int, ...]):
        self.script, self.position, self.mass = script, 0, 1.0

    def __call__(self, probs: torch.Tensor, generator) -> torch.Tensor:
        law = probs.double()
        law = law / law.sum()  # what specdec.verify.sample draws from
        if self.position == len(self.script):
            raise _Branch(law)
        token = self.script[self.position]
        self.position += 1
        self.mass *= float(law[token])
        return torch.tensor(token)


def enumerate_propose(drafter, context: torch.Tensor, max_tokens: int, sampling):
    """Every ``(proposal, drafter after the call, probability)`` of one ``propose`` call."""
    out, stack = [], [()]
    while stack:
        script = stack.pop()
        branch = copy.deepcopy(drafter)
        sampler = ScriptedSampler(script)
        branch.sampler = sampler
        try:
            proposal = branch.propose(context, max_tokens, sampling=sampling, generator=None)
        except _Branch as new_draw:
            stack.extend(script + (t,) for t, p in enumerate(new_draw.probs.tolist()) if p > 0)
            continue
        out.append((proposal, branch, sampler.mass))
    return out


def _entry_key(entry):
    if entry is None:
        return None
    p = entry.proposal
    probs = None if p.draft_probs is None else p.draft_probs.double().numpy().tobytes()
    return (tuple(p.tokens.tolist()), probs)


def ssd_law(
    drafter,
    target_law: MarkovLaw,
    prompt,
    num_tokens: int,
    num_draft: int,
    sampling,
    *,
    decide=reference_chain_decide,
    verify_first: int | None = None,
):
    """Exact law of the next ``num_tokens`` tokens when ``drafter`` proposes and a chain verifier decides.

    Rounds draft ``min(num_draft, num_tokens - emitted - 1)`` tokens, as :func:`specdec.generate` does; with
    ``verify_first`` only that many are verified and the drafter hears the cut (``verified``), as under the
    engine's verify budget. Also returns how many proposal branches were served from the cache, from the last
    round's unverified drafts ("tail") and by a backup.
    """
    prompt = tuple(prompt)
    drafter.reset()
    frontier = {((), None): ((), drafter, 1.0)}
    done: dict[tuple[int, ...], float] = {}
    served = {"hit": 0, "tail": 0, "backup": 0}
    while frontier:
        nxt: dict = {}
        for seq, state, mass in frontier.values():
            ctx = prompt + seq
            k = max(0, min(num_draft, num_tokens - len(seq) - 1))
            for proposal, after, p_prop in enumerate_propose(state, torch.tensor(ctx), k, sampling):
                tail = after.stats.tail_hits > state.stats.tail_hits
                served["tail" if tail else "hit" if after.stats.hits > state.stats.hits else "backup"] += 1
                tokens, probs = proposal.tokens, proposal.draft_probs
                if verify_first is not None and verify_first < tokens.numel():
                    after.verified(verify_first)
                    tokens, probs = tokens[:verify_first], None if probs is None else probs[:verify_first]
                drafts = tuple(tokens.tolist())
                rows = torch.stack([target_law(ctx + drafts[:i]) for i in range(len(drafts) + 1)])
                for emitted, p in chain_round_law(rows, tokens, probs, sampling=sampling, decide=decide).items():
                    new = (seq + emitted)[:num_tokens]
                    m = mass * p_prop * p
                    if len(new) == num_tokens:
                        done[new] = done.get(new, 0.0) + m
                        continue
                    key = (new, _entry_key(after.peek(torch.tensor(prompt + new), sampling)))
                    if key in nxt:
                        nxt[key] = (new, nxt[key][1], nxt[key][2] + m)
                    else:
                        nxt[key] = (new, after, m)
        frontier = nxt
    return done, served
