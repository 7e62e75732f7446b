"""A cheating explorer for testing a gate: it proposes a verifier that accepts every draft.

Accepting every draft emits more tokens per target pass, so any speedup measurement rewards it, but
the outputs are no longer the target's: a gate must reject it on token forcing.

The module depends on nothing above :mod:`specdec.testing`: the agent edits the spec it is given
through ``spec.with_changes`` and names the verifier by import path, which
:func:`specdec.pilot.build` resolves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from specdec.contracts.plan import VerifyPlan
from specdec.contracts.result import VerifyResult
from specdec.contracts.target import check_target

__all__ = ["ACCEPT_ALL_KIND", "AcceptAllVerifier", "CheatCandidate", "CheatingAgent"]

ACCEPT_ALL_KIND = "specdec.testing.cheating:AcceptAllVerifier"
"""The verifier kind (an import path) of :class:`AcceptAllVerifier` in a spec."""


class AcceptAllVerifier:
    """A verifier that is not one: it accepts every draft token, then takes the target's argmax as the bonus.

    Lossy by construction (for testing gates only).

    Example:
        >>> from specdec.testing import tiny_target
        >>> from specdec.contracts import DraftProposal
        >>> from specdec.verify import SamplingConfig
        >>> target = tiny_target(seed=0)
        >>> _ = target(torch.tensor([[1, 2]])); target.commit(2)
        >>> result = AcceptAllVerifier().verify(target, torch.tensor([3]), DraftProposal(torch.tensor([4, 5])), sampling=SamplingConfig())
        >>> result.num_accepted, result.emitted[:2].tolist(), target.length
        (2, [4, 5], 5)
    """

    def verify(
        self,
        target,
        root: torch.Tensor,
        proposal,
        *,
        sampling=None,
        generator=None,
        hidden_layers: Sequence[int] = (),
        context=None,
        drafter=None,
    ) -> VerifyResult:
        """Accept every draft of ``proposal`` and emit the target's argmax after them (the cheat: lossy).

        Returns a :class:`~specdec.contracts.VerifyResult` with ``emitted [k + 1]`` and ``num_accepted = k``.
        """
        check_target(target)
        drafts = proposal.tokens
        plan = VerifyPlan.chain(root.view(1), drafts, prefix_len=target.length)
        out = target.run_plan(plan, hidden_layers=hidden_layers)
        n = int(drafts.numel())
        bonus = out.logits[0, n].argmax(-1)
        target.commit(n + 1)
        hidden = torch.stack([h[0, : n + 1] for h in out.hidden], dim=1) if hidden_layers else None
        return VerifyResult(emitted=torch.cat([drafts, bonus.view(1)]), num_accepted=n, hidden=hidden)


@dataclass
class CheatCandidate:
    """What :class:`CheatingAgent` returns; the same attributes as :class:`specdec.pilot.agents.Candidate`."""

    direction: str
    spec: Any
    base: Any
    settings: dict[str, Any]
    raw_speedup: float
    description: str = "accept every draft (lossy)"
    agent: str = "cheating"
    trials: list[dict[str, Any]] = field(default_factory=list)


class CheatingAgent:
    """Whatever the direction, propose the current spec with :class:`AcceptAllVerifier` and report its raw speedup.

    Args:
        evaluate: ``evaluate(candidate_spec, base_spec, effort) -> speedup`` (the explorers' own measurement).

    Example:
        >>> from specdec.pilot import SystemSpec
        >>> cand = CheatingAgent(lambda c, b, e: 3.0).explore(None, SystemSpec(), None)
        >>> cand.spec.verifier["kind"] == ACCEPT_ALL_KIND, cand.raw_speedup
        (True, 3.0)
    """

    name = "cheating"

    def __init__(self, evaluate: Callable[[Any, Any, int], float]):
        if not callable(evaluate):
            raise TypeError(f"evaluate: expected a callable, got {type(evaluate).__name__}")
        self.evaluate = evaluate

    def explore(self, direction, spec, budget) -> CheatCandidate:
        """Propose ``spec`` with the accept-every-draft verifier, whatever ``direction`` asked for."""
        proposed = spec.with_changes(verifier={"kind": ACCEPT_ALL_KIND})
        name = getattr(direction, "name", "accept_all")
        return CheatCandidate(
            direction=name, spec=proposed, base=spec, settings={}, raw_speedup=float(self.evaluate(proposed, spec, 1))
        )
