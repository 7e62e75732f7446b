"""The exact law of one Engine request's output, by enumerating every branch of its own draws.

:func:`enumerate_request_law` runs a fresh :class:`~specdec.engine.Engine` once per branch of one request's
draws: the request's generator is replaced by a script that replays a prefix of choices, then stops the run
at the first new draw, which becomes a branch point weighted by its probability. Its companions draw from
their own seeded generators, as usual. Every draw site of a chain round is scripted: the engine's first
token, the model drafter's tokens, the chain rule's acceptance uniforms and its residual or bonus token; of a
tree round, the draw at every verify row of :func:`~specdec.verify.walks.sample_and_match`, one branch point
per row in row order (a law of ``[N + 1, V]`` is ``N + 1`` draws). The
chain rule's laws are :func:`specdec.verify.chain.chain_laws` evaluated in float64 on renormalised laws, as
the law harness does (:func:`specdec.testing.laws.exact.reference_chain_decide`): float32 laws would put a
1e-7 rounding floor under the comparison.
"""

from __future__ import annotations

import types

import torch

from specdec.drafters import model as model_drafter_module
from specdec.engine import engine as engine_module
from specdec.verify import chain as chain_module
from specdec.verify import walks as walks_module


class NewDraw(BaseException):
    """A draw past the script: its choices and their probabilities.

    A ``BaseException``, so the engine's per-request error handling does not catch it as a failure.
    """

    def __init__(self, weights: list[float]):
        super().__init__("new draw")
        self.weights = weights


class ScriptedDraws:
    """The draws of the request owning ``generator``: the scripted choices in order, then :class:`NewDraw`."""

    def __init__(self, generator: torch.Generator, script: tuple[int, ...]):
        self.generator, self.script, self.position, self.mass = generator, script, 0, 1.0
        self.pending_accept: list[float] | None = None

    def choose(self, weights: list[float]) -> int:
        if self.position == len(self.script):
            raise NewDraw(weights)
        choice = self.script[self.position]
        self.position += 1
        self.mass *= weights[choice]
        return choice


class _TorchWithScriptedRand(types.ModuleType):
    """``torch`` as the chain module sees it, with the scripted request's acceptance uniforms."""

    def __init__(self, draws_of):
        super().__init__("torch")
        self._draws_of = draws_of

    def __getattr__(self, name):
        return getattr(torch, name)

    def rand(self, *size, generator=None, **kwargs):
        draws = self._draws_of()
        if generator is not draws.generator:
            return torch.rand(*size, generator=generator, **kwargs)
        accept, draws.pending_accept = draws.pending_accept, None
        if accept is None or (len(accept),) != tuple(size):
            raise AssertionError(f"a uniform draw of size {size} that does not follow the chain laws {accept}")
        # branch n: drafts 0..n-1 accepted, draft n rejected (n == k: all accepted)
        weights, reach = [], 1.0
        for a in accept:
            weights.append(reach * (1.0 - a))
            reach *= a
        weights.append(reach)
        n = draws.choose(weights)
        u = torch.zeros(*size, **kwargs)
        if n < len(accept):
            u[n] = accept[n]  # u < a is false: draft n is rejected
        return u


def _normalised(probs: torch.Tensor) -> torch.Tensor:
    probs = probs.double()
    return probs / probs.sum(-1, keepdim=True)


def scripted_engine(monkeypatch, draws_of) -> None:
    """Patch every draw site of a chain or tree round; ``draws_of()`` is the current :class:`ScriptedDraws`."""
    real_sample, real_chain_laws = chain_module.sample, chain_module.chain_laws

    def sample(probs, generator=None):
        draws = draws_of()
        if generator is not draws.generator:
            return real_sample(probs, generator)
        rows = _normalised(probs.reshape(-1, probs.shape[-1]))
        tokens = [draws.choose(row.tolist()) for row in rows]  # one draw per law, in row order
        return torch.tensor(tokens, device=probs.device).reshape(probs.shape[:-1])

    def chain_laws(target_probs, draft_tokens, draft_probs):
        laws = real_chain_laws(_normalised(target_probs), draft_tokens, None if draft_probs is None else _normalised(draft_probs))
        draws_of().pending_accept = laws.accept_probs.tolist()
        return laws

    for module in (chain_module, engine_module, model_drafter_module, walks_module):
        monkeypatch.setattr(module, "sample", sample)
    monkeypatch.setattr(chain_module, "chain_laws", chain_laws)
    monkeypatch.setattr(chain_module, "torch", _TorchWithScriptedRand(draws_of))


def enumerate_request_law(monkeypatch, build_engine, which: int) -> dict[tuple[int, ...], float]:
    """Exact law of request ``which``'s output tokens.

    ``build_engine()`` returns ``(engine, request_ids)`` with every request added; it is called once per
    branch, so it must build the same engine every time (fresh drafters, same seeds).
    """
    current: list[ScriptedDraws] = []
    scripted_engine(monkeypatch, lambda: current[0])
    law: dict[tuple[int, ...], float] = {}
    stack: list[tuple[int, ...]] = [()]
    while stack:
        script = stack.pop()
        engine, ids = build_engine()
        generator = engine.request(ids[which]).generator
        state = generator.get_state()
        current[:] = [ScriptedDraws(generator, script)]
        try:
            outputs = engine.run()
        except NewDraw as new_draw:
            stack.extend(script + (choice,) for choice, p in enumerate(new_draw.weights) if p > 0)
            continue
        draws = current[0]
        if draws.position != len(script) or not torch.equal(generator.get_state(), state):
            raise AssertionError("the request drew outside the scripted draw sites")
        out = tuple(outputs[ids[which]].tolist())
        law[out] = law.get(out, 0.0) + draws.mass
    return law
